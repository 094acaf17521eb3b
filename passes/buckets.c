// buckets.c — where the collectives of a data-parallel step run, and in what buckets. The
// comm stream runs them in plan order while compute goes on, so their place in the order is
// their issue time: a reduction is placed right after the last contribution of the last
// gradient of its bucket (DDP's buckets: backward fills them from the last layer back, and
// each one's all-reduce overlaps the backward of the layers before it); a gather of
// parameters (ZeRO-3) one bucket ahead of its first reader, so that the next layer's
// weights arrive while this layer computes (at the price of holding two buckets of
// gathered weights). A bucket is one call (NCCL's grouped collectives, one MPI message):
// fewer, larger calls pay the link's latency fewer times, smaller ones start sooner and
// leave less exposed after the last gradient; the planner chooses the size.
//
// What reads a reduction's result within the phase (a gradient shard's accumulation, its
// copy to the host and the host's sum) moves with it, one bucket later.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct Coll {
    int node;               // index in the phase's nodes
    int ready, need;        // positions in the rest of the order: after its inputs' last
                            // writer; before its output's first reader
    int64_t bytes;
    bool early;             // a gather for readers (placed by need), else placed by ready
} Coll;

static int64_t tensor_bytes(const IrTensor *t) { return dtype_bytes(t->dtype, ir_tensor_elems(t)); }

static int by_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int by_need(const void *a, const void *b) {
    const Coll *x = a, *y = b;
    return x->need != y->need ? (x->need > y->need) - (x->need < y->need) : (x->node > y->node) - (x->node < y->node);
}

static int by_ready(const void *a, const void *b) {
    const Coll *x = a, *y = b;
    return x->ready != y->ready ? (x->ready > y->ready) - (x->ready < y->ready)
                                : (x->node > y->node) - (x->node < y->node);
}

typedef struct Bucket {
    int pos;                // emitted before the rest's node at pos (len: at the end)
    int first, count;       // members: colls[first ..]
} Bucket;

// A bucket's place and index, to sort by place (ties in their order).
typedef struct Due {
    int pos, i;
} Due;

static int by_pos(const void *a, const void *b) {
    const Due *x = a, *y = b;
    return x->pos != y->pos ? (x->pos > y->pos) - (x->pos < y->pos) : (x->i > y->i) - (x->i < y->i);
}

