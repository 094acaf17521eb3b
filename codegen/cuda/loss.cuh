/* loss.cuh — cross entropy over logits [N, V] with i32 targets (a negative target is
 * ignored, as PyTorch's ignore_index): the mean over the other rows of
 * logsumexp(row) - row[target], and its gradient (softmax - onehot) * scale / count, scale
 * times the run's loss scale (a.f[1]).
 * A row's logsumexp is its max plus the log of the fp32 sum of exp(x - max) over one
 * block; the fp32 softmax is never stored: each row is read, reduced, and written as
 * the gradient in the logits' dtype. */

/* Launch 1 of the loss, one block a row: ws[r] = the row's loss term (0 when ignored).
 * a.p: loss, logits, targets, ws. */
FTC_INLINE void ce_rows(FtcArgs a, long long N, long long V, int dtx) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * V;
    if (r >= N)
        return;
    int t = ((const int *)a.p[2])[r];
    float mx = -FTC_INF;
    for (long long j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, ldf(a.p[1], base + j, dtx));
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (long long j = threadIdx.x; j < V; j += blockDim.x)
        sum += expf(ldf(a.p[1], base + j, dtx) - mx);
    sum = block_sum(sum, red);
    if (threadIdx.x == 0)
        ((float *)a.p[3])[r] = t >= 0 && t < V ? mx + logf(sum) - ldf(a.p[1], base + t, dtx) : 0.0f;
}

/* Launch 2, one block: loss = sum of the row terms / the rows not ignored. */
FTC_INLINE void ce_mean(FtcArgs a, long long N) {
    __shared__ float red[32];
    const float *terms = (const float *)a.p[3];
    const int *tg = (const int *)a.p[2];
    float s = 0.0f, count = 0.0f;
    for (long long r = threadIdx.x; r < N; r += blockDim.x) {
        s += terms[r];
        count += tg[r] >= 0 ? 1.0f : 0.0f;
    }
    s = block_sum(s, red);
    count = block_sum(count, red);
    if (threadIdx.x == 0)
        ((float *)a.p[0])[0] = count > 0.0f ? s / count : 0.0f;
}

/* Launch 1 of the gradient, one block: ws[0] = the rows not ignored (an int).
 * a.p: dlogits, logits, targets, ws. */
FTC_INLINE void ce_count(FtcArgs a, long long N) {
    __shared__ float red[32];
    const int *tg = (const int *)a.p[2];
    float count = 0.0f;
    for (long long r = threadIdx.x; r < N; r += blockDim.x)
        count += tg[r] >= 0 ? 1.0f : 0.0f;
    count = block_sum(count, red);
    if (threadIdx.x == 0)
        ((int *)a.p[3])[0] = (int)count;
}

/* Launch 2, one block a row: dlogits = (softmax - onehot(target)) * scale / count; an
 * ignored row gets zeros. dlogits may share the logits' bytes only row by row, which this
 * kernel allows: a row is fully read before its first write. */
FTC_INLINE void ce_grad(FtcArgs a, long long N, long long V, float scale, int dtx, int dtd) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * V;
    if (r >= N)
        return;
    int t = ((const int *)a.p[2])[r], count = ((const int *)a.p[3])[0];
    if (t < 0) {
        for (long long j = threadIdx.x; j < V; j += blockDim.x)
            stf(a.p[0], base + j, dtd, 0.0f);
        return;
    }
    float mx = -FTC_INF;
    for (long long j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, ldf(a.p[1], base + j, dtx));
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (long long j = threadIdx.x; j < V; j += blockDim.x)
        sum += expf(ldf(a.p[1], base + j, dtx) - mx);
    sum = block_sum(sum, red);
    float lse = mx + logf(sum), dloss = (float)((double)scale * a.f[1]);   /* a.f[1]: the loss scale */
    float g = count ? dloss / (float)count : 0.0f;
    __syncthreads();   /* every read of the row is done before the first write */
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(ldf(a.p[1], base + j, dtx) - lse);
        stf(a.p[0], base + j, dtd, (p - (j == t ? 1.0f : 0.0f)) * g);
    }
}
