// op.c — the compiler's columns of the op table: per op, its shape rule, FLOPs, bytes
// moved, GEMM dimensions and what its backward reads (its derivative rule is derive.c's
// column). Name, class, arity and attributes are the op's row in runtime/ops.def.
#include "ir.h"

#include <math.h>
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

// Formats "bf16[2, 16, 64]" into `buf` (96 bytes); SH gives each use its own buffer.
static const char *shape_text(char *buf, const IrTensor *t) {
    ir_shape_str(buf, 96, t);
    return buf;
}
#define sh(t) shape_text((char[96]){0}, (t))

static int64_t elems_out(const IrGraph *g, const IrNode *n) { return ir_tensor_elems(T(n->out[0])); }
static int64_t elems_in0(const IrGraph *g, const IrNode *n) { return ir_tensor_elems(IN(0)); }

//
// Shape rules: forward ops.
//

static bool shape_embed(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *tab = IN(0), *ids = IN(1);
    if (tab->ndim != 2)
        return fail(err, 0, "embedding table must be 2-D [vocab, dim], got %s", sh(tab));
    if (ids->dtype != DT_I32)
        return fail(err, 1, "embedding indices must be i32, got %s", sh(ids));
    if (ids->ndim + 1 > IR_MAX_DIMS)
        return fail(err, 1, "too many dimensions in %s", sh(ids));
    if (n->attr.pad > tab->shape[0])
        return fail(err, -1, "embed: padding = %lld is not a row of %s", (long long)(n->attr.pad - 1),
                    sh(tab));
    same_as(out, ids);
    out->dtype = tab->dtype == DT_NF4 ? DT_BF16 : tab->dtype;
    out->shape[out->ndim++] = tab->shape[1];
    return true;
}

static bool shape_linear(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
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

// x [..., K], W [N, K] and y [..., N] (the output the product is added into).
static bool shape_linear_acc(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    IrNode bare = *n;
    bare.nin = 2;
    if (!shape_linear(g, &bare, out, err))
        return false;
    const IrTensor *y = IN(2);
    if (!ir_same_shape(y, out))
        return fail(err, 2, "linear_acc: %s is not the product's shape", sh(y));
    out->dtype = y->dtype;
    return true;
}

// a [..., M, K] times b [..., K, N] (the same batch dims), or times a 2-D b [K, N] for
// every row of a: [..., K] x [K, N] -> [..., N] (a weight stored [in, out]).
static bool shape_matmul(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *a = IN(0), *b = IN(1);
    bool broadcast = b->ndim == 2 && a->ndim >= 2;
    if (a->ndim < 2 || (a->ndim != b->ndim && !broadcast) || !is_float(a->dtype) ||
        !is_float(b->dtype))
        return fail(err, 1, "matmul needs two float tensors of equal rank >= 2, or a 2-D second "
                    "one, got %s and %s", sh(a), sh(b));
    int r = a->ndim;
    for (int i = 0; !broadcast && i < r - 2; i++)
        if (a->shape[i] != b->shape[i])
            return fail(err, 1, "matmul: batch dims differ: %s and %s", sh(a), sh(b));
    if (a->shape[r - 1] != b->shape[b->ndim - 2])
        return fail(err, 1, "matmul: inner dims differ: %s and %s", sh(a), sh(b));
    same_as(out, a);
    out->shape[r - 1] = b->shape[b->ndim - 1];
    return true;
}

// x -> the range [start, start + size) of dim `axis`. Where every dim before the axis is
// 1 the range is contiguous: the result is a view at its offset in x's bytes.
static bool shape_slice(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0);
    int ax = ir_dim_index(n->attr.axis, x->ndim);
    if (ax < 0)
        return fail(err, 0, "slice: dim %d is not a dimension of %s", n->attr.axis, sh(x));
    int64_t start = n->attr.start, size = n->attr.size;
    if (size < 1 || start < 0 || start > x->shape[ax] - size)
        return fail(err, 0, "slice: [%lld, %lld) is not inside dim %d (size %lld) of %s",
                    (long long)start, (long long)(start + size), ax, (long long)x->shape[ax], sh(x));
    if (x->dtype == DT_NF4)
        return fail(err, 0, "slice: %s is stored as NF4", sh(x));
    same_as(out, x);
    out->shape[ax] = size;
    if (prod(x->shape, 0, ax) == 1) {
        const IrTensor *base = T(ir_tensor_base(g, n->in[0]));
        out->alias_of = base->id;
        out->alias_offset = x->alias_offset + dtype_bytes(x->dtype, start * prod(x->shape, ax + 1, x->ndim));
    }
    return true;
}

// x0, x1, ... of one dtype and rank, equal but along `axis` -> joined along it.
static bool shape_concat(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0);
    int ax = ir_dim_index(n->attr.axis, x->ndim);
    if (ax < 0)
        return fail(err, 0, "concat: dim %d is not a dimension of %s", n->attr.axis, sh(x));
    if (!is_float(x->dtype))
        return fail(err, 0, "concat needs float tensors, got %s", sh(x));
    same_as(out, x);
    for (int k = 1; k < n->nin; k++) {
        const IrTensor *y = IN(k);
        bool ok = y->ndim == x->ndim && y->dtype == x->dtype;
        for (int d = 0; ok && d < x->ndim; d++)
            ok = d == ax || y->shape[d] == x->shape[d];
        if (!ok)
            return fail(err, k, "concat: %s does not fit %s along dim %d", sh(y), sh(x), ax);
        out->shape[ax] += y->shape[ax];
    }
    return true;
}

static bool suffix_of(const IrTensor *b, const IrTensor *a) {
    if (b->ndim > a->ndim)
        return false;
    for (int i = 0; i < b->ndim; i++)
        if (b->shape[b->ndim - 1 - i] != a->shape[a->ndim - 1 - i])
            return false;
    return true;
}

// Binary elementwise: equal shapes, or b's shape a suffix of a's (broadcast).
static bool shape_binary(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *a = IN(0), *b = IN(1);
    if (!suffix_of(b, a) || !is_float(a->dtype) || !is_float(b->dtype))
        return fail(err, 1, "%s: shapes %s and %s do not match", op_desc(n->op)->name, sh(a),
                    sh(b));
    same_as(out, a);
    return true;
}

static bool shape_unary(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    if (!is_float(IN(0)->dtype))
        return fail(err, 0, "%s needs a float tensor, got %s", op_desc(n->op)->name, sh(IN(0)));
    same_as(out, IN(0));
    return true;
}

static bool shape_softcap(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    if (!(n->attr.f > 0))
        return fail(err, -1, "softcap: cap must be more than 0, got %g", n->attr.f);
    return shape_unary(g, n, out, err);
}

static bool shape_dropout(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    if (!shape_unary(g, n, out, err))
        return false;
    if (!(n->attr.f >= 0 && n->attr.f < 1))
        return fail(err, 0, "dropout probability must be in [0, 1), got %g", n->attr.f);
    if (n->attr.f > 0) {
        same_as(&out[1], IN(0));
        out[1].dtype = DT_U8;
    }
    return true;
}

static bool shape_norm(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0);
    if (x->ndim < 1 || !is_float(x->dtype))
        return fail(err, 0, "%s input must be a float tensor, got %s", op_desc(n->op)->name,
                    sh(x));
    int64_t c = x->shape[x->ndim - 1];
    for (int k = 1; k < n->nin; k++) {
        const IrTensor *w = IN(k);
        if (w->ndim != 1 || w->shape[0] != c)
            return fail(err, k, "%s: %s %s does not match input %s", op_desc(n->op)->name,
                        k == 1 ? "weight" : "bias", sh(w), sh(x));
    }
    same_as(&out[0], x);
    same_as(&out[1], x);
    out[1].dtype = DT_F32;
    if (n->op == OP_RMSNORM) {
        out[1].ndim--;                            // rstd per row
    } else {                                      // mean per row, then rstd per row
        memmove(out[1].shape + 1, out[1].shape, sizeof(int64_t) * (size_t)(x->ndim - 1));
        out[1].shape[0] = 2;
    }
    return true;
}

