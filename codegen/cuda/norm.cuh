/* norm.cuh — row-wise kernels: RMSNorm and LayerNorm forward and backward, softmax,
 * and the column sums behind norm-weight gradients and sum_to. A row kernel runs one
 * block per row (blockDim a multiple of 32), sums in fp32 through block_sum's fixed
 * tree; the cpu backend sums the same quantities in double, so results agree within
 * fp32 rounding, not bitwise. Operands follow the plan's order in a.p[]: outputs, then
 * inputs. */

/* With v8 (C % 8 == 0, every row operand 16-byte aligned) a thread takes eight elements at a
 * time with ld8 and st8: its column step is 8 blockDim, and c below is the first of eight. */
#define NORM_COLS(c, v8) for (int c = (int)threadIdx.x * ((v8) ? 8 : 1); c < C; c += (int)blockDim.x * ((v8) ? 8 : 1))

/* Row r of an RMSNorm from its sum of squares ss (the block's): rstd stored, then
 * y = x * rstd * (w + offset). */
FTC_INLINE void rmsnorm_apply(void *y, int dty, float *rstd, const void *xp, int dtx, const void *wp, int dtw,
                              long long r, int C, float ss, float eps, float offset, int v8) {
    long long base = r * C;
    int n = v8 ? 8 : 1;
    float rs = 1.0f / sqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0)
        rstd[r] = rs;
    NORM_COLS(c, v8) {
        float x[8], w[8];
        ldn(xp, base + c, dtx, v8, x);
        ldn(wp, c, dtw, v8, w);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            x[e] = (x[e] * rs) * (w[e] + offset);
        stn(y, base + c, dty, v8, x);
    }
}

/* y = x * rstd * (w + offset), rstd = 1 / sqrt(mean(x^2) + eps), kept in fp32 for the backward.
 * a.p: y [rows, C], rstd f32 [rows], x [rows, C], w [C]. */
FTC_INLINE void rmsnorm_fwd(FtcArgs a, long long rows, int C, float eps, float offset, int dtx, int dtw,
                            int dty, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    int n = v8 ? 8 : 1;
    if (r >= rows)
        return;
    float ss = 0.0f;
    NORM_COLS(c, v8) {
        float x[8];
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            ss += x[e] * x[e];
    }
    rmsnorm_apply(a.p[0], dty, (float *)a.p[1], a.p[2], dtx, a.p[3], dtw, r, C, block_sum(ss, red), eps, offset,
                  v8);
}

/* The residual's add and the norm after it, one launch: s = a + b, rounded to s's dtype and
 * stored (the residual stream), then rmsnorm_fwd of those stored bits. A thread reads back
 * only the columns it wrote. a.p: y [rows, C], rstd f32 [rows], s [rows, C], a, b [rows, C],
 * w [C]. */
FTC_INLINE void add_rmsnorm_fwd(FtcArgs a, long long rows, int C, float eps, float offset, int dta, int dtb,
                                int dtw, int dts, int dty, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    int n = v8 ? 8 : 1;
    if (r >= rows)
        return;
    float ss = 0.0f;
    NORM_COLS(c, v8) {
        float x[8], y[8];
        ldn(a.p[3], base + c, dta, v8, x);
        ldn(a.p[4], base + c, dtb, v8, y);
        FTC_UNROLL
        for (int e = 0; e < n; e++) {
            x[e] = rnd(x[e] + y[e], dts);
            ss += x[e] * x[e];
        }
        stn(a.p[2], base + c, dts, v8, x);
    }
    rmsnorm_apply(a.p[0], dty, (float *)a.p[1], a.p[2], dts, a.p[5], dtw, r, C, block_sum(ss, red), eps, offset,
                  v8);
}

/* dx = r w' dy - (r^3 / C) x sum(w' dy x), w' = w + offset; with acc (dtacc >= 0) acc + dx,
 * dx rounded to its dtype first (the add it replaces).  a.p: dx, dy, x, w, rstd, acc. */
