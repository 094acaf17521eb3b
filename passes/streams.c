// streams.c — events between streams. Nodes run on four streams (compute, d2h, h2d,
// host: ops.h); within one, plan order holds, across them only events order work. This
// pass walks each phase in order and, wherever a node touches bytes that a node on
// another stream touched before it (one of the two writing) and nothing orders the two
// yet, makes the earlier node record an event and the later one wait for it. Bytes are
// shared on one tensor (through views and in-place reuse) and across tensors the
// allocator placed on the same bytes one after the other within the phase.
//
// Happens-before is tracked with vector clocks: clock[s] of a node is the position on
// stream s of the latest node of s known to be done when it starts. A wait on the
// latest conflicting node of a stream covers the earlier ones, so a node waits at most
// once per other stream. Phases end with every stream drained (the runtime's rule), so
// nothing is ordered across phases here. The plan verifier checks the result with its
// own replay.
#include "passes.h"
#include "../runtime/overlap.h"

#include <stdlib.h>
#include <string.h>

enum { S = STREAM_COUNT };

typedef struct Hist {
    int write;              // the last node writing the bytes, or -1
    int read[S];            // per stream, the last node reading them since
} Hist;

typedef struct Sync {
    IrGraph *g;
    int *root;              // per tensor: the tensor owning its bytes
    int *pos;               // per node: its position on its stream
    int *clock;             // per node: S positions
    Hist *hist;             // per root tensor
    int *need;              // S: per stream, the latest node the current one must follow
    int *first, *last;      // per root: the first and last node touching its bytes (-1: none)
    bool *cross;            // per root: a stream other than compute touches its bytes
    int *npred, *pred;      // per root: the roots its bytes succeed (CSR: byte_preds)
    int *ids;               // the tensors the current node (or bucket) touches ...
    bool *wr;               // ... and whether it writes each
    StreamStats *st;
} Sync;

static bool persistent(const IrTensor *t) {
    return t->kind == TK_PARAM || t->kind == TK_GRAD || t->kind == TK_STATE || t->kind == TK_QUANT;
}

// Whether node i is done before node j starts (i earlier in the phase).
static bool before(const Sync *y, int i, int j) {
    const IrNode *a = &y->g->nodes.at[i], *b = &y->g->nodes.at[j];
    if (a->stream == b->stream)
        return i <= j;
    return y->clock[(size_t)j * S + a->stream] >= y->pos[i];
}

static void must_follow(Sync *y, int i, int j) {
    if (i < 0 || before(y, i, j))
        return;
    int s = y->g->nodes.at[i].stream;
    if (y->need[s] < i)
        y->need[s] = i;
}

// Conflicts of node j with what touched root `rt` before it.
static void conflicts(Sync *y, int j, int rt, bool write) {
    const Hist *h = &y->hist[rt];
    must_follow(y, h->write, j);
    if (write)
        for (int s = 0; s < S; s++)
            must_follow(y, h->read[s], j);
}

static void record_touch(Sync *y, int j, int rt, bool write) {
    Hist *h = &y->hist[rt];
    if (write) {
        h->write = j;
        for (int s = 0; s < S; s++)
            h->read[s] = -1;
    } else {
        h->read[y->g->nodes.at[j].stream] = j;
    }
}

// The tensor ids node n touches: inputs, then updated outputs (read), then outputs
// and its workspace (written). Returns the count; write[k] says which.
static int touches(const IrNode *n, int *ids, bool *write) {
    int m = 0;
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] >= 0)
            ids[m] = n->in[k], write[m++] = false;
    for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
        if ((n->update >> k) & 1)
            ids[m] = n->out[k], write[m++] = false;
    for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
        ids[m] = n->out[k], write[m++] = true;
    if (n->ws >= 0)
        ids[m] = n->ws, write[m++] = true;
    return m;
}

// A root born on bytes another held last, which died before it in the same phase, one
// of the two off the compute stream.
typedef struct Succ {
    const IrGraph *g;
    const int *first, *last;
    const bool *cross;
    struct {
        int early, late;
    } *pair;
    int n, cap;
} Succ;

static void successor(int e, int l, void *ctx) {
    Succ *c = ctx;
    if (!c->cross[e] && !c->cross[l])   // both on the compute stream: plan order holds
        return;
    if (c->last[e] >= c->first[l] || c->g->nodes.at[c->last[e]].phase != c->g->nodes.at[c->first[l]].phase)
        return;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->pair = xrealloc(c->pair, sizeof *c->pair * (size_t)c->cap);
    }
    c->pair[c->n].early = e, c->pair[c->n].late = l;
    c->n++;
}

