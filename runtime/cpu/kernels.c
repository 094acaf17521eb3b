// kernels.c: the cpu backend's reference kernels; see kernels.h for the contracts and README.md
// for the conventions. Readable loops over fp32 arrays; sums of many terms go through double.
// Compile as ISO C11 (-std=c11): GCC then keeps a*b+c unfused, which the bitwise-determinism
// and torch-arithmetic claims rely on; the one intended fusion is written as fmaf.
#include "kernels.h"
#include "../ops.h"

#include <assert.h>
#include "blas.h"
#include <limits.h>
#include <math.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Number formats

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

// expf, tanhf and erff as the generated kernels compute them (the elementwise ops' bits).
#define FTC_INLINE static inline
#define ftc_u2f bits_f32
#include "../fmath.h"
#undef ftc_u2f
#undef FTC_INLINE

uint16_t cpu_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cpu_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t cpu_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        // Keep the top 10 payload bits; a payload living only in the low bits still needs a
        // non-zero mantissa to stay NaN, so it gets the quiet bit.
        uint16_t m = (uint16_t)((a >> 13) & 0x3ffu);
        return (uint16_t)(sign | 0x7c00u | (m ? m : 0x200u));
    }
    if (a >= 0x477ff000u) // 65520 = midway between 65504 and 2^16: ties to even, i.e. to inf
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { // normal half, |f| >= 2^-14: round at bit 13, rebias 127 -> 15
        uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - (112u << 23)) >> 13));
    }
    if (a < 0x33000000u) // below 2^-25, at most half the smallest subnormal: rounds to zero
        return sign;
    // Subnormal half: the value in units of 2^-24 is mant * 2^-shift, rounded to nearest even.
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    int exp = (int)(a >> 23) - 127; // in [-25, -15]
    unsigned shift = (unsigned)(-(exp + 1)); // in [14, 24]
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float mag = (float)m * 0x1p-24f; // exact: m < 2^10
        return bits_f32(sign | f32_bits(mag));
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

void cpu_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = cpu_bf16_to_f32(cpu_f32_to_bf16(x[i]));
}

// ---------------------------------------------------------------------------------------------
// Embedding

static int indices_ok(const int32_t *idx, size_t N, size_t V) {
    for (size_t n = 0; n < N; n++)
        if (idx[n] < 0 || (size_t)idx[n] >= V)
            return 0;
    return 1;
}

int cpu_embedding_forward(float *out, const int32_t *idx, const float *table, size_t N, size_t V,
                          size_t C) {
    if (!indices_ok(idx, N, V))
        return CPU_ERR_INDEX;
    for (size_t n = 0; n < N; n++)
        memcpy(out + n * C, table + (size_t)idx[n] * C, C * sizeof(float));
    return CPU_OK;
}

int cpu_embedding_backward(float *dtable, const float *dout, const int32_t *idx, size_t N, size_t V,
                           size_t C, int64_t pad) {
    if (!indices_ok(idx, N, V))
        return CPU_ERR_INDEX;
    for (size_t n = 0; n < N; n++) {
        if (idx[n] == pad)
            continue;
        float *row = dtable + (size_t)idx[n] * C;
        const float *g = dout + n * C;
        for (size_t c = 0; c < C; c++)
            row[c] += g[c];
    }
    return CPU_OK;
}

// ---------------------------------------------------------------------------------------------
// Linear and matmul

void cpu_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, const float *a,
              const float *b, float beta, float *c) {
    cpu_gemm_scaled(trans_a, trans_b, M, N, K, 1.0f, a, b, beta, c);
}

void cpu_gemm_scaled(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha, const float *a,
                     const float *b, float beta, float *c) {
    if (M == 0 || N == 0)
        return;
    if (K == 0) { // an empty sum; BLAS would reject the zero leading dimension
        if (beta == 0.0f)
            memset(c, 0, M * N * sizeof(float));
        return;
    }
    assert(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX);
    blas_sgemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N,
               (int)K, alpha, a, (int)(trans_a ? M : K), b, (int)(trans_b ? K : N), beta, c, (int)N);
}

// Column blocks of this width keep row reads contiguous while columns accumulate in double.
enum { COL_BLOCK = 64 };

void cpu_linear_forward(float *y, const float *x, const float *w, const float *b, size_t N,
                        size_t Cin, size_t Cout) {
    cpu_gemm(0, 1, N, Cout, Cin, x, w, 0.0f, y);
    if (b)
        for (size_t n = 0; n < N; n++)
            for (size_t o = 0; o < Cout; o++)
                y[n * Cout + o] += b[o];
}

void cpu_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, size_t N, size_t Cin, size_t Cout) {
    if (dx)
        cpu_gemm(0, 0, N, Cin, Cout, dy, w, 0.0f, dx);
    if (dw)
        cpu_gemm(1, 0, Cout, Cin, N, dy, x, 1.0f, dw);
    if (db) {
        for (size_t o0 = 0; o0 < Cout; o0 += COL_BLOCK) {
            size_t o1 = o0 + COL_BLOCK < Cout ? o0 + COL_BLOCK : Cout;
            double acc[COL_BLOCK] = {0};
            for (size_t n = 0; n < N; n++)
                for (size_t o = o0; o < o1; o++)
                    acc[o - o0] += dy[n * Cout + o];
            for (size_t o = o0; o < o1; o++)
                db[o] += (float)acc[o - o0];
        }
    }
}

void cpu_matmul_forward(float *out, const float *a, const float *b, size_t Bt, size_t M, size_t K,
                        size_t N) {
    for (size_t t = 0; t < Bt; t++)
        cpu_gemm(0, 0, M, N, K, a + t * M * K, b + t * K * N, 0.0f, out + t * M * N);
}

