/* common.cuh — what every kernel template uses: loads and stores by storage dtype
 * (dtype codes are the plan's: 0 f32, 1 bf16, 2 f16, 3 i32, 4 u8), the grid-stride loop,
 * and block- and warp-wide sums with a fixed reduction tree, so a kernel's result does
 * not depend on timing. Every function is FTC_INLINE: with the generator's constant
 * arguments the dtype branches and shapes fold away. */

enum { FTC_F32 = 0, FTC_BF16 = 1, FTC_F16 = 2, FTC_I32 = 3, FTC_U8 = 4 };

/* Element i of p as fp32. */
FTC_INLINE float ldf(const void *p, long long i, int dt) {
    if (dt == FTC_F32)
        return ((const float *)p)[i];
    if (dt == FTC_BF16)
        return ld_bf16((const unsigned short *)p, i);
    if (dt == FTC_F16)
        return ld_f16((const unsigned short *)p, i);
    if (dt == FTC_I32)
        return (float)((const int *)p)[i];
    return (float)((const unsigned char *)p)[i];
}

/* Stores v into element i of p, rounded to the dtype. */
FTC_INLINE void stf(void *p, long long i, int dt, float v) {
    if (dt == FTC_F32)
        ((float *)p)[i] = v;
    else if (dt == FTC_BF16)
        st_bf16((unsigned short *)p, i, v);
    else if (dt == FTC_F16)
        st_f16((unsigned short *)p, i, v);
    else if (dt == FTC_I32)
        ((int *)p)[i] = (int)v;
    else
        ((unsigned char *)p)[i] = (unsigned char)v;
}

/* v rounded to the dtype, as a store and a load would: a fused kernel's intermediate
 * holds what the unfused op would have stored. */
FTC_INLINE float rnd(float v, int dt) {
    if (dt == FTC_BF16)
        return ftc_u2f((unsigned int)f2bf16(v) << 16);
    if (dt == FTC_F16) {
        unsigned short h = f2f16(v);
        return ld_f16(&h, 0);
    }
    return v;
}

/* The index of this thread in a 1-D launch, and the stride of the grid. */
FTC_INLINE long long ftc_gid(void) { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
FTC_INLINE long long ftc_gstride(void) { return (long long)gridDim.x * blockDim.x; }

/* The sum over a warp, every lane receiving it: a butterfly over 5 rounds. */
FTC_INLINE float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

FTC_INLINE float warp_max(float v) {
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum over the block (blockDim.x a multiple of 32, at most 1024), every thread
 * receiving it. `red` is 32 floats of shared memory the caller owns; the barrier at the
 * start lets a caller use the same `red` for consecutive reductions. */
FTC_INLINE float block_sum(float v, float *red) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nwarps ? red[lane] : 0.0f;
    return warp_sum(v);
}

FTC_INLINE float block_max(float v, float *red) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nwarps ? red[lane] : -FTC_INF;
    return warp_max(v);
}