// a, b [..., C] of one shape, w [C] -> y and rstd (rmsnorm's of s), s = a + b.
static bool shape_add_norm(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *a = IN(0), *b = IN(1), *w = IN(2);
    if (a->ndim < 1 || !is_float(a->dtype) || !ir_same_shape(a, b))
        return fail(err, 1, "add_rmsnorm needs two float tensors of one shape, got %s and %s", sh(a), sh(b));
    if (w->ndim != 1 || w->shape[0] != a->shape[a->ndim - 1])
        return fail(err, 2, "add_rmsnorm: weight %s does not match input %s", sh(w), sh(a));
    same_as(&out[0], a);
    same_as(&out[1], a);
    out[1].dtype = DT_F32;
    out[1].ndim--;
    same_as(&out[2], a);
    return true;
}

// x [B, S, heads, head_dim] and, optionally, its position ids i32 [B, S].
static bool shape_rope(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0);
    if (x->ndim != 4 || x->shape[3] % 2 || !is_float(x->dtype))
        return fail(err, 0, "rope needs [B, S, heads, head_dim] with an even head_dim, got %s",
                    sh(x));
    const OpRope *r = &n->attr.rope;
    const char *scaling = rope_scaling_name(r->scaling);
    if (!(n->attr.f > 1))
        return fail(err, -1, "rope: theta must be more than 1, got %g", n->attr.f);
    if (r->rotary % 2 || r->rotary > x->shape[3])
        return fail(err, -1, "rope: rotary = %lld must be even and at most head_dim %lld",
                    (long long)r->rotary, (long long)x->shape[3]);
    if (r->scaling != ROPE_PLAIN && !(r->factor > 0))
        return fail(err, -1, "rope: scaling = %s needs a factor > 0", scaling);
    if ((r->scaling == ROPE_DYNAMIC || r->scaling == ROPE_LLAMA3 || r->scaling == ROPE_YARN) &&
        r->original < 1)
        return fail(err, -1, "rope: scaling = %s needs original_max (the pretrained length)", scaling);
    if (r->scaling == ROPE_DYNAMIC && (r->rotary ? r->rotary : x->shape[3]) <= 2)
        return fail(err, -1, "rope: scaling = dynamic needs more than 2 rotary dims");
    if (r->scaling == ROPE_LLAMA3 && !(r->low > 0 && r->high > r->low))
        return fail(err, -1, "rope: scaling = llama3 needs 0 < low_freq_factor < high_freq_factor, "
                    "got %g and %g", r->low, r->high);
    if (r->scaling == ROPE_YARN && (r->low < 0 || r->high < 0 || r->attn_factor < 0))
        return fail(err, -1, "rope: beta_fast, beta_slow and attention_factor cannot be negative");
    bool llama3_keys = r->scaling == ROPE_LLAMA3 || r->scaling == ROPE_YARN;
    if (!llama3_keys && (r->low != 0 || r->high != 0))
        return fail(err, -1, "rope: low_freq_factor, high_freq_factor, beta_fast and beta_slow "
                    "belong to scaling = llama3 or yarn, not %s", scaling);
    if (r->scaling != ROPE_YARN && (r->attn_factor != 0 || r->no_truncate))
        return fail(err, -1, "rope: attention_factor and truncate belong to scaling = yarn, not %s",
                    scaling);
    if (r->scaling == ROPE_PLAIN && (r->factor != 0 || r->original))
        return fail(err, -1, "rope: factor and original_max need a scaling (linear, dynamic, "
                    "llama3 or yarn)");
    if (n->nin > 1 && n->in[1] >= 0) {
        const IrTensor *p = IN(1);
        if (p->dtype != DT_I32 || p->ndim != 2 || p->shape[0] != x->shape[0] ||
            p->shape[1] != x->shape[1])
            return fail(err, 1, "rope: position ids must be i32 [%lld, %lld] for %s, got %s",
                        (long long)x->shape[0], (long long)x->shape[1], sh(x), sh(p));
    }
    if (n->nin > 2 && n->in[2] >= 0) {   // the table a rope_table node made for these attributes
        const IrTensor *t = IN(2);
        const IrNode *tn = t->producer >= 0 ? &g->nodes.at[t->producer] : NULL;
        while (tn && tn->op == OP_COPY)   // (swapped out and back, or offloaded)
            tn = g->tensors.at[tn->in[0]].producer >= 0 ? &g->nodes.at[g->tensors.at[tn->in[0]].producer] : NULL;
        OpAttr want = n->attr;
        want.rope.rotary = r->rotary ? r->rotary : x->shape[3];
        want.ndim = 3, want.shape[0] = x->shape[1], want.shape[1] = 2, want.shape[2] = want.rope.rotary / 2;
        // With position ids, a table of more positions than x's rows (the decode step's)
        bool has_pos = n->nin > 1 && n->in[1] >= 0;
        if (tn && has_pos && tn->attr.ndim == 3 && tn->attr.shape[0] >= x->shape[1])
            want.shape[0] = tn->attr.shape[0];
        if (!tn || tn->op != OP_ROPE_TABLE || !op_attr_equal(OP_ROPE_TABLE, &tn->attr, &want))
            return fail(err, 2, "rope: %s is not the rope_table of this rope's attributes and length",
                        t->name);
    }
    same_as(out, x);
    return true;
}

// The cos and sin table of a rope: f32 [S, 2, d/2] (shape=), d its rotary dims (rope.rotary,
// set) and every rope attribute the ropes that read it have.
static bool shape_rope_table(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)g;
    const OpAttr *a = &n->attr;
    if (a->ndim != 3 || a->shape[0] < 1 || a->shape[1] != 2 || a->shape[2] < 1 ||
        a->rope.rotary != 2 * a->shape[2] || !(a->f > 1))
        return fail(err, -1, "rope_table: shape=[S, 2, rotary / 2] and theta > 1 needed");
    out[0].dtype = DT_F32;
    out[0].ndim = 3;
    memcpy(out[0].shape, a->shape, sizeof(int64_t) * 3);
    return true;
}

static bool shape_attention(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *q = IN(0), *k = IN(1), *v = IN(2);
    if (q->ndim != 4)
        return fail(err, 0, "attention: q must be [B, S, heads, head_dim], got %s", sh(q));
    for (int i = 1; i <= 2; i++) {
        const IrTensor *t = IN(i);
        if (t->ndim != 4 || t->shape[0] != q->shape[0] || t->shape[1] != q->shape[1] ||
            t->shape[3] != q->shape[3] || q->shape[2] % t->shape[2])
            return fail(err, i, "attention: %s %s does not fit q %s", i == 1 ? "k" : "v", sh(t),
                        sh(q));
    }
    if (k->shape[2] != v->shape[2])
        return fail(err, 2, "attention: k %s and v %s differ in heads", sh(k), sh(v));
    if (n->attr.softcap < 0 || n->attr.scale < 0)
        return fail(err, -1, "attention: softcap and scale cannot be negative, got %g and %g",
                    n->attr.softcap, n->attr.scale);
    const IrTensor *pos = n->nin > 3 && n->in[3] >= 0 ? IN(3) : NULL;
    if (pos && (pos->dtype != DT_I32 || pos->ndim != 2 || pos->shape[0] != q->shape[0] ||
                pos->shape[1] != q->shape[1]))
        return fail(err, 3, "attention: positions %s are not i32 [B, S] of q %s", sh(pos), sh(q));
    same_as(&out[0], q);
    out[1].dtype = DT_F32;
    out[1].ndim = 3;
    out[1].shape[0] = q->shape[0];
    out[1].shape[1] = q->shape[2];
    out[1].shape[2] = q->shape[1];
    return true;
}

