// op.c — the op table: one row per op, the only place that knows an op's arity,
// shape rule, FLOPs, bytes moved, and what its backward reads.
#include "ir.h"

#include <string.h>

#define T(id) (&g->tensors.at[(id)])
#define IN(k) T(n->in[k])

static int64_t prod(const int64_t *s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++)
        p *= s[i];
    return p;
}

static bool fail(IrShapeErr *err, int arg, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->arg = arg;
    return false;
}

static void same_as(IrTensor *out, const IrTensor *t) {
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
}

static bool is_float(DType t) { return t == DT_F32 || t == DT_BF16 || t == DT_F16; }

// Formats "bf16[2, 16, 64]" into a rotating buffer, so two fit in one message.
static const char *sh(const IrTensor *t) {
    static char buf[4][96];
    static int k;
    k = (k + 1) % 4;
    ir_shape_str(buf[k], sizeof buf[k], t);
    return buf[k];
}

static int64_t elems_out(const IrGraph *g, const IrNode *n) { return ir_tensor_elems(T(n->out)); }

//
// Shape rules.
//

static bool shape_embed(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                        IrShapeErr *err) {
    (void)aux;
    const IrTensor *tab = IN(0), *ids = IN(1);
    if (tab->ndim != 2)
        return fail(err, 0, "embedding table must be 2-D [vocab, dim], got %s", sh(tab));
    if (ids->dtype != DT_I32)
        return fail(err, 1, "embedding indices must be i32, got %s", sh(ids));
    if (ids->ndim + 1 > IR_MAX_DIMS)
        return fail(err, 1, "too many dimensions in %s", sh(ids));
    same_as(out, ids);
    out->dtype = tab->dtype == DT_NF4 ? DT_BF16 : tab->dtype;
    out->shape[out->ndim++] = tab->shape[1];
    return true;
}

static bool shape_linear(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                         IrShapeErr *err) {
    (void)aux;
    const IrTensor *x = IN(0), *w = IN(1);
    if (x->ndim < 1 || !is_float(x->dtype))
        return fail(err, 0, "linear input must be a float tensor, got %s", sh(x));
    if (w->ndim != 2)
        return fail(err, 1, "linear weight must be 2-D [out, in], got %s", sh(w));
    if (w->shape[1] != x->shape[x->ndim - 1])
        return fail(err, 1, "linear: input %s does not match weight %s (last dim %lld vs %lld)",
                    sh(x), sh(w), (long long)x->shape[x->ndim - 1], (long long)w->shape[1]);
    if (n->nin == 3 && n->in[2] >= 0) {
        const IrTensor *b = IN(2);
        if (b->ndim != 1 || b->shape[0] != w->shape[0])
            return fail(err, 2, "linear: bias %s does not match weight %s", sh(b), sh(w));
    }
    same_as(out, x);
    out->shape[x->ndim - 1] = w->shape[0];
    return true;
}

static bool shape_matmul(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                         IrShapeErr *err) {
    (void)aux;
    const IrTensor *a = IN(0), *b = IN(1);
    if (a->ndim < 2 || a->ndim != b->ndim)
        return fail(err, 1, "matmul needs two tensors of equal rank >= 2, got %s and %s",
                    sh(a), sh(b));
    int r = a->ndim;
    for (int i = 0; i < r - 2; i++)
        if (a->shape[i] != b->shape[i])
            return fail(err, 1, "matmul: batch dims differ: %s and %s", sh(a), sh(b));
    if (a->shape[r - 1] != b->shape[r - 2])
        return fail(err, 1, "matmul: inner dims differ: %s and %s", sh(a), sh(b));
    same_as(out, a);
    out->shape[r - 1] = b->shape[r - 1];
    return true;
}

// Binary elementwise: equal shapes, or b's shape a suffix of a's (broadcast).
static bool shape_binary(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                         IrShapeErr *err) {
    (void)aux;
    const IrTensor *a = IN(0), *b = IN(1);
    bool ok = b->ndim <= a->ndim;
    for (int i = 0; ok && i < b->ndim; i++)
        ok = b->shape[b->ndim - 1 - i] == a->shape[a->ndim - 1 - i];
    if (!ok || !is_float(a->dtype) || !is_float(b->dtype))
        return fail(err, 1, "%s: shapes %s and %s do not match", op_info(n->op)->name, sh(a),
                    sh(b));
    same_as(out, a);
    return true;
}

