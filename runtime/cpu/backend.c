// backend.c — the cpu backend: runs each plan instruction with the reference
// kernels of kernels.c. Tensors stored as bf16 or f16 are widened to fp32 scratch
// before a kernel and rounded back after it, so the arithmetic is fp32 and the
// storage is exactly what a bf16 plan stores. Its column of the op table (kernels[],
// keyed by the ops.def id) maps each op to its kernel; prepare() refuses a plan with an
// op missing from it. Every memory kind is plain memory, every stream runs in plan
// order, and events are no-ops: the executor's order is already a valid one.
#include "../runtime.h"
#include "adam8.h"
#include "blas.h"
#include "kernels.h"
#include "nf4.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// Operands of one instruction, as the kernels want them.
typedef struct Arg {
    const PlanBuffer *b;
    void *raw;          // the buffer's bytes
    float *f;           // fp32 view: raw itself for f32, else scratch
    int64_t n;          // elements
} Arg;

typedef struct CpuState CpuState;

typedef struct Call {
    Exec *x;
    CpuState *s;            // the launching backend's scratch
    const PlanInstr *in;
    Arg a[PLAN_MAX_IN];     // inputs
    Arg o[PLAN_MAX_OUT];    // outputs
    char *err;
    size_t errlen;
} Call;

typedef int (*Kernel)(Call *c);

struct CpuState {
    float *scratch;         // per-instruction fp32 scratch, grown as needed
    size_t cap, used;
};

static bool is_float(PlanDType t) { return t == PDT_F32 || t == PDT_BF16 || t == PDT_F16; }

static float *scratch(CpuState *s, int64_t n) {
    // prepare() sized the scratch for the largest instruction, so pointers handed out
    // earlier in an instruction stay valid: it never grows while one runs.
    if (s->used + (size_t)n + 16 > s->cap) {
        fprintf(stderr, "ftc: internal error: cpu scratch too small\n");
        abort();
    }
    float *p = s->scratch + s->used;
    s->used += ((size_t)n + 15) & ~(size_t)15;
    return p;
}

static void reserve(CpuState *s, size_t n) {
    if (n <= s->cap)
        return;
    free(s->scratch);
    s->cap = n * 2;
    s->scratch = malloc(s->cap * sizeof(float));
    if (!s->scratch) {
        fprintf(stderr, "ftc: out of memory (cpu scratch)\n");
        abort();
    }
}

// Storage to fp32 and back, over element ranges (rt_parallel_for: large tensors on every
// host thread, the same bits on any number).
typedef struct Conv {
    const Arg *a;
    float *f;
} Conv;

static void widen_part(void *ctx, int64_t lo, int64_t hi) {
    const Conv *c = ctx;
    const uint16_t *raw = c->a->raw;
    if (c->a->b->dtype == PDT_BF16)
        for (int64_t i = lo; i < hi; i++)
            c->f[i] = cpu_bf16_to_f32(raw[i]);
    else
        for (int64_t i = lo; i < hi; i++)
            c->f[i] = cpu_f16_to_f32(raw[i]);
}

static void narrow_part(void *ctx, int64_t lo, int64_t hi) {
    const Conv *c = ctx;
    uint16_t *raw = c->a->raw;
    if (c->a->b->dtype == PDT_BF16)
        for (int64_t i = lo; i < hi; i++)
            raw[i] = cpu_f32_to_bf16(c->f[i]);
    else if (c->a->b->dtype == PDT_F16)
        for (int64_t i = lo; i < hi; i++)
            raw[i] = cpu_f32_to_f16(c->f[i]);
}

static void widen(float *dst, const Arg *a) { rt_parallel_for(a->n, widen_part, &(Conv){a, dst}); }
static void narrow(const Arg *a) { rt_parallel_for(a->n, narrow_part, &(Conv){a, a->f}); }

