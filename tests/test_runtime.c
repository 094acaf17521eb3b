// test_runtime.c: tests of the cpu backend's reference kernels (runtime/cpu/kernels.c).
//
// One line per case, "ok   name" or "FAIL name" after its failed checks (tests/check.h), then
// "N passed, M failed"; the exit status is non-zero when any case fails. Covers:
// finite-difference gradients of every backward (and the += / = gradient conventions), a
// self-test showing the gradient checker can fail, bf16/fp16 rounding against independent
// implementations, AdamW against a hand-computed example, cross-entropy chunking and ignored
// targets, attention against a naive double-precision reference, dropout determinism, input
// rejection.
#include "kernels.h"
#include "safetensors.h"

#include "check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Test helpers (the checks and the counting are tests/check.h's)

// |got - want| <= atol + rtol |want|, CHECK_NEAR's test; NaN never passes.
static int close_to(double got, double want, double atol, double rtol) {
    return fabs(got - want) <= atol + rtol * fabs(want);
}

// Allocations live until the end of the running case.
enum { MAX_ALLOCS = 256 };
static void *allocs[MAX_ALLOCS];
static int n_allocs;

static void *alloc_zeroed(size_t bytes) {
    if (n_allocs == MAX_ALLOCS) {
        fprintf(stderr, "test_runtime: too many allocations in one case\n");
        exit(2);
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "test_runtime: out of memory\n");
        exit(2);
    }
    return allocs[n_allocs++] = p;
}

static float *fnew(size_t n) { return alloc_zeroed(n * sizeof(float)); }
static int32_t *inew(size_t n) { return alloc_zeroed(n * sizeof(int32_t)); }

static uint64_t rng_state;

// splitmix64; each case restarts it from the same seed, so failures reproduce.
static uint64_t rand_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rand_u32(void) { return (uint32_t)(rand_u64() >> 32); }

static float rand_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rand_u64() >> 11) * 0x1p-53);
}

static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = rand_uniform(lo, hi);
}

