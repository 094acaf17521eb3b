/* pref.cuh — a preference loss (dpo, ipo, orpo, simpo: runtime/ops.h's PrefKind) and the
 * targets' log-probabilities it is taken over. Rows 2j and 2j+1 of a micro-batch are pair
 * j's chosen and rejected completions; a pair's loss reads the sums of its rows' trained
 * targets' log-probabilities (a target < 0 is untrained), or their means. The arithmetic
 * is the cpu backend's (runtime/cpu/kernels.c, cpu_preference): doubles, each row summed
 * in index order by one thread, the pairs by one thread in order, so emu and cpu agree to
 * the bit on the loss's part. */

/* Launch 0 of logprobs, one block a row: lp[r] = x[t] - logsumexp(row), 0 when ignored.
 * a.p: lp, logits, targets. */
FTC_INLINE void lp_rows(FtcArgs a, long long N, long long V, int dtx, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * V;
    if (r >= N)
        return;
    int t = ((const int *)a.p[2])[r];
    float lse = row_lse(a.p[1], base, V, dtx, red, v8);
    if (threadIdx.x == 0)
        ((float *)a.p[0])[r] = t >= 0 && t < V ? ldf(a.p[1], base + t, dtx) - lse : 0.0f;
}

/* One row's gradient, dlp (onehot(t) - softmax(row)) from its logits in `lg` (dtype dtx),
 * into `d` (dtype dtd; zeros for an ignored row), the row read whole before its first write
 * (d may be lg). */
FTC_INLINE void lp_row_grad(const void *lg, void *d, long long base, long long V, int t, float dlp, int dtx,
                            int dtd, float *red, int v8) {
    float lse = t < 0 ? 0.0f : row_lse(lg, base, V, dtx, red, v8);
    __syncthreads();   /* every read of the row is done before the first write */
    int w = v8 ? 8 : 1;
    for (long long j = threadIdx.x * w; j < V; j += blockDim.x * w) {
        float x[8];
        ldn(lg, base + j, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < w; e++)
            x[e] = t < 0 ? 0.0f : ((j + e == t ? 1.0f : 0.0f) - expf(x[e] - lse)) * dlp;
        stn(d, base + j, dtd, v8, x);
    }
}

/* logprobs_bwd, one block a row: dlogits = dlp[r] (onehot(t) - softmax(row)) (dlogits may
 * be the logits). a.p: dlogits, dlp, logits, targets. */
FTC_INLINE void lp_grad(FtcArgs a, long long N, long long V, int dtx, int dtd, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x;
    if (r < N)
        lp_row_grad(a.p[2], a.p[0], r * V, V, ((const int *)a.p[3])[r], ((const float *)a.p[1])[r], dtx, dtd, red, v8);
}

/* The fused linear + logprobs runs the same row code on one chunk of logits at a time:
 * chunk a.i[3] of C rows, whose logits [C, V] (dtype dtx) the backend has formed at the
 * start of the workspace a.p[pws]; the targets are a.p[ptg]. Forward, one block a row of
 * the chunk: lp[row] (a.p[0]). */
FTC_INLINE void llp_rows(FtcArgs a, long long C, long long V, int ptg, int pws, int dtx, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, row = a.i[3] * C + r;
    if (r >= C)
        return;
    int t = ((const int *)a.p[ptg])[row];
    float lse = row_lse(a.p[pws], r * V, V, dtx, red, v8);
    if (threadIdx.x == 0)
        ((float *)a.p[0])[row] = t >= 0 && t < V ? ldf(a.p[pws], r * V + t, dtx) - lse : 0.0f;
}

/* Backward, one block a row of the chunk: its logits become their gradient in place (the
 * backend then forms the chunk's dx rows and its part of dW from them); dlp is a.p[pdlp]. */
FTC_INLINE void llp_grad(FtcArgs a, long long C, long long V, int ptg, int pdlp, int pws, int dtx, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, row = a.i[3] * C + r;
    if (r < C)
        lp_row_grad(a.p[pws], a.p[pws], r * V, V, ((const int *)a.p[ptg])[row], ((const float *)a.p[pdlp])[row],
                    dtx, dtx, red, v8);
}

FTC_INLINE double pref_logsig(double z) { return z >= 0 ? -log1p(exp(-z)) : z - log1p(exp(z)); }
FTC_INLINE double pref_sig(double z) { return z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z)); }

/* A pair's loss, its derivatives by the two rows' sums and its rewards: cpu_preference's
 * pref_pair, operation for operation. */