void cpu_matmul_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                         size_t Bt, size_t M, size_t K, size_t N) {
    for (size_t t = 0; t < Bt; t++) {
        const float *g = dout + t * M * N;
        if (da)
            cpu_gemm(0, 1, M, K, N, g, b + t * K * N, 0.0f, da + t * M * K);
        if (db)
            cpu_gemm(1, 0, K, N, M, a + t * M * K, g, 1.0f, db + t * K * N);
    }
}

// ---------------------------------------------------------------------------------------------
// Elementwise. Each loop reads an element's inputs before writing, so outputs may alias inputs.

void cpu_add_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void cpu_add_backward(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dout[i];
        if (da)
            da[i] = g;
        if (db)
            db[i] = g;
    }
}

void cpu_sub_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] - b[i];
}

void cpu_sub_backward(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dout[i];
        if (da)
            da[i] = g;
        if (db)
            db[i] = -g;
    }
}

void cpu_mul_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] * b[i];
}

void cpu_mul_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                      size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dout[i], ai = a[i], bi = b[i];
        if (da)
            da[i] = g * bi;
        if (db)
            db[i] = g * ai;
    }
}

void cpu_div_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] / b[i];
}

void cpu_div_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                      size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dout[i], ai = a[i], bi = b[i];
        if (da)
            da[i] = g / bi;
        if (db)
            db[i] = -g * ai / (bi * bi);
    }
}

void cpu_scale_forward(float *out, const float *x, float c, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] * c;
}

void cpu_scale_backward(float *dx, const float *dout, float c, size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = dout[i] * c;
}

void cpu_silu_forward(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] / (1.0f + ftc_expf(-x[i]));
}

void cpu_silu_backward(float *dx, const float *dout, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float s = 1.0f / (1.0f + ftc_expf(-xi));
        dx[i] = dout[i] * (s * (1.0f + xi * (1.0f - s)));
    }
}

// sqrt(2/pi) and the cubic coefficient, as torch's tanh-approximate gelu spells them.
static const float GELU_BETA = 0.7978845608028654f;
static const float GELU_KAPPA = 0.044715f;

void cpu_gelu_forward(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float inner = GELU_BETA * (xi + GELU_KAPPA * (xi * xi * xi));
        out[i] = 0.5f * xi * (1.0f + ftc_tanhf(inner));
    }
}

void cpu_gelu_backward(float *dx, const float *dout, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float x2 = xi * xi;
        float t = ftc_tanhf(GELU_BETA * (xi + GELU_KAPPA * x2 * xi));
        float dinner = GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * x2);
        float d = 0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * dinner;
        dx[i] = dout[i] * d;
    }
}

void cpu_tanh_forward(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = ftc_tanhf(x[i]);
}

void cpu_tanh_backward(float *dx, const float *dout, const float *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = dout[i] * (1.0f - out[i] * out[i]);
}

void cpu_softcap_forward(float *out, const float *x, float cap, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = cap * ftc_tanhf(x[i] / cap);
}

void cpu_softcap_backward(float *dx, const float *dout, const float *out, float cap, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float t = out[i] / cap;
        dx[i] = dout[i] * (1.0f - t * t);
    }
}

// 1/sqrt(2) and 1/sqrt(2 pi), as torch's exact gelu spells them (M_SQRT1_2, the pdf's constant).
static const float SQRT1_2 = 0.70710678118654752f;
static const float INV_SQRT_2PI = 0.39894228040143268f;

void cpu_gelu_exact_forward(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = 0.5f * x[i] * (1.0f + ftc_erff(x[i] * SQRT1_2));
}

void cpu_gelu_exact_backward(float *dx, const float *dout, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float cdf = 0.5f * (1.0f + ftc_erff(xi * SQRT1_2));
        float pdf = ftc_expf(-0.5f * xi * xi) * INV_SQRT_2PI;
        dx[i] = dout[i] * (cdf + xi * pdf);
    }
}

void cpu_exp_forward(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = ftc_expf(x[i]);
}

void cpu_exp_backward(float *dx, const float *dout, const float *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = dout[i] * out[i];
}

// ---------------------------------------------------------------------------------------------
// Slices and joins

void cpu_slice_forward(float *out, const float *x, size_t outer, size_t dim, size_t inner,
                       size_t start, size_t size) {
    for (size_t o = 0; o < outer; o++)
        memcpy(out + o * size * inner, x + (o * dim + start) * inner, sizeof(float) * size * inner);
}

void cpu_slice_backward(float *dx, const float *dy, size_t outer, size_t dim, size_t inner,
                        size_t start, size_t size, int accumulate) {
    if (!accumulate)
        memset(dx, 0, sizeof(float) * outer * dim * inner);
    for (size_t o = 0; o < outer; o++) {
        float *d = dx + (o * dim + start) * inner;
        const float *g = dy + o * size * inner;
        for (size_t i = 0; i < size * inner; i++)
            d[i] = accumulate ? d[i] + g[i] : g[i];
    }
}

