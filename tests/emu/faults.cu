/* faults.cu: kernels that break CUDA's synchronisation rules (undefined behaviour on a GPU),
 * each of which the emu must report as a failed launch rather than hang or guess; and one
 * that works, to show a failure leaves nothing behind. tests/test_emu.c runs them. */
#include "prelude.cuh"

/* Thread 0 returns before the barrier the others wait at. */
FTC_KERNEL void k_deadlock(FtcArgs a) {
    int *out = (int *)a.p[0];
    if (threadIdx.x == 0)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

/* Lane 3 returns; the rest shuffle with a mask that names it. */
FTC_KERNEL void k_warp_exited(FtcArgs a) {
    float *out = (float *)a.p[0];
    if (threadIdx.x % 32 == 3)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

/* Lane 0 waits at a barrier while the rest of its warp waits for it at a shuffle. */
FTC_KERNEL void k_warp_vs_barrier(FtcArgs a) {
    float *out = (float *)a.p[0];
    if (threadIdx.x == 0)
        __syncthreads();
    else
        out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

/* Registered as not synchronising, yet it waits at a barrier. */
FTC_KERNEL void k_fast_barrier(FtcArgs a) {
    int *out = (int *)a.p[0];
    out[threadIdx.x] = 1;
    __syncthreads();
}

/* The low half-warp shuffles with the full warp as the mask, the high half with its own half. */
FTC_KERNEL void k_mask_mismatch(FtcArgs a) {
    float *out = (float *)a.p[0];
    unsigned int mask = threadIdx.x < 16 ? 0xffffffffu : 0xffff0000u;
    out[threadIdx.x] = __shfl_xor_sync(mask, 1.0f, 1);
}

/* A mask that leaves the calling lane out. */
FTC_KERNEL void k_mask_self(FtcArgs a) {
    int *out = (int *)a.p[0];
    out[threadIdx.x] = (int)__ballot_sync(0xfffffffeu, 1);
}

/* Thread 7 of block 1 traps. */
FTC_KERNEL void k_trap(FtcArgs a) {
    int *out = (int *)a.p[0];
    if (blockIdx.x == 1 && threadIdx.x == 7)
        __trap();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

/* An mma in a warp of 16 threads. */
FTC_KERNEL void k_mma_partial(FtcArgs a) {
    float *out = (float *)a.p[0];
    float d0, d1, d2, d3;
    FTC_MMA_16816(d0, d1, d2, d3, 0u, 0u, 0u, 0u, 0u, 0u, 1.0f, 1.0f, 1.0f, 1.0f);
    out[threadIdx.x] = d0 + d1 + d2 + d3;
}

/* ldmatrix with lane 5's row 2 bytes off its 16-byte alignment. */
FTC_KERNEL void k_ldmatrix_misaligned(FtcArgs a) {
    __shared__ __align__(16) unsigned short m[512];
    unsigned int *out = (unsigned int *)a.p[0], r0, r1, r2, r3;
    int l = threadIdx.x;
    const unsigned short *row = m + l * 8 + (l == 5);
    FTC_LDMATRIX_X4(r0, r1, r2, r3, row);
    out[l] = r0 + r1 + r2 + r3;
}

/* cp.async from a source 4 bytes off its alignment. */
FTC_KERNEL void k_cp_async_misaligned(FtcArgs a) {
    __shared__ __align__(16) unsigned char m[16];
    const unsigned char *in = (const unsigned char *)a.p[1];
    FTC_CP_ASYNC_16(m, in + 4);
    FTC_CP_ASYNC_COMMIT();
    FTC_CP_ASYNC_WAIT(0);
    ((unsigned char *)a.p[0])[threadIdx.x] = m[threadIdx.x];
}

/* out[i] = i + 1 over a block, with a barrier. */
FTC_KERNEL void k_ok(FtcArgs a) {
    int *out = (int *)a.p[0];
    __syncthreads();
    out[threadIdx.x] = (int)threadIdx.x + 1;
}

#ifdef FTC_EMU
FTC_EMU_TABLE(
    FTC_EMU_ENTRY(k_deadlock, 1)
    FTC_EMU_ENTRY(k_warp_exited, 1)
    FTC_EMU_ENTRY(k_warp_vs_barrier, 1)
    FTC_EMU_ENTRY(k_fast_barrier, 0)
    FTC_EMU_ENTRY(k_mask_mismatch, 1)
    FTC_EMU_ENTRY(k_mask_self, 1)
    FTC_EMU_ENTRY(k_trap, 0)
    FTC_EMU_ENTRY(k_mma_partial, 1)
    FTC_EMU_ENTRY(k_ldmatrix_misaligned, 1)
    FTC_EMU_ENTRY(k_cp_async_misaligned, 0)
    FTC_EMU_ENTRY(k_ok, 1)
)
#endif
