/* attention.cuh — scaled dot-product attention over q [B, S, H, D] and k, v [B, S, Hkv, D]
 * (grouped queries: query head h reads key head h / (H / Hkv)), optionally causal, with a
 * sliding window (a query sees the `window` keys ending at itself; not causal, those within
 * window - 1 of it) and soft-capped scores (cap·tanh(s / cap), Gemma 2), saving
 * only the fp32 log-sum-exp per query row [B, H, S] for the backward. With position ids
 * (`docs`: an i32 [B, S] operand after the inputs) a key of another record is masked as
 * well (document masking of packed sequences: a row's record starts at its row less its
 * position). The backward runs
 * one launch over query rows (dq, and dy.o per row into the workspace) and one over key
 * rows (dk, dv, summing the query rows in order), so nothing is accumulated with atomics
 * and results do not depend on timing.
 *
 * Two implementations. With bf16 operands and a head dim that is a multiple of 16 (every
 * shipped model), flash attention on tensor cores: a warp owns 16 rows, products are
 * mma.sync m16n8k16 (bf16 in, fp32 accumulate) over tiles of 16 keys, the softmax is
 * online (a running max and sum per row), probabilities and score gradients go back into
 * the tensor cores rounded to bf16, as FlashAttention-2 does. Otherwise one warp a row:
 * the lanes split the head dim, a dot product is a warp sum (D at most 256). */

enum { FTC_ATT_LANE = 8 };   /* head-dim elements a lane holds */

/* The keys [*t0, *t1) query s sees, and the queries [*s0, *s1) that see key t. */
FTC_INLINE void att_keys(long long s, long long S, int causal, long long window, long long *t0,
                         long long *t1) {
    *t0 = window && s + 1 > window ? s + 1 - window : 0;
    *t1 = causal ? s + 1 : window && s + window < S ? s + window : S;
}
FTC_INLINE void att_queries(long long t, long long S, int causal, long long window, long long *s0,
                            long long *s1) {
    *s0 = causal ? t : window && t + 1 > window ? t + 1 - window : 0;
    *s1 = window && t + window < S ? t + window : S;
}

/* Whether query row r and key row t (both below S) of batch row b are in one record: their
 * rows less their positions agree. Without position ids (pos NULL) every pair is. */
FTC_INLINE bool att_same(const int *pos, long long b, long long S, long long r, long long t) {
    return !pos || t - pos[b * S + t] == r - pos[b * S + r];
}

/* Whether query row r does not see key `key`. */
FTC_INLINE bool att_hidden(long long key, long long r, long long S, int causal, long long window) {
    return key >= S || (causal && key > r) || (window && (r - key >= window || key - r >= window));
}

/* A scaled score through the soft cap (none when cap is 0), and the cap's derivative at it. */
FTC_INLINE float att_cap(float s, float cap) { return cap > 0.0f ? tanhf(s / cap) * cap : s; }
FTC_INLINE float att_through(float capped, float cap) {
    float t = cap > 0.0f ? capped / cap : 0.0f;
    return 1.0f - t * t;
}

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

/* a.p: o, lse f32, q, k, v, [positions].  Warp w of the launch owns query row
 * w = ((b H + h) S + s). */