void cpu_concat_forward(float *out, const float *const *x, const size_t *dims, size_t n,
                        size_t outer, size_t inner) {
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += dims[k];
    for (size_t o = 0; o < outer; o++) {
        size_t at = 0;
        for (size_t k = 0; k < n; k++) {
            memcpy(out + (o * total + at) * inner, x[k] + o * dims[k] * inner,
                   sizeof(float) * dims[k] * inner);
            at += dims[k];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions

void cpu_sum_forward(float *out, const float *x, size_t N, size_t C) {
    for (size_t r = 0; r < N; r++) {
        double acc = 0.0;
        for (size_t c = 0; c < C; c++)
            acc += x[r * C + c];
        out[r] = (float)acc;
    }
}

void cpu_sum_backward(float *dx, const float *dout, size_t N, size_t C) {
    for (size_t r = 0; r < N; r++)
        for (size_t c = 0; c < C; c++)
            dx[r * C + c] = dout[r];
}

// ---------------------------------------------------------------------------------------------
// Normalisation

void cpu_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, size_t N, size_t C,
                         float eps, float offset) {
    for (size_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        double ss = 0.0;
        for (size_t c = 0; c < C; c++)
            ss += (double)xr[c] * xr[c];
        float var = (float)(ss / (double)C);
        float r = 1.0f / sqrtf(var + eps); // torch.rsqrt(variance + eps) in fp32
        rstd[n] = r;
        for (size_t c = 0; c < C; c++)
            y[n * C + c] = (xr[c] * r) * (w[c] + offset);
    }
}

void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                          const float *rstd, size_t N, size_t C, float offset) {
    // y = w' x r, w' = w + offset, r = (mean(x^2) + eps)^-1/2:
    // dx = r w' dy - (r^3 / C) x sum(w' dy x).
    for (size_t n = 0; dx && n < N; n++) {
        const float *xr = x + n * C, *g = dy + n * C;
        double r = rstd[n];
        double dot = 0.0;
        for (size_t c = 0; c < C; c++)
            dot += (double)(w[c] + offset) * g[c] * xr[c];
        double k = r * r * r * dot / (double)C;
        for (size_t c = 0; c < C; c++)
            dx[n * C + c] = (float)(r * (w[c] + offset) * g[c] - k * xr[c]);
    }
    if (!dw)
        return;
    for (size_t c0 = 0; c0 < C; c0 += COL_BLOCK) {
        size_t c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        double acc[COL_BLOCK] = {0};
        for (size_t n = 0; n < N; n++)
            for (size_t c = c0; c < c1; c++)
                acc[c - c0] += (double)dy[n * C + c] * x[n * C + c] * rstd[n];
        for (size_t c = c0; c < c1; c++)
            dw[c] += (float)acc[c - c0];
    }
}

void cpu_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, size_t N, size_t C, float eps) {
    for (size_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        double s = 0.0;
        for (size_t c = 0; c < C; c++)
            s += xr[c];
        double mu = s / (double)C;
        double ss = 0.0;
        for (size_t c = 0; c < C; c++)
            ss += (xr[c] - mu) * (xr[c] - mu);
        float m = (float)mu;
        float r = 1.0f / sqrtf((float)(ss / (double)C) + eps);
        mean[n] = m;
        rstd[n] = r;
        for (size_t c = 0; c < C; c++)
            y[n * C + c] = (xr[c] - m) * r * w[c] + b[c];
    }
}

