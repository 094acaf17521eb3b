/* decode.cuh — the decode step's attention (ftc generate): one new token's query over its
 * layer's KV cache. k and v [B, 1, Hkv, D] go into the caches [B, L, Hkv, D] at row pos[b];
 * query head h [B, 1, H, D] attends to rows t0..pos[b] (causal; with a window the `window`
 * rows ending there), GQA's head h reading key head h / (H / Hkv).
 *
 * A warp a query head (w = b H + h), the lanes splitting the head dim as attention.cuh's
 * warp-a-row forward does, with its arithmetic: row pos[b] of a forward over the same keys
 * gives the same values. The new row is read from k and v themselves, never from the
 * cache another warp is writing, and only the first query head of each group writes it,
 * so no warp waits for another. Positions are the runtime's, kept below L. */

/* a.p: o, k cache, v cache, q, k, v, pos i32 [B]. */
FTC_INLINE void attention_decode(FtcArgs a, long long B, long long L, long long H, long long Hkv, int D,
                                 long long window, float cap, float scale, int dtq, int dtc, int dto) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H)
        return;
    long long h = w % H, b = w / H, hk = h / (H / Hkv), p = ((const int *)a.p[6])[b];
    if (p < 0 || p >= L)
        return;
    int lane = threadIdx.x % 32;
    long long knew = (b * Hkv + hk) * D, row = ((b * L + p) * Hkv + hk) * D;
    if (h % (H / Hkv) == 0)   /* the group's first head writes the new row */
        for (int d = lane; d < D; d += 32) {
            stf(a.p[1], row + d, dtc, ldf(a.p[4], knew + d, dtc));
            stf(a.p[2], row + d, dtc, ldf(a.p[5], knew + d, dtc));
        }
    long long t0 = window && p + 1 > window ? p + 1 - window : 0;
    float q[FTC_ATT_LANE], o[FTC_ATT_LANE];
    att_load(q, a.p[3], (b * H + h) * D, D, dtq);
    float mx = -FTC_INF, sum = 0.0f;
    for (long long t = t0; t <= p; t++) {
        const void *kp = t == p ? a.p[4] : a.p[1];
        long long at = t == p ? knew : ((b * L + t) * Hkv + hk) * D;
        att_online(att_cap(att_dot(q, kp, at, D, dtc) * scale, cap), &mx, &sum);
    }
    float lse = mx + logf(sum);
    for (int k = 0; k < FTC_ATT_LANE; k++)
        o[k] = 0.0f;
    for (long long t = t0; t <= p; t++) {
        const void *kp = t == p ? a.p[4] : a.p[1], *vp = t == p ? a.p[5] : a.p[2];
        long long at = t == p ? knew : ((b * L + t) * Hkv + hk) * D;
        float pr = expf(att_cap(att_dot(q, kp, at, D, dtc) * scale, cap) - lse);
        for (int k = 0; k < FTC_ATT_LANE; k++) {
            int d = lane + 32 * k;
            if (d < D)
                o[k] += pr * ldf(vp, at + d, dtc);
        }
    }
    for (int k = 0; k < FTC_ATT_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D)
            stf(a.p[0], (b * H + h) * D + d, dto, o[k]);
    }
}
