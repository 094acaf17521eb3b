/* rope.cuh — rotary position embedding over x [B, S, H, D]: every (i, i + D/2) pair of
 * a head rotated by the angle s * inv_freq[i], inv_freq[i] = 1 / theta^(2i/D), computed
 * exactly as the cpu backend does (fp32 frequencies, the angle's cos and sin in double,
 * rounded once). One thread a pair, so the output may share the input's bytes. */

/* a.p: out, x.  sign +1 rotates (forward), -1 rotates back (the backward of dy). */
FTC_INLINE void rope(FtcArgs a, long long B, long long S, long long H, int D, float theta, float sign,
                     int dtx, int dty) {
    int half = D / 2;
    long long pairs = B * S * H * half;
    for (long long idx = ftc_gid(); idx < pairs; idx += ftc_gstride()) {
        int i = (int)(idx % half);
        long long row = idx / half, s = (row / H) % S, base = row * D;
        float e = (float)(2 * i) / (float)D;
        float inv = 1.0f / (float)pow((double)theta, (double)e);
        float angle = (float)s * inv;
        float c = (float)cos((double)angle), sn = (float)sin((double)angle) * sign;
        float x1 = ldf(a.p[1], base + i, dtx), x2 = ldf(a.p[1], base + i + half, dtx);
        stf(a.p[0], base + i, dty, x1 * c - x2 * sn);
        stf(a.p[0], base + i + half, dty, x2 * c + x1 * sn);
    }
}