void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *w, const float *mean, const float *rstd, size_t N,
                            size_t C) {
    // With xhat = (x - mean) r and g = w dy: dx = r (g - mean(g) - xhat mean(g xhat)).
    for (size_t n = 0; dx && n < N; n++) {
        const float *xr = x + n * C, *d = dy + n * C;
        double mu = mean[n], r = rstd[n];
        double sg = 0.0, sgx = 0.0;
        for (size_t c = 0; c < C; c++) {
            double g = (double)w[c] * d[c];
            sg += g;
            sgx += g * (xr[c] - mu) * r;
        }
        sg /= (double)C;
        sgx /= (double)C;
        for (size_t c = 0; c < C; c++) {
            double xhat = (xr[c] - mu) * r;
            dx[n * C + c] = (float)(r * ((double)w[c] * d[c] - sg - xhat * sgx));
        }
    }
    for (size_t c0 = 0; c0 < C && (dw || db); c0 += COL_BLOCK) {
        size_t c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        double aw[COL_BLOCK] = {0}, ab[COL_BLOCK] = {0};
        for (size_t n = 0; n < N; n++)
            for (size_t c = c0; c < c1; c++) {
                double d = dy[n * C + c];
                aw[c - c0] += d * ((x[n * C + c] - (double)mean[n]) * rstd[n]);
                ab[c - c0] += d;
            }
        for (size_t c = c0; c < c1; c++) {
            if (dw)
                dw[c] += (float)aw[c - c0];
            if (db)
                db[c] += (float)ab[c - c0];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rotary position embedding

// HF's base frequencies over d rotary dims: 1.0 / (theta ** (arange(0, d, 2).float() / d)),
// in fp32 with theta rounded to fp32 (torch computes scalar ** tensor in the tensor's dtype).
static float rope_base_pow(size_t i, size_t d, double theta) {
    float e = (float)(2 * i) / (float)d;
    return (float)pow((double)(float)theta, (double)e);
}

static float rope_base_freq(size_t i, size_t d, double theta) { return 1.0f / rope_base_pow(i, d, theta); }

// transformers' get_mscale: the attention factor YaRN derives from its scaling factor.
static double yarn_mscale(double factor) { return factor <= 1 ? 1.0 : 0.1 * log(factor) + 1.0; }

int cpu_rope_freqs(float *inv, float *mscale, size_t D, double theta, const OpRope *r) {
    size_t d = r->rotary ? (size_t)r->rotary : D, half = d / 2;
    if (d % 2 != 0 || d > D || d == 0)
        return CPU_ERR_ARG;
    *mscale = 1.0f;
    if (r->scaling == ROPE_DYNAMIC) {
        // NTK: theta grown for the fixed length L = max(length, original) (with L <= original
        // it is theta itself), in Python's double arithmetic.
        double L = r->length > r->original ? (double)r->length : (double)r->original;
        if (r->original <= 0 || d <= 2)
            return CPU_ERR_ARG;
        theta *= pow(r->factor * L / (double)r->original - (r->factor - 1.0), (double)d / (double)(d - 2));
    }
    for (size_t i = 0; i < half; i++)
        inv[i] = rope_base_freq(i, d, theta);
    if (r->scaling == ROPE_LINEAR) {
        for (size_t i = 0; i < half; i++)
            inv[i] = inv[i] / (float)r->factor;
    } else if (r->scaling == ROPE_LLAMA3) {
        // Wavelengths beyond original/low scaled by 1/factor, below original/high kept, and
        // a smooth mix between; every tensor op in fp32 with its Python scalar cast to fp32.
        double old = (double)r->original, low_wl = old / r->low, high_wl = old / r->high;
        float f = (float)r->factor, two_pi = (float)(2.0 * M_PI);
        for (size_t i = 0; i < half; i++) {
            float wl = (1.0f / inv[i]) * two_pi;   // torch: 2 * math.pi / inv_freq
            float scaled = wl > (float)low_wl ? inv[i] / f : inv[i];
            float smooth = ((1.0f / wl) * (float)old - (float)r->low) / (float)(r->high - r->low);
            float mixed = (1.0f - smooth) * scaled / f + smooth * scaled;
            bool medium = !(wl < (float)high_wl) && !(wl > (float)low_wl);
            inv[i] = medium ? mixed : scaled;
        }
    } else if (r->scaling == ROPE_YARN) {
        // Interpolated (/ factor) below the correction range, extrapolated (kept) above it,
        // a linear ramp between; cos and sin scaled by the attention factor.
        double fast = r->low != 0 ? r->low : 32.0, slow = r->high != 0 ? r->high : 1.0;
        if (r->original <= 0 || theta <= 1)
            return CPU_ERR_ARG;
        double lo = (double)d * log((double)r->original / (fast * 2.0 * M_PI)) / (2.0 * log(theta));
        double hi = (double)d * log((double)r->original / (slow * 2.0 * M_PI)) / (2.0 * log(theta));
        if (!r->no_truncate)
            lo = floor(lo), hi = ceil(hi);
        lo = lo > 0 ? lo : 0;
        hi = hi < (double)(d - 1) ? hi : (double)(d - 1);
        if (lo == hi)
            hi += 0.001;
        for (size_t i = 0; i < half; i++) {
            float pos = rope_base_pow(i, d, theta);
            float extra = 1.0f / pos, inter = 1.0f / ((float)r->factor * pos);
            float ramp = ((float)i - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            float keep = 1.0f - ramp;
            inv[i] = inter * (1.0f - keep) + extra * keep;
        }
        *mscale = (float)(r->attn_factor != 0 ? r->attn_factor : yarn_mscale(r->factor));
    }
    return CPU_OK;
}

// The fp32 angle p * inv_freq and its cos and sin, each rounded once to fp32, then scaled.
static void rope_cos_sin(float p, float inv_freq, float mscale, float *c, float *sn) {
    float angle = p * inv_freq;
    *c = (float)cos((double)angle) * mscale;
    *sn = (float)sin((double)angle) * mscale;
}

int cpu_rope_angles(float *cos_out, float *sin_out, size_t S, size_t D, double theta) {
    if (D % 2 != 0)
        return CPU_ERR_ARG;
    size_t half = D / 2;
    for (size_t i = 0; i < half; i++) {
        float inv = rope_base_freq(i, D, theta);
        for (size_t s = 0; s < S; s++)
            rope_cos_sin((float)s, inv, 1.0f, &cos_out[s * half + i], &sin_out[s * half + i]);
    }
    return CPU_OK;
}

int cpu_rope_table(float *out, size_t S, double theta, const OpRope *r) {
    enum { MAX_HALF = 4096 };
    size_t half = (size_t)r->rotary / 2;
    float inv[MAX_HALF], mscale;
    if (r->rotary <= 0 || half > MAX_HALF || cpu_rope_freqs(inv, &mscale, (size_t)r->rotary, theta, r) != CPU_OK)
        return CPU_ERR_ARG;
    for (size_t s = 0; s < S; s++)
        for (size_t i = 0; i < half; i++)
            rope_cos_sin((float)s, inv[i], mscale, &out[s * 2 * half + i], &out[s * 2 * half + half + i]);
    return CPU_OK;
}

// Rotates every (i, i + d/2) pair of the first d dims of the row at (b, s) by the angle of
// its position (pos[b, s], or s without position ids) times sign (+1 forward, -1 inverse);
// the dims past d pass through.
static int rope_apply(float *out, const float *x, const int32_t *pos, size_t B, size_t S,
                      size_t H, size_t D, double theta, const OpRope *r, float sign) {
    enum { MAX_HALF = 4096 };
    size_t d = r->rotary ? (size_t)r->rotary : D, half = d / 2;
    float inv[MAX_HALF], mscale;
    if (D / 2 > MAX_HALF || cpu_rope_freqs(inv, &mscale, D, theta, r) != CPU_OK)
        return CPU_ERR_ARG;
    for (size_t b = 0; b < B; b++)
        for (size_t s = 0; s < S; s++) {
            float p = pos ? (float)pos[b * S + s] : (float)s;
            for (size_t i = 0; i < half; i++) {
                float c, sn;
                rope_cos_sin(p, inv[i], mscale, &c, &sn);
                sn *= sign;
                for (size_t h = 0; h < H; h++) {
                    size_t base = ((b * S + s) * H + h) * D;
                    float x1 = x[base + i], x2 = x[base + i + half];
                    out[base + i] = x1 * c - x2 * sn;
                    out[base + i + half] = x2 * c + x1 * sn;
                }
            }
            for (size_t h = 0; out != x && h < H; h++)
                for (size_t k = d; k < D; k++)
                    out[((b * S + s) * H + h) * D + k] = x[((b * S + s) * H + h) * D + k];
        }
    return CPU_OK;
}

int cpu_rope_forward(float *out, const float *x, const int32_t *pos, size_t B, size_t S, size_t H,
                     size_t D, double theta, const OpRope *r) {
    return rope_apply(out, x, pos, B, S, H, D, theta, r, 1.0f);
}

int cpu_rope_backward(float *dx, const float *dout, const int32_t *pos, size_t B, size_t S,
                      size_t H, size_t D, double theta, const OpRope *r) {
    return rope_apply(dx, dout, pos, B, S, H, D, theta, r, -1.0f);
}

// ---------------------------------------------------------------------------------------------
// Softmax

void cpu_softmax_forward(float *y, const float *x, size_t N, size_t C) {
    for (size_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        float *yr = y + n * C;
        float mx = -INFINITY;
        for (size_t c = 0; c < C; c++)
            mx = xr[c] > mx ? xr[c] : mx;
        double sum = 0.0;
        for (size_t c = 0; c < C; c++) {
            float e = expf(xr[c] - mx);
            yr[c] = e;
            sum += e;
        }
        for (size_t c = 0; c < C; c++)
            yr[c] = (float)(yr[c] / sum);
    }
}

void cpu_softmax_backward(float *dx, const float *dy, const float *y, size_t N, size_t C) {
    for (size_t n = 0; n < N; n++) {
        const float *g = dy + n * C, *yr = y + n * C;
        double dot = 0.0;
        for (size_t c = 0; c < C; c++)
            dot += (double)g[c] * yr[c];
        for (size_t c = 0; c < C; c++)
            dx[n * C + c] = (float)(yr[c] * (g[c] - dot));
    }
}

// ---------------------------------------------------------------------------------------------
// Attention

// The scaled score of one query row against one key row, soft-capped to cap·tanh(s / cap)
// when cap > 0 (Gemma 2, in fp32 as its eager attention does); forward and backward share it
// so the backward recomputes bitwise the scores the forward saw.
static float attn_score(const float *q, const float *k, size_t D, double scale, float cap) {
    double dot = 0.0;
    for (size_t d = 0; d < D; d++)
        dot += (double)q[d] * k[d];
    float s = (float)(dot * scale);
    return cap > 0 ? tanhf(s / cap) * cap : s;
}

// Whether query s sees key t of its record (pos: that batch row's position ids, or NULL).
static int attn_visible(const int32_t *pos, size_t s, size_t t) {
    return !pos || (int64_t)t - pos[t] == (int64_t)s - pos[s];
}

// The keys [*t0, *t1) query s sees: causal ones up to s, and with a window the `window`
// ending at s (or, not causal, those within window - 1 either way).
static void attn_keys(size_t s, size_t S, int causal, size_t window, size_t *t0, size_t *t1) {
    *t0 = window && s + 1 > window ? s + 1 - window : 0;
    *t1 = causal ? s + 1 : window && s + window < S ? s + window : S;
}

int cpu_attention_forward(float *o, float *lse, float *scratch, const float *q, const float *k,
                          const float *v, size_t B, size_t S, size_t H, size_t Hkv, size_t D,
                          int causal, size_t window, float softcap, double scale,
                          const int32_t *pos) {
    if (Hkv == 0 || H % Hkv != 0 || softcap < 0 || scale < 0)
        return CPU_ERR_ARG;
    size_t group = H / Hkv;
    if (scale == 0)
        scale = 1.0 / sqrt((double)D);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            size_t hk = h / group;
            const int32_t *pb = pos ? pos + b * S : NULL;
            for (size_t s = 0; s < S; s++) {
                const float *qr = q + ((b * S + s) * H + h) * D;
                float *orow = o + ((b * S + s) * H + h) * D;
                size_t t0, t1; // keys t0..t1-1 are visible (those of its record)
                attn_keys(s, S, causal, window, &t0, &t1);
                float mx = -INFINITY;
                for (size_t t = t0; t < t1; t++) {
                    if (!attn_visible(pb, s, t))
                        continue;
                    scratch[t] = attn_score(qr, k + ((b * S + t) * Hkv + hk) * D, D, scale, softcap);
                    mx = scratch[t] > mx ? scratch[t] : mx;
                }
                double sum = 0.0;
                for (size_t t = t0; t < t1; t++)
                    if (attn_visible(pb, s, t))
                        sum += exp((double)scratch[t] - mx);
                float l = (float)(mx + log(sum));
                lse[(b * H + h) * S + s] = l;
                for (size_t d = 0; d < D; d++)
                    orow[d] = 0.0f;
                for (size_t t = t0; t < t1; t++) {
                    if (!attn_visible(pb, s, t))
                        continue;
                    float p = expf(scratch[t] - l);
                    const float *vr = v + ((b * S + t) * Hkv + hk) * D;
                    for (size_t d = 0; d < D; d++)
                        orow[d] += p * vr[d];
                }
            }
        }
    return CPU_OK;
}

int cpu_attention_decode(float *o, float *kc, float *vc, float *scratch, const float *q, const float *k,
                         const float *v, const int32_t *pos, size_t B, size_t L, size_t H, size_t Hkv, size_t D,
                         size_t window, float softcap, double scale) {
    if (Hkv == 0 || H % Hkv != 0 || softcap < 0 || scale < 0)
        return CPU_ERR_ARG;
    size_t group = H / Hkv;
    if (scale == 0)
        scale = 1.0 / sqrt((double)D);
    for (size_t b = 0; b < B; b++) {
        if (pos[b] < 0 || (size_t)pos[b] >= L)
            return CPU_ERR_INDEX;
        size_t p = (size_t)pos[b], t0, t1;
        memcpy(kc + ((b * L + p) * Hkv) * D, k + b * Hkv * D, Hkv * D * sizeof(float));
        memcpy(vc + ((b * L + p) * Hkv) * D, v + b * Hkv * D, Hkv * D * sizeof(float));
        attn_keys(p, L, 1, window, &t0, &t1);   // (the forward's row p: the same arithmetic)
        for (size_t h = 0; h < H; h++) {
            const float *qr = q + (b * H + h) * D;
            float *orow = o + (b * H + h) * D, mx = -INFINITY;
            size_t hk = h / group;
            for (size_t t = t0; t < t1; t++) {
                scratch[t] = attn_score(qr, kc + ((b * L + t) * Hkv + hk) * D, D, scale, softcap);
                mx = scratch[t] > mx ? scratch[t] : mx;
            }
            double sum = 0.0;
            for (size_t t = t0; t < t1; t++)
                sum += exp((double)scratch[t] - mx);
            float l = (float)(mx + log(sum));
            for (size_t d = 0; d < D; d++)
                orow[d] = 0.0f;
            for (size_t t = t0; t < t1; t++) {
                float w = expf(scratch[t] - l);
                const float *vr = vc + ((b * L + t) * Hkv + hk) * D;
                for (size_t d = 0; d < D; d++)
                    orow[d] += w * vr[d];
            }
        }
    }
    return CPU_OK;
}

int cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *o, const float *lse,
                           size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal,
                           size_t window, float softcap, double scale, const int32_t *pos) {
    if (Hkv == 0 || H % Hkv != 0 || softcap < 0 || scale < 0)
        return CPU_ERR_ARG;
    size_t group = H / Hkv;
    if (scale == 0)
        scale = 1.0 / sqrt((double)D);
    memset(dk, 0, B * S * Hkv * D * sizeof(float));
    memset(dv, 0, B * S * Hkv * D * sizeof(float));
    // Per query row: P_t = exp(score_t - lse), dP_t = do·v_t, Di = do·o,
    // dS_t = P_t (dP_t - Di) (times 1 - tanh² through a soft cap); dq = scale sum_t dS_t k_t,
    // dk_t += scale dS_t q, dv_t += P_t do.
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < H; h++) {
            size_t hk = h / group;
            for (size_t s = 0; s < S; s++) {
                size_t row = ((b * S + s) * H + h) * D;
                const float *qr = q + row, *gr = dout + row, *orow = o + row;
                float *dqr = dq + row;
                float l = lse[(b * H + h) * S + s];
                size_t t0, t1;
                attn_keys(s, S, causal, window, &t0, &t1);
                double di = 0.0;
                for (size_t d = 0; d < D; d++)
                    di += (double)gr[d] * orow[d];
                for (size_t d = 0; d < D; d++)
                    dqr[d] = 0.0f;
                for (size_t t = t0; t < t1; t++) {
                    if (!attn_visible(pos ? pos + b * S : NULL, s, t))
                        continue;
                    size_t kv = ((b * S + t) * Hkv + hk) * D;
                    const float *kr = k + kv, *vr = v + kv;
                    float sc = attn_score(qr, kr, D, scale, softcap);
                    float p = expf(sc - l);
                    double dp = 0.0;
                    for (size_t d = 0; d < D; d++)
                        dp += (double)gr[d] * vr[d];
                    double through = 1.0;   // d capped / d raw
                    if (softcap > 0) {
                        double t = (double)sc / softcap;
                        through = 1.0 - t * t;
                    }
                    float ds = (float)(p * (dp - di) * through * scale); // already carries the score's scale
                    float *dkr = dk + kv, *dvr = dv + kv;
                    for (size_t d = 0; d < D; d++) {
                        dqr[d] += ds * kr[d];
                        dkr[d] += ds * qr[d];
                        dvr[d] += p * gr[d];
                    }
                }
            }
        }
    return CPU_OK;
}

// ---------------------------------------------------------------------------------------------
// Dropout

static const uint64_t WEYL = 0x9e3779b97f4a7c15ull; // splitmix64's increment, 2^64 / phi

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint32_t cpu_dropout_hash(uint64_t seed, uint64_t counter) {
    uint64_t key = mix64(seed + WEYL);
    return (uint32_t)(mix64(key + counter * WEYL) >> 32);
}

uint32_t cpu_dropout_threshold(float p) {
    if (!(p > 0.0f))
        return 0;
    double t = floor((double)p * 4294967296.0);
    return t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
}

int cpu_dropout_forward(float *out, uint8_t *mask, const float *x, size_t n, float p,
                        uint64_t seed, uint64_t offset) {
    if (!(p >= 0.0f && p <= 1.0f))
        return CPU_ERR_ARG;
    int drop_all = p == 1.0f;
    float scale = drop_all ? 0.0f : 1.0f / (1.0f - p);
    uint32_t thr = cpu_dropout_threshold(p);
    for (size_t i = 0; i < n; i++) {
        int keep = !drop_all && cpu_dropout_hash(seed, offset + i) >= thr;
        if (mask)
            mask[i] = (uint8_t)keep;
        out[i] = keep ? x[i] * scale : 0.0f;
    }
    return CPU_OK;
}

int cpu_dropout_backward(float *dx, const float *dout, const uint8_t *mask, size_t n, float p,
                         uint64_t seed, uint64_t offset) {
    if (!(p >= 0.0f && p <= 1.0f))
        return CPU_ERR_ARG;
    int drop_all = p == 1.0f;
    float scale = drop_all ? 0.0f : 1.0f / (1.0f - p);
    uint32_t thr = cpu_dropout_threshold(p);
    for (size_t i = 0; i < n; i++) {
        int keep = mask ? mask[i] != 0 : !drop_all && cpu_dropout_hash(seed, offset + i) >= thr;
        dx[i] = keep ? dout[i] * scale : 0.0f;
    }
    return CPU_OK;
}

// ---------------------------------------------------------------------------------------------
// Cross entropy

static int targets_ok(const int32_t *targets, size_t R, size_t V) {
    for (size_t r = 0; r < R; r++)
        if (targets[r] >= 0 && (size_t)targets[r] >= V)
            return 0;
    return 1;
}

// logsumexp of one row, in double with the max subtracted.
static double row_lse(const float *x, size_t V) {
    float mx = -INFINITY;
    for (size_t j = 0; j < V; j++)
        mx = x[j] > mx ? x[j] : mx;
    double sum = 0.0;
    for (size_t j = 0; j < V; j++)
        sum += exp((double)x[j] - mx);
    return mx + log(sum);
}

size_t cpu_cross_entropy_count_valid(const int32_t *targets, size_t N) {
    size_t n = 0;
    for (size_t r = 0; r < N; r++)
        n += targets[r] >= 0;
    return n;
}

int cpu_cross_entropy_forward_rows(double *loss_sum, float *lse, const float *logits,
                                   const int32_t *targets, size_t R, size_t V) {
    if (!targets_ok(targets, R, V))
        return CPU_ERR_INDEX;
    double acc = *loss_sum;
    for (size_t r = 0; r < R; r++) {
        if (targets[r] < 0) {
            if (lse)
                lse[r] = 0.0f;
            continue;
        }
        const float *x = logits + r * V;
        double l = row_lse(x, V);
        if (lse)
            lse[r] = (float)l;
        acc += l - x[targets[r]];
    }
    *loss_sum = acc;
    return CPU_OK;
}

int cpu_cross_entropy_forward(float *loss, float *lse, const float *logits, const int32_t *targets,
                              size_t N, size_t V) {
    double sum = 0.0;
    int st = cpu_cross_entropy_forward_rows(&sum, lse, logits, targets, N, V);
    if (st != CPU_OK)
        return st;
    *loss = (float)(sum / (double)cpu_cross_entropy_count_valid(targets, N));
    return CPU_OK;
}

// dlogits = (softmax(row) - onehot(target)) times g, the row's own -row_g[r] where row_g is
// given, else g; zeros for an ignored row. (The cross entropy's gradient, and the
// log-probabilities', whose (onehot - softmax) dlp is the same product negated twice.)
static void softmax_grad_rows(float *dlogits, const float *logits, const int32_t *targets, size_t R, size_t V,
                              double g, const float *row_g) {
    for (size_t r = 0; r < R; r++) {
        float *d = dlogits + r * V;
        if (targets[r] < 0) {
            memset(d, 0, V * sizeof(float));
            continue;
        }
        const float *x = logits + r * V;
        double l = row_lse(x, V), gr = row_g ? -(double)row_g[r] : g;
        for (size_t j = 0; j < V; j++) {
            double p = exp((double)x[j] - l);
            d[j] = (float)((p - (j == (size_t)targets[r] ? 1.0 : 0.0)) * gr);
        }
    }
}

int cpu_cross_entropy_backward_rows(float *dlogits, const float *logits, const int32_t *targets,
                                    size_t R, size_t V, float dloss, size_t n_valid) {
    if (!targets_ok(targets, R, V))
        return CPU_ERR_INDEX;
    softmax_grad_rows(dlogits, logits, targets, R, V, n_valid ? (double)dloss / (double)n_valid : 0.0, NULL);
    return CPU_OK;
}

int cpu_cross_entropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                               size_t N, size_t V, float dloss) {
    return cpu_cross_entropy_backward_rows(dlogits, logits, targets, N, V, dloss,
                                           cpu_cross_entropy_count_valid(targets, N));
}

