// schedule.c — what the training loop changes from step to step: the learning rate
// under the plan's schedule, as Hugging Face's get_{constant,linear,cosine}_schedule_with
// _warmup (a LambdaLR stepped once per optimizer step) compute it; and fp16's loss scale,
// as torch.amp.GradScaler moves it.
#include "runtime.h"

#include <math.h>

double rt_lr_at(const Plan *p, int64_t step) {
    // LambdaLR: optimizer step s (1-based) runs with the factor of k = s - 1 steps taken,
    // each factor formed as HF forms it (so the products round as torch's do).
    int64_t k = step - 1, w = p->warmup_steps, t = p->steps;
    double lr = p->lr, f;
    if (k < w)
        return lr * ((double)k / (double)w);
    if (p->schedule == SCHED_CONSTANT)
        return lr;
    int64_t span = t - w > 1 ? t - w : 1;
    if (p->schedule == SCHED_LINEAR) {
        f = fmax(0.0, (double)(t - k) / (double)span);
    } else {   // half a cosine from the end of the warm-up to `steps`, then held at its end
        double progress = (double)(k - w) / (double)span;
        f = progress >= 1.0 ? 0.0 : fmax(0.0, 0.5 * (1.0 + cos(M_PI * progress)));
    }
    if (p->min_lr == 0)
        return lr * f;
    // with min_lr the decay ends there, not at 0 (HF's cosine_with_min_lr)
    double floor = p->min_lr / lr;
    return lr * (f * (1.0 - floor) + floor);
}

void rt_scale_update(Exec *x, bool overflowed) {
    const Plan *p = x->plan;
    float scale = (float)x->loss_scale;   // torch keeps it in an fp32 tensor
    if (overflowed) {
        scale = (float)((double)scale * p->scale_backoff);
        x->scale_tracker = 0;
    } else if (++x->scale_tracker == p->scale_interval) {
        float grown = (float)((double)scale * p->scale_growth);
        if (isfinite(grown))
            scale = grown;
        x->scale_tracker = 0;
    }
    x->loss_scale = scale;
}
