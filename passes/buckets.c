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

// One phase's nodes [lo, lo + n) of g: its collectives, what moves with each reduction,
// the rest; then the collectives' buckets.
typedef struct Phase {
    IrGraph *g;
    int lo, n;
    int *mover;             // per node: its reduction, or -1
    int *rest;              // the nodes neither collective nor moved, in order ...
    int nrest;              // ... how many
    Coll *c;                // the collectives ...
    int nc;                 // ... how many
    int *fhead, *fnext;     // per reduction: what follows it, in order (a list; -1 ends it)
    Bucket *b;              // the buckets ...
    int nb;                 // ... how many
} Phase;

// The phase's collectives, what moves with each reduction (reads what it wrote, within
// backward) and the rest.
static void split_phase(Phase *p) {
    IrGraph *g = p->g;
    int n = p->n, nt = g->tensors.len, *mover = p->mover;
    int *owner = xmalloc(sizeof(int) * (size_t)(nt + 1));   // per root: the reduction it waits for
    for (int t = 0; t < nt; t++)
        owner[t] = -1;
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[p->lo + i];
        mover[i] = -1;
        bool coll = op_desc(nd->op)->cls == OPC_COLLECTIVE;
        bool gather = coll && nd->op == OP_ALL_GATHER && nd->phase != PHASE_OPTIMIZER;
        if (coll) {
            p->c[p->nc] = (Coll){.node = i, .early = gather};
            const IrTensor *t = &g->tensors.at[gather ? nd->out[0] : nd->in[0]];
            p->c[p->nc].bytes = tensor_bytes(t);
            p->nc++;
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
            p->rest[p->nrest++] = i;
    }
    free(owner);
}

