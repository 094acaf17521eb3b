// op_check.c — the op contract's shape check: what every op's kernels assume of their
// operands, over plain operand views (OpOperand), so that no kernel of any backend touches
// memory outside its buffers. The plan reader (runtime/plan.c) checks each instruction of a
// plan with it as it reads it, however the file was edited; each rule states the dims the
// cpu backend's kernel derives (runtime/cpu/backend.c) and requires the rest to match them.
#include "ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct Check {
    const OpOperand *in, *out;
    int nin, nout;
    int64_t vocab, ranks;
    char *err;
    size_t errlen;
} Check;

static const OpOperand *I(const Check *c, int k) { return k < c->nin && c->in[k].name ? &c->in[k] : NULL; }
static const OpOperand *O(const Check *c, int k) { return k < c->nout ? &c->out[k] : NULL; }
static int64_t E(const OpOperand *b) { return b->elems; }
static int64_t L(const OpOperand *b) { return b->ndim ? b->shape[b->ndim - 1] : 1; }
static int64_t R(const OpOperand *b) { return E(b) / L(b); }
static int64_t D(const OpOperand *b, int k) { return k < 0 ? b->shape[b->ndim + k] : b->shape[k]; }

static int fail(const Check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const Check *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

// Each operand's dtype kind, inputs then outputs: F a float (f32, bf16, f16), I i32,
// U u8, Q nf4, '-' an optional operand (any float, or absent), '*' anything; a shorter
// string leaves the rest as F.
static const char *const kinds[OP_COUNT][2] = {
    [OP_EMBED] = {"FI", "F"},           [OP_CROSS_ENTROPY] = {"FII", "F"},
    [OP_EMBED_BWD] = {"FI", "F"},       [OP_CROSS_ENTROPY_BWD] = {"FII", "F"},
    [OP_DROPOUT] = {"F", "FU"},         [OP_DROPOUT_BWD] = {"FU", "F"},
    [OP_DEQUANT] = {"QF", "F"},         [OP_COPY] = {"*", "*"},
    [OP_VIEW] = {"*", "*"},             [OP_ROPE] = {"FI", "F"},
    [OP_ROPE_BWD] = {"FI", "F"},       [OP_ATTENTION] = {"FFFI", "FF"},
    [OP_ATTENTION_BWD] = {"FFFFFFI", "FFF"},
    [OP_ATTENTION_DECODE] = {"FFFI", "FFF"}, [OP_ALL_GATHER] = {"*", "*"},
    [OP_LINEAR_CE] = {"FFII", "F"},     [OP_LINEAR_CE_GRAD] = {"FFII", "FFF"},
    [OP_ADAMW8BIT] = {"FF", "F*FF"},
    [OP_LOGPROBS] = {"FI", "F"},        [OP_LOGPROBS_BWD] = {"FFI", "F"},
    [OP_PREFERENCE] = {"FII-", "FF"},   [OP_PREFERENCE_BWD] = {"FII-", "F"},
    [OP_LINEAR_LOGPROBS] = {"FFI", "F"}, [OP_LINEAR_LOGPROBS_BWD] = {"FFIF", "FF"},
};

static bool kind_ok(char k, OpDType t) {
    switch (k) {
    case 'I': return t == OPD_I32;
    case 'U': return t == OPD_U8;
    case 'Q': return t == OPD_NF4;
    case '*': return true;
    default: return t == OPD_F32 || t == OPD_BF16 || t == OPD_F16;
    }
}

static int dtypes(const Check *c, OpKind op) {
    for (int side = 0; side < 2; side++) {
        const char *want = kinds[op][side] ? kinds[op][side] : "";
        if (op == OP_DEQUANT && side == 0 && c->nin == 4)   // double quantisation
            want = "QUFF";
        int n = side ? c->nout : c->nin;
        for (int k = 0; k < n; k++) {
            const OpOperand *b = side ? O(c, k) : I(c, k);
            char w = k < (int)strlen(want) ? want[k] : 'F';
            if (b && !kind_ok(w, b->dtype))
                return fail(c, "%s %d (%s) is %s, the op takes %s there", side ? "output" : "input", k,
                            b->name, b->dtype_name,
                            w == 'I' ? "i32" : w == 'U' ? "u8" : w == 'Q' ? "nf4" : "a float dtype");
        }
    }
    return 0;
}

#define NEED(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return fail(c, __VA_ARGS__);                                                           \
    } while (0)
