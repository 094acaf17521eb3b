// kernels.h: the cpu backend's reference kernels, forward and backward, for every op ftc knows.
//
// This is the clean, minimal reference: plain C11 over contiguous row-major float arrays,
// correctness first, speed second. Every other backend is tested against it. It does not
// allocate (callers pass scratch where a kernel needs it), keeps no global state, and runs
// single-threaded apart from the GEMMs, which go through CBLAS (link with -lopenblas -lm).
//
// Shape legend (each parameter's shape is in a comment next to it):
//   N = rows (tokens, B*S), C = channels (last dim), Cin = in features, Cout = out features,
//   V = vocab size, B = batch, S = sequence length, H = query heads, Hkv = key/value heads,
//   D = head dim, Bt = batch count of a batched matmul (M, K, N its matrix dims), n = elements.
//
// Conventions:
//   - Parameter gradients (dW, db, dw, dtable) are accumulated with `+=`, so micro-batches
//     add up; the caller zeroes them once per optimizer step.
//   - Activation gradients (dx, da, dq, dk, dv, dlogits, ...) are assigned with `=`.
//   - A gradient pointer documented "may be NULL" skips that gradient.
//   - Elementwise kernels may run in place (out == an input); other kernels must not alias
//     an output with an input unless the comment says so.
//   - Deterministic: fixed loop orders, sums of many terms accumulated in double in index
//     order, no threads of our own. Same inputs give bitwise-same outputs (OpenBLAS's GEMMs
//     are deterministic for a fixed library build and thread count).
//   - bf16 storage is emulated by keeping fp32 arrays and rounding them through bf16
//     (cpu_round_bf16) at the points where the real backend would store bf16.
#ifndef FTC_RUNTIME_CPU_KERNELS_H
#define FTC_RUNTIME_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ops.h"   // OpRope: rope's frequency scaling

// Status returned by the kernels that can reject their input. On an error nothing is written.
typedef enum {
    CPU_OK = 0,        // success, outputs written
    CPU_ERR_INDEX = 1, // a token id or target is outside [0, V) (targets may also be < 0: ignored)
    CPU_ERR_ARG = 2,   // a size or scalar argument is invalid (odd head dim, H % Hkv != 0, p > 1)
} CpuStatus;

// ---------------------------------------------------------------------------------------------
// Number formats

// Rounds f to bf16 to nearest even; every NaN becomes 0x7fff (matches __float2bfloat16_rn).
uint16_t cpu_f32_to_bf16(float f);
// Widens the bf16 bit pattern h to fp32 (exact).
float cpu_bf16_to_f32(uint16_t h);
// Rounds f to IEEE binary16 to nearest even, with subnormals, overflow to inf, NaN kept NaN.
uint16_t cpu_f32_to_f16(float f);
// Widens the binary16 bit pattern h to fp32 (exact, NaN payload and sign kept).
float cpu_f16_to_f32(uint16_t h);
// Rounds each of the n values of x in place through bf16, emulating bf16 storage.
void cpu_round_bf16(float *x, size_t n);

// ---------------------------------------------------------------------------------------------
// Embedding

// Gathers rows: out[n, :] = table[idx[n], :]; CPU_ERR_INDEX if some idx is outside [0, V).
int cpu_embedding_forward(float *out,           // (N, C)
                          const int32_t *idx,   // (N)
                          const float *table,   // (V, C)
                          size_t N, size_t V, size_t C);
// Scatters gradients: dtable[idx[n], :] += dout[n, :] in order n = 0..N-1, but for the rows
// whose id is `pad` (torch's padding_idx; -1: none); CPU_ERR_INDEX if some idx is outside
// [0, V) (checked before anything is written).
int cpu_embedding_backward(float *dtable,        // (V, C) +=
                           const float *dout,    // (N, C)
                           const int32_t *idx,   // (N)
                           size_t N, size_t V, size_t C, int64_t pad);

