// session.c — a training session of `ftc run`. Opened: the options, the data, the backend
// (cuda where a GPU is, else cpu; --device), the arenas, a checkpoint resumed or weights
// loaded, all checked before step one. Stepped: each step runs `accum` micro-steps
// (forward, backward) on windows of seq + 1 tokens in a seeded shuffled order (micro-step
// m of rank r reading the step's micro-batch m·ranks + r), then the optimizer phase at the
// schedule's learning rate (the gradients' global norm found, clipped, and the step
// skipped if a gradient is not finite); evaluates when asked (the plan's eval phase) and
// checkpoints when asked. Closed: the device drained, the weights saved. It says notes and
// errors; its progress it only emits, as events, to its listeners.
#include "session.h"
#include "comm.h"
#include "fileio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// Tells every listener of event e. One that fails ends the run: the others hear EV_ERROR
// (the console ends its line) and its error is said.
static int emit_event(TrainSession *s, TrainEvent e) {
    char err[1024];
    e.s = s;
    for (const TrainListener *l = s->listen; l->on_event; l++) {
        if (l->on_event(l->ctx, &e, err, sizeof err) == 0)
            continue;
        TrainEvent failing = {.kind = EV_ERROR, .s = s, .step = e.step};
        for (const TrainListener *k = s->listen; k->on_event; k++)
            if (k != l)
                k->on_event(k->ctx, &failing, NULL, 0);
        return rt_run_error("%s", err), -1;
    }
    return 0;
}

static int emit(TrainSession *s, TrainEventKind kind) {
    return emit_event(s, (TrainEvent){.kind = kind, .step = s->step});
}

// Step s->step failed with err: said; -1.
static int step_failed(const TrainSession *s, const char *err) {
    rt_run_error("step %lld: %s", (long long)s->step, err);
    return -1;
}

//
// Opening.
//

// Whether directories a and b (b may be NULL or not exist yet) are one.
static bool same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The options against the plan, before anything is read; -1 after saying why.
static int check_options(const TrainSession *s) {
    const RunOptions *o = s->o;
    const Plan *p = s->p;
    char err[1024];
    if ((o->save && rt_save_check("--save", o->save, err, sizeof err) != 0) ||
        (o->report && rt_save_check("--report", o->report, err, sizeof err) != 0))
        return rt_run_error("%s", err), -1;
    if (o->merge && p->lora_r <= 0)
        return rt_run_error("--merge: %.900s trains no LoRA adapters, so there is nothing to merge (its "
                            "model.safetensors is the whole model)", o->plan_dir), -1;
    if (o->adapter && p->lora_r <= 0)
        return rt_run_error("--adapter: %.900s has no LoRA adapters to load it into (its weights are the "
                            "whole model: --weights)", o->plan_dir), -1;
    // With the updates inside backward a step cannot be skipped whole: by the time its
    // gradients' norm is known, every update has run.
    if (s->early && o->skip_nonfinite)
        return rt_run_error("--skip-nonfinite: %.900s updates each parameter inside backward, as soon as its "
                            "gradient is complete, so a step cannot be skipped once a gradient turns out not "
                            "finite; compile it with --update step to skip such steps", o->plan_dir), -1;
    if (!plan_role(p, PR_TOKENS) || !plan_role(p, PR_TARGETS) || !plan_role(p, PR_LOSS))
        return rt_run_error("%s/plan: the plan has no tokens, targets or loss buffer", o->plan_dir), -1;
    return 0;
}