int cpu_logprobs(float *lp, const float *logits, const int32_t *targets, size_t R, size_t V) {
    if (!targets_ok(targets, R, V))
        return CPU_ERR_INDEX;
    for (size_t r = 0; r < R; r++) {
        const float *x = logits + r * V;
        lp[r] = targets[r] < 0 ? 0.0f : (float)((double)x[targets[r]] - row_lse(x, V));
    }
    return CPU_OK;
}

int cpu_logprobs_backward(float *dlogits, const float *dlp, const float *logits, const int32_t *targets,
                          size_t R, size_t V) {
    if (!targets_ok(targets, R, V))
        return CPU_ERR_INDEX;
    softmax_grad_rows(dlogits, logits, targets, R, V, 0.0, dlp);
    return CPU_OK;
}

// log(sigmoid(z)), without overflow for large |z|.
static double log_sigmoid(double z) { return z >= 0 ? -log1p(exp(-z)) : z - log1p(exp(z)); }
static double sigmoid(double z) { return z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z)); }

// A pair's loss and its derivatives by the chosen and rejected rows' sums (dc, dr), from
// the policy's sums c, r, their trained targets nc, nr and the reference's sums c0, r0.
static double pref_pair(const CpuPref *p, double c, double r, double nc, double nr, double c0, double r0,
                        double *dc, double *dr, double *rc, double *rr) {
    double b = p->beta, e = p->smoothing;
    switch (p->kind) {
    case PREF_DPO: {
        double z = b * ((c - c0) - (r - r0));
        double d = -(1 - e) * sigmoid(-z) + e * sigmoid(z);   // d loss / d z
        *dc = d * b, *dr = -d * b;
        *rc = b * (c - c0), *rr = b * (r - r0);
        return -(1 - e) * log_sigmoid(z) - e * log_sigmoid(-z);
    }
    case PREF_IPO: {
        double z = (c / nc - c0 / nc) - (r / nr - r0 / nr), h = z - 1.0 / (2.0 * b);
        *dc = 2.0 * h / nc, *dr = -2.0 * h / nr;
        *rc = b * (c - c0) / nc, *rr = b * (r - r0) / nr;
        return h * h;
    }
    case PREF_SIMPO: {
        double a = c / nc, bb = r / nr, y = b * (a - bb) - p->gamma;
        double d = -(1 - e) * sigmoid(-y) + e * sigmoid(y);
        *dc = d * b / nc, *dr = -d * b / nr;
        *rc = b * a, *rr = b * bb;
        return -(1 - e) * log_sigmoid(y) - e * log_sigmoid(-y);
    }
    default: {   // orpo: the log odds ratio of exp(a) and exp(bb)
        double a = c / nc, bb = r / nr;
        double lo = (a - bb) - (log1p(-exp(a)) - log1p(-exp(bb)));
        double d = -b * sigmoid(-lo);   // d (-beta logsig(lo)) / d lo
        *dc = d / (1.0 - exp(a)) / nc, *dr = -d / (1.0 - exp(bb)) / nr;
        *rc = b * a, *rr = b * bb;
        return -b * log_sigmoid(lo);
    }
    }
}