static int fail(Call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Call *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

// Shape helpers: rows = product of all dims but the last; last = the last dim.
static int64_t last_dim(const PlanBuffer *b) { return b->ndim ? b->shape[b->ndim - 1] : 1; }
static int64_t rows(const PlanBuffer *b) { return last_dim(b) ? plan_elems(b) / last_dim(b) : 0; }

#define IN(k) (c->a[k].f)
#define OUT(k) (c->o[k].f)
#define RAW(k) (c->a[k].raw)
#define B(k) (c->a[k].b)
#define OB(k) (c->o[k].b)
#define N(k) (c->a[k].n)
#define ON(k) (c->o[k].n)
#define UPDATE(k) ((c->in->update >> (k)) & 1u)

// Kernels that accumulate (+=) start from zero when the plan assigns.
static void zero_unless_update(Call *c, int k) {
    if (!UPDATE(k))
        memset(OUT(k), 0, sizeof(float) * (size_t)ON(k));
}

static int status(Call *c, int st) {
    if (st == CPU_OK)
        return 0;
    return fail(c, st == CPU_ERR_INDEX ? "a token id or target is outside the vocabulary"
                                       : "invalid argument");
}

//
// Forward ops.
//

static int k_embed(Call *c) {
    int64_t C = last_dim(OB(0)), V = B(0)->shape[0];
    return status(c, cpu_embedding_forward(OUT(0), RAW(1), IN(0), (size_t)N(1), (size_t)V, (size_t)C));
}

// The product GEMM instruction c runs: the op contract's (op_gemm).
static OpGemm gemm_of(Call *c) {
    const Plan *p = c->x->plan;
    OpOperand a = plan_operand(p, c->in->in[0]), b = plan_operand(p, c->in->in[1]),
              o = plan_operand(p, c->in->out[0]);
    OpGemm g;
    op_gemm(c->in->op, &a, &b, &o, &g);
    return g;
}

static int k_linear(Call *c) {
    OpGemm g = gemm_of(c);
    cpu_linear_forward(OUT(0), IN(0), IN(1), c->in->nin > 2 && c->in->in[2] >= 0 ? IN(2) : NULL,
                       (size_t)g.M, (size_t)g.K, (size_t)g.N);
    return 0;
}

// y + scale x W^T: y's values, then the product added in (BLAS's beta = 1, alpha = scale).
static int k_linear_acc(Call *c) {
    OpGemm g = gemm_of(c);
    memcpy(OUT(0), IN(2), sizeof(float) * (size_t)ON(0));
    cpu_gemm_scaled(g.ta, g.tb, (size_t)g.M, (size_t)g.N, (size_t)g.K, (float)c->in->attr.f, IN(0), IN(1),
                    1.0f, OUT(0));
    return 0;
}

static int k_matmul(Call *c) {
    OpGemm g = gemm_of(c);
    cpu_matmul_forward(OUT(0), IN(0), IN(1), (size_t)g.batch, (size_t)g.M, (size_t)g.K, (size_t)g.N);
    return 0;
}

// a op b with b's shape a suffix of a's: the kernel runs once per repetition of b.
static int binary(Call *c, void (*f)(float *, const float *, const float *, size_t)) {
    int64_t nb = N(1), reps = N(0) / nb;
    for (int64_t r = 0; r < reps; r++)
        f(OUT(0) + r * nb, IN(0) + r * nb, IN(1), (size_t)nb);
    return 0;
}

static int k_add(Call *c) { return binary(c, cpu_add_forward); }
static int k_sub(Call *c) { return binary(c, cpu_sub_forward); }
static int k_mul(Call *c) { return binary(c, cpu_mul_forward); }
static int k_div(Call *c) { return binary(c, cpu_div_forward); }

static int k_scale(Call *c) { cpu_scale_forward(OUT(0), IN(0), (float)c->in->attr.f, (size_t)N(0)); return 0; }
static int k_silu(Call *c) { cpu_silu_forward(OUT(0), IN(0), (size_t)N(0)); return 0; }
static int k_gelu(Call *c) { cpu_gelu_forward(OUT(0), IN(0), (size_t)N(0)); return 0; }
static int k_exp(Call *c) { cpu_exp_forward(OUT(0), IN(0), (size_t)N(0)); return 0; }
static int k_tanh(Call *c) { cpu_tanh_forward(OUT(0), IN(0), (size_t)N(0)); return 0; }
static int k_softcap(Call *c) { cpu_softcap_forward(OUT(0), IN(0), (float)c->in->attr.f, (size_t)N(0)); return 0; }
static int k_gelu_exact(Call *c) { cpu_gelu_exact_forward(OUT(0), IN(0), (size_t)N(0)); return 0; }

// A tensor as (outer, dim, inner) around dimension `axis`.
static void around(const PlanBuffer *b, int axis, size_t *outer, size_t *dim, size_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < b->ndim; d++)
        if (d < axis)
            *outer *= (size_t)b->shape[d];
        else if (d > axis)
            *inner *= (size_t)b->shape[d];
    *dim = (size_t)b->shape[axis];
}

// A slice whose output is a view of the input's bytes moves nothing.
static int k_slice(Call *c) {
    if (OB(0)->view >= 0)
        return 0;
    size_t outer, dim, inner;
    around(B(0), c->in->attr.axis, &outer, &dim, &inner);
    cpu_slice_forward(OUT(0), IN(0), outer, dim, inner, (size_t)c->in->attr.start,
                      (size_t)c->in->attr.size);
    return 0;
}

static int k_concat(Call *c) {
    const float *x[PLAN_MAX_IN];
    size_t dims[PLAN_MAX_IN], outer, dim, inner;
    for (int k = 0; k < c->in->nin; k++) {
        x[k] = IN(k);
        dims[k] = (size_t)B(k)->shape[c->in->attr.axis];
    }
    around(OB(0), c->in->attr.axis, &outer, &dim, &inner);
    cpu_concat_forward(OUT(0), x, dims, (size_t)c->in->nin, outer, inner);
    return 0;
}

static int k_rmsnorm(Call *c) {
    cpu_rmsnorm_forward(OUT(0), OUT(1), IN(0), IN(1), (size_t)rows(B(0)), (size_t)last_dim(B(0)),
                        (float)c->in->attr.f, (float)c->in->attr.offset);
    return 0;
}

static int k_layernorm(Call *c) {
    int64_t r = rows(B(0));
    cpu_layernorm_forward(OUT(0), OUT(1), OUT(1) + r, IN(0), IN(1), IN(2), (size_t)r,
                          (size_t)last_dim(B(0)), (float)c->in->attr.f);
    return 0;
}

// Rope's optional position ids (in[1], i32 [B, S]), NULL when the plan gives none.
static const int32_t *positions(Call *c) {
    return c->in->nin > 1 && c->in->in[1] >= 0 ? RAW(1) : NULL;
}

static int k_rope(Call *c) {
    const int64_t *s = B(0)->shape;
    return status(c, cpu_rope_forward(OUT(0), IN(0), positions(c), (size_t)s[0], (size_t)s[1], (size_t)s[2],
                                      (size_t)s[3], c->in->attr.f, &c->in->attr.rope));
}

static int k_softmax(Call *c) {
    cpu_softmax_forward(OUT(0), IN(0), (size_t)rows(B(0)), (size_t)last_dim(B(0)));
    return 0;
}

static int k_attention(Call *c) {
    const int64_t *q = B(0)->shape;
    float *row = scratch(c->s, q[1]);
    const int32_t *pos = c->in->nin > 3 && c->in->in[3] >= 0 ? RAW(3) : NULL;
    return status(c, cpu_attention_forward(OUT(0), OUT(1), row, IN(0), IN(1), IN(2), (size_t)q[0],
                                           (size_t)q[1], (size_t)q[2], (size_t)B(1)->shape[2],
                                           (size_t)q[3], c->in->attr.causal, (size_t)c->in->attr.window,
                                           (float)c->in->attr.softcap, c->in->attr.scale, pos));
}

static int k_attention_decode(Call *c) {
    const int64_t *q = B(0)->shape, L = OB(1)->shape[1];
    int st = cpu_attention_decode(OUT(0), OUT(1), OUT(2), scratch(c->s, L), IN(0), IN(1), IN(2), RAW(3),
                                  (size_t)q[0], (size_t)L, (size_t)q[2], (size_t)B(1)->shape[2], (size_t)q[3],
                                  (size_t)c->in->attr.window, (float)c->in->attr.softcap, c->in->attr.scale);
    return st == CPU_ERR_INDEX ? fail(c, "the position is outside the KV cache") : status(c, st);
}

// A view shares its base's bytes: nothing to run.
static int k_view(Call *c) { (void)c; return 0; }