#define SAME(a, b) NEED(E(a) == E(b), "%s has %lld elements, %s %lld", (a)->name, (long long)E(a), \
                        (b)->name, (long long)E(b))
#define OUTS(n) NEED(c->nout >= (n), "it needs %d outputs, has %d", (n), c->nout)
#define ND(b, n) NEED((b)->ndim >= (n), "%s needs at least %d dimensions", (b)->name, (n))

// q [B, S, H, D] against k and v [B, S, Hkv, D], H a multiple of Hkv; lse [B, H, S] (when
// there is one).
static int attention_shapes(const Check *c, const OpOperand *q, const OpOperand *k,
                            const OpOperand *v, const OpOperand *lse, const OpOperand *pos) {
    NEED(q->ndim == 4 && k->ndim == 4 && v->ndim == 4, "q, k and v are [B, S, heads, head_dim]");
    for (int d = 0; d < 4; d++)
        NEED(k->shape[d] == v->shape[d], "k and v differ in shape");
    NEED(D(k, 0) == D(q, 0) && D(k, 1) == D(q, 1) && D(k, 3) == D(q, 3) && D(q, 2) % D(k, 2) == 0,
         "k [%lld, %lld, %lld, %lld] does not go with q [%lld, %lld, %lld, %lld]", (long long)D(k, 0),
         (long long)D(k, 1), (long long)D(k, 2), (long long)D(k, 3), (long long)D(q, 0),
         (long long)D(q, 1), (long long)D(q, 2), (long long)D(q, 3));
    NEED(!lse || E(lse) == D(q, 0) * D(q, 2) * D(q, 1), "%s is not [B, heads, S]", lse ? lse->name : "");
    NEED(!pos || E(pos) == D(q, 0) * D(q, 1), "the position ids %s are not [B, S]", pos ? pos->name : "");
    return 0;
}

// GEMMs and gathers: the dims each backend's product derives from its first operand
// and one dim of its second, the rest required to match.
static int products(const Check *c, OpKind op, const OpAttr *attr) {
    (void)attr;
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_EMBED:   // table [V, C], ids -> [ids..., C]
        NEED(a->ndim == 2 && L(o) == D(a, 1) && E(o) == E(b) * L(o), "%s is not [ids..., %lld] of %s",
             o->name, (long long)D(a, 1), a->name);
        return 0;
    case OP_LINEAR_ACC:   // x [..., K], W [N, K], y [..., N] -> y + scale x W^T
        NEED(b->ndim == 2 && D(b, 1) == L(a), "%s is not [N, %lld]", b->name, (long long)L(a));
        NEED(E(o) == R(a) * D(b, 0), "%s is not [..., %lld]", o->name, (long long)D(b, 0));
        SAME(I(c, 2), o);
        return 0;
    case OP_LINEAR:   // x [..., K], W [N, K], bias [N] -> [..., N]
        NEED(b->ndim == 2 && D(b, 1) == L(a), "%s is not [N, %lld]", b->name, (long long)L(a));
        NEED(!I(c, 2) || E(I(c, 2)) == D(b, 0), "the bias is not [%lld]", (long long)D(b, 0));
        NEED(E(o) == R(a) * D(b, 0), "%s is not [..., %lld]", o->name, (long long)D(b, 0));
        return 0;
    case OP_MATMUL:
    case OP_MATMUL_DA:
    case OP_MATMUL_DB: {
        ND(a, 2);
        ND(b, 2);
        // the product the kernels run (op_gemm), named as the forward's: a [.., m, k] (m the
        // rows of a batch folded in where a 2-D weight is shared), b [.., k, n]
        OpGemm g;
        op_gemm(op, a, b, o, &g);
        bool db = op == OP_MATMUL_DB, shared = (db ? o : b)->ndim == 2 && a->ndim > 2;
        int64_t m = db ? g.K : g.M, k = db ? g.M : g.K, n = g.N;
        NEED(E(a) % (m * k) == 0, "%s is not a batch of matrices", a->name);
        int64_t batch = g.batch;
        int64_t eb = op == OP_MATMUL ? batch * k * n : op == OP_MATMUL_DA ? batch * n * k : batch * m * n;
        int64_t eo = op == OP_MATMUL ? batch * m * n : op == OP_MATMUL_DA ? batch * m * n : batch * k * n;
        NEED(op != OP_MATMUL || D(b, -2) == k, "%s's rows are not %s's columns", b->name, a->name);
        NEED(op != OP_MATMUL_DA || D(b, -1) == k, "%s's columns are not %s's", b->name, a->name);
        NEED(op != OP_MATMUL_DB || (shared ? R(b) : D(b, -2)) == m, "%s's rows are not %s's", b->name,
             a->name);
        NEED(E(b) == eb && E(o) == eo, "the shapes of %s, %s and %s do not make a batched product",
             a->name, b->name, o->name);
        return 0;
    }
    case OP_EMBED_BWD:   // dy [..., C], ids [rows] -> dtable [V, C]
        NEED(E(b) == R(a) && o->ndim == 2 && D(o, 1) == L(a), "%s, %s and %s do not agree", a->name,
             b->name, o->name);
        return 0;
    case OP_LINEAR_DX:   // dy [..., N], W [N, K], acc [..., K]? -> (acc +) scale dy W
        NEED(b->ndim == 2 && D(b, 0) == L(a) && E(o) == R(a) * D(b, 1), "%s, %s and %s do not agree",
             a->name, b->name, o->name);
        if (I(c, 2))
            SAME(I(c, 2), o);
        return 0;
    case OP_LINEAR_DW:   // dy [..., N], x [..., K] -> dW [N, K]
        NEED(R(a) == R(b) && E(o) == L(a) * L(b), "%s, %s and %s do not agree", a->name, b->name, o->name);
        return 0;
    default: return 0;
    }
}

