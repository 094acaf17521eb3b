/* rope.cuh — rotary position embedding over x [B, S, H, D]: every (i, i + D/2) pair of
 * a head rotated by the angle p * inv_freq[i], inv_freq[i] = 1 / theta^(2i/D), p the row's
 * position id (or its index s), computed exactly as the cpu backend does (fp32
 * frequencies, the angle's cos and sin in double, rounded once). One thread a pair, so
 * the output may share the input's bytes. */

/* a.p: out, x, positions i32 [B, S] when has_pos.  sign +1 rotates (forward), -1 rotates
 * back (the backward of dy). */
FTC_INLINE void rope(FtcArgs a, long long B, long long S, long long H, int D, float theta, float sign,
                     int has_pos, int dtx, int dty) {
    int half = D / 2;
    long long pairs = B * S * H * half;
    for (long long idx = ftc_gid(); idx < pairs; idx += ftc_gstride()) {
        int i = (int)(idx % half);
        long long row = idx / half, bs = row / H, base = row * D;
        float pos = has_pos ? (float)((const int *)a.p[2])[bs] : (float)(bs % S);
        float e = (float)(2 * i) / (float)D;
        float inv = 1.0f / (float)pow((double)theta, (double)e);
        float angle = pos * inv;
        float c = (float)cos((double)angle), sn = (float)sin((double)angle) * sign;
        float x1 = ldf(a.p[1], base + i, dtx), x2 = ldf(a.p[1], base + i + half, dtx);
        stf(a.p[0], base + i, dty, x1 * c - x2 * sn);
        stf(a.p[0], base + i + half, dty, x2 * c + x1 * sn);
    }
}
