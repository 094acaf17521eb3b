/* optim.cuh — the gradients' global reduction and the parameter updates, one thread an
 * element, with the cpu backend's exact arithmetic (torch's fp32 AdamW: scalars formed in
 * double and rounded once, the moment update as torch's lerp): emulated runs are bitwise
 * the cpu backend's. The learning rate is a.f[0], the loss scale a.f[1], the step's scalars
 * a.f[2..4] (formed on the host: no kernel computes in double), the step a.i[0] (1-based), so
 * a schedule needs no new kernel; AdamW8bit follows bitsandbytes' own
 * arithmetic instead (adam8.h). Every update reads the step's gradient
 * factor (grad_factor): its gradient times factor[0], nothing done when factor[1] is set
 * (a gradient is not finite: the step is skipped). The _group forms update many tensors
 * in one launch (the plan's group=N). */

/* Launch 1 of grad_sumsq, nb = op_sumsq_blocks(n) blocks: block b's partial sum of squares
 * and count of non-finite elements into ws[b] and ws[nb + b].  a.p: stats, grad, ws. */
FTC_INLINE void grad_sumsq_part(FtcArgs a, long long n, long long nb, int dtg, int v8) {
    __shared__ float red[32];
    if (blockIdx.x >= nb)
        return;
    float s = 0.0f, bad = 0.0f;
    int w = v8 ? 8 : 1;   /* elements a thread a step */
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * w; i < n; i += nb * blockDim.x * w) {
        float g[8];
        ldn(a.p[1], i, dtg, v8, g);
        FTC_UNROLL
        for (int e = 0; e < w; e++) {
            s += g[e] * g[e];
            bad += isfinite(g[e]) ? 0.0f : 1.0f;
        }
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
 * backend's cpu_grad_factor.  a.p: factor, stats (NULL: none seen, the updates inside
 * backward: 1 / loss scale, no skip). */
FTC_INLINE void grad_factor(FtcArgs a, float clip) {
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    const float none[2] = {0.0f, 0.0f};
    const float *st = a.p[1] ? (const float *)a.p[1] : none;
    float *fc = (float *)a.p[0];
    float scale = a.f[1], norm = sqrtf(st[0]) / scale, coef = 1.0f;
    if (clip > 0.0f) {
        coef = clip / (norm + 1e-6f);
        coef = coef < 1.0f ? coef : 1.0f;
    }
    fc[0] = coef / scale;
    fc[1] = st[1] != 0.0f || !isfinite(st[0]) ? 1.0f : 0.0f;
}

/* AdamW's per-step scalars: the step's (decay, step, bias correction) from the host, which
 * forms them in double as the cpu backend does (f[2..4]); the rest constants. */
typedef struct AdamwStep {
    float decay, w1, b2, c2, neg_step, bias_c2_sqrt, eps;
    int small;
} AdamwStep;

FTC_INLINE AdamwStep adamw_step(const float *f, double beta1, double beta2, double eps) {
    AdamwStep s;
    s.decay = f[2], s.neg_step = f[3], s.bias_c2_sqrt = f[4];
    s.w1 = (float)(1.0 - beta1), s.b2 = (float)beta2, s.c2 = (float)(1.0 - beta2);
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
                         int dtp, int dtg, int dtm, int v8) {
    void *w = mode == ADAMW_MASTER ? p[3] : p[0];
    int dtw = mode == ADAMW_MASTER ? FTC_F32 : dtp, n = v8 ? 8 : 1;
    float g[8], mi[8], vi[8], x0[8], x[8], c[8];   /* eight elements from i (v8), or one */
    ldn(p[mode ? 4 : 3], i, dtg, v8, g);
    ldn(p[1], i, dtm, v8, mi);
    ldn(p[2], i, dtm, v8, vi);
    ldn(w, i, dtw, v8, x0);
    if (mode == ADAMW_KAHAN)
        ldn(p[3], i, dtp, v8, c);
    FTC_UNROLL
    for (int e = 0; e < n; e++) {
        float ge = g[e] * f;
        x[e] = x0[e] * s->decay;
        mi[e] = s->small ? fmaf(s->w1, ge - mi[e], mi[e]) : fmaf(s->w1 - 1.0f, ge - mi[e], ge);
        vi[e] = vi[e] * s->b2 + s->c2 * ge * ge;
        float denom = sqrtf(vi[e]) / s->bias_c2_sqrt + s->eps;
        x[e] = x[e] + s->neg_step * mi[e] / denom;
        if (mode == ADAMW_KAHAN) {
            float ce = c[e] + (x[e] - x0[e]), t = rnd(x0[e] + ce, dtp);
            c[e] = ce + (x0[e] - t);
            x[e] = t;
        }
    }
    if (mode == ADAMW_KAHAN)
        stn(p[3], i, dtp, v8, c);
    stn(w, i, dtw, v8, x);
    stn(p[1], i, dtm, v8, mi);
    stn(p[2], i, dtm, v8, vi);
    if (mode == ADAMW_MASTER)
        stn(p[0], i, dtp, v8, x);
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
                      double weight_decay, int dtp, int dtg, int dtm, int v8) {
    const float *fc = factor_of(a.p, mode ? 4 : 3);
    if (fc[1] != 0.0f) {
        for (long long i = ftc_gid(); mode == ADAMW_MASTER && i < n; i += ftc_gstride())
            skip_at(a.p, 3, i, dtp);
        return;
    }
    AdamwStep s = adamw_step(a.f, beta1, beta2, eps);
    (void)weight_decay;
    int w = v8 ? 8 : 1;   /* elements a thread a step */
    for (long long i = ftc_gid() * w; i < n; i += ftc_gstride() * w)
        adamw_at(&s, a.p, i, mode, fc[0], dtp, dtg, dtm, v8);
}

