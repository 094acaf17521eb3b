/* rope.cuh — rotary position embedding over x [B, S, H, D]: every (i, i + d/2) pair of the
 * first d dims of a head rotated by the angle p * inv[i], p the row's position id (or its
 * index s), inv[] the frequencies the cpu backend computes (cpu_rope_freqs: the generator
 * writes them into the kernel as a table), the angle's cos and sin in double, rounded once,
 * times mscale (YaRN's attention factor); dims from d on pass through. One thread a pair
 * or a passed-through element, so the output may share the input's bytes. */

/* a.p: out, x, positions i32 [B, S] when has_pos.  sign +1 rotates (forward), -1 rotates
 * back (the backward of dy). */
FTC_INLINE void rope(FtcArgs a, long long B, long long S, long long H, int D, int d, const float *inv,
                     float mscale, float sign, int has_pos, int dtx, int dty, int v8) {
    int half = d / 2, width = half + (D - d);   /* a row's work items: pairs, then the rest */
    if (v8) {   /* every dim rotates, eight pairs a thread: x[i..i+8) and x[i+half..i+half+8) */
        long long items = B * S * H * (half / 8);
        for (long long idx = ftc_gid(); idx < items; idx += ftc_gstride()) {
            int i = (int)(idx % (half / 8)) * 8;
            long long row = idx / (half / 8), bs = row / H, base = row * D;
            float pos = has_pos ? (float)((const int *)a.p[2])[bs] : (float)(bs % S);
            float x1[8], x2[8], y1[8], y2[8];
            ld8(a.p[1], base + i, dtx, x1);
            ld8(a.p[1], base + i + half, dtx, x2);
            FTC_UNROLL
            for (int e = 0; e < 8; e++) {
                float angle = pos * inv[i + e];
                float c = (float)cos((double)angle) * mscale, sn = (float)sin((double)angle) * mscale * sign;
                y1[e] = x1[e] * c - x2[e] * sn;
                y2[e] = x2[e] * c + x1[e] * sn;
            }
            st8(a.p[0], base + i, dty, y1);
            st8(a.p[0], base + i + half, dty, y2);
        }
        return;
    }
    long long items = B * S * H * width;
    for (long long idx = ftc_gid(); idx < items; idx += ftc_gstride()) {
        int i = (int)(idx % width);
        long long row = idx / width, bs = row / H, base = row * D;
        if (i >= half) {   /* past the rotary dims */
            long long at = base + d + (i - half);
            stf(a.p[0], at, dty, ldf(a.p[1], at, dtx));
            continue;
        }
        float pos = has_pos ? (float)((const int *)a.p[2])[bs] : (float)(bs % S);
        float angle = pos * inv[i];
        float c = (float)cos((double)angle) * mscale, sn = (float)sin((double)angle) * mscale * sign;
        float x1 = ldf(a.p[1], base + i, dtx), x2 = ldf(a.p[1], base + i + half, dtx);
        stf(a.p[0], base + i, dty, x1 * c - x2 * sn);
        stf(a.p[0], base + i + half, dty, x2 * c + x1 * sn);
    }
}
