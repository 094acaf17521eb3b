// nf4.h: NF4 4-bit weight quantisation for QLoRA, bit-exact with bitsandbytes on the CPU.
//
// Reproduces bitsandbytes.functional.quantize_4bit / dequantize_4bit with quant_type="nf4",
// blocksize=64, and compress_statistics=True (double quantisation of the block absmax), as
// bitsandbytes 0.50.2 computes them on the CPU (torch "default" backend for the 4-bit step,
// libbitsandbytes_cpu for the 8-bit step, torch for the mean). Checked bit for bit against
// real bitsandbytes by tests/test_nf4.c on the vectors in tests/fixtures/nf4/.
//
// Input is fp32 (the caller widens bf16 to fp32 exactly; bitsandbytes does the same,
// A.float(), so bf16 weights give identical codes). Inputs are assumed finite (NaN/inf
// handling is not reproduced).
//
// Layout (n weights, nb = ceil(n/64) blocks, ns = ceil(nb/256) absmax blocks):
//   packed (ceil(n/2) bytes): weight 2j in the high nibble of byte j, weight 2j+1 in the low
//     nibble; for odd n the last low nibble is 7 (the code of 0.0; bitsandbytes pads with 0).
//   absmax (nb fp32): per block of 64, max |w|; a trailing partial block stores
//     max(max|w|, (float)1e-38) (bitsandbytes clamps only that one; an all-zero full block
//     stores 0).
//   double quant: codes (nb u8, indices into cpu_nf4_dynamic_code), scales (ns fp32, max |y|
//     per 256 where y = absmax - mean), mean (one fp32).
//
// Rules (all fp32 arithmetic, each operation rounded; compile with -ffp-contract=off, the
// one fused multiply-add is written as fmaf):
//   4-bit: full block: s = clamp(w * (1 / max(absmax, 1e-38f)), -1, 1); partial last block:
//     s = clamp(w / absmax, -1, 1). Code = number of midpoints m[i] = (c[i] + c[i+1]) / 2
//     with m[i] < s (torch.bucketize: a value exactly on a midpoint takes the lower code).
//     Dequantised w = c[code] * absmax.
//   mean: torch's float32 `tensor.mean()` = cascade sum (8-lane vectors, 4-way ILP, levels
//     of 16 or more) / n; with several torch threads and n >= 32768 the sum is split per
//     thread (cpu_nf4_mean's torch_threads).
//   8-bit (libbitsandbytes_cpu quantize_cpu, blocks of 256): scale = max |y|; an all-zero
//     block gets codes 0. Otherwise v = clamp(y * (1 / scale), -1, 1),
//     k = (uint16)(int)fmaf((v + 1) * 0.5, 65535, 0.5) and the code is the number of
//     midpoints (d[i] + d[i+1]) * 0.5 below -1 + 2k/65535 (a 65536-entry lookup table:
//     nearest code of the bin centre, not of v itself). Dequantised absmax =
//     d[code] * scale + mean (two roundings).
#ifndef FTC_RUNTIME_CPU_NF4_H
#define FTC_RUNTIME_CPU_NF4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_NF4_BLOCK 64        // weights per absmax block
#define CPU_NF4_DQ_BLOCK 256    // absmax values per double-quant scale
#define CPU_NF4_MAX_THREADS 1024 // largest torch_threads cpu_nf4_mean models (larger is clamped)

// The NF4 codebook, bitsandbytes get_4bit_type("nf4"), ascending; code 7 is 0.0.
extern const float cpu_nf4_code[16];
// bitsandbytes create_dynamic_map(signed=True) in fp32, ascending: [0] = -0.99297, [127] = 0,
// [255] = 1.0. Tabulated from bitsandbytes; cpu_nf4_dynamic_map recomputes it.
extern const float cpu_nf4_dynamic_code[256];

// Computes create_dynamic_map(signed=True) as torch does in fp32 (linspace with fused
// start + step*i, midpoints, times 10^(i-6), sorted); equals cpu_nf4_dynamic_code bitwise.
void cpu_nf4_dynamic_map(float *code); // (256)
// bitsandbytes create_dynamic_map(signed=False) in fp32, ascending: [0] = 0, [255] = 1.0 (the
// map of AdamW8bit's second moment). Tabulated from bitsandbytes; cpu_dynamic_map recomputes it.
extern const float cpu_dynamic_unsigned_code[256];
// create_dynamic_map(signed) as torch computes it in fp32: cpu_nf4_dynamic_code (signed) or
// cpu_dynamic_unsigned_code bitwise.
void cpu_dynamic_map(float *code, bool is_signed); // (256)

// Bytes of the packed 4-bit codes: ceil(n/2).
size_t cpu_nf4_packed_bytes(size_t n);
// Number of 64-weight blocks (absmax values): ceil(n/64).
size_t cpu_nf4_blocks(size_t n);
// Number of double-quant scales: ceil(nblocks/256).
size_t cpu_nf4_absmax_scales(size_t nblocks);
// Stored bytes for n weights. Without double quant: ceil(n/2) + 4*ceil(n/64) (4.5 bits/weight
// for large n). With it: ceil(n/2) + ceil(n/64) (u8 absmax codes) + 4*ceil(ceil(n/64)/256)
// (fp32 scales) + 4 (fp32 mean), about 4.127 bits/weight for large n.
size_t cpu_nf4_storage_bytes(size_t n, int double_quant);

// Quantises w to NF4 in blocks of 64: packed codes (high nibble first) and one absmax per block.
void cpu_nf4_quantize(uint8_t *packed,     // (ceil(n/2))
                      float *absmax,       // (ceil(n/64))
                      const float *w,      // (n)
                      size_t n);
// Dequantises: w[i] = cpu_nf4_code[code i] * absmax[i/64].
void cpu_nf4_dequantize(float *w,              // (n)
                        const uint8_t *packed, // (ceil(n/2))
                        const float *absmax,   // (ceil(n/64))
                        size_t n);

// Returns torch's float32 x.mean() bitwise, for torch running with torch_threads intra-op
// threads (only matters when n >= 32768; values < 1 mean 1, above CPU_NF4_MAX_THREADS clamp).
float cpu_nf4_mean(const float *x, // (n)
                   size_t n, int torch_threads);
// Double quantisation as bitsandbytes: *mean = cpu_nf4_mean(absmax, nblocks, 1), then
// absmax - mean quantised with cpu_nf4_dynamic_code in blocks of 256, one fp32 scale each.
void cpu_nf4_quantize_absmax(uint8_t *codes,      // (nblocks)
                             float *scales,       // (ceil(nblocks/256))
                             float *mean,         // (1)
                             const float *absmax, // (nblocks)
                             size_t nblocks);
// The 8-bit step alone, with a given mean (e.g. cpu_nf4_mean with another thread count).
void cpu_nf4_quantize_absmax_mean(uint8_t *codes,      // (nblocks)
                                  float *scales,       // (ceil(nblocks/256))
                                  const float *absmax, // (nblocks)
                                  float mean, size_t nblocks);
// Undoes double quantisation: absmax[i] = cpu_nf4_dynamic_code[codes[i]] * scales[i/256] + mean.
void cpu_nf4_dequantize_absmax(float *absmax,        // (nblocks)
                               const uint8_t *codes, // (nblocks)
                               const float *scales,  // (ceil(nblocks/256))
                               float mean, size_t nblocks);

#endif
