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

/* One more score into a running softmax: its maximum *mx and its sum of exp(s - *mx). */
FTC_INLINE void att_online(float sc, float *mx, float *sum) {
    if (sc > *mx) {
        *sum = *sum * expf(*mx - sc) + 1.0f;
        *mx = sc;
    } else {
        *sum += expf(sc - *mx);
    }
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
        att_online(att_cap(att_dot(q, a.p[3], ((b * S + t) * Hkv + hk) * D, D, dtk) * scale, cap), &mx, &sum);
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

/* --- Tiled flash attention on tensor cores (bf16; runtime/ops.h's op_attention_tiled). ------
 *
 * FlashAttention-2's shape. Forward: a block of four warps owns 64 query rows of one (b, h),
 * warp w rows 16w..16w+15. Its Q tile, and each tile of BC keys (64; 32 past 128 columns) of
 * K and V, come into shared memory by cp.async, K and V one buffer each, their loads
 * interleaved with the products that do not read them (V's while S = Q K^T runs, the next
 * K's while O += P V runs). Products are mma.sync m16n8k16 fed by ldmatrix (.trans where the
 * operand is stored k-major: V, and in the backward dy, Q and K); the softmax is online, in
 * base 2 with the scale and log2(e) folded into one multiply; the mask is applied only on
 * tiles some key of which some row of the warp does not see. Blocks take the query tiles from
 * the last (under a causal mask the most keys) to the first. K and V are read at their own
 * head, h / (H / Hkv): GQA copies nothing. Staged rows are D + 8 elements apart, so that the
 * eight rows an ldmatrix phase reads fall in different banks.
 *
 * Backward, three launches. pre: per query row Di = dy.o, and the dq accumulator and the
 * tile counters zeroed. main: a block of eight warps per (b, h, tile of keys) stages its K and
 * V once, then, over the query tiles that see them from the last to the first, stages Q, dy,
 * lse and Di; S = Q K^T and dP = dy V^T (warps over rows x keys); P and dS = P (dP - Di) scale
 * into shared memory in bf16 (as FlashAttention-2); dV += P^T dy and dK += dS^T Q (warps over
 * keys x columns, in registers across the tiles); dq += dS K (warps over rows x columns),
 * added into the fp32 accumulator: five products a tile, each once. post: dq rounded to bf16,
 * and with GQA each key head's dK and dV summed over its query heads' fp32 partials in head
 * order.
 *
 * Determinism: a query tile's dq takes one addition from each tile of keys that sees it, in a
 * fixed order, counted by a counter per (b, h, query tile); a block adds when the count is its
 * turn. Its additions are reductions (atomicAdd with the result unused: red.add, issued
 * without awaiting a reply), which its fence orders before the counter moves. The order is
 * chosen so that each addition's turn has come by the time the block gets there:
 *   - causal: block x holds key tile n = tiles - 1 - x (the last keys first) and takes the
 *     query tiles from its own (n, on the diagonal) up; query tile m takes its additions
 *     from key tile m down, n's turn being m - n. At step j key tile n adds to tile n + j,
 *     whose previous addition key tile n + 1 made at its step j - 1: one block a tile a step,
 *     a block waiting on none that is at its own step. (In key order, every block of a
 *     (b, h) reached the same query tile at the same step and they added one after another,
 *     a chain of fences 32 long at Qwen2-7B's shapes: 1573 us on an H200, 0.29x torch's
 *     flash SDPA.)
 *   - otherwise: block x holds key tile x and takes the query tiles from the last down;
 *     query tile m takes its additions in key order from the first tile that sees it.
 * Either way a block waits only on blocks of lower index, which run or have run, since blocks
 * start in the order of their index. Under the emu blocks run in that order, and a block that
 * would have to wait is a fault. */

enum { ATT_BR = 64, ATT_WARPS_BWD = 8 };
#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

/* Keys a forward tile holds, and the tiles of the backward (query rows = keys). */
FTC_INLINE int att_bc(int D) { return D <= 128 ? 64 : 32; }
/* A staged row's stride (16 bytes of padding). */
FTC_INLINE int att_ld(int D) { return D + 8; }
/* Dynamic shared memory: forward Q, K, V; backward K, V, Q, dy, then P and dS (rows of
 * tile + 8), then lse and Di per query row. cuda_ops.c gives the launches as much. */
FTC_INLINE int att_fwd_smem(int D) { return (ATT_BR + 2 * att_bc(D)) * att_ld(D) * 2; }
FTC_INLINE int att_bwd_smem(int D) {
    int t = att_bc(D);
    return 4 * t * att_ld(D) * 2 + 2 * t * (t + 8) * 2 + 2 * t * 4;
}

/* Where row r (clamped to S - 1: rows past the end are loaded, never stored) of head `head` of
 * batch b starts in a [B, S, heads, D] tensor. */
FTC_INLINE long long att_row(long long b, long long S, long long heads, long long head, long long r,
                             int D) {
    return ((b * S + (r < S ? r : S - 1)) * heads + head) * D;
}

/* Two floats as one bf16x2 register: lo in the low half. */
FTC_INLINE unsigned int att_pack(float lo, float hi) {
    return (unsigned int)f2bf16(lo) | ((unsigned int)f2bf16(hi) << 16);
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

/* Stages rows [r0, r0 + n) (clamped to S - 1) of head `head` of a [B, S, heads, D] bf16 tensor
 * into `tile` (rows ld apart) by cp.async, 16 bytes a copy, the block's threads striding. */
FTC_INLINE void att_stage(unsigned short *tile, int ld, const unsigned short *x, long long b,
                          long long S, long long heads, long long head, long long r0, int n, int D) {
    int chunks = D / 8;
    for (int c = (int)threadIdx.x; c < n * chunks; c += (int)blockDim.x) {
        int r = c / chunks, k = c % chunks;
        FTC_CP_ASYNC_16(tile + r * ld + k * 8, x + att_row(b, S, heads, head, r0 + r, D) + k * 8);
    }
}

/* The 16 x 16 A operand at rows r0, columns k0 of a matrix staged row-major (trans 0) or as
 * its transpose (trans 1: the element (row, k) at [k][row]). */
FTC_INLINE void att_frag_a(unsigned int a[4], const unsigned short *A, int lda, int trans, int r0,
                           int k0) {
    int lane = (int)threadIdx.x % 32, j = lane / 8, r = lane % 8;
    if (trans) {
        const unsigned short *p = A + (k0 + (j / 2) * 8 + r) * lda + r0 + (j % 2) * 8;
        FTC_LDMATRIX_X4_T(a[0], a[1], a[2], a[3], p);
    } else {
        const unsigned short *p = A + (r0 + (j % 2) * 8 + r) * lda + k0 + (j / 2) * 8;
        FTC_LDMATRIX_X4(a[0], a[1], a[2], a[3], p);
    }
}

/* The B operands (16 x 8, k x n) at columns c0 and c0 + 8, rows k0, of a matrix staged as
 * [n][k] (trans 0) or [k][n] (trans 1): b[0], b[1] the first, b[2], b[3] the second. */
FTC_INLINE void att_frag_b2(unsigned int b[4], const unsigned short *Bm, int ldb, int trans, int c0,
                            int k0) {
    int lane = (int)threadIdx.x % 32, j = lane / 8, r = lane % 8;
    if (trans) {
        const unsigned short *p = Bm + (k0 + (j % 2) * 8 + r) * ldb + c0 + (j / 2) * 8;
        FTC_LDMATRIX_X4_T(b[0], b[1], b[2], b[3], p);
    } else {
        const unsigned short *p = Bm + (c0 + (j / 2) * 8 + r) * ldb + k0 + (j % 2) * 8;
        FTC_LDMATRIX_X4(b[0], b[1], b[2], b[3], p);
    }
}

/* The same for one 16 x 8 B operand at column c0 (lanes 16-31 repeat 0-15's addresses). */
FTC_INLINE void att_frag_b1(unsigned int b[2], const unsigned short *Bm, int ldb, int trans, int c0,
                            int k0) {
    int lane = (int)threadIdx.x % 32, j = (lane / 8) % 2, r = lane % 8;
    if (trans) {
        const unsigned short *p = Bm + (k0 + j * 8 + r) * ldb + c0;
        FTC_LDMATRIX_X2_T(b[0], b[1], p);
    } else {
        const unsigned short *p = Bm + (c0 + r) * ldb + k0 + j * 8;
        FTC_LDMATRIX_X2(b[0], b[1], p);
    }
}

/* One warp's acc[t] (t < nt: the 16 x 8 accumulator tiles at columns c0 + 8t) += A B over
 * k in [0, K), K % 16 == 0: A's rows r0..r0+15 staged as att_frag_a says (at), B's columns
 * as att_frag_b2 says (bt). The accumulator element e of a tile sits at row g + 8 (e / 2),
 * column 2q + (e % 2), with g = lane / 4 and q = lane % 4. */
FTC_INLINE void att_product(float acc[][4], int nt, const unsigned short *A, int lda, int at, int r0,
                            const unsigned short *Bm, int ldb, int bt, int c0, int K) {
    for (int k0 = 0; k0 < K; k0 += 16) {
        unsigned int a[4];
        att_frag_a(a, A, lda, at, r0, k0);
        FTC_UNROLL
        for (int t = 0; t + 1 < nt; t += 2) {
            unsigned int b[4];
            att_frag_b2(b, Bm, ldb, bt, c0 + 8 * t, k0);
            FTC_MMA_16816(acc[t][0], acc[t][1], acc[t][2], acc[t][3], a[0], a[1], a[2], a[3], b[0],
                          b[1], acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
            FTC_MMA_16816(acc[t + 1][0], acc[t + 1][1], acc[t + 1][2], acc[t + 1][3], a[0], a[1],
                          a[2], a[3], b[2], b[3], acc[t + 1][0], acc[t + 1][1], acc[t + 1][2],
                          acc[t + 1][3]);
        }
        if (nt % 2) {
            unsigned int b[2];
            att_frag_b1(b, Bm, ldb, bt, c0 + 8 * (nt - 1), k0);
            FTC_MMA_16816(acc[nt - 1][0], acc[nt - 1][1], acc[nt - 1][2], acc[nt - 1][3], a[0], a[1],
                          a[2], a[3], b[0], b[1], acc[nt - 1][0], acc[nt - 1][1], acc[nt - 1][2],
                          acc[nt - 1][3]);
        }
    }
}

/* Whether every row in [r, r + rows) sees every key in [t, t + keys) (mask or not aside from
 * the keys past S, which the caller checks). */
FTC_INLINE bool att_all_seen(long long r, int rows, long long t, int keys, int causal, long long window) {
    long long far = r + rows - 1 - t, ahead = t + keys - 1 - r;   /* the longest distances */
    return (!causal || ahead <= 0) && (!window || (far < window && (causal || ahead < window)));
}

/* Forward. a.p: o, lse (f32 [B, H, S], natural log), q, k, v, [positions]. A block of 128
 * threads a (b, h, tile of 64 query rows): grid (S / 64, H, B). */
FTC_INLINE void attn_fwd_tiled(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                               int causal, long long window, float cap, float scale, int docs) {
    FTC_DYN_SMEM(att_smem, att_fwd_smem(D));
    int bc = att_bc(D), ld = att_ld(D);
    unsigned short *sq = (unsigned short *)att_smem, *sk = sq + ATT_BR * ld, *sv = sk + bc * ld;
    const unsigned short *Q = (const unsigned short *)a.p[2], *K = (const unsigned short *)a.p[3];
    const unsigned short *V = (const unsigned short *)a.p[4];
    const int *pos = docs ? (const int *)a.p[5] : 0;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, q = lane % 4;
    long long tiles = (S + ATT_BR - 1) / ATT_BR, m = tiles - 1 - (long long)blockIdx.x;
    long long h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv), r0 = m * ATT_BR, wr = r0 + warp * 16;
    long long first, last, unused;   /* the keys the block's first and last rows see */
    att_keys(r0, S, causal, window, &first, &unused);
    att_keys(r0 + ATT_BR - 1 < S ? r0 + ATT_BR - 1 : S - 1, S, causal, window, &unused, &last);
    long long j0 = first / bc * bc;
    att_stage(sq, ld, Q, b, S, H, h, r0, ATT_BR, D);
    att_stage(sk, ld, K, b, S, Hkv, hk, j0, bc, D);
    FTC_CP_ASYNC_COMMIT();
    /* cap: scores to cap·tanh(s scale / cap), then base 2; else s (scale log2 e) at once */
    float sl = cap > 0.0f ? scale : scale * ATT_LOG2E;
    float o[ATT_MAX_CHUNKS][4], mrow[2] = {-FTC_INF, -FTC_INF}, lrow[2] = {0.0f, 0.0f};
    FTC_UNROLL
    for (int nc = 0; nc < D / 8; nc++)
        FTC_UNROLL
        for (int e = 0; e < 4; e++)
            o[nc][e] = 0.0f;
    for (; j0 < last; j0 += bc) {
        FTC_CP_ASYNC_WAIT(0);   /* K (and Q) here; every warp done with the last V */
        __syncthreads();
        att_stage(sv, ld, V, b, S, Hkv, hk, j0, bc, D);
        FTC_CP_ASYNC_COMMIT();
        float s[8][4];
        FTC_UNROLL
        for (int t = 0; t < bc / 8; t++)
            FTC_UNROLL
            for (int e = 0; e < 4; e++)
                s[t][e] = 0.0f;
        att_product(s, bc / 8, sq, ld, 0, warp * 16, sk, ld, 0, 0, D);
        bool masked = docs || j0 + bc > S || !att_all_seen(wr, 16, j0, bc, causal, window);
        float mx[2] = {-FTC_INF, -FTC_INF};
        FTC_UNROLL
        for (int t = 0; t < bc / 8; t++)
            FTC_UNROLL
            for (int e = 0; e < 4; e++) {
                float v = cap > 0.0f ? att_cap(s[t][e] * sl, cap) * ATT_LOG2E : s[t][e] * sl;
                if (masked) {
                    long long key = j0 + 8 * t + 2 * q + (e & 1), r = wr + g + 8 * (e >> 1);
                    if (att_hidden(key, r, S, causal, window) || !att_same(pos, b, S, r < S ? r : S - 1, key))
                        v = -FTC_INF;
                }
                s[t][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float corr[2];
        FTC_UNROLL
        for (int r = 0; r < 2; r++) {
            float mn = fmaxf(mrow[r], quad_max(mx[r]));
            corr[r] = mn == -FTC_INF ? 1.0f : exp2f(mrow[r] - mn);
            mrow[r] = mn;
            lrow[r] *= corr[r];
        }
        unsigned int pa[4][4];   /* P, the A operand of O += P V, 16 keys a step */
        FTC_UNROLL
        for (int t = 0; t < bc / 8; t++) {
            float p[4];
            FTC_UNROLL
            for (int e = 0; e < 4; e++) {
                p[e] = s[t][e] == -FTC_INF ? 0.0f : exp2f(s[t][e] - mrow[e >> 1]);
                lrow[e >> 1] += p[e];
            }
            pa[t / 2][2 * (t % 2)] = att_pack(p[0], p[1]);
            pa[t / 2][2 * (t % 2) + 1] = att_pack(p[2], p[3]);
        }
        FTC_CP_ASYNC_WAIT(0);   /* V here; every warp done with K */
        __syncthreads();
        if (j0 + bc < last) {
            att_stage(sk, ld, K, b, S, Hkv, hk, j0 + bc, bc, D);
            FTC_CP_ASYNC_COMMIT();
        }
        FTC_UNROLL
        for (int nc = 0; nc < D / 8; nc++)
            o[nc][0] *= corr[0], o[nc][1] *= corr[0], o[nc][2] *= corr[1], o[nc][3] *= corr[1];
        FTC_UNROLL
        for (int kc = 0; kc < bc / 16; kc++)
            FTC_UNROLL
            for (int nc = 0; nc < D / 8; nc += 2) {
                unsigned int bb[4];
                att_frag_b2(bb, sv, ld, 1, nc * 8, kc * 16);
                FTC_MMA_16816(o[nc][0], o[nc][1], o[nc][2], o[nc][3], pa[kc][0], pa[kc][1], pa[kc][2],
                              pa[kc][3], bb[0], bb[1], o[nc][0], o[nc][1], o[nc][2], o[nc][3]);
                FTC_MMA_16816(o[nc + 1][0], o[nc + 1][1], o[nc + 1][2], o[nc + 1][3], pa[kc][0],
                              pa[kc][1], pa[kc][2], pa[kc][3], bb[2], bb[3], o[nc + 1][0],
                              o[nc + 1][1], o[nc + 1][2], o[nc + 1][3]);
            }
    }
    FTC_UNROLL
    for (int r = 0; r < 2; r++) {
        float l = quad_sum(lrow[r]);
        long long row = wr + g + 8 * r;
        if (row >= S)
            continue;
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        unsigned short *out = (unsigned short *)a.p[0] + ((b * S + row) * H + h) * D + 2 * q;
        FTC_UNROLL
        for (int nc = 0; nc < D / 8; nc++)
            *(unsigned int *)(out + nc * 8) = att_pack(o[nc][2 * r] * inv, o[nc][2 * r + 1] * inv);
        if (q == 0)
            ((float *)a.p[1])[(b * H + h) * S + row] = l > 0.0f ? (mrow[r] + log2f(l)) * ATT_LN2 : -FTC_INF;
    }
}

/* The backward's workspace parts (runtime/ops.h's op_attention_bwd_layout; the offsets are
 * the kernels' constants). */
#define ATT_DI ((float *)ATT_WS)
#define ATT_DQACC ((float *)((char *)ATT_WS + off_dq))
#define ATT_COUNT ((int *)((char *)ATT_WS + off_count))

/* Backward pre: a warp a query row (b, h, s): Di = dy.o, its row of the dq accumulator and, on
 * a tile's first row, the tile's counter zeroed. */
FTC_INLINE void attn_bwd_pre_tiled(FtcArgs a, long long B, long long S, long long H, int D,
                                   int docs, long long off_dq, long long off_count) {
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= B * H * S)
        return;
    int lane = (int)threadIdx.x % 32, tile = att_bc(D);
    long long s = w % S, h = (w / S) % H, b = w / (S * H), row = ((b * S + s) * H + h) * D;
    const uint4 *dy = (const uint4 *)((const unsigned short *)ATT_DY + row);
    const uint4 *o = (const uint4 *)((const unsigned short *)ATT_O + row);
    float part = 0.0f;
    for (int c = lane; c < D / 8; c += 32) {   /* eight bf16 a load */
        uint4 x = dy[c], y = o[c];
        unsigned int xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
        FTC_UNROLL
        for (int k = 0; k < 4; k++)
            part += ftc_u2f(xs[k] << 16) * ftc_u2f(ys[k] << 16) +
                    ftc_u2f(xs[k] & 0xffff0000u) * ftc_u2f(ys[k] & 0xffff0000u);
    }
    part = warp_sum(part);
    if (lane == 0)
        ATT_DI[(b * H + h) * S + s] = part;
    float4 *acc = (float4 *)(ATT_DQACC + row);
    for (int c = lane; c < D / 4; c += 32)
        acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (lane == 0 && s % tile == 0)
        ATT_COUNT[(b * H + h) * ((S + tile - 1) / tile) + s / tile] = 0;
    (void)docs;
}

/* Waits until the counter is `turn` (see Determinism above); then another block's additions
 * are visible. */
FTC_INLINE void att_wait_turn(int *count, int turn) {
#ifdef FTC_EMU
    if (*(volatile int *)count != turn)
        ftc_emu_fail_("attention backward: a dq counter is %d where this block's turn is %d (it "
                      "would wait for a block that runs after it)", *(volatile int *)count, turn);
#else
    while (atomicAdd(count, 0) != turn)
        __nanosleep(32);
    __threadfence();
#endif
}

/* Backward main: a block of eight warps a (b, h, tile of keys): grid (S / tile, H, B). a.p:
 * dq, dk, dv, dy, q, k, v, o, lse, [positions,] ws. */
FTC_INLINE void attn_bwd_main_tiled(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                    int D, int causal, long long window, float cap, float scale,
                                    int docs, long long off_dq, long long off_count, long long off_pk,
                                    long long off_pv) {
    FTC_DYN_SMEM(att_smem, att_bwd_smem(D));
    int T = att_bc(D), ld = att_ld(D), lp = T + 8;
    unsigned short *sk = (unsigned short *)att_smem, *sv = sk + T * ld, *sq = sv + T * ld;
    unsigned short *sdy = sq + T * ld, *sp = sdy + T * ld, *sds = sp + T * lp;
    float *slse = (float *)(sds + T * lp), *sdi = slse + T;
    const unsigned short *Q = (const unsigned short *)ATT_Q, *K = (const unsigned short *)ATT_K;
    const unsigned short *V = (const unsigned short *)ATT_V, *DY = (const unsigned short *)ATT_DY;
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, q = lane % 4;
    long long tiles = (S + T - 1) / T, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
    long long n = causal ? tiles - 1 - blockIdx.x : blockIdx.x, k0 = n * T;   /* see Determinism */
    long long qfirst, qlast, unused;   /* the queries its keys are seen by */
    att_queries(k0, S, causal, window, &qfirst, &unused);
    att_queries(k0 + T - 1 < S ? k0 + T - 1 : S - 1, S, causal, window, &unused, &qlast);
    /* its query tiles, in the order of Determinism: m from `first` by `dir` to before `stop` */
    long long dir = causal ? 1 : -1, first = causal ? qfirst / T : (qlast - 1) / T;
    long long stop = causal ? (qlast - 1) / T + 1 : qfirst / T - 1;
    /* The warps' parts: rows in groups of 16 (rg of them), the rest of the warps (cg) over
     * the columns; S, dP: query rows x keys; dV, dK: keys x D; dq: query rows x D. */
    int rg = T / 16, cg = ATT_WARPS_BWD / rg, ri = (warp % rg) * 16, ci = warp / rg;
    int nk = T / cg / 8, nd = D / cg / 8, kc = ci * (T / cg), dc = ci * (D / cg);
    att_stage(sk, ld, K, b, S, Hkv, hk, k0, T, D);
    att_stage(sv, ld, V, b, S, Hkv, hk, k0, T, D);
    FTC_CP_ASYNC_COMMIT();
    float dk[8][4], dv[8][4];
    FTC_UNROLL
    for (int t = 0; t < nd; t++)
        FTC_UNROLL
        for (int e = 0; e < 4; e++)
            dk[t][e] = dv[t][e] = 0.0f;
    for (long long m = first; m != stop; m += dir) {
        long long i0 = m * T;
        __syncthreads();   /* every warp done with the last tile's Q, dy, P, dS */
        att_stage(sq, ld, Q, b, S, H, h, i0, T, D);
        att_stage(sdy, ld, DY, b, S, H, h, i0, T, D);
        FTC_CP_ASYNC_COMMIT();
        for (int r = (int)threadIdx.x; r < T; r += (int)blockDim.x) {
            long long at = (b * H + h) * S + (i0 + r < S ? i0 + r : S - 1);
            slse[r] = ATT_LSE[at] * ATT_LOG2E;
            sdi[r] = ATT_DI[at];
        }
        FTC_CP_ASYNC_WAIT(0);
        __syncthreads();
        float sc[4][4], dp[4][4];
        FTC_UNROLL
        for (int t = 0; t < nk; t++)
            FTC_UNROLL
            for (int e = 0; e < 4; e++)
                sc[t][e] = dp[t][e] = 0.0f;
        att_product(sc, nk, sq, ld, 0, ri, sk, ld, 0, kc, D);    /* S = Q K^T */
        att_product(dp, nk, sdy, ld, 0, ri, sv, ld, 0, kc, D);   /* dP = dy V^T */
        bool masked = docs || i0 + T > S || k0 + T > S || !att_all_seen(i0 + ri, 16, k0 + kc, T / cg, causal, window);
        FTC_UNROLL
        for (int t = 0; t < nk; t++) {
            float p[4], ds[4];
            FTC_UNROLL
            for (int e = 0; e < 4; e++) {
                int qi = ri + g + 8 * (e >> 1), kj = kc + 8 * t + 2 * q + (e & 1);
                long long row = i0 + qi, key = k0 + kj;
                float v = att_cap(sc[t][e] * scale, cap);
                bool hidden = masked && (row >= S || att_hidden(key, row, S, causal, window) ||
                                         !att_same(ATT_POS, b, S, row < S ? row : S - 1, key));
                p[e] = hidden ? 0.0f : exp2f(v * ATT_LOG2E - slse[qi]);
                ds[e] = p[e] * (dp[t][e] - sdi[qi]) * att_through(v, cap) * scale;
            }
            int qi = ri + g, kj = kc + 8 * t + 2 * q;
            *(unsigned int *)(sp + qi * lp + kj) = att_pack(p[0], p[1]);
            *(unsigned int *)(sp + (qi + 8) * lp + kj) = att_pack(p[2], p[3]);
            *(unsigned int *)(sds + qi * lp + kj) = att_pack(ds[0], ds[1]);
            *(unsigned int *)(sds + (qi + 8) * lp + kj) = att_pack(ds[2], ds[3]);
        }
        __syncthreads();
        att_product(dv, nd, sp, lp, 1, ri, sdy, ld, 1, dc, T);    /* dV += P^T dy */
        att_product(dk, nd, sds, lp, 1, ri, sq, ld, 1, dc, T);    /* dK += dS^T Q */
        long long kfirst;   /* the first key tile query tile m sees */
        att_keys(i0, S, causal, window, &kfirst, &unused);
        int *count = ATT_COUNT + (b * H + h) * tiles + m, turn = (int)(causal ? m - n : n - kfirst / T);
        /* dq = dS K, the warp's columns in two halves (16 accumulators fewer beside dK and dV),
         * each added by reductions (red.add: no reply awaited) once it is this block's turn */
        FTC_UNROLL
        for (int half = 0; half < 2; half++) {
            int n0 = half ? nd / 2 : 0, nh = half ? nd - nd / 2 : nd / 2;
            float dq[4][4];
            FTC_UNROLL
            for (int t = 0; t < nh; t++)
                FTC_UNROLL
                for (int e = 0; e < 4; e++)
                    dq[t][e] = 0.0f;
            att_product(dq, nh, sds, lp, 0, ri, sk, ld, 1, dc + 8 * n0, T);
            if (half == 0) {
                if (threadIdx.x == 0)
                    att_wait_turn(count, turn);
                __syncthreads();
            }
            FTC_UNROLL
            for (int t = 0; t < nh; t++)
                FTC_UNROLL
                for (int r = 0; r < 2; r++) {
                    long long row = i0 + ri + g + 8 * r;
                    if (row < S)
                        FTC_RED_ADD2(ATT_DQACC + ((b * S + row) * H + h) * D + dc + 8 * (n0 + t) + 2 * q,
                                     dq[t][2 * r], dq[t][2 * r + 1]);
                }
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
            atomicExch(count, turn + 1);
    }
    /* This block's keys' dK and dV: bf16 where each key head has one query head, else the
     * query head's fp32 partial, which post sums. */
    bool gqa = Hkv < H;
    FTC_UNROLL
    for (int t = 0; t < nd; t++)
        FTC_UNROLL
        for (int r = 0; r < 2; r++) {
            long long key = k0 + ri + g + 8 * r;
            if (key >= S)
                continue;
            int col = dc + 8 * t + 2 * q;
            if (gqa) {
                long long at = ((b * S + key) * H + h) * D + col;
                float *pk = (float *)((char *)ATT_WS + off_pk) + at, *pv = (float *)((char *)ATT_WS + off_pv) + at;
                pk[0] = dk[t][2 * r], pk[1] = dk[t][2 * r + 1];
                pv[0] = dv[t][2 * r], pv[1] = dv[t][2 * r + 1];
            } else {
                long long at = ((b * S + key) * Hkv + hk) * D + col;
                *(unsigned int *)((unsigned short *)ATT_DK + at) = att_pack(dk[t][2 * r], dk[t][2 * r + 1]);
                *(unsigned int *)((unsigned short *)ATT_DV + at) = att_pack(dv[t][2 * r], dv[t][2 * r + 1]);
            }
        }
}

/* Backward post: dq from its accumulator to bf16, and with GQA dK and dV each the sum of their
 * query heads' partials in head order, four elements a thread a step. */
FTC_INLINE void attn_bwd_post_tiled(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                    int D, int docs, long long off_dq, long long off_pk, long long off_pv) {
    long long nq = B * S * H * D, nkv = Hkv < H ? B * S * Hkv * D : 0, group = H / Hkv;
    long long step = (long long)gridDim.x * blockDim.x * 4;
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < nq + 2 * nkv; i += step) {
        float4 v;
        unsigned short *out;
        if (i < nq) {
            v = *(const float4 *)(ATT_DQACC + i);
            out = (unsigned short *)ATT_DQ + i;
        } else {
            long long j = (i - nq) % nkv, c = j % D, r = j / D, hk = r % Hkv, bs = r / Hkv;
            bool isv = i - nq >= nkv;
            const float *part = (const float *)((char *)ATT_WS + (isv ? off_pv : off_pk));
            v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (long long hh = hk * group; hh < (hk + 1) * group; hh++) {
                float4 x = *(const float4 *)(part + (bs * H + hh) * D + c);
                v.x += x.x, v.y += x.y, v.z += x.z, v.w += x.w;
            }
            out = (unsigned short *)(isv ? ATT_DV : ATT_DK) + j;
        }
        *(uint2 *)out = make_uint2(att_pack(v.x, v.y), att_pack(v.z, v.w));
    }
}

/* --- What a kernel calls: the tiled kernels when the operands allow. -------------------- */

FTC_INLINE int att_tiled(int D) { return D % 16 == 0 && (D <= 128 || (D <= 256 && D % 32 == 0)); }

FTC_INLINE void attention_fwd(FtcArgs a, long long B, long long S, long long H, long long Hkv, int D,
                              int causal, long long window, float cap, float scale, int dtq, int dtk,
                              int dtv, int dto, int docs) {
    if (att_tiled(D) && dtq == FTC_BF16 && dtk == FTC_BF16 && dtv == FTC_BF16 && dto == FTC_BF16)
        attn_fwd_tiled(a, B, S, H, Hkv, D, causal, window, cap, scale, docs);
    else
        attn_fwd(a, B, S, H, Hkv, D, causal, window, cap, scale, dtq, dtk, dtv, dto, docs);
}

/* The backward's three launches. Tiled: pre, main, post as above; else a warp a row: dq (and
 * Di), then dk and dv a warp a key row, then nothing. */
FTC_INLINE void attention_bwd_pre(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                  int D, int causal, long long window, float cap, float scale, int dt,
                                  int dtd, int docs, long long off_dq, long long off_count,
                                  long long off_pk, long long off_pv) {
    (void)off_pk, (void)off_pv;
    if (att_tiled(D) && dt == FTC_BF16 && dtd == FTC_BF16)
        attn_bwd_pre_tiled(a, B, S, H, D, docs, off_dq, off_count);
    else
        attn_bwd_dq(a, B, S, H, Hkv, D, causal, window, cap, scale, dt, dtd, docs);
}

FTC_INLINE void attention_bwd_main(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                   int D, int causal, long long window, float cap, float scale, int dt,
                                   int dtd, int docs, long long off_dq, long long off_count,
                                   long long off_pk, long long off_pv) {
    if (att_tiled(D) && dt == FTC_BF16 && dtd == FTC_BF16)
        attn_bwd_main_tiled(a, B, S, H, Hkv, D, causal, window, cap, scale, docs, off_dq, off_count,
                            off_pk, off_pv);
    else
        attn_bwd_dkv(a, B, S, H, Hkv, D, causal, window, cap, scale, dt, dtd, docs);
}

FTC_INLINE void attention_bwd_post(FtcArgs a, long long B, long long S, long long H, long long Hkv,
                                   int D, int causal, long long window, float cap, float scale, int dt,
                                   int dtd, int docs, long long off_dq, long long off_count,
                                   long long off_pk, long long off_pv) {
    (void)causal, (void)window, (void)cap, (void)scale, (void)off_count;
    if (att_tiled(D) && dt == FTC_BF16 && dtd == FTC_BF16)
        attn_bwd_post_tiled(a, B, S, H, Hkv, D, docs, off_dq, off_pk, off_pv);
}