static void fill_const(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

static float *fcopy(const float *x, size_t n) {
    float *y = fnew(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// Runs fn as the case called name (RUN_NAMED), with the generator reseeded before it and its
// allocations freed after it.
static void run(const char *name, void (*fn)(void)) {
    rng_state = 20240611;
    RUN_NAMED(name, fn());
    while (n_allocs > 0)
        free(allocs[--n_allocs]);
}

// ---------------------------------------------------------------------------------------------
// Finite-difference gradient checker
//
// The loss is the random projection L = sum(out * R), so every output element matters and the
// backward runs with dout = R. Central differences with step FD_STEP on inputs of magnitude
// about 1, L accumulated in double; an entry passes when
// |numeric - analytic| <= FD_ATOL + FD_RTOL * max(|numeric|, |analytic|). The step keeps the
// fp32 rounding noise of L divided by 2h near 1e-5 while the O(h^2) truncation error stays
// below 1e-4 for these smooth kernels; every check also passes with tolerances 10x tighter.

#ifndef FD_STEP
#define FD_STEP 1e-2
#endif
#ifndef FD_ATOL
#define FD_ATOL 1e-4
#endif
#ifndef FD_RTOL
#define FD_RTOL 2e-3
#endif

typedef struct {
    const char *name;
    float *x;     // the input, perturbed in place
    float *grad;  // its gradient as the backward writes it
    size_t n;
    int param;    // 1: a parameter gradient (+=), 0: an activation gradient (=)
} GradInput;

typedef struct Fd Fd;
struct Fd {
    void (*fwd)(Fd *f); // recomputes out from the current inputs
    void (*bwd)(Fd *f); // writes every input's gradient for dout = R
    float *out;         // (nout)
    float *R;           // (nout)
    size_t nout;
    GradInput in[4];
    int nin;
};

static double proj_loss(const Fd *f) {
    double L = 0.0;
    for (size_t i = 0; i < f->nout; i++)
        L += (double)f->out[i] * f->R[i];
    return L;
}

// Counts gradient entries that disagree with central differences; describes the first one.
static int fd_mismatches(Fd *f, double h, double atol, double rtol, char *detail, size_t len) {
    int bad = 0;
    for (int a = 0; a < f->nin; a++) {
        GradInput *in = &f->in[a];
        for (size_t j = 0; j < in->n; j++) {
            float x0 = in->x[j];
            float xp = (float)(x0 + h), xm = (float)(x0 - h);
            in->x[j] = xp;
            f->fwd(f);
            double lp = proj_loss(f);
            in->x[j] = xm;
            f->fwd(f);
            double lm = proj_loss(f);
            in->x[j] = x0;
            double num = (lp - lm) / ((double)xp - (double)xm);
            double ana = in->grad[j];
            if (!(fabs(num - ana) <= atol + rtol * fmax(fabs(num), fabs(ana)))) {
                if (!bad)
                    snprintf(detail, len, "d%s[%zu]: analytic %.7g, numeric %.7g", in->name, j,
                             ana, num);
                bad++;
            }
        }
    }
    f->fwd(f);
    return bad;
}

// Runs the whole check and returns the number of problems, describing the first: the backward
// with parameter grads zeroed and activation grads poisoned with NaN must match finite
// differences; a second backward must leave activation grads bitwise the same (=) after they
// were overwritten with garbage, and double the parameter grads (+=).
static int fd_check_quiet(Fd *f, double h, double atol, double rtol, char *detail, size_t len) {
    f->fwd(f);
    fill(f->R, f->nout, -1.0f, 1.0f);
    for (int a = 0; a < f->nin; a++)
        fill_const(f->in[a].grad, f->in[a].n, f->in[a].param ? 0.0f : NAN);
    f->bwd(f);
    int bad = fd_mismatches(f, h, atol, rtol, detail, len);
    if (bad)
        return bad;

    float *first[4];
    for (int a = 0; a < f->nin; a++) {
        first[a] = fcopy(f->in[a].grad, f->in[a].n);
        if (!f->in[a].param)
            fill_const(f->in[a].grad, f->in[a].n, 1e3f);
    }
    f->bwd(f);
    for (int a = 0; a < f->nin; a++) {
        GradInput *in = &f->in[a];
        for (size_t j = 0; j < in->n; j++) {
            int ok = in->param ? close_to(in->grad[j], 2.0 * first[a][j], 1e-6, 1e-5)
                               : f32_bits(in->grad[j]) == f32_bits(first[a][j]);
            if (!ok) {
                if (!bad)
                    snprintf(detail, len,
                             "second backward: d%s[%zu] = %.7g after %.7g (%s expected)", in->name,
                             j, in->grad[j], first[a][j], in->param ? "+=" : "=");
                bad++;
            }
        }
    }
    return bad;
}

static void fd_check(Fd *f, double h, double atol, double rtol) {
    char detail[256] = "";
    int bad = fd_check_quiet(f, h, atol, rtol, detail, sizeof detail);
    CHECKF(bad == 0, "%d gradient entries wrong; first %s", bad, detail);
}

static void add_input(Fd *f, const char *name, float *x, float *grad, size_t n, int param) {
    f->in[f->nin++] = (GradInput){name, x, grad, n, param};
}

static void set_output(Fd *f, size_t nout) {
    f->out = fnew(nout);
    f->R = fnew(nout);
    f->nout = nout;
}

// ---------------------------------------------------------------------------------------------
// Gradient checks, one per kernel

typedef struct {
    Fd f;
    int32_t *idx;
    float *table, *dtable;
    size_t N, V, C;
} EmbedCase;

static void embed_fwd(Fd *f) {
    EmbedCase *c = (EmbedCase *)f;
    CHECK(cpu_embedding_forward(f->out, c->idx, c->table, c->N, c->V, c->C) == CPU_OK);
}

static void embed_bwd(Fd *f) {
    EmbedCase *c = (EmbedCase *)f;
    CHECK(cpu_embedding_backward(c->dtable, f->R, c->idx, c->N, c->V, c->C, -1) == CPU_OK);
}

static void test_embedding_grad(void) {
    EmbedCase c = {.N = 6, .V = 5, .C = 3};
    static const int32_t ids[6] = {4, 0, 2, 4, 4, 1}; // repeats accumulate, row 3 unused
    c.idx = inew(c.N);
    memcpy(c.idx, ids, sizeof ids);
    c.table = fnew(c.V * c.C), c.dtable = fnew(c.V * c.C);
    fill(c.table, c.V * c.C, -1, 1);
    c.f.fwd = embed_fwd, c.f.bwd = embed_bwd;
    set_output(&c.f, c.N * c.C);
    add_input(&c.f, "table", c.table, c.dtable, c.V * c.C, 1);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

// torch's padding_idx: the padding id's rows add nothing; every other row as without it.
static void test_embedding_padding(void) {
    enum { N = 6, V = 5, C = 3 };
    static const int32_t ids[N] = {4, 0, 2, 4, 4, 1};
    float *dy = fnew(N * C), *all = fnew(V * C), *pad = fnew(V * C);
    fill(dy, N * C, -1, 1);
    CHECK(cpu_embedding_backward(all, dy, ids, N, V, C, -1) == CPU_OK);
    CHECK(cpu_embedding_backward(pad, dy, ids, N, V, C, 4) == CPU_OK);
    for (int i = 0; i < V * C; i++)
        CHECK(pad[i] == (i / C == 4 ? 0.0f : all[i]));
}

typedef struct {
    Fd f;
    float *x, *w, *b, *dx, *dw, *db;
    size_t N, I, O;
} LinearCase;

static void linear_fwd(Fd *f) {
    LinearCase *c = (LinearCase *)f;
    cpu_linear_forward(f->out, c->x, c->w, c->b, c->N, c->I, c->O);
}

static void linear_bwd(Fd *f) {
    LinearCase *c = (LinearCase *)f;
    cpu_linear_backward(c->dx, c->dw, c->db, f->R, c->x, c->w, c->N, c->I, c->O);
}

static void test_linear_grad(void) {
    LinearCase c = {.N = 3, .I = 5, .O = 4};
    c.x = fnew(c.N * c.I), c.dx = fnew(c.N * c.I);
    c.w = fnew(c.O * c.I), c.dw = fnew(c.O * c.I);
    c.b = fnew(c.O), c.db = fnew(c.O);
    fill(c.x, c.N * c.I, -1, 1), fill(c.w, c.O * c.I, -1, 1), fill(c.b, c.O, -1, 1);
    c.f.fwd = linear_fwd, c.f.bwd = linear_bwd;
    set_output(&c.f, c.N * c.O);
    add_input(&c.f, "x", c.x, c.dx, c.N * c.I, 0);
    add_input(&c.f, "w", c.w, c.dw, c.O * c.I, 1);
    add_input(&c.f, "b", c.b, c.db, c.O, 1);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

// Linear against a naive double loop, without bias, and with each gradient skipped (NULL).
static void test_linear_reference_and_nulls(void) {
    enum { N = 4, I = 7, O = 3 };
    float *x = fnew(N * I), *w = fnew(O * I), *b = fnew(O), *y = fnew(N * O), *y0 = fnew(N * O);
    fill(x, N * I, -1, 1), fill(w, O * I, -1, 1), fill(b, O, -1, 1);
    cpu_linear_forward(y, x, w, b, N, I, O);
    cpu_linear_forward(y0, x, w, NULL, N, I, O);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double acc = 0.0;
            for (int i = 0; i < I; i++)
                acc += (double)x[n * I + i] * w[o * I + i];
            CHECK_NEAR(y0[n * O + o], acc, 1e-6, 1e-6);
            CHECK_NEAR(y[n * O + o], acc + b[o], 1e-6, 1e-6);
        }
    float *dy = fnew(N * O), *dx = fnew(N * I), *dw = fnew(O * I), *db = fnew(O);
    fill(dy, N * O, -1, 1);
    cpu_linear_backward(dx, dw, db, dy, x, w, N, I, O);
    float *dx2 = fnew(N * I), *dw2 = fnew(O * I), *db2 = fnew(O);
    cpu_linear_backward(dx2, NULL, NULL, dy, x, w, N, I, O);
    cpu_linear_backward(NULL, dw2, NULL, dy, x, w, N, I, O);
    cpu_linear_backward(NULL, NULL, db2, dy, x, w, N, I, O);
    CHECK(memcmp(dx, dx2, sizeof(float) * N * I) == 0);
    CHECK(memcmp(dw, dw2, sizeof(float) * O * I) == 0);
    CHECK(memcmp(db, db2, sizeof(float) * O) == 0);
}

typedef struct {
    Fd f;
    float *a, *b, *da, *db;
    size_t Bt, M, K, N;
} MatmulCase;

static void matmul_fwd(Fd *f) {
    MatmulCase *c = (MatmulCase *)f;
    cpu_matmul_forward(f->out, c->a, c->b, c->Bt, c->M, c->K, c->N);
}

static void matmul_bwd(Fd *f) {
    MatmulCase *c = (MatmulCase *)f;
    cpu_matmul_backward(c->da, c->db, f->R, c->a, c->b, c->Bt, c->M, c->K, c->N);
}

static void test_matmul_grad(void) {
    MatmulCase c = {.Bt = 2, .M = 3, .K = 4, .N = 5};
    size_t na = c.Bt * c.M * c.K, nb = c.Bt * c.K * c.N;
    c.a = fnew(na), c.da = fnew(na), c.b = fnew(nb), c.db = fnew(nb);
    fill(c.a, na, -1, 1), fill(c.b, nb, -1, 1);
    c.f.fwd = matmul_fwd, c.f.bwd = matmul_bwd;
    set_output(&c.f, c.Bt * c.M * c.N);
    add_input(&c.f, "a", c.a, c.da, na, 0);
    add_input(&c.f, "b", c.b, c.db, nb, 1);   // a weight: its gradient adds in (beta = 1)
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
    // The forward against a naive double loop.
    for (size_t t = 0; t < c.Bt; t++)
        for (size_t i = 0; i < c.M; i++)
            for (size_t j = 0; j < c.N; j++) {
                double acc = 0.0;
                for (size_t k = 0; k < c.K; k++)
                    acc += (double)c.a[(t * c.M + i) * c.K + k] * c.b[(t * c.K + k) * c.N + j];
                CHECK_NEAR(c.f.out[(t * c.M + i) * c.N + j], acc, 1e-6, 1e-6);
            }
}

// Elementwise ops: one case type, the op chosen by a code.
typedef enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_SCALE, EW_SILU, EW_GELU, EW_EXP, EW_TANH, EW_SOFTCAP,
               EW_GELU_EXACT } EwOp;

typedef struct {
    Fd f;
    EwOp op;
    float *a, *b, *da, *db; // b, db only for the binary ops
    size_t n;
} EwCase;

static const float EW_SCALE_C = -1.75f;

static void ew_fwd(Fd *f) {
    EwCase *c = (EwCase *)f;
    switch (c->op) {
    case EW_ADD: cpu_add_forward(f->out, c->a, c->b, c->n); break;
    case EW_SUB: cpu_sub_forward(f->out, c->a, c->b, c->n); break;
    case EW_MUL: cpu_mul_forward(f->out, c->a, c->b, c->n); break;
    case EW_DIV: cpu_div_forward(f->out, c->a, c->b, c->n); break;
    case EW_SCALE: cpu_scale_forward(f->out, c->a, EW_SCALE_C, c->n); break;
    case EW_SILU: cpu_silu_forward(f->out, c->a, c->n); break;
    case EW_GELU: cpu_gelu_forward(f->out, c->a, c->n); break;
    case EW_EXP: cpu_exp_forward(f->out, c->a, c->n); break;
    case EW_TANH: cpu_tanh_forward(f->out, c->a, c->n); break;
    case EW_SOFTCAP: cpu_softcap_forward(f->out, c->a, 2.5f, c->n); break;
    case EW_GELU_EXACT: cpu_gelu_exact_forward(f->out, c->a, c->n); break;
    }
}

static void ew_bwd(Fd *f) {
    EwCase *c = (EwCase *)f;
    switch (c->op) {
    case EW_ADD: cpu_add_backward(c->da, c->db, f->R, c->n); break;
    case EW_SUB: cpu_sub_backward(c->da, c->db, f->R, c->n); break;
    case EW_MUL: cpu_mul_backward(c->da, c->db, f->R, c->a, c->b, c->n); break;
    case EW_DIV: cpu_div_backward(c->da, c->db, f->R, c->a, c->b, c->n); break;
    case EW_SCALE: cpu_scale_backward(c->da, f->R, EW_SCALE_C, c->n); break;
    case EW_SILU: cpu_silu_backward(c->da, f->R, c->a, c->n); break;
    case EW_GELU: cpu_gelu_backward(c->da, f->R, c->a, c->n); break;
    case EW_EXP: cpu_exp_backward(c->da, f->R, f->out, c->n); break;
    case EW_TANH: cpu_tanh_backward(c->da, f->R, f->out, c->n); break;
    case EW_SOFTCAP: cpu_softcap_backward(c->da, f->R, f->out, 2.5f, c->n); break;
    case EW_GELU_EXACT: cpu_gelu_exact_backward(c->da, f->R, c->a, c->n); break;
    }
}

static void ew_check(EwOp op, int binary, float lo, float hi) {
    EwCase c = {.op = op, .n = 9};
    c.a = fnew(c.n), c.da = fnew(c.n);
    fill(c.a, c.n, lo, hi);
    c.f.fwd = ew_fwd, c.f.bwd = ew_bwd;
    set_output(&c.f, c.n);
    add_input(&c.f, "a", c.a, c.da, c.n, 0);
    if (binary) {
        c.b = fnew(c.n), c.db = fnew(c.n);
        for (size_t i = 0; i < c.n; i++) // |b| in [1, 2] keeps division smooth
            c.b[i] = rand_uniform(1.0f, 2.0f) * (i % 2 ? -1.0f : 1.0f);
        add_input(&c.f, "b", c.b, c.db, c.n, 0);
    }
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

static void test_add_grad(void) { ew_check(EW_ADD, 1, -1, 1); }
static void test_sub_grad(void) { ew_check(EW_SUB, 1, -1, 1); }
static void test_mul_grad(void) { ew_check(EW_MUL, 1, -1, 1); }
static void test_div_grad(void) { ew_check(EW_DIV, 1, -1, 1); }
static void test_scale_grad(void) { ew_check(EW_SCALE, 0, -1, 1); }
static void test_silu_grad(void) { ew_check(EW_SILU, 0, -3, 3); }
static void test_gelu_grad(void) { ew_check(EW_GELU, 0, -3, 3); }
static void test_exp_grad(void) { ew_check(EW_EXP, 0, -1, 1); }
static void test_tanh_grad(void) { ew_check(EW_TANH, 0, -2, 2); }
static void test_softcap_grad(void) { ew_check(EW_SOFTCAP, 0, -6, 6); }
static void test_gelu_exact_grad(void) { ew_check(EW_GELU_EXACT, 0, -3, 3); }

typedef struct {
    Fd f;
    float *x[3], *dx[3], *part;   // part: the slice, forward and backward
    size_t outer, inner, dims[3];
} JoinCase;

// slice x0's middle range [1, 1 + dims[1]) and join it with x1 and x2.
static void join_fwd(Fd *f) {
    JoinCase *c = (JoinCase *)f;
    cpu_slice_forward(c->part, c->x[0], c->outer, c->dims[0], c->inner, 1, c->dims[1]);
    const float *xs[3] = {c->part, c->x[1], c->x[2]};
    size_t d[3] = {c->dims[1], c->dims[1], c->dims[2]};
    cpu_concat_forward(f->out, xs, d, 3, c->outer, c->inner);
}

// concat's backward is slices of dy; the slice's, slice_bwd (assigning, then adding).
static void join_bwd(Fd *f) {
    JoinCase *c = (JoinCase *)f;
    size_t total = 2 * c->dims[1] + c->dims[2], o = c->outer, in = c->inner;
    float *g = c->part;
    cpu_slice_forward(g, f->R, o, total, in, 0, c->dims[1]);
    cpu_slice_backward(c->dx[0], g, o, c->dims[0], in, 1, c->dims[1], 0);
    cpu_slice_backward(c->dx[0], g, o, c->dims[0], in, 1, c->dims[1], 1);   // twice: += works
    for (size_t i = 0; i < o * c->dims[0] * in; i++)
        c->dx[0][i] *= 0.5f;
    cpu_slice_forward(c->dx[1], f->R, o, total, in, c->dims[1], c->dims[1]);
    cpu_slice_forward(c->dx[2], f->R, o, total, in, 2 * c->dims[1], c->dims[2]);
}

static void test_slice_concat_grad(void) {
    JoinCase c = {.outer = 3, .inner = 2, .dims = {5, 2, 3}};
    c.part = fnew(c.outer * c.dims[1] * c.inner);
    size_t n[3] = {c.outer * c.dims[0] * c.inner, c.outer * c.dims[1] * c.inner,
                   c.outer * c.dims[2] * c.inner};
    for (int k = 0; k < 3; k++) {
        c.x[k] = fnew(n[k]), c.dx[k] = fnew(n[k]);
        fill(c.x[k], n[k], -1, 1);
        add_input(&c.f, k == 0 ? "x0" : k == 1 ? "x1" : "x2", c.x[k], c.dx[k], n[k], 0);
    }
    c.f.fwd = join_fwd, c.f.bwd = join_bwd;
    set_output(&c.f, c.outer * (2 * c.dims[1] + c.dims[2]) * c.inner);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

// Forward values of the activations against double formulas, and in-place operation.
static void test_elementwise_values(void) {
    enum { n = 64 };
    float *x = fnew(n), *y = fnew(n), *b = fnew(n);
    fill(x, n, -6, 6), fill(b, n, 1, 2);
    cpu_silu_forward(y, x, n);
    for (int i = 0; i < n; i++)
        CHECK_NEAR(y[i], x[i] / (1.0 + exp(-(double)x[i])), 1e-6, 1e-6);
    cpu_gelu_forward(y, x, n);
    for (int i = 0; i < n; i++) {
        double v = x[i];
        CHECK_NEAR(y[i],
                   0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) *
                                         (v + 0.044715 * v * v * v))),
                   1e-6, 1e-6);
    }
    cpu_gelu_exact_forward(y, x, n);
    for (int i = 0; i < n; i++)
        CHECK_NEAR(y[i], 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))), 1e-6, 1e-6);
    cpu_softcap_forward(y, x, 2.5f, n);
    for (int i = 0; i < n; i++)
        CHECK_NEAR(y[i], 2.5 * tanh(x[i] / 2.5), 1e-6, 1e-6);
    cpu_tanh_forward(y, x, n);
    for (int i = 0; i < n; i++)
        CHECK_NEAR(y[i], tanh(x[i]), 1e-6, 1e-6);
    cpu_exp_forward(y, x, n);
    for (int i = 0; i < n; i++)
        CHECK_NEAR(y[i], exp((double)x[i]), 0, 1e-6);
    float *z = fcopy(x, n);
    cpu_div_forward(z, z, b, n); // in place
    for (int i = 0; i < n; i++)
        CHECK(f32_bits(z[i]) == f32_bits(x[i] / b[i]));
}