// Swaps dims perm[0] and perm[1]: the output index (…, i, …, j, …) reads input (…, j, …, i, …).
static int k_transpose(Call *c) {
    const PlanBuffer *x = B(0);
    int nd = x->ndim, a = c->in->attr.perm[0], b = c->in->attr.perm[1];
    int64_t in_stride[PLAN_MAX_DIMS], idx[PLAN_MAX_DIMS] = {0};
    in_stride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--)
        in_stride[d] = in_stride[d + 1] * x->shape[d + 1];
    const int64_t *oshape = OB(0)->shape;
    for (int64_t o = 0; o < ON(0); o++) {
        int64_t src = 0;
        for (int d = 0; d < nd; d++)
            src += idx[d] * in_stride[d == a ? b : d == b ? a : d];
        OUT(0)[o] = IN(0)[src];
        for (int d = nd - 1; d >= 0 && ++idx[d] == oshape[d]; d--)
            idx[d] = 0;
    }
    return 0;
}

static int k_dropout(Call *c) {
    uint8_t *mask = c->in->nout > 1 ? c->o[1].raw : NULL;
    return status(c, cpu_dropout_forward(OUT(0), mask, IN(0), (size_t)N(0), (float)c->in->attr.f,
                                         rt_random_stream(c->x, c->in), 0));
}

// The step's trained targets when the loss has a count input, else -1.
static int64_t target_count(Call *c) {
    if (c->in->nin < 3 || c->in->in[2] < 0)
        return -1;
    int32_t n = ((const int32_t *)RAW(2))[0];
    return n < 0 ? 0 : n;
}

static int k_cross_entropy(Call *c) {
    int64_t V = last_dim(B(0)), count = target_count(c);
    if (count < 0)
        return status(c, cpu_cross_entropy_forward(OUT(0), NULL, IN(0), RAW(1), (size_t)rows(B(0)),
                                                   (size_t)V));
    double sum = 0.0;   // this micro-batch's share of the step's mean
    int st = cpu_cross_entropy_forward_rows(&sum, NULL, IN(0), RAW(1), (size_t)rows(B(0)), (size_t)V);
    OUT(0)[0] = count > 0 ? (float)(sum / (double)count) : 0.0f;
    return status(c, st);
}

static int k_logprobs(Call *c) {
    return status(c, cpu_logprobs(OUT(0), IN(0), RAW(1), (size_t)rows(B(0)), (size_t)last_dim(B(0))));
}

// A preference loss and (preference_bwd) its gradient, over the step's pairs and chosen
// targets (the count input), times the run's loss scale.
static int k_preference(Call *c) {
    const PlanInstr *in = c->in;
    const PlanBuffer *lp = B(0);
    const int32_t *cnt = RAW(2);
    bool ref = in->nin > 3 && in->in[3] >= 0;
    CpuPref p = {in->attr.pref.kind, in->attr.f, in->attr.pref.smoothing, in->attr.pref.gamma, in->attr.pref.alpha};
    int64_t S = lp->ndim > 1 ? plan_elems(lp) / lp->shape[0] : 1;
    bool bwd = in->op == OP_PREFERENCE_BWD;
    float loss, *stats = !bwd && in->nout > 1 ? OUT(1) : NULL;
    return status(c, cpu_preference(bwd ? &loss : OUT(0), stats, bwd ? OUT(0) : NULL, IN(0), RAW(1),
                                    ref ? IN(3) : NULL, ref && B(3)->ndim == 1 && lp->ndim > 1,
                                    (size_t)lp->shape[0], (size_t)S, cnt[0], cnt[1], &p,
                                    (float)c->x->loss_scale));
}

//
// Backward ops.
//

static int k_embed_bwd(Call *c) {
    zero_unless_update(c, 0);
    int64_t C = last_dim(B(0)), V = OB(0)->shape[0];
    return status(c, cpu_embedding_backward(OUT(0), IN(0), RAW(1), (size_t)rows(B(0)), (size_t)V,
                                            (size_t)C, c->in->attr.pad - 1));
}

// The scale of a linear_dx or linear_dw (0: none): BLAS's alpha, as cuBLASLt's.
static float gemm_scale(const Call *c) { return c->in->attr.f != 0 ? (float)c->in->attr.f : 1.0f; }

// dx = scale dy W, added into acc (BLAS's beta = 1) where the instruction has one.
static int k_linear_dx(Call *c) {
    OpGemm g = gemm_of(c);
    bool acc = c->in->nin > 2 && c->in->in[2] >= 0;
    if (acc)
        memcpy(OUT(0), IN(2), sizeof(float) * (size_t)ON(0));
    cpu_gemm_scaled(g.ta, g.tb, (size_t)g.M, (size_t)g.N, (size_t)g.K, gemm_scale(c), IN(0), IN(1),
                    acc ? 1.0f : 0.0f, OUT(0));
    return 0;
}

static int k_linear_dw(Call *c) {   // dW += scale dyT x
    zero_unless_update(c, 0);
    OpGemm g = gemm_of(c);
    cpu_gemm_scaled(g.ta, g.tb, (size_t)g.M, (size_t)g.N, (size_t)g.K, gemm_scale(c), IN(0), IN(1), 1.0f,
                    OUT(0));
    return 0;
}

// Sums dy over its leading dims down to the output's shape, in double, row order.
static int k_sum_to(Call *c) {
    zero_unless_update(c, 0);
    int64_t n = ON(0), reps = N(0) / n;
    for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t r = 0; r < reps; r++)
            s += IN(0)[r * n + j];
        OUT(0)[j] += (float)s;
    }
    return 0;
}

// (cpu_matmul_backward names the dims as the forward's: a [M, K], b [K, N], dy [M, N].)
static int k_matmul_da(Call *c) {   // dy [.., M, N], b [.., K, N] or [K, N] -> da [.., M, K]
    OpGemm g = gemm_of(c);   // da[M,K] = dy[M,N] b^T: the product's K the forward's N
    cpu_matmul_backward(OUT(0), NULL, IN(0), NULL, IN(1), (size_t)g.batch, (size_t)g.M, (size_t)g.N,
                        (size_t)g.K);
    return 0;
}

