// decode.c — the decode phase: one token of generation as a phase of the plan, so that
// `ftc generate` runs a graph the compiler planned like any other (schedule, liveness,
// offsets, kernels) and its KV cache is bytes of the arena a dump shows.
//
// The phase is the forward once more (its compute nodes, as the eval pass copies them),
// for one sequence of one token: the tokens input becomes `decode_token` i32 [1, 1], the
// position ids `decode_pos` i32 [1, 1] (the token's place in the sequence), every value
// per token gets [1, 1, ...] for [B, S, ...] (each node's shape rule re-run; a view's shape
// rewritten where it starts with B, S or B·S), and three nodes change:
//   - attention(q, k, v) becomes attention_decode(q, k, v, pos) → o, updating that layer's
//     KV caches, k and v [1, L, Hkv, D] (TK_CACHE): row pos written, rows 0..pos attended;
//   - rope reads decode_pos, and its rope_table covers L positions (rope with position ids
//     is already "rope at an offset": the op table's rope, its table longer than x);
//   - the loss is dropped and the logits kept: the fused linear_cross_entropy becomes the
//     linear it fused (decode_logits [1, 1, V]).
// L is the longest sequence the plan generates (prompt and reply; ftc compile --max-len,
// else the train section's seq). The caches live through the phase (liveness), so the
// phase's other values share bytes with nothing they hold; nothing else runs while a
// sequence is generated, so their rows survive from one run to the next. The phase's
// values die inside it, so it shares the arena with the training step's temporaries and
// adds to the plan only where its peak would pass the step's.
//
// Prefill runs this same step once per prompt token: one graph and one set of kernels
// for the whole generation, at the price of a GEMV a token where a prompt-sized GEMM
// would do; enough to read a fine-tune's replies, and a prefill phase (the forward at S
// writing the caches) can come later beside it.
//
// A forward the step cannot be derived from (attention that is not causal, a view across
// the sequence, a value per sequence) leaves the plan without a decode phase and says why
// in DecodeStats; it runs after eval, like which it copies the forward as the user wrote it
// (remat's copies left out), and before shard, offload, fuse, schedule, liveness and alloc.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct Decode {
    IrGraph *g;
    int *map;                 // forward tensor -> its decode-phase tensor, -1: none
    int64_t max_len;
    DecodeStats *st;
} Decode;

// Gives up on the phase: the reason kept; -1.
static int skip(Decode *d, const IrNode *n, const char *why) {
    snprintf(d->st->why, sizeof d->st->why, "%s%s%s", why, n ? " at " : "",
             n ? op_desc(n->op)->name : "");
    d->st->line = n ? n->loc.line : 0;
    return -1;
}

// Appends node `op` of n's attributes, block and place on `in` in the decode phase; its
// outputs mapped from n's. Its id, or -1 when the shape rule refuses the inputs.
static int add(Decode *d, const IrNode *n, OpKind op, int nin, const int *in, OpAttr attr) {
    IrGraph *g = d->g;
    IrShapeErr err;
    const char *name = arena_printf(g->arena, "decode.%s", g->tensors.at[n->out[0]].name);
    int id = ir_node_add(g, op, nin, in, attr, name, n->layer, n->loc, &err);
    if (id < 0)
        return skip(d, n, "its shapes do not hold for one token");
    IrNode *e = &g->nodes.at[id];
    e->phase = PHASE_DECODING;
    for (int k = 0; k < IR_MAX_OUTPUTS && e->out[k] >= 0; k++) {
        g->tensors.at[e->out[k]].requires_grad = false;
        if (n->out[k] >= 0)
            d->map[n->out[k]] = e->out[k];
    }
    d->st->nodes++;
    return id;
}

// A view's shape for one token: its dims with the leading [B, S] (or [B·S]) made [1, 1]
// (or [1]); unchanged when its input is not a value per token. False when neither fits.
static bool view_shape(const Decode *d, const IrNode *n, OpAttr *a) {
    const IrGraph *g = d->g;
    const IrTensor *x = &g->tensors.at[n->in[0]], *y = &g->tensors.at[d->map[n->in[0]]];
    if (ir_same_shape(x, y))
        return true;
    int64_t B = g->batch, S = g->seq, keep = ir_tensor_elems(y);
    if (a->ndim >= 2 && a->shape[0] == B && a->shape[1] == S)
        a->shape[0] = a->shape[1] = 1;
    else if (a->ndim >= 1 && a->shape[0] == B * S)
        a->shape[0] = 1;
    else
        return false;
    int64_t e = 1;
    for (int k = 0; k < a->ndim; k++)
        e *= a->shape[k];
    return e == keep;
}

// attention(q, k, v) at one token: its layer's caches, then attention_decode over them.
static int attention(Decode *d, const IrNode *n, const int *in) {
    IrGraph *g = d->g;
    if (!n->attr.causal)
        return skip(d, n, "attention that is not causal has no decode step");
    const IrTensor *k = &g->tensors.at[in[1]];   // (read before ir_tensor_add moves the list)
    int64_t shape[4] = {1, d->max_len, k->shape[2], k->shape[3]};
    DType dtype = k->dtype;
    int cache[2];
    for (int c = 0; c < 2; c++) {
        const char *name = arena_printf(g->arena, "%s.cache", g->tensors.at[n->in[1 + c]].name);
        cache[c] = ir_tensor_add(g, name, TK_CACHE, dtype, 4, shape, n->loc);
        IrTensor *t = ir_tensor(g, cache[c]);
        t->cat = MEM_KV_CACHE;
        t->layer = n->layer;
        d->st->cache_bytes += ir_tensor_bytes(t);
    }
    int qkvp[4] = {in[0], in[1], in[2], g->decode_pos};
    OpAttr a = n->attr;
    int id = add(d, n, OP_ATTENTION_DECODE, 4, qkvp, a);
    if (id < 0)
        return -1;
    IrNode *e = &g->nodes.at[id];
    e->out[1] = cache[0], e->out[2] = cache[1];
    e->update = 6;   // (each cache read and written: its rows so far and the new one)
    return 0;
}