// One new token's attention over the cache: q [B, 1, H, D], k and v [B, 1, Hkv, D], its
// position i32 [B, 1] -> o [B, 1, H, D]. The caches it updates (out[1], out[2]) are the
// decode pass's tensors, given after the rule runs.
static bool shape_attention_decode(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *q = IN(0), *pos = IN(3);
    if (q->ndim != 4 || q->shape[1] != 1)
        return fail(err, 0, "attention_decode: q must be one token's [B, 1, heads, head_dim], got %s", sh(q));
    for (int i = 1; i <= 2; i++) {
        const IrTensor *t = IN(i);
        if (t->ndim != 4 || t->shape[0] != q->shape[0] || t->shape[1] != 1 || t->shape[3] != q->shape[3] ||
            q->shape[2] % t->shape[2] || t->shape[2] != IN(1)->shape[2])
            return fail(err, i, "attention_decode: %s %s does not fit q %s", i == 1 ? "k" : "v", sh(t), sh(q));
    }
    if (pos->dtype != DT_I32 || ir_tensor_elems(pos) != q->shape[0])
        return fail(err, 3, "attention_decode: the position %s is not i32 [B, 1] of q %s", sh(pos), sh(q));
    same_as(&out[0], q);
    return true;
}

// The cache's rows (L): every one is read at the last position, the bound the cost takes.
static int64_t cache_rows(const IrGraph *g, const IrNode *n) {
    return n->out[1] >= 0 ? T(n->out[1])->shape[1] : 1;
}

static int64_t flops_attention_decode(const IrGraph *g, const IrNode *n) {
    const IrTensor *q = IN(0);
    int64_t bh = q->shape[0] * q->shape[2], d = q->shape[3], keys = cache_rows(g, n);
    return 4 * bh * d * keys + 5 * bh * keys;
}

// q, k, v and the position, and both caches whole (their rows up to the position, at most).
static int64_t read_attention_decode(const IrGraph *g, const IrNode *n) {
    int64_t b = 0;
    for (int k = 0; k < 4; k++)
        b += ir_tensor_bytes(IN(k));
    for (int k = 1; k <= 2 && n->out[k] >= 0; k++)
        b += ir_tensor_bytes(T(n->out[k]));
    return b;
}

static bool shape_view(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0);
    IrTensor want = {.dtype = x->dtype, .ndim = n->attr.ndim};
    memcpy(want.shape, n->attr.shape, sizeof want.shape);
    if (ir_tensor_elems(&want) != ir_tensor_elems(x))
        return fail(err, 0, "view: cannot view %s as %s (element counts differ)", sh(x),
                    sh(&want));
    same_as(out, &want);
    out->alias_of = ir_tensor_base(g, n->in[0]);
    out->alias_offset = x->alias_offset;
    return true;
}

static bool shape_transpose(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0);
    int a = n->attr.perm[0], b = n->attr.perm[1];
    if (a < 0 || b < 0 || a >= x->ndim || b >= x->ndim)
        return fail(err, 0, "transpose: dims %d, %d out of range for %s", a, b, sh(x));
    same_as(out, x);
    out->shape[a] = x->shape[b];
    out->shape[b] = x->shape[a];
    return true;
}

// Targets i32 [...], a row of logits [..., V] each (the loss's and the log-probabilities').
static bool logits_targets_ok(const IrTensor *lg, const IrTensor *tg) {
    bool ok = tg->dtype == DT_I32 && lg->ndim == tg->ndim + 1;
    for (int i = 0; ok && i < tg->ndim; i++)
        ok = lg->shape[i] == tg->shape[i];
    return ok;
}

// x [..., K], W [V, K], targets i32 [...] (x's leading dims): the fused losses' operands.
static bool linear_targets_ok(const IrTensor *x, const IrTensor *w, const IrTensor *tg) {
    bool ok = x->ndim >= 1 && is_float(x->dtype) && w->ndim == 2 && is_float(w->dtype) &&
              w->shape[1] == x->shape[x->ndim - 1] && tg->dtype == DT_I32 && tg->ndim == x->ndim - 1;
    for (int i = 0; ok && i < tg->ndim; i++)
        ok = tg->shape[i] == x->shape[i];
    return ok;
}

static bool shape_cross_entropy(const IrGraph *g, const IrNode *n, IrTensor *out,
                                IrShapeErr *err) {
    const IrTensor *lg = IN(0), *tg = IN(1);
    if (!logits_targets_ok(lg, tg))
        return fail(err, 1, "cross_entropy: logits %s and targets %s do not match", sh(lg),
                    sh(tg));
    if (n->nin > 2 && n->in[2] >= 0 && (IN(2)->dtype != DT_I32 || ir_tensor_elems(IN(2)) != 1))
        return fail(err, 2, "cross_entropy: the target count %s is not one i32", sh(IN(2)));
    out->dtype = DT_F32;
    out->ndim = 0;
    return true;
}

// logits [..., V], targets i32 [...] -> each target's log-probability, f32 [...].
static bool shape_logprobs(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *lg = IN(0), *tg = IN(1);
    if (!is_float(lg->dtype) || !logits_targets_ok(lg, tg))
        return fail(err, 1, "logprobs: logits %s and targets %s do not match", sh(lg), sh(tg));
    same_as(out, tg);
    out->dtype = DT_F32;
    return true;
}

// lp f32 [B, ...], targets i32 of its shape, count i32 [2], ref? (lp's shape, or [B]) -> the
// loss, an f32 scalar; the stats f32 [PREF_STATS]. B holds whole pairs.
static bool shape_preference(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *lp = IN(0), *tg = IN(1), *cnt = IN(2);
    const OpPref *p = &n->attr.pref;
    if (lp->dtype != DT_F32 || lp->ndim < 1 || !ir_same_shape(lp, tg) || tg->dtype != DT_I32)
        return fail(err, 1, "preference: log-probabilities %s and targets %s do not match", sh(lp), sh(tg));
    if (lp->shape[0] % 2)
        return fail(err, 0, "preference: %lld rows do not make pairs (chosen, rejected)",
                    (long long)lp->shape[0]);
    if (cnt->dtype != DT_I32 || ir_tensor_elems(cnt) != 2)
        return fail(err, 2, "preference: the counts %s are not two i32", sh(cnt));
    if (n->nin > 3 && n->in[3] >= 0) {
        const IrTensor *r = IN(3);
        if (r->dtype != DT_F32 || !(ir_same_shape(r, lp) || (r->ndim == 1 && r->shape[0] == lp->shape[0])))
            return fail(err, 3, "preference: the reference's log-probabilities %s match neither %s nor [%lld]",
                        sh(r), sh(lp), (long long)lp->shape[0]);
    }
    if (p->kind < 0 || p->kind >= PREF_KIND_COUNT)
        return fail(err, 0, "preference: unknown loss %d", p->kind);
    if (!(n->attr.f > 0) || !isfinite(n->attr.f))
        return fail(err, 0, "%s: beta must be positive, got %g", pref_kind_name(p->kind), n->attr.f);
    if (!(p->smoothing >= 0 && p->smoothing <= 0.5))
        return fail(err, 0, "%s: label smoothing must be in [0, 0.5], got %g", pref_kind_name(p->kind),
                    p->smoothing);
    if (!isfinite(p->gamma) || !(p->alpha >= 0) || !isfinite(p->alpha))
        return fail(err, 0, "%s: gamma must be finite and alpha non-negative", pref_kind_name(p->kind));
    out->dtype = DT_F32;
    out->ndim = 0;
    out[1].dtype = DT_F32;
    out[1].ndim = 1;
    out[1].shape[0] = PREF_STATS;
    return true;
}

