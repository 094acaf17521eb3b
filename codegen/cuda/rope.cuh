/* rope.cuh — rotary position embedding over x [B, S, H, D]: every (i, i + d/2) pair of the
 * first d dims of a head rotated by the angle p * inv[i], p the row's position id (or its
 * index s); dims from d on pass through. The angles' cos and sin come from the table
 * rope_table writes once a step (f32 [S, 2, d/2]: the cos row, then the sin row, of each
 * position, times mscale), so the rotation itself is fp32 multiply-adds and no double. One
 * thread a pair or a passed-through element (eight pairs where every dim rotates), so the
 * output may share the input's bytes. */

/* The table: position s's angles p * inv[i], inv[] the frequencies the cpu backend computes
 * (cpu_rope_freqs: the generator writes them into the kernel), their cos and sin in double
 * rounded once to fp32, times mscale (YaRN's attention factor) — the bits cpu_rope_table
 * writes. The only double arithmetic of a rope: S * d/2 angles a step, not B * S * H * d/2.
 * a.p: out. */
FTC_INLINE void rope_table(FtcArgs a, long long S, int half, const float *inv, float mscale) {
    float *out = (float *)a.p[0];
    for (long long idx = ftc_gid(); idx < S * half; idx += ftc_gstride()) {
        int i = (int)(idx % half);
        long long s = idx / half;
        float angle = (float)s * inv[i];
        out[s * 2 * half + i] = (float)cos((double)angle) * mscale;
        out[s * 2 * half + half + i] = (float)sin((double)angle) * mscale;
    }
}

/* a.p: out, x, positions i32 [B, S] when has_pos, the table.  sign +1 rotates (forward), -1
 * rotates back (the backward of dy). Position ids lie in [0, S): the training loop writes
 * them so. */
FTC_INLINE void rope(FtcArgs a, long long B, long long S, long long H, int D, int d, float sign,
                     int has_pos, int dtx, int dty, int v8) {
    int half = d / 2, width = half + (D - d);   /* a row's work items: pairs, then the rest */
    const float *tab = (const float *)a.p[3];
    if (v8) {   /* every dim rotates, eight pairs a thread: x[i..i+8) and x[i+half..i+half+8) */
        long long items = B * S * H * (half / 8);
        for (long long idx = ftc_gid(); idx < items; idx += ftc_gstride()) {
            int i = (int)(idx % (half / 8)) * 8;
            long long row = idx / (half / 8), bs = row / H, base = row * D;
            long long pos = has_pos ? ((const int *)a.p[2])[bs] : bs % S;
            float x1[8], x2[8], c[8], sn[8], y1[8], y2[8];
            ld8(a.p[1], base + i, dtx, x1);
            ld8(a.p[1], base + i + half, dtx, x2);
            ld8(tab, pos * 2 * half + i, FTC_F32, c);
            ld8(tab, pos * 2 * half + half + i, FTC_F32, sn);
            FTC_UNROLL
            for (int e = 0; e < 8; e++) {
                float s = sn[e] * sign;
                y1[e] = x1[e] * c[e] - x2[e] * s;
                y2[e] = x2[e] * c[e] + x1[e] * s;
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
        long long pos = has_pos ? ((const int *)a.p[2])[bs] : bs % S;
        float c = tab[pos * 2 * half + i], sn = tab[pos * 2 * half + half + i] * sign;
        float x1 = ldf(a.p[1], base + i, dtx), x2 = ldf(a.p[1], base + i + half, dtx);
        stf(a.p[0], base + i, dty, x1 * c - x2 * sn);
        stf(a.p[0], base + i + half, dty, x2 * c + x1 * sn);
    }
}
