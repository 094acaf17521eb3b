/* loss.cuh — cross entropy over logits [N, V] with i32 targets (a negative target is
 * ignored, as PyTorch's ignore_index): the sum over the other rows of
 * logsumexp(row) - row[target], divided by the count of trained targets of the whole
 * optimizer step (the count operand, when `counted`: each micro-step then holds its share
 * of the step's mean, as transformers' num_items_in_batch) or else by this micro-batch's
 * own rows not ignored; and its gradient (softmax - onehot) * scale / count, scale times
 * the run's loss scale (a.f[1]). A row's
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

/* Launch 1 of the loss, one block a row: ws[r] = the row's loss term (0 when ignored).
 * a.p: loss, logits, targets, [count,] ws. */
FTC_INLINE void ce_rows(FtcArgs a, long long N, long long V, int dtx, int counted) {
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
        ((float *)a.p[3 + counted])[r] = t >= 0 && t < V ? mx + logf(sum) - ldf(a.p[1], base + t, dtx) : 0.0f;
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
FTC_INLINE void ce_grad(FtcArgs a, long long N, long long V, float scale, int dtx, int dtd, int counted) {
    __shared__ float red[32];
    long long r = blockIdx.x, base = r * V;
    if (r >= N)
        return;
    int t = ((const int *)a.p[2])[r], count = ((const int *)a.p[3 + counted])[0];
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
    float g = count > 0 ? dloss / (float)count : 0.0f;
    __syncthreads();   /* every read of the row is done before the first write */
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(ldf(a.p[1], base + j, dtx) - lse);
        stf(a.p[0], base + j, dtd, (p - (j == t ? 1.0f : 0.0f)) * g);
    }
}