// runtime/fmath.h against double-precision libm: the worst error in units in the last place
// over a stride through every float of each function's working range (every 97th bit pattern,
// 44 million inputs), and its edges: overflow, the subnormal results, the signs, NaN.
#define FTC_INLINE static inline
#define ftc_u2f bits_f32
#include "../runtime/fmath.h"

static double fm_ulps(float got, double want) {
    if (fabs(want) > FLT_MAX)   // beyond the largest float: the result must be infinite
        return isinf(got) && (got > 0) == (want > 0) ? 0 : INFINITY;
    int e;
    frexp(fabs(want), &e);
    double ulp = ldexp(1.0, (e - 24 < -149 ? -149 : e - 24));
    return fabs((double)got - want) / ulp;
}

static void test_fmath(void) {
    double worst[3] = {0, 0, 0};
    for (uint64_t u = 0; u <= 0xffffffffu; u += 97) {
        float x = bits_f32((uint32_t)u);
        if (isnan(x))
            continue;
        if (fabsf(x) < 110)
            worst[0] = fmax(worst[0], fm_ulps(ftc_expf(x), exp((double)x)));
        if (fabsf(x) < 12) {
            worst[1] = fmax(worst[1], fm_ulps(ftc_tanhf(x), tanh((double)x)));
            worst[2] = fmax(worst[2], fm_ulps(ftc_erff(x), erf((double)x)));
        }
    }
    printf("  fmath: worst ulps exp %.2f, tanh %.2f, erf %.2f\n", worst[0], worst[1], worst[2]);
    CHECK(worst[0] <= 2 && worst[1] <= 2 && worst[2] <= 4);
    CHECK(ftc_expf(88.7228317f) == 0x1.ffff08p+127f && isinf(ftc_expf(88.72284f)));
    CHECK(ftc_expf(-103.9f) == 0x1p-149f && ftc_expf(-104.0f) == 0.0f && ftc_expf(0.0f) == 1.0f);
    CHECK(isinf(ftc_expf(INFINITY)) && ftc_expf(-INFINITY) == 0.0f && isnan(ftc_expf(NAN)));
    CHECK(ftc_tanhf(INFINITY) == 1.0f && ftc_tanhf(-INFINITY) == -1.0f && isnan(ftc_tanhf(NAN)));
    CHECK(f32_bits(ftc_tanhf(-0.0f)) == 0x80000000u && f32_bits(ftc_erff(-0.0f)) == 0x80000000u);
    CHECK(ftc_erff(-INFINITY) == -1.0f && ftc_erff(5.0f) == 1.0f && isnan(ftc_erff(NAN)));
}
#undef ftc_u2f
#undef FTC_INLINE

typedef struct {
    Fd f;
    float *x, *dx;
    size_t N, C;
} RowCase; // softmax and sum: one input (N, C)

static void softmax_fwd(Fd *f) {
    RowCase *c = (RowCase *)f;
    cpu_softmax_forward(f->out, c->x, c->N, c->C);
}

static void softmax_bwd(Fd *f) {
    RowCase *c = (RowCase *)f;
    cpu_softmax_backward(c->dx, f->R, f->out, c->N, c->C);
}

static void sum_fwd(Fd *f) {
    RowCase *c = (RowCase *)f;
    cpu_sum_forward(f->out, c->x, c->N, c->C);
}

static void sum_bwd(Fd *f) {
    RowCase *c = (RowCase *)f;
    cpu_sum_backward(c->dx, f->R, c->N, c->C);
}

static void test_softmax_grad(void) {
    RowCase c = {.N = 3, .C = 6};
    c.x = fnew(c.N * c.C), c.dx = fnew(c.N * c.C);
    fill(c.x, c.N * c.C, -2, 2);
    c.f.fwd = softmax_fwd, c.f.bwd = softmax_bwd;
    set_output(&c.f, c.N * c.C);
    add_input(&c.f, "x", c.x, c.dx, c.N * c.C, 0);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
    for (size_t n = 0; n < c.N; n++) {
        double s = 0.0;
        for (size_t j = 0; j < c.C; j++)
            s += c.f.out[n * c.C + j];
        CHECK_NEAR(s, 1.0, 1e-6, 0);
    }
}