static bool shape_unary(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                        IrShapeErr *err) {
    (void)aux;
    if (!is_float(IN(0)->dtype))
        return fail(err, 0, "%s needs a float tensor, got %s", op_info(n->op)->name, sh(IN(0)));
    same_as(out, IN(0));
    return true;
}

static bool shape_dropout(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                          IrShapeErr *err) {
    if (!shape_unary(g, n, out, aux, err))
        return false;
    if (n->attr.f < 0 || n->attr.f >= 1)
        return fail(err, 0, "dropout probability must be in [0, 1), got %g", n->attr.f);
    if (n->attr.f > 0) {
        same_as(aux, IN(0));
        aux->dtype = DT_U8;
    }
    return true;
}

static bool shape_norm(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                       IrShapeErr *err) {
    const IrTensor *x = IN(0);
    if (x->ndim < 1 || !is_float(x->dtype))
        return fail(err, 0, "%s input must be a float tensor, got %s", op_info(n->op)->name,
                    sh(x));
    int64_t c = x->shape[x->ndim - 1];
    for (int k = 1; k < n->nin; k++) {
        const IrTensor *w = IN(k);
        if (w->ndim != 1 || w->shape[0] != c)
            return fail(err, k, "%s: %s %s does not match input %s", op_info(n->op)->name,
                        k == 1 ? "weight" : "bias", sh(w), sh(x));
    }
    same_as(out, x);
    same_as(aux, x);
    aux->dtype = DT_F32;
    if (n->op == OP_RMSNORM)
        aux->ndim--;                           // rstd per row
    else
        aux->shape[aux->ndim - 1] = 2;         // mean and rstd per row
    return true;
}

static bool shape_rope(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                       IrShapeErr *err) {
    (void)aux;
    const IrTensor *x = IN(0);
    if (x->ndim != 4 || x->shape[3] % 2)
        return fail(err, 0, "rope needs [B, S, heads, head_dim] with an even head_dim, got %s",
                    sh(x));
    same_as(out, x);
    return true;
}

static bool shape_attention(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                            IrShapeErr *err) {
    const IrTensor *q = IN(0), *k = IN(1), *v = IN(2);
    if (q->ndim != 4)
        return fail(err, 0, "attention: q must be [B, S, heads, head_dim], got %s", sh(q));
    for (int i = 1; i <= 2; i++) {
        const IrTensor *t = IN(i);
        if (t->ndim != 4 || t->shape[0] != q->shape[0] || t->shape[1] != q->shape[1] ||
            t->shape[3] != q->shape[3] || t->shape[2] == 0 || q->shape[2] % t->shape[2])
            return fail(err, i, "attention: %s %s does not fit q %s", i == 1 ? "k" : "v", sh(t),
                        sh(q));
    }
    if (k->shape[2] != v->shape[2])
        return fail(err, 2, "attention: k %s and v %s differ in heads", sh(k), sh(v));
    same_as(out, q);
    aux->dtype = DT_F32;
    aux->ndim = 3;
    aux->shape[0] = q->shape[0];
    aux->shape[1] = q->shape[2];
    aux->shape[2] = q->shape[1];
    return true;
}

static bool shape_view(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                       IrShapeErr *err) {
    (void)aux;
    const IrTensor *x = IN(0);
    IrTensor want = {.dtype = x->dtype, .ndim = n->attr.ndim};
    memcpy(want.shape, n->attr.shape, sizeof want.shape);
    if (ir_tensor_elems(&want) != ir_tensor_elems(x))
        return fail(err, 0, "view: cannot view %s as %s (element counts differ)", sh(x),
                    sh(&want));
    same_as(out, &want);
    out->alias_of = ir_tensor_base(g, n->in[0]);
    return true;
}

