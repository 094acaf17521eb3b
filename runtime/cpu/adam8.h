// adam8.h: AdamW with 8-bit moments, as bitsandbytes' AdamW8bit updates them on a GPU
// (0.50's kernels kOptimizerStatic8bit2StateBlockwise and, for small tensors,
// kOptimizer32bit2State; Dettmers et al. 2022, "8-bit Optimizers via Block-wise
// Quantization"). The cpu backend's reference; the CUDA template (codegen/cuda/optim.cuh)
// computes the same bits.
//
// State of a tensor of n elements (n >= the min_8bit_size the train section gives, 4096 by
// default, as bitsandbytes' min_8bit_size: a tensor with fewer elements keeps 32-bit
// moments, as bitsandbytes does):
//   qm, qv (n u8 each): m's codes into cpu_nf4_dynamic_code (signed dynamic map), v's into
//     cpu_dynamic_unsigned_code (unsigned); m = code * am[b], v = code * av[b]
//   am, av (ceil(n/256) fp32 each): the absmax of each block of 256 elements
// All zero at the start (a zero absmax makes every moment 0, whatever the codes).
//
// One step at 1-based step t, in fp32 (compile with -ffp-contract=off), g = grad * gscale:
//   per block: m' = m*beta1 + (1-beta1)*g, v' = v*beta2 + ((1-beta2)*g)*g for each element
//     (0 and 0, the weight left alone, where the gradient is not finite); am' = max |m'|, av' = max |v'| over the block, the tail
//     of a partial last block counted as bitsandbytes' kernel loads it (code 128 of m and 0
//     of v, gradient 0: a tail m' of code[128]*am*beta1);
//   w += step_size * (m' / (sqrt(v') + correction2*eps)), then w *= 1 - lr*wd when wd > 0
//     step_size = -lr*correction2/correction1, correction1 = 1 - beta1^t,
//     correction2 = sqrt(1 - beta2^t);
//   qm = the code of m'/am', qv = that of v'/av' (cpu_adam8_quantize); when m's code has
//     another sign than m' it moves one step towards m' (bitsandbytes keeps m's sign).
// 32-bit moments: m' and v' as above (v' with (1-beta2)*(g*g)), the same update, kept in fp32.
// The scalars are bitsandbytes' (fp32 lr, betas, eps, weight decay) and its expressions
// (1.0f - beta^t, sqrtf of it), with beta^t rounded once from double (its 8-bit kernel calls
// __powf, an approximation) and every division IEEE (it calls __fdividef there): a GPU
// run of bitsandbytes can differ from these by an ulp of those, and a code by one where
// that ulp crosses a midpoint.
#ifndef FTC_RUNTIME_CPU_ADAM8_H
#define FTC_RUNTIME_CPU_ADAM8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_ADAM8_BLOCK 256         // elements per absmax
#define CPU_ADAM8_MIN_ELEMS 4096    // bitsandbytes' default min_8bit_size

// One step's scalars, fp32 as bitsandbytes' kernels take them.
typedef struct CpuAdam8 {
    float beta1, beta2, eps, lr, weight_decay;
    float correction2;  // sqrt(1 - beta2^t)
    float step_size;    // -lr * correction2 / correction1
    float decay;        // 1 - lr * weight_decay
} CpuAdam8;

// The scalars of step t (1-based) at learning rate lr.
CpuAdam8 cpu_adam8_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t t);

// Blocks of a tensor of n elements: ceil(n/256).
size_t cpu_adam8_blocks(size_t n);

// The code of x in `code` (256 ascending values; signed: cpu_nf4_dynamic_code, else
// cpu_dynamic_unsigned_code), as bitsandbytes' quantize_2D finds it: a bisection of seven
// halvings from index 127, then the nearer of the last value and the bracket's other end
// (midpoints (a + b) * 0.5 in fp32; a value on a midpoint stays at the bisection's index).
uint8_t cpu_adam8_quantize(const float *code, float x, bool is_signed);

// One step over blocks [b_lo, b_hi) of a tensor of n elements with 8-bit moments: w (fp32,
// the master copy or the weight) updated in place, the codes and absmaxes rewritten.
void cpu_adam8_update(float *w,           // (n)
                      const float *grad,  // (n)
                      float gscale,
                      uint8_t *qm,        // (n) m's codes
                      uint8_t *qv,        // (n) v's codes
                      float *am,          // (ceil(n/256))
                      float *av,          // (ceil(n/256))
                      size_t n, size_t b_lo, size_t b_hi, const CpuAdam8 *s);

// One step over elements [lo, hi) of a tensor with 32-bit moments (fewer than
// min_8bit_size elements).
void cpu_adam32_update(float *w,          // (n)
                       const float *grad, // (n)
                       float gscale,
                       float *m,          // (n)
                       float *v,          // (n)
                       size_t lo, size_t hi, const CpuAdam8 *s);

#endif