static void test_sum_grad(void) {
    RowCase c = {.N = 3, .C = 5};
    c.x = fnew(c.N * c.C), c.dx = fnew(c.N * c.C);
    fill(c.x, c.N * c.C, -1, 1);
    c.f.fwd = sum_fwd, c.f.bwd = sum_bwd;
    set_output(&c.f, c.N);
    add_input(&c.f, "x", c.x, c.dx, c.N * c.C, 0);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

// A long sum of mixed magnitudes: repeatable bitwise, and equal to a double sum in index order.
static void test_sum_deterministic(void) {
    enum { n = 100001 };
    float *x = fnew(n), out[2];
    for (int i = 0; i < n; i++)
        x[i] = (i % 2 ? 1e-4f : 1.0f) * (float)(1 + i % 7);
    cpu_sum_forward(&out[0], x, 1, n);
    cpu_sum_forward(&out[1], x, 1, n);
    double ref = 0.0;
    for (int i = 0; i < n; i++)
        ref += x[i];
    CHECK(f32_bits(out[0]) == f32_bits(out[1]));
    CHECK(f32_bits(out[0]) == f32_bits((float)ref));
}

typedef struct {
    Fd f;
    float *x, *w, *b, *dx, *dw, *db, *mean, *rstd;
    size_t N, C;
    float eps, offset;
} NormCase;

static void rmsnorm_fwd(Fd *f) {
    NormCase *c = (NormCase *)f;
    cpu_rmsnorm_forward(f->out, c->rstd, c->x, c->w, c->N, c->C, c->eps, c->offset);
}

static void rmsnorm_bwd(Fd *f) {
    NormCase *c = (NormCase *)f;
    cpu_rmsnorm_backward(c->dx, c->dw, f->R, c->x, c->w, c->rstd, c->N, c->C, c->offset);
}

static void layernorm_fwd(Fd *f) {
    NormCase *c = (NormCase *)f;
    cpu_layernorm_forward(f->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, c->eps);
}

static void layernorm_bwd(Fd *f) {
    NormCase *c = (NormCase *)f;
    cpu_layernorm_backward(c->dx, c->dw, c->db, f->R, c->x, c->w, c->mean, c->rstd, c->N, c->C);
}

static void norm_setup(NormCase *c) {
    size_t nx = c->N * c->C;
    c->x = fnew(nx), c->dx = fnew(nx), c->w = fnew(c->C), c->dw = fnew(c->C);
    c->b = fnew(c->C), c->db = fnew(c->C), c->mean = fnew(c->N), c->rstd = fnew(c->N);
    fill(c->x, nx, -1.5f, 1.5f), fill(c->w, c->C, 0.5f, 1.5f), fill(c->b, c->C, -1, 1);
    set_output(&c->f, nx);
    add_input(&c->f, "x", c->x, c->dx, nx, 0);
    add_input(&c->f, "w", c->w, c->dw, c->C, 1);
}

// Plain (w) and Gemma's (1 + w) weights: offset 0 and 1.
static void test_rmsnorm_grad(void) {
    for (int off = 0; off < 2; off++) {
        NormCase c = {.N = 4, .C = 7, .eps = 1e-6f, .offset = (float)off};
        norm_setup(&c);
        if (off)
            fill(c.w, c.C, -0.5f, 0.5f);
        c.f.fwd = rmsnorm_fwd, c.f.bwd = rmsnorm_bwd;
        fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
        for (size_t n = 0; n < c.N; n++) { // the forward against double
            double ss = 0.0;
            for (size_t j = 0; j < c.C; j++)
                ss += (double)c.x[n * c.C + j] * c.x[n * c.C + j];
            double r = 1.0 / sqrt(ss / (double)c.C + c.eps);
            CHECK_NEAR(c.rstd[n], r, 0, 1e-6);
            for (size_t j = 0; j < c.C; j++)
                CHECK_NEAR(c.f.out[n * c.C + j], c.x[n * c.C + j] * r * (c.w[j] + off), 1e-6, 1e-6);
        }
    }
}

static void test_layernorm_grad(void) {
    NormCase c = {.N = 4, .C = 6, .eps = 1e-5f};
    norm_setup(&c);
    add_input(&c.f, "b", c.b, c.db, c.C, 1);
    c.f.fwd = layernorm_fwd, c.f.bwd = layernorm_bwd;
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
    for (size_t n = 0; n < c.N; n++) { // the forward against double
        double mu = 0.0, var = 0.0;
        for (size_t j = 0; j < c.C; j++)
            mu += c.x[n * c.C + j];
        mu /= (double)c.C;
        for (size_t j = 0; j < c.C; j++)
            var += (c.x[n * c.C + j] - mu) * (c.x[n * c.C + j] - mu);
        double r = 1.0 / sqrt(var / (double)c.C + c.eps);
        for (size_t j = 0; j < c.C; j++)
            CHECK_NEAR(c.f.out[n * c.C + j], (c.x[n * c.C + j] - mu) * r * c.w[j] + c.b[j], 1e-5,
                       1e-5);
    }
}

static const OpRope plain_rope = {0};

typedef struct {
    Fd f;
    float *x, *dx;
    size_t B, S, H, D;
    double theta;
    const int32_t *pos;
    OpRope r;
} RopeCase;

static void rope_fwd(Fd *f) {
    RopeCase *c = (RopeCase *)f;
    CHECK(cpu_rope_forward(f->out, c->x, c->pos, c->B, c->S, c->H, c->D, c->theta, &c->r) == CPU_OK);
}

static void rope_bwd(Fd *f) {
    RopeCase *c = (RopeCase *)f;
    CHECK(cpu_rope_backward(c->dx, f->R, c->pos, c->B, c->S, c->H, c->D, c->theta, &c->r) == CPU_OK);
}

static void test_rope_grad(void) {
    // positions restarting inside a row, as packed records have them
    static const int32_t pos[10] = {0, 1, 2, 0, 1, 7, 3, 0, 11, 2};
    // plain; half the dims rotated with YaRN's scaled cos and sin (the rest pass through)
    const OpRope yarn = {.rotary = 4, .scaling = ROPE_YARN, .factor = 3, .original = 4, .attn_factor = 1.3};
    for (int v = 0; v < 4; v++) {
        bool with_pos = v & 1;
        RopeCase c = {.B = 2, .S = 5, .H = 2, .D = 8, .theta = 10000.0, .pos = with_pos ? pos : NULL,
                      .r = v & 2 ? yarn : plain_rope};
        size_t n = c.B * c.S * c.H * c.D;
        c.x = fnew(n), c.dx = fnew(n);
        fill(c.x, n, -1, 1);
        c.f.fwd = rope_fwd, c.f.bwd = rope_bwd;
        set_output(&c.f, n);
        add_input(&c.f, "x", c.x, c.dx, n, 0);
        fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
    }
}

// Position ids: a row rotates by its id, not its index (0..S-1 ids give the plain result).
static void test_rope_positions(void) {
    enum { B = 2, S = 4, H = 1, D = 4 };
    static const int32_t ids[B * S] = {0, 1, 2, 3, 5, 0, 1, 9};
    static const int32_t plain[B * S] = {0, 1, 2, 3, 0, 1, 2, 3};
    float *x = fnew(B * S * H * D), *y = fnew(B * S * H * D), *z = fnew(B * S * H * D);
    fill(x, B * S * H * D, -1, 1);
    CHECK(cpu_rope_forward(y, x, plain, B, S, H, D, 10000.0, &plain_rope) == CPU_OK);
    CHECK(cpu_rope_forward(z, x, NULL, B, S, H, D, 10000.0, &plain_rope) == CPU_OK);
    CHECK(memcmp(y, z, sizeof(float) * B * S * H * D) == 0);
    CHECK(cpu_rope_forward(y, x, ids, B, S, H, D, 10000.0, &plain_rope) == CPU_OK);
    for (int r = 0; r < B * S; r++)
        for (int i = 0; i < D / 2; i++) {
            double ang = ids[r] * pow(10000.0, -2.0 * i / D);
            const float *xr = x + r * D, *yr = y + r * D;
            CHECK_NEAR(yr[i], xr[i] * cos(ang) - xr[i + D / 2] * sin(ang), 2e-6, 0);
            CHECK_NEAR(yr[i + D / 2], xr[i + D / 2] * cos(ang) + xr[i] * sin(ang), 2e-6, 0);
        }
}

// The rotate_half convention against angles in double (small positions, so fp32 angles agree to
// 1e-6), in-place operation, and odd D rejected.
static void test_rope_reference(void) {
    enum { B = 1, S = 7, H = 3, D = 6 };
    const double theta = 500000.0;
    float *x = fnew(B * S * H * D), *y = fnew(B * S * H * D);
    fill(x, B * S * H * D, -1, 1);
    CHECK(cpu_rope_forward(y, x, NULL, B, S, H, D, theta, &plain_rope) == CPU_OK);
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                double ang = s * pow(theta, -2.0 * i / D);
                const float *xr = x + (s * H + h) * D;
                const float *yr = y + (s * H + h) * D;
                CHECK_NEAR(yr[i], xr[i] * cos(ang) - xr[i + D / 2] * sin(ang), 2e-6, 0);
                CHECK_NEAR(yr[i + D / 2], xr[i + D / 2] * cos(ang) + xr[i] * sin(ang), 2e-6, 0);
            }
    float *z = fcopy(x, B * S * H * D);
    CHECK(cpu_rope_forward(z, z, NULL, B, S, H, D, theta, &plain_rope) == CPU_OK);
    CHECK(memcmp(z, y, sizeof(float) * B * S * H * D) == 0);
    CHECK(cpu_rope_forward(y, x, NULL, B, S, H, 5, theta, &plain_rope) == CPU_ERR_ARG);
    CHECK(cpu_rope_angles(y, z, S, 5, theta) == CPU_ERR_ARG);
}

// The angle is HF's fp32 product s * inv_freq: at long positions it visibly differs from the
// double angle, and matches the fp32 recipe recomputed here independently (pow via exp/log).
static void test_rope_angles_fp32(void) {
    enum { S = 4096, D = 128 };
    const double theta = 1000000.0;
    float *c = fnew(S * D / 2), *s = fnew(S * D / 2);
    CHECK(cpu_rope_angles(c, s, S, D, theta) == CPU_OK);
    double max_vs_double = 0.0, max_vs_fp32 = 0.0;
    for (int i = 0; i < D / 2; i++) {
        float e = (float)(2 * i) / (float)D;
        float inv = 1.0f / (float)exp((double)e * log(theta));
        for (int p = 0; p < S; p += 7) {
            float ang32 = (float)p * inv;
            double ang64 = p * pow(theta, -2.0 * i / D);
            max_vs_fp32 = fmax(max_vs_fp32, fabs(c[p * D / 2 + i] - cos((double)ang32)));
            max_vs_fp32 = fmax(max_vs_fp32, fabs(s[p * D / 2 + i] - sin((double)ang32)));
            max_vs_double = fmax(max_vs_double, fabs(c[p * D / 2 + i] - cos(ang64)));
        }
    }
    CHECK(max_vs_fp32 < 1e-6);
    CHECK(max_vs_double > 1e-5);
}

typedef struct {
    Fd f;
    float *q, *k, *v, *dq, *dk, *dv, *lse, *scratch;
    size_t B, S, H, Hkv, D;
    int causal;
    size_t window;
    float softcap;
    double scale;
    const int32_t *pos;   // (B, S) position ids of packed records, or NULL
} AttnCase;

static void attn_fwd(Fd *f) {
    AttnCase *c = (AttnCase *)f;
    CHECK(cpu_attention_forward(f->out, c->lse, c->scratch, c->q, c->k, c->v, c->B, c->S, c->H,
                                c->Hkv, c->D, c->causal, c->window, c->softcap, c->scale, c->pos) == CPU_OK);
}

static void attn_bwd(Fd *f) {
    AttnCase *c = (AttnCase *)f;
    CHECK(cpu_attention_backward(c->dq, c->dk, c->dv, f->R, c->q, c->k, c->v, f->out, c->lse, c->B,
                                 c->S, c->H, c->Hkv, c->D, c->causal, c->window, c->softcap,
                                 c->scale, c->pos) == CPU_OK);
}

static void attn_setup(AttnCase *c) {
    size_t nq = c->B * c->S * c->H * c->D, nk = c->B * c->S * c->Hkv * c->D;
    c->q = fnew(nq), c->dq = fnew(nq), c->k = fnew(nk), c->dk = fnew(nk);
    c->v = fnew(nk), c->dv = fnew(nk);
    c->lse = fnew(c->B * c->H * c->S), c->scratch = fnew(c->S);
    fill(c->q, nq, -1.5f, 1.5f), fill(c->k, nk, -1.5f, 1.5f), fill(c->v, nk, -1, 1);
    c->f.fwd = attn_fwd, c->f.bwd = attn_bwd;
    set_output(&c->f, nq);
    add_input(&c->f, "q", c->q, c->dq, nq, 0);
    add_input(&c->f, "k", c->k, c->dk, nk, 0);
    add_input(&c->f, "v", c->v, c->dv, nk, 0);
}

// Position ids of packed records for B rows of S: row b holds records of lengths 3, 2, 1,
// 3, ... shifted by b, so rows differ.
static const int32_t *packed_pos(size_t B, size_t S) {
    int32_t *pos = alloc_zeroed(B * S * sizeof(int32_t));
    for (size_t b = 0; b < B; b++) {
        size_t len = 3 - b % 3, at = 0;
        for (size_t s = 0; s < S; s++, at++) {
            if (at == len)
                at = 0, len = len % 3 + 1;
            pos[b * S + s] = (int32_t)at;
        }
    }
    return pos;
}

