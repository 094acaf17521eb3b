/* movement.cuh — elements rearranged: transpose of two dims of a tensor of up to six, a
 * slice along one dim and its gradient, and tensors joined along one dim; one thread an
 * output element, reading the input element the cpu backend reads. A tensor is seen as
 * (outer, dim, inner) around the dim cut or joined. */

/* out[..., i, ..., j, ...] = x[..., j, ..., i, ...] for dims da and db.  The shape is the
 * input's, padded with ones to six dims at the front.  a.p: out, x. */
FTC_INLINE void transpose(FtcArgs a, long long s0, long long s1, long long s2, long long s3,
                          long long s4, long long s5, int da, int db, int dtx, int dty) {
    long long in_shape[6] = {s0, s1, s2, s3, s4, s5}, out_shape[6], stride[6];
    for (int d = 0; d < 6; d++)
        out_shape[d] = in_shape[d == da ? db : d == db ? da : d];
    stride[5] = 1;
    for (int d = 4; d >= 0; d--)
        stride[d] = stride[d + 1] * in_shape[d + 1];
    long long n = s0 * s1 * s2 * s3 * s4 * s5;
    for (long long o = ftc_gid(); o < n; o += ftc_gstride()) {
        long long rest = o, src = 0;
        for (int d = 5; d >= 0; d--) {
            long long idx = rest % out_shape[d];
            rest /= out_shape[d];
            src += idx * stride[d == da ? db : d == db ? da : d];
        }
        stf(a.p[0], o, dty, ldf(a.p[1], src, dtx));
    }
}

/* out[o, j, i] = x[o, start + j, i] for j < size.  a.p: out, x. */
FTC_INLINE void slice_fwd(FtcArgs a, long long outer, long long dim, long long inner, long long start,
                          long long size, int dtx, int dty) {
    long long n = outer * size * inner;
    for (long long e = ftc_gid(); e < n; e += ftc_gstride()) {
        long long i = e % inner, j = (e / inner) % size, o = e / (inner * size);
        stf(a.p[0], e, dty, ldf(a.p[1], (o * dim + start + j) * inner + i, dtx));
    }
}

/* dx[o, j, i] = dy[o, j - start, i] inside the range, 0 outside; mode 1 (an update, or a
 * sum so far in dx's own bytes): the range alone gets dy added; mode 2: dx = acc + that.
 * a.p: dx, dy, acc (mode 2). */
FTC_INLINE void slice_bwd(FtcArgs a, long long outer, long long dim, long long inner, long long start,
                          long long size, int mode, int dtdx, int dtdy) {
    bool update = mode == 1;
    long long n = outer * (update ? size : dim) * inner, span = update ? size : dim;
    for (long long e = ftc_gid(); e < n; e += ftc_gstride()) {
        long long i = e % inner, j = (e / inner) % span, o = e / (inner * span);
        long long d = update ? start + j : j, at = (o * dim + d) * inner + i;
        bool in = d >= start && d < start + size;
        float g = in ? ldf(a.p[1], (o * size + d - start) * inner + i, dtdy) : 0.0f;
        stf(a.p[0], at, dtdx, update ? ldf(a.p[0], at, dtdx) + g : mode == 2 ? ldf(a.p[2], at, dtdx) + g : g);
    }
}

/* out[o, j, i] from the input whose range along the dim holds j; `ends` the running sums of
 * the inputs' sizes along it (up to six).  a.p: out, x0, x1, ... */
FTC_INLINE void concat_fwd(FtcArgs a, long long outer, long long inner, int count, long long e0,
                           long long e1, long long e2, long long e3, long long e4, long long e5,
                           int dt) {
    long long ends[6] = {e0, e1, e2, e3, e4, e5}, dim = ends[count - 1];
    long long n = outer * dim * inner;
    for (long long e = ftc_gid(); e < n; e += ftc_gstride()) {
        long long i = e % inner, j = (e / inner) % dim, o = e / (inner * dim);
        int k = 0;
        while (j >= ends[k])
            k++;
        long long begin = k ? ends[k - 1] : 0, size = ends[k] - begin;
        stf(a.p[0], e, dt, ldf(a.p[1 + k], (o * size + j - begin) * inner + i, dt));
    }
}