// Elementwise ops: a broadcast operand repeats over the other, the output is the input's.
static int elementwise(const Check *c, OpKind op, const OpAttr *attr) {
    (void)attr;
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_SUM_TO:   // b (or the output of sum_to) repeats over a
        if (op == OP_SUM_TO)
            b = o;
        NEED(E(b) > 0 && E(a) % E(b) == 0, "%s does not repeat over %s", b->name, a->name);
        if (op != OP_SUM_TO)
            SAME(o, a);
        return 0;
    case OP_SCALE:
    case OP_SILU:
    case OP_GELU:
    case OP_GELU_EXACT:
    case OP_TANH:
    case OP_SOFTCAP:
    case OP_EXP:
    case OP_SOFTMAX:
    case OP_ACC:
        SAME(o, a);
        return 0;
    case OP_SILU_BWD:
    case OP_GELU_BWD:
    case OP_GELU_EXACT_BWD:
    case OP_TANH_BWD:
    case OP_SOFTCAP_BWD:
    case OP_SOFTMAX_BWD:
        SAME(a, b);
        SAME(o, a);
        return 0;
    case OP_DROPOUT:
        SAME(o, a);
        NEED(c->nout < 2 || E(O(c, 1)) == E(a), "the mask is not the input's size");
        return 0;
    case OP_DROPOUT_BWD:
        SAME(a, b);
        SAME(o, a);
        return 0;
    default: return 0;
    }
}

// Norms: a weight per column, a statistic (or two) per row.
static int norms(const Check *c, OpKind op, const OpAttr *attr) {
    (void)attr;
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_RMSNORM:
    case OP_LAYERNORM:   // x [..., C], w [C] (, b [C]) -> y, and rstd [rows] (or mean, rstd)
        OUTS(2);
        NEED(E(b) == L(a) && (op == OP_RMSNORM || E(I(c, 2)) == L(a)), "the weights are not [%lld]",
             (long long)L(a));
        SAME(o, a);
        NEED(E(O(c, 1)) == (op == OP_RMSNORM ? 1 : 2) * R(a), "%s is not the rows' statistics", O(c, 1)->name);
        return 0;
    case OP_ADD_RMSNORM:   // a, b, w -> y, rstd, a + b
        OUTS(3);
        SAME(a, b);
        NEED(E(I(c, 2)) == L(a), "the weights are not [%lld]", (long long)L(a));
        SAME(o, a);
        SAME(O(c, 2), a);
        NEED(E(O(c, 1)) == R(a), "%s is not the rows' statistics", O(c, 1)->name);
        return 0;
    case OP_RMSNORM_DX:
    case OP_LAYERNORM_DX:   // dy, x, w, stats (, acc: rmsnorm's) -> dx
        SAME(a, b);
        NEED(E(I(c, 2)) == L(b), "the weights are not [%lld]", (long long)L(b));
        NEED(E(I(c, 3)) == (op == OP_RMSNORM_DX ? 1 : 2) * R(b), "%s is not the rows' statistics",
             I(c, 3)->name);
        SAME(o, b);
        if (I(c, 4))
            SAME(I(c, 4), o);
        return 0;
    case OP_RMSNORM_DW:
    case OP_LAYERNORM_DW:   // dy, x, stats -> dw [C]
        SAME(a, b);
        NEED(E(I(c, 2)) == (op == OP_RMSNORM_DW ? 1 : 2) * R(b), "%s is not the rows' statistics",
             I(c, 2)->name);
        NEED(E(o) == L(b), "%s is not [%lld]", o->name, (long long)L(b));
        return 0;
    default: return 0;
    }
}

