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
                            int dty) {
    unsigned long long stream = (unsigned long long)a.i[2];
    for (long long i = ftc_gid(); i < n; i += ftc_gstride()) {
        int keep = ftc_dropout_hash(stream, (unsigned long long)i) >= threshold;
        ((unsigned char *)a.p[1])[i] = (unsigned char)keep;
        stf(a.p[0], i, dty, keep ? ldf(a.p[2], i, dtx) * scale : 0.0f);
    }
}