static void attn_grad_pos(size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal, bool packed) {
    AttnCase c = {.B = B, .S = S, .H = H, .Hkv = Hkv, .D = D, .causal = causal,
                  .pos = packed ? packed_pos(B, S) : NULL};
    attn_setup(&c);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

static void attn_grad(size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal) {
    attn_grad_pos(B, S, H, Hkv, D, causal, false);
}

static void test_attention_grad_gqa_causal(void) { attn_grad(2, 5, 4, 2, 4, 1); }
// Document masking: keys of another record are masked, in forward and backward alike.
static void test_attention_grad_packed_causal(void) { attn_grad_pos(2, 7, 4, 2, 4, 1, true); }
static void test_attention_grad_packed_noncausal(void) { attn_grad_pos(2, 6, 2, 1, 4, 0, true); }
static void test_attention_grad_mha_noncausal(void) { attn_grad(1, 4, 2, 2, 6, 0); }
static void test_attention_grad_mqa_causal(void) { attn_grad(1, 6, 3, 1, 4, 1); }
static void test_attention_grad_gqa_noncausal(void) { attn_grad(1, 5, 4, 2, 4, 0); }

// A sliding window (causal and not), soft-capped scores, a scale of its own, all at once;
// and all of them over packed records.
static void test_attention_grad_options(void) {
    for (int causal = 0; causal < 4; causal++) {
        AttnCase c = {.B = 2, .S = 7, .H = 4, .Hkv = 2, .D = 4, .causal = causal % 2, .window = 3,
                      .softcap = 1.5f, .scale = 0.7, .pos = causal > 1 ? packed_pos(2, 7) : NULL};
        attn_setup(&c);
        fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
    }
}

// Attention against naive softmax(q k^T / sqrt(D)) v in double, GQA included, o and lse; with
// a window, a soft cap and a scale of its own too, and with `packed` the keys outside the
// query's record (packed_pos) masked.
static void attn_reference_opts(size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal,
                                size_t window, float softcap, double scale, bool packed) {
    AttnCase c = {.B = B, .S = S, .H = H, .Hkv = Hkv, .D = D, .causal = causal, .window = window,
                  .softcap = softcap, .scale = scale, .pos = packed ? packed_pos(B, S) : NULL};
    attn_setup(&c);
    c.f.fwd(&c.f);
    double *p = alloc_zeroed(S * sizeof(double));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++)
            for (size_t s = 0; s < S; s++) {
                size_t hk = h / (H / Hkv);
                double mx = -INFINITY;
                for (size_t t = 0; t < S; t++) {
                    double dot = 0.0;
                    for (size_t d = 0; d < D; d++)
                        dot += (double)c.q[((b * S + s) * H + h) * D + d] *
                               c.k[((b * S + t) * Hkv + hk) * D + d];
                    double sc = dot * (scale ? scale : 1 / sqrt((double)D));
                    if (softcap > 0)
                        sc = softcap * tanh(sc / softcap);
                    bool hidden = (causal && t > s) || (window && (s >= t + window || t >= s + window)) ||
                                  (c.pos && (int64_t)t - c.pos[b * S + t] != (int64_t)s - c.pos[b * S + s]);
                    p[t] = hidden ? -INFINITY : sc;
                    mx = fmax(mx, p[t]);
                }
                double sum = 0.0;
                for (size_t t = 0; t < S; t++)
                    sum += (p[t] = exp(p[t] - mx));
                CHECK_NEAR(c.lse[(b * H + h) * S + s], mx + log(sum), 1e-6, 1e-6);
                for (size_t d = 0; d < D; d++) {
                    double o = 0.0;
                    for (size_t t = 0; t < S; t++)
                        o += p[t] / sum * c.v[((b * S + t) * Hkv + hk) * D + d];
                    CHECK_NEAR(c.f.out[((b * S + s) * H + h) * D + d], o, 2e-6, 1e-5);
                }
            }
}

static void attn_reference(size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal) {
    attn_reference_opts(B, S, H, Hkv, D, causal, 0, 0, 0, false);
}

static void test_attention_reference(void) {
    attn_reference_opts(2, 9, 4, 2, 8, 1, 4, 0, 0, false);
    attn_reference_opts(1, 9, 4, 2, 8, 0, 3, 0, 0, false);
    attn_reference_opts(1, 7, 2, 1, 8, 1, 0, 2.0f, 0.3, false);
    attn_reference_opts(1, 7, 2, 1, 8, 1, 20, 0, 0, false);   // a window longer than the sequence
    attn_reference_opts(3, 9, 4, 2, 8, 1, 0, 0, 0, true);     // packed records
    attn_reference_opts(2, 8, 2, 2, 4, 0, 0, 0, 0, true);
    attn_reference_opts(2, 9, 4, 2, 8, 1, 2, 1.5f, 0.4, true); // and a window, cap and scale
    attn_reference(2, 7, 4, 4, 8, 1);
    attn_reference(2, 7, 4, 2, 8, 1);
    attn_reference(1, 6, 6, 2, 4, 0);
    attn_reference(1, 6, 3, 1, 16, 1);
    AttnCase c = {.B = 1, .S = 2, .H = 3, .Hkv = 2, .D = 4, .causal = 1};
    attn_setup(&c);
    CHECK(cpu_attention_forward(c.f.out, c.lse, c.scratch, c.q, c.k, c.v, 1, 2, 3, 2, 4, 1, 0, 0, 0, NULL) ==
          CPU_ERR_ARG);
    CHECK(cpu_attention_backward(c.dq, c.dk, c.dv, c.f.R, c.q, c.k, c.v, c.f.out, c.lse, 1, 2, 3,
                                 0, 4, 1, 0, 0, 0, NULL) == CPU_ERR_ARG);
}

typedef struct {
    Fd f;
    float *x, *dx;
    size_t n;
    float p;
    uint64_t seed, offset;
} DropCase;

static void drop_fwd(Fd *f) {
    DropCase *c = (DropCase *)f;
    CHECK(cpu_dropout_forward(f->out, NULL, c->x, c->n, c->p, c->seed, c->offset) == CPU_OK);
}

static void drop_bwd(Fd *f) {
    DropCase *c = (DropCase *)f;
    CHECK(cpu_dropout_backward(c->dx, f->R, NULL, c->n, c->p, c->seed, c->offset) == CPU_OK);
}

static void test_dropout_grad(void) {
    DropCase c = {.n = 40, .p = 0.3f, .seed = 1234, .offset = 17};
    c.x = fnew(c.n), c.dx = fnew(c.n);
    fill(c.x, c.n, -1, 1);
    c.f.fwd = drop_fwd, c.f.bwd = drop_bwd;
    set_output(&c.f, c.n);
    add_input(&c.f, "x", c.x, c.dx, c.n, 0);
    fd_check(&c.f, FD_STEP, FD_ATOL, FD_RTOL);
}

typedef struct {
    Fd f;
    float *logits, *dlogits;
    int32_t *targets;
    size_t N, V;
} CeCase;

static void ce_fwd(Fd *f) {
    CeCase *c = (CeCase *)f;
    CHECK(cpu_cross_entropy_forward(f->out, NULL, c->logits, c->targets, c->N, c->V) == CPU_OK);
}

static void ce_bwd(Fd *f) {
    CeCase *c = (CeCase *)f;
    CHECK(cpu_cross_entropy_backward(c->dlogits, c->logits, c->targets, c->N, c->V, f->R[0]) ==
          CPU_OK);
}

static void ce_setup(CeCase *c) {
    c->logits = fnew(c->N * c->V), c->dlogits = fnew(c->N * c->V), c->targets = inew(c->N);
    fill(c->logits, c->N * c->V, -3, 3);
    for (size_t r = 0; r < c->N; r++) // every third row ignored
        c->targets[r] = r % 3 == 1 ? -100 : (int32_t)(rand_u32() % c->V);
    c->f.fwd = ce_fwd, c->f.bwd = ce_bwd;
    set_output(&c->f, 1);
    add_input(&c->f, "logits", c->logits, c->dlogits, c->N * c->V, 0);
}

static void test_cross_entropy_grad(void) {
    CeCase c = {.N = 7, .V = 6};
    ce_setup(&c);
    // The gradients are O(1 / (N V)); a tighter absolute tolerance keeps the check meaningful.
    fd_check(&c.f, FD_STEP, 1e-5, FD_RTOL);
}

// ---------------------------------------------------------------------------------------------
// The checker itself: it must accept a correct backward and reject wrong ones.

static void mul_bwd_accumulating(Fd *f) { // wrong: += on an activation gradient
    EwCase *c = (EwCase *)f;
    for (size_t i = 0; i < c->n; i++)
        c->da[i] += f->R[i] * c->b[i], c->db[i] = f->R[i] * c->a[i];
}

static void mul_bwd_off_by_one_entry(Fd *f) { // wrong: one entry perturbed
    ew_bwd(f);
    ((EwCase *)f)->da[3] += 0.05f;
}

static void linear_bwd_assigning(Fd *f) { // wrong: = on a parameter gradient
    LinearCase *c = (LinearCase *)f;
    fill_const(c->dw, c->O * c->I, 0.0f);
    linear_bwd(f);
}