// ---------------------------------------------------------------------------------------------
// Linear and matmul (CBLAS sgemm; every dimension must be below 2^31)

// Row-major c = op(a) · op(b) + beta · c, op(a) (M, K), op(b) (K, N); a transposed is stored
// (K, M), b transposed (N, K); beta is 0 (assign) or 1 (accumulate). BLAS's sgemm.
void cpu_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, const float *a,
              const float *b, float beta, float *c);
// The same with the product scaled: c = alpha · op(a) · op(b) + beta · c.
void cpu_gemm_scaled(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha, const float *a,
                     const float *b, float beta, float *c);

// Computes y = x · w^T + b; b may be NULL (no bias).
void cpu_linear_forward(float *y,             // (N, Cout)
                        const float *x,       // (N, Cin)
                        const float *w,       // (Cout, Cin)
                        const float *b,       // (Cout) or NULL
                        size_t N, size_t Cin, size_t Cout);
// Computes dx = dy · w (assigned), dw += dy^T · x, db += column sums of dy; each may be NULL.
void cpu_linear_backward(float *dx,           // (N, Cin) =
                         float *dw,           // (Cout, Cin) +=
                         float *db,           // (Cout) +=
                         const float *dy,     // (N, Cout)
                         const float *x,      // (N, Cin)
                         const float *w,      // (Cout, Cin)
                         size_t N, size_t Cin, size_t Cout);

// Computes out[t] = a[t] · b[t] for each of the Bt matrices.
void cpu_matmul_forward(float *out,           // (Bt, M, N)
                        const float *a,       // (Bt, M, K)
                        const float *b,       // (Bt, K, N)
                        size_t Bt, size_t M, size_t K, size_t N);
// Computes da = dout · b^T (assigned) and db += a^T · dout (BLAS's beta = 1: a weight's
// gradient accumulates in place) per matrix; either may be NULL.
void cpu_matmul_backward(float *da,           // (Bt, M, K) =
                         float *db,           // (Bt, K, N) +=
                         const float *dout,   // (Bt, M, N)
                         const float *a,      // (Bt, M, K)
                         const float *b,      // (Bt, K, N)
                         size_t Bt, size_t M, size_t K, size_t N);

// ---------------------------------------------------------------------------------------------
// Elementwise, all (n) arrays of one shape; gradients assigned, da/db may be NULL

// out = a + b.
void cpu_add_forward(float *out, const float *a, const float *b, size_t n);
// da = dout, db = dout.
void cpu_add_backward(float *da, float *db, const float *dout, size_t n);
// out = a - b.
void cpu_sub_forward(float *out, const float *a, const float *b, size_t n);
// da = dout, db = -dout.
void cpu_sub_backward(float *da, float *db, const float *dout, size_t n);
// out = a * b.
void cpu_mul_forward(float *out, const float *a, const float *b, size_t n);
// da = dout * b, db = dout * a.
void cpu_mul_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                      size_t n);
// out = a / b.
void cpu_div_forward(float *out, const float *a, const float *b, size_t n);
// da = dout / b, db = -dout * a / (b * b).
void cpu_div_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                      size_t n);
// out = x * c for the constant c.
void cpu_scale_forward(float *out, const float *x, float c, size_t n);
// dx = dout * c.
void cpu_scale_backward(float *dx, const float *dout, float c, size_t n);
// out = x * sigmoid(x), computed as x / (1 + exp(-x)) like torch.
void cpu_silu_forward(float *out, const float *x, size_t n);
// dx = dout * s * (1 + x * (1 - s)) with s = sigmoid(x).
void cpu_silu_backward(float *dx, const float *dout, const float *x, size_t n);
// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2 "gelu_new" / gelu(approximate="tanh").
void cpu_gelu_forward(float *out, const float *x, size_t n);
// dx = dout * d gelu(x) / dx for the tanh approximation.
void cpu_gelu_backward(float *dx, const float *dout, const float *x, size_t n);
// out = tanh(x).
void cpu_tanh_forward(float *out, const float *x, size_t n);
// dx = dout * (1 - out^2), out the forward's result.
void cpu_tanh_backward(float *dx, const float *dout, const float *out, size_t n);
// out = cap * tanh(x / cap): soft-capping (Gemma 2's logits and attention scores).
void cpu_softcap_forward(float *out, const float *x, float cap, size_t n);
// dx = dout * (1 - (out / cap)^2), out the forward's result.
void cpu_softcap_backward(float *dx, const float *dout, const float *out, float cap, size_t n);
// out = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): torch's exact gelu (HF "gelu").
void cpu_gelu_exact_forward(float *out, const float *x, size_t n);
// dx = dout * (Phi(x) + x phi(x)).
void cpu_gelu_exact_backward(float *dx, const float *dout, const float *x, size_t n);
// out = exp(x).
void cpu_exp_forward(float *out, const float *x, size_t n);
// dx = dout * out, where out is the forward's result.
void cpu_exp_backward(float *dx, const float *dout, const float *out, size_t n);

