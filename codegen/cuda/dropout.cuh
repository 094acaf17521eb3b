/* dropout.cuh — dropout from a counter-based generator: element i of the instruction's
 * stream keeps its value when hash(stream, i) >= threshold, the hash being the cpu
 * backend's (splitmix64's finaliser over a Weyl sequence keyed by the stream). The
 * stream (a.i[2]) is keyed by the run's seed, the step, the micro-step and the site, so a
 * recompute, the cpu backend and a GPU draw the same mask. */

FTC_INLINE unsigned long long ftc_mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

FTC_INLINE unsigned int ftc_dropout_hash(unsigned long long seed, unsigned long long counter) {
    const unsigned long long weyl = 0x9e3779b97f4a7c15ull;
    unsigned long long key = ftc_mix64(seed + weyl);
    return (unsigned int)(ftc_mix64(key + counter * weyl) >> 32);
}

/* y = keep ? x / (1 - p) : 0, mask = keep.  a.p: y, mask u8, x. */
FTC_INLINE void dropout_fwd(FtcArgs a, long long n, unsigned int threshold, float scale, int dtx,
                            int dty, int v8) {
    unsigned long long stream = (unsigned long long)a.i[2];
    int w = v8 ? 8 : 1;   /* elements a thread a step (v8: ld8, st8, the mask's eight bytes at once) */
    for (long long i = ftc_gid() * w; i < n; i += ftc_gstride() * w) {
        float x[8], keep[8];
        ldn(a.p[2], i, dtx, v8, x);
        FTC_UNROLL
        for (int e = 0; e < w; e++) {
            keep[e] = ftc_dropout_hash(stream, (unsigned long long)(i + e)) >= threshold ? 1.0f : 0.0f;
            x[e] = keep[e] != 0.0f ? x[e] * scale : 0.0f;
        }
        stn(a.p[1], i, FTC_U8, v8, keep);
        stn(a.p[0], i, dty, v8, x);
    }
}
