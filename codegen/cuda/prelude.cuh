/* prelude.cuh — the top of every generated kernels.cu: the common ground of NVRTC (CUDA
 * C++, -default-device) and the host C compiler with ftc_emu.h (`ftc run --device emu`,
 * the CUDA execution model on the CPU). Kernels are written in the subset both accept:
 * C99 with CUDA's qualifiers and built-in variables (threadIdx, blockIdx, blockDim,
 * gridDim, __shared__, __syncthreads, warp shuffles and votes, atomics); no templates,
 * references or overloading; storage dtypes only through the ld_/st_ helpers below,
 * whose rounding is bit-for-bit the cpu backend's (runtime/cpu/kernels.c).
 *
 * The kernel ABI: every kernel is
 *     FTC_KERNEL void NAME(FtcArgs a)
 * launched with the grid and block the plan names; a.p[] holds the instruction's
 * buffers in plan order (outputs, then inputs, then its workspace), a.i[] and a.f[] the
 * runtime scalars the instruction's kernel documents (optimizer step, dropout stream,
 * learning rate, loss scale). Shapes are constants of each kernel's specialisation. A grouped
 * launch (the optimizer over many tensors at once) covers several consecutive plan
 * instructions: it is
 *     FTC_GROUP_KERNEL(NAME)
 * and reads FTC_GA->p[k][j], operand j of the group's k-th instruction, with the same
 * i[] and f[]; the arguments travel by value (3 KiB, inside CUDA's 4 KiB), as a
 * __grid_constant__ so that indexing them at run time copies nothing. NVRTC compiles
 * with --fmad=false and the emulation with -ffp-contract=off, so a*b+c is two roundings
 * everywhere, as on the cpu backend. */
typedef struct FtcArgs {
    void *p[12];        /* buffers: outputs, inputs, workspace, in plan order */
    long long i[4];     /* runtime integers: [0] the optimizer step, [1] the micro-step,
                           [2] the instruction's random stream (dropout) */
    float f[8];         /* runtime reals, fp32, formed on the host (no kernel computes in
                           double): [0] the learning rate, [1] the loss scale, [2..4] an
                           update's decay, step and bias correction (optim.cuh) */
} FtcArgs;

/* At most FTC_GROUP_MAX instructions of at most FTC_GROUP_OPERANDS operands each in one
 * grouped launch (runtime/plan.h: PLAN_GROUP_MAX, PLAN_GROUP_OPERANDS). */
#define FTC_GROUP_MAX 64
#define FTC_GROUP_OPERANDS 6
typedef struct FtcGroupArgs {
    void *p[FTC_GROUP_MAX][FTC_GROUP_OPERANDS];
    long long i[4];
    float f[8];
} FtcGroupArgs;

#ifdef FTC_EMU
#include "ftc_emu.h"
#define FTC_CONST static const
#define FTC_TABLE static const
#define FTC_UNROLL
#define FTC_GROUP_KERNEL(name) static void name(const FtcGroupArgs *ftc_ga_)
#define FTC_GA ftc_ga_
#else
#define FTC_KERNEL extern "C" __global__
#define FTC_CONST static __constant__ const
/* A table each thread reads at its own index (rope's frequencies): in global memory, read
 * through the caches; constant memory would serialise a warp's different addresses, and a
 * module holds at most 64 KiB of it. */
#define FTC_TABLE static __device__ const
/* Before a loop over a register array (an mma accumulator): unrolled, the array stays in
 * registers; rolled, it is indexed at run time and lives in local memory. */
#define FTC_UNROLL _Pragma("unroll")
#define FTC_GROUP_KERNEL(name) extern "C" __global__ void name(const __grid_constant__ FtcGroupArgs ftc_ga_)
#define FTC_GA (&ftc_ga_)
#endif

#define FTC_INLINE static __device__ __forceinline__ __attribute__((unused))
#define FTC_INF (__int_as_float(0x7f800000))

FTC_INLINE float ftc_u2f(unsigned int u) { return __uint_as_float(u); }
FTC_INLINE unsigned int ftc_f2u(float f) { return __float_as_uint(f); }