// ---------------------------------------------------------------------------------------------
// Slices and joins: a tensor seen as (outer, dim, inner) around the dimension cut or joined.

// out = x[:, start:start + size, :].
void cpu_slice_forward(float *out,         // (outer, size, inner)
                       const float *x,     // (outer, dim, inner)
                       size_t outer, size_t dim, size_t inner, size_t start, size_t size);
// dx[:, start:start + size, :] = dy and 0 elsewhere; with accumulate, dx[:, start:start +
// size, :] += dy and the rest untouched.
void cpu_slice_backward(float *dx,         // (outer, dim, inner) = or +=
                        const float *dy,   // (outer, size, inner)
                        size_t outer, size_t dim, size_t inner, size_t start, size_t size,
                        int accumulate);
// out = the n tensors x[k] (outer, dims[k], inner) joined along the middle dimension.
void cpu_concat_forward(float *out,              // (outer, sum dims, inner)
                        const float *const *x,   // n of (outer, dims[k], inner)
                        const size_t *dims, size_t n, size_t outer, size_t inner);

// ---------------------------------------------------------------------------------------------
// Reductions

// Sums each row of x over its last dim in index order, in double: out[r] = sum_c x[r, c].
void cpu_sum_forward(float *out,         // (N)
                     const float *x,     // (N, C)
                     size_t N, size_t C);
// Broadcasts the row gradient back: dx[r, c] = dout[r] (assigned).
void cpu_sum_backward(float *dx,         // (N, C) =
                      const float *dout, // (N)
                      size_t N, size_t C);

// ---------------------------------------------------------------------------------------------
// Normalisation (Hugging Face Qwen2RMSNorm / LlamaRMSNorm, torch layer_norm)

// y = (x * rstd) * (w + offset) with rstd = 1 / sqrt(mean(x^2) + eps) per row; saves rstd.
// offset 1 is Gemma's (1 + w) norm.
void cpu_rmsnorm_forward(float *y,          // (N, C)
                         float *rstd,       // (N) fp32, saved for backward
                         const float *x,    // (N, C)
                         const float *w,    // (C)
                         size_t N, size_t C, float eps, float offset);
// dx (assigned) and dw (+=), either may be NULL, from dy, x, w and the saved rstd.
void cpu_rmsnorm_backward(float *dx,          // (N, C) =
                          float *dw,          // (C) +=
                          const float *dy,    // (N, C)
                          const float *x,     // (N, C)
                          const float *w,     // (C)
                          const float *rstd,  // (N)
                          size_t N, size_t C, float offset);

// y = (x - mean) * rstd * w + b with the biased variance; saves mean and rstd per row.
void cpu_layernorm_forward(float *y,          // (N, C)
                           float *mean,       // (N)
                           float *rstd,       // (N)
                           const float *x,    // (N, C)
                           const float *w,    // (C)
                           const float *b,    // (C)
                           size_t N, size_t C, float eps);
