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

/* Elements [i, i + 8) of p as fp32 (i a multiple of 8, p 16-byte aligned): one 16-byte load
 * of 16-bit elements, two of 32-bit ones, one 8-byte load of bytes. */
FTC_INLINE void ld8(const void *p, long long i, int dt, float v[8]) {
    if (dt == FTC_BF16 || dt == FTC_F16) {
        uint4 w = *(const uint4 *)((const unsigned short *)p + i);
        unsigned int u[4] = {w.x, w.y, w.z, w.w};
        FTC_UNROLL
        for (int k = 0; k < 4; k++) {
            unsigned short h[2] = {(unsigned short)(u[k] & 0xffffu), (unsigned short)(u[k] >> 16)};
            v[2 * k] = dt == FTC_BF16 ? ftc_u2f((unsigned int)h[0] << 16) : ld_f16(h, 0);
            v[2 * k + 1] = dt == FTC_BF16 ? ftc_u2f((unsigned int)h[1] << 16) : ld_f16(h, 1);
        }
    } else if (dt == FTC_F32) {
        float4 a = ((const float4 *)p)[i / 4], b = ((const float4 *)p)[i / 4 + 1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else if (dt == FTC_I32) {
        int4 a = ((const int4 *)p)[i / 4], b = ((const int4 *)p)[i / 4 + 1];
        v[0] = (float)a.x, v[1] = (float)a.y, v[2] = (float)a.z, v[3] = (float)a.w;
        v[4] = (float)b.x, v[5] = (float)b.y, v[6] = (float)b.z, v[7] = (float)b.w;
    } else {
        uint2 w = *(const uint2 *)((const unsigned char *)p + i);
        FTC_UNROLL
        for (int k = 0; k < 4; k++)
            v[k] = (float)((w.x >> (8 * k)) & 0xffu), v[4 + k] = (float)((w.y >> (8 * k)) & 0xffu);
    }
}

/* Stores v[0..8) into elements [i, i + 8) of p, rounded to the dtype, as ld8 loads them. */
FTC_INLINE void st8(void *p, long long i, int dt, const float v[8]) {
    if (dt == FTC_BF16 || dt == FTC_F16) {
        unsigned int u[4];
        FTC_UNROLL
        for (int k = 0; k < 4; k++) {
            unsigned int lo = dt == FTC_BF16 ? f2bf16(v[2 * k]) : f2f16(v[2 * k]);
            unsigned int hi = dt == FTC_BF16 ? f2bf16(v[2 * k + 1]) : f2f16(v[2 * k + 1]);
            u[k] = lo | hi << 16;
        }
        *(uint4 *)((unsigned short *)p + i) = make_uint4(u[0], u[1], u[2], u[3]);
    } else if (dt == FTC_F32) {
        ((float4 *)p)[i / 4] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4 *)p)[i / 4 + 1] = make_float4(v[4], v[5], v[6], v[7]);
    } else if (dt == FTC_I32) {
        ((int4 *)p)[i / 4] = make_int4((int)v[0], (int)v[1], (int)v[2], (int)v[3]);
        ((int4 *)p)[i / 4 + 1] = make_int4((int)v[4], (int)v[5], (int)v[6], (int)v[7]);
    } else {
        unsigned int lo = 0, hi = 0;
        FTC_UNROLL
        for (int k = 0; k < 4; k++)
            lo |= (unsigned int)(unsigned char)v[k] << (8 * k), hi |= (unsigned int)(unsigned char)v[4 + k] << (8 * k);
        *(uint2 *)((unsigned char *)p + i) = make_uint2(lo, hi);
    }
}

/* Eight elements from i (v8: ld8, st8) or one, as a kernel's vector flag says. */
FTC_INLINE void ldn(const void *p, long long i, int dt, int v8, float v[8]) {
    if (v8)
        ld8(p, i, dt, v);
    else
        v[0] = ldf(p, i, dt);
}
FTC_INLINE void stn(void *p, long long i, int dt, int v8, const float v[8]) {
    if (v8)
        st8(p, i, dt, v);
    else
        stf(p, i, dt, v[0]);
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