// Rope and attention: [B, S, heads, head_dim] operands, GQA's key heads dividing the query's.
static int attention(const Check *c, OpKind op, const OpAttr *attr) {
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_ROPE:
    case OP_ROPE_BWD: {   // x [B, S, H, D], positions [B, S]?, table f32 [S or more, 2, rotary / 2]?
        NEED(a->ndim == 4, "%s is not [B, S, heads, head_dim]", a->name);
        NEED(!b || E(b) == D(a, 0) * D(a, 1), "%s is not [%lld, %lld] position ids", b ? b->name : "",
             (long long)D(a, 0), (long long)D(a, 1));
        const OpOperand *t = I(c, 2);
        int64_t d = attr->rope.rotary ? attr->rope.rotary : D(a, 3);
        // With position ids the table may hold more positions than x has rows (the decode
        // step's: a row's position is its place in the cache); the runtime keeps each id
        // below the table's rows.
        NEED(!t || (t->dtype == OPD_F32 && t->ndim == 3 && (b ? D(t, 0) >= D(a, 1) : D(t, 0) == D(a, 1)) &&
                    D(t, 1) == 2 && 2 * D(t, 2) == d),
             "%s is not the f32 [%lld, 2, %lld] table of the angles", t ? t->name : "", (long long)D(a, 1),
             (long long)(d / 2));
        SAME(o, a);
        return 0;
    }
    case OP_ATTENTION:   // q, k, v -> o, lse
        OUTS(2);
        SAME(o, a);
        return attention_shapes(c, a, b, I(c, 2), O(c, 1), c->nin > 3 ? I(c, 3) : NULL);
    case OP_ATTENTION_DECODE:   // q, k, v [B, 1, .., D], pos [B, 1] -> o; caches [B, L, Hkv, D] (updated)
        OUTS(3);
        SAME(o, a);
        NEED(c->nin > 3 && I(c, 3) && E(I(c, 3)) == D(a, 0), "the positions are not i32 [B, 1]");
        NEED(a->ndim == 4 && D(a, 1) == 1, "%s is not one token's [B, 1, heads, head_dim]", a->name);
        for (int k = 1; k <= 2; k++) {
            const OpOperand *x = O(c, k);
            NEED(x->ndim == 4 && D(x, 0) == D(a, 0) && D(x, 2) == D(b, 2) && D(x, 3) == D(a, 3) &&
                     x->dtype == b->dtype, "%s is not a [%lld, L, %lld, %lld] cache of %s's dtype", x->name,
                 (long long)D(a, 0), (long long)D(b, 2), (long long)D(a, 3), b->name);
        }
        SAME(O(c, 1), O(c, 2));
        return attention_shapes(c, a, b, I(c, 2), NULL, NULL);
    case OP_ATTENTION_BWD:   // dy, q, k, v, o, lse -> dq, dk, dv
        OUTS(3);
        SAME(a, b);
        SAME(I(c, 4), b);
        SAME(o, b);
        SAME(O(c, 1), I(c, 2));
        SAME(O(c, 2), I(c, 3));
        return attention_shapes(c, b, I(c, 2), I(c, 3), I(c, 5), c->nin > 6 ? I(c, 6) : NULL);
    default: return 0;
    }
}

