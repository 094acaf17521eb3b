// progress.c — the console of `ftc run`: what a training session's events look like to
// people. Before step one the run described (what it trains on which backend, where the
// weights came from, the device, evaluation, the schedule, the host); after step one the
// device memory beside the plan's; a progress line a step (rewritten in place on a
// terminal, with the time left):
//
//   step 3/20  loss 4.812345  tok/s 10234  lr 3.000e-03  gnorm 1.2345  elapsed 0.41s  mem 3.2 MiB
//
// Fields are "name value" pairs separated by two spaces, so a program can split them. Then
// evaluations, checkpoints, a stop, and the summary with the steady step time beside the
// plan's estimate.
#include "session.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

// (a rank's output goes through its launcher, which gives it a terminal of its own
// whatever its own output is: plain lines then)
void rt_console_init(Console *c, FILE *out, int ranks, int64_t log_every) {
    *c = (Console){.out = out, .tty = ranks == 1 && isatty(fileno(out)) == 1, .every = log_every};
    if (!c->tty && c->every <= 0)
        c->every = 1;
}

static void console_break(Console *c) {
    if (c->pending)
        fputc('\n', c->out);
    c->pending = false;
}

static void fmt_eta(char *buf, size_t len, double s) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else if (s >= 10 || s <= 0)
        snprintf(buf, len, "%lds", t);
    else
        snprintf(buf, len, "%.1fs", s);
}

static void console_step(Console *c, const char *line, int64_t step, int64_t first, int64_t last, bool skip,
                         double eta_s) {
    if (c->tty) {
        char eta[32];
        fmt_eta(eta, sizeof eta, eta_s);
        fprintf(c->out, "\r%s  eta %s\033[K", line, eta);
        c->pending = true;
        if ((c->every > 0 && step % c->every == 0) || step == last)
            console_break(c);
    } else if (step % c->every == 0 || step == first || step == last || skip) {
        fprintf(c->out, "%s\n", line);
    }
    fflush(c->out);
}

// What runs where: the checkpoint resumed, the model, backend, ranks and batch shape.
static void say_run(FILE *out, const TrainSession *s) {
    const Plan *p = s->p;
    const char *zero = p->zero < 0 ? "" : p->zero == 0 ? " (data parallel)" :
                       p->zero == 1 ? " (ZeRO-1: optimizer state sharded)" :
                       p->zero == 2 ? " (ZeRO-2: optimizer state and gradients sharded)" :
                                      " (ZeRO-3: optimizer state, gradients and parameters sharded)";
    if (s->o->resume)
        fprintf(out, "resuming from %s (step %lld, seed %llu)\n", s->ckpt, (long long)s->done,
                (unsigned long long)s->seed);
    if (s->ranks > 1)
        fprintf(out, "ftc run: %s on %s, %d ranks%s, %lld steps of %lld x %lld x %d x %lld tokens "
                "(micro-batch x accumulation x ranks x seq), %llu windows in %s\n", p->model, s->be->name,
                s->ranks, zero, (long long)s->steps, (long long)p->micro_batch, (long long)p->accum, s->ranks,
                (long long)p->seq, (unsigned long long)s->feed.nwin, s->o->data);
    else
        fprintf(out, "ftc run: %s on %s, %lld steps of %lld x %lld x %lld tokens (micro-batch x "
                "accumulation x seq), %llu windows in %s\n", p->model, s->be->name, (long long)s->steps,
                (long long)p->micro_batch, (long long)p->accum, (long long)p->seq,
                (unsigned long long)s->feed.nwin, s->o->data);
}

// Where the weights came from, always said (a forgotten --weights trains from noise); the
// GPU and its memory after set-up.
static void say_weights(FILE *out, const TrainSession *s) {
    const RunOptions *o = s->o;
    const Plan *p = s->p;
    if (!o->resume && o->weights && s->fresh)
        fprintf(out, "weights: %d tensors from %s; %d LoRA adapter tensors it lacks initialised (seed %llu)\n",
                s->loaded, o->weights, s->fresh, (unsigned long long)s->seed);
    else if (!o->resume && o->weights)
        fprintf(out, "weights: %d tensors from %s\n", s->loaded, o->weights);
    else if (!o->resume)
        fprintf(out, "weights: none given (--weights): every parameter initialised at random (seed %llu)\n",
                (unsigned long long)s->seed);
    char gpu[1024], name[256], t[32], f[32], b[32], r[32];
    int64_t total, free_bytes;
    Backend *be = s->be;
    if (rt_cuda_describe(be, gpu, sizeof gpu) && be->memory && be->memory(be, &total, &free_bytes, name, sizeof name))
        fprintf(out, "device: %s; after set-up the driver reports %s total, %s free (the plan: %s for %s, "
                "a %s reserve in it)\n", gpu, fmt_bytes(t, sizeof t, total), fmt_bytes(f, sizeof f, free_bytes),
                fmt_bytes(b, sizeof b, p->budget_bytes), p->gpu ? p->gpu : "no preset",
                fmt_bytes(r, sizeof r, p->reserve_bytes));
}

