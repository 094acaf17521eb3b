// train.c — `ftc run`: the training loop. Each step runs `accum` micro-steps
// (forward, backward) on windows of seq + 1 tokens drawn in a seeded shuffled order,
// then the optimizer phase at the schedule's learning rate (the gradients' global norm
// found, clipped, and the step skipped if a gradient is not finite), evaluates when asked
// (the plan's eval phase), records the step in the run report when there is one, and
// prints a progress line (rewritten in place on a terminal, with the time left):
//
//   step 3/20  loss 4.812345  tok/s 10234  lr 3.000e-03  gnorm 1.2345  elapsed 0.41s  mem 3.2 MiB
//
// Fields are "name value" pairs separated by two spaces, so a program can split them.
#include "runtime.h"
#include "comm.h"
#include "data.h"
#include "fileio.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
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

// Which rank an error comes from, on a job of several ("rank 1 of 4: "); empty otherwise.
static char who[64];
static char errors[4096];   // the run's errors so far, for its report

// One write, so that the lines of ranks sharing a terminal do not interleave.
__attribute__((format(printf, 1, 2)))
static int error(const char *fmt, ...) {
    char line[4096];
    int n = snprintf(line, sizeof line, "ftc run: error: %s", who);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line - 1)
        n += vsnprintf(line + n, sizeof line - 1 - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    // (kept for the run's report: every error of the run, in order)
    size_t k = strlen(errors), m = (size_t)n - 1 - strlen("ftc run: error: ");
    if (k + m + 2 < sizeof errors)
        snprintf(errors + k, sizeof errors - k, "%s%.*s", k ? " " : "", (int)m, line + strlen("ftc run: error: "));
    fflush(stderr);
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
    return 1;
}

// A rank ended by a signal says which and from whom. A rank cannot tell why: its launcher
// (mpirun, srun) signals every rank when one fails, and when the job itself is stopped from
// outside (scancel, a SIGTERM or Ctrl-C to mpirun), so the message names both; a rank that
// failed has said so first.
static char term_msg[2][320];

static void on_term(int sig) {
    const char *m = term_msg[sig == SIGINT];
    ssize_t w = write(2, m, strlen(m));
    (void)w;
    _exit(1);
}

static void catch_term(const Comm *c) {
    const char *from = c->launcher ? c->launcher : "the launcher";
    for (int k = 0; k < 2; k++)
        snprintf(term_msg[k], sizeof term_msg[k], "ftc run: %sstopped by %s from %s: the job was ended, from "
                 "outside or after another rank failed (whose error would come first)\n", who,
                 k ? "SIGINT" : "SIGTERM", from);
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

// A run of one process asked to stop (Ctrl-C, SIGTERM) finishes the step it is in, saves
// when --save was given, prints its summary and exits 128 + the signal; a second one
// ends it at once.
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) {
    if (stop_signal)
        _exit(128 + sig);
    stop_signal = sig;
}