// The fused linear + logprobs: x [..., K], W [V, K], targets i32 [...] -> f32 [...]; its
// backward (dlp f32 like the targets, last) -> dx like x.
static bool shape_linear_logprobs(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0), *w = IN(1), *tg = IN(2);
    bool ok = linear_targets_ok(x, w, tg);
    if (n->op == OP_LINEAR_LOGPROBS_BWD)
        ok = ok && IN(3)->dtype == DT_F32 && ir_same_shape(IN(3), tg);
    if (!ok)
        return fail(err, 1, "%s: %s, %s and targets %s do not match", op_desc(n->op)->name, sh(x), sh(w), sh(tg));
    if (n->op == OP_LINEAR_LOGPROBS_BWD) {
        same_as(out, x);
    } else {
        same_as(out, tg);
        out->dtype = DT_F32;
    }
    return true;
}

// The gradient by the log-probabilities: f32 like them.
static bool shape_preference_bwd(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    same_as(out, IN(0));
    out->dtype = DT_F32;
    return true;
}

// The fused linear + cross entropy: x [..., K], W [V, K], targets i32 [...] (x's leading
// dims) -> the loss, an f32 scalar.
static bool shape_linear_ce(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    const IrTensor *x = IN(0), *w = IN(1), *tg = IN(2);
    if (!linear_targets_ok(x, w, tg))
        return fail(err, 1, "linear_cross_entropy: %s, %s and targets %s do not match", sh(x), sh(w),
                    sh(tg));
    if (n->nin > 3 && n->in[3] >= 0 && (IN(3)->dtype != DT_I32 || ir_tensor_elems(IN(3)) != 1))
        return fail(err, 3, "linear_cross_entropy: the target count %s is not one i32", sh(IN(3)));
    out->dtype = DT_F32;
    out->ndim = 0;
    return true;
}

//
// Shape rules: backward and optimizer ops. Autodiff builds these from graphs that
// already passed the forward rules, so a failure here is an internal error.
//

static bool shape_like_in(const IrGraph *g, const IrNode *n, IrTensor *out, int k) {
    same_as(out, IN(k));
    return true;
}

static bool shape_attr(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    out->dtype = IN(0)->dtype;
    out->ndim = n->attr.ndim;
    memcpy(out->shape, n->attr.shape, sizeof out->shape);
    return true;
}

static bool shape_like0(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    return shape_like_in(g, n, out, 0);
}

static bool shape_like1(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    return shape_like_in(g, n, out, 1);
}

// The sum a node adds its result into (OpInfo.acc_in), when it has one: of the result's
// shape, and the result takes its dtype.
static bool shape_acc(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    int k = op_info(n->op)->acc_in - 1;
    if (k < 0 || k >= n->nin || n->in[k] < 0)
        return true;
    const IrTensor *acc = IN(k);
    if (!ir_same_shape(acc, out))
        return fail(err, k, "%s: %s is not the result's shape", op_desc(n->op)->name, sh(acc));
    out->dtype = acc->dtype;
    return true;
}

// dy, x, w, stats, acc?: x's shape (acc's dtype).
static bool shape_norm_dx(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    shape_like_in(g, n, out, 1);
    return shape_acc(g, n, out, err);
}

// dy [..., N], W [N, K], acc [..., K]?: [..., K].
static bool shape_linear_dx(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    same_as(out, IN(0));
    out->shape[out->ndim - 1] = IN(1)->shape[1];
    return shape_acc(g, n, out, err);
}

static bool shape_linear_dw(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    const IrTensor *dy = IN(0), *x = IN(1);
    out->dtype = dy->dtype;
    out->ndim = 2;
    out->shape[0] = dy->shape[dy->ndim - 1];
    out->shape[1] = x->shape[x->ndim - 1];
    return true;
}

static bool shape_matmul_da(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    same_as(out, IN(0));
    out->shape[out->ndim - 1] = IN(1)->shape[IN(1)->ndim - 2];
    return true;
}

// a [.., M, K], dy [.., M, N] -> db [.., K, N], or [K, N] summed over every row when the
// forward's b was 2-D (shape= says so).
static bool shape_matmul_db(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    same_as(out, IN(1));
    if (n->attr.ndim == 2) {
        out->ndim = 2;
        out->shape[1] = IN(1)->shape[IN(1)->ndim - 1];
    }
    out->shape[out->ndim - 2] = IN(0)->shape[IN(0)->ndim - 1];
    return true;
}

// dy [.., size along axis, ..] -> dx of the forward input's shape (attr.shape); an acc
// input is of that shape and dtype.
static bool shape_slice_bwd(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    if (!shape_attr(g, n, out, err))
        return false;
    if (n->nin > 1 && n->in[1] >= 0 && (!ir_same_shape(IN(1), out) || IN(1)->dtype != out->dtype)) {
        snprintf(err->msg, sizeof err->msg, "slice_bwd: the sum so far is not of the gradient's shape and dtype");
        err->arg = 1;
        return false;
    }
    return true;
}

static bool shape_norm_dw(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    out->dtype = IN(0)->dtype;
    out->ndim = 1;
    out->shape[0] = IN(1)->shape[IN(1)->ndim - 1];
    return true;
}

static bool shape_attention_bwd(const IrGraph *g, const IrNode *n, IrTensor *out,
                                IrShapeErr *err) {
    (void)err;
    for (int k = 0; k < 3; k++)
        same_as(&out[k], IN(1 + k));
    return true;
}

// The dequantised weight: W's shape in the compute dtype.
static bool shape_dequant(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    same_as(out, IN(0));
    out->dtype = g->step.compute_dt;
    return true;
}

// Optimizer ops and OP_ACC / OP_ZERO update existing tensors of the input's size.
static bool shape_update(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    if (n->nin > 0)
        same_as(out, IN(0));
    return true;
}

// AdamW8bit: the parameter as the gradient; with 8-bit moments (a tensor of at least the
// step's adam8_min_elems elements) the codes u8 [2, n] and absmaxes f32 [2, blocks] too,
// else m and v as the gradient (out[1], out[2] left to shape_update's rule).
static bool shape_adamw8bit(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    shape_update(g, n, out, err);
    int64_t e = ir_tensor_elems(IN(0));
    if (e < g->step.adam8_min_elems)
        return true;
    out[1].dtype = DT_U8, out[1].ndim = 2, out[1].shape[0] = 2, out[1].shape[1] = e;
    out[2].dtype = DT_F32, out[2].ndim = 2, out[2].shape[0] = 2;
    out[2].shape[1] = (e + IR_ADAM8_BLOCK - 1) / IR_ADAM8_BLOCK;
    return true;
}

// The gradients' reduction and what the updates make of it: f32[2] each.
static bool shape_grad_pair(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)g, (void)n, (void)err;
    out->dtype = DT_F32;
    out->ndim = 1;
    out->shape[0] = 2;
    return true;
}