// dx (assigned), dw and db (+=), each may be NULL, from dy, x, w and the saved mean and rstd.
void cpu_layernorm_backward(float *dx,          // (N, C) =
                            float *dw,          // (C) +=
                            float *db,          // (C) +=
                            const float *dy,    // (N, C)
                            const float *x,     // (N, C)
                            const float *w,     // (C)
                            const float *mean,  // (N)
                            const float *rstd,  // (N)
                            size_t N, size_t C);

// ---------------------------------------------------------------------------------------------
// Rotary position embedding, Hugging Face "rotate_half" (non-interleaved) convention, over the
// first d = r->rotary dims of each head (all D when 0; the rest pass through).
//
// Angle arithmetic follows HF's fp32 code exactly: inv_freq[i] = 1 / theta^(2i/d) in fp32
// (exponent (float)(2i) / (float)d, the power rounded once to fp32, the reciprocal in fp32),
// rescaled as transformers' rope_type asks (linear, dynamic, llama3, yarn: the same tensor ops
// in fp32, their Python scalars in double), angle = (float)p * inv_freq[i] in fp32 with
// position p (the row's position id, or its index s = 0..S-1 when pos is NULL), then cos/sin of
// that fp32 angle rounded once to fp32 (and times YaRN's attention factor). Only the power,
// cos and sin can differ from torch, by at most the last-ulp differences between libm and
// SLEEF.

// The d/2 frequencies of rope with theta and r into inv, and the factor on its cos and sin
// into *mscale; CPU_ERR_ARG if d is odd, 0 or more than D, or r's scaling lacks what it needs.
int cpu_rope_freqs(float *inv,          // (d/2)
                   float *mscale, size_t D, double theta, const OpRope *r);
// Fills the (S, D/2) cos and sin tables of plain rope over all D dims; CPU_ERR_ARG if D is odd.
int cpu_rope_angles(float *cos_out,   // (S, D/2)
                    float *sin_out,   // (S, D/2)
                    size_t S, size_t D, double theta);
// The table a GPU's rope reads, f32 (S, 2, d/2) with d = r->rotary (set): at [s, 0, i] the
// cos and at [s, 1, i] the sin of position s's angle i, times the factor, each the bits
// cpu_rope_forward uses; CPU_ERR_ARG as cpu_rope_freqs, or when r->rotary is 0.
int cpu_rope_table(float *out, size_t S, double theta, const OpRope *r);
// out[.., i] = x[i] cos - x[i + d/2] sin, out[.., i + d/2] = x[i + d/2] cos + x[i] sin for
// i < d/2, at position pos[b, s] (or s when pos is NULL); CPU_ERR_ARG as cpu_rope_freqs. May run
// in place (out == x).
int cpu_rope_forward(float *out,          // (B, S, H, D)
                     const float *x,      // (B, S, H, D)
                     const int32_t *pos,  // (B, S) or NULL
                     size_t B, size_t S, size_t H, size_t D, double theta, const OpRope *r);
// dx = the inverse rotation of dout (assigned); CPU_ERR_ARG as cpu_rope_freqs. May run in place.
int cpu_rope_backward(float *dx,          // (B, S, H, D) =
                      const float *dout,  // (B, S, H, D)
                      const int32_t *pos, // (B, S) or NULL
                      size_t B, size_t S, size_t H, size_t D, double theta, const OpRope *r);

// ---------------------------------------------------------------------------------------------
// Softmax over the last dim

// y = exp(x - max) / sum(exp(x - max)) per row.
void cpu_softmax_forward(float *y,        // (N, C)
                         const float *x,  // (N, C)
                         size_t N, size_t C);
// dx = y * (dy - sum(dy * y)) per row (assigned).
void cpu_softmax_backward(float *dx,        // (N, C) =
                          const float *dy,  // (N, C)
                          const float *y,   // (N, C)
                          size_t N, size_t C);