static bool shape_transpose(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                            IrShapeErr *err) {
    (void)aux;
    const IrTensor *x = IN(0);
    int a = n->attr.perm[0], b = n->attr.perm[1];
    if (a < 0 || b < 0 || a >= x->ndim || b >= x->ndim)
        return fail(err, 0, "transpose: dims %d, %d out of range for %s", a, b, sh(x));
    same_as(out, x);
    out->shape[a] = x->shape[b];
    out->shape[b] = x->shape[a];
    return true;
}

static bool shape_cross_entropy(const IrGraph *g, const IrNode *n, IrTensor *out, IrTensor *aux,
                                IrShapeErr *err) {
    (void)aux;
    const IrTensor *lg = IN(0), *tg = IN(1);
    bool ok = tg->dtype == DT_I32 && lg->ndim == tg->ndim + 1;
    for (int i = 0; ok && i < tg->ndim; i++)
        ok = lg->shape[i] == tg->shape[i];
    if (!ok)
        return fail(err, 1, "cross_entropy: logits %s and targets %s do not match", sh(lg),
                    sh(tg));
    out->dtype = DT_F32;
    out->ndim = 0;
    return true;
}

//
// FLOPs, bytes and scratch.
//

static int64_t flops_zero(const IrGraph *g, const IrNode *n) { (void)g, (void)n; return 0; }
static int64_t flops_elems(const IrGraph *g, const IrNode *n) { return elems_out(g, n); }
static int64_t flops_4elems(const IrGraph *g, const IrNode *n) { return 4 * elems_out(g, n); }
static int64_t flops_8elems(const IrGraph *g, const IrNode *n) { return 8 * elems_out(g, n); }

static int64_t flops_linear(const IrGraph *g, const IrNode *n) {
    const IrTensor *x = IN(0), *w = IN(1);
    int64_t m = prod(x->shape, 0, x->ndim - 1), nn = w->shape[0], k = w->shape[1];
    return 2 * m * nn * k + (n->nin == 3 && n->in[2] >= 0 ? m * nn : 0);
}

static int64_t flops_matmul(const IrGraph *g, const IrNode *n) {
    const IrTensor *a = IN(0), *b = IN(1);
    return 2 * prod(a->shape, 0, a->ndim) * b->shape[b->ndim - 1];
}

// QK^T and PV: 4·B·H·D per (query, key) pair; causal keeps S(S+1)/2 pairs.
static int64_t flops_attention(const IrGraph *g, const IrNode *n) {
    const IrTensor *q = IN(0);
    int64_t b = q->shape[0], s = q->shape[1], h = q->shape[2], d = q->shape[3];
    int64_t pairs = n->attr.causal ? s * (s + 1) / 2 : s * s;
    return 4 * b * h * d * pairs + 5 * b * h * pairs;   // + softmax
}

static int64_t flops_cross_entropy(const IrGraph *g, const IrNode *n) {
    return 4 * ir_tensor_elems(IN(0));
}

static int64_t read_embed(const IrGraph *g, const IrNode *n) {
    const IrTensor *ids = IN(1);
    return ir_tensor_bytes(ids) + dtype_bytes(IN(0)->dtype, ir_tensor_elems(T(n->out)));
}

static int64_t read_view(const IrGraph *g, const IrNode *n) { (void)g, (void)n; return 0; }

// Cross-entropy keeps the fp32 gradient of each row chunk of logits it works on.
static int64_t scratch_cross_entropy(const IrGraph *g, const IrNode *n) {
    const IrTensor *lg = IN(0);
    int64_t v = lg->shape[lg->ndim - 1], rows = ir_tensor_elems(lg) / (v ? v : 1);
    if (n->attr.chunk_rows > 0 && n->attr.chunk_rows < rows)
        rows = n->attr.chunk_rows;
    return dtype_bytes(DT_F32, rows * v);
}

//
// The table.
//

#define I0 NEED_IN0
#define I1 NEED_IN1
#define I2 NEED_IN2
#define O NEED_OUT
#define A NEED_AUX