// Collectives over g->ranks: a sum keeps the shape; a reduce-scatter makes this rank's
// flat slice, an all-gather the flat whole (the shard pass gives it the tensor's shape).
static bool shape_collective(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    int64_t e = ir_tensor_elems(IN(0)), r = g->ranks > 0 ? g->ranks : 1;
    out->dtype = IN(0)->dtype;
    if (n->op == OP_ALL_REDUCE) {
        same_as(out, IN(0));
        return true;
    }
    if (n->op == OP_REDUCE_SCATTER && e % r) {
        snprintf(err->msg, sizeof err->msg, "%lld elements do not split over %lld ranks",
                 (long long)e, (long long)r);
        return false;
    }
    out->ndim = 1;
    out->shape[0] = n->op == OP_REDUCE_SCATTER ? e / r : e * r;
    return true;
}

// A fused node is made whole by the fuse pass, never through a shape rule: its output is
// its last step's.
static bool shape_fused(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err) {
    (void)err;
    const IrFused *f = &g->fused.at[n->fused];
    same_as(out, T(f->step[f->n - 1].out[0]));
    return true;
}

//
// FLOPs, bytes and scratch.
//

static int64_t flops_zero(const IrGraph *g, const IrNode *n) { (void)g, (void)n; return 0; }
static int64_t flops_elems(const IrGraph *g, const IrNode *n) { return elems_out(g, n); }
static int64_t flops_4elems(const IrGraph *g, const IrNode *n) { return 4 * elems_out(g, n); }
static int64_t flops_8elems(const IrGraph *g, const IrNode *n) { return 8 * elems_out(g, n); }
static int64_t flops_8in0(const IrGraph *g, const IrNode *n) { return 8 * elems_in0(g, n); }
static int64_t flops_adamw(const IrGraph *g, const IrNode *n) { return 12 * elems_in0(g, n); }
// AdamW's, and each moment's code: eight comparisons and a division, and the block's max.
static int64_t flops_adamw8bit(const IrGraph *g, const IrNode *n) { return 34 * elems_in0(g, n); }

static int64_t flops_linear(const IrGraph *g, const IrNode *n) {
    const IrTensor *x = IN(0), *w = IN(1);
    int64_t m = prod(x->shape, 0, x->ndim - 1), nn = w->shape[0], k = w->shape[1];
    return 2 * m * nn * k + (n->nin == 3 && n->in[2] >= 0 ? m * nn : 0);
}

// dx = dy W and dW = dyᵀ x: 2·M·N·K each, M the rows of dy.
static int64_t flops_linear_bwd(const IrGraph *g, const IrNode *n) {
    const IrTensor *dy = IN(0), *o = T(n->out[0]);
    int64_t m = prod(dy->shape, 0, dy->ndim - 1), nn = dy->shape[dy->ndim - 1];
    int64_t k = n->op == OP_LINEAR_DX ? o->shape[o->ndim - 1] : o->shape[1];
    return 2 * m * nn * k;
}

static int64_t flops_matmul(const IrGraph *g, const IrNode *n) {
    const IrTensor *a = IN(0), *b = IN(1);
    return 2 * prod(a->shape, 0, a->ndim) * b->shape[b->ndim - 1];
}

static int64_t flops_matmul_bwd(const IrGraph *g, const IrNode *n) {
    const IrTensor *x = IN(0), *y = IN(1);
    // da = dy·bᵀ: dy [.., M, N], b [.., K, N]; db = aᵀ·dy: a [.., M, K], dy [.., M, N]
    int64_t batch = prod(x->shape, 0, x->ndim - 2);
    int64_t m = x->shape[x->ndim - 2], p = x->shape[x->ndim - 1];
    int64_t q = n->op == OP_MATMUL_DA ? y->shape[y->ndim - 2] : y->shape[y->ndim - 1];
    return 2 * batch * m * p * q;
}

// QK^T and PV: 4·B·H·D per (query, key) pair; causal keeps S(S+1)/2 pairs, a window W
// at most W per query.
static int64_t attention_pairs(const IrTensor *q, const OpAttr *a) {
    int64_t s = q->shape[1], w = a->window;
    if (w <= 0 || w >= s)
        return a->causal ? s * (s + 1) / 2 : s * s;
    // causal: query i sees min(i + 1, w) keys; otherwise every key within w - 1 either way
    return a->causal ? w * (w + 1) / 2 + (s - w) * w : s * (2 * w - 1) - w * (w - 1);
}

static int64_t flops_attention(const IrGraph *g, const IrNode *n) {
    const IrTensor *q = IN(0);
    int64_t bh = q->shape[0] * q->shape[2], d = q->shape[3], pairs = attention_pairs(q, &n->attr);
    return 4 * bh * d * pairs + 5 * bh * pairs;   // + softmax
}

// Backward recomputes QKᵀ and forms dV, dP, dQ, dK: five GEMM-sized products.
static int64_t flops_attention_bwd(const IrGraph *g, const IrNode *n) {
    const IrTensor *q = IN(1);
    int64_t bh = q->shape[0] * q->shape[2], d = q->shape[3], pairs = attention_pairs(q, &n->attr);
    return 10 * bh * d * pairs + 8 * bh * pairs;
}

static int64_t flops_cross_entropy(const IrGraph *g, const IrNode *n) {
    return 4 * ir_tensor_elems(IN(0));
}

static int64_t flops_cross_entropy_bwd(const IrGraph *g, const IrNode *n) {
    return 4 * ir_tensor_elems(IN(1));
}

static int64_t flops_in0(const IrGraph *g, const IrNode *n) { return 8 * ir_tensor_elems(IN(0)); }

static int64_t read_embed(const IrGraph *g, const IrNode *n) {
    const IrTensor *ids = IN(1);
    return ir_tensor_bytes(ids) + dtype_bytes(IN(0)->dtype, ir_tensor_elems(T(n->out[0])));
}

static int64_t flops_fused(const IrGraph *g, const IrNode *n) {
    const IrFused *f = &g->fused.at[n->fused];
    int64_t sum = 0;
    for (int k = 0; k < f->n; k++)
        sum += op_flops(g, &f->step[k]);
    return sum;
}

static int64_t read_nothing(const IrGraph *g, const IrNode *n) { (void)g, (void)n; return 0; }

// A slice that is a view moves nothing; a copy reads its range.
static int64_t read_slice(const IrGraph *g, const IrNode *n) {
    const IrTensor *o = T(n->out[0]);
    return o->alias_of >= 0 ? 0 : dtype_bytes(IN(0)->dtype, ir_tensor_elems(o));
}

// The fused loss over R rows of x [R, K] against W [V, K], in chunks of C rows.
static int64_t loss_rows(const IrGraph *g, const IrNode *n) {
    const IrTensor *x = IN(0);
    return ir_tensor_elems(x) / x->shape[x->ndim - 1];
}

static int64_t loss_chunk(const IrGraph *g, const IrNode *n) {
    int64_t r = loss_rows(g, n);
    return n->attr.chunk_rows > 0 && n->attr.chunk_rows < r ? n->attr.chunk_rows : r;
}

// The logits' product and the loss over them; with the gradient, also dx and (when W
// trains) dW's products and the loss's gradient.
// The output fused-loss node n writes W's gradient into, or -1 (none: no gradient, or W
// does not train).
static int loss_dw_out(const IrNode *n) {
    return n->op == OP_LINEAR_CE_GRAD ? n->out[2] : n->op == OP_LINEAR_LOGPROBS_BWD ? n->out[1] : -1;
}
static bool loss_grads(const IrNode *n) { return n->op == OP_LINEAR_CE_GRAD || n->op == OP_LINEAR_LOGPROBS_BWD; }

