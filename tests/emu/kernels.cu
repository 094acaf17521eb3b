/* kernels.cu: the kernels tests/test_emu.c runs on the emu (codegen/cuda/ftc_emu.h), written
 * like generated ones: prelude.cuh first, then kernels in the common subset of CUDA C++ and
 * C99, then the table. Buffers come outputs first, as in a plan; n = threads per block. */
#include "prelude.cuh"

#define FULL 0xffffffffu

/* (a) out[i] = x[i] * f0 + f1 for i < i0, one element a thread: the fast path, with a tail. */
FTC_KERNEL void k_scale(FtcArgs a) {
    float *out = (float *)a.p[0];
    const float *x = (const float *)a.p[1];
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.i[0])
        out[i] = x[i] * (float)a.f[0] + (float)a.f[1];
}

/* (b) out[b] = the sum of x[b*1000 .. b*1000+999] for block b = (x + y * gridDim.x), through
 * per-thread strided sums and a tree in shared memory; blocks of 256 threads in any shape. */
#define RED_N 1000
#define RED_T 256
FTC_KERNEL void k_block_sum(FtcArgs a) {
    __shared__ float s[RED_T];
    float *out = (float *)a.p[0];
    const float *x = (const float *)a.p[1];
    int b = blockIdx.x + blockIdx.y * gridDim.x;
    int t = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    float v = 0.0f;
    for (int i = t; i < RED_N; i += RED_T)
        v += x[b * RED_N + i];
    s[t] = v;
    __syncthreads();
    for (int k = RED_T / 2; k > 0; k /= 2) {
        if (t < k)
            s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0)
        out[b] = s[0];
}

/* (c) Warp operations. Thread t (linear, of n) of block b writes its results at
 * [k * gridDim.x * n + b * n + t]: floats F0..F7 into p[0], ints I0..I7 into p[1]. */
enum { W_F = 8, W_I = 8 };
FTC_KERNEL void k_warp(FtcArgs a) {
    float *fo = (float *)a.p[0];
    int *io = (int *)a.p[1];
    int n = blockDim.x * blockDim.y * blockDim.z;
    int t = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    int lane = t % 32;
    long long at = (long long)blockIdx.x * n + t, stride = (long long)gridDim.x * n;
    float v = (float)((t * 7) % 13 + 1);

    float s = v;
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_xor_sync(FULL, s, o);
    fo[0 * stride + at] = s;

    s = v;
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_down_sync(FULL, s, o);
    fo[1 * stride + at] = s;

    s = v;
    for (int o = 1; o < 32; o *= 2) {
        float y = __shfl_up_sync(FULL, s, o);
        if (lane >= o)
            s += y;
    }
    fo[2 * stride + at] = s;

    fo[3 * stride + at] = __shfl_sync(FULL, v, 5);

    s = v;
    for (int o = 4; o > 0; o /= 2)
        s += __shfl_down_sync(FULL, s, o, 8);
    fo[4 * stride + at] = s;

    double d = (double)v * 0.5;
    fo[5 * stride + at] = (float)__shfl_xor_sync(FULL, d, 3);
    fo[6 * stride + at] = __shfl_sync(FULL, v, lane + 40);
    fo[7 * stride + at] = __shfl_xor_sync(FULL, v, 20, 16);

    int si = t;
    for (int o = 16; o > 0; o /= 2)
        si += __shfl_xor_sync(FULL, si, o);
    io[0 * stride + at] = si;
    io[1 * stride + at] = (int)__ballot_sync(FULL, t % 3 == 0);
    io[2 * stride + at] = __any_sync(FULL, t == 40);
    io[3 * stride + at] = __all_sync(FULL, v > 0.0f);
    io[4 * stride + at] = __all_sync(FULL, lane < 20);
    io[5 * stride + at] = (int)__activemask();
    unsigned int u = (unsigned int)t * 0x10001u;
    io[6 * stride + at] = (int)__shfl_sync(FULL, u, 31 - lane);
    __syncwarp();
    __syncwarp(FULL);
    io[7 * stride + at] = __syncthreads_count(t % 5 == 0);
}

/* (d) Atomics across the whole grid, on the fast path: fs (2 floats), is (5 ints), us (2 u64),
 * ds (1 double). */
FTC_KERNEL void k_atomics(FtcArgs a) {
    float *fs = (float *)a.p[0];
    int *is = (int *)a.p[1];
    unsigned long long *us = (unsigned long long *)a.p[2];
    double *ds = (double *)a.p[3];
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&fs[0], 1.0f);
    atomicAdd(fs + 1, 0.5f);
    atomicAdd(&is[0], g);
    atomicMax(&is[1], (g * 37) % 1001);
    atomicMin(&is[2], (g * 37) % 1001 + 5);
    int old = is[3], seen;
    do {
        seen = old;
        old = atomicCAS(&is[3], seen, seen + 2);
    } while (old != seen);
    atomicExch(&is[4], 7);
    atomicAdd(&us[0], (unsigned long long)g << 20);
    unsigned long long o2 = us[1], s2;
    do {
        s2 = o2;
        o2 = atomicCAS(&us[1], s2, s2 + 3);
    } while (o2 != s2);
    atomicAdd(&ds[0], 0.25);
}