static int k_matmul_db(Call *c) {   // a [.., M, K], dy [.., M, N] -> db [.., K, N] or [K, N] (+=)
    zero_unless_update(c, 0);
    OpGemm g = gemm_of(c);   // db[K,N] = a^T dy: the product's M the forward's K, its K the M
    cpu_matmul_backward(NULL, OUT(0), IN(1), IN(0), NULL, (size_t)g.batch, (size_t)g.K, (size_t)g.M,
                        (size_t)g.N);
    return 0;
}

static int k_silu_bwd(Call *c) { cpu_silu_backward(OUT(0), IN(0), IN(1), (size_t)N(0)); return 0; }
static int k_gelu_bwd(Call *c) { cpu_gelu_backward(OUT(0), IN(0), IN(1), (size_t)N(0)); return 0; }

static void round_to(float *v, int64_t n, PlanDType t) {
    if (t == PDT_BF16)
        for (int64_t i = 0; i < n; i++)
            v[i] = cpu_bf16_to_f32(cpu_f32_to_bf16(v[i]));
    else if (t == PDT_F16)
        for (int64_t i = 0; i < n; i++)
            v[i] = cpu_f16_to_f32(cpu_f32_to_f16(v[i]));
}

// dx; with acc, acc + dx, dx rounded to the output's dtype first (as the add it replaces).
// (The output may be acc's own bytes: dx is formed apart first.)
static int k_rmsnorm_dx(Call *c) {
    bool acc = c->in->nin > 4 && c->in->in[4] >= 0;
    float *dx = acc ? xmalloc(sizeof(float) * (size_t)(ON(0) + 1)) : OUT(0);
    if (!dx)
        return fail(c, "out of memory");
    cpu_rmsnorm_backward(dx, NULL, IN(0), IN(1), IN(2), IN(3), (size_t)rows(B(1)), (size_t)last_dim(B(1)),
                         (float)c->in->attr.offset);
    if (acc) {
        round_to(dx, ON(0), OB(0)->dtype);
        for (int64_t i = 0; i < ON(0); i++)
            OUT(0)[i] = IN(4)[i] + dx[i];
        free(dx);
    }
    return 0;
}

static int k_rmsnorm_dw(Call *c) {
    zero_unless_update(c, 0);
    cpu_rmsnorm_backward(NULL, OUT(0), IN(0), IN(1), NULL, IN(2), (size_t)rows(B(1)),
                         (size_t)last_dim(B(1)), (float)c->in->attr.offset);
    return 0;
}

static int k_layernorm_dx(Call *c) {
    int64_t r = rows(B(1));
    cpu_layernorm_backward(OUT(0), NULL, NULL, IN(0), IN(1), IN(2), IN(3), IN(3) + r, (size_t)r,
                           (size_t)last_dim(B(1)));
    return 0;
}

static int k_layernorm_dw(Call *c) {
    zero_unless_update(c, 0);
    int64_t r = rows(B(1));
    cpu_layernorm_backward(NULL, OUT(0), NULL, IN(0), IN(1), NULL, IN(2), IN(2) + r, (size_t)r,
                           (size_t)last_dim(B(1)));
    return 0;
}

static int k_rope_bwd(Call *c) {
    const int64_t *s = B(0)->shape;
    return status(c, cpu_rope_backward(OUT(0), IN(0), positions(c), (size_t)s[0], (size_t)s[1], (size_t)s[2],
                                       (size_t)s[3], c->in->attr.f, &c->in->attr.rope));
}

static int k_softmax_bwd(Call *c) {
    cpu_softmax_backward(OUT(0), IN(0), IN(1), (size_t)rows(B(1)), (size_t)last_dim(B(1)));
    return 0;
}

static int k_attention_bwd(Call *c) {
    const int64_t *q = B(1)->shape;
    const int32_t *pos = c->in->nin > 6 && c->in->in[6] >= 0 ? RAW(6) : NULL;
    return status(c, cpu_attention_backward(OUT(0), OUT(1), OUT(2), IN(0), IN(1), IN(2), IN(3),
                                            IN(4), IN(5), (size_t)q[0], (size_t)q[1], (size_t)q[2],
                                            (size_t)B(2)->shape[2], (size_t)q[3], c->in->attr.causal,
                                            (size_t)c->in->attr.window, (float)c->in->attr.softcap,
                                            c->in->attr.scale, pos));
}

static int k_dropout_bwd(Call *c) {
    return status(c, cpu_dropout_backward(OUT(0), IN(0), RAW(1), (size_t)N(0), (float)c->in->attr.f, 0, 0));
}

static int k_slice_bwd(Call *c) {
    size_t outer, dim, inner;
    around(OB(0), c->in->attr.axis, &outer, &dim, &inner);
    bool acc = c->in->nin > 1 && c->in->in[1] >= 0;   // acc + dy's range: the sum so far first
    if (acc && OUT(0) != IN(1))
        memmove(OUT(0), IN(1), sizeof(float) * (size_t)N(1));
    cpu_slice_backward(OUT(0), IN(0), outer, dim, inner, (size_t)c->in->attr.start,
                       (size_t)c->in->attr.size, (int)UPDATE(0) || acc);
    return 0;
}

static int k_tanh_bwd(Call *c) { cpu_tanh_backward(OUT(0), IN(0), IN(1), (size_t)N(0)); return 0; }
static int k_softcap_bwd(Call *c) {
    cpu_softcap_backward(OUT(0), IN(0), IN(1), (float)c->in->attr.f, (size_t)N(0));
    return 0;
}
static int k_gelu_exact_bwd(Call *c) { cpu_gelu_exact_backward(OUT(0), IN(0), IN(1), (size_t)N(0)); return 0; }

static int k_logprobs_bwd(Call *c) {
    return status(c, cpu_logprobs_backward(OUT(0), IN(0), IN(1), RAW(2), (size_t)rows(B(1)),
                                           (size_t)last_dim(B(1))));
}

static int k_cross_entropy_bwd(Call *c) {
    int64_t V = last_dim(B(0)), count = target_count(c);
    // the loss's scale (1 / accumulation steps, or 1 over the step's target count), times
    // the run's loss scale (fp16)
    float dloss = (float)c->in->attr.f * (float)c->x->loss_scale;   // fp32, as the kernels
    if (count < 0)
        return status(c, cpu_cross_entropy_backward(OUT(0), IN(0), RAW(1), (size_t)rows(B(0)),
                                                    (size_t)V, dloss));
    return status(c, cpu_cross_entropy_backward_rows(OUT(0), IN(0), RAW(1), (size_t)rows(B(0)), (size_t)V,
                                                     dloss, (size_t)count));
}