// The evaluation asked for, and the learning rate's schedule with clipping when either
// is more than a constant rate.
static void say_eval_schedule(FILE *out, const TrainSession *s) {
    const Plan *p = s->p;
    const RunOptions *o = s->o;
    if (s->feed.eval)
        fprintf(out, "eval: %s, %lld batches of %lld x %lld tokens (%llu windows in the file)%s, %s\n",
                o->eval_data, (long long)s->eval_batches, (long long)p->micro_batch, (long long)p->seq,
                (unsigned long long)s->feed.eval_nwin,
                s->eval_batches * p->micro_batch < (int64_t)s->feed.eval_nwin ? " from its first window" : "",
                o->eval_every > 0 ? "every --eval-every steps and after the last" : "after the last step");
    double clip = 0;
    for (int i = 0; i < p->nins[PHASE_OPT]; i++)
        if (p->ins[PHASE_OPT][i].op == OP_GRAD_FACTOR)
            clip = p->ins[PHASE_OPT][i].attr.f;
    if (p->schedule == SCHED_CONSTANT && !p->warmup_steps && clip <= 0)
        return;
    static const char *const kinds[] = {"constant", "linear", "cosine"};
    fprintf(out, "schedule: lr %s", kinds[p->schedule]);
    if (p->warmup_steps)
        fprintf(out, " after %lld warm-up steps from 0", (long long)p->warmup_steps);
    fprintf(out, ", peak %.3e", p->lr);
    if (p->schedule != SCHED_CONSTANT)
        fprintf(out, ", %.3e at step %lld", p->min_lr, (long long)p->steps);
    if (clip > 0)
        fprintf(out, "; gradients clipped to a global norm of %g", clip);
    fputc('\n', out);
}

// The run described, before step one.
static void say_open(FILE *out, const TrainSession *s) {
    say_run(out, s);
    say_weights(out, s);
    if (s->tuned[0] && s->lead)
        fprintf(out, "%s\n", s->tuned);
    say_eval_schedule(out, s);
    rt_host_check(s->p, s->rates, out);
}

// After step one on a GPU: what the device holds against what the plan promised, on every
// rank (each its own device). On the plan's preset card nvidia-smi's count, which takes in
// what the driver keeps below the card's total, as the plan's reserve does.
static void say_memory(const TrainSession *s) {
    const MeasuredMemory *m = &s->mem;
    const Plan *p = s->p;
    FILE *out = s->o->out;
    char a[32], r[32], u[32], t[32], h[32], k[32];
    if (!m->device)
        return;
    int64_t planned = p->arena_bytes[ARENA_DEVICE] + p->reserve_bytes, used = m->total - m->free_bytes;
    int64_t charged = m->card ? m->nominal - m->free_bytes : used;
    fprintf(out, "memory: planned %s (arena %s + reserve %s); %s shows %s in use of %s (%+.1f%%, ",
            fmt_bytes(a, sizeof a, planned), fmt_bytes(r, sizeof r, p->arena_bytes[ARENA_DEVICE]),
            fmt_bytes(u, sizeof u, p->reserve_bytes), m->name, fmt_bytes(t, sizeof t, charged),
            fmt_bytes(h, sizeof h, m->card ? m->nominal : m->total),
            planned ? 100.0 * (double)(charged - planned) / (double)planned : 0.0);
    if (m->card)
        fprintf(out, "as nvidia-smi counts: the driver's %s in use and the %s it keeps below the "
                     "card's total; ", fmt_bytes(t, sizeof t, used), fmt_bytes(k, sizeof k, m->nominal - m->total));
    fprintf(out, "every process on it)\n");
}

// The progress line of the step just taken.
static void say_step(Console *c, const TrainSession *s) {
    const StepResult *r = &s->last;
    char skipped[96] = "", line[512];
    if (r->skipped)
        snprintf(skipped, sizeof skipped, "  skipped %lld", (long long)s->x.skipped);
    if (r->scaled)   // the scale this step ran with
        snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), "  scale %g", r->scale);
    snprintf(line, sizeof line, "step %lld/%lld  loss %.6f%s  tok/s %.0f  lr %.3e  gnorm %.4g  elapsed %.2fs  mem %s",
             (long long)r->step, (long long)s->steps, r->loss, skipped, (double)s->tokens_per_step / r->step_s,
             r->lr, isnan(r->grad_norm) ? NAN : r->grad_norm, r->elapsed_s, s->mems);
    if (r->pref) {   // (TRL's names)
        const double *st = r->pref_stats;
        size_t n = strlen(line);
        snprintf(line + n, sizeof line - n, "  rewards/chosen %.4g  rewards/rejected %.4g  rewards/margins %.4g  "
                 "rewards/accuracies %.3f", st[PREF_REWARD_CHOSEN], st[PREF_REWARD_REJECTED],
                 st[PREF_REWARD_CHOSEN] - st[PREF_REWARD_REJECTED], st[PREF_ACCURACY]);
    }
    console_step(c, line, r->step, s->done + 1, s->steps, r->skipped,
                 r->elapsed_s / (double)(r->step - s->done) * (double)(s->steps - r->step));
}