/* (d) A histogram of x (ints in [0, 16)) in shared memory, then added into hist. */
FTC_KERNEL void k_histogram(FtcArgs a) {
    __shared__ int h[16];
    int *hist = (int *)a.p[0];
    const int *x = (const int *)a.p[1];
    int t = threadIdx.x;
    if (t < 16)
        h[t] = 0;
    __syncthreads();
    atomicAdd(&h[x[blockIdx.x * blockDim.x + t]], 1);
    __syncthreads();
    if (t < 16)
        atomicAdd(&hist[t], h[t]);
}

/* (e) x rounded to bf16 and f16 through the prelude's helpers, and widened back. */
FTC_KERNEL void k_convert(FtcArgs a) {
    unsigned short *bf = (unsigned short *)a.p[0], *h = (unsigned short *)a.p[1];
    float *bfw = (float *)a.p[2], *hw = (float *)a.p[3];
    const float *x = (const float *)a.p[4];
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.i[0])
        return;
    st_bf16(bf, i, x[i]);
    st_f16(h, i, x[i]);
    bfw[i] = ld_bf16(bf, i);
    hw[i] = ld_f16(h, i);
}

/* (e) Every 16-bit pattern widened as a bf16 and as an f16. */
FTC_KERNEL void k_widen(FtcArgs a) {
    float *bf = (float *)a.p[0], *hf = (float *)a.p[1];
    const unsigned short *bits = (const unsigned short *)a.p[2];
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    bf[i] = ld_bf16(bits, i);
    hf[i] = ld_f16(bits, i);
}

/* (f) Warp w of the block: D[w] = A[w] B[w] + C[w] and E[w] = A[w] B[w] + D[w] (accumulating
 * in place), with A (16, 16) bf16 row-major, B (16, 8) bf16 row-major (k, n), C, D, E (16, 8)
 * f32; fragments loaded and stored as prelude.cuh's FTC_MMA_16816 lays them out. */
#define PACK(lo, hi) ((unsigned int)(lo) | (unsigned int)(hi) << 16)
FTC_KERNEL void k_mma(FtcArgs a) {
    float *D = (float *)a.p[0], *E = (float *)a.p[1];
    const unsigned short *A = (const unsigned short *)a.p[2], *B = (const unsigned short *)a.p[3];
    const float *C = (const float *)a.p[4];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, q = (lane % 4) * 2;
    A += w * 256, B += w * 128, C += w * 128, D += w * 128, E += w * 128;
    unsigned int a0 = PACK(A[g * 16 + q], A[g * 16 + q + 1]);
    unsigned int a1 = PACK(A[(g + 8) * 16 + q], A[(g + 8) * 16 + q + 1]);
    unsigned int a2 = PACK(A[g * 16 + q + 8], A[g * 16 + q + 9]);
    unsigned int a3 = PACK(A[(g + 8) * 16 + q + 8], A[(g + 8) * 16 + q + 9]);
    unsigned int b0 = PACK(B[q * 8 + g], B[(q + 1) * 8 + g]);
    unsigned int b1 = PACK(B[(q + 8) * 8 + g], B[(q + 9) * 8 + g]);
    float c0 = C[g * 8 + q], c1 = C[g * 8 + q + 1], c2 = C[(g + 8) * 8 + q];
    float c3 = C[(g + 8) * 8 + q + 1], d0, d1, d2, d3;
    FTC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3);
    D[g * 8 + q] = d0, D[g * 8 + q + 1] = d1, D[(g + 8) * 8 + q] = d2, D[(g + 8) * 8 + q + 1] = d3;
    FTC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, d0, d1, d2, d3);
    E[g * 8 + q] = d0, E[g * 8 + q + 1] = d1, E[(g + 8) * 8 + q] = d2, E[(g + 8) * 8 + q + 1] = d3;
}

/* (g) ldmatrix and cp.async: a 16 x 16 matrix M of 16-bit elements (in) reaches shared memory
 * by cp.async, 16 bytes a thread, read once before the wait (what was there: zeros) and once
 * after; then ldmatrix.x4 of its four 8x8 quarters (lane l gives row l % 16 of column block
 * l / 16: M[0:8][0:8], M[8:16][0:8], M[0:8][8:16], M[8:16][8:16]), plain and transposed. out:
 * before[32], after[32] (each thread's first word), plain[32][4], trans[32][4]. */