// One phase's nodes [lo, hi) reordered into order[0 .. hi - lo) (indices into g->nodes).
static void phase(IrGraph *g, int lo, int hi, int64_t cap, int *order, int *next_bucket,
                  BucketStats *st) {
    int n = hi - lo, nt = g->tensors.len;
    int *owner = malloc(sizeof(int) * (size_t)(nt + 1));   // per root: the reduction it waits for
    int *mover = malloc(sizeof(int) * (size_t)(n + 1));    // per node: its reduction, or -1
    int *rest = malloc(sizeof(int) * (size_t)(n + 1));
    for (int t = 0; t < nt; t++)
        owner[t] = -1;
    Coll *c = malloc(sizeof *c * (size_t)(n + 1));
    int nc = 0, nrest = 0;
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[lo + i];
        mover[i] = -1;
        bool coll = op_desc(nd->op)->cls == OPC_COLLECTIVE;
        bool gather = coll && nd->op == OP_ALL_GATHER && nd->phase != PHASE_OPTIMIZER;
        if (coll) {
            c[nc] = (Coll){.node = i, .early = gather};
            const IrTensor *t = &g->tensors.at[gather ? nd->out[0] : nd->in[0]];
            c[nc].bytes = tensor_bytes(t);
            nc++;
            if (!gather && nd->phase == PHASE_BACKWARD)
                mover[i] = i;
        } else if (nd->phase == PHASE_BACKWARD) {   // (elsewhere nothing follows a reduction)
            for (int k = 0; k < nd->nin && mover[i] < 0; k++)
                if (nd->in[k] >= 0 && owner[ir_tensor_base(g, nd->in[k])] >= 0)
                    mover[i] = owner[ir_tensor_base(g, nd->in[k])];
        }
        if (mover[i] >= 0)
            for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++)
                owner[ir_tensor_base(g, nd->out[k])] = mover[i];
        if (!coll && mover[i] < 0)
            rest[nrest++] = i;
    }
    // Each collective's window in the rest: after the last node before it writing what it
    // reads (or what it writes in place), before the first node after it reading what it
    // writes or adding into it (the optimizer's sums of squares of gradients kept whole,
    // which come after the sum over the ranks). `at`: the rest's nodes before it.
    int *at = malloc(sizeof(int) * (size_t)(nc + 1));
    for (int k = 0, r = 0, i = 0; i < n; i++) {
        if (k < nc && c[k].node == i)
            at[k++] = r;
        else if (mover[i] < 0)
            r++;
    }
    int *last_write = calloc((size_t)nt + 1, sizeof(int)), *first_read = malloc(sizeof(int) * (size_t)(nt + 1));
    for (int k = 0, r = 0; r <= nrest; r++) {
        for (; k < nc && at[k] == r; k++) {
            const IrNode *cn = &g->nodes.at[lo + c[k].node];
            int in = ir_tensor_base(g, cn->in[0]), out = ir_tensor_base(g, cn->out[0]);
            c[k].ready = last_write[in] > last_write[out] ? last_write[in] : last_write[out];
        }
        const IrNode *nd = r < nrest ? &g->nodes.at[lo + rest[r]] : NULL;
        for (int o = 0; nd && o < IR_MAX_OUTPUTS && nd->out[o] >= 0; o++)
            last_write[ir_tensor_base(g, nd->out[o])] = r + 1;
    }
    for (int t = 0; t < nt; t++)
        first_read[t] = nrest;
    for (int k = nc - 1, r = nrest; r >= 0; r--) {
        const IrNode *nd = r < nrest ? &g->nodes.at[lo + rest[r]] : NULL;
        for (int j = 0; nd && j < nd->nin; j++)
            if (nd->in[j] >= 0)
                first_read[ir_tensor_base(g, nd->in[j])] = r;
        for (int o = 0; nd && o < IR_MAX_OUTPUTS && nd->out[o] >= 0; o++)
            if ((nd->update >> o) & 1u)
                first_read[ir_tensor_base(g, nd->out[o])] = r;
        for (; k >= 0 && at[k] == r; k--) {
            c[k].need = first_read[ir_tensor_base(g, g->nodes.at[lo + c[k].node].out[0])];
            if (c[k].ready > c[k].need)   // (cannot happen for what the shard pass made)
                c[k].ready = c[k].need;
        }
    }
    free(at), free(last_write), free(first_read);
    // What follows each reduction, in order (a list per collective node).
    int *fhead = malloc(sizeof(int) * (size_t)(n + 1)), *ftail = malloc(sizeof(int) * (size_t)(n + 1)),
        *fnext = malloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        fhead[i] = ftail[i] = fnext[i] = -1;
    for (int j = 0; j < n; j++) {
        int o = mover[j];
        if (o < 0 || o == j)
            continue;
        if (ftail[o] < 0)
            fhead[o] = j;
        else
            fnext[ftail[o]] = j;
        ftail[o] = j;
    }
    // Gathers by need, the rest by ready; then buckets of one kind up to cap bytes.
    int ne = 0;
    for (int k = 0; k < nc; k++)
        if (c[k].early) {
            Coll t = c[ne];
            c[ne++] = c[k], c[k] = t;
        }
    qsort(c, (size_t)ne, sizeof *c, by_need);
    qsort(c + ne, (size_t)(nc - ne), sizeof *c, by_ready);
    Bucket *b = malloc(sizeof *b * (size_t)(nc + 1));
    int nb = 0;
    for (int k = 0; k < nc;) {
        const IrNode *a = &g->nodes.at[lo + c[k].node];
        int j = k + 1;
        int64_t bytes = c[k].bytes;
        while (j < nc && j - k < BUCKET_MAX_COLLECTIVES && bytes + c[j].bytes <= cap && c[j].early == c[k].early) {
            const IrNode *m = &g->nodes.at[lo + c[j].node];
            if (m->op != a->op || m->last != a->last)
                break;
            bytes += c[j].bytes;
            j++;
        }
        b[nb++] = (Bucket){.first = k, .count = j - k};
        k = j;
    }
    // Places: a reduction bucket once its last member is ready; a gather bucket before its
    // readers, and one bucket ahead of them (when the one before starts being read).
    int prev_need = -1;
    for (int i = 0; i < nb; i++) {
        Bucket *x = &b[i];
        int ready = 0, need = nrest;
        for (int k = x->first; k < x->first + x->count; k++) {
            ready = c[k].ready > ready ? c[k].ready : ready;
            need = c[k].need < need ? c[k].need : need;
        }
        if (c[x->first].early) {
            x->pos = prev_need >= 0 && prev_need > ready ? prev_need : ready;
            if (x->pos > need)
                x->pos = need;
            prev_need = need;
        } else {
            x->pos = ready;
        }
    }
    // The new order: at each place, the buckets due there (each followed by what reads its
    // results), then the rest's node.
    // What reads a bucket's results waits for the bucket: it runs one bucket later (after the
    // next bucket's collectives, or at the phase's end), so that the reduction overlaps the
    // compute between the two, at the price of a second bucket of whole gradients alive.
    int m = 0, nf = 0, *f = malloc(sizeof(int) * (size_t)(n + 1));
    Due *due = malloc(sizeof *due * (size_t)(nb + 1));
    for (int i = 0; i < nb; i++)
        due[i] = (Due){b[i].pos, i};
    qsort(due, (size_t)nb, sizeof *due, by_pos);
    for (int r = 0, d = 0; r <= nrest; r++) {
        for (; d < nb && due[d].pos == r; d++) {
            int i = due[d].i;
            int id = (*next_bucket)++;
            st->buckets++;
            for (int k = b[i].first; k < b[i].first + b[i].count; k++) {
                g->nodes.at[lo + c[k].node].bucket = id;
                order[m++] = lo + c[k].node;
                st->collectives++;
            }
            int nnew = 0;
            for (int k = b[i].first; k < b[i].first + b[i].count; k++)
                nnew += fhead[c[k].node] >= 0;
            if (!nnew)
                continue;
            for (int j = 0; j < nf; j++)   // the bucket before's, in their order
                order[m++] = lo + f[j];
            nf = 0;
            for (int k = b[i].first; k < b[i].first + b[i].count; k++)
                for (int j = fhead[c[k].node]; j >= 0; j = fnext[j])
                    f[nf++] = j;
            qsort(f, (size_t)nf, sizeof *f, by_int);
        }
        if (r < nrest)
            order[m++] = lo + rest[r];
    }
    for (int j = 0; j < nf; j++)   // the last bucket's, at the end
        order[m++] = lo + f[j];
    IR_ASSERT(m == n);
    free(due), free(f);
    free(owner), free(mover), free(rest), free(c), free(b), free(fhead), free(ftail), free(fnext);
}

int buckets_apply(IrGraph *g, int64_t bucket_bytes, BucketStats *st) {
    memset(st, 0, sizeof *st);
    if (g->ranks <= 1)
        return 0;
    int n = g->nodes.len, next = 0;
    int *order = malloc(sizeof(int) * (size_t)(n + 1));
    for (int lo = 0; lo < n;) {
        int hi = lo;
        while (hi < n && g->nodes.at[hi].phase == g->nodes.at[lo].phase)
            hi++;
        phase(g, lo, hi, bucket_bytes > 0 ? bucket_bytes : 1, order + lo, &next, st);
        lo = hi;
    }
    IrNode *old = malloc(sizeof(IrNode) * (size_t)(n + 1));
    memcpy(old, g->nodes.at, sizeof(IrNode) * (size_t)n);
    for (int i = 0; i < n; i++) {
        g->nodes.at[i] = old[order[i]];
        g->nodes.at[i].id = i;
        ir_claim_outputs(g, &g->nodes.at[i]);
    }
    free(old), free(order);
    return 0;
}