// s = a + b rounded to s's dtype, as the add would store it, then rmsnorm of s.
static int k_add_rmsnorm(Call *c) {
    float *s = OUT(2);
    for (int64_t i = 0; i < ON(2); i++)
        s[i] = IN(0)[i] + IN(1)[i];
    round_to(s, ON(2), OB(2)->dtype);
    cpu_rmsnorm_forward(OUT(0), OUT(1), s, IN(2), (size_t)rows(B(0)), (size_t)last_dim(B(0)),
                        (float)c->in->attr.f, (float)c->in->attr.offset);
    return 0;
}

// The fused loss with its gradient, chunk by chunk, never more than a chunk of logits at
// once: the chunk's logits x_c Wᵀ rounded to x's dtype (as the unfused linear stores
// them), the loss's rows on them in row order (in double, as the unfused cross entropy
// sums it), their gradient in place (rounded to x's dtype, as the unfused loss's gradient
// is stored), the chunk's rows of dx, and dW += its part (in fp32 over the chunks,
// rounded once at the end). linear_cross_entropy: the loss alone, by the same steps.
static int k_linear_ce_grad(Call *c) {
    bool grad = c->in->op == OP_LINEAR_CE_GRAD;
    PlanLoss l = plan_loss(c->x->plan, c->in);
    const int32_t *tg = RAW(2);
    float *lg = scratch(c->s, l.chunk * l.vocab), *dw = c->in->nout > 2 ? OUT(2) : NULL;
    if (dw)
        zero_unless_update(c, 2);
    int64_t counted = -1;   // the step's trained targets, when the loss has them
    if (c->in->nin > 3 && c->in->in[3] >= 0)
        counted = ((const int32_t *)RAW(3))[0] < 0 ? 0 : ((const int32_t *)RAW(3))[0];
    size_t valid = counted >= 0 ? (size_t)counted : cpu_cross_entropy_count_valid(tg, (size_t)l.rows);
    double sum = 0.0;
    for (int64_t r0 = 0; r0 < l.rows; r0 += l.chunk) {
        const float *xc = IN(0) + r0 * l.k;
        cpu_linear_forward(lg, xc, IN(1), NULL, (size_t)l.chunk, (size_t)l.k, (size_t)l.vocab);
        round_to(lg, l.chunk * l.vocab, B(0)->dtype);
        int st = cpu_cross_entropy_forward_rows(&sum, NULL, lg, tg + r0, (size_t)l.chunk, (size_t)l.vocab);
        if (!grad) {
            if (st != CPU_OK)
                return status(c, st);
            continue;
        }
        if (st == CPU_OK)   // the loss's scale: 1 / accumulation steps, times the run's (fp16)
            st = cpu_cross_entropy_backward_rows(lg, lg, tg + r0, (size_t)l.chunk, (size_t)l.vocab,
                                                 (float)c->in->attr.f * (float)c->x->loss_scale, valid);
        if (st != CPU_OK)
            return status(c, st);
        round_to(lg, l.chunk * l.vocab, B(0)->dtype);
        cpu_linear_backward(OUT(1) + r0 * l.k, dw, NULL, lg, xc, IN(1), (size_t)l.chunk, (size_t)l.k,
                            (size_t)l.vocab);
    }
    OUT(0)[0] = counted < 0 ? (float)(sum / (double)valid) : valid > 0 ? (float)(sum / (double)valid) : 0.0f;
    return 0;
}

// The fused linear + logprobs and its backward, chunk by chunk as the fused loss: the
// chunk's logits x_c Wᵀ rounded to x's dtype (as the unfused linear stores them); forward
// their targets' log-probabilities; backward their gradient dlp (onehot - softmax) in place,
// rounded to x's dtype (as the unfused backward stores it), the chunk's rows of dx and dW +=
// its part (fp32 over the chunks, rounded once at the end).
static int k_linear_logprobs(Call *c) {
    bool grad = c->in->op == OP_LINEAR_LOGPROBS_BWD;
    PlanLoss l = plan_loss(c->x->plan, c->in);
    const int32_t *tg = RAW(2);
    float *lg = scratch(c->s, l.chunk * l.vocab), *dw = grad && c->in->nout > 1 ? OUT(1) : NULL;
    if (dw)
        zero_unless_update(c, 1);
    for (int64_t r0 = 0; r0 < l.rows; r0 += l.chunk) {
        const float *xc = IN(0) + r0 * l.k;
        cpu_linear_forward(lg, xc, IN(1), NULL, (size_t)l.chunk, (size_t)l.k, (size_t)l.vocab);
        round_to(lg, l.chunk * l.vocab, B(0)->dtype);
        int st = grad ? cpu_logprobs_backward(lg, IN(3) + r0, lg, tg + r0, (size_t)l.chunk, (size_t)l.vocab)
                      : cpu_logprobs(OUT(0) + r0, lg, tg + r0, (size_t)l.chunk, (size_t)l.vocab);
        if (st != CPU_OK)
            return status(c, st);
        if (!grad)
            continue;
        round_to(lg, l.chunk * l.vocab, B(0)->dtype);
        cpu_linear_backward(OUT(0) + r0 * l.k, dw, NULL, lg, xc, IN(1), (size_t)l.chunk, (size_t)l.k,
                            (size_t)l.vocab);
    }
    return 0;
}

//
// Storage.
//

// W (NF4) to the compute dtype: absmax, or its double-quantised codes, scales, mean.
static int k_dequant(Call *c) {
    size_t n = (size_t)ON(0), blocks = cpu_nf4_blocks(n);
    if (c->in->nin == 2) {
        cpu_nf4_dequantize(OUT(0), RAW(0), IN(1), n);
        return 0;
    }
    float *absmax = scratch(c->s, (int64_t)blocks);
    cpu_nf4_dequantize_absmax(absmax, RAW(1), IN(2), IN(3)[0], blocks);
    cpu_nf4_dequantize(OUT(0), RAW(0), absmax, n);
    return 0;
}

//
// Optimizer ops.
//