FTC_INLINE double pref_pair(int kind, double b, double e, double gamma, double c, double r, double nc,
                            double nr, double c0, double r0, double *dc, double *dr, double *rc, double *rr) {
    if (kind == 0) {   /* dpo */
        double z = b * ((c - c0) - (r - r0));
        double d = -(1 - e) * pref_sig(-z) + e * pref_sig(z);
        *dc = d * b, *dr = -d * b;
        *rc = b * (c - c0), *rr = b * (r - r0);
        return -(1 - e) * pref_logsig(z) - e * pref_logsig(-z);
    }
    if (kind == 1) {   /* ipo */
        double z = (c / nc - c0 / nc) - (r / nr - r0 / nr), h = z - 1.0 / (2.0 * b);
        *dc = 2.0 * h / nc, *dr = -2.0 * h / nr;
        *rc = b * (c - c0) / nc, *rr = b * (r - r0) / nr;
        return h * h;
    }
    if (kind == 3) {   /* simpo */
        double a = c / nc, bb = r / nr, y = b * (a - bb) - gamma;
        double d = -(1 - e) * pref_sig(-y) + e * pref_sig(y);
        *dc = d * b / nc, *dr = -d * b / nr;
        *rc = b * a, *rr = b * bb;
        return -(1 - e) * pref_logsig(y) - e * pref_logsig(-y);
    }
    {   /* orpo */
        double a = c / nc, bb = r / nr;
        double lo = (a - bb) - (log1p(-exp(a)) - log1p(-exp(bb)));
        double d = -b * pref_sig(-lo);
        *dc = d / (1.0 - exp(a)) / nc, *dr = -d / (1.0 - exp(bb)) / nr;
        *rc = b * a, *rr = b * bb;
        return -b * pref_logsig(lo);
    }
}

/* Each row's sum of trained log-probabilities, their count and the reference's sum (ref: 0
 * none, 1 a log-probability a target, 2 a sum a row) into ws[3 r .. 3 r + 2], a thread a row. */
FTC_INLINE void pref_sums(const float *lp, const int *tg, const float *refp, double *ws, long long B, long long S,
                          int ref) {
    for (long long row = threadIdx.x; row < B; row += blockDim.x) {
        double sum = 0.0, n = 0.0, rs = 0.0;
        for (long long t = 0; t < S; t++) {
            if (tg[row * S + t] < 0)
                continue;
            sum += lp[row * S + t], n += 1;
            if (ref == 1)
                rs += refp[row * S + t];
        }
        ws[3 * row] = sum, ws[3 * row + 1] = n, ws[3 * row + 2] = ref == 2 ? (double)refp[row] : rs;
    }
    __syncthreads();
}

/* The pairs in order, by one thread: the loss and the stats (each over the step's pairs
 * cnt[0]); with grad, each row's gradient by its sum into ws[3 B + row]. */
FTC_INLINE void pref_pairs(double *ws, const int *cnt, long long B, int kind, double beta, double e, double gamma,
                           double alpha, float *loss, float *stats, int grad) {
    double P = cnt[0] > 0 ? (double)cnt[0] : 0.0, chosen = (double)cnt[1], total = 0.0, st[6] = {0, 0, 0, 0, 0, 0};
    double nll_w = kind == 2 ? 1.0 : alpha;
    for (long long j = 0; j < B / 2; j++) {
        const double *c = ws + 6 * j, *r = c + 3;
        double dc = 0, dr = 0, rc = 0, rr = 0, l = 0;
        int live = c[1] > 0 && r[1] > 0 && P > 0;
        if (live)
            l = pref_pair(kind, beta, e, gamma, c[0], r[0], c[1], r[1], c[2], r[2], &dc, &dr, &rc, &rr);
        double nll = live && nll_w > 0 && chosen > 0 ? -c[0] / chosen : 0.0;
        if (live) {
            total += l / P + nll_w * nll;
            st[0] += rc / P, st[1] += rr / P;
            st[2] += (rc > rr ? 1.0 : 0.0) / P;
            st[3] += c[0] / P, st[4] += r[0] / P;
            st[5] += nll;
        }
        if (grad) {
            double g0 = live ? dc / P : 0.0, g1 = live ? dr / P : 0.0;
            if (live && nll_w > 0 && chosen > 0)
                g0 -= nll_w / chosen;
            ws[3 * B + 2 * j] = g0, ws[3 * B + 2 * j + 1] = g1;
        }
    }
    if (loss)
        loss[0] = (float)total;
    if (stats)
        for (int i = 0; i < 6; i++)
            stats[i] = (float)st[i];
}

/* preference, one block: a.p: loss, stats, lp, targets, counts, ref (or NULL), ws. */
FTC_INLINE void pref_loss(FtcArgs a, long long B, long long S, int ref, int pws, int kind, double beta, double e,
                          double gamma, double alpha) {
    double *ws = (double *)a.p[pws];
    pref_sums((const float *)a.p[2], (const int *)a.p[3], (const float *)a.p[5], ws, B, S, ref);
    if (threadIdx.x == 0)
        pref_pairs(ws, (const int *)a.p[4], B, kind, beta, e, gamma, alpha, (float *)a.p[0], (float *)a.p[1], 0);
}

/* preference_bwd, one block: a.p: dlp, lp, targets, counts, ref (or NULL), ws. dlp = each
 * row's gradient times the run's loss scale a.f[1] at its trained targets, 0 elsewhere. */
FTC_INLINE void pref_grad(FtcArgs a, long long B, long long S, int ref, int pws, int kind, double beta, double e,
                          double gamma, double alpha) {
    double *ws = (double *)a.p[pws];
    const int *tg = (const int *)a.p[2];
    pref_sums((const float *)a.p[1], tg, (const float *)a.p[4], ws, B, S, ref);
    if (threadIdx.x == 0)
        pref_pairs(ws, (const int *)a.p[3], B, kind, beta, e, gamma, alpha, 0, 0, 1);
    __syncthreads();
    double scale = (double)a.f[1];
    for (long long i = threadIdx.x; i < B * S; i += blockDim.x)
        ((float *)a.p[0])[i] = tg[i] < 0 ? 0.0f : (float)(ws[3 * B + i / S] * scale);
}
