// schedule.c — the execution order of the training step: within each phase, a
// memory-aware topological order. A list scheduler repeatedly runs, among the nodes
// whose inputs are ready, the one that frees the most bytes net of what it allocates
// (ties: the order autodiff emitted), so gradients of activations are consumed as soon
// as they exist and a parameter's gradient contribution runs as soon as its inputs do.
// The greedy order is kept only when its peak is lower than the emitted order's.
// Writers of one tensor (+= into a gradient) keep their relative order, so every sum is
// formed in the same order whatever the schedule: results stay bitwise identical; and
// a writer stays after the readers before it (a weight's update inside backward).
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct Sched {
    IrGraph *g;
    int n;                  // nodes
    const int *base;        // per tensor: its base (ir_tensor_base), once
    const int64_t *bytes;   // per tensor: its bytes if transient, else 0
    int *indeg;             // unscheduled predecessors
    int *succ_start, *succ; // successors (CSR)
    int *readers;           // per base tensor: readers not yet scheduled
    int *rd_start, *rd_list;    // per base tensor: the nodes reading it (CSR)
    int64_t *score;             // per ready node: its score, kept current
    int *ready_at;              // per node: 1 while it is ready, else -1
} Sched;

// Device bytes the schedule can free: values of the device arena (host staging does not count).
static bool transient(const IrTensor *t) { return t->kind == TK_VALUE && t->alias_of < 0 && t->arena == 0; }

// Whether input k of node n reads a tensor (by base) that an earlier input already reads:
// a node reading one tensor twice counts as one reader.
static bool repeated(const int *base, const IrNode *n, int k) {
    int b = base[n->in[k]];
    for (int j = 0; j < k; j++)
        if (n->in[j] >= 0 && base[n->in[j]] == b)
            return true;
    return false;
}

// The peak of transient bytes over an order (node indices into g->nodes).
static int64_t order_peak(const IrGraph *g, const int *base, const int64_t *bytes, const int *order, int n) {
    int nt = g->tensors.len;
    int *last = xmalloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++)
        last[i] = -1;
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[order[i]];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                last[base[nd->in[k]]] = i;
        for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
            int b = base[nd->out[k]];
            if (last[b] < i)
                last[b] = i;
        }
    }
    int64_t live = 0, peak = 0;
    int64_t *freed = xcalloc((size_t)n + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[order[i]];
        for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
            int t = nd->out[k];
            if (!((nd->update >> k) & 1) && bytes[t]) {
                live += bytes[t];
                freed[last[t]] += bytes[t];
            }
        }
        if (live > peak)
            peak = live;
        live -= freed[i];
    }
    free(last), free(freed);
    return peak;
}

// The bytes running node i would free (inputs whose last reader it is) minus the
// bytes of the new tensors it makes.
static int64_t score_of(const Sched *s, int i) {
    const IrNode *nd = &s->g->nodes.at[i];
    int64_t score = 0;
    for (int k = 0; k < nd->nin; k++) {
        if (nd->in[k] < 0)
            continue;
        int b = s->base[nd->in[k]];
        if (s->bytes[b] && s->readers[b] == 1 && !repeated(s->base, nd, k))
            score += s->bytes[b];
    }
    for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++)
        if (!((nd->update >> k) & 1))
            score -= s->bytes[nd->out[k]];
    return score;
}

// The ready nodes, best first: the highest score, then the earliest node; a re-run of a
// forward node (remat) only when nothing else is ready, the earliest first. A re-run
// frees nothing (what it reads is kept) and makes a copy, so by score alone the small
// re-runs of an early block would run as soon as backward starts and hold their copies
// through every later block's backward; last, they run just before their readers, in
// the order remat put them, at their first reader. A node whose score changes is pushed
// again; the entries it leaves behind are stale (their score is no longer the node's, or
// the node has run) and are skipped when they surface.
typedef struct Entry {
    int64_t score;
    int node;
    bool rerun;
} Entry;

typedef struct Heap {
    Entry *at;
    int len, cap;
} Heap;

static bool better(Entry a, Entry b) {
    if (a.rerun != b.rerun)
        return b.rerun;
    if (a.rerun)
        return a.node < b.node;
    return a.score > b.score || (a.score == b.score && a.node < b.node);
}

static void heap_push(Heap *h, Entry e) {
    if (h->len == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 256;
        h->at = xrealloc(h->at, sizeof(Entry) * (size_t)h->cap);
    }
    int i = h->len++;
    while (i > 0 && better(e, h->at[(i - 1) / 2])) {
        h->at[i] = h->at[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->at[i] = e;
}

static Entry heap_pop(Heap *h) {
    Entry top = h->at[0], last = h->at[--h->len];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && better(h->at[c + 1], h->at[c]))
            c++;
        if (!better(h->at[c], last))
            break;
        h->at[i] = h->at[c];
        i = c;
    }
    if (h->len > 0)
        h->at[i] = last;
    return top;
}

