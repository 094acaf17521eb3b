/* attention.cuh — scaled dot-product attention over q [B, S, H, D] and k, v [B, S, Hkv, D]
 * (grouped queries: query head h reads key head h / (H / Hkv)), optionally causal, saving
 * only the fp32 log-sum-exp per query row [B, H, S] for the backward. One warp a row: the
 * lanes split the head dim, a dot product is a warp sum. The forward makes two passes over
 * the keys (the online max and sum, then the weighted values); the backward runs one
 * launch over query rows (dq) and one over key rows (dk, dv, summing the query rows in
 * order), so nothing is accumulated with atomics and results do not depend on timing.
 * D is at most 256 (8 elements a lane). */

enum { FTC_ATT_LANE = 8 };   /* head-dim elements a lane holds */

/* The lane's slice of row `base` (D elements) into r[]: element lane + 32 k. */
FTC_INLINE void att_load(float *r, const void *p, long long base, int D, int dt) {
    int lane = threadIdx.x % 32;
    for (int k = 0; k < FTC_ATT_LANE; k++) {
        int d = lane + 32 * k;
        r[k] = d < D ? ldf(p, base + d, dt) : 0.0f;
    }
}

FTC_INLINE float att_dot(const float *x, const void *p, long long base, int D, int dt) {
    int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (int k = 0; k < FTC_ATT_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D)
            s += x[k] * ldf(p, base + d, dt);
    }
    return warp_sum(s);
}

/* a.p: o, lse f32, q, k, v.  Warp w of the launch owns query row w = ((b H + h) S + s). */
FTC_INLINE void attn_fwd(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                         int causal, float scale, int dtq, int dtk, int dtv, int dto) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * S)
        return;
    long long s = w % S, h = (w / S) % H, b = w / (S * H), hk = h / (H / Hkv);
    long long qrow = ((b * S + s) * H + h) * D;
    long long T = causal ? s + 1 : S;
    float q[FTC_ATT_LANE], o[FTC_ATT_LANE];
    att_load(q, a.p[2], qrow, D, dtq);
    float mx = -FTC_INF, sum = 0.0f;
    for (long long t = 0; t < T; t++) {
        float sc = att_dot(q, a.p[3], ((b * S + t) * Hkv + hk) * D, D, dtk) * scale;
        if (sc > mx) {
            sum = sum * expf(mx - sc) + 1.0f;
            mx = sc;
        } else {
            sum += expf(sc - mx);
        }
    }
    float lse = mx + logf(sum);
    for (int k = 0; k < FTC_ATT_LANE; k++)
        o[k] = 0.0f;
    for (long long t = 0; t < T; t++) {
        long long kv = ((b * S + t) * Hkv + hk) * D;
        float p = expf(att_dot(q, a.p[3], kv, D, dtk) * scale - lse);
        int lane = threadIdx.x % 32;
        for (int k = 0; k < FTC_ATT_LANE; k++) {
            int d = lane + 32 * k;
            if (d < D)
                o[k] += p * ldf(a.p[4], kv + d, dtv);
        }
    }
    int lane = threadIdx.x % 32;
    for (int k = 0; k < FTC_ATT_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D)
            stf(a.p[0], qrow + d, dto, o[k]);
    }
    if (lane == 0)
        ((float *)a.p[1])[(b * H + h) * S + s] = lse;
}

/* The backward's operands.  a.p: dq, dk, dv, dy, q, k, v, o, lse. */
#define ATT_DQ a.p[0]
#define ATT_DK a.p[1]
#define ATT_DV a.p[2]
#define ATT_DY a.p[3]
#define ATT_Q a.p[4]
#define ATT_K a.p[5]
#define ATT_V a.p[6]
#define ATT_O a.p[7]
#define ATT_LSE ((const float *)a.p[8])

/* Launch 1, a warp a query row: dq = scale sum_t P_t (dy.v_t - dy.o) k_t. */
FTC_INLINE void attn_bwd_dq(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                            int causal, float scale, int dt, int dtd) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * S)
        return;
    int lane = threadIdx.x % 32;
    long long s = w % S, h = (w / S) % H, b = w / (S * H), hk = h / (H / Hkv);
    long long row = ((b * S + s) * H + h) * D;
    long long T = causal ? s + 1 : S;
    float q[FTC_ATT_LANE], dy[FTC_ATT_LANE], dq[FTC_ATT_LANE];
    att_load(q, ATT_Q, row, D, dt);
    att_load(dy, ATT_DY, row, D, dtd);
    float di = att_dot(dy, ATT_O, row, D, dt), lse = ATT_LSE[(b * H + h) * S + s];
    for (int k = 0; k < FTC_ATT_LANE; k++)
        dq[k] = 0.0f;
    for (long long t = 0; t < T; t++) {
        long long kv = ((b * S + t) * Hkv + hk) * D;
        float p = expf(att_dot(q, ATT_K, kv, D, dt) * scale - lse);
        float ds = p * (att_dot(dy, ATT_V, kv, D, dt) - di) * scale;
        for (int k = 0; k < FTC_ATT_LANE; k++) {
            int d = lane + 32 * k;
            if (d < D)
                dq[k] += ds * ldf(ATT_K, kv + d, dt);
        }
    }
    for (int k = 0; k < FTC_ATT_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D)
            stf(ATT_DQ, row + d, dtd, dq[k]);
    }
}

/* Launch 2, a warp a key row (b, hk, t): over the query heads of its group and the query
 * rows that see it, dk = scale sum P (dy.v - dy.o) q and dv = sum P dy. */
FTC_INLINE void attn_bwd_dkv(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                             int causal, float scale, int dt, int dtd) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * Hkv * S)
        return;
    int lane = threadIdx.x % 32;
    long long t = w % S, hk = (w / S) % Hkv, b = w / (S * Hkv), group = H / Hkv;
    long long kv = ((b * S + t) * Hkv + hk) * D;
    float kr[FTC_ATT_LANE], vr[FTC_ATT_LANE], dk[FTC_ATT_LANE], dv[FTC_ATT_LANE];
    att_load(kr, ATT_K, kv, D, dt);
    att_load(vr, ATT_V, kv, D, dt);
    for (int k = 0; k < FTC_ATT_LANE; k++)
        dk[k] = dv[k] = 0.0f;
    for (long long h = hk * group; h < (hk + 1) * group; h++)
        for (long long s = causal ? t : 0; s < S; s++) {
            long long row = ((b * S + s) * H + h) * D;
            float lse = ATT_LSE[(b * H + h) * S + s];
            float p = expf(att_dot(kr, ATT_Q, row, D, dt) * scale - lse);
            float dyv = att_dot(vr, ATT_DY, row, D, dtd);
            float di = 0.0f;
            {
                float part = 0.0f;
                for (int k = 0; k < FTC_ATT_LANE; k++) {
                    int d = lane + 32 * k;
                    if (d < D)
                        part += ldf(ATT_DY, row + d, dtd) * ldf(ATT_O, row + d, dt);
                }
                di = warp_sum(part);
            }
            float ds = p * (dyv - di) * scale;
            for (int k = 0; k < FTC_ATT_LANE; k++) {
                int d = lane + 32 * k;
                if (d < D) {
                    dk[k] += ds * ldf(ATT_Q, row + d, dt);
                    dv[k] += p * ldf(ATT_DY, row + d, dtd);
                }
            }
        }
    for (int k = 0; k < FTC_ATT_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D) {
            stf(ATT_DK, kv + d, dtd, dk[k]);
            stf(ATT_DV, kv + d, dtd, dv[k]);
        }
    }
}