static void test_checker_can_fail(void) {
    char detail[256];
    EwCase c = {.op = EW_MUL, .n = 6};
    c.a = fnew(c.n), c.da = fnew(c.n), c.b = fnew(c.n), c.db = fnew(c.n);
    fill(c.a, c.n, -1, 1), fill(c.b, c.n, -1, 1);
    c.f.fwd = ew_fwd, c.f.bwd = ew_bwd;
    set_output(&c.f, c.n);
    add_input(&c.f, "a", c.a, c.da, c.n, 0);
    add_input(&c.f, "b", c.b, c.db, c.n, 0);
    CHECK(fd_check_quiet(&c.f, FD_STEP, FD_ATOL, FD_RTOL, detail, sizeof detail) == 0);

    // A correct gradient with one entry perturbed after the fact: exactly that entry is flagged.
    c.da[3] += 0.05f;
    CHECK(fd_mismatches(&c.f, FD_STEP, FD_ATOL, FD_RTOL, detail, sizeof detail) == 1);
    CHECK(strstr(detail, "da[3]") != NULL);

    c.f.bwd = mul_bwd_off_by_one_entry;
    CHECK(fd_check_quiet(&c.f, FD_STEP, FD_ATOL, FD_RTOL, detail, sizeof detail) == 1);
    c.f.bwd = mul_bwd_accumulating;
    CHECK(fd_check_quiet(&c.f, FD_STEP, FD_ATOL, FD_RTOL, detail, sizeof detail) > 0);

    LinearCase l = {.N = 2, .I = 3, .O = 2};
    l.x = fnew(6), l.dx = fnew(6), l.w = fnew(6), l.dw = fnew(6), l.b = fnew(2), l.db = fnew(2);
    fill(l.x, 6, -1, 1), fill(l.w, 6, -1, 1), fill(l.b, 2, -1, 1);
    l.f.fwd = linear_fwd, l.f.bwd = linear_bwd_assigning;
    set_output(&l.f, 4);
    add_input(&l.f, "x", l.x, l.dx, 6, 0);
    add_input(&l.f, "w", l.w, l.dw, 6, 1);
    CHECK(fd_check_quiet(&l.f, FD_STEP, FD_ATOL, FD_RTOL, detail, sizeof detail) > 0);
    CHECK(strstr(detail, "+=") != NULL);
}

// ---------------------------------------------------------------------------------------------
// Number formats

// bf16 rounding from value distances in double: nearest of the two bf16 neighbours, ties to
// the even one; the overflow neighbour of the largest finite bf16 counts as 2^128.
static uint16_t ref_bf16(float f) {
    if (isnan(f))
        return 0x7fff;
    uint32_t u = f32_bits(f);
    uint32_t sign = u & 0x80000000u;
    if (isinf(f))
        return (uint16_t)((sign | 0x7f800000u) >> 16);
    double a = fabs((double)f);
    uint32_t lo_bits = u & 0x7fff0000u;
    double lo = bits_f32(lo_bits);
    double hi = lo_bits == 0x7f7f0000u ? ldexp(1.0, 128) : (double)bits_f32(lo_bits + 0x10000u);
    uint32_t r;
    if (a - lo < hi - a)
        r = lo_bits;
    else if (a - lo > hi - a)
        r = lo_bits + 0x10000u;
    else
        r = (lo_bits & 0x10000u) ? lo_bits + 0x10000u : lo_bits;
    return (uint16_t)((sign | r) >> 16);
}

