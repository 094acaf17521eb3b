// adam8.c: bitsandbytes' AdamW8bit update on the CPU; see adam8.h for the contracts and
// the arithmetic. Plain fp32 loops (built with -ffp-contract=off: every a*b+c rounds twice,
// as bitsandbytes' kernels, compiled without fused multiply-adds there, do).
#include "adam8.h"
#include "nf4.h"

#include <float.h>
#include <math.h>

CpuAdam8 cpu_adam8_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t t) {
    CpuAdam8 s = {.beta1 = (float)beta1, .beta2 = (float)beta2, .eps = (float)eps, .lr = (float)lr,
                  .weight_decay = (float)weight_decay};
    // bitsandbytes' 1.0f - powf(beta, t), the power rounded once from double
    float c1 = 1.0f - (float)pow((double)s.beta1, (double)t);
    s.correction2 = sqrtf(1.0f - (float)pow((double)s.beta2, (double)t));
    s.step_size = (-s.lr * s.correction2) / c1;
    s.decay = 1.0f - s.lr * s.weight_decay;
    return s;
}

size_t cpu_adam8_blocks(size_t n) { return n / CPU_ADAM8_BLOCK + (n % CPU_ADAM8_BLOCK != 0); }

uint8_t cpu_adam8_quantize(const float *code, float x, bool is_signed) {
    int pivot = 127, hi = 255, lo = 0;
    float below = is_signed ? -1.0f : 0.0f, above = 1.0f, val = code[127];
    for (int step = 64; step > 0; step >>= 1) {
        if (x > val)
            lo = pivot, below = val, pivot += step;
        else
            hi = pivot, above = val, pivot -= step;
        val = code[pivot];
    }
    // (a NaN, 0/0 from an all-zero block, compares false throughout: code 0)
    if (x > val)
        return (uint8_t)(x > (above + val) * 0.5f ? hi : pivot);
    return (uint8_t)(x < (below + val) * 0.5f ? lo : pivot);
}

void cpu_adam8_update(float *w, const float *grad, float gscale, uint8_t *qm, uint8_t *qv, float *am,
                      float *av, size_t n, size_t b_lo, size_t b_hi, const CpuAdam8 *s) {
    const float *cm = cpu_nf4_dynamic_code, *cv = cpu_dynamic_unsigned_code;
    const float w1 = 1.0f - s->beta1, w2 = 1.0f - s->beta2, guard = s->correction2 * s->eps;
    float m[CPU_ADAM8_BLOCK], v[CPU_ADAM8_BLOCK];
    for (size_t b = b_lo; b < b_hi; b++) {
        size_t at = b * CPU_ADAM8_BLOCK, len = n - at < CPU_ADAM8_BLOCK ? n - at : CPU_ADAM8_BLOCK;
        float mmax = -FLT_MAX, vmax = -FLT_MAX;
        for (size_t j = 0; j < len; j++) {
            float g = grad[at + j] * gscale;
            m[j] = v[j] = 0.0f;
            if (isfinite(grad[at + j])) {
                v[j] = cv[qv[at + j]] * av[b];
                v[j] = v[j] * s->beta2 + w2 * g * g;
                m[j] = cm[qm[at + j]] * am[b];
                m[j] = m[j] * s->beta1 + w1 * g;
            }
            mmax = fmaxf(mmax, fabsf(m[j]));
            vmax = fmaxf(vmax, fabsf(v[j]));
        }
        if (len < CPU_ADAM8_BLOCK) {   // the tail as bitsandbytes loads it: m's code 128, v's 0, g 0
            float tail = cm[128] * am[b];
            mmax = fmaxf(mmax, fabsf(tail * s->beta1 + w1 * 0.0f));
            vmax = fmaxf(vmax, fabsf(cv[0] * av[b] * s->beta2 + w2 * 0.0f * 0.0f));
        }
        am[b] = mmax, av[b] = vmax;
        for (size_t j = 0; j < len; j++) {
            if (!isfinite(grad[at + j]))
                continue;
            float x = w[at + j] + s->step_size * (m[j] / (sqrtf(v[j]) + guard));
            if (s->weight_decay > 0.0f)
                x = x * s->decay;
            w[at + j] = x;
        }
        for (size_t j = 0; j < len; j++) {
            uint8_t c = cpu_adam8_quantize(cm, m[j] / mmax, true);
            if (signbit(cm[c]) != signbit(m[j]))   // keep m's sign
                c = (uint8_t)(m[j] > 0.0f ? c + 1 : c - 1);
            qm[at + j] = c;
            qv[at + j] = cpu_adam8_quantize(cv, v[j] / vmax, false);
        }
    }
}

void cpu_adam32_update(float *w, const float *grad, float gscale, float *m, float *v, size_t lo, size_t hi,
                       const CpuAdam8 *s) {
    const float w1 = 1.0f - s->beta1, w2 = 1.0f - s->beta2, guard = s->eps * s->correction2;
    for (size_t i = lo; i < hi; i++) {
        float g = gscale * grad[i];
        m[i] = m[i] * s->beta1 + w1 * g;
        v[i] = v[i] * s->beta2 + w2 * (g * g);
        float x = w[i] + s->step_size * (m[i] / (sqrtf(v[i]) + guard));
        if (s->weight_decay > 0.0f)
            x = x * s->decay;
        w[i] = x;
    }
}