static void acc_part(void *ctx, int64_t lo, int64_t hi) {
    Call *c = ctx;
    for (int64_t i = lo; i < hi; i++)
        OUT(0)[i] += IN(0)[i];
}

static int k_acc(Call *c) {
    rt_parallel_for(ON(0), acc_part, c);
    return 0;
}

static int k_rope_table(Call *c) {
    return status(c, cpu_rope_table(OUT(0), (size_t)c->in->attr.shape[0], c->in->attr.f, &c->in->attr.rope));
}

static int k_zero(Call *c) {
    memset(OUT(0), 0, sizeof(float) * (size_t)ON(0));
    return 0;
}

// The gradients' reduction: out = (sum of squares, non-finite count), added over the
// gradients one by one (the first assigns).
static int k_grad_sumsq(Call *c) {
    double s;
    size_t bad;
    cpu_sumsq(IN(0), (size_t)N(0), &s, &bad);
    zero_unless_update(c, 0);
    OUT(0)[0] += (float)s;
    OUT(0)[1] += (float)bad;
    return 0;
}

static int k_grad_factor(Call *c) {
    cpu_grad_factor(c->in->nin ? IN(0) : NULL, c->x->loss_scale, c->in->attr.f, OUT(0));
    return 0;
}

// The parameter (and its master copy, when the plan keeps one) after an update: the
// master is updated in fp32 and the weight is its rounding; without a master, out[3] may
// be the weight's Kahan compensation (bf16_pure). in[1] is the step's gradient factor:
// a skipped step (factor[1] set) leaves everything as it was.
static float *master_of(Call *c, int k) {
    return c->in->nout > k && !strcmp(OB(k)->category, "master") ? OUT(k) : NULL;
}
static bool skipped(Call *c) { return IN(1)[1] != 0.0f; }
// A skipped update still writes its weight output (which may be a staging buffer a copy
// takes to the device): the master's rounding, as an update would. Without a master the
// weight is updated in place and stays as it was.
static int skip_update(Call *c, float *master) {
    if (master)
        memcpy(OUT(0), master, sizeof(float) * (size_t)ON(0));
    return 0;
}

// Elements [lo, hi) of a parameter updated by `step`, a slice at a time: with a Kahan
// compensation (out[3], bf16_pure) 1024 elements, their weights kept before the update
// and compensated after it; else the whole range at once. The weight output is then the
// master's rounding, where the plan keeps a master.
typedef void UpdateSlice(Call *c, float *w, int64_t a, int64_t b, const void *arg);
static void update_range(Call *c, int64_t lo, int64_t hi, UpdateSlice *step, const void *arg) {
    float *master = master_of(c, 3), *w = master ? master : OUT(0);
    float *comp = !master && c->in->nout > 3 ? OUT(3) : NULL;
    int64_t slice = comp ? 1024 : hi - lo;
    for (int64_t a = lo; a < hi; a += slice) {
        int64_t b = hi - a > slice ? a + slice : hi;
        float old[1024];
        if (comp)
            memcpy(old, w + a, sizeof(float) * (size_t)(b - a));
        step(c, w, a, b, arg);
        if (comp)
            cpu_kahan(w + a, old, comp + a, (size_t)(b - a), OB(0)->dtype == PDT_F16);
    }
    if (master && hi > lo)
        memcpy(OUT(0) + lo, master + lo, sizeof(float) * (size_t)(hi - lo));
}

static void adamw_slice(Call *c, float *w, int64_t a, int64_t b, const void *arg) {
    (void)arg;
    const Plan *p = c->x->plan;
    cpu_adamw_step(w + a, IN(0) + a, IN(1)[0], OUT(1) + a, OUT(2) + a, (size_t)(b - a), c->x->lr,
                   p->beta1, p->beta2, p->eps, c->in->attr.f, c->x->step - c->x->skipped);
}

static void adamw_part(void *ctx, int64_t lo, int64_t hi) { update_range(ctx, lo, hi, adamw_slice, NULL); }

static int k_adamw(Call *c) {
    if (skipped(c))
        return skip_update(c, master_of(c, 3));
    rt_parallel_for(ON(0), adamw_part, c);
    return 0;
}

// AdamW8bit (adam8.h): 8-bit moments by whole blocks of 256, a range of blocks a thread
// (those starting in its range of elements); a tensor below min_8bit_size keeps 32-bit
// moments (out[1], out[2] f32). With a Kahan compensation, 1024 elements at a time.
static void adamw8bit_slice(Call *c, float *w, int64_t a, int64_t b, const void *arg) {
    const CpuAdam8 *s = arg;
    const int64_t n = ON(0), blk = CPU_ADAM8_BLOCK;
    if (OB(1)->dtype == PDT_U8) {
        uint8_t *codes = c->o[1].raw;    // (2, n): m's, then v's
        float *absmax = c->o[2].raw;     // (2, blocks)
        size_t nb = cpu_adam8_blocks((size_t)n);
        cpu_adam8_update(w, IN(0), IN(1)[0], codes, codes + n, absmax, absmax + nb, (size_t)n,
                         (size_t)(a / blk), (size_t)((b + blk - 1) / blk), s);
    } else {
        cpu_adam32_update(w, IN(0), IN(1)[0], OUT(1), OUT(2), (size_t)a, (size_t)b, s);
    }
}

static void adamw8bit_part(void *ctx, int64_t lo, int64_t hi) {
    Call *c = ctx;
    const Plan *p = c->x->plan;
    const int64_t n = ON(0), blk = CPU_ADAM8_BLOCK;
    CpuAdam8 s = cpu_adam8_scalars(c->x->lr, p->beta1, p->beta2, p->eps, c->in->attr.f,
                                   c->x->step - c->x->skipped);
    if (OB(1)->dtype == PDT_U8) {   // whole blocks: those starting in [lo, hi)
        lo = (lo + blk - 1) / blk * blk;
        hi = (hi + blk - 1) / blk * blk < n ? (hi + blk - 1) / blk * blk : n;
    }
    update_range(c, lo, hi, adamw8bit_slice, &s);
}

static int k_adamw8bit(Call *c) {
    if (skipped(c))
        return skip_update(c, master_of(c, 3));
    rt_parallel_for(ON(0), adamw8bit_part, c);
    return 0;
}