// Views, slices, joins, transposes, copies and dequantisation: sizes that agree.
static int movement(const Check *c, OpKind op, const OpAttr *attr) {
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_VIEW:   // the reader checks a view fits its base
        return 0;
    case OP_SLICE:        // x -> [start, start + size) of dim axis (a view moves nothing)
    case OP_SLICE_BWD: {  // dy -> dx, the forward input's shape
        const OpOperand *x = op == OP_SLICE ? a : o, *y = op == OP_SLICE ? o : a;
        int ax = attr->axis;
        NEED(ax >= 0 && ax < x->ndim, "axis=%d is not a dimension of %s", ax, x->name);
        NEED(attr->size >= 1 && attr->start >= 0 && attr->start <= D(x, ax) - attr->size,
             "[%lld, %lld) is not inside dimension %d of %s", (long long)attr->start,
             (long long)(attr->start + attr->size), ax, x->name);
        NEED(E(y) == E(x) / D(x, ax) * attr->size, "%s is not %s's range", y->name, x->name);
        NEED(op != OP_SLICE_BWD || c->nin < 2 || !b || (E(b) == E(o) && b->dtype == o->dtype),
             "%s (the sum so far) is not of %s's size and dtype", b ? b->name : "", o->name);
        return 0;
    }
    case OP_CONCAT: {     // x0, x1, ... -> joined along axis
        int ax = attr->axis;
        NEED(ax >= 0 && ax < o->ndim, "axis=%d is not a dimension of %s", ax, o->name);
        int64_t along = 0;
        for (int k = 0; k < c->nin; k++) {
            const OpOperand *x = I(c, k);
            NEED(x && x->ndim == o->ndim, "input %d is absent or not of %s's rank", k, o->name);
            for (int d = 0; d < o->ndim; d++)
                NEED(d == ax || x->shape[d] == o->shape[d], "%s does not fit %s", x->name, o->name);
            along += D(x, ax);
        }
        NEED(along == D(o, ax), "the inputs do not add up to %s along dimension %d", o->name, ax);
        return 0;
    }
    case OP_TRANSPOSE: {
        int p0 = attr->perm[0], p1 = attr->perm[1];
        NEED(p0 >= 0 && p1 >= 0 && p0 < a->ndim && p1 < a->ndim && o->ndim == a->ndim,
             "perm=%d,%d does not name two of the %d dimensions", p0, p1, a->ndim);
        for (int d = 0; d < a->ndim; d++)
            NEED(o->shape[d] == a->shape[d == p0 ? p1 : d == p1 ? p0 : d], "%s is not %s with dims %d "
                 "and %d swapped", o->name, a->name, p0, p1);
        return 0;
    }
    case OP_COPY:
        NEED(a->bytes == o->bytes,
             "a copy between buffers of different sizes");
        return 0;
    case OP_DEQUANT: {   // W nf4, absmax | codes, scales, mean -> W
        int64_t blocks = (E(o) + 63) / 64;
        NEED(b && (c->nin == 2 || (c->nin == 4 && I(c, 2) && I(c, 3))),
             "it takes the absmax, or the codes, scales and mean, all present");
        SAME(o, a);
        if (c->nin == 2)
            NEED(E(b) == blocks, "%s is not one absmax per 64 weights", b->name);
        else
            NEED(c->nin == 4 && E(b) == blocks && E(I(c, 2)) == (blocks + 255) / 256 && E(I(c, 3)) >= 1,
                 "the double-quantised scales do not fit %s", a->name);
        return 0;
    }
    default: return 0;
    }
}