// Per root: the span of nodes touching its bytes (first, last), and whether a stream
// other than compute touches them (cross). Every node's waits and event cleared.
static void spans(Sync *y) {
    IrGraph *g = y->g;
    int nt = g->tensors.len, n = g->nodes.len;
    for (int i = 0; i < nt; i++)
        y->first[i] = n, y->last[i] = -1;
    for (int j = 0; j < n; j++) {
        IrNode *nd = &g->nodes.at[j];
        nd->nwait = 0;
        nd->record = -1;
        int m = touches(nd, y->ids, y->wr);
        for (int k = 0; k < m; k++) {
            int r = y->root[y->ids[k]];
            y->first[r] = j < y->first[r] ? j : y->first[r];
            y->last[r] = j > y->last[r] ? j : y->last[r];
            y->cross[r] |= nd->stream != STREAM_COMPUTE;
        }
    }
}

// Byte successors: for each root, the roots that held some of its bytes last before it
// was born, dead by then, in the same phase (a succession of holders orders them all:
// each waits for the one before). Pred lists, CSR: root r's in pred[npred[r] .. npred[r + 1]).
static void byte_preds(Sync *y) {
    const IrGraph *g = y->g;
    int nt = g->tensors.len;
    ByteSpan *br = xmalloc(sizeof *br * (size_t)(nt + 1));
    int nbr = 0;
    for (int x = 0; x < nt; x++) {
        const IrTensor *tx = &g->tensors.at[x];
        if (y->root[x] == x && !persistent(tx) && y->last[x] >= 0 && ir_tensor_bytes(tx))
            br[nbr++] = (ByteSpan){x, tx->arena, tx->offset, ir_tensor_bytes(tx), y->first[x]};
    }
    Succ sc = {.g = g, .first = y->first, .last = y->last, .cross = y->cross};
    byte_successions(br, nbr, successor, &sc);
    free(br);
    int *npred = xcalloc((size_t)nt + 2, sizeof(int));
    for (int k = 0; k < sc.n; k++)
        npred[sc.pair[k].late + 1]++;
    for (int i = 0; i < nt; i++)
        npred[i + 1] += npred[i];
    int *pred = xmalloc(sizeof(int) * (size_t)(npred[nt] + 1)), *fill = xmalloc(sizeof(int) * (size_t)(nt + 1));
    memcpy(fill, npred, sizeof(int) * (size_t)nt);
    for (int k = 0; k < sc.n; k++)
        pred[fill[sc.pair[k].late]++] = sc.pair[k].early;
    free(sc.pair), free(fill);
    y->npred = npred, y->pred = pred;
}

// Node j's clock and position on its stream: from the last node of its stream in the
// phase (last_on), of which count[s] ran before it.
static void start_clock(Sync *y, int j, int count[S], int last_on[S]) {
    const IrNode *nd = &y->g->nodes.at[j];
    int *c = &y->clock[(size_t)j * S];
    if (last_on[nd->stream] >= 0)
        memcpy(c, &y->clock[(size_t)last_on[nd->stream] * S], sizeof(int) * S);
    else
        for (int s = 0; s < S; s++)
            c[s] = -1;
    y->pos[j] = count[nd->stream]++;
    c[nd->stream] = y->pos[j];
    last_on[nd->stream] = j;
}

// What nodes j .. end (one call) touch, into y->ids and y->wr, and per stream the latest
// node they conflict with, into y->need. How many touches.
static int needs(Sync *y, int j, int end) {
    for (int s = 0; s < S; s++)
        y->need[s] = -1;
    int m = 0;
    for (int q = j; q < end; q++) {
        int at = m;
        m += touches(&y->g->nodes.at[q], y->ids + m, y->wr + m);
        for (int k = at; k < m; k++) {
            int r = y->root[y->ids[k]];
            conflicts(y, j, r, y->wr[k]);
            if (y->first[r] == q)   // born here: after everything its bytes held before
                for (int p = y->npred[r]; p < y->npred[r + 1]; p++)
                    conflicts(y, j, y->pred[p], true);
        }
    }
    return m;
}