// ---------------------------------------------------------------------------------------------
// Attention, scaled dot product with GQA: query head h reads kv head h / (H / Hkv).
// Scores are scale * q·k (scale 0: 1 / sqrt(D)), soft-capped to softcap·tanh(s / softcap)
// when softcap > 0; causal masks keys t > s for query s; a window > 0 also masks keys t with
// s - t >= window (not causal: |s - t| >= window), Mistral's sliding window. With position
// ids pos (B, S) (NULL: none) a key of another record is masked too: key t and query s are
// in one record when t - pos[t] == s - pos[s] (a record's first row is each of its rows
// less its position), document masking for packed sequences.

// o = softmax(scores) · v and lse = logsumexp of each row of scaled scores; scratch holds one
// row of scores, S floats. CPU_ERR_ARG if Hkv == 0, H % Hkv != 0 or softcap or scale < 0.
int cpu_attention_forward(float *o,          // (B, S, H, D)
                          float *lse,        // (B, H, S) fp32
                          float *scratch,    // (S)
                          const float *q,    // (B, S, H, D)
                          const float *k,    // (B, S, Hkv, D)
                          const float *v,    // (B, S, Hkv, D)
                          size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal,
                          size_t window, float softcap, double scale,
                          const int32_t *pos); // (B, S) or NULL
// One new token's attention over a KV cache (the decode step): for each batch row b, its
// k and v (B, 1, Hkv, D) written into the caches at row pos[b], then its query attending to
// the cache's rows up to pos[b] (causal; the `window` rows ending there with a window), as
// cpu_attention_forward's row pos[b] does, operation for operation. scratch holds L
// floats. CPU_ERR_INDEX when a position is outside the cache, CPU_ERR_ARG as above.
int cpu_attention_decode(float *o,           // (B, 1, H, D)
                         float *kc,          // (B, L, Hkv, D) updated
                         float *vc,          // (B, L, Hkv, D) updated
                         float *scratch,     // (L)
                         const float *q,     // (B, 1, H, D)
                         const float *k,     // (B, 1, Hkv, D)
                         const float *v,     // (B, 1, Hkv, D)
                         const int32_t *pos, // (B)
                         size_t B, size_t L, size_t H, size_t Hkv, size_t D, size_t window, float softcap,
                         double scale);
// dq, dk, dv (all assigned; dk and dv summed over the H/Hkv query heads of each group) from
// dout, q, k, v, o and lse, recomputing P = exp(score - lse) flash-attention style. Needs no
// scratch. CPU_ERR_ARG as the forward.
int cpu_attention_backward(float *dq,          // (B, S, H, D) =
                           float *dk,          // (B, S, Hkv, D) =
                           float *dv,          // (B, S, Hkv, D) =
                           const float *dout,  // (B, S, H, D)
                           const float *q,     // (B, S, H, D)
                           const float *k,     // (B, S, Hkv, D)
                           const float *v,     // (B, S, Hkv, D)
                           const float *o,     // (B, S, H, D)
                           const float *lse,   // (B, H, S)
                           size_t B, size_t S, size_t H, size_t Hkv, size_t D, int causal,
                           size_t window, float softcap, double scale,
                           const int32_t *pos); // (B, S) or NULL

// ---------------------------------------------------------------------------------------------
// Dropout with a counter-based RNG: element i keeps iff
// cpu_dropout_hash(seed, offset + i) >= cpu_dropout_threshold(p); kept values are scaled by
// 1 / (1 - p) (computed as 1.0f / (1.0f - p)). p == 1 drops everything.

// Returns the 32-bit hash of (seed, counter): splitmix64 as described in README.md.
uint32_t cpu_dropout_hash(uint64_t seed, uint64_t counter);
// Returns floor(p * 2^32) for p in [0, 1), the keep threshold of the hash.
uint32_t cpu_dropout_threshold(float p);
// out = keep ? x / (1 - p) : 0; writes mask[i] = keep (mask may be NULL); CPU_ERR_ARG unless
// 0 <= p <= 1. Chunks with matching offsets reproduce one whole call.
int cpu_dropout_forward(float *out,          // (n)
                        uint8_t *mask,       // (n) or NULL
                        const float *x,      // (n)
                        size_t n, float p, uint64_t seed, uint64_t offset);