// The losses: a target a row; the fused loss's logits rows the header's vocab.
static int losses(const Check *c, OpKind op, const OpAttr *attr) {
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_CROSS_ENTROPY:   // logits [..., V], targets [rows], count? [1] -> the mean
    case OP_CROSS_ENTROPY_BWD:
        NEED(E(b) == R(a), "%s has %lld targets, %s %lld rows", b->name, (long long)E(b), a->name,
             (long long)R(a));
        NEED(c->nin < 3 || !I(c, 2) || E(I(c, 2)) == 1, "the target count %s is not one value", I(c, 2)->name);
        if (op == OP_CROSS_ENTROPY)
            NEED(E(o) == 1, "%s is not a scalar", o->name);
        else
            SAME(o, a);
        return 0;
    case OP_LOGPROBS:        // logits [..., V], targets [rows] -> f32 [rows]
        NEED(E(b) == R(a), "%s has %lld targets, %s %lld rows", b->name, (long long)E(b), a->name,
             (long long)R(a));
        NEED(o->dtype == OPD_F32 && E(o) == R(a), "%s is not an f32 a row of %s", o->name, a->name);
        return 0;
    case OP_LOGPROBS_BWD: {  // dlp [rows], logits, targets -> dlogits like the logits
        const OpOperand *tg = I(c, 2);
        NEED(a->dtype == OPD_F32 && E(a) == R(b) && tg && E(tg) == R(b), "%s and the targets are not one a row "
             "of %s", a->name, b->name);
        SAME(o, b);
        return 0;
    }
    case OP_PREFERENCE:      // lp [B, ...], targets like it, counts [2], ref? -> loss, stats
    case OP_PREFERENCE_BWD: {
        const OpOperand *r = c->nin > 3 ? I(c, 3) : NULL;
        NEED(a->dtype == OPD_F32 && a->ndim >= 1 && D(a, 0) % 2 == 0, "%s is not f32 rows in pairs", a->name);
        NEED(E(b) == E(a), "%s has %lld targets, %s %lld", b->name, (long long)E(b), a->name, (long long)E(a));
        NEED(I(c, 2) && E(I(c, 2)) == 2, "the counts are not two i32 (pairs, chosen targets)");
        NEED(!r || (r->dtype == OPD_F32 && (E(r) == E(a) || (r->ndim == 1 && E(r) == D(a, 0)))),
             "the reference's %s is not f32 like %s or a row each", r ? r->name : "", a->name);
        NEED(attr->pref.kind >= 0 && attr->pref.kind < PREF_KIND_COUNT && attr->f > 0, "loss= or beta= is invalid");
        if (op == OP_PREFERENCE)
            NEED(E(o) == 1 && c->nout == 2 && E(O(c, 1)) == PREF_STATS, "it writes the loss and %d stats",
                 PREF_STATS);
        else
            NEED(o->dtype == OPD_F32 && E(o) == E(a), "%s is not f32 like %s", o->name, a->name);
        return 0;
    }
    case OP_LINEAR_LOGPROBS:       // x [rows, K], W [V, K], targets [rows] -> f32 a row
    case OP_LINEAR_LOGPROBS_BWD: { // ..., dlp f32 a row -> dx like x, dW like W (when W trains)
        const OpOperand *tg = I(c, 2);
        NEED(b->ndim == 2 && D(b, 1) == L(a), "%s is not [V, %lld]", b->name, (long long)L(a));
        NEED(D(b, 0) == c->vocab, "%s has %lld rows of logits, the header's vocab is %lld", b->name,
             (long long)D(b, 0), (long long)c->vocab);
        NEED(tg && E(tg) == R(a), "the targets are not one a row of %s", a->name);
        int64_t chunk = attr->chunk_rows ? attr->chunk_rows : R(a);
        NEED(chunk >= 1 && chunk <= R(a) && R(a) % chunk == 0, "chunk=%lld does not divide the %lld rows",
             (long long)chunk, (long long)R(a));
        if (op == OP_LINEAR_LOGPROBS) {
            NEED(o->dtype == OPD_F32 && E(o) == R(a), "%s is not an f32 a row of %s", o->name, a->name);
        } else {
            NEED(I(c, 3) && I(c, 3)->dtype == OPD_F32 && E(I(c, 3)) == R(a), "dlp is not an f32 a row of %s", a->name);
            NEED(c->nout == 1 || c->nout == 2, "it writes dx and perhaps dW");
            SAME(o, a);
            NEED(c->nout == 1 || E(O(c, 1)) == E(b), "dW is not shaped like %s", b->name);
        }
        return 0;
    }
    case OP_LINEAR_CE:        // x [rows, K], W [V, K], targets [rows] -> the mean
    case OP_LINEAR_CE_GRAD: { // and dx like x, dW like W (when W trains)
        const OpOperand *tg = I(c, 2);
        NEED(b->ndim == 2 && D(b, 1) == L(a), "%s is not [V, %lld]", b->name, (long long)L(a));
        NEED(D(b, 0) == c->vocab, "%s has %lld rows of logits, the header's vocab is %lld", b->name,
             (long long)D(b, 0), (long long)c->vocab);
        NEED(tg && E(tg) == R(a), "the targets are not one a row of %s", a->name);
        NEED(!I(c, 3) || E(I(c, 3)) == 1, "the target count is not one i32");
        int64_t chunk = attr->chunk_rows ? attr->chunk_rows : R(a);
        NEED(chunk >= 1 && chunk <= R(a) && R(a) % chunk == 0, "chunk=%lld does not divide the %lld rows",
             (long long)chunk, (long long)R(a));
        NEED(E(o) == 1, "%s is not a scalar", o->name);
        if (op == OP_LINEAR_CE_GRAD) {
            NEED(c->nout == 2 || c->nout == 3, "it writes the loss, dx and perhaps dW");
            SAME(O(c, 1), a);
            NEED(c->nout == 2 || E(O(c, 2)) == E(b), "dW is not shaped like %s", b->name);
        }
        return 0;
    }
    default: return 0;
    }
}