FTC_INLINE void attn_fwd(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                         int causal, long long window, float cap, float scale, int dtq, int dtk,
                         int dtv, int dto, int docs) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * S)
        return;
    long long s = w % S, h = (w / S) % H, b = w / (S * H), hk = h / (H / Hkv);
    long long qrow = ((b * S + s) * H + h) * D, t0, t1;
    att_keys(s, S, causal, window, &t0, &t1);
    const int *pos = docs ? (const int *)a.p[5] : 0;
    float q[FTC_ATT_LANE], o[FTC_ATT_LANE];
    att_load(q, a.p[2], qrow, D, dtq);
    float mx = -FTC_INF, sum = 0.0f;
    for (long long t = t0; t < t1; t++) {
        if (!att_same(pos, b, S, s, t))   /* the same for every lane of the warp */
            continue;
        float sc = att_cap(att_dot(q, a.p[3], ((b * S + t) * Hkv + hk) * D, D, dtk) * scale, cap);
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
    for (long long t = t0; t < t1; t++) {
        if (!att_same(pos, b, S, s, t))
            continue;
        long long kv = ((b * S + t) * Hkv + hk) * D;
        float p = expf(att_cap(att_dot(q, a.p[3], kv, D, dtk) * scale, cap) - lse);
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

/* The backward's operands.  a.p: dq, dk, dv, dy, q, k, v, o, lse, [positions,] ws. */
#define ATT_DQ a.p[0]
#define ATT_DK a.p[1]
#define ATT_DV a.p[2]
#define ATT_DY a.p[3]
#define ATT_Q a.p[4]
#define ATT_K a.p[5]
#define ATT_V a.p[6]
#define ATT_O a.p[7]
#define ATT_LSE ((const float *)a.p[8])
#define ATT_POS (docs ? (const int *)a.p[9] : 0)
#define ATT_WS a.p[9 + docs]

/* Launch 1, a warp a query row: dq = scale sum_t P_t (dy.v_t - dy.o) k_t. */
FTC_INLINE void attn_bwd_dq(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                            int causal, long long window, float cap, float scale, int dt, int dtd,
                            int docs) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * S)
        return;
    int lane = threadIdx.x % 32;
    long long s = w % S, h = (w / S) % H, b = w / (S * H), hk = h / (H / Hkv);
    long long row = ((b * S + s) * H + h) * D, t0, t1;
    att_keys(s, S, causal, window, &t0, &t1);
    float q[FTC_ATT_LANE], dy[FTC_ATT_LANE], dq[FTC_ATT_LANE];
    att_load(q, ATT_Q, row, D, dt);
    att_load(dy, ATT_DY, row, D, dtd);
    float di = att_dot(dy, ATT_O, row, D, dt), lse = ATT_LSE[(b * H + h) * S + s];
    for (int k = 0; k < FTC_ATT_LANE; k++)
        dq[k] = 0.0f;
    for (long long t = t0; t < t1; t++) {
        if (!att_same(ATT_POS, b, S, s, t))
            continue;
        long long kv = ((b * S + t) * Hkv + hk) * D;
        float sc = att_cap(att_dot(q, ATT_K, kv, D, dt) * scale, cap);
        float p = expf(sc - lse);
        float ds = p * (att_dot(dy, ATT_V, kv, D, dt) - di) * att_through(sc, cap) * scale;
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
                             int causal, long long window, float cap, float scale, int dt, int dtd,
                             int docs) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * Hkv * S)
        return;
    int lane = threadIdx.x % 32;
    long long t = w % S, hk = (w / S) % Hkv, b = w / (S * Hkv), group = H / Hkv;
    long long kv = ((b * S + t) * Hkv + hk) * D, s0, s1;
    att_queries(t, S, causal, window, &s0, &s1);
    float kr[FTC_ATT_LANE], vr[FTC_ATT_LANE], dk[FTC_ATT_LANE], dv[FTC_ATT_LANE];
    att_load(kr, ATT_K, kv, D, dt);
    att_load(vr, ATT_V, kv, D, dt);
    for (int k = 0; k < FTC_ATT_LANE; k++)
        dk[k] = dv[k] = 0.0f;
    for (long long h = hk * group; h < (hk + 1) * group; h++)
        for (long long s = s0; s < s1; s++) {
            if (!att_same(ATT_POS, b, S, s, t))
                continue;
            long long row = ((b * S + s) * H + h) * D;
            float lse = ATT_LSE[(b * H + h) * S + s];
            float sc = att_cap(att_dot(kr, ATT_Q, row, D, dt) * scale, cap);
            float p = expf(sc - lse);
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
            float ds = p * (dyv - di) * att_through(sc, cap) * scale;
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

/* --- Flash attention on tensor cores (bf16, D % 16 == 0, D <= 256). ------------------- */

/* Where row r (clamped to S - 1: rows past the end are loaded, never stored) of head
 * `head` of batch b starts in a [B, S, heads, D] tensor. */
FTC_INLINE long long att_row(long long b, long long S, long long heads, long long head, long long r,
                             int D) {
    return ((b * S + (r < S ? r : S - 1)) * heads + head) * D;
}

/* Two bf16 as one mma register: lo in the low half. */
FTC_INLINE unsigned int att_pack(float lo, float hi) {
    return (unsigned int)f2bf16(lo) | ((unsigned int)f2bf16(hi) << 16);
}

/* Elements i and i+1 of a bf16 array as one mma register. */
FTC_INLINE unsigned int att_ld2(const unsigned short *p, long long i) {
    return (unsigned int)p[i] | ((unsigned int)p[i + 1] << 16);
}

/* Elements i and j of a bf16 array as one mma register. */
FTC_INLINE unsigned int att_ld11(const unsigned short *p, long long i, long long j) {
    return (unsigned int)p[i] | ((unsigned int)p[j] << 16);
}

/* The max and the sum over the four lanes of a quad (the lanes sharing a row of an mma
 * accumulator). */
FTC_INLINE float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
FTC_INLINE float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

#define ATT_MAX_CHUNKS 32   /* D / 8 at most */

/* The accumulator element e (0..3) of 16x8 tile half nh sits at row (e < 2 ? g : g + 8) and
 * column nh * 8 + 2 q + (e & 1), with g = lane / 4 and q = lane % 4. */

/* One warp's 16 x 16 tiles c = x y^T and, when x2 is given, c2 = x2 y2^T, over D columns:
 * the rows of x and x2 at arow[0] (the lane's row g) and arow[1] (g + 8), those of y and
 * y2 at yrow[nh] (the lane's row g of half nh). c[nh] holds 16 x 8 half nh in the layout
 * above. Backward's two products share their rows, and one loop loads each row once. */
FTC_INLINE void att_tiles(float c[2][4], const unsigned short *x, const unsigned short *y,
                          float c2[2][4], const unsigned short *x2, const unsigned short *y2,
                          const long long arow[2], const long long yrow[2], int D, int q) {
    FTC_UNROLL
    for (int nh = 0; nh < 2; nh++)
        FTC_UNROLL
        for (int e = 0; e < 4; e++)
            c[nh][e] = c2[nh][e] = 0.0f;
    for (int kc = 0; kc < D / 16; kc++) {
        int d0 = kc * 16 + 2 * q;
        unsigned int a0 = att_ld2(x, arow[0] + d0), a1 = att_ld2(x, arow[1] + d0);
        unsigned int a2 = att_ld2(x, arow[0] + d0 + 8), a3 = att_ld2(x, arow[1] + d0 + 8);
        unsigned int e0 = 0, e1 = 0, e2 = 0, e3 = 0;
        if (x2) {
            e0 = att_ld2(x2, arow[0] + d0), e1 = att_ld2(x2, arow[1] + d0);
            e2 = att_ld2(x2, arow[0] + d0 + 8), e3 = att_ld2(x2, arow[1] + d0 + 8);
        }
        FTC_UNROLL
        for (int nh = 0; nh < 2; nh++) {
            unsigned int b0 = att_ld2(y, yrow[nh] + d0), b1 = att_ld2(y, yrow[nh] + d0 + 8);
            FTC_MMA_16816(c[nh][0], c[nh][1], c[nh][2], c[nh][3], a0, a1, a2, a3, b0, b1, c[nh][0],
                          c[nh][1], c[nh][2], c[nh][3]);
            if (x2) {
                unsigned int f0 = att_ld2(y2, yrow[nh] + d0), f1 = att_ld2(y2, yrow[nh] + d0 + 8);
                FTC_MMA_16816(c2[nh][0], c2[nh][1], c2[nh][2], c2[nh][3], e0, e1, e2, e3, f0, f1,
                              c2[nh][0], c2[nh][1], c2[nh][2], c2[nh][3]);
            }
        }
    }
}

/* Forward: warp w owns query rows [16 t, 16 t + 16) of (b, h).
 * a.p: o, lse, q, k, v, [positions]. */
FTC_INLINE void attn_fwd_mma(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                             int causal, long long window, float cap, float scale, int docs) {
    const unsigned short *Q = (const unsigned short *)a.p[2], *K = (const unsigned short *)a.p[3];
    const unsigned short *V = (const unsigned short *)a.p[4];
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    long long tiles = (S + 15) / 16, w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * tiles)
        return;
    long long t = w % tiles, h = (w / tiles) % H, b = w / (tiles * H), hk = h / (H / Hkv);
    long long r0 = 16 * t, row[2] = {r0 + g, r0 + g + 8}, qbase[2];
    FTC_UNROLL
    for (int r = 0; r < 2; r++)   /* rows past S clamped for loads; never stored */
        qbase[r] = att_row(b, S, H, h, row[r], D);
    float o[ATT_MAX_CHUNKS][4], m[2] = {-FTC_INF, -FTC_INF}, l[2] = {0.0f, 0.0f};
    FTC_UNROLL
    for (int nc = 0; nc < D / 8; nc++)
        FTC_UNROLL
        for (int e = 0; e < 4; e++)
            o[nc][e] = 0.0f;
    long long kbegin, kend, lastbegin, lastend;   /* the keys rows r0 and r0 + 15 see */
    att_keys(r0, S, causal, window, &kbegin, &lastend);
    att_keys(r0 + 15, S, causal, window, &lastbegin, &kend);
    kend = kend < S ? kend : S;
    for (long long j0 = kbegin; j0 < kend; j0 += 16) {
        float s[2][4], unused[2][4];
        long long kr[2];
        FTC_UNROLL
        for (int nh = 0; nh < 2; nh++)
            kr[nh] = att_row(b, S, Hkv, hk, j0 + nh * 8 + g, D);
        att_tiles(s, Q, K, unused, NULL, NULL, qbase, kr, D, q);
        float mx[2] = {-FTC_INF, -FTC_INF};
        FTC_UNROLL
        for (int nh = 0; nh < 2; nh++)
            FTC_UNROLL
            for (int e = 0; e < 4; e++) {
                long long key = j0 + nh * 8 + 2 * q + (e & 1), r = row[e >> 1];
                float v = att_cap(s[nh][e] * scale, cap);
                if (att_hidden(key, r, S, causal, window) ||
                    !att_same(docs ? (const int *)a.p[5] : 0, b, S, r < S ? r : S - 1, key))
                    v = -FTC_INF;
                s[nh][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float corr[2], sum[2] = {0.0f, 0.0f};
        FTC_UNROLL
        for (int r = 0; r < 2; r++) {
            float mn = fmaxf(m[r], quad_max(mx[r]));
            corr[r] = mn == -FTC_INF ? 1.0f : expf(m[r] - mn);
            m[r] = mn;
        }
        FTC_UNROLL
        for (int nh = 0; nh < 2; nh++)
            FTC_UNROLL
            for (int e = 0; e < 4; e++) {
                float mr = m[e >> 1];
                float p = s[nh][e] == -FTC_INF ? 0.0f : expf(s[nh][e] - mr);
                s[nh][e] = p;
                sum[e >> 1] += p;
            }
        FTC_UNROLL
        for (int r = 0; r < 2; r++)
            l[r] = l[r] * corr[r] + quad_sum(sum[r]);
        unsigned int pa0 = att_pack(s[0][0], s[0][1]), pa1 = att_pack(s[0][2], s[0][3]);
        unsigned int pa2 = att_pack(s[1][0], s[1][1]), pa3 = att_pack(s[1][2], s[1][3]);
        long long k0 = j0 + 2 * q, kk[4] = {k0, k0 + 1, k0 + 8, k0 + 9};
        FTC_UNROLL
        for (int i = 0; i < 4; i++)
            kk[i] = att_row(b, S, Hkv, hk, kk[i], D);
        FTC_UNROLL
        for (int nc = 0; nc < D / 8; nc++) {
            int n = nc * 8 + g;
            unsigned int b0 = att_ld11(V, kk[0] + n, kk[1] + n), b1 = att_ld11(V, kk[2] + n, kk[3] + n);
            o[nc][0] *= corr[0], o[nc][1] *= corr[0], o[nc][2] *= corr[1], o[nc][3] *= corr[1];
            FTC_MMA_16816(o[nc][0], o[nc][1], o[nc][2], o[nc][3], pa0, pa1, pa2, pa3, b0, b1, o[nc][0],
                          o[nc][1], o[nc][2], o[nc][3]);
        }
    }
    FTC_UNROLL
    for (int r = 0; r < 2; r++) {
        if (row[r] >= S)
            continue;
        float inv = 1.0f / l[r];
        long long base = ((b * S + row[r]) * H + h) * D;
        FTC_UNROLL
        for (int nc = 0; nc < D / 8; nc++) {
            st_bf16((unsigned short *)a.p[0], base + nc * 8 + 2 * q, o[nc][2 * r] * inv);
            st_bf16((unsigned short *)a.p[0], base + nc * 8 + 2 * q + 1, o[nc][2 * r + 1] * inv);
        }
        if (q == 0)
            ((float *)a.p[1])[(b * H + h) * S + row[r]] = m[r] + logf(l[r]);
    }
}

/* Backward, launch 1: warp w owns query rows [16 t, 16 t + 16) of (b, h): Di = dy.o per row
 * (kept in the workspace for launch 2), and dq = scale sum_keys P (dy.v - Di) k.
 * a.p: dq, dk, dv, dy, q, k, v, o, lse, [positions,] ws (Di, f32 [B, H, S]). */
FTC_INLINE void attn_bwd_dq_mma(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                int D, int causal, long long window, float cap, float scale, int docs) {
    const unsigned short *Q = (const unsigned short *)ATT_Q, *K = (const unsigned short *)ATT_K;
    const unsigned short *V = (const unsigned short *)ATT_V, *DY = (const unsigned short *)ATT_DY;
    const unsigned short *O = (const unsigned short *)ATT_O;
    float *DI = (float *)ATT_WS;
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    long long tiles = (S + 15) / 16, w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * tiles)
        return;
    long long t = w % tiles, h = (w / tiles) % H, b = w / (tiles * H), hk = h / (H / Hkv);
    long long r0 = 16 * t, row[2] = {r0 + g, r0 + g + 8}, base[2];
    float di[2], lse[2];
    FTC_UNROLL
    for (int r = 0; r < 2; r++) {
        long long rc = row[r] < S ? row[r] : S - 1;
        base[r] = ((b * S + rc) * H + h) * D;
        float part = 0.0f;
        for (int d = q; d < D; d += 4)
            part += ld_bf16(DY, base[r] + d) * ld_bf16(O, base[r] + d);
        di[r] = quad_sum(part);
        lse[r] = ATT_LSE[(b * H + h) * S + rc];
        if (q == 0 && row[r] < S)
            DI[(b * H + h) * S + row[r]] = di[r];
    }
    float dq[ATT_MAX_CHUNKS][4];
    FTC_UNROLL
    for (int nc = 0; nc < D / 8; nc++)
        FTC_UNROLL
        for (int e = 0; e < 4; e++)
            dq[nc][e] = 0.0f;
    long long kbegin, kend, lastbegin, lastend;
    att_keys(r0, S, causal, window, &kbegin, &lastend);
    att_keys(r0 + 15, S, causal, window, &lastbegin, &kend);
    kend = kend < S ? kend : S;
    for (long long j0 = kbegin; j0 < kend; j0 += 16) {
        float s[2][4], dp[2][4];
        long long kr[2];
        FTC_UNROLL
        for (int nh = 0; nh < 2; nh++)
            kr[nh] = att_row(b, S, Hkv, hk, j0 + nh * 8 + g, D);
        att_tiles(s, Q, K, dp, DY, V, base, kr, D, q);   /* S = q k^T, dP = dy v^T */
        FTC_UNROLL
        for (int nh = 0; nh < 2; nh++)
            FTC_UNROLL
            for (int e = 0; e < 4; e++) {
                long long key = j0 + nh * 8 + 2 * q + (e & 1), r = row[e >> 1];
                float sc = att_cap(s[nh][e] * scale, cap);
                bool hidden = att_hidden(key, r, S, causal, window) ||
                              !att_same(ATT_POS, b, S, r < S ? r : S - 1, key);
                float p = hidden ? 0.0f : expf(sc - lse[e >> 1]);
                s[nh][e] = p * (dp[nh][e] - di[e >> 1]) * att_through(sc, cap) * scale;   /* dS */
            }
        unsigned int sa0 = att_pack(s[0][0], s[0][1]), sa1 = att_pack(s[0][2], s[0][3]);
        unsigned int sa2 = att_pack(s[1][0], s[1][1]), sa3 = att_pack(s[1][2], s[1][3]);
        long long k0 = j0 + 2 * q, kk[4] = {k0, k0 + 1, k0 + 8, k0 + 9};
        FTC_UNROLL
        for (int i = 0; i < 4; i++)
            kk[i] = att_row(b, S, Hkv, hk, kk[i], D);
        FTC_UNROLL
        for (int nc = 0; nc < D / 8; nc++) {
            int n = nc * 8 + g;
            unsigned int b0 = att_ld11(K, kk[0] + n, kk[1] + n), b1 = att_ld11(K, kk[2] + n, kk[3] + n);
            FTC_MMA_16816(dq[nc][0], dq[nc][1], dq[nc][2], dq[nc][3], sa0, sa1, sa2, sa3, b0, b1,
                          dq[nc][0], dq[nc][1], dq[nc][2], dq[nc][3]);
        }
    }
    FTC_UNROLL
    for (int r = 0; r < 2; r++) {
        if (row[r] >= S)
            continue;
        FTC_UNROLL
        for (int nc = 0; nc < D / 8; nc++) {
            st_bf16((unsigned short *)ATT_DQ, base[r] + nc * 8 + 2 * q, dq[nc][2 * r]);
            st_bf16((unsigned short *)ATT_DQ, base[r] + nc * 8 + 2 * q + 1, dq[nc][2 * r + 1]);
        }
    }
}

/* Past 128 columns the dk and dv accumulators of a warp would not fit in registers beside
 * the products over D: the dk/dv launch then gives each key tile several warps, each owning
 * at most 64 of the columns (and each computing S^T and dP^T whole), as few as divide D in
 * 8-column chunks. cuda_ops.c sizes the launch by the same rule. */
#define ATT_DKV_COLS 128
FTC_INLINE int att_dkv_split(int D) {
    int most = D <= ATT_DKV_COLS ? ATT_DKV_COLS : ATT_DKV_COLS / 2, s = 1;
    while (D / s > most || (D / 8) % s)
        s++;
    return s;
}

/* Backward, launch 2: warp w owns key rows [16 t, 16 t + 16) of (b, hk), columns
 * [c0, c0 + D / split) of dk and dv; over the query heads of its group and the query
 * tiles that see them: S^T = k q^T, P^T, dP^T = v dy^T, dS^T = P^T (dP^T - Di) scale;
 * dv += P^T dy, dk += dS^T q. */
FTC_INLINE void attn_bwd_dkv_mma(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                 int D, int causal, long long window, float cap, float scale,
                                 int docs) {
    const unsigned short *Q = (const unsigned short *)ATT_Q, *K = (const unsigned short *)ATT_K;
    const unsigned short *V = (const unsigned short *)ATT_V, *DY = (const unsigned short *)ATT_DY;
    const float *DI = (const float *)ATT_WS;
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    int split = att_dkv_split(D), cw = D / split;
    long long tiles = (S + 15) / 16, w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * Hkv * tiles * split)
        return;
    int c0 = (int)(w % split) * cw;
    w /= split;
    long long t = w % tiles, hk = (w / tiles) % Hkv, b = w / (tiles * Hkv), group = H / Hkv;
    long long k0 = 16 * t, key[2] = {k0 + g, k0 + g + 8}, kbase[2];
    FTC_UNROLL
    for (int r = 0; r < 2; r++)
        kbase[r] = att_row(b, S, Hkv, hk, key[r], D);
    float dk[ATT_DKV_COLS / 8][4], dv[ATT_DKV_COLS / 8][4];
    FTC_UNROLL
    for (int nc = 0; nc < cw / 8; nc++)
        FTC_UNROLL
        for (int e = 0; e < 4; e++)
            dk[nc][e] = dv[nc][e] = 0.0f;
    long long qbegin, qend, lastbegin, lastend;   /* the queries keys k0 and k0 + 15 are seen by */
    att_queries(k0, S, causal, window, &qbegin, &lastend);
    att_queries(k0 + 15, S, causal, window, &lastbegin, &qend);
    qend = qend < S ? qend : S;
    for (long long h = hk * group; h < (hk + 1) * group; h++)
        for (long long i0 = qbegin; i0 < qend; i0 += 16) {
            float s[2][4], dp[2][4];
            long long qb[2];
            FTC_UNROLL
            for (int nh = 0; nh < 2; nh++)
                qb[nh] = att_row(b, S, H, h, i0 + nh * 8 + g, D);
            att_tiles(s, K, Q, dp, V, DY, kbase, qb, D, q);   /* S^T = k q^T, dP^T = v dy^T */
            FTC_UNROLL
            for (int nh = 0; nh < 2; nh++)
                FTC_UNROLL
                for (int e = 0; e < 4; e++) {
                    long long qr = i0 + nh * 8 + 2 * q + (e & 1), kr = key[e >> 1];
                    /* att_hidden written out: the inlined call costs this kernel registers */
                    bool hidden = qr >= S || kr >= S || (causal && kr > qr) ||
                                  (window && (qr - kr >= window || kr - qr >= window)) ||
                                  !att_same(ATT_POS, b, S, qr, kr);
                    long long stat = (b * H + h) * S + (qr < S ? qr : S - 1);
                    float sc = att_cap(s[nh][e] * scale, cap);
                    float p = hidden ? 0.0f : expf(sc - ATT_LSE[stat]);
                    s[nh][e] = p;
                    dp[nh][e] = p * (dp[nh][e] - DI[stat]) * att_through(sc, cap) * scale;   /* dS^T */
                }
            unsigned int pa0 = att_pack(s[0][0], s[0][1]), pa1 = att_pack(s[0][2], s[0][3]);
            unsigned int pa2 = att_pack(s[1][0], s[1][1]), pa3 = att_pack(s[1][2], s[1][3]);
            unsigned int sa0 = att_pack(dp[0][0], dp[0][1]), sa1 = att_pack(dp[0][2], dp[0][3]);
            unsigned int sa2 = att_pack(dp[1][0], dp[1][1]), sa3 = att_pack(dp[1][2], dp[1][3]);
            long long q0 = i0 + 2 * q, qq[4] = {q0, q0 + 1, q0 + 8, q0 + 9};
            FTC_UNROLL
            for (int i = 0; i < 4; i++)
                qq[i] = att_row(b, S, H, h, qq[i], D);
            FTC_UNROLL
            for (int nc = 0; nc < cw / 8; nc++) {
                int n = c0 + nc * 8 + g;
                unsigned int y0 = att_ld11(DY, qq[0] + n, qq[1] + n), y1 = att_ld11(DY, qq[2] + n, qq[3] + n);
                FTC_MMA_16816(dv[nc][0], dv[nc][1], dv[nc][2], dv[nc][3], pa0, pa1, pa2, pa3, y0, y1,
                              dv[nc][0], dv[nc][1], dv[nc][2], dv[nc][3]);
                unsigned int x0 = att_ld11(Q, qq[0] + n, qq[1] + n), x1 = att_ld11(Q, qq[2] + n, qq[3] + n);
                FTC_MMA_16816(dk[nc][0], dk[nc][1], dk[nc][2], dk[nc][3], sa0, sa1, sa2, sa3, x0, x1,
                              dk[nc][0], dk[nc][1], dk[nc][2], dk[nc][3]);
            }
        }
    FTC_UNROLL
    for (int r = 0; r < 2; r++) {
        if (key[r] >= S)
            continue;
        FTC_UNROLL
        for (int nc = 0; nc < cw / 8; nc++)
            FTC_UNROLL
            for (int j = 0; j < 2; j++) {
                long long at = kbase[r] + c0 + nc * 8 + 2 * q + j;
                st_bf16((unsigned short *)ATT_DK, at, dk[nc][2 * r + j]);
                st_bf16((unsigned short *)ATT_DV, at, dv[nc][2 * r + j]);
            }
    }
}

