/* movement.cuh — elements rearranged: transpose of two dims of a tensor of up to six,
 * one thread an output element, reading the input element the cpu backend reads. */

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