// Greedy order of the nodes [lo, hi) of one phase into order[]. A ready node's score
// changes only when one of its inputs is down to its last reader, so scores are kept
// and refreshed for exactly those nodes.
static void greedy(Sched *s, int lo, int hi, int *order) {
    IrGraph *g = s->g;
    Heap heap = {0};
    int m = 0;
    for (int i = lo; i < hi; i++)
        if (!s->indeg[i]) {
            s->ready_at[i] = 1;
            s->score[i] = score_of(s, i);
            heap_push(&heap, (Entry){s->score[i], i, g->nodes.at[i].recompute});
        }
    while (m < hi - lo) {
        IR_ASSERT(heap.len > 0);   // a phase's nodes form a DAG
        Entry e = heap_pop(&heap);
        int node = e.node;
        if (s->ready_at[node] < 0 || s->score[node] != e.score)
            continue;   // stale
        s->ready_at[node] = -1;
        order[m++] = node;
        const IrNode *nd = &g->nodes.at[node];
        for (int k = 0; k < nd->nin; k++) {
            if (nd->in[k] < 0 || repeated(s->base, nd, k))
                continue;
            int b = s->base[nd->in[k]];
            if (--s->readers[b] != 1)
                continue;
            for (int j = s->rd_start[b]; j < s->rd_start[b + 1]; j++) {   // its last reader
                int r = s->rd_list[j];
                if (s->ready_at[r] < 0)
                    continue;
                int64_t was = s->score[r];
                s->score[r] = score_of(s, r);
                if (s->score[r] != was)
                    heap_push(&heap, (Entry){s->score[r], r, g->nodes.at[r].recompute});
            }
        }
        for (int k = s->succ_start[node]; k < s->succ_start[node + 1]; k++) {
            int t = s->succ[k];
            if (--s->indeg[t] == 0 && t >= lo && t < hi) {
                s->ready_at[t] = 1;
                s->score[t] = score_of(s, t);
                heap_push(&heap, (Entry){s->score[t], t, g->nodes.at[t].recompute});
            }
        }
    }
    free(heap.at);
}

// Whether node i is a streamed weight's copy, which runs where offload put it, a block
// ahead of its readers: it comes before the node that follows it (else the greedy order,
// which it only adds bytes to, would run it at its first reader, and the link would not
// overlap).
static bool pinned_copy(const IrGraph *g, int i) {
    const IrNode *nd = &g->nodes.at[i];
    return nd->op == OP_COPY && nd->stream == STREAM_H2D && i + 1 < g->nodes.len &&
           g->nodes.at[i + 1].phase == nd->phase &&
           (g->tensors.at[nd->in[0]].kind == TK_PARAM || g->tensors.at[nd->in[0]].kind == TK_QUANT);
}

// Node i's predecessors so far are pred[start .. *npred): adds p unless it is one of them.
static void add_pred(int **pred, int *cap, int *npred, int start, int p) {
    for (int c = start; c < *npred; c++)
        if ((*pred)[c] == p)
            return;
    if (*npred == *cap)
        *pred = xrealloc(*pred, sizeof(int) * (size_t)(*cap *= 2));
    (*pred)[(*npred)++] = p;
}