static void catch_stop(void) {
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

// A target the loss ignores (PyTorch's ignore_index): every negative target is.
enum { IGNORED_TARGET = -100 };

// Where the batches come from: the token file in its shuffled order, and host staging for
// one window (`window`, `info`: seq + 1 each) and one micro-batch (`tokens`, `targets`,
// `positions`: micro_batch x seq each).
typedef struct Feed {
    DataFile *d;
    const uint64_t *order;
    uint64_t nwin;
    int32_t *window, *tokens, *targets, *positions;
    uint8_t *info;
    int64_t count;   // the trained targets of the step under way (step_count)
} Feed;

// The trained targets of the step's windows from `first` on, into f->count: ranks x accum x
// micro_batch of them (every rank's micro-batches: the count is the whole global step's, so
// each rank's loss is its share of the step's mean and the ranks' gradients sum to it), the
// loss their mean over the whole step, whatever the micro-batch and the number of ranks.
static int step_count(const Exec *x, Feed *f, uint64_t first, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int64_t ranks = p->ranks > 1 ? p->ranks : 1;
    f->count = 0;
    for (int64_t k = 0; k < ranks * p->accum * p->micro_batch; k++) {
        uint64_t n;
        if (data_window_trained(f->d, f->order[(first + (uint64_t)k) % f->nwin], (int)p->seq, &n, err,
                                errlen) != 0)
            return -1;
        f->count += (int64_t)n;
    }
    return 0;
}

// Fills the tokens and targets buffers (and the position ids, when the model reads them,
// and the step's target count) with the micro_batch windows from position `first` of the
// data order. A target whose token is not trained (the token file's mask) is IGNORED_TARGET.
// With packing, the position ids restart at every record start (and at the window's start),
// as transformers' position_ids of packed sequences; else they run 0..seq-1 along each window.
static int load_batch(Exec *x, Feed *f, uint64_t first, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int S = (int)p->seq;
    for (int64_t b = 0; b < p->micro_batch; b++) {
        uint64_t w = f->order[(first + (uint64_t)b) % f->nwin];
        if (data_read_window(f->d, w, S, f->window, f->info, (int32_t)p->vocab, err, errlen) != 0)
            return -1;
        memcpy(f->tokens + b * S, f->window, sizeof(int32_t) * (size_t)S);
        for (int j = 0; j < S; j++) {
            f->targets[b * S + j] = f->info[j + 1] & DATA_TRAIN ? f->window[j + 1] : IGNORED_TARGET;
            f->positions[b * S + j] = j == 0 || (f->info[j] & DATA_START) ? 0 : f->positions[b * S + j - 1] + 1;
        }
    }
    rt_write_raw(x, plan_role(p, PR_TOKENS)->id, f->tokens);
    rt_write_raw(x, plan_role(p, PR_TARGETS)->id, f->targets);
    rt_write_positions(x, p->packing ? f->positions : NULL);
    rt_write_target_count(x, f->count);
    return 0;
}

// Saves the weights into --save DIR as one set (save.c); -1 after printing why. On a job of
// several ranks rank 0 saves, gathering the shards from the others, which serve it.
static int save(Exec *x, const char *dir, bool merge, FILE *out) {
    char err[1024];
    if (x->rank != 0) {
        if (rt_weights_serve(x, err, sizeof err) != 0)
            return error("%s", err), -1;
        return 0;
    }
    int rc = rt_save_weights(x, dir, merge, out, err, sizeof err);
    if (rc != 0)
        error("%s", err);
    if (rt_weights_serve_end(x, rc == 0, err, sizeof err) != 0 && rc == 0)
        return error("%s", err), -1;
    return rc;
}

// A save that failed left the one before it in place (saves are renamed into place whole):
// which weights the directory holds now, for the run's output and its report.
static void save_failed(const char *dir, int64_t saved_at) {
    if (saved_at > 0)
        error("%s holds the weights this run saved after step %lld", dir, (long long)saved_at);
    else
        error("%s holds what it held before this run (no save of this run completed)", dir);
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

// After the first step on a GPU: what the device holds against what the plan promised;
// the bytes in use (0 when the backend is not a GPU's), and what they are into `what`. On
// the plan's preset card the count is nvidia-smi's, the card's total less what is free: the
// driver's own count (its total less free) leaves out what it keeps below the card's total,
// which the plan's reserve holds.
static int64_t report_memory(Backend *be, const Plan *p, const RunOptions *o, char *what, size_t len) {
    int64_t total, free_b, nominal, driver;
    char name[256], a[32], r[32], u[32], t[32], h[32], k[32];
    if (!be->memory || !be->memory(be, &total, &free_b, name, sizeof name))
        return 0;
    int64_t planned = p->arena_bytes[ARENA_DEVICE] + p->reserve_bytes, used = total - free_b;
    // the preset's card: its driver total within 1% of the preset's
    bool card = p->gpu && o->card && o->card(p->gpu, &nominal, &driver) && nominal >= total &&
                (double)llabs(total - driver) <= 0.01 * (double)driver;
    int64_t charged = card ? nominal - free_b : used;
    snprintf(what, len, "%.100s device memory in use after step one (every process on it%s)", name,
             card ? "; the card's total less free" : "");
    fprintf(o->out, "memory: planned %s (arena %s + reserve %s); %s shows %s in use of %s (%+.1f%%, ",
            fmt_bytes(a, sizeof a, planned), fmt_bytes(r, sizeof r, p->arena_bytes[ARENA_DEVICE]),
            fmt_bytes(u, sizeof u, p->reserve_bytes), name, fmt_bytes(t, sizeof t, charged),
            fmt_bytes(h, sizeof h, card ? nominal : total),
            planned ? 100.0 * (double)(charged - planned) / (double)planned : 0.0);
    if (card)
        fprintf(o->out, "as nvidia-smi counts: the driver's %s in use and the %s it keeps below the "
                        "card's total; ", fmt_bytes(t, sizeof t, used), fmt_bytes(k, sizeof k, nominal - total));
    fprintf(o->out, "every process on it)\n");
    return charged;
}

// The console: on a terminal one progress line rewritten in place each step (with an
// estimate of the time left), kept every --log-every steps when that is given; elsewhere a
// plain line every --log-every steps (every step by default), the first and the last and
// every skipped one too. Any other line first ends a line left in place.
typedef struct Console {
    FILE *out;
    bool tty, pending;
    int64_t every;          // 0 on a terminal: nothing kept but the last
} Console;

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
    if (load_batch(x, f, first, err, sizeof err) != 0 ||
        rt_exec_phase_find_nonfinite(x, PHASE_FWD, &bad, &out, err, sizeof err) != 0)
        snprintf(where, sizeof where, "; looking for where it starts failed: %s", err);
    else
        first_nonfinite(p, bad, out, "every forward value is finite: the loss itself overflowed", where,
                        sizeof where);
    error("step %lld, micro-step %lld: the loss is %s%s; stopped before the optimizer step, "
          "the weights are those of step %lld", (long long)step, (long long)x->micro + 1,
          isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf", where, (long long)step - 1);
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
        if (load_batch(x, f, first + (uint64_t)(m * p->micro_batch), err, sizeof err) != 0 ||
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
    error("step %lld: %s (their norm is %g)%s%s; the step's update was not taken, the weights are "
          "those of step %lld", (long long)step, what, norm, where, mstep, (long long)step - 1);
}

// Trains one rank: every rank of a job runs this, rank 0 prints and saves.
static int train(const RunOptions *o, Plan *p, Comm *comm);
// Opens token file `path` for plan p and checks it before step one: its windows of seq + 1
// (their shuffled order must fit a quarter of this machine's memory), the seq it was
// packed for, every token id below the vocabulary, something trained. 0, or -1 with err.
static int open_tokens(const Plan *p, const char *path, DataFile **out, uint64_t *nwin, char *err,
                       size_t errlen) {
    DataFile *d = NULL;
    if (data_open(&d, path, err, errlen) != 0)
        return -1;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX, trained = 0;
    bool bad = true;
    if (data_window_count(d, (int)p->seq, nwin, err, errlen) != 0)
        ;
    else if (*nwin > ram / 4 / sizeof(uint64_t))
        snprintf(err, errlen, "%s: %llu windows of %lld tokens; their shuffled order would take "
                 "more than a quarter of this machine's memory", path, (unsigned long long)*nwin,
                 (long long)p->seq + 1);
    else if (p->packing && !data_has_info(d))
        snprintf(err, errlen, "%s has no record starts, but the plan packs records (packing = true): "
                 "make it with ftc data --tokenizer", path);
    else if (data_packed_window(d) && data_packed_window(d) != (uint64_t)p->seq)
        snprintf(err, errlen, "%s was packed for seq %llu (ftc data --pack %llu), but the plan's seq "
                 "is %lld: records would cross windows", path, (unsigned long long)data_packed_window(d),
                 (unsigned long long)data_packed_window(d), (long long)p->seq);
    else if (data_check_vocab(d, (int32_t)p->vocab, &trained, err, errlen) != 0)
        ;
    else if (trained == 0)
        snprintf(err, errlen, "%s: no token is trained (every target is masked)", path);
    else
        bad = false;
    if (bad) {
        data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

// The eval phase's batch of the eval file's windows first .. first + micro_batch - 1 in
// file order; a row past its last window is all ignored targets. The trained targets
// into *count, and into the plan's target count.
static int load_eval_batch(Exec *x, Feed *f, uint64_t first, int64_t *count, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int S = (int)p->seq;
    *count = 0;
    for (int64_t b = 0; b < p->micro_batch; b++) {
        uint64_t w = first + (uint64_t)b;
        if (w >= f->nwin) {
            memset(f->tokens + b * S, 0, sizeof(int32_t) * (size_t)S);
            for (int j = 0; j < S; j++)
                f->targets[b * S + j] = IGNORED_TARGET, f->positions[b * S + j] = j;
            continue;
        }
        if (data_read_window(f->d, w, S, f->window, f->info, (int32_t)p->vocab, err, errlen) != 0)
            return -1;
        memcpy(f->tokens + b * S, f->window, sizeof(int32_t) * (size_t)S);
        for (int j = 0; j < S; j++) {
            bool t = f->info[j + 1] & DATA_TRAIN;
            f->targets[b * S + j] = t ? f->window[j + 1] : IGNORED_TARGET;
            f->positions[b * S + j] = j == 0 || (f->info[j] & DATA_START) ? 0 : f->positions[b * S + j - 1] + 1;
            *count += t;
        }
    }
    rt_write_raw(x, plan_role(p, PR_TOKENS)->id, f->tokens);
    rt_write_raw(x, plan_role(p, PR_TARGETS)->id, f->targets);
    rt_write_positions(x, p->packing ? f->positions : NULL);   // as load_batch does
    rt_write_target_count(x, *count);
    return 0;
}

// Runs the eval phase over `batches` micro-batches of the eval file (f) from its first
// window: *loss the mean over every trained target of them (each batch's loss is the mean
// over its own, so weighted by their count), *targets their number. The weights, the
// optimizer state and the training's data order are untouched.
static int evaluate(Exec *x, Feed *f, int64_t batches, double *loss, int64_t *targets, char *err,
                    size_t errlen) {
    const Plan *p = x->plan;
    int id = plan_role(p, PR_EVAL_LOSS)->id;
    double sum = 0;
    *targets = 0;
    for (int64_t b = 0; b < batches; b++) {
        int64_t count;
        if (load_eval_batch(x, f, (uint64_t)(b * p->micro_batch), &count, err, errlen) != 0)
            return -1;
        if (count == 0)   // nothing of it is trained: it adds nothing to the mean
            continue;
        if (rt_exec_phase(x, PHASE_EVAL, err, errlen) != 0)
            return -1;
        float l;
        rt_read_f32(x, id, &l);
        sum += (double)l * (double)count;
        *targets += count;
    }
    *loss = sum / (double)*targets;
    return 0;
}

// Whether directories a and b (b may be NULL or not exist yet) are one.
static bool same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int rt_train(const RunOptions *o) {
    char err[1024], path[4096];
    who[0] = errors[0] = '\0';
    snprintf(path, sizeof path, "%s/plan", o->plan_dir);
    Plan *p = NULL;
    if (plan_load(&p, path, err, sizeof err) != 0)
        return error("%s", err);
    if (plan_verify(p, stderr) != 0) {
        plan_free(p);
        return error("%s: the plan failed verification; it was not run", path);
    }
    // The job: this process alone, or one rank of what mpirun or srun started (MPI opened
    // only then), the launcher's rank count the plan's.
    Comm *comm = rt_comm_open(p->ranks, o->comm_timeout_s, err, sizeof err);
    if (!comm) {
        plan_free(p);
        return error("%s", err);
    }
    if (comm->ranks > 1) {
        snprintf(who, sizeof who, "rank %d of %d: ", comm->rank, comm->ranks);
        catch_term(comm);
    } else {
        catch_stop();
    }
    int rc = train(o, p, comm);
    // A rank that fails ends the job: the others would otherwise wait for it until their
    // collectives time out.
    if (rc != 0)
        rt_comm_abort(comm, 1);
    rt_comm_close(comm);
    plan_free(p);
    return rc == 0 && stop_signal ? 128 + stop_signal : rc;
}

static int train(const RunOptions *o, Plan *p, Comm *comm) {
    char err[1024];
    int R = comm->ranks, me = comm->rank;
    bool lead = me == 0;
    // Only rank 0 prints progress; the others' lines would repeat it.
    FILE *out = lead ? o->out : fopen("/dev/null", "w");
    if (!out)
        return error("cannot open /dev/null: %s", strerror(errno));
    // --steps, else the train section's steps, else 10
    int64_t steps = o->steps ? o->steps : p->steps ? p->steps : 10;
    DataFile *d = NULL, *ed = NULL;
    Backend *be = NULL, *host = NULL;
    Exec x = {0};
    Profile *prof = NULL;   // --profile: rank 0's device work, timed from step two on
    int rc = 1, lock = -1, report_lock = -1;
    RunReport *report = NULL;
    // (a rank's output goes through its launcher, which gives it a terminal of its own
    // whatever its own output is: plain lines then)
    Console con = {.out = out, .tty = R == 1 && isatty(fileno(out)) == 1, .every = o->log_every};
    if (!con.tty && con.every <= 0)
        con.every = 1;
    uint64_t *order = NULL;
    int32_t *window = NULL, *tokens = NULL, *targets = NULL, *positions = NULL;
    uint8_t *info = NULL;
    // The report's directory: --report, else --save's; rank 0's alone.
    const char *report_dir = !lead ? NULL : o->report ? o->report : o->save;
    if ((o->save && rt_save_check("--save", o->save, err, sizeof err) != 0) ||
        (o->report && rt_save_check("--report", o->report, err, sizeof err) != 0)) {
        error("%s", err);
        goto out;
    }
    if (o->merge && p->lora_r <= 0) {
        error("--merge: %.900s trains no LoRA adapters, so there is nothing to merge (its "
              "model.safetensors is the whole model)", o->plan_dir);
        goto out;
    }
    // With the updates inside backward a step cannot be skipped whole: by the time its
    // gradients' norm is known, every update has run.
    bool early = plan_updates_in_backward(p);
    if (early && o->skip_nonfinite) {
        error("--skip-nonfinite: %.900s updates each parameter inside backward, as soon as its "
              "gradient is complete, so a step cannot be skipped once a gradient turns out not "
              "finite; compile it with --update step to skip such steps", o->plan_dir);
        goto out;
    }
    if (!plan_role(p, PR_TOKENS) || !plan_role(p, PR_TARGETS) || !plan_role(p, PR_LOSS)) {
        error("%s/plan: the plan has no tokens, targets or loss buffer", o->plan_dir);
        goto out;
    }
    uint64_t nwin = 0, eval_nwin = 0;
    if (open_tokens(p, o->data, &d, &nwin, err, sizeof err) != 0) {
        error("%s", err);
        goto out;
    }
    // Records packed several a window, read without the plan's document masks: each attends
    // to the records before it in its window. Allowed (a pretraining stream does it), said.
    if (lead && !p->packing && data_packed_window(d))
        fprintf(out, "ftc run: warning: %s was packed several records a window (ftc data --pack %llu), "
                "but the plan has no packing: each record attends to those before it in its window; "
                "packing = true in the train section masks them apart\n", o->data,
                (unsigned long long)data_packed_window(d));
    // Evaluation: the plan's eval phase over the first --eval-batches micro-batches of the
    // eval file (all of its windows by default), every --eval-every steps and at the end.
    int64_t eval_batches = 0, eval_tokens = 0;
    if (o->eval_data) {
        if (!p->nins[PHASE_EVAL] || !plan_role(p, PR_EVAL_LOSS)) {
            error("--eval-data: %.900s has no eval phase (%s)", o->plan_dir,
                  p->ranks > 1 && p->zero >= 3 ? "a rank of ZeRO 3 holds shards of the parameters: compile "
                                                 "it with --zero 2 or below to evaluate"
                                               : "a plan compiled before ftc planned one; compile it again");
            goto out;
        }
        if (open_tokens(p, o->eval_data, &ed, &eval_nwin, err, sizeof err) != 0) {
            error("%s", err);
            goto out;
        }
        int64_t all = (int64_t)((eval_nwin + (uint64_t)p->micro_batch - 1) / (uint64_t)p->micro_batch);
        eval_batches = o->eval_batches > 0 && o->eval_batches < all ? o->eval_batches : all;
        uint64_t rows = (uint64_t)(eval_batches * p->micro_batch);   // the windows evaluated
        eval_tokens = (int64_t)(rows < eval_nwin ? rows : eval_nwin) * p->seq;
    }
    if (!(be = pick_backend(o, p, comm, err, sizeof err))) {
        error("%s", err);
        goto out;
    }
    rt_cuda_sync_check(be, o->sync_check);
    // On the CPU every arena is host memory: a plan made for a GPU may not fit the host.
    int64_t need = p->arena_bytes[ARENA_DEVICE] + p->arena_bytes[ARENA_HOST], avail = rt_host_available();
    if (be->host_addressable && avail >= 0 && need > avail) {
        char a[32], b[32];
        error("the plan's arenas take %s of memory on the %s backend, where they are host "
              "memory, but this machine has %s available",
              fmt_bytes(a, sizeof a, need), be->name, fmt_bytes(b, sizeof b, avail));
        goto out;
    }
    host = rt_cpu_backend();
    order = malloc(sizeof(uint64_t) * nwin);
    window = malloc(sizeof(int32_t) * (size_t)(p->seq + 1));
    info = malloc((size_t)(p->seq + 1));
    size_t batch_ids = (size_t)(p->micro_batch * p->seq);
    tokens = malloc(sizeof(int32_t) * batch_ids), targets = malloc(sizeof(int32_t) * batch_ids);
    positions = malloc(sizeof(int32_t) * batch_ids);
    if (lead && o->save && rt_save_lock("--save", o->save, &lock, err, sizeof err) != 0) {
        error("%s", err);
        goto out;
    }
    // (locked once when --report and --save are one directory)
    if (lead && o->report && !same_dir(o->report, o->save) &&
        rt_save_lock("--report", o->report, &report_lock, err, sizeof err) != 0) {
        error("%s", err);
        goto out;
    }
    if (!order || !window || !info || !tokens || !targets || !positions) {
        error("out of memory for the data order and batch (%llu windows)", (unsigned long long)nwin);
        goto out;
    }
    // (the host's staging only where the host runs the collectives: NCCL needs none)
    if (rt_exec_init(&x, p, be, host, o->layout, err, sizeof err) != 0 ||
        (!be->collective && rt_comm_prepare(comm, p, err, sizeof err) != 0)) {
        error("%s", err);
        goto out;
    }
    if (o->profile && lead && !(prof = rt_profile_new(p))) {
        error("out of memory for --profile");
        goto out;
    }
    char tuned[1400] = "";
    if (!o->gemm_first)
        rt_cuda_tune_gemms(be, &x, tuned, sizeof tuned);   // (the arenas hold nothing yet)
    HostRates rates = rt_host_measure(&x);   // before any buffer holds data: the link is timed through them
    rt_exec_set_comm(&x, comm);
    // Resuming: the state of a checkpoint, its step and seed (the data order, dropout and
    // AdamW's bias correction follow from them), so the run goes on as if never stopped.
    // Rank 0 finds it; every rank loads its own state from it.
    uint64_t seed = o->seed, data_print = data_fingerprint(d);
    int64_t done = 0;
    char ckpt[4400] = "";
    if (o->resume) {
        int found = lead ? rt_checkpoint_find(o->resume, ckpt, sizeof ckpt, err, sizeof err) : 0;
        double status[1] = {found != 0};
        if (R > 1 && (rt_comm_bcast(comm, ckpt, sizeof ckpt, 0, err, sizeof err) != 0 ||
                      rt_comm_sum(comm, status, 1, err, sizeof err) != 0)) {
            error("%s", err);
            goto out;
        }
        if (status[0] != 0) {
            if (lead)
                error("%s", err);
            goto out;
        }
        if (rt_checkpoint_load(&x, ckpt, &done, &seed, err, sizeof err) != 0) {
            error("%s", err);
            goto out;
        }
        // What the checkpoint decides over the command line, said by name.
        if (lead && o->seed_given && o->seed != seed)
            fprintf(out, "ftc run: warning: --seed %llu not used: the checkpoint's seed %llu goes on (the data "
                    "order and dropout follow it)\n", (unsigned long long)o->seed, (unsigned long long)seed);
        if (lead && o->weights)
            fprintf(out, "ftc run: warning: --weights %s not read: the checkpoint's weights go on\n", o->weights);
        if (lead && x.data_print && x.data_print != data_print)
            fprintf(out, "ftc run: warning: --data %s is not the file %s trained on (its size or contents "
                    "differ): the run goes on over this one\n", o->data, ckpt);
        if (done > steps) {
            if (lead)
                error("%s is step %lld; --steps %lld leaves nothing to run", ckpt, (long long)done,
                      (long long)steps);
            goto out;
        }
        // A finished run started again (a job restarted after its last checkpoint, say):
        // nothing to train; its weights are saved again as they were.
        if (lead && done == steps)
            fprintf(out, "ftc run: note: %s is step %lld, the last of --steps %lld: nothing left to train%s\n",
                    ckpt, (long long)done, (long long)steps, o->save ? "; its weights saved again" : "");
        // A finished run continued: past its schedule's end the learning rate stays where
        // the schedule left it.
        if (lead && p->schedule != SCHED_CONSTANT && p->steps > 0 && done >= p->steps)
            fprintf(out, "ftc run: note: the %s schedule ended at step %lld (the train section's steps); "
                    "steps %lld to %lld run at lr %g\n", p->schedule == SCHED_LINEAR ? "linear" : "cosine",
                    (long long)p->steps, (long long)done + 1, (long long)steps, rt_lr_at(p, done + 1));
    }
    // A run asked for more steps than its decaying schedule has: said once, before step one.
    if (lead && !o->resume && p->schedule != SCHED_CONSTANT && p->steps > 0 && steps > p->steps)
        fprintf(out, "ftc run: note: the %s schedule ends at step %lld (the train section's steps); "
                "steps %lld to %lld run at lr %g\n", p->schedule == SCHED_LINEAR ? "linear" : "cosine",
                (long long)p->steps, (long long)p->steps + 1, (long long)steps, rt_lr_at(p, p->steps + 1));
    // A run killed between a checkpoint and its pruning left one too many; the steps
    // left may save none (the last step never does), so prune before the first (rank 0,
    // which alone renames and prunes checkpoints).
    if (lead && o->save && o->save_every > 0)
        rt_checkpoint_prune(o->save, o->keep > 0 ? o->keep : 2);
    data_shuffle(order, nwin, seed);
    x.seed = seed;
    x.data_print = data_print;   // (what this run's checkpoints record)
    x.poison = o->poison;
    x.graphs = !o->no_graphs;
    int loaded = 0, fresh = 0;   // parameters read from --weights, adapters initialised
    if (o->resume) {
        fprintf(out, "resuming from %s (step %lld, seed %llu)\n", ckpt, (long long)done,
                (unsigned long long)seed);
    } else if (o->weights) {   // (said after the run's first line)
        if ((loaded = rt_weights_load(&x, o->weights, seed, &fresh, err, sizeof err)) < 0) {
            error("%s", err);
            goto out;
        }
    } else {
        rt_weights_init(&x, seed);
    }
    int64_t mem = 0;
    for (int a = 0; a < ARENA_COUNT; a++)
        mem += p->arena_bytes[a];
    char mems[32];
    fmt_bytes(mems, sizeof mems, mem);
    // A step takes accum micro-batches on each rank: micro-step m of rank r is the step's
    // micro-batch m·R + r, so R ranks read the windows one rank reads with R·accum steps
    // of accumulation, and scale the loss alike.
    int64_t per_step = p->micro_batch * p->accum * R, tokens_per_step = p->seq * per_step;
    if (R > 1)
        fprintf(out, "ftc run: %s on %s, %d ranks%s, %lld steps of %lld x %lld x %d x %lld tokens "
                "(micro-batch x accumulation x ranks x seq), %llu windows in %s\n",
                p->model, be->name, R, p->zero >= 0 ? (p->zero == 0 ? " (data parallel)" :
                p->zero == 1 ? " (ZeRO-1: optimizer state sharded)" : p->zero == 2 ?
                " (ZeRO-2: optimizer state and gradients sharded)" :
                " (ZeRO-3: optimizer state, gradients and parameters sharded)") : "",
                (long long)steps, (long long)p->micro_batch, (long long)p->accum, R,
                (long long)p->seq, (unsigned long long)nwin, o->data);
    else
        fprintf(out, "ftc run: %s on %s, %lld steps of %lld x %lld x %lld tokens (micro-batch x "
                "accumulation x seq), %llu windows in %s\n", p->model, be->name, (long long)steps,
                (long long)p->micro_batch, (long long)p->accum, (long long)p->seq,
                (unsigned long long)nwin, o->data);
    // A LoRA adapter names the directory of its base weights (absolute), for PEFT's
    // AutoPeftModelForCausalLM; without --weights, the model's name.
    if (o->weights) {
        char dir[4096], *abs;
        struct stat st;
        snprintf(dir, sizeof dir, "%s", o->weights);
        if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {   // a file: its directory
            char *slash = strrchr(dir, '/');
            if (!slash)
                snprintf(dir, sizeof dir, ".");
            else
                slash[slash == dir] = '\0';   // ("/x" is in "/")
        }
        if ((abs = realpath(dir, NULL)) != NULL) {
            snprintf(x.base_model, sizeof x.base_model, "%s", abs);
            free(abs);
        }
    }
    // Where the weights came from, always said: a forgotten --weights trains from noise.
    if (!o->resume && o->weights && fresh)
        fprintf(out, "weights: %d tensors from %s; %d LoRA adapter tensors it lacks initialised (seed %llu)\n",
                loaded, o->weights, fresh, (unsigned long long)seed);
    else if (!o->resume && o->weights)
        fprintf(out, "weights: %d tensors from %s\n", loaded, o->weights);
    else if (!o->resume)
        fprintf(out, "weights: none given (--weights): every parameter initialised at random (seed %llu)\n",
                (unsigned long long)seed);
    char gpu[1024], gpu_name[256];
    int64_t gpu_total, gpu_free;
    if (rt_cuda_describe(be, gpu, sizeof gpu) && be->memory && be->memory(be, &gpu_total, &gpu_free, gpu_name, sizeof gpu_name)) {
        char t[32], f[32], b[32], r[32];
        fprintf(out, "device: %s; after set-up the driver reports %s total, %s free (the plan: %s for %s, "
                "a %s reserve in it)\n", gpu, fmt_bytes(t, sizeof t, gpu_total), fmt_bytes(f, sizeof f, gpu_free),
                fmt_bytes(b, sizeof b, p->budget_bytes), p->gpu ? p->gpu : "no preset",
                fmt_bytes(r, sizeof r, p->reserve_bytes));
    }
    if (tuned[0] && lead)
        fprintf(out, "%s\n", tuned);
    if (ed)
        fprintf(out, "eval: %s, %lld batches of %lld x %lld tokens (%llu windows in the file)%s, "
                        "%s\n", o->eval_data, (long long)eval_batches, (long long)p->micro_batch,
                (long long)p->seq, (unsigned long long)eval_nwin,
                eval_batches * p->micro_batch < (int64_t)eval_nwin ? " from its first window" : "",
                o->eval_every > 0 ? "every --eval-every steps and after the last" : "after the last step");
    double clip = 0;
    for (int i = 0; i < p->nins[PHASE_OPT]; i++)
        if (p->ins[PHASE_OPT][i].op == OP_GRAD_FACTOR)
            clip = p->ins[PHASE_OPT][i].attr.f;
    if (p->schedule != SCHED_CONSTANT || p->warmup_steps || clip > 0) {
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
    rt_host_check(p, rates, out);
    if (report_dir) {
        RunReportInfo ri = {.model = p->model, .device = be->name, .plan_dir = o->plan_dir, .data = o->data,
                            .eval_data = o->eval_data, .gpu = p->gpu, .steps = steps,
                            .tokens_per_step = tokens_per_step, .planned_device = p->arena_bytes[ARENA_DEVICE],
                            .planned_host = p->arena_bytes[ARENA_HOST], .reserve = p->reserve_bytes,
                            .budget = p->budget_bytes};
        if (rt_report_open(&report, report_dir, &ri, done, err, sizeof err) != 0) {
            error("%s", err);
            goto out;
        }
        fprintf(out, "report: %s/run.jsonl (a record a step) and %s/run.html\n", report_dir, report_dir);
    }
    const PlanBuffer *lossb = plan_role(p, PR_LOSS);
    bool counted = plan_role(p, PR_TARGET_COUNT) != NULL;
    Feed feed = {.d = d, .order = order, .nwin = nwin, .window = window, .tokens = tokens,
                 .targets = targets, .positions = positions, .info = info};
    Feed efeed = {.d = ed, .nwin = eval_nwin, .window = window, .tokens = tokens, .targets = targets,
                  .positions = positions, .info = info};
    if (prof && steps - done < 2 && steps > done) {
        error("--profile times the steps after the first: this run takes %lld (--steps)",
              (long long)(steps - done));
        goto out;
    }
    double t0 = now_s(), t1st = 0, first_loss = 0, recent[10] = {0};
    int64_t nrecent = 0, first_step = 0, skipped0 = x.skipped;   // nrecent: steps updated
    int64_t saved_at = 0;   // the step this run's last complete save was after
    int64_t trained = 0;    // the targets the loss counted (not masked: no prompt, no padding)
    fflush(out);   // what was said before step one shows now, not when a buffer fills
    for (int64_t step = done + 1; step <= steps; step++) {
        double ts = now_s(), loss = 0;
        uint64_t base = (uint64_t)((step - 1) * per_step);   // the step's first window
        int64_t bad_losses = 0, bad_micro = -1;
        float bad_loss = 0;
        x.step = step;
        // the schedule counts the updates taken, as Trainer steps it only after one
        x.lr = rt_lr_at(p, step - x.skipped);
        // Every rank runs every micro-step (their collectives pair up); one rank alone
        // stops at the first loss that is not finite.
        for (int64_t m = 0; m < p->accum && (R > 1 || !bad_losses); m++) {
            x.micro = m * R + me;
            x.last = m == p->accum - 1;
            if (m == 0 && step_count(&x, &feed, base, err, sizeof err) == 0)
                trained += feed.count;
            else if (m == 0) {
                error("step %lld: %s", (long long)step, err);
                goto out;
            }
            if (load_batch(&x, &feed, base + (uint64_t)(x.micro * p->micro_batch), err, sizeof err) != 0 ||
                rt_exec_phase(&x, PHASE_FWD, err, sizeof err) != 0) {
                error("step %lld: %s", (long long)step, err);
                goto out;
            }
            float l;   // (made by the forward; with the updates inside backward, read before it)
            rt_read_f32(&x, lossb->id, &l);
            if ((!early || isfinite(l)) && rt_exec_phase(&x, PHASE_BWD, err, sizeof err) != 0) {
                error("step %lld: %s", (long long)step, err);
                goto out;
            }
            if (isfinite(l))
                loss += l;
            else if (!bad_losses++)
                bad_micro = m, bad_loss = l;
        }
        if (R > 1) {   // the step's loss and its non-finite micro-batches, over the ranks
            double v[2] = {loss, (double)bad_losses};
            if (rt_comm_sum(comm, v, 2, err, sizeof err) != 0) {
                error("step %lld: %s", (long long)step, err);
                goto out;
            }
            loss = v[0];
            if (bad_losses == 0 && v[1] > 0)
                bad_loss = NAN;
            bad_losses = (int64_t)v[1];
        }
        bool skip = bad_losses > 0 && o->skip_nonfinite;
        if (bad_losses > 0 && !skip) {   // stop before the optimizer spreads it into the weights
            if (R == 1) {
                x.micro = bad_micro;
                nonfinite(&x, bad_loss, step, &feed, base + (uint64_t)(bad_micro * p->micro_batch));
            } else if (bad_micro >= 0) {
                error("step %lld, micro-step %lld: the loss is %s; stopped before the optimizer step, "
                      "the weights are those of step %lld", (long long)step, (long long)bad_micro + 1,
                      isnan(bad_loss) ? "nan" : bad_loss > 0 ? "inf" : "-inf", (long long)step - 1);
            } else if (lead) {
                error("step %lld: the loss is not finite on another rank; stopped before the optimizer "
                      "step, the weights are those of step %lld", (long long)step, (long long)step - 1);
            }
            goto out;
        }
        double gnorm = 0;
        bool bad_grad = false;
        if (skip) {
            rt_exec_skip_update(&x);
            loss = bad_loss;
        } else {
            if (rt_exec_phase(&x, PHASE_OPT, err, sizeof err) != 0) {
                error("step %lld: %s", (long long)step, err);
                goto out;
            }
            if (!counted)   // each micro-step's loss is its own mean; else its share of the step's
                loss /= (double)(p->accum * R);
        }
        bool scaled = p->scale_init > 0, skip_loss = skip;   // fp16's dynamic loss scale
        double scale = x.loss_scale;
        if (!skip && rt_grad_stats(&x, &gnorm, &bad_grad) && bad_grad) {
            // a gradient is not finite: every update left its parameter as it was; under a
            // loss scale that is an overflow, which backs the scale off (below)
            if (!scaled && !o->skip_nonfinite) {
                if (early)
                    error("step %lld: a gradient is not finite (their norm is %g); the plan updates each "
                          "parameter inside backward, so those whose gradients were complete before it "
                          "were updated, and nothing of this step is saved; compile it with --update step "
                          "to stop before any update and find the first value that is not finite",
                          (long long)step, gnorm);
                else if (R == 1)
                    nonfinite_grad(&x, gnorm, step, &feed, base);
                else if (lead)
                    error("step %lld: a gradient is not finite (their norm is %g); the step's update "
                          "was not taken, the weights are those of step %lld", (long long)step, gnorm,
                          (long long)step - 1);
                goto out;
            }
            skip = true;
            x.skipped++;
        }
        if (scaled && !skip_loss)
            rt_scale_update(&x, bad_grad);
        if (!skip) {
            if (nrecent == 0)
                first_loss = loss, first_step = step;
            recent[nrecent++ % 10] = loss;
        }
        if (step == done + 1) {
            char what[200];
            if (prof)   // the first step warms caches and the GPU up: timed from the next
                rt_profile_on(&x, prof, true);
            console_break(&con);
            int64_t used = report_memory(be, p, o, what, sizeof what);
            if (!used) {   // every arena in this process's memory: its peak resident set
                struct rusage ru;
                if (getrusage(RUSAGE_SELF, &ru) == 0)
                    used = (int64_t)ru.ru_maxrss * 1024;
                snprintf(what, sizeof what, "peak resident memory of ftc after step one (the %s backend: "
                         "the arenas are host memory)", be->name);
            }
            if (report)
                rt_report_measured(report, used, what);
        }
        double t1 = now_s();
        if (step == done + 1)
            t1st = t1;
        char skipped[96] = "";
        if (skip)
            snprintf(skipped, sizeof skipped, "  skipped %lld", (long long)x.skipped);
        if (scaled)   // the scale this step ran with
            snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), "  scale %g", scale);
        char line[512];
        snprintf(line, sizeof line, "step %lld/%lld  loss %.6f%s  tok/s %.0f  lr %.3e  gnorm %.4g  elapsed %.2fs  mem %s",
                 (long long)step, (long long)steps, loss, skipped, (double)tokens_per_step / (t1 - ts),
                 x.lr, isnan(gnorm) ? NAN : gnorm, t1 - t0, mems);
        console_step(&con, line, step, done + 1, steps, skip,
                     (t1 - t0) / (double)(step - done) * (double)(steps - step));
        double eval_loss = NAN;
        if (ed && ((o->eval_every > 0 && step % o->eval_every == 0) || step == steps)) {
            double el, te = now_s();
            console_break(&con);
            int64_t nt;
            if (evaluate(&x, &efeed, eval_batches, &el, &nt, err, sizeof err) != 0) {
                error("step %lld, evaluating on %s: %s", (long long)step, o->eval_data, err);
                goto out;
            }
            double dt = now_s() - te;
            fprintf(out, "eval %lld/%lld  loss %.6f  ppl %.4g  targets %lld  tok/s %.0f  time %.2fs\n",
                    (long long)step, (long long)steps, el, exp(el), (long long)nt,
                    dt > 0 ? (double)eval_tokens / dt : 0.0, dt);
            fflush(out);
            eval_loss = el;
        }
        if (report) {
            RunRecord rr = {.step = step, .loss = loss, .eval_loss = eval_loss,
                            .grad_norm = skip ? NAN : gnorm, .lr = x.lr,
                            .tokens_per_s = (double)tokens_per_step / (t1 - ts),
                            .loss_scale = scaled ? scale : 0, .elapsed_s = t1 - t0, .skipped = skip,
                            .skipped_total = x.skipped, .tokens = tokens_per_step * step};
            bool page = !isnan(eval_loss) || (o->save_every > 0 && step % o->save_every == 0);
            if (rt_report_step(report, &rr, err, sizeof err) != 0 ||
                (page && rt_report_html(report, err, sizeof err) != 0)) {
                console_break(&con);
                error("%s", err);
                goto out;
            }
        }
        if (o->save && o->save_every > 0 && step % o->save_every == 0 && step < steps) {
            console_break(&con);
            if (save(&x, o->save, o->merge, out) != 0) {
                if (lead)
                    save_failed(o->save, saved_at);
                goto out;
            }
            saved_at = step;
            if (rt_checkpoint_save(&x, o->save, step, seed, o->keep > 0 ? o->keep : 2, err, sizeof err) != 0) {
                error("%s", err);
                goto out;
            }
            fprintf(out, "saved %s/checkpoint-%06lld (the training state%s)\n", o->save, (long long)step,
                    R > 1 ? ", a file a rank" : "");
        }
        if (stop_signal && step < steps) {   // (one process: catch_stop)
            console_break(&con);
            fprintf(out, "ftc run: stopped by %s after step %lld of %lld%s\n",
                    stop_signal == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM", (long long)step,
                    (long long)steps, o->save ? "; saving it" : "");
            steps = step;
            break;
        }
    }
    console_break(&con);
    // The device's queues drained, so the last step's time is all in.
    if (be->sync(be, err, sizeof err) != 0) {
        error("%s", err);
        goto out;
    }
    double tend = now_s(), total = tend - t0, tail = 0;
    int64_t ran = steps - done;   // steps this run took (after a resumed one's)
    if (ran == 0) {
        x.step = steps;   // (the weights saved are that step's)
        goto saved;
    }
    int ntail = nrecent < 10 ? (int)nrecent : 10;
    for (int i = 0; i < ntail; i++)
        tail += recent[i];
    char skips[96] = "";
    if (x.skipped > skipped0)
        snprintf(skips, sizeof skips, ", %lld skipped (a non-finite loss or gradients; their updates not taken)",
                 (long long)(x.skipped - skipped0));
    fprintf(out, "done: %lld steps%s, %lld tokens (%lld trained), loss %.4f at step %lld, %.4f over the "
                 "last %d steps, %.2fs, %.0f tok/s (%.0f trained)\n",
            (long long)ran, skips, (long long)(tokens_per_step * ran), (long long)trained, first_loss,
            (long long)first_step, ntail ? tail / ntail : 0.0, ntail, total,
            total > 0 ? (double)(tokens_per_step * ran) / total : 0.0, total > 0 ? (double)trained / total : 0.0);
    if (ran > 1) {   // the first step also fills caches and warms the GPU up
        double mean = (tend - t1st) / (double)(ran - 1);
        fprintf(out, "steady: %.3fs per step after the first, %.0f tok/s", mean,
                (double)tokens_per_step / mean);
        if (p->est_step_us > 0)
            fprintf(out, " (the plan estimated %.3fs on %s)", p->est_step_us * 1e-6,
                    p->gpu ? p->gpu : "its GPU");
        fputc('\n', out);
    }
    if (prof) {
        char device[256];
        int64_t total_b, free_b;
        if (!be->memory || !be->memory(be, &total_b, &free_b, device, sizeof device))
            snprintf(device, sizeof device, "the %s backend", be->name);
        if (rt_profile_write(prof, p, o->profile, device, ran - 1, err, sizeof err) != 0) {
            error("%s", err);
            goto out;
        }
        fprintf(out, "profile: %s (the device's work of steps %lld to %lld, kernel by kernel)\n", o->profile,
                (long long)(done + 2), (long long)steps);
        rt_cuda_gemm_report(be, out);
    }
saved:
    if (o->save && save(&x, o->save, o->merge, out) != 0) {
        if (lead)
            save_failed(o->save, saved_at);
        goto out;
    }
    // The last step's state too, so that a finished run goes on with --resume and more
    // --steps (its checkpoint after the weights, as every step's).
    if (o->save && o->save_every > 0 && ran > 0) {
        if (rt_checkpoint_save(&x, o->save, steps, seed, o->keep > 0 ? o->keep : 2, err, sizeof err) != 0) {
            error("%s", err);
            goto out;
        }
        fprintf(out, "saved %s/checkpoint-%06lld (the training state%s)\n", o->save, (long long)steps,
                R > 1 ? ", a file a rank" : "");
    }
    if (report && rt_report_html(report, err, sizeof err) != 0) {
        error("%s", err);
        goto out;
    }
    rc = 0;
out:
    console_break(&con);
    if (report && rc != 0) {   // the steps taken and why it stopped, for whoever looks into it
        rt_report_failed(report, errors[0] ? errors : "the run stopped with an error");
        rt_report_html(report, err, sizeof err);
    }
    rt_report_close(report);
    if (report_lock >= 0)
        close(report_lock);
    if (lock >= 0)
        close(lock);
    rt_exec_free(&x);
    rt_profile_free(prof);
    if (be)
        be->destroy(be);
    if (host)
        host->destroy(host);
    free(order);
    free(window), free(info);
    free(tokens), free(targets), free(positions);
    data_close(d);
    data_close(ed);
    if (!lead)
        fclose(out);
    return rc;
}