// Node j waits for the latest conflicting node of each stream not yet ordered before it
// (each recording an event); a wait the others already imply is dropped.
static void add_waits(Sync *y, int j) {
    IrGraph *g = y->g;
    IrNode *nd = &g->nodes.at[j];
    int *c = &y->clock[(size_t)j * S];
    int src[S], nsrc = 0;
    for (int s = 0; s < S; s++)
        if (y->need[s] >= 0 && !before(y, y->need[s], j))
            src[nsrc++] = y->need[s];
    for (int a = 0; a < nsrc; a++) {
        bool implied = false;   // by the clock of another source
        for (int b = 0; b < nsrc && !implied; b++) {
            if (b == a || src[b] < 0)
                continue;
            int sa = g->nodes.at[src[a]].stream;
            implied = y->clock[(size_t)src[b] * S + sa] >= y->pos[src[a]];
        }
        if (implied)
            src[a] = -1;
    }
    for (int a = 0; a < nsrc; a++) {
        int i = src[a];
        if (i < 0)
            continue;
        IrNode *from = &g->nodes.at[i];
        if (from->record < 0) {
            from->record = g->events++;
            y->st->events++;
        }
        IR_ASSERT(nd->nwait < IR_MAX_WAITS);
        nd->wait[nd->nwait++] = from->record;
        y->st->waits++;
        for (int t = 0; t < S; t++)
            if (y->clock[(size_t)i * S + t] > c[t])
                c[t] = y->clock[(size_t)i * S + t];
    }
}

// The events and waits of one phase's nodes [lo, hi).
static void sync_phase(Sync *y, int lo, int hi) {
    IrGraph *g = y->g;
    for (int i = 0; i < g->tensors.len; i++) {
        y->hist[i].write = -1;
        for (int s = 0; s < S; s++)
            y->hist[i].read[s] = -1;
    }
    int count[S] = {0}, last_on[S];
    for (int s = 0; s < S; s++)
        last_on[s] = -1;
    for (int j = lo; j < hi; j++) {
        const IrNode *nd = &g->nodes.at[j];
        start_clock(y, j, count, last_on);
        // A bucket of collectives is one call at its first node: that node waits for what
        // every member needs, and stands for each member's touches.
        if (nd->bucket >= 0 && j > lo && g->nodes.at[j - 1].bucket == nd->bucket)
            continue;
        int end = j + 1;
        while (nd->bucket >= 0 && end < hi && g->nodes.at[end].bucket == nd->bucket)
            end++;
        int m = needs(y, j, end);
        add_waits(y, j);
        for (int k = 0; k < m; k++)
            if (!y->wr[k])
                record_touch(y, j, y->root[y->ids[k]], false);
        for (int k = 0; k < m; k++)
            if (y->wr[k])
                record_touch(y, j, y->root[y->ids[k]], true);
    }
}

int streams_apply(IrGraph *g, StreamStats *st) {
    memset(st, 0, sizeof *st);
    int nt = g->tensors.len, n = g->nodes.len;
    Sync y = {.g = g, .st = st};
    y.root = xmalloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++)
        y.root[i] = liveness_root(g, i);
    y.first = xmalloc(sizeof(int) * (size_t)(nt + 1)), y.last = xmalloc(sizeof(int) * (size_t)(nt + 1));
    y.cross = xcalloc((size_t)nt + 1, sizeof(bool));
    enum { TOUCHES = IR_MAX_INPUTS + 2 * IR_MAX_OUTPUTS + 1 };
    y.ids = xmalloc(sizeof(int) * TOUCHES * BUCKET_MAX_COLLECTIVES);   // a node's, or a bucket's
    y.wr = xmalloc(sizeof(bool) * TOUCHES * BUCKET_MAX_COLLECTIVES);
    spans(&y);
    byte_preds(&y);
    y.pos = xmalloc(sizeof(int) * (size_t)(n + 1));
    y.clock = xmalloc(sizeof(int) * S * (size_t)(n + 1));
    y.hist = xmalloc(sizeof(Hist) * (size_t)(nt + 1));
    int need[S];
    y.need = need;
    for (int lo = 0; lo < n;) {
        int hi = lo;
        while (hi < n && g->nodes.at[hi].phase == g->nodes.at[lo].phase)
            hi++;
        sync_phase(&y, lo, hi);
        lo = hi;
    }
    free(y.root), free(y.pos), free(y.clock), free(y.hist);
    free(y.first), free(y.last), free(y.cross), free(y.npred), free(y.pred);
    free(y.ids), free(y.wr);
    return 0;
}