/* bf16: the high half of an fp32; round to nearest even, NaN to the canonical 0x7fff. On a
 * GPU the hardware's conversion (cvt.rn.bf16.f32, sm_80), whose bits are these. */
FTC_INLINE float ld_bf16(const unsigned short *p, long long i) { return ftc_u2f((unsigned int)p[i] << 16); }
FTC_INLINE unsigned short f2bf16(float f) {
#ifdef FTC_EMU
    unsigned int u = ftc_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
#else
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}
FTC_INLINE void st_bf16(unsigned short *p, long long i, float v) { p[i] = f2bf16(v); }

/* f16 (IEEE binary16), the same conversions as the cpu backend. */
FTC_INLINE float ld_f16(const unsigned short *p, long long i) {
    unsigned int h = p[i], sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return ftc_u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0)
        return ftc_u2f(sign | ftc_f2u((float)m * 5.9604644775390625e-8f)); /* m * 2^-24, exact */
    return ftc_u2f(sign | ((e + 112u) << 23) | (m << 13));
}
FTC_INLINE unsigned short f2f16(float f) {
    unsigned int u = ftc_f2u(f), a = u & 0x7fffffffu;
    unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) {
        unsigned short m = (unsigned short)((a >> 13) & 0x3ffu);
        return (unsigned short)(sign | 0x7c00u | (m ? m : 0x200u));
    }
    if (a >= 0x477ff000u)
        return (unsigned short)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        unsigned int r = a + 0xfffu + ((a >> 13) & 1u);
        return (unsigned short)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a < 0x33000000u)
        return sign;
    unsigned int e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    unsigned int r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (unsigned short)(sign | r);
}
FTC_INLINE void st_f16(unsigned short *p, long long i, float v) { p[i] = f2f16(v); }

/* Tensor cores: one warp-wide mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, D = A·B + C
 * with A 16x16 (row-major), B 16x8 (column-major), C and D 16x8 fp32. Every lane of the warp
 * executes it; with g = lane / 4 and q = lane % 4 a lane holds, in registers of two bf16 each
 * (the lower-indexed element in the low 16 bits), a0 = A[g][2q..2q+1], a1 = A[g+8][2q..2q+1],
 * a2 = A[g][2q+8..2q+9], a3 = A[g+8][2q+8..2q+9], b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g];
 * and the floats c0, c1, c2, c3 = C[g][2q], C[g][2q+1], C[g+8][2q], C[g+8][2q+1], the same
 * places of D for d0..d3 (lvalues; they may be the c's). Needs sm_80 or later. The order of the
 * k-sum is the hardware's own (the emulation's is ftc_emu.h's): compare with a tolerance. */
#ifdef FTC_EMU
#define FTC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)                   \
    ftc_emu_mma_16816(&(d0), &(d1), &(d2), &(d3), (a0), (a1), (a2), (a3), (b0), (b1), (c0),      \
                      (c1), (c2), (c3))
#else
#define FTC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)                   \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "                          \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"           \
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)                                        \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1),       \
                   "f"(c2), "f"(c3))
#endif

/* Shared memory a kernel sizes itself past the 48 KiB of static arrays: `name` is BYTES bytes,
 * 16-byte aligned, one array a kernel. On a GPU it is the launch's dynamic shared memory (the
 * plan's launch names the size, the runtime raises the kernel's limit to it) and a launch
 * given less traps; under the emu a static array of that size. */
#ifdef FTC_EMU
#define FTC_DYN_SMEM(name, bytes)                                                                 \
    static _Thread_local __attribute__((aligned(16))) unsigned char name[FTC_EMU_DSMEM_MAX];      \
    ftc_emu_dsmem_check_(bytes)
#else
#define FTC_DYN_SMEM(name, bytes)                                                                 \
    extern __shared__ __align__(16) unsigned char name[];                                       \
    ftc_dyn_smem_check(bytes)
FTC_INLINE void ftc_dyn_smem_check(unsigned int bytes) {
    unsigned int n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    if (n < bytes)
        __trap();
}
#endif