FTC_INLINE void rmsnorm_dx(FtcArgs a, long long rows, int C, float offset, int dtdx, int dtdy, int dtx,
                           int dtw, int v8, int dtacc) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    int n = v8 ? 8 : 1;
    if (r >= rows)
        return;
    float dot = 0.0f;
    NORM_COLS(c, v8) {
        float w[8], dy[8], x[8];
        ldn(a.p[3], c, dtw, v8, w);
        ldn(a.p[1], base + c, dtdy, v8, dy);
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            dot += (w[e] + offset) * dy[e] * x[e];
    }
    dot = block_sum(dot, red);
    float rs = ((const float *)a.p[4])[r];
    float k = rs * rs * rs * dot / (float)C;
    NORM_COLS(c, v8) {
        float w[8], dy[8], x[8];
        ldn(a.p[3], c, dtw, v8, w);
        ldn(a.p[1], base + c, dtdy, v8, dy);
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            x[e] = rs * (w[e] + offset) * dy[e] - k * x[e];
        if (dtacc >= 0) {
            float s[8];
            ldn(a.p[5], base + c, dtacc, v8, s);
            FTC_UNROLL
            for (int e = 0; e < n; e++)
                x[e] = rnd(x[e], dtdx) + s[e];
        }
        stn(a.p[0], base + c, dtdx, v8, x);
    }
}

/* mean and rstd per row (stats f32 [2, rows]: the means, then the rstds); y = (x - mean)
 * rstd w + b.  a.p: y, stats, x, w, b. */
FTC_INLINE void layernorm_fwd(FtcArgs a, long long rows, int C, float eps, int dtx, int dtw, int dtb,
                              int dty, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    int n = v8 ? 8 : 1;
    if (r >= rows)
        return;
    float s = 0.0f;
    NORM_COLS(c, v8) {
        float x[8];
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            s += x[e];
    }
    float mean = block_sum(s, red) / (float)C;
    float ss = 0.0f;
    NORM_COLS(c, v8) {
        float x[8];
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            ss += (x[e] - mean) * (x[e] - mean);
    }
    float rs = 1.0f / sqrtf(block_sum(ss, red) / (float)C + eps);
    if (threadIdx.x == 0) {
        ((float *)a.p[1])[r] = mean;
        ((float *)a.p[1])[rows + r] = rs;
    }
    NORM_COLS(c, v8) {
        float x[8], w[8], bb[8];
        ldn(a.p[2], base + c, dtx, v8, x);
        ldn(a.p[3], c, dtw, v8, w);
        ldn(a.p[4], c, dtb, v8, bb);
        FTC_UNROLL
        for (int e = 0; e < n; e++)
            x[e] = (x[e] - mean) * rs * w[e] + bb[e];
        stn(a.p[0], base + c, dty, v8, x);
    }
}

/* With xhat = (x - mean) r and g = w dy: dx = r (g - mean(g) - xhat mean(g xhat)).
 * a.p: dx, dy, x, w, stats. */
FTC_INLINE void layernorm_dx(FtcArgs a, long long rows, int C, int dtdx, int dtdy, int dtx, int dtw, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    int n = v8 ? 8 : 1;
    if (r >= rows)
        return;
    float mean = ((const float *)a.p[4])[r], rs = ((const float *)a.p[4])[rows + r];
    float sg = 0.0f, sgx = 0.0f;
    NORM_COLS(c, v8) {
        float w[8], dy[8], x[8];
        ldn(a.p[3], c, dtw, v8, w);
        ldn(a.p[1], base + c, dtdy, v8, dy);
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++) {
            float g = w[e] * dy[e];
            sg += g;
            sgx += g * (x[e] - mean) * rs;
        }
    }
    sg = block_sum(sg, red) / (float)C;
    sgx = block_sum(sgx, red) / (float)C;
    NORM_COLS(c, v8) {
        float w[8], dy[8], x[8];
        ldn(a.p[3], c, dtw, v8, w);
        ldn(a.p[1], base + c, dtdy, v8, dy);
        ldn(a.p[2], base + c, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < n; e++) {
            float xhat = (x[e] - mean) * rs, g = w[e] * dy[e];
            x[e] = rs * (g - sg - xhat * sgx);
        }
        stn(a.p[0], base + c, dtdx, v8, x);
    }
}