int cpu_preference(float *loss, float *stats, float *dlp, const float *lp, const int32_t *targets,
                   const float *ref, bool ref_sums, size_t B, size_t S, int64_t pairs, int64_t chosen,
                   const CpuPref *p, float scale) {
    if (B % 2)
        return CPU_ERR_ARG;
    double total = 0.0, st[PREF_STATS] = {0};
    double P = pairs > 0 ? (double)pairs : 0.0, nll_w = p->kind == PREF_ORPO ? 1.0 : p->alpha;
    for (size_t j = 0; j < B / 2; j++) {
        double sum[2] = {0}, n[2] = {0}, ref_sum[2] = {0};
        for (int k = 0; k < 2; k++) {
            size_t row = 2 * j + (size_t)k;
            for (size_t t = 0; t < S; t++) {
                if (targets[row * S + t] < 0)
                    continue;
                sum[k] += lp[row * S + t], n[k] += 1;
                if (ref && !ref_sums)
                    ref_sum[k] += ref[row * S + t];
            }
            if (ref && ref_sums)
                ref_sum[k] = ref[row];
        }
        double dc = 0, dr = 0, rc = 0, rr = 0, l = 0;
        bool live = n[0] > 0 && n[1] > 0 && P > 0;   // (a pair of padding rows adds nothing)
        if (live)
            l = pref_pair(p, sum[0], sum[1], n[0], n[1], ref_sum[0], ref_sum[1], &dc, &dr, &rc, &rr);
        double nll = live && nll_w > 0 && chosen > 0 ? -sum[0] / (double)chosen : 0.0;
        if (live) {
            total += l / P + nll_w * nll;
            st[PREF_REWARD_CHOSEN] += rc / P, st[PREF_REWARD_REJECTED] += rr / P;
            st[PREF_ACCURACY] += (rc > rr ? 1.0 : 0.0) / P;
            st[PREF_LOGPS_CHOSEN] += sum[0] / P, st[PREF_LOGPS_REJECTED] += sum[1] / P;
            st[PREF_NLL] += nll;
        }
        if (!dlp)
            continue;
        double g[2] = {live ? dc / P : 0.0, live ? dr / P : 0.0};
        if (live && nll_w > 0 && chosen > 0)
            g[0] -= nll_w / (double)chosen;
        for (int k = 0; k < 2; k++) {
            size_t row = 2 * j + (size_t)k;
            for (size_t t = 0; t < S; t++)
                dlp[row * S + t] = targets[row * S + t] < 0 ? 0.0f : (float)(g[k] * (double)scale);
        }
    }
    *loss = (float)total;
    if (stats)
        for (int i = 0; i < PREF_STATS; i++)
            stats[i] = (float)st[i];
    return CPU_OK;
}