FTC_KERNEL void k_ldmatrix(FtcArgs a) {
    __shared__ __align__(16) unsigned short m[256];
    unsigned int *out = (unsigned int *)a.p[0];
    const unsigned short *in = (const unsigned short *)a.p[1];
    int l = threadIdx.x;
    m[l * 8] = 0, m[l * 8 + 1] = 0;
    __syncthreads();
    FTC_CP_ASYNC_16(m + l * 8, in + l * 8);
    FTC_CP_ASYNC_COMMIT();
    out[l] = (unsigned int)m[l * 8] | (unsigned int)m[l * 8 + 1] << 16;
    FTC_CP_ASYNC_WAIT(0);
    __syncthreads();
    out[32 + l] = (unsigned int)m[l * 8] | (unsigned int)m[l * 8 + 1] << 16;
    const unsigned short *row = m + (l % 16) * 16 + (l / 16) * 8;
    unsigned int r0, r1, r2, r3;
    FTC_LDMATRIX_X4(r0, r1, r2, r3, row);
    out[64 + 4 * l] = r0, out[65 + 4 * l] = r1, out[66 + 4 * l] = r2, out[67 + 4 * l] = r3;
    FTC_LDMATRIX_X4_T(r0, r1, r2, r3, row);
    out[192 + 4 * l] = r0, out[193 + 4 * l] = r1, out[194 + 4 * l] = r2, out[195 + 4 * l] = r3;
}

/* (h) Four barriers a block of 256: out[b * 256 + t] = (t + 1 mod 256) * 2 + (t + 3 mod 256)
 * * 2 reached through shared memory. */
FTC_KERNEL void k_perf(FtcArgs a) {
    __shared__ float s[256];
    float *out = (float *)a.p[0];
    int t = threadIdx.x;
    s[t] = (float)t;
    __syncthreads();
    float x = s[(t + 1) % 256];
    __syncthreads();
    s[t] = x * 2.0f;
    __syncthreads();
    x += s[(t + 3) % 256];
    __syncthreads();
    out[blockIdx.x * 256 + t] = x;
}

/* (h) The same size without barriers: out[i] = i * 2, the fast path. */
FTC_KERNEL void k_perf_fast(FtcArgs a) {
    float *out = (float *)a.p[0];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = (float)i * 2.0f;
}

/* Intrinsics and math the two compilers must agree on (one thread): floats into p[0], ints
 * into p[1]; tests/test_emu.c lists the expected values. */
FTC_KERNEL void k_intrinsics(FtcArgs a) {
    float *fo = (float *)a.p[0];
    int *io = (int *)a.p[1];
    fo[0] = min(2.5f, -1.0f);
    fo[1] = max(2.5f, __int_as_float(0x7fc00000));
    fo[2] = __saturatef(1.5f);
    fo[3] = __saturatef(-0.5f);
    fo[4] = rsqrtf(4.0f);
    fo[5] = __fdividef(1.0f, 4.0f);
    fo[6] = __expf(0.0f);
    fo[7] = __uint_as_float(0x40490fdbu);
    io[0] = min(-3, 2);
    io[1] = (int)max(7u, 3u);
    io[2] = (int)min(5ll, -6ll);
    io[3] = __float2int_rn(2.5f);
    io[4] = __float2int_rn(3.5f);
    io[5] = __float2int_rz(-2.7f);
    io[6] = __float2int_rd(-2.2f);
    io[7] = __popc(0xf0f0u);
    io[8] = __clz(1);
    io[9] = __ffs(8);
    io[10] = (int)__brev(1u);
    io[11] = (int)__float_as_uint(1.0f);
    io[12] = __float_as_int(-0.0f);
    io[13] = warpSize;
    io[14] = (int)sizeof(float4);
    io[15] = (int)__alignof__(float4);
    io[16] = __float2int_rn(3e9f);
    float4 v = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
    io[17] = (int)(v.x + v.y * v.z + v.w);
}

/* (i) A grouped launch: member k's out = x * (k + 1) + f0 over its elements, laid end to
 * end in the launch's range (member 1 has none). */
FTC_CONST long long k_group_start[4] = {0LL, 5LL, 5LL, 300LL};
FTC_GROUP_KERNEL(k_group) {
    long long k = 0, stride = (long long)gridDim.x * blockDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < k_group_start[3];
         g += stride) {
        while (g >= k_group_start[k + 1])
            k++;
        float *out = (float *)FTC_GA->p[k][0];
        const float *x = (const float *)FTC_GA->p[k][1];
        long long i = g - k_group_start[k];
        out[i] = x[i] * (float)(k + 1) + (float)FTC_GA->f[0];
    }
}

#ifdef FTC_EMU
FTC_EMU_TABLE(
    FTC_EMU_ENTRY(k_scale, 0)
    FTC_EMU_ENTRY(k_block_sum, 1)
    FTC_EMU_ENTRY(k_warp, 1)
    FTC_EMU_ENTRY(k_atomics, 0)
    FTC_EMU_ENTRY(k_histogram, 1)
    FTC_EMU_ENTRY(k_convert, 0)
    FTC_EMU_ENTRY(k_widen, 0)
    FTC_EMU_ENTRY(k_mma, 1)
    FTC_EMU_ENTRY(k_ldmatrix, 1)
    FTC_EMU_ENTRY(k_perf, 1)
    FTC_EMU_ENTRY(k_perf_fast, 0)
    FTC_EMU_ENTRY(k_intrinsics, 0)
    FTC_EMU_GROUP_ENTRY(k_group, 0)
)
#endif
