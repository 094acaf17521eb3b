/* loss.cuh — cross entropy over logits [N, V] with i32 targets (a negative target is
 * ignored, as PyTorch's ignore_index): the sum over the other rows of
 * logsumexp(row) - row[target], divided by the count of trained targets of the whole
 * optimizer step (the count operand, when `counted`: each micro-step then holds its share
 * of the step's mean, as transformers' num_items_in_batch) or else by this micro-batch's
 * own rows not ignored; and its gradient (softmax - onehot) * scale / count, scale times
 * the run's loss scale (a.f[1], an fp32 product as on the cpu backend). A row's
 * logsumexp is its max plus the log of the fp32 sum of exp(x - max) over one block; the
 * fp32 softmax is never stored: each row is read, reduced, and written as the gradient in
 * the logits' dtype.
 * Operands: out[0], logits, targets, count (when counted), workspace. */

/* The count of trained targets the mean divides by: the count operand, else the rows of
 * this micro-batch not ignored (one block). */
FTC_INLINE float ce_divisor(FtcArgs a, long long N, int counted, float *red) {
    if (counted)
        return (float)((const int *)a.p[3])[0];
    const int *tg = (const int *)a.p[2];
    float count = 0.0f;
    for (long long r = threadIdx.x; r < N; r += blockDim.x)
        count += tg[r] >= 0 ? 1.0f : 0.0f;
    return block_sum(count, red);
}

/* The row's logsumexp in one pass: each thread keeps a running max and the sum of exp(x - max)
 * over its elements (eight at a time with v8), rescaling the sum when the max grows (the
 * online softmax); then the block's max and the threads' sums brought to it. */
FTC_INLINE float row_lse(const void *lg, long long base, long long V, int dtx, float *red, int v8) {
    float mx = -FTC_INF, sum = 0.0f;
    int w = v8 ? 8 : 1;
    for (long long j = threadIdx.x * w; j < V; j += blockDim.x * w) {
        float x[8];
        ldn(lg, base + j, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < w; e++) {
            if (x[e] > mx) {
                sum = sum * expf(mx - x[e]) + 1.0f;
                mx = x[e];
            } else if (x[e] != -FTC_INF || mx != -FTC_INF) {
                sum += expf(x[e] - mx);
            }
        }
    }
    float bm = block_max(mx, red);
    sum = mx == -FTC_INF ? 0.0f : sum * expf(mx - bm);
    sum = block_sum(sum, red);
    return bm + logf(sum);
}

/* Launch 1 of the loss, one block a row: ws[r] = the row's loss term (0 when ignored).
 * a.p: loss, logits, targets, [count,] ws. */
FTC_INLINE void ce_rows(FtcArgs a, long long N, long long V, int dtx, int counted, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * V;
    if (r >= N)
        return;
    int t = ((const int *)a.p[2])[r];
    float lse = row_lse(a.p[1], base, V, dtx, red, v8);
    if (threadIdx.x == 0)
        ((float *)a.p[3 + counted])[r] = t >= 0 && t < V ? lse - ldf(a.p[1], base + t, dtx) : 0.0f;
}

/* Launch 2, one block: loss = sum of the row terms / the count (0 when there is none). */
FTC_INLINE void ce_mean(FtcArgs a, long long N, int counted) {
    __shared__ float red[32];
    const float *terms = (const float *)a.p[3 + counted];
    float s = 0.0f;
    for (long long r = threadIdx.x; r < N; r += blockDim.x)
        s += terms[r];
    s = block_sum(s, red);
    float count = ce_divisor(a, N, counted, red);
    if (threadIdx.x == 0)
        ((float *)a.p[0])[0] = count > 0.0f ? s / count : 0.0f;
}

/* Launch 1 of the gradient, one block: ws[0] = the count (an int).
 * a.p: dlogits, logits, targets, [count,] ws. */
FTC_INLINE void ce_count(FtcArgs a, long long N, int counted) {
    __shared__ float red[32];
    float count = ce_divisor(a, N, counted, red);
    if (threadIdx.x == 0)
        ((int *)a.p[3 + counted])[0] = (int)count;
}

/* Launch 2, one block a row: dlogits = (softmax - onehot(target)) * scale / count; an
 * ignored row gets zeros. dlogits may share the logits' bytes only row by row, which this
 * kernel allows: a row is fully read before its first write. */