static void say_eval(Console *c, const TrainSession *s) {
    const EvalResult *e = &s->eval;
    double dt = e->time_s;
    if (s->p->pairs)   // a preference loss: a mean over pairs, no perplexity
        fprintf(c->out, "eval %lld/%lld  loss %.6f  pairs %lld  tok/s %.0f  time %.2fs\n", (long long)s->step,
                (long long)s->steps, e->loss, (long long)e->targets, dt > 0 ? (double)s->eval_tokens / dt : 0.0, dt);
    else
        fprintf(c->out, "eval %lld/%lld  loss %.6f  ppl %.4g  targets %lld  tok/s %.0f  time %.2fs\n",
                (long long)s->step, (long long)s->steps, e->loss, exp(e->loss), (long long)e->targets,
                dt > 0 ? (double)s->eval_tokens / dt : 0.0, dt);
    fflush(c->out);
}

// The run's totals: steps, tokens, the first loss and the mean of the last ten, the rate;
// and the steady step after the first (which also fills caches and warms the GPU up).
static void say_summary(FILE *out, const TrainSession *s) {
    int64_t ran = s->steps - s->done, tokens = s->tokens_per_step * ran;   // (after a resumed run's)
    double total = s->tend - s->t0, tail = 0;
    int ntail = s->nrecent < 10 ? (int)s->nrecent : 10;
    for (int i = 0; i < ntail; i++)
        tail += s->recent[i];
    char skips[96] = "";
    if (s->x.skipped > s->skipped0)
        snprintf(skips, sizeof skips, ", %lld skipped (a non-finite loss or gradients; their updates not taken)",
                 (long long)(s->x.skipped - s->skipped0));
    fprintf(out, "done: %lld steps%s, %lld tokens (%lld trained), loss %.4f at step %lld, %.4f over the "
                 "last %d steps, %.2fs, %.0f tok/s (%.0f trained)\n",
            (long long)ran, skips, (long long)tokens, (long long)s->trained, s->first_loss,
            (long long)s->first_step, ntail ? tail / ntail : 0.0, ntail, total,
            total > 0 ? (double)tokens / total : 0.0, total > 0 ? (double)s->trained / total : 0.0);
    if (ran <= 1)
        return;
    double mean = (s->tend - s->t1st) / (double)(ran - 1);
    fprintf(out, "steady: %.3fs per step after the first, %.0f tok/s", mean, (double)s->tokens_per_step / mean);
    if (s->p->est_step_us > 0)
        fprintf(out, " (the plan estimated %.3fs on %s)", s->p->est_step_us * 1e-6, s->p->gpu ? s->p->gpu : "its GPU");
    fputc('\n', out);
}

// The events before which a line left in place ends: another's line may follow (an error,
// save.c's, the summary).
static const bool ends_line[EV_COUNT] = {
    [EV_MEASURED] = true, [EV_EVALUATING] = true, [EV_SAVING] = true, [EV_STOPPED] = true,
    [EV_FINISHED] = true, [EV_DONE] = true, [EV_FAILED] = true, [EV_ERROR] = true,
};

int rt_console_on_event(void *ctx, const TrainEvent *e, char *err, size_t errlen) {
    Console *c = ctx;
    const TrainSession *s = e->s;
    const RunOptions *o = s->o;
    (void)err, (void)errlen;
    if (ends_line[e->kind])
        console_break(c);
    switch (e->kind) {
    case EV_OPEN: say_open(c->out, s); break;
    case EV_MEASURED: say_memory(s); break;
    case EV_STEP: say_step(c, s); break;
    case EV_EVAL: say_eval(c, s); break;
    case EV_SAVED:
        fprintf(c->out, "saved %s/checkpoint-%06lld (the training state%s)\n", o->save, (long long)e->step,
                s->ranks > 1 ? ", a file a rank" : "");
        break;
    case EV_STOPPED:
        fprintf(c->out, "ftc run: stopped by %s after step %lld of %lld%s\n",
                e->signal == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM", (long long)e->step, (long long)s->steps,
                o->save ? "; saving it" : "");
        break;
    case EV_FINISHED: say_summary(c->out, s); break;
    case EV_PROFILED:
        fprintf(c->out, "profile: %s (the device's work of steps %lld to %lld, kernel by kernel)\n", o->profile,
                (long long)(s->done + 2), (long long)s->steps);
        rt_cuda_gemm_report(s->be, c->out);
        break;
    default: break;
    }
    return 0;
}