/* The tensors of a group in one launch: their elements laid end to end, tensor k's at
 * [start[k], start[k + 1]) of the launch's range, its buffers ga->p[k]. A thread's
 * elements only grow, so the tensor it is in is found by walking forward. */
FTC_INLINE void adamw_group(const FtcGroupArgs *ga, const long long *start, int count, int mode,
                            double beta1, double beta2, double eps, double weight_decay, int dtp,
                            int dtg, int dtm, int v8) {
    AdamwStep s = adamw_step(ga->f, beta1, beta2, eps);
    (void)weight_decay;
    int k = 0, w = v8 ? 8 : 1;   /* (v8: every member's start a multiple of eight) */
    for (long long i = ftc_gid() * w; i < start[count]; i += ftc_gstride() * w) {
        while (i >= start[k + 1])
            k++;
        const float *fc = factor_of(ga->p[k], mode ? 4 : 3);
        if (fc[1] == 0.0f) {
            adamw_at(&s, ga->p[k], i - start[k], mode, fc[0], dtp, dtg, dtm, v8);
        } else if (mode == ADAMW_MASTER) {
            for (int e = 0; e < w; e++)
                skip_at(ga->p[k], 3, i - start[k] + e, dtp);
        }
    }
}

/* AdamW8bit (bitsandbytes' AdamW8bit; runtime/cpu/adam8.h has the arithmetic, which this
 * repeats operation for operation): moments of a tensor of at least min_8bit_size
 * elements as 8-bit codes, m's into ftc_nf4_dynamic (the signed dynamic map), v's into
 * ftc_dyn_unsigned, with an fp32 absmax per block of 256, a block of 256 threads a block
 * of elements; smaller tensors keep 32-bit moments, a thread an element. The scalars are
 * fp32 as bitsandbytes takes them, beta^t rounded once from double. */
typedef struct Adam8Step {
    float beta1, beta2, w1, w2, eps, wd, c2, step_size, decay;
} Adam8Step;

FTC_INLINE Adam8Step adam8_step(const float *f, double beta1, double beta2, double eps,
                                double weight_decay) {
    Adam8Step s;
    s.beta1 = (float)beta1, s.beta2 = (float)beta2, s.eps = (float)eps, s.wd = (float)weight_decay;
    s.w1 = 1.0f - s.beta1, s.w2 = 1.0f - s.beta2;
    s.decay = f[2], s.step_size = f[3], s.c2 = f[4];   /* cpu_adam8_scalars, on the host */
    return s;
}

/* The weight of element i after x0 -> x, as adamw_at stores it (mode: ADAMW_*). */
FTC_INLINE void adam8_store(void *const *p, long long i, int mode, float x0, float x, int dtp) {
    if (mode == ADAMW_KAHAN) {
        float c = ldf(p[3], i, dtp) + (x - x0), t = rnd(x0 + c, dtp);
        stf(p[3], i, dtp, c + (x0 - t));
        x = t;
    }
    stf(mode == ADAMW_MASTER ? p[3] : p[0], i, mode == ADAMW_MASTER ? FTC_F32 : dtp, x);
    if (mode == ADAMW_MASTER)
        stf(p[0], i, dtp, x);
}