// dx = keep ? dout / (1 - p) : 0 (assigned), keep read from mask, or recomputed from
// (seed, offset) when mask is NULL; CPU_ERR_ARG unless 0 <= p <= 1.
int cpu_dropout_backward(float *dx,            // (n) =
                         const float *dout,    // (n)
                         const uint8_t *mask,  // (n) or NULL
                         size_t n, float p, uint64_t seed, uint64_t offset);

// ---------------------------------------------------------------------------------------------
// Cross entropy over logits (N, V) with int32 targets; a target < 0 is ignored (torch's
// ignore_index, e.g. -100). loss = mean over non-ignored rows of (logsumexp(row) - row[target]),
// each row computed in double with max subtraction. With no valid row the loss is NaN (0/0, as
// torch) and every gradient is 0.
//
// Chunking: the whole-batch calls are exactly the row-range calls on one range, so calling the
// _rows variants on consecutive ranges [r0, r1) in increasing order (passing logits + r0*V,
// targets + r0, R = r1 - r0) reproduces them bitwise.

// Returns how many targets are >= 0.
size_t cpu_cross_entropy_count_valid(const int32_t *targets, size_t N);
// Adds the R rows' losses, in row order, to *loss_sum (double); writes lse per row if lse is
// not NULL (0 for ignored rows); CPU_ERR_INDEX if some target >= V. The loss of the batch is
// (float)(loss_sum / n_valid) over all chunks.
int cpu_cross_entropy_forward_rows(double *loss_sum,
                                   float *lse,              // (R) or NULL
                                   const float *logits,     // (R, V)
                                   const int32_t *targets,  // (R)
                                   size_t R, size_t V);
// loss = the mean above for the whole batch; lse may be NULL; CPU_ERR_INDEX if target >= V.
int cpu_cross_entropy_forward(float *loss,             // scalar
                              float *lse,              // (N) or NULL
                              const float *logits,     // (N, V)
                              const int32_t *targets,  // (N)
                              size_t N, size_t V);
// dlogits = (softmax(row) - onehot(target)) * dloss / n_valid for the R rows, with n_valid the
// count over the whole batch; ignored rows get 0 (assigned); CPU_ERR_INDEX if target >= V.
int cpu_cross_entropy_backward_rows(float *dlogits,          // (R, V) =
                                    const float *logits,     // (R, V)
                                    const int32_t *targets,  // (R)
                                    size_t R, size_t V, float dloss, size_t n_valid);
// The whole-batch backward: the _rows call over all N rows with n_valid counted from targets.
int cpu_cross_entropy_backward(float *dlogits,          // (N, V) =
                               const float *logits,     // (N, V)
                               const int32_t *targets,  // (N)
                               size_t N, size_t V, float dloss);

// Each target's log-probability under its row's softmax, lp[r] = x[t] - logsumexp(x) (the
// logsumexp in double), 0 for an ignored target (< 0).
int cpu_logprobs(float *lp,                // (R)
                 const float *logits,      // (R, V)
                 const int32_t *targets,   // (R)
                 size_t R, size_t V);
// Its backward: dlogits[r] = dlp[r] (onehot(t) - softmax(x)), zeros for an ignored row. dlogits
// may be logits (a row is read whole before it is written).
int cpu_logprobs_backward(float *dlogits,          // (R, V) =
                          const float *dlp,        // (R)
                          const float *logits,     // (R, V)
                          const int32_t *targets,  // (R)
                          size_t R, size_t V);