// Evaluation: the plan's eval phase over the first --eval-batches micro-batches of the
// eval file (all of its windows by default), every --eval-every steps and at the end.
static int open_eval(TrainSession *s) {
    const RunOptions *o = s->o;
    const Plan *p = s->p;
    Feed *f = &s->feed;
    char err[1024];
    if (!p->nins[PHASE_EVAL] || !plan_role(p, PR_EVAL_LOSS))
        return rt_run_error("%s%.900s has no eval phase (%s)", o->data ? "--eval-data: " : "", o->plan_dir,
                            p->ranks > 1 && p->zero >= 3 ? "a rank of ZeRO 3 holds shards of the parameters: "
                                                           "compile it with --zero 2 or below to evaluate"
                                                         : "a plan compiled before ftc planned one; compile it again"),
               -1;
    if (rt_feed_open(p, o->eval_data, &f->eval, &f->eval_nwin, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    int64_t all = (int64_t)((f->eval_nwin + (uint64_t)p->micro_batch - 1) / (uint64_t)p->micro_batch);
    s->eval_batches = o->eval_batches > 0 && o->eval_batches < all ? o->eval_batches : all;
    uint64_t rows = (uint64_t)(s->eval_batches * p->micro_batch);   // the windows evaluated
    s->eval_tokens = (int64_t)(rows < f->eval_nwin ? rows : f->eval_nwin) * p->seq;
    return 0;
}

// The training file, and the eval file when asked (a session that only evaluates: that
// alone; one that generates: neither); -1 after saying why.
static int open_data(TrainSession *s) {
    const RunOptions *o = s->o;
    char err[1024];
    if (!o->data)   // (a session that generates reads neither)
        return o->eval_data ? open_eval(s) : 0;
    if (rt_feed_open(s->p, o->data, &s->feed.d, &s->feed.nwin, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    s->data_print = data_fingerprint(s->feed.d);
    // Records packed several a window, read without the plan's document masks: each attends
    // to the records before it in its window. Allowed (a pretraining stream does it), said.
    // (Preference pairs hold one sequence a window.)
    if (s->lead && !s->p->packing && data_packed_window(s->feed.d) && !data_paired(s->feed.d))
        fprintf(s->out, "ftc run: warning: %s was packed several records a window (ftc data --pack %llu), "
                "but the plan has no packing: each record attends to those before it in its window; "
                "packing = true in the train section masks them apart\n", o->data,
                (unsigned long long)data_packed_window(s->feed.d));
    return o->eval_data ? open_eval(s) : 0;
}

// The cuda backend joined to the job's NCCL communicator; NULL (destroyed) when that fails.
static Backend *with_comm(Backend *be, Comm *comm, char *err, size_t errlen) {
    if (be && rt_cuda_set_comm(be, comm, NULL, err, errlen) != 0) {
        be->destroy(be);
        return NULL;
    }
    return be;
}

// The backend --device names; by default cuda where a driver sees a GPU, else cpu. A GPU
// that is there but cannot take the plan is an error, never a quiet fall back.
static Backend *pick_backend(const RunOptions *o, const Plan *p, Comm *comm, char *err, size_t errlen) {
    int local_rank = comm->ranks > 1 ? rt_launch_local_rank() : 0;
    if (o->device == DEVICE_CPU)
        return rt_cpu_backend();
    if (o->device == DEVICE_EMU)
        return rt_emu_backend(o->plan_dir, err, errlen);
    if (o->device == DEVICE_CUDA)
        return with_comm(rt_cuda_backend(o->plan_dir, p, NULL, local_rank, err, errlen), comm, err, errlen);
    char why[512];
    int gpu = rt_cuda_probe(why, sizeof why);
    if (gpu < 0)   // a driver, but no GPU it can use: say why before running on the CPU
        fprintf(o->out, "ftc run: no usable GPU (%s); running on the cpu backend\n", why);
    if (gpu <= 0)
        return rt_cpu_backend();
    return with_comm(rt_cuda_backend(o->plan_dir, p, NULL, local_rank, err, errlen), comm, err, errlen);
}

// The backend, and the host's for host-stream work; -1 after saying why. On the CPU every
// arena is host memory: a plan made for a GPU may not fit the host.
static int open_backend(TrainSession *s) {
    const Plan *p = s->p;
    char err[1024];
    if (!(s->be = pick_backend(s->o, p, s->comm, err, sizeof err)))
        return rt_run_error("%s", err), -1;
    rt_cuda_sync_check(s->be, s->o->sync_check);
    int64_t need = p->arena_bytes[ARENA_DEVICE] + p->arena_bytes[ARENA_HOST], avail = rt_host_available();
    if (s->be->host_addressable && avail >= 0 && need > avail) {
        char a[32], b[32];
        return rt_run_error("the plan's arenas take %s of memory on the %s backend, where they are host "
                            "memory, but this machine has %s available",
                            fmt_bytes(a, sizeof a, need), s->be->name, fmt_bytes(b, sizeof b, avail)), -1;
    }
    s->host = rt_cpu_backend();
    return 0;
}

// The batches' staging, and the directories this run writes locked (rank 0's; one lock
// when --report and --save are one directory); -1 after saying why.
static int stage_and_lock(TrainSession *s) {
    const RunOptions *o = s->o;
    char err[1024];
    bool staged = rt_feed_stage(&s->feed, s->p);
    if (s->lead && o->save && rt_save_lock("--save", o->save, &s->lock, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    if (s->lead && o->report && !same_dir(o->report, o->save) &&
        rt_save_lock("--report", o->report, &s->report_lock, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    if (!staged)
        return rt_run_error("out of memory for the data order and batch (%llu windows)",
                            (unsigned long long)s->feed.nwin), -1;
    return 0;
}

// The executor, one rank of the job; the GEMMs tuned and the host timed while the arenas
// hold nothing yet; -1 after saying why.
static int open_exec(TrainSession *s) {
    char err[1024];
    // (the host's staging only where the host runs the collectives: NCCL needs none)
    if (rt_exec_init(&s->x, s->p, s->be, s->host, s->o->layout, err, sizeof err) != 0 ||
        (!s->be->collective && rt_comm_prepare(s->comm, s->p, err, sizeof err) != 0))
        return rt_run_error("%s", err), -1;
    s->x.plan_dir = s->o->plan_dir;
    if (s->o->profile && s->lead && !(s->prof = rt_profile_new(s->p)))
        return rt_run_error("out of memory for --profile"), -1;
    if (!s->o->gemm_first)
        rt_cuda_tune_gemms(s->be, &s->x, s->tuned, sizeof s->tuned);
    if (s->o->data)   // (the link is timed through the arenas; an evaluation runs no host work)
        s->rates = rt_host_measure(&s->x);
    rt_exec_set_comm(&s->x, s->comm);
    return 0;
}

// What the checkpoint decides over the command line, said by name.
static void say_overruled(const TrainSession *s) {
    const RunOptions *o = s->o;
    if (!s->lead)
        return;
    if (o->seed_given && o->seed != s->seed)
        fprintf(s->out, "ftc run: warning: --seed %llu not used: the checkpoint's seed %llu goes on (the data "
                "order and dropout follow it)\n", (unsigned long long)o->seed, (unsigned long long)s->seed);
    if (o->weights)
        fprintf(s->out, "ftc run: warning: --weights %s not read: the checkpoint's weights go on\n", o->weights);
    if (s->x.data_print && s->x.data_print != s->data_print)
        fprintf(s->out, "ftc run: warning: --data %s is not the file %s trained on (its size or contents "
                "differ): the run goes on over this one\n", o->data, s->ckpt);
}

// Resuming: the state of a checkpoint, its step and seed (the data order, dropout and
// AdamW's bias correction follow from them), so the run goes on as if never stopped.
// Rank 0 finds it; every rank loads its own state from it. -1 after saying why.
static int resume(TrainSession *s) {
    char err[1024];
    int found = s->lead ? rt_checkpoint_find(s->o->resume, s->ckpt, sizeof s->ckpt, err, sizeof err) : 0;
    double status[1] = {found != 0};
    if (s->ranks > 1 && (rt_comm_bcast(s->comm, s->ckpt, sizeof s->ckpt, 0, err, sizeof err) != 0 ||
                         rt_comm_sum(s->comm, status, 1, err, sizeof err) != 0))
        return rt_run_error("%s", err), -1;
    if (status[0] != 0) {
        if (s->lead)
            rt_run_error("%s", err);
        return -1;
    }
    if (rt_checkpoint_load(&s->x, s->ckpt, &s->done, &s->seed, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    say_overruled(s);
    if (s->done > s->steps) {
        if (s->lead)
            rt_run_error("%s is step %lld; --steps %lld leaves nothing to run", s->ckpt, (long long)s->done,
                         (long long)s->steps);
        return -1;
    }
    return 0;
}

// Before step one: a finished run started again (a job restarted after its last
// checkpoint, say), which has nothing to train and saves its weights again as they were;
// a schedule that decays to an end before the last step, past which the learning rate
// stays where the schedule left it.
static void say_schedule(const TrainSession *s) {
    const Plan *p = s->p;
    bool decays = p->schedule != SCHED_CONSTANT && p->steps > 0;
    const char *kind = p->schedule == SCHED_LINEAR ? "linear" : "cosine";
    if (!s->lead)
        return;
    if (s->o->resume && s->done == s->steps)
        fprintf(s->out, "ftc run: note: %s is step %lld, the last of --steps %lld: nothing left to train%s\n",
                s->ckpt, (long long)s->done, (long long)s->steps, s->o->save ? "; its weights saved again" : "");
    if (s->o->resume && decays && s->done >= p->steps)
        fprintf(s->out, "ftc run: note: the %s schedule ended at step %lld (the train section's steps); "
                "steps %lld to %lld run at lr %g\n", kind, (long long)p->steps, (long long)s->done + 1,
                (long long)s->steps, rt_lr_at(p, s->done + 1));
    if (!s->o->resume && decays && s->steps > p->steps)
        fprintf(s->out, "ftc run: note: the %s schedule ends at step %lld (the train section's steps); "
                "steps %lld to %lld run at lr %g\n", kind, (long long)p->steps, (long long)p->steps + 1,
                (long long)s->steps, rt_lr_at(p, p->steps + 1));
}

// A LoRA adapter names the directory of its base weights (absolute), for PEFT's
// AutoPeftModelForCausalLM; without --weights, the model's name.
static void base_model(Exec *x, const char *weights) {
    char dir[4096], *abs;
    struct stat st;
    snprintf(dir, sizeof dir, "%s", weights);
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {   // a file: its directory
        char *slash = strrchr(dir, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else
            slash[slash == dir] = '\0';   // ("/x" is in "/")
    }
    if ((abs = realpath(dir, NULL)) != NULL) {
        snprintf(x->base_model, sizeof x->base_model, "%s", abs);
        free(abs);
    }
}

// The data order, and the weights: the checkpoint's (loaded already), --weights', or the
// plan's initialisation; -1 after saying why.
static int start_weights(TrainSession *s) {
    const RunOptions *o = s->o;
    Exec *x = &s->x;
    char err[1024];
    // A run killed between a checkpoint and its pruning left one too many; the steps
    // left may save none (the last step never does), so prune before the first (rank 0,
    // which alone renames and prunes checkpoints).
    if (s->lead && o->save && o->save_every > 0)
        rt_checkpoint_prune(o->save, o->keep > 0 ? o->keep : 2);
    rt_feed_shuffle(&s->feed, s->p, s->seed);
    x->seed = s->seed;
    x->data_print = s->data_print;   // (what this run's checkpoints record)
    x->poison = o->poison;
    x->graphs = !o->no_graphs;
    if (!o->resume && !o->weights)
        rt_weights_init(x, s->seed);
    else if (!o->resume && (s->loaded = rt_weights_load(x, o->weights, s->seed, &s->fresh, err, sizeof err)) < 0)
        return rt_run_error("%s", err), -1;
    if (o->adapter && (s->adapted = rt_adapters_load(x, o->adapter, err, sizeof err)) < 0)
        return rt_run_error("%s", err), -1;
    if (o->weights)
        base_model(x, o->weights);
    if (s->lead && o->save && (s->p->lora_r == 0 || o->merge) && !rt_save_has_config(x))
        fprintf(s->out, "ftc run: warning: --save %s: no config.json to save beside the weights (the weights "
                "came with none, and the plan has none: model %s is of no family ftc import writes); "
                "from_pretrained needs one\n", o->save, s->p->model);
    return 0;
}

// A precomputed reference's sums (reference.c), before the first step; -1 after saying why.
static int reference_sums(TrainSession *s) {
    char err[1024];
    bool computed;
    double t = now_s();
    char dir[4400];   // --save, else the directory of the checkpoint resumed
    snprintf(dir, sizeof dir, "%s", s->o->save ? s->o->save : s->o->resume ? s->ckpt : "");
    if (!s->o->save && s->o->resume && strrchr(dir, '/'))
        *strrchr(dir, '/') = '\0';
    const char *keep = s->lead && dir[0] ? dir : NULL;
    if (rt_reference_sums(&s->x, &s->feed, keep, s->o->resume != NULL, s->p->lora_r > 0, &computed, err,
                          sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    if (!s->lead || !s->p->nins[PHASE_REF])
        return 0;
    unsigned long long n = s->feed.nwin + (s->feed.eval ? s->feed.eval_nwin : 0);
    if (!computed)
        fprintf(s->out, "reference: the log-probabilities of %llu windows read from %s/reference_logps.bin "
                "(reference = precomputed)\n", n, keep);
    else
        fprintf(s->out, "reference: the log-probabilities of %llu windows computed in %.2fs (reference = "
                "precomputed)%s%s%s\n", n, now_s() - t, keep ? ", kept in " : "", keep ? keep : "",
                keep ? "/reference_logps.bin" : "");
    return 0;
}

int rt_session_open(TrainSession *s, const RunOptions *o, const Plan *p, Comm *comm, FILE *out,
                    const TrainListener *listen) {
    *s = (TrainSession){.o = o, .p = p, .comm = comm, .ranks = comm->ranks, .rank = comm->rank,
                        .lead = comm->rank == 0, .out = out, .listen = listen, .lock = -1, .report_lock = -1,
                        .seed = o->seed, .early = plan_updates_in_backward(p)};
    // --steps, the train section's, or 10; none in a session that only evaluates
    s->steps = !o->data ? 0 : o->steps ? o->steps : p->steps ? p->steps : 10;
    s->report_dir = !s->lead ? NULL : o->report ? o->report : o->save;
    if (check_options(s) != 0 || open_data(s) != 0 || open_backend(s) != 0 || stage_and_lock(s) != 0 ||
        open_exec(s) != 0 || (o->resume && resume(s) != 0))
        return -1;
    say_schedule(s);
    if (start_weights(s) != 0 || reference_sums(s) != 0)
        return -1;
    int64_t mem = 0;
    for (int a = 0; a < ARENA_COUNT; a++)
        mem += p->arena_bytes[a];
    fmt_bytes(s->mems, sizeof s->mems, mem);
    // A step takes accum micro-batches on each rank: micro-step m of rank r is the step's
    // micro-batch m·R + r, so R ranks read the windows one rank reads with R·accum steps
    // of accumulation, and scale the loss alike.
    s->per_step = p->micro_batch * p->accum * s->ranks, s->tokens_per_step = p->seq * s->per_step;
    if (emit(s, EV_OPEN) != 0)
        return -1;
    if (s->prof && s->steps - s->done < 2 && s->steps > s->done)
        return rt_run_error("--profile times the steps after the first: this run takes %lld (--steps)",
                            (long long)(s->steps - s->done)), -1;
    s->step = s->done;
    s->skipped0 = s->x.skipped;
    s->t0 = now_s();
    fflush(out);   // what was said before step one shows now, not when a buffer fills
    return 0;
}

//
// A step.
//

// A step's micro-steps as they went.
typedef struct MicroSum {
    double loss;            // the finite losses' sum (over the ranks, once summed)
    double pref[PREF_STATS];    // a preference loss's stats, summed likewise
    int64_t bad;            // micro-steps whose loss was not finite (over the ranks, once summed)
    int64_t bad_micro;      // this rank's first such, or -1
    float bad_loss;         // its loss (NAN: another rank's)
} MicroSum;

// The step's micro-steps on this rank, forward and backward, from window `base`. Every rank
// runs every micro-step (their collectives pair up); one rank alone stops at the first
// loss that is not finite, and with the updates inside backward such a loss stops before
// its backward. -1 after saying why.
static int micro_steps(TrainSession *s, uint64_t base, MicroSum *m) {
    const Plan *p = s->p;
    Exec *x = &s->x;
    char err[1024];
    for (int64_t k = 0; k < p->accum && (s->ranks > 1 || !m->bad); k++) {
        x->micro = k * s->ranks + s->rank;
        x->last = k == p->accum - 1;
        if (k == 0 && rt_feed_count(x, &s->feed, base, err, sizeof err) != 0)
            return step_failed(s, err);
        if (k == 0)
            s->trained += s->feed.count;
        if (rt_feed_batch(x, &s->feed, base + (uint64_t)(x->micro * p->micro_batch), err, sizeof err) != 0 ||
            rt_exec_phase(x, PHASE_FWD, err, sizeof err) != 0)
            return step_failed(s, err);
        float l;   // (made by the forward; with the updates inside backward, read before it)
        rt_read_f32(x, plan_role(p, PR_LOSS)->id, &l);
        if ((!s->early || isfinite(l)) && rt_exec_phase(x, PHASE_BWD, err, sizeof err) != 0)
            return step_failed(s, err);
        const PlanBuffer *ps = plan_role(p, PR_PREF_STATS);
        float st[PREF_STATS];
        if (ps && isfinite(l)) {
            rt_read_f32(x, ps->id, st);
            for (int i = 0; i < PREF_STATS; i++)
                m->pref[i] += st[i];
        }
        if (isfinite(l))
            m->loss += l;
        else if (!m->bad++)
            m->bad_micro = k, m->bad_loss = l;
    }
    return 0;
}

// The step's loss and its non-finite micro-batches, summed over the ranks.
static int sum_ranks(TrainSession *s, MicroSum *m) {
    char err[1024];
    double v[2 + PREF_STATS] = {m->loss, (double)m->bad};
    memcpy(v + 2, m->pref, sizeof m->pref);
    if (rt_comm_sum(s->comm, v, 2 + PREF_STATS, err, sizeof err) != 0)
        return step_failed(s, err);
    m->loss = v[0];
    memcpy(m->pref, v + 2, sizeof m->pref);
    if (m->bad == 0 && v[1] > 0)
        m->bad_loss = NAN;
    m->bad = (int64_t)v[1];
    return 0;
}

static const char *nonfinite_name(float v) { return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

// Where a search for the first non-finite value ended, for an error message: "; the first
// non-finite value is in NAME, written by OP at FILE:LINE:COL", or `none` when no value was.
static void first_nonfinite(const Plan *p, const PlanInstr *bad, int out, const char *none, char *where,
                            size_t len) {
    if (!bad) {
        snprintf(where, len, "; %s", none);
        return;
    }
    char what[256] = "";
    if (bad->nstep > 0) {   // a fused kernel: the ops it runs
        snprintf(what, sizeof what, "a fused kernel (");
        for (int s = 0; s < bad->nstep; s++)
            snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", s ? ", " : "",
                     op_desc(bad->step[s].op)->name);
        snprintf(what + strlen(what), sizeof what - strlen(what), ")");
    } else {
        snprintf(what, sizeof what, "%s", op_desc(bad->op)->name);
    }
    int n = snprintf(where, len, "; the first non-finite value is in %s, written by %s", p->buf[out].name, what);
    if (bad->line > 0 && n > 0 && (size_t)n < len)
        snprintf(where + n, len - (size_t)n, " at %s:%d:%d", p->source ? p->source : "the .ft", bad->line,
                 bad->col);
}

// A non-finite loss at `step`: runs the micro-batch's forward again, reading every
// output, and names the first instruction that wrote a NaN or infinity, with its place
// in the .ft. The weights are those before the step (the optimizer has not run).
static void nonfinite(Exec *x, float loss, int64_t step, Feed *f, uint64_t first) {
    const Plan *p = x->plan;
    char err[1024], where[1400] = "";
    const PlanInstr *bad = NULL;
    int out = -1;
    if (rt_feed_batch(x, f, first, err, sizeof err) != 0 ||
        rt_exec_phase_find_nonfinite(x, PHASE_FWD, &bad, &out, err, sizeof err) != 0)
        snprintf(where, sizeof where, "; looking for where it starts failed: %s", err);
    else
        first_nonfinite(p, bad, out, "every forward value is finite: the loss itself overflowed", where,
                        sizeof where);
    rt_run_error("step %lld, micro-step %lld: the loss is %s%s; stopped before the optimizer step, "
                 "the weights are those of step %lld", (long long)step, (long long)x->micro + 1,
                 nonfinite_name(loss), where, (long long)step - 1);
}

// A gradient that is not finite at `step`, every loss of it finite: the optimizer took no
// update (and zeroed the gradients), so the step's micro-batches are run again from
// window `first`, backward reading every output, to name the first instruction that wrote a
// NaN or an infinity, with its place in the .ft.
static void nonfinite_grad(Exec *x, double norm, int64_t step, Feed *f, uint64_t first) {
    const Plan *p = x->plan;
    char err[1024], where[1400] = "";
    const PlanInstr *bad = NULL;
    int out = -1;
    int64_t m = 0;
    for (; m < p->accum && !bad; m++) {
        x->micro = m;
        if (rt_feed_batch(x, f, first + (uint64_t)(m * p->micro_batch), err, sizeof err) != 0 ||
            rt_exec_phase(x, PHASE_FWD, err, sizeof err) != 0 ||
            rt_exec_phase_find_nonfinite(x, PHASE_BWD, &bad, &out, err, sizeof err) != 0) {
            snprintf(where, sizeof where, "; looking for where it starts failed: %s", err);
            break;
        }
    }
    char mstep[64] = "";
    if (bad && p->accum > 1)
        snprintf(mstep, sizeof mstep, " (in micro-step %lld's backward)", (long long)m);
    const char *what = "a gradient is not finite";
    if (!*where && !bad) {   // every gradient finite: only the norm's fp32 sum overflowed
        what = "the gradients' norm overflowed";
        snprintf(where, sizeof where, "; every value backward wrote is finite, but their sum of "
                 "squares exceeds fp32 (a norm above 1.8e19)");
    } else if (!*where) {
        first_nonfinite(p, bad, out, "", where, sizeof where);
    }
    rt_run_error("step %lld: %s (their norm is %g)%s%s; the step's update was not taken, the weights are "
                 "those of step %lld", (long long)step, what, norm, where, mstep, (long long)step - 1);
}

// A loss that is not finite, not to be skipped: said, on one process with the first value
// that was not finite; the run stops before the optimizer spreads it into the weights.
static int stop_at_loss(TrainSession *s, const MicroSum *m, uint64_t base) {
    long long step = (long long)s->step;
    if (s->ranks == 1) {
        s->x.micro = m->bad_micro;
        nonfinite(&s->x, m->bad_loss, s->step, &s->feed, base + (uint64_t)(m->bad_micro * s->p->micro_batch));
    } else if (m->bad_micro >= 0) {
        rt_run_error("step %lld, micro-step %lld: the loss is %s; stopped before the optimizer step, the "
                     "weights are those of step %lld", step, (long long)m->bad_micro + 1,
                     nonfinite_name(m->bad_loss), step - 1);
    } else if (s->lead) {
        rt_run_error("step %lld: the loss is not finite on another rank; stopped before the optimizer step, "
                     "the weights are those of step %lld", step, step - 1);
    }
    return -1;
}

// A gradient that is not finite, not to be skipped: said, on one process with the first
// value that was not finite.
static int stop_at_gradient(TrainSession *s, uint64_t base) {
    long long step = (long long)s->step;
    double gnorm = s->last.grad_norm;
    if (s->early)
        rt_run_error("step %lld: a gradient is not finite (their norm is %g); the plan updates each parameter "
                     "inside backward, so those whose gradients were complete before it were updated, and "
                     "nothing of this step is saved; compile it with --update step to stop before any update "
                     "and find the first value that is not finite", step, gnorm);
    else if (s->ranks == 1)
        nonfinite_grad(&s->x, gnorm, s->step, &s->feed, base);
    else if (s->lead)
        rt_run_error("step %lld: a gradient is not finite (their norm is %g); the step's update was not taken, "
                     "the weights are those of step %lld", step, gnorm, step - 1);
    return -1;
}

// The step's update: skipped when its loss was not finite (`skip`), else the optimizer
// phase, after which a gradient that is not finite stops the run, or skips the step
// under a loss scale (an overflow, which backs the scale off) or --skip-nonfinite. -1
// after saying why.
static int update(TrainSession *s, const MicroSum *m, bool skip, uint64_t base) {
    const Plan *p = s->p;
    Exec *x = &s->x;
    StepResult *r = &s->last;
    char err[1024];
    bool bad_grad = false, skip_loss = skip;
    r->loss = m->loss;
    r->pref = plan_role(p, PR_PREF_STATS) != NULL;
    memcpy(r->pref_stats, m->pref, sizeof m->pref);
    if (skip) {
        rt_exec_skip_update(x);
        r->loss = m->bad_loss;
    } else if (rt_exec_phase(x, PHASE_OPT, err, sizeof err) != 0) {
        return step_failed(s, err);
    } else if (!plan_role(p, PR_TARGET_COUNT)) {   // each micro-step's loss its own mean, not its share
        r->loss /= (double)(p->accum * s->ranks);
    }
    r->scaled = p->scale_init > 0;   // fp16's dynamic loss scale, as this step ran with it
    r->scale = x->loss_scale;
    if (!skip && rt_grad_stats(x, &r->grad_norm, &bad_grad) && bad_grad) {
        // every update left its parameter as it was; under a loss scale an overflow
        if (!r->scaled && !s->o->skip_nonfinite)
            return stop_at_gradient(s, base);
        skip = true;
        x->skipped++;
    }
    if (r->scaled && !skip_loss)
        rt_scale_update(x, bad_grad);
    r->skipped = skip;
    return 0;
}

// After step one on a GPU: the memory the device holds (on the plan's preset card counted
// as nvidia-smi counts, the card's total less what is free: the driver's own count (its
// total less free) leaves out what it keeps below the card's total, which the plan's
// reserve holds); elsewhere every arena is in this process: its peak resident set.
static void measure_memory(TrainSession *s) {
    MeasuredMemory *m = &s->mem;
    const Plan *p = s->p;
    Backend *be = s->be;
    int64_t nominal, driver;
    m->device = be->memory && be->memory(be, &m->total, &m->free_bytes, m->name, sizeof m->name);
    if (m->device) {
        // the preset's card: its driver total within 1% of the preset's
        m->card = p->gpu && s->o->card && s->o->card(p->gpu, &nominal, &driver) && nominal >= m->total &&
                  (double)llabs(m->total - driver) <= 0.01 * (double)driver;
        m->nominal = m->card ? nominal : 0;
        m->used = m->card ? nominal - m->free_bytes : m->total - m->free_bytes;
        snprintf(m->what, sizeof m->what, "%.100s device memory in use after step one (every process on it%s)",
                 m->name, m->card ? "; the card's total less free" : "");
    }
    if (!m->used) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            m->used = (int64_t)ru.ru_maxrss * 1024;
        snprintf(m->what, sizeof m->what, "peak resident memory of ftc after step one (the %s backend: "
                 "the arenas are host memory)", be->name);
    }
}

// The step's end: the run's losses so far, step one's measures (EV_MEASURED), its times
// (EV_STEP).
static int step_done(TrainSession *s, double ts) {
    StepResult *r = &s->last;
    bool first = r->step == s->done + 1;
    if (!r->skipped) {
        if (s->nrecent == 0)
            s->first_loss = r->loss, s->first_step = r->step;
        s->recent[s->nrecent++ % 10] = r->loss;
    }
    if (first && s->prof)   // the first step warms caches and the GPU up: timed from the next
        rt_profile_on(&s->x, s->prof, true);
    if (first)
        measure_memory(s);
    if (first && emit(s, EV_MEASURED) != 0)
        return -1;
    double t1 = now_s();
    if (first)
        s->t1st = t1;
    r->step_s = t1 - ts, r->elapsed_s = t1 - s->t0;
    return emit(s, EV_STEP);
}

// Trains step s->step + 1: its micro-steps, their losses over the ranks, the update; a
// loss or a gradient that is not finite stops the run unless skipped. -1 after saying why.
static int train_step(TrainSession *s) {
    Exec *x = &s->x;
    double ts = now_s();
    int64_t step = ++s->step;
    uint64_t base = (uint64_t)((step - 1) * s->per_step);   // the step's first window
    MicroSum m = {.bad_micro = -1};
    x->step = step;
    x->lr = rt_lr_at(s->p, step - x->skipped);   // the updates taken, as Trainer's scheduler counts
    s->last = (StepResult){.step = step, .lr = x->lr, .eval_loss = NAN};
    if (micro_steps(s, base, &m) != 0 || (s->ranks > 1 && sum_ranks(s, &m) != 0))
        return -1;
    bool skip = m.bad > 0 && s->o->skip_nonfinite;
    if (m.bad > 0 && !skip)
        return stop_at_loss(s, &m, base);
    if (update(s, &m, skip, base) != 0)
        return -1;
    return step_done(s, ts);
}

int rt_session_step(TrainSession *s) {
    const RunOptions *o = s->o;
    if (train_step(s) != 0)
        return -1;
    int64_t step = s->step;
    bool eval = s->feed.eval && ((o->eval_every > 0 && step % o->eval_every == 0) || step == s->steps);
    if ((eval && rt_session_eval(s) != 0) || emit(s, EV_STEP_END) != 0)
        return -1;
    if (o->save && o->save_every > 0 && step % o->save_every == 0 && step < s->steps)
        return rt_session_save(s, true);
    return 0;
}

//
// Evaluating, saving, stopping, closing.
//

// Runs the eval phase over `eval_batches` micro-batches of the eval file from its first
// window: into s->eval the mean loss over every trained target of them (each batch's loss
// is the mean over its own, so weighted by their count) and their number. The weights,
// the optimizer state and the training's data order are untouched.
static int evaluate(TrainSession *s, char *err, size_t errlen) {
    const Plan *p = s->p;
    Exec *x = &s->x;
    int id = plan_role(p, PR_EVAL_LOSS)->id;
    double sum = 0;
    int64_t targets = 0;
    for (int64_t b = 0; b < s->eval_batches; b++) {
        int64_t count;
        if (rt_feed_eval_batch(x, &s->feed, (uint64_t)(b * p->micro_batch), &count, err, errlen) != 0)
            return -1;
        if (count == 0)   // nothing of it is trained: it adds nothing to the mean
            continue;
        if (rt_exec_phase(x, PHASE_EVAL, err, errlen) != 0)
            return -1;
        float l;
        rt_read_f32(x, id, &l);
        sum += (double)l * (double)count;
        targets += count;
    }
    s->eval.loss = sum / (double)targets;
    s->eval.targets = targets;
    return 0;
}

int rt_session_eval(TrainSession *s) {
    char err[1024];
    double te = now_s();
    if (emit(s, EV_EVALUATING) != 0)
        return -1;
    int rc = evaluate(s, err, sizeof err);
    if (rc != 0 && !s->o->data)   // (a session that only evaluates has no step)
        return rt_run_error("evaluating on %s: %s", s->o->eval_data, err), -1;
    if (rc != 0)
        return rt_run_error("step %lld, evaluating on %s: %s", (long long)s->step, s->o->eval_data, err), -1;
    s->eval.time_s = now_s() - te;
    s->last.eval_loss = s->eval.loss;
    return emit(s, EV_EVAL);
}

// Saves the weights into --save DIR as one set (save.c); -1 after saying why. On a job of
// several ranks rank 0 saves, gathering the shards from the others, which serve it.
static int save_weights(TrainSession *s) {
    Exec *x = &s->x;
    char err[1024];
    if (!s->lead && rt_weights_serve(x, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    if (!s->lead)
        return 0;
    int rc = rt_save_weights(x, s->o->save, s->o->merge, s->o->shard_bytes ? s->o->shard_bytes : RT_SHARD_BYTES,
                             s->out, err, sizeof err);
    if (rc != 0)
        rt_run_error("%s", err);
    if (rt_weights_serve_end(x, rc == 0, err, sizeof err) != 0 && rc == 0)
        return rt_run_error("%s", err), -1;
    return rc;
}

// A save that failed left the one before it in place (saves are renamed into place whole):
// which weights the directory holds now, for the run's output and its report.
static void save_failed(const TrainSession *s) {
    if (s->saved_at > 0)
        rt_run_error("%s holds the weights this run saved after step %lld", s->o->save, (long long)s->saved_at);
    else
        rt_run_error("%s holds what it held before this run (no save of this run completed)", s->o->save);
}

int rt_session_save(TrainSession *s, bool state) {
    const RunOptions *o = s->o;
    char err[1024];
    if (emit(s, EV_SAVING) != 0)
        return -1;
    if (save_weights(s) != 0) {
        if (s->lead)
            save_failed(s);
        return -1;
    }
    s->saved_at = s->x.step;
    if (!state)
        return 0;
    if (rt_checkpoint_save(&s->x, o->save, s->x.step, s->seed, o->keep > 0 ? o->keep : 2, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    return emit_event(s, (TrainEvent){.kind = EV_SAVED, .step = s->x.step});
}

void rt_session_stop(TrainSession *s, int signal) {
    emit_event(s, (TrainEvent){.kind = EV_STOPPED, .step = s->step, .signal = signal});
    s->steps = s->step;
}

// --profile's table: the device's work of the steps after the first.
static int write_profile(TrainSession *s) {
    Backend *be = s->be;
    char device[256], err[1024];
    int64_t total, free_bytes;
    if (!be->memory || !be->memory(be, &total, &free_bytes, device, sizeof device))
        snprintf(device, sizeof device, "the %s backend", be->name);
    if (rt_profile_write(s->prof, s->p, s->o->profile, device, s->steps - s->done - 1, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    return emit(s, EV_PROFILED);
}

// After the last step: the device's queues drained, so the last step's time is all in;
// the run summed up, --profile written; the weights saved, and with --save-every the last
// step's state too, so that a finished run goes on with --resume and more --steps (its
// checkpoint after the weights, as every step's). -1 after saying why.
static int finish(TrainSession *s) {
    const RunOptions *o = s->o;
    char err[1024];
    if (s->be->sync(s->be, err, sizeof err) != 0)
        return rt_run_error("%s", err), -1;
    s->tend = now_s();
    int64_t ran = s->steps - s->done;   // steps this run took (after a resumed one's)
    if (ran == 0)
        s->x.step = s->steps;   // (the weights saved are that step's)
    else if (emit(s, EV_FINISHED) != 0 || (s->prof && write_profile(s) != 0))
        return -1;
    if (o->save && rt_session_save(s, o->save_every > 0 && ran > 0) != 0)
        return -1;
    return emit(s, EV_DONE);
}

int rt_session_close(TrainSession *s, int rc) {
    if (rc == 0 && finish(s) != 0)
        rc = 1;
    if (rc != 0) {   // the steps taken and why it stopped, for whoever looks into it
        const char *why = rt_run_errors();
        emit_event(s, (TrainEvent){.kind = EV_FAILED, .step = s->step,
                                   .why = why[0] ? why : "the run stopped with an error"});
    }
    if (s->report_lock >= 0)
        close(s->report_lock);
    if (s->lock >= 0)
        close(s->lock);
    rt_exec_free(&s->x);
    rt_profile_free(s->prof);
    if (s->be)
        s->be->destroy(s->be);
    if (s->host)
        s->host->destroy(s->host);
    rt_feed_close(&s->feed);
    return rc != 0;
}