/* Softmax over the last dim; y may share x's bytes.  a.p: y, x. */
FTC_INLINE void softmax_fwd(FtcArgs a, long long rows, int C, int dtx, int dty) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    if (r >= rows)
        return;
    float mx = -FTC_INF;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        mx = fmaxf(mx, ldf(a.p[1], base + c, dtx));
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        sum += expf(ldf(a.p[1], base + c, dtx) - mx);
    sum = block_sum(sum, red);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        stf(a.p[0], base + c, dty, expf(ldf(a.p[1], base + c, dtx) - mx) / sum);
}

/* dx = y (dy - sum(dy y)).  a.p: dx, dy, y. */
FTC_INLINE void softmax_bwd(FtcArgs a, long long rows, int C, int dtdx, int dtdy, int dty) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * C;
    if (r >= rows)
        return;
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dot += ldf(a.p[1], base + c, dtdy) * ldf(a.p[2], base + c, dty);
    dot = block_sum(dot, red);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float y = ldf(a.p[2], base + c, dty);
        stf(a.p[0], base + c, dtdx, y * (ldf(a.p[1], base + c, dtdy) - dot));
    }
}

/* Column sums over rows, 16 columns a block of 1024 threads: column c = 16 blockIdx.x +
 * threadIdx.x % 16, rows split 64 ways (a warp reads two rows' 16 columns: whole 32-byte
 * sectors of bf16) and the 64 partials added in order. A column's rows are many (every token
 * of the micro-batch) and the columns few (a norm's width): 32 columns a block of 256 gave
 * Qwen2-0.5B's 896 columns 28 blocks, 13.5x the cost model's time on an H200. The term of
 * (row, column) is term(row, c); `update` adds the sum to out's value. */
#define FTC_COLSUM(term, rows, C, out, dtout, update)                                          \
    do {                                                                                       \
        __shared__ float part[64][17];                                                         \
        int tx = threadIdx.x % 16, ty = threadIdx.x / 16;                                      \
        long long c = (long long)blockIdx.x * 16 + tx;                                         \
        float acc = 0.0f;                                                                      \
        if (c < (C))                                                                           \
            for (long long row = ty; row < (rows); row += 64)                                  \
                acc += (term);                                                                 \
        part[ty][tx] = acc;                                                                    \
        __syncthreads();                                                                       \
        if (ty == 0 && c < (C)) {                                                              \
            float s = 0.0f;                                                                    \
            for (int k = 0; k < 64; k++)                                                       \
                s += part[k][tx];                                                              \
            stf(out, c, dtout, (update) ? ldf(out, c, dtout) + s : s);                         \
        }                                                                                      \
    } while (0)

/* dw[c] (+)= sum_rows dy x rstd.  a.p: dw, dy, x, rstd. */
FTC_INLINE void rmsnorm_dw(FtcArgs a, long long rows, int C, int update, int dtdw, int dtdy, int dtx) {
    const float *rstd = (const float *)a.p[3];
    FTC_COLSUM(ldf(a.p[1], row * C + c, dtdy) * ldf(a.p[2], row * C + c, dtx) * rstd[row], rows, C,
               a.p[0], dtdw, update);
}

/* dw[c] (+)= sum_rows dy (x - mean) rstd.  a.p: dw, dy, x, stats. */
FTC_INLINE void layernorm_dw(FtcArgs a, long long rows, int C, int update, int dtdw, int dtdy,
                             int dtx) {
    const float *stats = (const float *)a.p[3];
    FTC_COLSUM(ldf(a.p[1], row * C + c, dtdy) * ((ldf(a.p[2], row * C + c, dtx) - stats[row]) *
                                                  stats[rows + row]),
               rows, C, a.p[0], dtdw, update);
}

/* out[j] (+)= sum_r x[r n + j]: a gradient summed down to a broadcast operand's shape.
 * a.p: out [n], x [reps, n]. */
FTC_INLINE void sum_to(FtcArgs a, long long reps, long long n, int update, int dtout, int dtx) {
    FTC_COLSUM(ldf(a.p[1], row * n + c, dtx), reps, n, a.p[0], dtout, update);
}