// The decode step of forward node n, its inputs mapped to `in`; -1 when there is none.
static int redo(Decode *d, const IrNode *n, int *in) {
    IrGraph *g = d->g;
    OpAttr a = n->attr;
    switch (n->op) {
    case OP_DROPOUT:   // the identity, as in eval mode
        d->map[n->out[0]] = in[0];
        return 0;
    case OP_ATTENTION:
        return attention(d, n, in);
    case OP_ROPE_TABLE:   // angles for every position the cache holds
        a.shape[0] = d->max_len;
        return add(d, n, n->op, 0, in, a) < 0 ? -1 : 0;
    case OP_ROPE: {   // at the token's position
        int r[3] = {in[0], g->decode_pos, n->nin > 2 ? in[2] : -1};
        return add(d, n, n->op, n->nin > 2 ? 3 : 2, r, a) < 0 ? -1 : 0;
    }
    case OP_VIEW:
        if (!view_shape(d, n, &a))
            return skip(d, n, "a view across the sequence has no decode step");
        return add(d, n, n->op, n->nin, in, a) < 0 ? -1 : 0;
    default:
        return add(d, n, n->op, n->nin, in, a) < 0 ? -1 : 0;
    }
}

// The loss's nodes: their logits kept (the fused loss's projection made again), the rest
// dropped. True when n is one.
static bool loss_node(Decode *d, const IrNode *n, const int *in, int *status) {
    IrGraph *g = d->g;
    *status = 0;
    if (n->op == OP_CROSS_ENTROPY || n->op == OP_LOGPROBS) {
        g->decode_logits = in[0];
        return true;
    }
    if (n->op == OP_PREFERENCE)
        return true;
    if (n->op != OP_LINEAR_CE && n->op != OP_LINEAR_CE_GRAD && n->op != OP_LINEAR_LOGPROBS)
        return false;
    int xw[2] = {in[0], in[1]};
    int id = add(d, n, OP_LINEAR, 2, xw, (OpAttr){0});
    if (id < 0)
        *status = -1;
    else
        g->decode_logits = g->nodes.at[id].out[0];
    if (id >= 0)
        g->tensors.at[g->decode_logits].name = "decode.logits";
    return true;
}

// The forward's inputs: its tokens and position ids become the phase's own; parameters and
// their quantisation data are read as they are; the loss's targets have no counterpart.
static void map_inputs(Decode *d) {
    IrGraph *g = d->g;
    int64_t one[2] = {1, 1};
    SrcLoc none = {0};
    g->decode_token = ir_tensor_add(g, "decode_token", TK_INPUT, DT_I32, 2, one, none);
    g->decode_pos = ir_tensor_add(g, "decode_pos", TK_INPUT, DT_I32, 2, one, none);
    for (int t = 0; t < g->tensors.len; t++) {
        const IrTensor *x = &g->tensors.at[t];
        d->map[t] = x->kind == TK_PARAM || x->kind == TK_QUANT ? t : -1;
        if (x->kind != TK_INPUT || t == g->decode_token || t == g->decode_pos)
            continue;
        if (!strcmp(x->name, "positions"))
            d->map[t] = g->decode_pos;
        else if (strcmp(x->name, "targets") && strcmp(x->name, "target_count"))
            d->map[t] = g->decode_token;   // (the forward's tokens, whatever the .ft calls them)
    }
}

// Walks the forward; -1 when some node has no decode step (said in d->st).
static int build(Decode *d, int nforward) {
    IrGraph *g = d->g;
    for (int i = 0; i < nforward; i++) {
        IrNode n = g->nodes.at[i];   // (adding nodes may move the list)
        if (n.stream != STREAM_COMPUTE || op_desc(n.op)->cls == OPC_COPY || n.reference)
            continue;   // (a preference loss's reference model is no part of a reply)
        int in[IR_MAX_INPUTS], status;
        bool missing = false;
        for (int k = 0; k < n.nin; k++) {
            in[k] = n.in[k] < 0 ? -1 : d->map[n.in[k]];
            missing |= n.in[k] >= 0 && in[k] < 0;
        }
        if (loss_node(d, &n, in, &status)) {
            if (status != 0)
                return -1;
            continue;
        }
        if (missing)
            return skip(d, &n, "a value the token alone does not give is read");
        if (redo(d, &n, in) != 0)
            return -1;
    }
    if (g->decode_logits < 0)
        return skip(d, NULL, "the forward has no loss to take the logits from");
    return 0;
}

int decode_apply(IrGraph *g, int64_t max_len, DecodeStats *st) {
    memset(st, 0, sizeof *st);
    if (g->loss < 0 || max_len < 1)
        return 0;
    int nt = g->tensors.len, nn = g->nodes.len, nforward = 0;
    while (nforward < nn && g->nodes.at[nforward].phase == PHASE_FORWARD)
        nforward++;
    Decode d = {.g = g, .map = xmalloc(sizeof(int) * (size_t)(nt + 3)), .max_len = max_len, .st = st};
    map_inputs(&d);
    if (build(&d, nforward) != 0) {   // none: the graph as it was
        g->nodes.len = nn, g->tensors.len = nt;
        g->decode_token = g->decode_pos = g->decode_logits = -1;
        st->nodes = 0, st->cache_bytes = 0;
    } else {
        st->max_len = max_len;
    }
    free(d.map);
    return 0;
}
