// evaluate.c — `ftc eval`: a session that only evaluates (session.c with no training file):
// the weights loaded as ftc run loads them, a LoRA plan's adapters over them, and the
// plan's eval phase once over the eval file; no optimizer step, no gradient. What it uses
// is said before it runs; what it measured goes back to the command, which prints it.
#include "session.h"

// What runs where, on which batches.
static void say_run(FILE *out, const TrainSession *s) {
    const Plan *p = s->p;
    char ranks[64] = "";
    if (s->ranks > 1)
        snprintf(ranks, sizeof ranks, ", %d ranks (each the same batches)", s->ranks);
    fprintf(out, "%s: %s on %s%s, %s%lld batches of %lld x %lld tokens from %s (%llu windows in the file)\n",
            rt_run_command(), p->model, s->be->name, ranks,
            s->eval_batches * p->micro_batch < (int64_t)s->feed.eval_nwin ? "the first " : "",
            (long long)s->eval_batches, (long long)p->micro_batch, (long long)p->seq, s->o->eval_data,
            (unsigned long long)s->feed.eval_nwin);
}

// Where the weights came from, always said; a LoRA plan evaluated without its adapters
// (each B zero, so they add nothing) is its base model alone, which is warned of.
static void say_weights(FILE *out, const TrainSession *s) {
    const RunOptions *o = s->o;
    const Plan *p = s->p;
    if (o->weights)
        fprintf(out, "weights: %d tensors from %s\n", s->loaded, o->weights);
    else
        fprintf(out, "weights: none given (--weights): %s initialised at random (seed %llu)\n",
                o->adapter ? "the base model" : "every parameter", (unsigned long long)s->seed);
    if (o->adapter)
        fprintf(out, "adapter: %d tensors from %s (LoRA r %lld, alpha %g)\n", s->adapted, o->adapter,
                (long long)p->lora_r, p->lora_alpha);
    else if (p->lora_r > 0 && (!o->weights || s->fresh > 0))
        fprintf(out, "%s: warning: no --adapter: the LoRA adapters are at their initialisation (B = 0, adding "
                "nothing), so this is the loss of the base model alone\n", rt_run_command());
}

static int on_event(void *ctx, const TrainEvent *e, char *err, size_t errlen) {
    (void)ctx, (void)err, (void)errlen;
    if (e->kind != EV_OPEN)
        return 0;
    say_run(e->s->out, e->s);
    say_weights(e->s->out, e->s);
    if (e->s->tuned[0] && e->s->lead)
        fprintf(e->s->out, "%s\n", e->s->tuned);
    fflush(e->s->out);
    return 0;
}

// Evaluates on one rank of the job: opened, the eval phase run, closed.
static int evaluate(const RunOptions *o, const Plan *p, Comm *comm, FILE *out, void *ctx) {
    EvalSummary *r = ctx;
    const TrainListener listen[] = {{on_event, NULL}, {NULL, NULL}};
    TrainSession s;
    int rc = rt_session_open(&s, o, p, comm, out, listen);
    if (rc == 0)
        rc = rt_session_eval(&s);
    if (rc == 0)
        *r = (EvalSummary){.loss = s.eval.loss, .time_s = s.eval.time_s, .targets = s.eval.targets,
                           .tokens = s.eval_tokens, .batches = s.eval_batches, .windows = s.feed.eval_nwin,
                           .lead = s.lead, .pairs = p->pairs};
    return rt_session_close(&s, rc);
}

int rt_eval(const RunOptions *o, EvalSummary *r) {
    *r = (EvalSummary){0};
    return rt_run_job("ftc eval", o, evaluate, r);
}