// The optimizers and the gradients' reduction: states shaped like the parameter.
static int optimizer(const Check *c, OpKind op, const OpAttr *attr) {
    (void)attr;
    const OpOperand *a = I(c, 0), *b = I(c, 1), *o = O(c, 0);
    switch (op) {
    case OP_ADAMW:
    case OP_SGD:   // grad, factor -> param, (m, v,) master?
        OUTS(op == OP_ADAMW ? 3 : 1);
        for (int k = 0; k < c->nout; k++)
            SAME(O(c, k), a);
        NEED(b && b->dtype == OPD_F32 && E(b) == 2, "its second input is not the gradients' factor (two f32)");
        return 0;
    case OP_ADAMW8BIT: {   // grad [n], factor -> param, (codes u8 [2, n], absmax [2, blocks] | m, v), (master | kahan)?
        OUTS(3);
        NEED(c->nout <= 4, "it updates at most four buffers");
        SAME(o, a);
        const OpOperand *s1 = O(c, 1), *s2 = O(c, 2);
        if (s1->dtype == OPD_U8)
            NEED(E(s1) == 2 * E(a) && s2->dtype == OPD_F32 && E(s2) == 2 * ((E(a) + 255) / 256),
                 "%s and %s are not the codes (u8, two per element) and absmaxes (f32, two per 256) of %s",
                 s1->name, s2->name, a->name);
        else
            NEED(s1->dtype == OPD_F32 && s2->dtype == OPD_F32 && E(s1) == E(a) && E(s2) == E(a),
                 "%s and %s are not f32 moments shaped like %s", s1->name, s2->name, a->name);
        NEED(c->nout < 4 || E(O(c, 3)) == E(a), "%s is not shaped like %s", c->nout > 3 ? O(c, 3)->name : "",
             a->name);
        NEED(b && b->dtype == OPD_F32 && E(b) == 2, "its second input is not the gradients' factor (two f32)");
        return 0;
    }
    case OP_GRAD_SUMSQ:    // grad -> (sum of squares, non-finite count)
    case OP_GRAD_FACTOR:   // those -> (factor, skip)
        NEED(o->dtype == OPD_F32 && E(o) == 2, "%s is not two f32", o->name);
        NEED(op == OP_GRAD_SUMSQ || !a || (a->dtype == OPD_F32 && E(a) == 2), "%s is not two f32",
             a ? a->name : "");
        return 0;
    default: return 0;
    }
}

// Collectives over the ranks: the input and output sizes each one takes.
static int collectives(const Check *c, OpKind op, const OpAttr *attr) {
    (void)attr;
    const OpOperand *a = I(c, 0), *o = O(c, 0);
    switch (op) {
    case OP_ALL_REDUCE:       // x [n] -> [n]
    case OP_REDUCE_SCATTER:   // x [ranks * n] -> [n]
    case OP_ALL_GATHER: {     // x [n] -> [ranks * n]
        int64_t ranks = c->ranks, in_elems = op == OP_REDUCE_SCATTER ? E(o) * ranks : E(a),
                out_elems = op == OP_ALL_GATHER ? E(a) * ranks : E(o);
        NEED(a->dtype == o->dtype, "%s is %s, %s %s", a->name, a->dtype_name, o->name,
             o->dtype_name);
        NEED(E(a) == in_elems && E(o) == out_elems, "%s (%lld elements) and %s (%lld) are not what a "
             "%s over %lld ranks takes", a->name, (long long)E(a), o->name, (long long)E(o),
             op_desc(op)->name, (long long)ranks);
        return 0;
    }
    default: return 0;
    }
}