static int64_t flops_linear_ce(const IrGraph *g, const IrNode *n) {
    int64_t r = loss_rows(g, n), v = IN(1)->shape[0], k = IN(1)->shape[1];
    int64_t products = !loss_grads(n) ? 1 : loss_dw_out(n) >= 0 ? 3 : 2;   // (before autodiff: 1)
    return products * 2 * r * v * k + (!loss_grads(n) ? 4 : 8) * r * v;
}

// Per chunk: the logits [C, V] = x_c [C, K] Wᵀ; with the gradient dx_c [C, K] = dlogits W
// and dW [V, K] += dlogitsᵀ x_c when W trains. None forms again what another formed.
static int gemm_loss(const IrGraph *g, const IrNode *n, int64_t dims[][3], bool *recompute) {
    int64_t c = loss_chunk(g, n), v = IN(1)->shape[0], k = IN(1)->shape[1];
    int np = 0;
    // (the log-probabilities' backward forms again the logits its forward formed)
    dims[np][0] = c, dims[np][1] = v, dims[np][2] = k, recompute[np++] = n->op == OP_LINEAR_LOGPROBS_BWD;
    if (!loss_grads(n))
        return np;
    dims[np][0] = c, dims[np][1] = k, dims[np][2] = v, recompute[np++] = false;
    if (loss_dw_out(n) >= 0)
        dims[np][0] = v, dims[np][1] = k, dims[np][2] = c, recompute[np++] = false;
    return np;
}

// The chunk's logits in x's dtype (the unfused linear's output dtype), then the rows'
// fp32 loss terms, then the count of valid targets, each 256-byte aligned (plan.h's
// plan_loss); then the workspace the GPU preset gives every GEMM, for the chunk's products.
static int64_t scratch_linear_ce(const IrGraph *g, const IrNode *n) {
    int64_t logits = dtype_bytes(IN(0)->dtype, loss_chunk(g, n) * IN(1)->shape[0]);
    return (logits + 255) / 256 * 256 + (4 * loss_rows(g, n) + 255) / 256 * 256 + 256 +
           (g->gemm_workspace_bytes + 255) / 256 * 256;
}

// Tensor t as the op contract sees it.
static OpOperand operand(const IrTensor *t) {
    return (OpOperand){t->name, (OpDType)t->dtype, dtype_name(t->dtype), t->ndim, t->shape,
                       ir_tensor_elems(t), dtype_bytes(t->dtype, ir_tensor_elems(t))};
}

// GEMM dimensions: the contract's product (op_gemm), M x K times K x N; the cost model
// prices a batched product per matrix, so a batch a shared 2-D weight folds into M
// (matmul, its da) stays out of it: M the output's rows per matrix, the batch the FLOPs'.
static void gemm_dims(const IrGraph *g, const IrNode *n, int64_t *m, int64_t *nn, int64_t *k) {
    const IrTensor *o = T(n->out[0]);
    OpOperand a = operand(IN(0)), b = operand(IN(1)), out = operand(o);
    OpGemm p;
    op_gemm(n->op, &a, &b, &out, &p);
    *m = p.M, *nn = p.N, *k = p.K;
    if (n->op == OP_MATMUL || n->op == OP_MATMUL_DA)
        *m = o->shape[o->ndim - 2];
}

// The loss's backward forms the fp32 gradient of each row chunk of logits it works on
// before storing it in the logits' dtype.
static int64_t scratch_cross_entropy(const IrGraph *g, const IrNode *n) {
    const IrTensor *lg = IN(0);
    int64_t v = lg->shape[lg->ndim - 1], rows = ir_tensor_elems(lg) / (v ? v : 1);
    if (n->attr.chunk_rows > 0 && n->attr.chunk_rows < rows)
        rows = n->attr.chunk_rows;
    return dtype_bytes(DT_F32, rows * v);
}

// A preference loss's rows' sums, counts and reference sums, then their gradients: doubles.
static int64_t scratch_preference(const IrGraph *g, const IrNode *n) { return 5 * 8 * IN(0)->shape[0]; }

// A GEMM runs as a library call (cuBLASLt) with the workspace the GPU preset gives it.
static int64_t scratch_gemm(const IrGraph *g, const IrNode *n) {
    (void)n;
    return g->gemm_workspace_bytes;
}

// The embedding gradient's index (ints): per id its end position, then the positions
// sorted by id (a deterministic gather on a GPU).
static int64_t scratch_embed_bwd(const IrGraph *g, const IrNode *n) {
    return 4 * (T(n->out[0])->shape[0] + 1 + ir_tensor_elems(IN(1)));
}

bool ir_attention_tiled(const IrGraph *g, const IrNode *n) {
    if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_BWD)   // (attention_decode: a warp a head)
        return false;
    bool fwd = n->op == OP_ATTENTION, bf16 = true;
    for (int i = 0; i < (fwd ? 3 : 5); i++)   // q, k, v (and dy, o): not lse, not the positions
        bf16 &= IN(i)->dtype == DT_BF16;
    for (int i = 0; i < (fwd ? 1 : 3); i++)   // o (dq, dk, dv): not lse
        bf16 &= T(n->out[i])->dtype == DT_BF16;
    return bf16 && op_attention_tiled(IN(fwd ? 0 : 1)->shape[3]);
}

// runtime/ops.h's layout: Di per query row, and for the tiled kernels the dq accumulator,
// its counters and GQA's partials.
static int64_t scratch_attention_bwd(const IrGraph *g, const IrNode *n) {
    const IrTensor *q = IN(1), *k = IN(2);
    int64_t off[5];
    return op_attention_bwd_layout(q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3],
                                   ir_attention_tiled(g, n), off);
}

// The loss's term per row (fp32), summed in a fixed order on a GPU.
// The sum of squares' per-block partials (sum, non-finite count), reduced in order.
static int64_t scratch_grad_sumsq(const IrGraph *g, const IrNode *n) {
    return 2 * 4 * op_sumsq_blocks(ir_tensor_elems(IN(0)));
}

static int64_t flops_2in0(const IrGraph *g, const IrNode *n) { return 2 * elems_in0(g, n); }

static int64_t scratch_rows_f32(const IrGraph *g, const IrNode *n) {
    return 4 * ir_tensor_elems(IN(1));
}

//
// The table.
//

#define I0 NEED_IN0
#define I1 NEED_IN1
#define I2 NEED_IN2
#define O NEED_OUT
#define A NEED_AUX
#define I3 NEED_IN3
#define ALL3 (I0 | I1 | I2 | O | A)