// A preference loss (ops.h's PrefKind) over B rows of S targets, rows 2j and 2j+1 the chosen
// and the rejected of pair j: the loss and the stats (PREF_STATS), each the sum over this
// micro-batch's pairs over the step's `pairs`, and, when dlp is not NULL, the loss's gradient
// by each trained target's log-probability times `scale` (zeros elsewhere). ref: NULL, the
// reference's per-target log-probabilities (B, S), or with ref_sums its per-row sums (B). Sums
// in double, in index order. `chosen` is the step's chosen rows' trained targets (orpo's and
// simpo's nll).
typedef struct CpuPref {
    int kind;
    double beta, smoothing, gamma, alpha;
} CpuPref;
int cpu_preference(float *loss,            // (1)
                   float *stats,           // (PREF_STATS) or NULL
                   float *dlp,             // (B, S) = or NULL
                   const float *lp,        // (B, S)
                   const int32_t *targets, // (B, S)
                   const float *ref,       // (B, S), (B) or NULL
                   bool ref_sums, size_t B, size_t S, int64_t pairs, int64_t chosen,
                   const CpuPref *p, float scale);

// ---------------------------------------------------------------------------------------------
// Optimizer

// The sum of the squares of x, in double in index order (a NaN or infinity makes it one),
// and how many of x are not finite.
void cpu_sumsq(const float *x,         // (n)
               size_t n, double *sumsq, size_t *nonfinite);

// What the updates multiply the gradients by, from their (sum of squares, non-finite
// count) `stats` over every gradient: factor[0] = the clip coefficient over the loss scale
// (torch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1, norm the L2 norm of the
// unscaled gradients; 1 when clip is 0); factor[1] = 1 to skip the step (a gradient is
// not finite), else 0. In fp32, as the generated kernel computes it. NULL stats: none
// seen (the updates inside backward): 1 / loss scale, no skip.
void cpu_grad_factor(const float *stats,   // (2) or NULL
                     double loss_scale, double clip,
                     float *factor);       // (2)

// Kahan-compensated storage of an update (bf16_pure, whose weights have no fp32 master):
// w holds the updated values in fp32, old the weight before, comp the compensation (what
// earlier roundings left out). For each element the update u = w - old joins comp, the
// weight becomes old + comp rounded to its dtype (bf16, or f16 when `f16`), and comp
// keeps what that rounding lost, so updates far below half an ulp add up instead of
// vanishing. w and comp are written (comp in fp32: the caller stores it in the weight's
// dtype).
void cpu_kahan(float *w,           // (n) in: updated, out: stored weight (representable)
               const float *old,   // (n)
               float *comp,        // (n)
               size_t n, bool f16);

// One torch.optim.AdamW step (default: non-foreach, non-amsgrad, non-fused) at 1-based step t,
// in torch's fp32 arithmetic: scalars cast to fp32 as torch's CPU kernels do,
// param *= 1 - lr*wd; m = lerp(m, g, 1 - beta1) (fused multiply-add, as torch's vectorised
// lerp); v = v*beta2 + ((1 - beta2)*g)*g; denom = sqrt(v) / sqrt(1 - beta2^t) + eps;
// param += (-(lr / (1 - beta1^t)) * m) / denom. Bias corrections are computed in double.
// g is grad * gscale (unscaled and clipped as the step's gradient factor says; 1 leaves
// torch's arithmetic as it is).
// AdamW's scalars of step t that vary with the run: the decay 1 - lr wd, the step
// -lr / (1 - beta1^t) and sqrt(1 - beta2^t), each formed in double and rounded once, as
// torch takes Python floats. The GPU kernels get them from the host (kernel_args.h).
typedef struct CpuAdamwScalars {
    float decay, neg_step, bias_c2_sqrt;
} CpuAdamwScalars;
CpuAdamwScalars cpu_adamw_scalars(double lr, double beta1, double beta2, double weight_decay, int64_t t);

void cpu_adamw_step(float *param,       // (n)
                    const float *grad,  // (n)
                    float gscale,
                    float *m,           // (n) first moment, starts at 0
                    float *v,           // (n) second moment, starts at 0
                    size_t n, double lr, double beta1, double beta2, double eps,
                    double weight_decay, int64_t t);

#endif