/* --- What a kernel calls: tensor cores when the operands allow. ---------------------- */

FTC_INLINE int att_mma(int D, int dt) { return dt == FTC_BF16 && D % 16 == 0 && D <= 8 * ATT_MAX_CHUNKS; }

FTC_INLINE void attention_fwd(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                              int causal, long long window, float cap, float scale, int dtq, int dtk,
                              int dtv, int dto, int docs) {
    if (att_mma(D, dtq) && dtk == FTC_BF16 && dtv == FTC_BF16 && dto == FTC_BF16)
        attn_fwd_mma(a, B, S, H, Hkv, D, causal, window, cap, scale, docs);
    else
        attn_fwd(a, B, S, H, Hkv, D, causal, window, cap, scale, dtq, dtk, dtv, dto, docs);
}

FTC_INLINE void attention_bwd_dq(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                 int D, int causal, long long window, float cap, float scale, int dt,
                                 int dtd, int docs) {
    if (att_mma(D, dt) && dtd == FTC_BF16)
        attn_bwd_dq_mma(a, B, S, H, Hkv, D, causal, window, cap, scale, docs);
    else
        attn_bwd_dq(a, B, S, H, Hkv, D, causal, window, cap, scale, dt, dtd, docs);
}

FTC_INLINE void attention_bwd_dkv(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                  int D, int causal, long long window, float cap, float scale, int dt,
                                  int dtd, int docs) {
    if (att_mma(D, dt) && dtd == FTC_BF16)
        attn_bwd_dkv_mma(a, B, S, H, Hkv, D, causal, window, cap, scale, docs);
    else
        attn_bwd_dkv(a, B, S, H, Hkv, D, causal, window, cap, scale, dt, dtd, docs);
}