static const OpInfo ops[OP_COUNT] = {
    // forward ops, written in .ft
    [OP_EMBED] = {.shape = shape_embed, .flops = flops_zero, .bytes_read = read_embed,
                  .grad_needs = {I1}},
    [OP_LINEAR] = {.shape = shape_linear, .flops = flops_linear, .gemm = gemm_dims,
                   .grad_needs = {I1, I0}, .init = {0, 0, INIT_ZEROS},
                   .scratch_bytes = scratch_gemm},
    [OP_LINEAR_ACC] = {.shape = shape_linear_acc, .flops = flops_linear, .gemm = gemm_dims,
                       .grad_needs = {I1, I0, 0}, .scratch_bytes = scratch_gemm,
                       .inplace_in = 3},
    [OP_MATMUL] = {.shape = shape_matmul, .flops = flops_matmul, .gemm = gemm_dims,
                   .grad_needs = {I1, I0},
                   .scratch_bytes = scratch_gemm},
    [OP_ADD] = {.shape = shape_binary, .flops = flops_elems,
                .device = "y = x0 + x1;"},
    [OP_SUB] = {.shape = shape_binary, .flops = flops_elems,
                .device = "y = x0 - x1;"},
    [OP_MUL] = {.shape = shape_binary, .flops = flops_elems, .grad_needs = {I1, I0}, .device = "y = x0 * x1;"},
    [OP_DIV] = {.shape = shape_binary, .flops = flops_elems, .grad_needs = {I1, I0 | I1}, .device = "y = x0 / x1;"},
    [OP_SCALE] = {.shape = shape_unary, .flops = flops_elems,
                  .device = "y = x0 * c;"},
    [OP_SILU] = {.shape = shape_unary, .flops = flops_4elems, .grad_needs = {I0}, .device = "y = x0 / (1.0f + ftc_expf(-x0));"},
    [OP_GELU] = {.shape = shape_unary, .flops = flops_8elems, .grad_needs = {I0},
                 .device = "float inner = 0.7978845608028654f * (x0 + 0.044715f * (x0 * x0 * x0));"
                           " y = 0.5f * x0 * (1.0f + ftc_tanhf(inner));"},
    [OP_EXP] = {.shape = shape_unary, .flops = flops_elems, .grad_needs = {O}, .device = "y = ftc_expf(x0);"},
    [OP_RMSNORM] = {.shape = shape_norm, .flops = flops_4elems, .grad_needs = {I0 | I1 | A, I0 | A}, .init = {0, INIT_ONES}, .aux = "stats"},
    [OP_LAYERNORM] = {.shape = shape_norm, .flops = flops_8elems,
                      .grad_needs = {I0 | I1 | A, I0 | A, 0},
                      .init = {0, INIT_ONES, INIT_ZEROS}, .aux = "stats"},
    [OP_ROPE] = {.shape = shape_rope, .flops = flops_4elems, .grad_needs = {I1 | I2}},
    [OP_SOFTMAX] = {.shape = shape_unary, .flops = flops_4elems, .grad_needs = {O}},
    [OP_ATTENTION] = {.shape = shape_attention, .flops = flops_attention,
                      .grad_needs = {ALL3 | I3, ALL3 | I3, ALL3 | I3}, .aux = "lse"},
    [OP_ATTENTION_DECODE] = {.shape = shape_attention_decode, .flops = flops_attention_decode,
                             .bytes_read = read_attention_decode},
    [OP_VIEW] = {.shape = shape_view, .flops = flops_zero, .bytes_read = read_nothing},
    [OP_TRANSPOSE] = {.shape = shape_transpose, .flops = flops_zero},
    [OP_DROPOUT] = {.shape = shape_dropout, .flops = flops_elems, .grad_needs = {A}, .aux = "mask"},
    [OP_CROSS_ENTROPY] = {.shape = shape_cross_entropy, .flops = flops_cross_entropy,
                          .grad_needs = {I0 | I1 | I2},
                          .scratch_bytes = scratch_rows_f32},
    [OP_SLICE] = {.shape = shape_slice, .flops = flops_zero, .bytes_read = read_slice},
    [OP_CONCAT] = {.shape = shape_concat, .flops = flops_zero},
    [OP_TANH] = {.shape = shape_unary, .flops = flops_4elems, .grad_needs = {O}, .device = "y = ftc_tanhf(x0);"},
    [OP_SOFTCAP] = {.shape = shape_softcap, .flops = flops_4elems, .grad_needs = {O}, .device = "y = c * ftc_tanhf(x0 / c);"},
    [OP_GELU_EXACT] = {.shape = shape_unary, .flops = flops_8elems, .grad_needs = {I0},
                       .device = "y = 0.5f * x0 * (1.0f + ftc_erff(x0 * 0.70710678118654752f));"},
    [OP_ROPE_TABLE] = {.shape = shape_rope_table, .flops = flops_8elems},
    // (its gradient is formed in its own pass: backward reads nothing of it)
    [OP_LOGPROBS] = {.shape = shape_logprobs, .flops = flops_cross_entropy, .grad_needs = {I0 | I1}},
    [OP_PREFERENCE] = {.shape = shape_preference, .flops = flops_in0, .grad_needs = {I0 | I1 | I2 | I3},
                       .scratch_bytes = scratch_preference, .aux = "stats"},
    [OP_LINEAR_CE] = {.shape = shape_linear_ce, .flops = flops_linear_ce, .gemm_loss = gemm_loss,
                      .scratch_bytes = scratch_linear_ce},
    [OP_LINEAR_CE_GRAD] = {.shape = shape_linear_ce, .flops = flops_linear_ce, .gemm_loss = gemm_loss,
                           .scratch_bytes = scratch_linear_ce},
    [OP_LINEAR_LOGPROBS] = {.shape = shape_linear_logprobs, .flops = flops_linear_ce, .gemm_loss = gemm_loss,
                            .scratch_bytes = scratch_linear_ce, .grad_needs = {I0 | I1 | I2, I0 | I2}},
    [OP_LINEAR_LOGPROBS_BWD] = {.shape = shape_linear_logprobs, .flops = flops_linear_ce, .gemm_loss = gemm_loss,
                                .scratch_bytes = scratch_linear_ce},
    // backward ops
    [OP_EMBED_BWD] = {.shape = shape_attr, .flops = flops_elems, .scratch_bytes = scratch_embed_bwd},
    [OP_LINEAR_DX] = {.shape = shape_linear_dx, .flops = flops_linear_bwd, .gemm = gemm_dims,
                      .scratch_bytes = scratch_gemm, .inplace_in = 3, .acc_in = 3},
    [OP_LINEAR_DW] = {.shape = shape_linear_dw, .flops = flops_linear_bwd, .gemm = gemm_dims,
                      .scratch_bytes = scratch_gemm},
    [OP_SUM_TO] = {.shape = shape_attr, .flops = flops_elems},
    [OP_MATMUL_DA] = {.shape = shape_matmul_da, .flops = flops_matmul_bwd, .gemm = gemm_dims,
                      .scratch_bytes = scratch_gemm},
    [OP_MATMUL_DB] = {.shape = shape_matmul_db, .flops = flops_matmul_bwd, .gemm = gemm_dims,
                      .scratch_bytes = scratch_gemm},
    [OP_SILU_BWD] = {.shape = shape_like1, .flops = flops_8elems,
                     .device = "float s = 1.0f / (1.0f + ftc_expf(-x1));"
                               " y = x0 * (s * (1.0f + x1 * (1.0f - s)));"},
    [OP_GELU_BWD] = {.shape = shape_like1, .flops = flops_8elems,
                     .device = "float x2 = x1 * x1;"
                               " float t = ftc_tanhf(0.7978845608028654f * (x1 + 0.044715f * x2 * x1));"
                               " float di = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x2);"
                               " y = x0 * (0.5f * (1.0f + t) + 0.5f * x1 * (1.0f - t * t) * di);"},
    [OP_RMSNORM_DX] = {.shape = shape_norm_dx, .flops = flops_8elems, .inplace_in = 5, .acc_in = 5},
    [OP_RMSNORM_DW] = {.shape = shape_norm_dw, .flops = flops_8in0},
    [OP_LAYERNORM_DX] = {.shape = shape_like1, .flops = flops_8elems},
    [OP_LAYERNORM_DW] = {.shape = shape_norm_dw, .flops = flops_8in0},
    [OP_ROPE_BWD] = {.shape = shape_rope, .flops = flops_4elems},
    [OP_SOFTMAX_BWD] = {.shape = shape_like1, .flops = flops_4elems},
    [OP_ATTENTION_BWD] = {.shape = shape_attention_bwd, .flops = flops_attention_bwd,
                          .scratch_bytes = scratch_attention_bwd},
    [OP_DROPOUT_BWD] = {.shape = shape_like0, .flops = flops_elems,
                        .device = "y = x1 != 0.0f ? x0 * (1.0f / (1.0f - c)) : 0.0f;"},
    [OP_CROSS_ENTROPY_BWD] = {.shape = shape_like0, .flops = flops_cross_entropy,
                              .scratch_bytes = scratch_cross_entropy},
    [OP_LOGPROBS_BWD] = {.shape = shape_like1, .flops = flops_cross_entropy_bwd, .inplace_in = 2},
    [OP_PREFERENCE_BWD] = {.shape = shape_preference_bwd, .flops = flops_in0, .scratch_bytes = scratch_preference},
    [OP_SLICE_BWD] = {.shape = shape_slice_bwd, .flops = flops_zero, .inplace_in = 2, .acc_in = 2},
    [OP_TANH_BWD] = {.shape = shape_like1, .flops = flops_4elems, .device = "y = x0 * (1.0f - x1 * x1);"},
    [OP_SOFTCAP_BWD] = {.shape = shape_like1, .flops = flops_4elems,
                        .device = "float t = x1 / c; y = x0 * (1.0f - t * t);"},
    [OP_GELU_EXACT_BWD] = {.shape = shape_like1, .flops = flops_8elems,
                           .device = "float cdf = 0.5f * (1.0f + ftc_erff(x1 * 0.70710678118654752f));"
                                     " float pdf = ftc_expf(-0.5f * x1 * x1) * 0.39894228040143268f;"
                                     " y = x0 * (cdf + x1 * pdf);"},
    // storage
    [OP_COPY] = {.shape = shape_like0, .flops = flops_zero},
    [OP_DEQUANT] = {.shape = shape_dequant, .flops = flops_4elems},
    [OP_FUSED] = {.shape = shape_fused, .flops = flops_fused},
    [OP_ADD_RMSNORM] = {.shape = shape_add_norm, .flops = flops_4elems, .aux = "stats"},
    // optimizer ops
    [OP_ACC] = {.shape = shape_update, .flops = flops_elems, .device = "y = y + x0;"},
    [OP_ADAMW] = {.shape = shape_update, .flops = flops_adamw},
    [OP_ADAMW8BIT] = {.shape = shape_adamw8bit, .flops = flops_adamw8bit},
    [OP_SGD] = {.shape = shape_update, .flops = flops_elems},
    [OP_ZERO] = {.shape = shape_update, .flops = flops_zero, .device = "y = 0.0f;"},
    [OP_GRAD_SUMSQ] = {.shape = shape_grad_pair, .flops = flops_2in0, .scratch_bytes = scratch_grad_sumsq},
    [OP_GRAD_FACTOR] = {.shape = shape_grad_pair, .flops = flops_zero},
    // collectives
    [OP_ALL_REDUCE] = {.shape = shape_collective, .flops = flops_zero},
    [OP_REDUCE_SCATTER] = {.shape = shape_collective, .flops = flops_zero},
    [OP_ALL_GATHER] = {.shape = shape_collective, .flops = flops_zero},
};