// ---------------------------------------------------------------------------------------------
// Optimizer

void cpu_sumsq(const float *x, size_t n, double *sumsq, size_t *nonfinite) {
    double s = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        s += (double)x[i] * x[i];
        bad += !isfinite(x[i]);
    }
    *sumsq = s, *nonfinite = bad;
}

void cpu_grad_factor(const float *stats, double loss_scale, double clip, float *factor) {
    static const float none[2] = {0.0f, 0.0f};
    stats = stats ? stats : none;
    float scale = (float)loss_scale, norm = sqrtf(stats[0]) / scale, coef = 1.0f;
    if (clip > 0) {
        coef = (float)clip / (norm + 1e-6f);
        coef = coef < 1.0f ? coef : 1.0f;
    }
    factor[0] = coef / scale;
    factor[1] = stats[1] != 0.0f || !isfinite(stats[0]) ? 1.0f : 0.0f;
}

void cpu_kahan(float *w, const float *old, float *comp, size_t n, bool f16) {
    for (size_t i = 0; i < n; i++) {
        float c = comp[i] + (w[i] - old[i]), x = old[i] + c;
        float t = f16 ? cpu_f16_to_f32(cpu_f32_to_f16(x)) : cpu_bf16_to_f32(cpu_f32_to_bf16(x));
        comp[i] = c + (old[i] - t);
        w[i] = t;
    }
}

