/* optim.cuh — the gradients' global reduction and the parameter updates, one thread an
 * element, with the cpu backend's exact arithmetic (torch's fp32 AdamW: scalars formed in
 * double and rounded once, the moment update as torch's lerp): emulated runs are bitwise
 * the cpu backend's. The learning rate is a.f[0], the loss scale a.f[1] and the step a.i[0]
 * (1-based), so a schedule needs no new kernel. Every update reads the step's gradient
 * factor (grad_factor): its gradient times factor[0], nothing done when factor[1] is set
 * (a gradient is not finite: the step is skipped). The _group forms update many tensors
 * in one launch (the plan's group=N). */

/* Launch 1 of grad_sumsq, nb = op_sumsq_blocks(n) blocks: block b's partial sum of squares
 * and count of non-finite elements into ws[b] and ws[nb + b].  a.p: stats, grad, ws. */
FTC_INLINE void grad_sumsq_part(FtcArgs a, long long n, long long nb, int dtg) {
    __shared__ float red[32];
    if (blockIdx.x >= nb)
        return;
    float s = 0.0f, bad = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nb * blockDim.x) {
        float g = ldf(a.p[1], i, dtg);
        s += g * g;
        bad += isfinite(g) ? 0.0f : 1.0f;
    }
    s = block_sum(s, red);
    bad = block_sum(bad, red);
    if (threadIdx.x == 0) {
        float *ws = (float *)a.p[2];
        ws[blockIdx.x] = s;
        ws[nb + blockIdx.x] = bad;
    }
}

/* Launch 2, one block: the nb partials in a fixed order, added into (or, for the first
 * gradient, assigned to) stats. */
FTC_INLINE void grad_sumsq_final(FtcArgs a, long long nb, int update) {
    __shared__ float red[32];
    const float *ws = (const float *)a.p[2];
    float s = 0.0f, bad = 0.0f;
    for (long long b = threadIdx.x; b < nb; b += blockDim.x) {
        s += ws[b];
        bad += ws[nb + b];
    }
    s = block_sum(s, red);
    bad = block_sum(bad, red);
    if (threadIdx.x == 0) {
        float *st = (float *)a.p[0];
        st[0] = (update ? st[0] : 0.0f) + s;
        st[1] = (update ? st[1] : 0.0f) + bad;
    }
}

/* One thread: factor = (clip coefficient / loss scale, skip) from stats, as the cpu
 * backend's cpu_grad_factor.  a.p: factor, stats. */
FTC_INLINE void grad_factor(FtcArgs a, float clip) {
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    const float *st = (const float *)a.p[1];
    float *fc = (float *)a.p[0];
    float scale = (float)a.f[1], norm = sqrtf(st[0]) / scale, coef = 1.0f;
    if (clip > 0.0f) {
        coef = clip / (norm + 1e-6f);
        coef = coef < 1.0f ? coef : 1.0f;
    }
    fc[0] = coef / scale;
    fc[1] = st[1] != 0.0f || !isfinite(st[0]) ? 1.0f : 0.0f;
}

/* AdamW's per-step scalars, formed once per thread. */
typedef struct AdamwStep {
    float decay, w1, b2, c2, neg_step, bias_c2_sqrt, eps;
    int small;
} AdamwStep;

FTC_INLINE AdamwStep adamw_step(double lr, long long t, double beta1, double beta2, double eps,
                                double weight_decay) {
    AdamwStep s;
    s.decay = (float)(1.0 - lr * weight_decay);
    s.w1 = (float)(1.0 - beta1), s.b2 = (float)beta2, s.c2 = (float)(1.0 - beta2);
    s.neg_step = (float)(-(lr / (1.0 - pow(beta1, (double)t))));
    s.bias_c2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
    s.eps = (float)eps;
    s.small = fabsf(s.w1) < 0.5f;
    return s;
}

/* What AdamW's fourth output is: none, the fp32 master copy, or the weight's Kahan
 * compensation (bf16_pure: no master). */
enum { ADAMW_PLAIN = 0, ADAMW_MASTER = 1, ADAMW_KAHAN = 2 };

/* Element i of one tensor: w = the master copy when there is one (fp32), else the weight
 * itself; the weight then takes w's rounding. With Kahan compensation the update joins the
 * compensation c, the weight becomes (old + c) rounded and c keeps what the rounding lost,
 * as the cpu backend's cpu_kahan. p: param, m, v, [master | kahan,] grad, factor; f the
 * factor's value. */
