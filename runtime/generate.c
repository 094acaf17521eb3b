// generate.c — `ftc generate` inside the runtime: the plan's decode phase run token by
// token. A session that neither trains nor evaluates (session.c: the weights and adapters
// loaded as ftc run loads them, the backend chosen as its), then the prompt fed one token a
// run of the decode phase (its KV caches filled row by row: the prefill is the same step),
// then a token sampled from each run's logits and fed back, until an end-of-sequence id or
// the number asked for. Tokens in, tokens out: the command line owns the text.
#include "session.h"
#include "comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int64_t rt_decode_len(const Plan *p) {
    if (!p->nins[PHASE_DECODE] || !plan_role(p, PR_DECODE_TOKEN) || !plan_role(p, PR_DECODE_POS) ||
        !plan_role(p, PR_DECODE_LOGITS))
        return 0;
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].kind == PK_CACHE && p->buf[i].ndim == 4)
            return p->buf[i].shape[1];
    return 0;
}

void rt_decode_reset(Exec *x) {
    for (int i = 0; i < x->plan->nbuf; i++)
        if (x->plan->buf[i].kind == PK_CACHE)
            rt_zero(x, i);
}

int rt_decode_step(Exec *x, int32_t token, int64_t pos, float *logits, char *err, size_t errlen) {
    const Plan *p = x->plan;
    if (token < 0 || token >= p->vocab)
        return snprintf(err, errlen, "token id %d is outside the plan's vocabulary of %lld", (int)token,
                        (long long)p->vocab), -1;
    if (pos < 0 || pos >= rt_decode_len(p))
        return snprintf(err, errlen, "position %lld is outside the KV cache of %lld tokens", (long long)pos,
                        (long long)rt_decode_len(p)), -1;
    int32_t at = (int32_t)pos;
    rt_write_raw(x, plan_role(p, PR_DECODE_TOKEN)->id, &token);
    rt_write_raw(x, plan_role(p, PR_DECODE_POS)->id, &at);
    if (rt_exec_phase(x, PHASE_DECODE, err, errlen) != 0)
        return -1;
    rt_read_f32(x, plan_role(p, PR_DECODE_LOGITS)->id, logits);
    return 0;
}

// A uniform draw in [0, 1) from the sampler's stream (splitmix64).
static double uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}

static int32_t argmax(const float *logits, int64_t V) {
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best])
            best = (int32_t)v;
    return best;
}

typedef struct Cand {
    float p;
    int32_t id;
} Cand;

static int by_prob(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    return x->p > y->p ? -1 : x->p < y->p ? 1 : x->id - y->id;
}

// Temperature and nucleus sampling as transformers' warpers order them: logits / T, softmax,
// the smallest set of most probable tokens whose mass reaches top_p (ties by id), one drawn
// from it by its renormalised mass. T = 0 is greedy: the first largest logit.
static int32_t sample(const float *logits, int64_t V, const GenSampling *s, uint64_t *state, Cand *c) {
    if (s->temperature <= 0)
        return argmax(logits, V);
    float mx = logits[argmax(logits, V)];
    double sum = 0;
    for (int64_t v = 0; v < V; v++) {
        c[v] = (Cand){(float)exp(((double)logits[v] - mx) / s->temperature), (int32_t)v};
        sum += c[v].p;
    }
    qsort(c, (size_t)V, sizeof *c, by_prob);
    double top = s->top_p > 0 && s->top_p < 1 ? s->top_p : 1, kept = 0;
    int64_t n = 0;
    while (n < V && (n == 0 || kept / sum < top))
        kept += c[n++].p;
    double u = uniform(state) * kept, at = 0;
    for (int64_t k = 0; k < n; k++)
        if ((at += c[k].p) > u)
            return c[k].id;
    return c[n - 1].id;
}

static bool is_eos(const GenRequest *q, int32_t id) {
    for (int k = 0; k < q->neos; k++)
        if (q->eos[k] == id)
            return true;
    return false;
}