static const OpInfo ops[OP_COUNT] = {
    [OP_EMBED] = {"embed", 2, 2, false, shape_embed, flops_zero, read_embed, {I1, 0}, NULL, NULL},
    [OP_LINEAR] = {"linear", 2, 3, false, shape_linear, flops_linear, NULL, {I1, I0, 0}, NULL, NULL},
    [OP_MATMUL] = {"matmul", 2, 2, false, shape_matmul, flops_matmul, NULL, {I1, I0}, NULL, NULL},
    [OP_ADD] = {"add", 2, 2, true, shape_binary, flops_elems, NULL, {0, 0}, NULL, NULL},
    [OP_SUB] = {"sub", 2, 2, true, shape_binary, flops_elems, NULL, {0, 0}, NULL, NULL},
    [OP_MUL] = {"mul", 2, 2, true, shape_binary, flops_elems, NULL, {I1, I0}, NULL, NULL},
    [OP_DIV] = {"div", 2, 2, true, shape_binary, flops_elems, NULL, {I1, I0 | I1}, NULL, NULL},
    [OP_SCALE] = {"scale", 1, 1, true, shape_unary, flops_elems, NULL, {0}, NULL, "c"},
    [OP_SILU] = {"silu", 1, 1, true, shape_unary, flops_4elems, NULL, {I0}, NULL, NULL},
    [OP_GELU] = {"gelu", 1, 1, true, shape_unary, flops_8elems, NULL, {I0}, NULL, NULL},
    [OP_EXP] = {"exp", 1, 1, true, shape_unary, flops_elems, NULL, {O}, NULL, NULL},
    [OP_RMSNORM] = {"rmsnorm", 2, 2, false, shape_norm, flops_4elems, NULL,
                    {I0 | I1 | A, I0 | A}, NULL, "eps"},
    [OP_LAYERNORM] = {"layernorm", 3, 3, false, shape_norm, flops_8elems, NULL,
                      {I0 | I1 | A, I0 | A, 0}, NULL, "eps"},
    [OP_ROPE] = {"rope", 1, 1, true, shape_rope, flops_4elems, NULL, {0}, NULL, "theta"},
    [OP_SOFTMAX] = {"softmax", 1, 1, true, shape_unary, flops_4elems, NULL, {O}, NULL, NULL},
    [OP_ATTENTION] = {"attention", 3, 3, false, shape_attention, flops_attention, NULL,
                      {I0 | I1 | I2 | O | A, I0 | I1 | I2 | O | A, I0 | I1 | I2 | O | A}, NULL, "causal"},
    [OP_VIEW] = {"view", 1, 1, false, shape_view, flops_zero, read_view, {0}, NULL, "shape"},
    [OP_TRANSPOSE] = {"transpose", 1, 1, false, shape_transpose, flops_zero, NULL, {0}, NULL, "dims"},
    [OP_DROPOUT] = {"dropout", 1, 1, false, shape_dropout, flops_elems, NULL, {A}, NULL, "p"},
    [OP_CROSS_ENTROPY] = {"cross_entropy", 2, 2, false, shape_cross_entropy, flops_cross_entropy,
                          NULL, {I0 | I1, 0}, scratch_cross_entropy, NULL},
};

const OpInfo *op_info(OpKind op) {
    IR_ASSERT(op >= 0 && op < OP_COUNT);
    return &ops[op];
}

bool op_lookup(const char *name, OpKind *out) {
    for (int i = 0; i < OP_COUNT; i++)
        if (strcmp(ops[i].name, name) == 0) {
            *out = (OpKind)i;
            return true;
        }
    return false;
}

int64_t op_flops(const IrGraph *g, const IrNode *n) { return ops[n->op].flops(g, n); }

int64_t op_bytes_read(const IrGraph *g, const IrNode *n) {
    if (ops[n->op].bytes_read)
        return ops[n->op].bytes_read(g, n);
    int64_t b = 0;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] >= 0)
            b += dtype_bytes(T(n->in[i])->dtype, ir_tensor_elems(T(n->in[i])));
    return b;
}

int64_t op_bytes_written(const IrGraph *g, const IrNode *n) {
    int64_t b = ir_tensor_bytes(T(n->out));
    if (n->aux >= 0)
        b += ir_tensor_bytes(T(n->aux));
    return b;
}
