/* optim.cuh — parameter updates, one thread an element, with the cpu backend's exact
 * arithmetic (torch's fp32 AdamW: scalars formed in double and rounded once, the moment
 * update as torch's lerp): emulated runs are bitwise the cpu backend's. The learning
 * rate is a.f[0] and the step a.i[0] (1-based), so a schedule needs no new kernel. */

/* AdamW on w = the master copy when there is one, else the weight itself; the weight
 * then takes w's rounding. a.p: param, m, v, [master,] grad. */
FTC_INLINE void adamw(FtcArgs a, long long n, int master, double beta1, double beta2, double eps,
                      double weight_decay, int dtp, int dtg, int dtm) {
    double lr = a.f[0];
    long long t = a.i[0];
    float decay = (float)(1.0 - lr * weight_decay);
    float w1 = (float)(1.0 - beta1), b2 = (float)beta2, c2 = (float)(1.0 - beta2);
    float neg_step = (float)(-(lr / (1.0 - pow(beta1, (double)t))));
    float bias_c2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
    float epsf = (float)eps;
    int small = fabsf(w1) < 0.5f;
    void *w = master ? a.p[3] : a.p[0];
    int dtw = master ? FTC_F32 : dtp;
    const void *grad = a.p[master ? 4 : 3];
    for (long long i = ftc_gid(); i < n; i += ftc_gstride()) {
        float g = ldf(grad, i, dtg), mi = ldf(a.p[1], i, dtm), vi = ldf(a.p[2], i, dtm);
        float p = ldf(w, i, dtw) * decay;
        mi = small ? fmaf(w1, g - mi, mi) : fmaf(w1 - 1.0f, g - mi, g);
        vi = vi * b2 + c2 * g * g;
        float denom = sqrtf(vi) / bias_c2_sqrt + epsf;
        p = p + neg_step * mi / denom;
        stf(w, i, dtw, p);
        stf(a.p[1], i, dtm, mi);
        stf(a.p[2], i, dtm, vi);
        if (master)
            stf(a.p[0], i, dtp, p);
    }
}

/* w -= lr g.  a.p: param, [master,] grad. */
FTC_INLINE void sgd(FtcArgs a, long long n, int master, int dtp, int dtg) {
    float lr = (float)a.f[0];
    void *w = master ? a.p[1] : a.p[0];
    int dtw = master ? FTC_F32 : dtp;
    const void *grad = a.p[master ? 2 : 1];
    for (long long i = ftc_gid(); i < n; i += ftc_gstride()) {
        float p = ldf(w, i, dtw) - lr * ldf(grad, i, dtg);
        stf(w, i, dtw, p);
        if (master)
            stf(a.p[0], i, dtp, p);
    }
}