// Each collective's window in the rest: after the last node before it writing what it
// reads (or what it writes in place), before the first node after it reading what it
// writes or adding into it (the optimizer's sums of squares of gradients kept whole,
// which come after the sum over the ranks).
static void windows(Phase *p) {
    IrGraph *g = p->g;
    int n = p->n, nt = g->tensors.len, nc = p->nc, nrest = p->nrest, lo = p->lo;
    Coll *c = p->c;
    int *at = xmalloc(sizeof(int) * (size_t)(nc + 1));   // the rest's nodes before each
    for (int k = 0, r = 0, i = 0; i < n; i++) {
        if (k < nc && c[k].node == i)
            at[k++] = r;
        else if (p->mover[i] < 0)
            r++;
    }
    int *last_write = xcalloc((size_t)nt + 1, sizeof(int)), *first_read = xmalloc(sizeof(int) * (size_t)(nt + 1));
    for (int k = 0, r = 0; r <= nrest; r++) {
        for (; k < nc && at[k] == r; k++) {
            const IrNode *cn = &g->nodes.at[lo + c[k].node];
            int in = ir_tensor_base(g, cn->in[0]), out = ir_tensor_base(g, cn->out[0]);
            c[k].ready = last_write[in] > last_write[out] ? last_write[in] : last_write[out];
        }
        const IrNode *nd = r < nrest ? &g->nodes.at[lo + p->rest[r]] : NULL;
        for (int o = 0; nd && o < IR_MAX_OUTPUTS && nd->out[o] >= 0; o++)
            last_write[ir_tensor_base(g, nd->out[o])] = r + 1;
    }
    for (int t = 0; t < nt; t++)
        first_read[t] = nrest;
    for (int k = nc - 1, r = nrest; r >= 0; r--) {
        const IrNode *nd = r < nrest ? &g->nodes.at[lo + p->rest[r]] : NULL;
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
}

// What follows each reduction, in order (a list per collective node).
static void followers(Phase *p) {
    int n = p->n;
    int *ftail = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        p->fhead[i] = ftail[i] = p->fnext[i] = -1;
    for (int j = 0; j < n; j++) {
        int o = p->mover[j];
        if (o < 0 || o == j)
            continue;
        if (ftail[o] < 0)
            p->fhead[o] = j;
        else
            p->fnext[ftail[o]] = j;
        ftail[o] = j;
    }
    free(ftail);
}

// Gathers by need, the rest by ready; then buckets of one kind (one op, on the last
// micro-step or not) up to cap bytes.
static void make_buckets(Phase *p, int64_t cap) {
    Coll *c = p->c;
    int nc = p->nc, ne = 0;
    for (int k = 0; k < nc; k++)
        if (c[k].early) {
            Coll t = c[ne];
            c[ne++] = c[k], c[k] = t;
        }
    qsort(c, (size_t)ne, sizeof *c, by_need);
    qsort(c + ne, (size_t)(nc - ne), sizeof *c, by_ready);
    for (int k = 0; k < nc;) {
        const IrNode *a = &p->g->nodes.at[p->lo + c[k].node];
        int j = k + 1;
        int64_t bytes = c[k].bytes;
        while (j < nc && j - k < BUCKET_MAX_COLLECTIVES && bytes + c[j].bytes <= cap && c[j].early == c[k].early) {
            const IrNode *m = &p->g->nodes.at[p->lo + c[j].node];
            if (m->op != a->op || m->last != a->last)
                break;
            bytes += c[j].bytes;
            j++;
        }
        p->b[p->nb++] = (Bucket){.first = k, .count = j - k};
        k = j;
    }
}

// Places: a reduction bucket once its last member is ready; a gather bucket before its
// readers, and one bucket ahead of them (when the one before starts being read).
static void place_buckets(Phase *p) {
    const Coll *c = p->c;
    int prev_need = -1;
    for (int i = 0; i < p->nb; i++) {
        Bucket *x = &p->b[i];
        int ready = 0, need = p->nrest;
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
}

// Bucket i's collectives into order at *m, numbered the next bucket; then, where what
// reads its results is not empty, the bucket before's readers (f, nf of them), which give
// way to its own.
static void emit_bucket(Phase *p, int i, int *order, int *m, int *f, int *nf, int *next_bucket, BucketStats *st) {
    const Bucket *b = &p->b[i];
    const Coll *c = p->c;
    int id = (*next_bucket)++;
    st->buckets++;
    for (int k = b->first; k < b->first + b->count; k++) {
        p->g->nodes.at[p->lo + c[k].node].bucket = id;
        order[(*m)++] = p->lo + c[k].node;
        st->collectives++;
    }
    int nnew = 0;
    for (int k = b->first; k < b->first + b->count; k++)
        nnew += p->fhead[c[k].node] >= 0;
    if (!nnew)
        return;
    for (int j = 0; j < *nf; j++)   // the bucket before's, in their order
        order[(*m)++] = p->lo + f[j];
    *nf = 0;
    for (int k = b->first; k < b->first + b->count; k++)
        for (int j = p->fhead[c[k].node]; j >= 0; j = p->fnext[j])
            f[(*nf)++] = j;
    qsort(f, (size_t)*nf, sizeof *f, by_int);
}

// The new order: at each place, the buckets due there (each followed by what reads its
// results), then the rest's node.
// What reads a bucket's results waits for the bucket: it runs one bucket later (after the
// next bucket's collectives, or at the phase's end), so that the reduction overlaps the
// compute between the two, at the price of a second bucket of whole gradients alive.
static void emit_order(Phase *p, int *order, int *next_bucket, BucketStats *st) {
    int m = 0, nf = 0, *f = xmalloc(sizeof(int) * (size_t)(p->n + 1));
    Due *due = xmalloc(sizeof *due * (size_t)(p->nb + 1));
    for (int i = 0; i < p->nb; i++)
        due[i] = (Due){p->b[i].pos, i};
    qsort(due, (size_t)p->nb, sizeof *due, by_pos);
    for (int r = 0, d = 0; r <= p->nrest; r++) {
        for (; d < p->nb && due[d].pos == r; d++)
            emit_bucket(p, due[d].i, order, &m, f, &nf, next_bucket, st);
        if (r < p->nrest)
            order[m++] = p->lo + p->rest[r];
    }
    for (int j = 0; j < nf; j++)   // the last bucket's, at the end
        order[m++] = p->lo + f[j];
    IR_ASSERT(m == p->n);
    free(due), free(f);
}

// One phase's nodes [lo, hi) reordered into order[0 .. hi - lo) (indices into g->nodes).
static void phase(IrGraph *g, int lo, int hi, int64_t cap, int *order, int *next_bucket,
                  BucketStats *st) {
    int n = hi - lo;
    size_t sz = sizeof(int) * (size_t)(n + 1);
    Phase p = {.g = g, .lo = lo, .n = n, .mover = xmalloc(sz), .rest = xmalloc(sz),
               .c = xmalloc(sizeof(Coll) * (size_t)(n + 1)), .fhead = xmalloc(sz), .fnext = xmalloc(sz)};
    split_phase(&p);
    windows(&p);
    followers(&p);
    p.b = xmalloc(sizeof(Bucket) * (size_t)(p.nc + 1));
    make_buckets(&p, cap);
    place_buckets(&p);
    emit_order(&p, order, next_bucket, st);
    free(p.mover), free(p.rest), free(p.c), free(p.b), free(p.fhead), free(p.fnext);
}

int buckets_apply(IrGraph *g, int64_t bucket_bytes, BucketStats *st) {
    memset(st, 0, sizeof *st);
    if (g->ranks <= 1)
        return 0;
    int n = g->nodes.len, next = 0;
    int *order = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int lo = 0; lo < n;) {
        int hi = lo;
        while (hi < n && g->nodes.at[hi].phase == g->nodes.at[lo].phase)
            hi++;
        phase(g, lo, hi, bucket_bytes > 0 ? bucket_bytes : 1, order + lo, &next, st);
        lo = hi;
    }
    IrNode *old = xmalloc(sizeof(IrNode) * (size_t)(n + 1));
    memcpy(old, g->nodes.at, sizeof(IrNode) * (size_t)n);
    for (int i = 0; i < n; i++) {
        g->nodes.at[i] = old[order[i]];
        g->nodes.at[i].id = i;
        ir_claim_outputs(g, &g->nodes.at[i]);
    }
    free(old), free(order);
    return 0;
}