static int k_sgd(Call *c) {
    if (skipped(c))
        return skip_update(c, master_of(c, 1));
    float *master = master_of(c, 1), *w = master ? master : OUT(0), lr = (float)c->x->lr, f = IN(1)[0];
    for (int64_t i = 0; i < ON(0); i++)
        w[i] -= lr * (IN(0)[i] * f);
    if (master)
        memcpy(OUT(0), master, sizeof(float) * (size_t)ON(0));
    return 0;
}

//
// The kernel column: one kernel per op of ops.def. Copies are not kernels: the
// executor moves their bytes with Backend.copy.
//

static const Kernel kernels[OP_COUNT] = {
    [OP_EMBED] = k_embed,           [OP_LINEAR] = k_linear,         [OP_LINEAR_ACC] = k_linear_acc,         [OP_MATMUL] = k_matmul,
    [OP_ADD] = k_add,               [OP_SUB] = k_sub,               [OP_MUL] = k_mul,
    [OP_DIV] = k_div,               [OP_SCALE] = k_scale,           [OP_SILU] = k_silu,
    [OP_GELU] = k_gelu,             [OP_EXP] = k_exp,               [OP_RMSNORM] = k_rmsnorm,
    [OP_LAYERNORM] = k_layernorm,   [OP_ROPE] = k_rope,             [OP_SOFTMAX] = k_softmax,
    [OP_ATTENTION] = k_attention,   [OP_ATTENTION_DECODE] = k_attention_decode,   [OP_VIEW] = k_view,             [OP_TRANSPOSE] = k_transpose,
    [OP_DROPOUT] = k_dropout,       [OP_CROSS_ENTROPY] = k_cross_entropy,
    [OP_SLICE] = k_slice,           [OP_CONCAT] = k_concat,         [OP_TANH] = k_tanh,
    [OP_SOFTCAP] = k_softcap,       [OP_GELU_EXACT] = k_gelu_exact,
    [OP_SLICE_BWD] = k_slice_bwd,   [OP_TANH_BWD] = k_tanh_bwd,     [OP_SOFTCAP_BWD] = k_softcap_bwd,
    [OP_GELU_EXACT_BWD] = k_gelu_exact_bwd,
    [OP_EMBED_BWD] = k_embed_bwd,   [OP_LINEAR_DX] = k_linear_dx,   [OP_LINEAR_DW] = k_linear_dw,
    [OP_SUM_TO] = k_sum_to,         [OP_MATMUL_DA] = k_matmul_da,   [OP_MATMUL_DB] = k_matmul_db,
    [OP_SILU_BWD] = k_silu_bwd,     [OP_GELU_BWD] = k_gelu_bwd,     [OP_RMSNORM_DX] = k_rmsnorm_dx,
    [OP_RMSNORM_DW] = k_rmsnorm_dw, [OP_LAYERNORM_DX] = k_layernorm_dx,
    [OP_LAYERNORM_DW] = k_layernorm_dw, [OP_ROPE_BWD] = k_rope_bwd, [OP_SOFTMAX_BWD] = k_softmax_bwd,
    [OP_ATTENTION_BWD] = k_attention_bwd, [OP_DROPOUT_BWD] = k_dropout_bwd,
    [OP_CROSS_ENTROPY_BWD] = k_cross_entropy_bwd,
    [OP_LINEAR_CE] = k_linear_ce_grad,    [OP_LINEAR_CE_GRAD] = k_linear_ce_grad,
    [OP_LOGPROBS] = k_logprobs,     [OP_LOGPROBS_BWD] = k_logprobs_bwd,
    [OP_LINEAR_LOGPROBS] = k_linear_logprobs, [OP_LINEAR_LOGPROBS_BWD] = k_linear_logprobs,
    [OP_PREFERENCE] = k_preference, [OP_PREFERENCE_BWD] = k_preference,
    [OP_DEQUANT] = k_dequant,
    [OP_ACC] = k_acc,               [OP_ADAMW] = k_adamw,           [OP_SGD] = k_sgd,
    [OP_ADAMW8BIT] = k_adamw8bit,
    [OP_ZERO] = k_zero,             [OP_GRAD_SUMSQ] = k_grad_sumsq, [OP_GRAD_FACTOR] = k_grad_factor,
    [OP_ROPE_TABLE] = k_rope_table,  [OP_ADD_RMSNORM] = k_add_rmsnorm,
};

// OpenBLAS's threads cost more than they give on small GEMMs (2x on tiny.ft here):
// below ~64 MFLOP per GEMM use one thread, unless the user set the thread count.
static void choose_blas_threads(const Plan *p) {
    if (getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS"))
        return;
    double most = 0;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++) {
            const PlanInstr *in = &p->ins[ph][i];
            if (op_desc(in->op)->cls != OPC_GEMM)
                continue;
            const PlanBuffer *a = &p->buf[in->in[0]], *b = &p->buf[in->in[1]];
            double f = 2.0 * (double)plan_elems(a) * (double)(b->ndim ? b->shape[b->ndim - 1] : 1);
            if (f > most)
                most = f;
        }
    if (most < 64e6)
        blas_set_threads(1);   // (a BLAS without the call keeps its own count)
}

static int cpu_prepare(Backend *be, const Plan *p, int stream, char *err, size_t errlen) {
    CpuState *s = be->state;
    choose_blas_threads(p);
    size_t most = 0;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++) {
            const PlanInstr *in = &p->ins[ph][i];
            if ((stream >= 0 && (int)in->stream != stream) || op_desc(in->op)->cls == OPC_COPY)
                continue;
            for (int st = 0; st < in->nstep; st++) {   // a fused instruction: its steps' operands
                if (!kernels[in->step[st].op]) {
                    snprintf(err, errlen, "instruction %d: the cpu backend has no kernel for '%s'",
                             in->id, op_desc(in->step[st].op)->name);
                    return -1;
                }
                size_t need = 64 + (size_t)p->seq + (size_t)plan_elems(&p->buf[in->step[st].out]) + 16;
                for (int k = 0; k < in->step[st].nin; k++)
                    need += (size_t)plan_elems(&p->buf[in->step[st].in[k]]) + 16;
                if (need > most)
                    most = need;
            }
            if (in->nstep)
                continue;
            if (!kernels[in->op]) {
                snprintf(err, errlen, "instruction %d: the cpu backend has no kernel for '%s'",
                         in->id, op_desc(in->op)->name);
                return -1;
            }
            // scratch: every operand widened, plus an attention row (a decode step's over its
            // cache), or a chunk of logits
            size_t need = 64 + (size_t)p->seq;
            if (in->op == OP_ATTENTION_DECODE)
                need += (size_t)p->buf[in->out[1]].shape[1];
            if (op_desc(in->op)->cls == OPC_LOSS_GEMM) {
                PlanLoss l = plan_loss(p, in);
                need += (size_t)(l.chunk * l.vocab) + 16;
            }
            for (int k = 0; k < in->nin + in->nout; k++) {
                int id = k < in->nin ? in->in[k] : in->out[k - in->nin];
                if (id >= 0)
                    need += (size_t)plan_elems(&p->buf[id]) + 16;
            }
            if (need > most)
                most = need;
        }
    reserve(s, most);
    return 0;
}