CpuAdamwScalars cpu_adamw_scalars(double lr, double beta1, double beta2, double weight_decay, int64_t t) {
    CpuAdamwScalars s;
    s.decay = (float)(1.0 - lr * weight_decay);
    s.neg_step = (float)(-(lr / (1.0 - pow(beta1, (double)t))));
    s.bias_c2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
    return s;
}

void cpu_adamw_step(float *param, const float *grad, float gscale, float *m, float *v, size_t n,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int64_t t) {
    // Python-float scalars reach torch's fp32 kernels as fp32 (value.to<float>()).
    CpuAdamwScalars s = cpu_adamw_scalars(lr, beta1, beta2, weight_decay, t);
    float decay = s.decay, neg_step = s.neg_step, bias_c2_sqrt = s.bias_c2_sqrt;
    float w1 = (float)(1.0 - beta1);
    float b2 = (float)beta2;
    float c2 = (float)(1.0 - beta2);
    float epsf = (float)eps;
    int small = fabsf(w1) < 0.5f;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * gscale;
        float p = param[i] * decay;
        // torch's vectorised lerp: fmadd(weight, end - start, start) for |weight| < 0.5,
        // else fmadd(weight - 1, end - start, end).
        float mi = small ? fmaf(w1, g - m[i], m[i]) : fmaf(w1 - 1.0f, g - m[i], g);
        float vi = v[i] * b2 + c2 * g * g;
        float denom = sqrtf(vi) / bias_c2_sqrt + epsf;
        param[i] = p + neg_step * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}