FTC_INLINE void ce_grad(FtcArgs a, long long N, long long V, float scale, int dtx, int dtd, int counted,
                        int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * V;
    if (r >= N)
        return;
    int t = ((const int *)a.p[2])[r], count = ((const int *)a.p[3 + counted])[0];
    float lse = t < 0 ? 0.0f : row_lse(a.p[1], base, V, dtx, red, v8), dloss = scale * a.f[1];   /* a.f[1]: the loss scale */
    float g = count > 0 && t >= 0 ? dloss / (float)count : 0.0f;
    __syncthreads();   /* every read of the row is done before the first write */
    int w = v8 ? 8 : 1;
    for (long long j = threadIdx.x * w; j < V; j += blockDim.x * w) {
        float x[8];
        ldn(a.p[1], base + j, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < w; e++)
            x[e] = t < 0 ? 0.0f : (expf(x[e] - lse) - (j + e == t ? 1.0f : 0.0f)) * g;
        stn(a.p[0], base + j, dtd, v8, x);
    }
}

/* The fused linear + cross entropy with its gradient (linear_cross_entropy_grad) runs the
 * same row code on one chunk of logits at a time: chunk a.i[3] of C rows, whose logits
 * [C, V] (dtype dtx) the backend has formed at the start of the workspace a.p[pws];
 * `terms` bytes into it lie the N rows' loss terms, `count` bytes into it the count the
 * mean divides by. The targets are a.p[ptg], N of them; the step's target count is
 * a.p[pcnt] when pcnt >= 0, else the count is this micro-batch's rows not ignored. */

/* One row's gradient in place, (softmax - onehot(t)) * dloss / count: ce_grad's arithmetic
 * (the row is read whole before its first write). */
FTC_INLINE void ce_row_grad(void *lg, int dtx, long long base, long long V, int t, int count, float dloss,
                            float *red, float lse, int v8) {
    float g = count > 0 && t >= 0 ? dloss / (float)count : 0.0f;
    __syncthreads();   /* every read of the row is done before the first write */
    int w = v8 ? 8 : 1;
    for (long long j = threadIdx.x * w; j < V; j += blockDim.x * w) {
        float x[8];
        ldn(lg, base + j, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < w; e++)
            x[e] = t < 0 ? 0.0f : (expf(x[e] - lse) - (j + e == t ? 1.0f : 0.0f)) * g;
        stn(lg, base + j, dtx, v8, x);
    }
    (void)red;
}

/* Before the first chunk, one block: the count the mean divides by. */
FTC_INLINE void lce_count(FtcArgs a, long long N, int ptg, int pcnt, int pws, long long count) {
    __shared__ float red[32];
    float n = 0.0f;
    if (pcnt >= 0) {
        n = (float)((const int *)a.p[pcnt])[0];
    } else {
        const int *tg = (const int *)a.p[ptg];
        for (long long r = threadIdx.x; r < N; r += blockDim.x)
            n += tg[r] >= 0 ? 1.0f : 0.0f;
        n = block_sum(n, red);
    }
    if (threadIdx.x == 0)
        ((int *)((char *)a.p[pws] + count))[0] = (int)n;
}

/* After each chunk's product, one block a row of the chunk: its term, then the logits
 * become their gradient in place (scale times the run's loss scale a.f[1], over the count). */
FTC_INLINE void lce_step(FtcArgs a, long long C, long long V, float scale, int ptg, int pws,
                         long long terms, long long count, int dtx, int v8) {
    __shared__ float red[32];
    long long r = blockIdx.x, row = a.i[3] * C + r;
    if (r >= C)
        return;
    int t = ((const int *)a.p[ptg])[row];
    /* one pass for the row's logsumexp (its term), one for its gradient in place */
    float lse = row_lse(a.p[pws], r * V, V, dtx, red, v8);
    if (threadIdx.x == 0)
        ((float *)((char *)a.p[pws] + terms))[row] = t >= 0 && t < V ? lse - ldf(a.p[pws], r * V + t, dtx) : 0.0f;
    int n = ((const int *)((char *)a.p[pws] + count))[0];
    ce_row_grad(a.p[pws], dtx, r * V, V, t, n, scale * a.f[1], red, lse, v8);
}

/* After the last chunk, one block: the loss (a.p[0]), the N terms' sum over the count (0
 * when there is none): ce_mean's arithmetic. */
FTC_INLINE void lce_mean(FtcArgs a, long long N, int pws, long long terms, long long count) {
    __shared__ float red[32];
    const float *t = (const float *)((char *)a.p[pws] + terms);
    float s = 0.0f;
    for (long long r = threadIdx.x; r < N; r += blockDim.x)
        s += t[r];
    s = block_sum(s, red);
    float n = (float)((const int *)((char *)a.p[pws] + count))[0];
    if (threadIdx.x == 0)
        ((float *)a.p[0])[0] = n > 0.0f ? s / n : 0.0f;
}