static int cpu_launch(Backend *be, Exec *x, const PlanInstr *in, char *err, size_t errlen);

// A fused instruction, step by step: each step's result stored in its buffer's dtype (a
// virtual buffer's bytes live only here), as the unfused ops would have stored them.
static int run_fused(Backend *be, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int rc = 0, s = 0;
    for (; s < in->nstep && rc == 0; s++) {
        const PlanStep *st = &in->step[s];
        const PlanBuffer *o = &p->buf[st->out];
        if (o->virt && !(x->ptr[st->out] = xmalloc((size_t)plan_dtype_bytes(o->dtype, plan_elems(o)) + 16)))
            return fail(&(Call){.err = err, .errlen = errlen}, "out of memory (a fused step)");
        PlanInstr one = {.id = in->id, .op = st->op, .nin = st->nin, .nout = 1, .out = {st->out},
                         .attr = st->attr, .stream = in->stream, .ws = -1, .record = -1,
                         .line = in->line, .col = in->col};
        memcpy(one.in, st->in, sizeof one.in);
        rc = cpu_launch(be, x, &one, err, errlen);
    }
    for (int k = 0; k < in->nstep; k++)
        if (p->buf[in->step[k].out].virt) {
            free(x->ptr[in->step[k].out]);
            x->ptr[in->step[k].out] = NULL;
        }
    return rc;
}

static int cpu_launch(Backend *be, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    if (in->nstep)
        return run_fused(be, x, in, err, errlen);
    CpuState *s = be->state;
    Call c = {.x = x, .s = s, .in = in, .err = err, .errlen = errlen};
    s->used = 0;
    for (int k = 0; k < in->nin; k++) {
        Arg *a = &c.a[k];
        if (in->in[k] < 0)
            continue;
        a->b = &x->plan->buf[in->in[k]];
        a->raw = x->ptr[in->in[k]];
        a->n = plan_elems(a->b);
        if (a->b->dtype == PDT_F32)
            a->f = a->raw;
        else if (is_float(a->b->dtype))
            widen(a->f = scratch(s, a->n), a);
    }
    for (int k = 0; k < in->nout; k++) {
        Arg *o = &c.o[k];
        o->b = &x->plan->buf[in->out[k]];
        o->raw = x->ptr[in->out[k]];
        o->n = plan_elems(o->b);
        if (o->b->dtype == PDT_F32)
            o->f = o->raw;
        else if (is_float(o->b->dtype)) {
            o->f = scratch(s, o->n);
            if ((in->update >> k) & 1u)
                widen(o->f, o);
        }
    }
    int rc = kernels[in->op](&c);
    // Results back into their storage: a view's bytes are its base's (an update of this
    // rank's slice of a parameter); a view op writes nothing, nor does a slice that is a
    // view of its input's bytes (k_slice: its scratch holds nothing to store).
    if (rc == 0)
        for (int k = 0; k < in->nout; k++) {
            const PlanBuffer *ob = c.o[k].b;
            if (ob->dtype != PDT_F32 && is_float(ob->dtype) &&
                (ob->bytes || ob->virt || (ob->view >= 0 && in->op != OP_VIEW && in->op != OP_SLICE)))
                narrow(&c.o[k]);
        }
    return rc;
}

static void *cpu_alloc(Backend *be, MemKind kind, int64_t bytes) {
    (void)be, (void)kind;
    void *p = NULL;
    if (bytes < 0 || posix_memalign(&p, 256, (size_t)bytes) != 0)
        return NULL;
    memset(p, 0, (size_t)bytes);
    return p;
}

static void cpu_free(Backend *be, MemKind kind, void *p) {
    (void)be, (void)kind;
    free(p);
}

static void cpu_move(Backend *be, MemKind kind, void *dst, const void *src, int64_t bytes) {
    (void)be, (void)kind;
    memcpy(dst, src, (size_t)bytes);
}

static void cpu_fill(Backend *be, MemKind kind, void *dst, uint32_t pattern, int width,
                     int64_t bytes, Stream stream) {
    (void)be, (void)kind, (void)stream;
    if (width == 1 || pattern == 0) {
        memset(dst, (int)(pattern & 0xff), (size_t)bytes);
        return;
    }
    for (int64_t i = 0; i + width <= bytes; i += width)
        memcpy((char *)dst + i, &pattern, (size_t)width);   // little-endian: the low bytes
}

static void cpu_copy(Backend *be, void *dst, MemKind dk, const void *src, MemKind sk,
                     int64_t bytes, Stream stream) {
    (void)be, (void)dk, (void)sk, (void)stream;
    memcpy(dst, src, (size_t)bytes);
}

static int cpu_sync(Backend *be, char *err, size_t errlen) {
    (void)be, (void)err, (void)errlen;
    return 0;
}

static void cpu_destroy(Backend *be) {
    CpuState *s = be->state;
    free(s->scratch);
    free(s);
    free(be);
}

Backend *rt_cpu_backend(void) {
    Backend *be = xcalloc(1, sizeof *be);
    CpuState *s = xcalloc(1, sizeof *s);
    *be = (Backend){.name = "cpu", .host_addressable = true, .prepare = cpu_prepare, .alloc = cpu_alloc, .free = cpu_free,
                    .set = cpu_move, .get = cpu_move, .fill = cpu_fill, .copy = cpu_copy,
                    .launch = cpu_launch, .sync = cpu_sync, .destroy = cpu_destroy, .state = s};
    return be;
}