/* A tensor below min_8bit_size, element i: bitsandbytes' 32-bit AdamW.  p: param, m, v,
 * [master | kahan,] grad, factor. */
FTC_INLINE void adam32_at(const Adam8Step *s, void *const *p, long long i, int mode, float f, int dtp,
                          int dtg) {
    int dtw = mode == ADAMW_MASTER ? FTC_F32 : dtp;
    float g = f * ldf(p[mode ? 4 : 3], i, dtg), m = ldf(p[1], i, FTC_F32), v = ldf(p[2], i, FTC_F32);
    m = m * s->beta1 + s->w1 * g;
    v = v * s->beta2 + s->w2 * (g * g);
    float x0 = ldf(mode == ADAMW_MASTER ? p[3] : p[0], i, dtw);
    float x = x0 + s->step_size * (m / (sqrtf(v) + s->eps * s->c2));
    if (s->wd > 0.0f)
        x = x * s->decay;
    stf(p[1], i, FTC_F32, m);
    stf(p[2], i, FTC_F32, v);
    adam8_store(p, i, mode, x0, x, dtp);
}

/* The two maps in shared memory, code[0..255] m's (signed), code[256..511] v's. */
FTC_INLINE void adam8_tables(float *code) {
    for (int j = threadIdx.x; j < 256; j += blockDim.x) {
        code[j] = ftc_nf4_dynamic[j];
        code[256 + j] = ftc_dyn_unsigned[j];
    }
    __syncthreads();
}

/* bitsandbytes' quantize_2D: seven halvings from 127, then the nearer end of the bracket
 * (cpu_adam8_quantize). */
FTC_INLINE int adam8_code(const float *code, float x, int is_signed) {
    int pivot = 127, hi = 255, lo = 0;
    float below = is_signed ? -1.0f : 0.0f, above = 1.0f, val = code[127];
    for (int step = 64; step > 0; step >>= 1) {
        if (x > val)
            lo = pivot, below = val, pivot += step;
        else
            hi = pivot, above = val, pivot -= step;
        val = code[pivot];
    }
    if (x > val)
        return x > (above + val) * 0.5f ? hi : pivot;
    return x < (below + val) * 0.5f ? lo : pivot;
}

/* Block b (256 elements) of a tensor of n with 8-bit moments, thread j its element
 * 256 b + j; every thread of the block calls it (barriers). A partial block's tail counts
 * in the absmax as bitsandbytes loads it (m's code 128, v's code 0, gradient 0).
 * p: param, codes u8 [2, n], absmax f32 [2, blocks], [master | kahan,] grad, factor. */
FTC_INLINE void adam8_block(const Adam8Step *s, void *const *p, long long n, long long b, int mode,
                            float f, int dtp, int dtg, const float *code, float *red) {
    long long nb = (n + 255) / 256, i = b * 256 + threadIdx.x;
    unsigned char *qm = (unsigned char *)p[1], *qv = qm + n;
    float *am = (float *)p[2], *av = am + nb;
    float a1 = am[b], a2 = av[b], m = 0.0f, v = 0.0f;
    int in = i < n, ok = 0;
    if (in) {
        float g0 = ldf(p[mode ? 4 : 3], i, dtg), g = g0 * f;
        ok = isfinite(g0);
        if (ok) {
            v = code[256 + qv[i]] * a2;
            v = v * s->beta2 + s->w2 * g * g;
            m = code[qm[i]] * a1;
            m = m * s->beta1 + s->w1 * g;
        }
    } else {
        m = code[128] * a1 * s->beta1 + s->w1 * 0.0f;
        v = code[256] * a2 * s->beta2 + s->w2 * 0.0f * 0.0f;
    }
    float mmax = block_max(fabsf(m), red), vmax = block_max(fabsf(v), red);
    if (threadIdx.x == 0)
        am[b] = mmax, av[b] = vmax;
    if (!in)
        return;
    /* (a gradient that is not finite leaves the weight as it was, stored as the cpu
     * backend stores it: through the master's rounding or the compensation) */
    float x0 = ldf(mode == ADAMW_MASTER ? p[3] : p[0], i, mode == ADAMW_MASTER ? FTC_F32 : dtp), x = x0;
    if (ok) {
        x = x0 + s->step_size * (m / (sqrtf(v) + s->c2 * s->eps));
        if (s->wd > 0.0f)
            x = x * s->decay;
    }
    adam8_store(p, i, mode, x0, x, dtp);
    int c = adam8_code(code, m / mmax, 1);
    if ((ftc_f2u(code[c]) >> 31) != (ftc_f2u(m) >> 31))   /* keep m's sign */
        c = m > 0.0f ? c + 1 : c - 1;
    qm[i] = (unsigned char)c;
    qv[i] = (unsigned char)adam8_code(code + 256, v / vmax, 0);
}