/* A shared-memory address as the 32-bit operand of ldmatrix and cp.async. */
#ifndef FTC_EMU
FTC_INLINE unsigned int ftc_smem_u32(const void *p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}
#endif

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: the warp loads four 8x8 matrices of 16-bit
 * elements from shared memory; lane 8j + r gives the address of row r of matrix j (16-byte
 * aligned, eight contiguous elements), and lane 4r + w gets in rj the elements 2w, 2w + 1 of row
 * r of matrix j (the first in the low half); with _T, elements (2w, r) and (2w + 1, r): each
 * matrix transposed. rj are exactly an mma operand's registers (attention.cuh). _X2: two
 * matrices, from the addresses of lanes 0-15. */
#ifdef FTC_EMU
#define FTC_LDMATRIX_X4_(r0, r1, r2, r3, p, trans)                                               \
    do {                                                                                         \
        unsigned int ftc_o_[4];                                                                  \
        ftc_emu_ldmatrix(ftc_o_, (p), 4, (trans));                                               \
        (r0) = ftc_o_[0], (r1) = ftc_o_[1], (r2) = ftc_o_[2], (r3) = ftc_o_[3];                  \
    } while (0)
#define FTC_LDMATRIX_X4(r0, r1, r2, r3, p) FTC_LDMATRIX_X4_(r0, r1, r2, r3, p, 0)
#define FTC_LDMATRIX_X4_T(r0, r1, r2, r3, p) FTC_LDMATRIX_X4_(r0, r1, r2, r3, p, 1)
#define FTC_LDMATRIX_X2_(r0, r1, p, trans)                                                       \
    do {                                                                                         \
        unsigned int ftc_o_[4];                                                                  \
        ftc_emu_ldmatrix(ftc_o_, (p), 2, (trans));                                               \
        (r0) = ftc_o_[0], (r1) = ftc_o_[1];                                                      \
    } while (0)
#define FTC_LDMATRIX_X2(r0, r1, p) FTC_LDMATRIX_X2_(r0, r1, p, 0)
#define FTC_LDMATRIX_X2_T(r0, r1, p) FTC_LDMATRIX_X2_(r0, r1, p, 1)
#else
#define FTC_LDMATRIX_X4(r0, r1, r2, r3, p)                                                       \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"             \
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(ftc_smem_u32(p)))
#define FTC_LDMATRIX_X4_T(r0, r1, r2, r3, p)                                                     \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"       \
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(ftc_smem_u32(p)))
#define FTC_LDMATRIX_X2(r0, r1, p)                                                               \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"                     \
                 : "=r"(r0), "=r"(r1) : "r"(ftc_smem_u32(p)))
#define FTC_LDMATRIX_X2_T(r0, r1, p)                                                             \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"               \
                 : "=r"(r0), "=r"(r1) : "r"(ftc_smem_u32(p)))
#endif

/* cp.async (sm_80): 16 bytes from global to shared memory, bypassing the registers; a thread's
 * copies form groups at each commit, and FTC_CP_ASYNC_WAIT(n) waits until at most the newest n
 * groups are still in flight (n a literal). Other threads see the bytes after the waiting
 * thread's next __syncthreads. Both addresses 16-byte aligned. */
#ifdef FTC_EMU
#define FTC_CP_ASYNC_16(dst, src) ftc_emu_cp_async_16((dst), (src))
#define FTC_CP_ASYNC_COMMIT() ftc_emu_cp_async_commit()
#define FTC_CP_ASYNC_WAIT(n) ftc_emu_cp_async_wait(n)
#else
#define FTC_CP_ASYNC_16(dst, src)                                                                \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ftc_smem_u32(dst)), "l"(src))
#define FTC_CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define FTC_CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory")
#endif

/* Two adjacent floats added into global memory, p 8-byte aligned, no value returned: on sm_90
 * and later one vector reduction (red.global.add.v2.f32), before it two (atomicAdd with the
 * result unused, which NVRTC makes red.global.add.f32). */
#if !defined(FTC_EMU) && __CUDA_ARCH__ >= 900
#define FTC_RED_ADD2(p, x, y)                                                                    \
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(x), "f"(y) : "memory")
#else
#define FTC_RED_ADD2(p, x, y) (atomicAdd((p), (x)), atomicAdd((p) + 1, (y)))
#endif