int rt_generate_ids(Exec *x, const GenRequest *q, GenResult *r, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int64_t V = p->vocab, L = rt_decode_len(p);
    if (q->nprompt < 1 || q->nprompt + q->max_new > L)
        return snprintf(err, errlen, "%lld prompt tokens and %lld new ones do not fit the decode phase's %lld",
                        (long long)q->nprompt, (long long)q->max_new, (long long)L), -1;
    float *logits = xmalloc(sizeof(float) * (size_t)V);
    Cand *scratch = q->sampling.temperature > 0 ? xmalloc(sizeof(Cand) * (size_t)V) : NULL;
    r->ids = xmalloc(sizeof(int32_t) * (size_t)(q->max_new + 1));
    r->n = 0, r->eos = -1;
    uint64_t state = q->sampling.seed;
    rt_decode_reset(x);
    double t0 = now_s();
    int rc = 0;
    for (int64_t i = 0; i < q->nprompt && rc == 0; i++)   // the prefill: the prompt a token a step
        rc = rt_decode_step(x, q->prompt[i], i, logits, err, errlen);
    r->prefill_s = now_s() - t0;
    for (int64_t pos = q->nprompt; rc == 0 && r->n < q->max_new; pos++) {
        int32_t id = sample(logits, V, &q->sampling, &state, scratch);
        if (q->on_token)
            q->on_token(q->ctx, id, logits);
        if (is_eos(q, id)) {
            r->eos = id;
            break;
        }
        r->ids[r->n++] = id;
        if (r->n < q->max_new)
            rc = rt_decode_step(x, id, pos, logits, err, errlen);
    }
    r->decode_s = now_s() - t0 - r->prefill_s;
    free(logits);
    free(scratch);
    return rc;
}

// What the run uses, said before it starts (on o->out: stdout holds the reply).
static int on_event(void *ctx, const TrainEvent *e, char *err, size_t errlen) {
    (void)ctx, (void)err, (void)errlen;
    const TrainSession *s = e->s;
    const RunOptions *o = s->o;
    if (e->kind != EV_OPEN)
        return 0;
    fprintf(s->out, "ftc generate: %s on %s, a KV cache of %lld tokens\n", s->p->model, s->be->name,
            (long long)rt_decode_len(s->p));
    if (o->weights)
        fprintf(s->out, "weights: %d tensors from %s\n", s->loaded, o->weights);
    else
        fprintf(s->out, "ftc generate: warning: no --weights: every parameter initialised at random (seed %llu); "
                "the reply is noise\n", (unsigned long long)s->seed);
    if (o->adapter)
        fprintf(s->out, "adapter: %d tensors from %s (LoRA r %lld, alpha %g)\n", s->adapted, o->adapter,
                (long long)s->p->lora_r, s->p->lora_alpha);
    else if (s->p->lora_r > 0)
        fprintf(s->out, "ftc generate: warning: no --adapter: the LoRA adapters are at their initialisation "
                "(B = 0, adding nothing): the base model's reply\n");
    fflush(s->out);
    return 0;
}

typedef struct Job {
    const GenRequest *q;
    GenResult *r;
} Job;

static int generate(const RunOptions *o, const Plan *p, Comm *comm, FILE *out, void *ctx) {
    Job *j = ctx;
    char err[1024];
    if (comm->ranks > 1)
        return rt_run_error("generation runs in one process, not on %d ranks", comm->ranks);
    if (rt_decode_len(p) == 0)
        return rt_run_error("%.900s has no decode phase (compiled before ftc planned one, with --max-len 0, or "
                            "from a model whose forward has no decode step: ftc compile says why)", o->plan_dir);
    const TrainListener listen[] = {{on_event, NULL}, {NULL, NULL}};
    TrainSession s;
    int rc = rt_session_open(&s, o, p, comm, out, listen);
    if (rc == 0 && (rc = rt_generate_ids(&s.x, j->q, j->r, err, sizeof err)) != 0)
        rt_run_error("%s", err);
    return rt_session_close(&s, rc);
}

int rt_generate(const RunOptions *o, const GenRequest *q, GenResult *r) {
    *r = (GenResult){.eos = -1};
    Job j = {q, r};
    return rt_run_job("ftc generate", o, generate, &j);
}