static void test_bf16_rounding(void) {
    // Every high half with low halves at the tie, either side of it, the ends, plus random ones,
    // then random bit patterns: about 10M inputs, NaNs, infinities, subnormals and ties included.
    static const uint32_t lows[] = {0x0000, 0x0001, 0x4000, 0x7ffe, 0x7fff, 0x8000,
                                    0x8001, 0xc000, 0xfffe, 0xffff};
    long bad = 0;
    uint32_t first = 0;
    for (uint32_t hi = 0; hi < 0x10000u; hi++) {
        for (size_t j = 0; j < sizeof lows / sizeof lows[0] + 8; j++) {
            uint32_t lo = j < sizeof lows / sizeof lows[0] ? lows[j] : (rand_u32() & 0xffffu);
            uint32_t u = hi << 16 | lo;
            if (cpu_f32_to_bf16(bits_f32(u)) != ref_bf16(bits_f32(u)) && !bad++)
                first = u;
        }
    }
    for (long i = 0; i < (1L << 23); i++) {
        uint32_t u = rand_u32();
        if (cpu_f32_to_bf16(bits_f32(u)) != ref_bf16(bits_f32(u)) && !bad++)
            first = u;
    }
    CHECKF(bad == 0, "%ld mismatches, first 0x%08x -> 0x%04x, want 0x%04x", bad, first,
           cpu_f32_to_bf16(bits_f32(first)), ref_bf16(bits_f32(first)));
    // Named cases: ties to even both ways, NaN, infinities, overflow, signed zero.
    CHECK(cpu_f32_to_bf16(bits_f32(0x3f808000u)) == 0x3f80); // tie, even below
    CHECK(cpu_f32_to_bf16(bits_f32(0x3f818000u)) == 0x3f82); // tie, even above
    CHECK(cpu_f32_to_bf16(bits_f32(0x3f808001u)) == 0x3f81);
    CHECK(cpu_f32_to_bf16(NAN) == 0x7fff);
    CHECK(cpu_f32_to_bf16(-NAN) == 0x7fff);
    CHECK(cpu_f32_to_bf16(INFINITY) == 0x7f80 && cpu_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(cpu_f32_to_bf16(bits_f32(0x7f7fffffu)) == 0x7f80); // FLT_MAX rounds up to inf
    CHECK(cpu_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(cpu_bf16_to_f32(0x3fc0) == 1.5f);
    // Rounding in place equals the round trip, and is idempotent.
    float x[64], y[64];
    fill(x, 64, -100, 100);
    memcpy(y, x, sizeof x);
    cpu_round_bf16(y, 64);
    for (int i = 0; i < 64; i++)
        CHECK(f32_bits(y[i]) == f32_bits(cpu_bf16_to_f32(cpu_f32_to_bf16(x[i]))));
    memcpy(x, y, sizeof x);
    cpu_round_bf16(y, 64);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

// The value of a binary16 bit pattern from its fields, in double.
static double ref_f16_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double mag = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -mag : mag;
}

// fp16 rounding by search over the ordered finite halves: nearest, ties to the even pattern;
// 65504's upper neighbour counts as 65536 so overflow rounds like IEEE.
static uint16_t ref_f16(float f) {
    if (isnan(f))
        return 0x7e00; // any NaN; the caller only checks NaN-ness
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65536.0)
        return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7c00; // value(hi) taken as 65536
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (ref_f16_value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = ref_f16_value(lo), vhi = hi == 0x7c00 ? 65536.0 : ref_f16_value(hi);
    uint16_t r = (a - vlo < vhi - a) ? lo : (a - vlo > vhi - a) ? hi : ((lo & 1) ? hi : lo);
    return sign | r;
}

static void test_fp16_conversion(void) {
    // Every half: widening is exact and narrowing gives back the same bits (NaN payloads too).
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = cpu_f16_to_f32((uint16_t)h);
        int is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (is_nan)
            CHECK(isnan(f));
        else if (((h >> 10) & 0x1f) == 0x1f)
            CHECK(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
        else
            CHECK((double)f == ref_f16_value((uint16_t)h) &&
                  (signbit(f) != 0) == ((h & 0x8000) != 0));
        uint16_t back = cpu_f32_to_f16(f);
        CHECKF(back == h, "half 0x%04x -> %g -> 0x%04x", h, f, back);
    }
    // Rounding: each finite half's midpoint to the next (a tie), one float either side of it,
    // and random floats across the range, against the search.
    long bad = 0;
    float first = 0;
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        double lo = ref_f16_value((uint16_t)h);
        double hi = h == 0x7bff ? 65536.0 : ref_f16_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); // exact: 12 significant bits
        float cases[4] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), -mid};
        for (int j = 0; j < 4; j++)
            if (cpu_f32_to_f16(cases[j]) != ref_f16(cases[j]) && !bad++)
                first = cases[j];
    }
    for (long i = 0; i < (1L << 20); i++) {
        float f = bits_f32((rand_u32() % 0x48000000u) | (rand_u32() & 0x80000000u));
        if (cpu_f32_to_f16(f) != ref_f16(f) && !bad++)
            first = f;
    }
    CHECKF(bad == 0, "%ld mismatches, first %.9g -> 0x%04x, want 0x%04x", bad, first,
           cpu_f32_to_f16(first), ref_f16(first));
    CHECK(cpu_f32_to_f16(65519.996f) == 0x7bff);
    CHECK(cpu_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(cpu_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(cpu_f32_to_f16(0x1p-25f) == 0x0000);                        // tie to even zero
    CHECK(cpu_f32_to_f16(nextafterf(0x1p-25f, 1.0f)) == 0x0001);
    CHECK(cpu_f32_to_f16(0x1.8p-24f) == 0x0002);                      // tie 1.5 -> 2
    CHECK(cpu_f32_to_f16(bits_f32(0x7f800001u)) == 0x7e00);           // low payload: quiet bit
    CHECK((cpu_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (cpu_f32_to_f16(NAN) & 0x3ff) != 0);
}

// ---------------------------------------------------------------------------------------------
// AdamW

static void test_adamw_hand_example(void) {
    // lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay; p = 1, grads 0.5 then -0.25.
    //   t=1: m = 0.05, v = 0.00025, bias corrections 0.1 and 0.001,
    //        p = 1 - 1e-3 * 0.5 / (0.5 + 1e-8) = 0.99900000002
    //   t=2: m = 0.9*0.05 + 0.1*(-0.25) = 0.02, v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225,
    //        bias corrections 0.19 and 0.001999,
    //        p = 0.99900000002 - 1e-3 * (0.02/0.19) / sqrt(0.00031225/0.001999) = 0.998733663
    float p = 1.0f, m = 0.0f, v = 0.0f, g = 0.5f;
    cpu_adamw_step(&p, &g, 1.0f, &m, &v, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1);
    CHECK_NEAR(m, 0.05, 0, 1e-6);
    CHECK_NEAR(v, 0.00025, 0, 1e-6);
    CHECK_NEAR(p, 0.99900000002, 1e-7, 0);
    g = -0.25f;
    cpu_adamw_step(&p, &g, 1.0f, &m, &v, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, 2);
    CHECK_NEAR(m, 0.02, 0, 1e-6);
    CHECK_NEAR(v, 0.00031225, 0, 1e-6);
    CHECK_NEAR(p, 0.998733663, 1e-7, 0);

    // Random vectors with weight decay, two steps, against the same recipe in double.
    enum { n = 32 };
    const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    float *P = fnew(n), *G = fnew(n), *M = fnew(n), *Vv = fnew(n);
    double pd[n], md[n] = {0}, vd[n] = {0};
    fill(P, n, -1, 1);
    for (int i = 0; i < n; i++)
        pd[i] = P[i];
    for (int t = 1; t <= 2; t++) {
        fill(G, n, -0.1f, 0.1f);
        cpu_adamw_step(P, G, 1.0f, M, Vv, n, lr, b1, b2, eps, wd, t);
        for (int i = 0; i < n; i++) {
            pd[i] *= 1.0 - lr * wd;
            md[i] = b1 * md[i] + (1.0 - b1) * G[i];
            vd[i] = b2 * vd[i] + (1.0 - b2) * G[i] * G[i];
            double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
            pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
        }
    }
    for (int i = 0; i < n; i++) {
        CHECK_NEAR(P[i], pd[i], 1e-7, 1e-6);
        CHECK_NEAR(M[i], md[i], 1e-9, 1e-5);
        CHECK_NEAR(Vv[i], vd[i], 1e-12, 1e-5);
    }
}

// bf16_pure's Kahan-compensated updates: 1000 updates of +1e-4 to a bf16 weight of 1.0
// (each under half its ulp, 2^-8) vanish stored plainly, and add up to 1.1 compensated
// (within the bf16 ulp there, 2^-7); a weight of 100.0 with updates of 0.3 and -0.3 in
// turn ends within half an ulp of where it started; and an update larger than the ulp
// lands where plain rounding puts it.
static void test_kahan_small_updates(void) {
    float plain = 1.0f, w = 1.0f, comp = 0.0f;
    for (int i = 0; i < 1000; i++) {
        plain = cpu_bf16_to_f32(cpu_f32_to_bf16(plain + 1e-4f));
        float old = w, next = w + 1e-4f;
        cpu_kahan(&next, &old, &comp, 1, false);
        comp = cpu_bf16_to_f32(cpu_f32_to_bf16(comp));   // stored in the weight's dtype
        w = next;
        CHECK(cpu_bf16_to_f32(cpu_f32_to_bf16(w)) == w);   // a weight bf16 holds
    }
    CHECK(plain == 1.0f);
    CHECK_NEAR(w, 1.1, 0x1p-7, 0);
    printf("  1000 updates of 1e-4 to 1.0 in bf16: %g plainly, %.5g compensated (exact 1.1)\n", plain, w);
    float x = 100.0f, c = 0.0f;
    for (int i = 0; i < 200; i++) {
        float old = x, next = x + (i % 2 ? -0.3f : 0.3f);
        cpu_kahan(&next, &old, &c, 1, false);
        c = cpu_bf16_to_f32(cpu_f32_to_bf16(c));
        x = next;
    }
    CHECK_NEAR(x, 100.0, 0.25, 0);
    float old = 1.0f, big = 1.0f + 0.1f, zero = 0.0f;
    cpu_kahan(&big, &old, &zero, 1, false);
    CHECK(big == cpu_bf16_to_f32(cpu_f32_to_bf16(1.1f)));
}

// ---------------------------------------------------------------------------------------------
// Cross entropy

static void test_cross_entropy_reference(void) {
    CeCase c = {.N = 9, .V = 11};
    ce_setup(&c);
    float loss, *lse = fnew(c.N);
    CHECK(cpu_cross_entropy_forward(&loss, lse, c.logits, c.targets, c.N, c.V) == CPU_OK);
    double sum = 0.0;
    size_t nv = 0;
    for (size_t r = 0; r < c.N; r++) {
        if (c.targets[r] < 0) {
            CHECK(lse[r] == 0.0f);
            continue;
        }
        double s = 0.0;
        for (size_t j = 0; j < c.V; j++)
            s += exp((double)c.logits[r * c.V + j]);
        CHECK_NEAR(lse[r], log(s), 1e-6, 1e-6);
        sum += log(s) - c.logits[r * c.V + c.targets[r]];
        nv++;
    }
    CHECK(nv == cpu_cross_entropy_count_valid(c.targets, c.N));
    CHECK_NEAR(loss, sum / (double)nv, 1e-6, 1e-6);

    CHECK(cpu_cross_entropy_backward(c.dlogits, c.logits, c.targets, c.N, c.V, 2.0f) == CPU_OK);
    for (size_t r = 0; r < c.N; r++) {
        double rs = 0.0;
        for (size_t j = 0; j < c.V; j++) {
            float d = c.dlogits[r * c.V + j];
            rs += d;
            if (c.targets[r] < 0)
                CHECK(d == 0.0f);
        }
        CHECK_NEAR(rs, 0.0, 1e-7, 0);
    }
}

// Chunks over consecutive row ranges reproduce the whole-batch calls bitwise.
static void test_cross_entropy_rows_match_batch(void) {
    CeCase c = {.N = 13, .V = 37};
    ce_setup(&c);
    static const size_t cuts[] = {0, 1, 5, 6, 12, 13};
    float whole, *lse_whole = fnew(c.N), *lse_rows = fnew(c.N), *d_rows = fnew(c.N * c.V);
    CHECK(cpu_cross_entropy_forward(&whole, lse_whole, c.logits, c.targets, c.N, c.V) == CPU_OK);
    CHECK(cpu_cross_entropy_backward(c.dlogits, c.logits, c.targets, c.N, c.V, 0.75f) == CPU_OK);
    size_t nv = cpu_cross_entropy_count_valid(c.targets, c.N);
    double sum = 0.0;
    for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++) {
        size_t r0 = cuts[i], R = cuts[i + 1] - cuts[i];
        CHECK(cpu_cross_entropy_forward_rows(&sum, lse_rows + r0, c.logits + r0 * c.V,
                                             c.targets + r0, R, c.V) == CPU_OK);
        CHECK(cpu_cross_entropy_backward_rows(d_rows + r0 * c.V, c.logits + r0 * c.V,
                                              c.targets + r0, R, c.V, 0.75f, nv) == CPU_OK);
    }
    float chunked = (float)(sum / (double)nv);
    CHECK(f32_bits(chunked) == f32_bits(whole));
    CHECK(memcmp(lse_rows, lse_whole, sizeof(float) * c.N) == 0);
    CHECK(memcmp(d_rows, c.dlogits, sizeof(float) * c.N * c.V) == 0);
}

// All rows ignored: NaN loss as torch, zero gradient; a target >= V is rejected untouched.
static void test_cross_entropy_ignored_and_errors(void) {
    CeCase c = {.N = 4, .V = 5};
    ce_setup(&c);
    for (size_t r = 0; r < c.N; r++)
        c.targets[r] = -100;
    float loss;
    CHECK(cpu_cross_entropy_forward(&loss, NULL, c.logits, c.targets, c.N, c.V) == CPU_OK);
    CHECK(isnan(loss));
    fill_const(c.dlogits, c.N * c.V, 7.0f);
    CHECK(cpu_cross_entropy_backward(c.dlogits, c.logits, c.targets, c.N, c.V, 1.0f) == CPU_OK);
    for (size_t i = 0; i < c.N * c.V; i++)
        CHECK(c.dlogits[i] == 0.0f);
    c.targets[2] = (int32_t)c.V;
    fill_const(c.dlogits, c.N * c.V, 7.0f);
    loss = 3.0f;
    double sum = 1.0;
    CHECK(cpu_cross_entropy_forward(&loss, NULL, c.logits, c.targets, c.N, c.V) == CPU_ERR_INDEX);
    CHECK(cpu_cross_entropy_forward_rows(&sum, NULL, c.logits, c.targets, c.N, c.V) ==
          CPU_ERR_INDEX);
    CHECK(cpu_cross_entropy_backward(c.dlogits, c.logits, c.targets, c.N, c.V, 1.0f) ==
          CPU_ERR_INDEX);
    CHECK(loss == 3.0f && sum == 1.0);
    for (size_t i = 0; i < c.N * c.V; i++)
        CHECK(c.dlogits[i] == 7.0f);
}

// ---------------------------------------------------------------------------------------------
// Embedding, dropout, determinism

static void test_embedding_rejects_bad_ids(void) {
    enum { V = 4, C = 3 };
    float table[V * C], out[2 * C], dtable[V * C];
    fill(table, V * C, -1, 1);
    fill_const(out, 2 * C, 9.0f);
    fill_const(dtable, V * C, 9.0f);
    int32_t too_big[2] = {1, V}, negative[2] = {-1, 0};
    CHECK(cpu_embedding_forward(out, too_big, table, 2, V, C) == CPU_ERR_INDEX);
    CHECK(cpu_embedding_forward(out, negative, table, 2, V, C) == CPU_ERR_INDEX);
    CHECK(cpu_embedding_backward(dtable, out, too_big, 2, V, C, -1) == CPU_ERR_INDEX);
    CHECK(cpu_embedding_backward(dtable, out, negative, 2, V, C, -1) == CPU_ERR_INDEX);
    for (int i = 0; i < 2 * C; i++)
        CHECK(out[i] == 9.0f);
    for (int i = 0; i < V * C; i++)
        CHECK(dtable[i] == 9.0f);
    int32_t ok[2] = {3, 0};
    CHECK(cpu_embedding_forward(out, ok, table, 2, V, C) == CPU_OK);
    CHECK(memcmp(out, table + 3 * C, sizeof(float) * C) == 0);
}

static void test_dropout_rng(void) {
    enum { n = 200000 };
    const float p = 0.25f;
    float *x = fnew(n), *y1 = fnew(n), *y2 = fnew(n), *y3 = fnew(n), *dx1 = fnew(n), *dx2 = fnew(n);
    uint8_t *mask = alloc_zeroed(n);
    fill(x, n, -1, 1);
    CHECK(cpu_dropout_forward(y1, mask, x, n, p, 42, 1000) == CPU_OK);
    CHECK(cpu_dropout_forward(y2, NULL, x, n, p, 42, 1000) == CPU_OK);
    CHECK(memcmp(y1, y2, sizeof(float) * n) == 0); // same seed, bitwise same
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        kept += mask[i];
        CHECK(f32_bits(y1[i]) == f32_bits(mask[i] ? x[i] * (1.0f / (1.0f - p)) : 0.0f));
    }
    CHECK(fabs((double)kept / n - (1.0 - p)) < 0.005);
    // Chunks with matching offsets reproduce the whole call.
    CHECK(cpu_dropout_forward(y3, NULL, x, 777, p, 42, 1000) == CPU_OK);
    CHECK(cpu_dropout_forward(y3 + 777, NULL, x + 777, n - 777, p, 42, 1000 + 777) == CPU_OK);
    CHECK(memcmp(y1, y3, sizeof(float) * n) == 0);
    // Another seed gives another mask.
    CHECK(cpu_dropout_forward(y3, NULL, x, n, p, 43, 1000) == CPU_OK);
    CHECK(memcmp(y1, y3, sizeof(float) * n) != 0);
    // Backward from the mask equals backward recomputing it.
    CHECK(cpu_dropout_backward(dx1, x, mask, n, p, 42, 1000) == CPU_OK);
    CHECK(cpu_dropout_backward(dx2, x, NULL, n, p, 42, 1000) == CPU_OK);
    CHECK(memcmp(dx1, dx2, sizeof(float) * n) == 0);
    // p = 0 is the identity, p = 1 drops everything, p outside [0, 1] is rejected.
    CHECK(cpu_dropout_forward(y3, NULL, x, n, 0.0f, 42, 0) == CPU_OK);
    CHECK(memcmp(y3, x, sizeof(float) * n) == 0);
    CHECK(cpu_dropout_forward(y3, mask, x, n, 1.0f, 42, 0) == CPU_OK);
    for (size_t i = 0; i < n; i++)
        CHECK(y3[i] == 0.0f && mask[i] == 0);
    CHECK(cpu_dropout_forward(y3, NULL, x, n, 1.5f, 42, 0) == CPU_ERR_ARG);
    CHECK(cpu_dropout_backward(dx1, x, NULL, n, -0.1f, 42, 0) == CPU_ERR_ARG);
    CHECK(cpu_dropout_threshold(0.5f) == 0x80000000u);
}