/* AdamW8bit over one tensor of n elements (q8: 8-bit moments).  a.p: param, codes | m,
 * absmax | v, [master | kahan,] grad, factor. */
FTC_INLINE void adamw8bit(FtcArgs a, long long n, int q8, int mode, double beta1, double beta2,
                          double eps, double weight_decay, int dtp, int dtg) {
    __shared__ float code[512];
    __shared__ float red[32];
    const float *fc = factor_of(a.p, mode ? 4 : 3);
    if (fc[1] != 0.0f) {
        for (long long i = ftc_gid(); mode == ADAMW_MASTER && i < n; i += ftc_gstride())
            skip_at(a.p, 3, i, dtp);
        return;
    }
    Adam8Step s = adam8_step(a.f, beta1, beta2, eps, weight_decay);
    if (!q8) {
        for (long long i = ftc_gid(); i < n; i += ftc_gstride())
            adam32_at(&s, a.p, i, mode, fc[0], dtp, dtg);
        return;
    }
    adam8_tables(code);
    for (long long b = blockIdx.x; b < (n + 255) / 256; b += gridDim.x)
        adam8_block(&s, a.p, n, b, mode, fc[0], dtp, dtg, code, red);
}

/* A group of tensors in one launch (adamw_group's layout); with 8-bit moments every
 * member has whole blocks (a tensor with a partial one launches alone), so a block of the
 * launch's range lies in one member. */
FTC_INLINE void adamw8bit_group(const FtcGroupArgs *ga, const long long *start, int count, int q8,
                                int mode, double beta1, double beta2, double eps, double weight_decay,
                                int dtp, int dtg) {
    __shared__ float code[512];
    __shared__ float red[32];
    Adam8Step s = adam8_step(ga->f, beta1, beta2, eps, weight_decay);
    int k = 0;
    if (!q8) {
        for (long long i = ftc_gid(); i < start[count]; i += ftc_gstride()) {
            while (i >= start[k + 1])
                k++;
            const float *fc = factor_of(ga->p[k], mode ? 4 : 3);
            if (fc[1] == 0.0f)
                adam32_at(&s, ga->p[k], i - start[k], mode, fc[0], dtp, dtg);
            else if (mode == ADAMW_MASTER)
                skip_at(ga->p[k], 3, i - start[k], dtp);
        }
        return;
    }
    adam8_tables(code);
    for (long long base = (long long)blockIdx.x * 256; base < start[count]; base += (long long)gridDim.x * 256) {
        while (base >= start[k + 1])
            k++;
        void *const *p = ga->p[k];
        const float *fc = factor_of(p, mode ? 4 : 3);
        if (fc[1] == 0.0f)
            adam8_block(&s, p, start[k + 1] - start[k], (base - start[k]) / 256, mode, fc[0], dtp, dtg, code,
                        red);
        else if (mode == ADAMW_MASTER)
            skip_at(p, 3, base - start[k] + threadIdx.x, dtp);
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
        sgd_at(a.f[0], a.p, i, master, fc[0], dtp, dtg);
}

FTC_INLINE void sgd_group(const FtcGroupArgs *ga, const long long *start, int count, int master,
                          int dtp, int dtg) {
    int k = 0;
    for (long long i = ftc_gid(); i < start[count]; i += ftc_gstride()) {
        while (i >= start[k + 1])
            k++;
        const float *fc = factor_of(ga->p[k], master ? 2 : 1);
        if (fc[1] == 0.0f)
            sgd_at(ga->f[0], ga->p[k], i - start[k], master, fc[0], dtp, dtg);
        else if (master)
            skip_at(ga->p[k], 1, i - start[k], dtp);
    }
}