typedef int (*Rule)(const Check *c, OpKind op, const OpAttr *attr);

// Each class's rule: an op of the class is checked by it unless `rules` names another.
static const Rule class_rules[OPC_COUNT] = {
    [OPC_GEMM] = products,
    [OPC_ELEMENTWISE] = elementwise,
    [OPC_ATTENTION] = attention,
    [OPC_MOVEMENT] = movement,
    [OPC_OPTIMIZER] = optimizer,
    [OPC_COLLECTIVE] = collectives,
    [OPC_LOSS_GEMM] = losses,
};

// The ops whose class's rule does not fit them (or whose class has none).
static const Rule rules[OP_COUNT] = {
    [OP_EMBED] = products,
    [OP_EMBED_BWD] = products,
    [OP_SUM_TO] = elementwise,
    [OP_SOFTMAX] = elementwise,
    [OP_SOFTMAX_BWD] = elementwise,
    [OP_RMSNORM] = norms,
    [OP_LAYERNORM] = norms,
    [OP_ADD_RMSNORM] = norms,
    [OP_RMSNORM_DX] = norms,
    [OP_LAYERNORM_DX] = norms,
    [OP_RMSNORM_DW] = norms,
    [OP_LAYERNORM_DW] = norms,
    [OP_ROPE] = attention,
    [OP_ROPE_BWD] = attention,
    [OP_COPY] = movement,
    [OP_DEQUANT] = movement,
    [OP_CROSS_ENTROPY] = losses,
    [OP_CROSS_ENTROPY_BWD] = losses,
    [OP_LOGPROBS] = losses,
    [OP_LOGPROBS_BWD] = losses,
    [OP_PREFERENCE] = losses,
    [OP_PREFERENCE_BWD] = losses,
    [OP_GRAD_SUMSQ] = optimizer,
    [OP_GRAD_FACTOR] = optimizer,
};

#undef NEED
#undef SAME
#undef OUTS
#undef ND

// The ops whose outputs alone are checked: zero, and the rope table its shape= sizes.
static int outputs_only(const Check *c, OpKind op, const OpAttr *attr) {
    const OpOperand *o = O(c, 0);
    if (c->nout < 1)
        return fail(c, "it needs %d outputs, has %d", 1, c->nout);
    if (op == OP_ROPE_TABLE && !(o->dtype == OPD_F32 && o->ndim == 3 && attr->ndim == 3 &&
                                 D(o, 0) == attr->shape[0] && D(o, 1) == 2 && D(o, 2) == attr->shape[2] &&
                                 2 * D(o, 2) == attr->rope.rotary))
        return fail(c, "%s is not f32 [S, 2, rotary / 2] as its shape= and rotary= say", o->name);
    return 0;
}

int op_check(OpKind op, const OpAttr *attr, const OpOperand *in, int nin, const OpOperand *out, int nout,
             int64_t vocab, int64_t ranks, char *err, size_t errlen) {
    Check c = {in, out, nin, nout, vocab, ranks, err, errlen};
    for (int k = 0; k < nout; k++)   // an output may be virtual only inside a fused kernel
        if (!out[k].name)
            return fail(&c, "output %d is absent", k);
    int dt = dtypes(&c, op);
    if (dt != 0 || op == OP_ZERO)
        return dt;
    for (int k = 0; k < nin; k++)   // absent: only past the op's required inputs
        if (!in[k].name && k < op_desc(op)->min_in)
            return fail(&c, "input %d is absent", k);
    if (op == OP_ROPE_TABLE)
        return outputs_only(&c, op, attr);
    if (nout < 1)
        return fail(&c, "it needs %d outputs, has %d", 1, nout);
    if (nin < 1 || !in[0].name) {
        if (op_desc(op)->min_in != 0)
            return fail(&c, "its first input is absent");
    }
    if (op == OP_FUSED)   // its steps are checked one by one
        return 0;
    Rule rule = rules[op] ? rules[op] : class_rules[op_desc(op)->cls];
    if (!rule)   // every op has a rule: one without would pass unchecked
        return fail(&c, "internal error: the op contract has no shape rule for %s", op_desc(op)->name);
    return rule(&c, op, attr);
}