// Two runs of the larger kernels give bitwise-identical results.
static void test_determinism(void) {
    enum { B = 2, S = 16, H = 4, Hkv = 2, D = 8, N = B * S, C = H * D, V = 50 };
    size_t nq = B * S * H * D, nk = B * S * Hkv * D;
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *dout = fnew(nq), *scratch = fnew(S);
    fill(q, nq, -1, 1), fill(k, nk, -1, 1), fill(v, nk, -1, 1), fill(dout, nq, -1, 1);
    float *w = fnew(V * C), *logits = fnew(N * V);
    int32_t *tg = inew(N);
    fill(w, V * C, -0.3f, 0.3f);
    for (int r = 0; r < N; r++)
        tg[r] = (int32_t)(rand_u32() % V);
    float *res[2][7];
    for (int run_i = 0; run_i < 2; run_i++) {
        float **r = res[run_i];
        r[0] = fnew(nq), r[1] = fnew(B * H * S), r[2] = fnew(nq), r[3] = fnew(nk), r[4] = fnew(nk);
        r[5] = fnew(V * C), r[6] = fnew(N * V + 1);
        cpu_attention_forward(r[0], r[1], scratch, q, k, v, B, S, H, Hkv, D, 1, 0, 0, 0, NULL);
        cpu_attention_backward(r[2], r[3], r[4], dout, q, k, v, r[0], r[1], B, S, H, Hkv, D, 1, 0, 0, 0, NULL);
        cpu_linear_forward(logits, r[0], w, NULL, N, C, V);
        cpu_cross_entropy_forward(&r[6][N * V], NULL, logits, tg, N, V);
        cpu_cross_entropy_backward(r[6], logits, tg, N, V, 1.0f);
        cpu_linear_backward(NULL, r[5], NULL, r[6], r[0], w, N, C, V);
    }
    size_t sizes[7] = {nq, B * H * S, nq, nk, nk, V * C, N * V + 1};
    for (int i = 0; i < 7; i++)
        CHECK(memcmp(res[0][i], res[1][i], sizes[i] * sizeof(float)) == 0);
}

// ---------------------------------------------------------------------------------------------

// transformers' frequency tables (tests/fixtures/make_rope.py: ROPE_INIT_FUNCTIONS on the
// same settings) against cpu_rope_freqs: each frequency within 1 ulp, the cos/sin factor
// within 1e-7 relative.
static const char *fixtures = "tests/fixtures";

static void test_rope_freqs_hf(void) {
    static const struct {
        const char *name;
        size_t D;
        double theta;
        OpRope r;
    } cases[] = {
        {"plain_64", 64, 10000.0, {0}},
        {"plain_128_1e6", 128, 1000000.0, {0}},
        {"partial_quarter", 128, 10000.0, {.rotary = 32}},
        {"linear_8", 256, 1000000.0, {.scaling = ROPE_LINEAR, .factor = 8}},
        {"dynamic_short", 64, 10000.0, {.scaling = ROPE_DYNAMIC, .factor = 2, .original = 2048, .length = 1024}},
        {"dynamic_long", 64, 10000.0, {.scaling = ROPE_DYNAMIC, .factor = 2, .original = 2048, .length = 4096}},
        {"llama3_1", 128, 500000.0,
         {.scaling = ROPE_LLAMA3, .factor = 8, .low = 1, .high = 4, .original = 8192}},
        {"llama3_2", 64, 500000.0,
         {.scaling = ROPE_LLAMA3, .factor = 32, .low = 1, .high = 4, .original = 8192}},
        {"yarn_qwen", 128, 1000000.0, {.scaling = ROPE_YARN, .factor = 4, .original = 32768}},
        {"yarn_mscale_untruncated", 64, 10000.0,
         {.scaling = ROPE_YARN, .factor = 40, .low = 24, .high = 2, .original = 4096,
          .attn_factor = 0.9210423553163399, .no_truncate = true}},
        {"yarn_given_factor_partial", 96, 10000.0,
         {.rotary = 48, .scaling = ROPE_YARN, .factor = 2.5, .original = 2048, .attn_factor = 1.25}},
    };
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/rope/freqs.safetensors", fixtures);
    StSet *st = NULL;
    CHECKF(st_open(&st, path, err, sizeof err) == 0, "%s", err);
    if (!st)
        return;
    int exact = 0, total = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[128];
        snprintf(name, sizeof name, "%s.inv", cases[c].name);
        const StTensor *t = st_find(st, name);
        snprintf(name, sizeof name, "%s.mscale", cases[c].name);
        const StTensor *m = st_find(st, name);
        CHECKF(t && m, "%s: not in the fixture", cases[c].name);
        if (!t || !m)
            continue;
        int64_t n = st_elems(t);
        float want[4096], got[4096], wscale, scale;
        CHECK(n <= 4096 && st_read_f32(st, t, want, n, err, sizeof err) == 0 &&
              st_read_f32(st, m, &wscale, 1, err, sizeof err) == 0);
        CHECK_EQ(CPU_OK, cpu_rope_freqs(got, &scale, cases[c].D, cases[c].theta, &cases[c].r));
        size_t d = cases[c].r.rotary ? (size_t)cases[c].r.rotary : cases[c].D;
        CHECK_EQ((int64_t)(d / 2), n);
        for (int64_t i = 0; i < n && (int64_t)(d / 2) == n; i++) {
            int32_t ulps = (int32_t)f32_bits(got[i]) - (int32_t)f32_bits(want[i]);
            exact += ulps == 0, total++;
            CHECKF(abs(ulps) <= 1, "%s: inv_freq[%lld] %.9g, transformers %.9g", cases[c].name,
                   (long long)i, got[i], want[i]);
        }
        CHECK_NEAR(scale, wscale, 0, 1e-7);
    }
    printf("  %d of %d frequencies bitwise transformers', the rest within 1 ulp\n", exact, total);
    st_close(st);
}

int main(int argc, char **argv) {
    if (argc > 1)
        fixtures = argv[1];
    run("checker_can_fail", test_checker_can_fail);
    run("embedding_grad", test_embedding_grad);
    run("embedding_padding", test_embedding_padding);
    run("embedding_rejects_bad_ids", test_embedding_rejects_bad_ids);
    run("linear_grad", test_linear_grad);
    run("linear_reference_and_nulls", test_linear_reference_and_nulls);
    run("matmul_grad", test_matmul_grad);
    run("add_grad", test_add_grad);
    run("sub_grad", test_sub_grad);
    run("mul_grad", test_mul_grad);
    run("div_grad", test_div_grad);
    run("scale_grad", test_scale_grad);
    run("silu_grad", test_silu_grad);
    run("gelu_grad", test_gelu_grad);
    run("tanh_grad", test_tanh_grad);
    run("softcap_grad", test_softcap_grad);
    run("gelu_exact_grad", test_gelu_exact_grad);
    run("slice_concat_grad", test_slice_concat_grad);
    run("exp_grad", test_exp_grad);
    run("elementwise_values", test_elementwise_values);
    run("fmath", test_fmath);
    run("sum_grad", test_sum_grad);
    run("sum_deterministic", test_sum_deterministic);
    run("softmax_grad", test_softmax_grad);
    run("rmsnorm_grad", test_rmsnorm_grad);
    run("layernorm_grad", test_layernorm_grad);
    run("rope_grad", test_rope_grad);
    run("rope_positions", test_rope_positions);
    run("rope_reference", test_rope_reference);
    run("rope_freqs_hf", test_rope_freqs_hf);
    run("rope_angles_fp32", test_rope_angles_fp32);
    run("attention_grad_gqa_causal", test_attention_grad_gqa_causal);
    run("attention_grad_packed_causal", test_attention_grad_packed_causal);
    run("attention_grad_packed_noncausal", test_attention_grad_packed_noncausal);
    run("attention_grad_gqa_noncausal", test_attention_grad_gqa_noncausal);
    run("attention_grad_options", test_attention_grad_options);
    run("attention_grad_mha_noncausal", test_attention_grad_mha_noncausal);
    run("attention_grad_mqa_causal", test_attention_grad_mqa_causal);
    run("attention_reference", test_attention_reference);
    run("dropout_grad", test_dropout_grad);
    run("dropout_rng", test_dropout_rng);
    run("cross_entropy_grad", test_cross_entropy_grad);
    run("cross_entropy_reference", test_cross_entropy_reference);
    run("cross_entropy_rows_match_batch", test_cross_entropy_rows_match_batch);
    run("cross_entropy_ignored_and_errors", test_cross_entropy_ignored_and_errors);
    run("bf16_rounding", test_bf16_rounding);
    run("fp16_conversion", test_fp16_conversion);
    run("adamw_hand_example", test_adamw_hand_example);
    run("kahan_small_updates", test_kahan_small_updates);
    run("determinism", test_determinism);
    return CHECK_DONE();
}