// The dependences, as successor lists (CSR) and in-degrees: a node follows the last
// writer of each tensor it reads or writes (by base: views read their base's bytes, and
// read-modify-writes of one tensor keep their order), a node writing a tensor follows
// every node that read it since its last writer (an update of a weight after backward's
// readers of it: early_update.c), and a pinned copy's next node follows it. Each edge once.
static void edges(Sched *s) {
    const IrGraph *g = s->g;
    int n = s->n, nt = g->tensors.len;
    int *writer = xmalloc(sizeof(int) * (size_t)(nt + 1));   // last node writing each base
    int *rd = xmalloc(sizeof(int) * (size_t)(nt + 1));       // its readers since, a list through
    int rcap = 4 * n + 16, nr = 0;                          // rnode[]/rnext[]
    int *rnode = xmalloc(sizeof(int) * (size_t)rcap), *rnext = xmalloc(sizeof(int) * (size_t)rcap);
    for (int i = 0; i < nt; i++)
        writer[i] = rd[i] = -1;
    int *pred_start = xmalloc(sizeof(int) * (size_t)(n + 1)), npred = 0, cap = 4 * n + 16;
    int *pred = xmalloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        pred_start[i] = npred;
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0 && writer[s->base[nd->in[k]]] >= 0)
                add_pred(&pred, &cap, &npred, pred_start[i], writer[s->base[nd->in[k]]]);
        for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
            int b = s->base[nd->out[k]];
            if (writer[b] >= 0)
                add_pred(&pred, &cap, &npred, pred_start[i], writer[b]);
            for (int r = rd[b]; r >= 0; r = rnext[r])
                if (rnode[r] != i)
                    add_pred(&pred, &cap, &npred, pred_start[i], rnode[r]);
            writer[b] = i, rd[b] = -1;
        }
        for (int k = 0; k < nd->nin; k++) {
            int b = nd->in[k] >= 0 ? s->base[nd->in[k]] : -1;
            if (b < 0 || writer[b] == i || (rd[b] >= 0 && rnode[rd[b]] == i))
                continue;
            if (nr == rcap) {
                rnode = xrealloc(rnode, sizeof(int) * (size_t)(rcap *= 2));
                rnext = xrealloc(rnext, sizeof(int) * (size_t)rcap);
            }
            rnode[nr] = i, rnext[nr] = rd[b], rd[b] = nr++;
        }
        if (i > 0 && pinned_copy(g, i - 1))
            add_pred(&pred, &cap, &npred, pred_start[i], i - 1);
        s->indeg[i] = npred - pred_start[i];
    }
    pred_start[n] = npred;
    s->succ_start = xcalloc((size_t)n + 2, sizeof(int));
    for (int c = 0; c < npred; c++)
        s->succ_start[pred[c] + 2]++;
    for (int i = 0; i < n; i++)
        s->succ_start[i + 2] += s->succ_start[i + 1];
    s->succ = xmalloc(sizeof(int) * (size_t)(npred + 1));
    for (int i = 0; i < n; i++)
        for (int c = pred_start[i]; c < pred_start[i + 1]; c++)
            s->succ[s->succ_start[pred[c] + 1]++] = i;
    free(writer), free(rd), free(rnode), free(rnext), free(pred_start), free(pred);
}

int schedule_apply(IrGraph *g, ScheduleStats *st) {
    int n = g->nodes.len, nt = g->tensors.len;
    int *base = xmalloc(sizeof(int) * (size_t)(nt + 1));
    int64_t *bytes = xmalloc(sizeof(int64_t) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++) {
        const IrTensor *t = &g->tensors.at[i];
        base[i] = ir_tensor_base(g, i);
        bytes[i] = transient(t) ? ir_tensor_bytes(t) : 0;
    }
    Sched s = {.g = g, .n = n, .base = base, .bytes = bytes};
    s.indeg = xcalloc((size_t)n + 1, sizeof(int));
    edges(&s);
    // Who reads each base tensor (CSR), for refreshing scores.
    s.readers = xcalloc((size_t)nt + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0 && !repeated(base, nd, k))
                s.readers[base[nd->in[k]]]++;
    }
    s.rd_start = xcalloc((size_t)nt + 2, sizeof(int));
    for (int i = 0; i < nt; i++)
        s.rd_start[i + 1] = s.rd_start[i] + s.readers[i];
    s.rd_list = xmalloc(sizeof(int) * (size_t)(s.rd_start[nt] + 1));
    int *fill = xcalloc((size_t)nt + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0 && !repeated(base, nd, k)) {
                int b = base[nd->in[k]];
                s.rd_list[s.rd_start[b] + fill[b]++] = i;
            }
    }
    free(fill);
    s.score = xcalloc((size_t)n + 1, sizeof(int64_t));
    s.ready_at = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        s.ready_at[i] = -1;
    int *order = xcalloc((size_t)n + 1, sizeof(int)), *emitted = xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        emitted[i] = i;
    int lo = 0;
    while (lo < n) {
        int hi = lo;
        while (hi < n && g->nodes.at[hi].phase == g->nodes.at[lo].phase)
            hi++;
        if (g->nodes.at[lo].phase == PHASE_OPTIMIZER)
            for (int i = lo; i < hi; i++) {   // kept as made; what comes after waits for it
                order[i] = i;
                for (int k = s.succ_start[i]; k < s.succ_start[i + 1]; k++)
                    s.indeg[s.succ[k]]--;
            }
        else
            greedy(&s, lo, hi, order + lo);
        lo = hi;
    }
    int64_t before = order_peak(g, base, bytes, emitted, n), after = order_peak(g, base, bytes, order, n);
    st->peak_emitted = before;
    st->peak_greedy = after;
    st->greedy = after < before;
    if (st->greedy) {
        // Permute the nodes; producers follow.
        IrNode *old = xmalloc(sizeof(IrNode) * (size_t)n);
        memcpy(old, g->nodes.at, sizeof(IrNode) * (size_t)n);
        for (int i = 0; i < n; i++) {
            g->nodes.at[i] = old[order[i]];
            g->nodes.at[i].id = i;
            ir_claim_outputs(g, &g->nodes.at[i]);
        }
        free(old);
    }
    free(s.indeg), free(s.succ_start), free(s.succ), free(s.readers);
    free(s.rd_start), free(s.rd_list), free(s.score), free(s.ready_at);
    free(base), free(bytes), free(order), free(emitted);
    return 0;
}