const OpInfo *op_info(OpKind op) {
    IR_ASSERT(op >= 0 && op < OP_COUNT);
    return &ops[op];
}

bool op_lookup_user(const char *name, OpKind *out) {
    return op_find(name, out) && (op_desc(*out)->flags & OPF_USER);
}

// Every attribute keyword .ft knows, in the order an op takes them; an op has those whose
// bit its row declares. The first of a bit's keywords that is positional leads.
static const struct { unsigned bit; OpKeyword kw; } keywords[] = {
    {ATTR_F, {NULL, KW_NUMBER, true, KF_F, false}},   // the word is the op's f_key
    {ATTR_CAUSAL, {"causal", KW_BOOL, true, KF_CAUSAL, false}},
    {ATTR_SLICE, {"dim", KW_INT, true, KF_AXIS, false}},
    {ATTR_SLICE, {"start", KW_COUNT, true, KF_START, false}},
    {ATTR_SLICE, {"size", KW_COUNT, true, KF_SIZE, false}},
    {ATTR_AXIS, {"dim", KW_INT, true, KF_AXIS, false}},
    {ATTR_SHAPE, {"shape", KW_SHAPE, true, KF_SHAPE, false}},
    {ATTR_PERM, {"dims", KW_PAIR, true, KF_PERM, false}},
    {ATTR_WINDOW, {"window", KW_COUNT, false, KF_WINDOW, false}},
    {ATTR_SOFTCAP, {"softcap", KW_NUMBER, false, KF_SOFTCAP, false}},
    {ATTR_SCALE, {"scale", KW_NUMBER, false, KF_SCALE, false}},
    {ATTR_OFFSET, {"offset", KW_NUMBER, false, KF_OFFSET, false}},
    {ATTR_ROPE, {"rotary", KW_COUNT, false, KF_ROTARY, false}},
    {ATTR_ROPE, {"scaling", KW_WORD, false, KF_SCALING, false}},
    {ATTR_ROPE, {"factor", KW_NUMBER, false, KF_FACTOR, false}},
    {ATTR_ROPE, {"low_freq_factor", KW_NUMBER, false, KF_LOW, false}},
    {ATTR_ROPE, {"high_freq_factor", KW_NUMBER, false, KF_HIGH, false}},
    {ATTR_ROPE, {"beta_fast", KW_NUMBER, false, KF_LOW, false}},
    {ATTR_ROPE, {"beta_slow", KW_NUMBER, false, KF_HIGH, false}},
    {ATTR_ROPE, {"original_max", KW_COUNT, false, KF_ORIGINAL, false}},
    {ATTR_ROPE, {"length", KW_COUNT, false, KF_LENGTH, false}},
    {ATTR_ROPE, {"attention_factor", KW_NUMBER, false, KF_ATTN_FACTOR, false}},
    {ATTR_ROPE, {"truncate", KW_BOOL, false, KF_TRUNCATE, false}},
    {ATTR_PAD, {"padding", KW_COUNT, false, KF_PAD, false}},
};

int op_user_keywords(OpKind op, OpKeyword out[OP_MAX_KEYWORDS]) {
    const OpDesc *d = op_desc(op);
    int n = 0;
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++) {
        if (!(d->attrs & keywords[i].bit))
            continue;
        IR_ASSERT(n < OP_MAX_KEYWORDS);
        out[n] = keywords[i].kw;
        if (keywords[i].bit == ATTR_F)
            out[n].word = d->f_key;
        out[n].required = out[n].positional && !(d->flags & OPF_ATTR_OPTIONAL);
        n++;
    }
    return n;
}

int64_t op_flops(const IrGraph *g, const IrNode *n) { return ops[n->op].flops(g, n); }

int64_t op_bytes_read(const IrGraph *g, const IrNode *n) {
    if (ops[n->op].bytes_read)
        return ops[n->op].bytes_read(g, n);
    int64_t b = 0;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] >= 0)
            b += dtype_bytes(T(n->in[i])->dtype, ir_tensor_elems(T(n->in[i])));
    for (int k = 0; k < IR_MAX_OUTPUTS; k++)   // read-modify-write reads its outputs too
        if (n->out[k] >= 0 && (n->update & (1u << k)))
            b += dtype_bytes(T(n->out[k])->dtype, ir_tensor_elems(T(n->out[k])));
    return b;
}

int64_t op_bytes_written(const IrGraph *g, const IrNode *n) {
    int64_t b = 0;
    for (int k = 0; k < IR_MAX_OUTPUTS; k++)
        if (n->out[k] >= 0)
            b += ir_tensor_bytes(T(n->out[k]));   // a view writes nothing
    return b;
}