FTC_INLINE void adamw_at(const AdamwStep *s, void *const *p, long long i, int mode, float f,
                         int dtp, int dtg, int dtm) {
    void *w = mode == ADAMW_MASTER ? p[3] : p[0];
    int dtw = mode == ADAMW_MASTER ? FTC_F32 : dtp;
    float g = ldf(p[mode ? 4 : 3], i, dtg) * f, mi = ldf(p[1], i, dtm), vi = ldf(p[2], i, dtm);
    float x0 = ldf(w, i, dtw), x = x0 * s->decay;
    mi = s->small ? fmaf(s->w1, g - mi, mi) : fmaf(s->w1 - 1.0f, g - mi, g);
    vi = vi * s->b2 + s->c2 * g * g;
    float denom = sqrtf(vi) / s->bias_c2_sqrt + s->eps;
    x = x + s->neg_step * mi / denom;
    if (mode == ADAMW_KAHAN) {
        float c = ldf(p[3], i, dtp) + (x - x0), t = rnd(x0 + c, dtp);
        stf(p[3], i, dtp, c + (x0 - t));
        x = t;
    }
    stf(w, i, dtw, x);
    stf(p[1], i, dtm, mi);
    stf(p[2], i, dtm, vi);
    if (mode == ADAMW_MASTER)
        stf(p[0], i, dtp, x);
}

/* The factor operand of an update: after the outputs and the gradient. */
FTC_INLINE const float *factor_of(void *const *p, int nout) { return (const float *)p[nout + 1]; }

/* A skipped update still writes its weight output: the master copy's rounding, as an
 * update would (the output may be a staging buffer a copy takes to the device). Without
 * a master the weight (and a Kahan compensation) is updated in place and stays as it
 * was. p[0]: the weight, p[wm]: its master. */
FTC_INLINE void skip_at(void *const *p, int wm, long long i, int dtp) { stf(p[0], i, dtp, ldf(p[wm], i, FTC_F32)); }

/* AdamW over one tensor of n elements.  a.p: param, m, v, [master | kahan,] grad, factor. */
FTC_INLINE void adamw(FtcArgs a, long long n, int mode, double beta1, double beta2, double eps,
                      double weight_decay, int dtp, int dtg, int dtm) {
    const float *fc = factor_of(a.p, mode ? 4 : 3);
    if (fc[1] != 0.0f) {
        for (long long i = ftc_gid(); mode == ADAMW_MASTER && i < n; i += ftc_gstride())
            skip_at(a.p, 3, i, dtp);
        return;
    }
    AdamwStep s = adamw_step(a.f[0], a.i[0], beta1, beta2, eps, weight_decay);
    for (long long i = ftc_gid(); i < n; i += ftc_gstride())
        adamw_at(&s, a.p, i, mode, fc[0], dtp, dtg, dtm);
}

/* The tensors of a group in one launch: their elements laid end to end, tensor k's at
 * [start[k], start[k + 1]) of the launch's range, its buffers ga->p[k]. A thread's
 * elements only grow, so the tensor it is in is found by walking forward. */
FTC_INLINE void adamw_group(const FtcGroupArgs *ga, const long long *start, int count, int mode,
                            double beta1, double beta2, double eps, double weight_decay, int dtp,
                            int dtg, int dtm) {
    AdamwStep s = adamw_step(ga->f[0], ga->i[0], beta1, beta2, eps, weight_decay);
    int k = 0;
    for (long long i = ftc_gid(); i < start[count]; i += ftc_gstride()) {
        while (i >= start[k + 1])
            k++;
        const float *fc = factor_of(ga->p[k], mode ? 4 : 3);
        if (fc[1] == 0.0f)
            adamw_at(&s, ga->p[k], i - start[k], mode, fc[0], dtp, dtg, dtm);
        else if (mode == ADAMW_MASTER)
            skip_at(ga->p[k], 3, i - start[k], dtp);
    }
}

/* Element i: w -= lr (g f).  p: param, [master,] grad, factor. */
FTC_INLINE void sgd_at(float lr, void *const *p, long long i, int master, float f, int dtp, int dtg) {
    void *w = master ? p[1] : p[0];
    int dtw = master ? FTC_F32 : dtp;
    float x = ldf(w, i, dtw) - lr * (ldf(p[master ? 2 : 1], i, dtg) * f);
    stf(w, i, dtw, x);
    if (master)
        stf(p[0], i, dtp, x);
}

/* SGD over one tensor.  a.p: param, [master,] grad, factor. */
FTC_INLINE void sgd(FtcArgs a, long long n, int master, int dtp, int dtg) {
    const float *fc = factor_of(a.p, master ? 2 : 1);
    if (fc[1] != 0.0f) {
        for (long long i = ftc_gid(); master && i < n; i += ftc_gstride())
            skip_at(a.p, 1, i, dtp);
        return;
    }
    for (long long i = ftc_gid(); i < n; i += ftc_gstride())
        sgd_at((float)a.f[0], a.p, i, master, fc[0], dtp, dtg);
}

FTC_INLINE void sgd_group(const FtcGroupArgs *ga, const long long *start, int count, int master,
                          int dtp, int dtg) {
    int k = 0;
    for (long long i = ftc_gid(); i < start[count]; i += ftc_gstride()) {
        while (i >= start[k + 1])
            k++;
        const float *fc = factor_of(ga->p[k], master ? 2 : 1);
        if (fc[1] == 0.0f)
            sgd_at((float)ga->f[0], ga->p[k], i - start[k], master, fc[0], dtp, dtg);
        else if (master)
            skip_at(ga->p[k], 1, i - start[k], dtp);
    }
}
