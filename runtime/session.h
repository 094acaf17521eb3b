// session.h — `ftc run` inside the runtime: a training session (session.c), the batches it
// feeds the plan (feed.c), the events it emits and their consumers, the console
// (progress.c) and the run report (report.c), the job's error lines (run_errors.c) and
// the job (train.c); `ftc eval`, a session that only evaluates (evaluate.c).
//
// A run is a TrainSession: opened (everything checked and set up before step one), stepped
// (each step trained, evaluated when due, checkpointed when due), closed (the last step
// drained, summed up and saved). It formats nothing of its progress: it emits events, and
// each listener says or writes what it makes of them.
#ifndef FTC_RUNTIME_SESSION_H
#define FTC_RUNTIME_SESSION_H

#include "runtime.h"
#include "data.h"

#include <stdio.h>

//
// feed.c — the data: token files checked against the plan; each micro-batch's tokens,
// targets and position ids, and the step's count of trained targets, into the plan's buffers.
//

typedef struct Feed {
    DataFile *d, *eval;                      // the training file, the eval file (NULL: none)
    uint64_t nwin, eval_nwin;                // their windows of seq + 1 tokens
    uint64_t *order;                         // (nwin) the training windows, shuffled (a pairs
                                             // plan: the first nwin / 2, its pairs)
    int32_t *window;                         // (seq + 1) one window's tokens
    uint8_t *info;                           // (seq + 1) and their info bytes
    int32_t *tokens, *targets, *positions;   // (micro_batch, seq) one micro-batch
    int64_t count;                           // the trained targets of the step under way
    int64_t pairs, chosen;                   // a pairs plan: the step's pairs, and the trained
                                             // targets of their chosen rows
    float *ref, *eval_ref;                   // reference = precomputed: a window's sum, of each
                                             // file (reference.c); NULL: none
    float *ref_rows;                         // (micro_batch) one micro-batch's
} Feed;

// Opens token file `path` for plan p and checks it before step one: its windows of seq + 1
// (their shuffled order must fit a quarter of this machine's memory), the seq it was
// packed for, every token id below the vocabulary, something trained; preference pairs
// (data_paired) exactly when the plan reads pairs, and then an even micro-batch. 0, or -1
// with err.
int rt_feed_open(const Plan *p, const char *path, DataFile **out, uint64_t *nwin, char *err, size_t errlen);
// Allocates f's order and staging for plan p; false when out of memory (what is had is
// freed by rt_feed_close).
bool rt_feed_stage(Feed *f, const Plan *p);
// The seeded order of the training windows (data_shuffle), for a pairs plan of its pairs:
// row r of the run is window 2 order[r / 2] + r % 2, a pair never split.
void rt_feed_shuffle(Feed *f, const Plan *p, uint64_t seed);
// The trained targets of the step whose rows start at `first` in the order, into f->count
// (and for a pairs plan its pairs and their chosen rows' trained targets into f->pairs and
// f->chosen): every rank's micro-batches of the global step.
int rt_feed_count(const Exec *x, Feed *f, uint64_t first, char *err, size_t errlen);
// Writes the micro-batch of the windows from position `first` of the order into the plan's
// buffers, with f->count; -1 with err.
int rt_feed_batch(Exec *x, Feed *f, uint64_t first, char *err, size_t errlen);
// Writes the eval file's windows first .. first + micro_batch - 1 (file order) into the
// plan's buffers; their trained targets into *count (a pairs plan: their pairs, what its loss
// is the mean over, rows past the file's end no pair). -1 with err.
int rt_feed_eval_batch(Exec *x, Feed *f, uint64_t first, int64_t *count, char *err, size_t errlen);
// Writes windows first .. first + micro_batch - 1 of file d (of nwin windows, file order)
// into the plan's buffers, rows past its end all ignored targets; -1 with err.
int rt_feed_file_batch(Exec *x, Feed *f, DataFile *d, uint64_t nwin, uint64_t first, char *err, size_t errlen);
void rt_feed_close(Feed *f);

// reference.c: with a reference phase in the plan (reference = precomputed), each window's
// sum of the reference's trained log-probabilities into f->ref and f->eval_ref: read from
// SAVE/reference_logps.bin when it is there (a resumed run), else computed on the weights
// as they are (refused for a resumed full fine-tune: its weights have moved; with LoRA the
// reference is the frozen base) and kept there. *computed says whether the phase ran. 0,
// or -1 with err.
int rt_reference_sums(Exec *x, Feed *f, const char *save, bool resumed, bool lora, bool *computed, char *err,
                      size_t errlen);

//
// session.c — a training session.
//

typedef struct TrainSession TrainSession;

typedef enum TrainEventKind {
    EV_OPEN,         // set up, before step one: the run described, its report opened
    EV_MEASURED,     // step one done: the memory it takes (s->mem)
    EV_STEP,         // a step trained or skipped (s->last)
    EV_EVALUATING,   // an evaluation starts
    EV_EVAL,         // it ended (s->eval)
    EV_STEP_END,     // the step's record is whole, its evaluation's loss in it (s->last)
    EV_SAVING,       // a save starts (save.c says what it wrote)
    EV_SAVED,        // the training state saved as checkpoint e->step
    EV_STOPPED,      // a signal (e->signal) stopped the run after step e->step
    EV_FINISHED,     // the steps taken and the device drained: the run's totals
    EV_PROFILED,     // --profile's table written
    EV_DONE,         // everything saved: the run succeeded
    EV_FAILED,       // the run ends with an error, said already (e->why: all of them)
    EV_ERROR,        // a listener failed: its error is said next
    EV_COUNT
} TrainEventKind;

typedef struct TrainEvent {
    TrainEventKind kind;
    const TrainSession *s;
    int64_t step;           // the step it is about
    int signal;             // EV_STOPPED
    const char *why;        // EV_FAILED
} TrainEvent;

// A consumer of a session's events: 0, or -1 with err, which ends the run. EV_STOPPED,
// EV_FAILED and EV_ERROR (err NULL) are not to fail.
typedef struct TrainListener {
    int (*on_event)(void *ctx, const TrainEvent *e, char *err, size_t errlen);
    void *ctx;
} TrainListener;

// What the last step did (EV_STEP, EV_STEP_END).
typedef struct StepResult {
    int64_t step;
    double loss;            // the step's loss (a skipped step's: the one not finite)
    double grad_norm;       // the gradients' global norm (0 when not found)
    double lr;
    bool skipped;           // its update not taken (--skip-nonfinite, a loss scale's overflow)
    bool scaled;            // under a loss scale (fp16), `scale` the one it ran with
    double scale;
    double step_s, elapsed_s;   // the step's wall time; since step one began
    double eval_loss;       // NAN unless it evaluated
    bool pref;              // a preference loss's step: its stats (PREF_STATS, the step's means
    double pref_stats[PREF_STATS];  // over its pairs)
} StepResult;

// An evaluation (EV_EVAL): the mean loss over its trained targets, their number, its time.
typedef struct EvalResult {
    double loss, time_s;
    int64_t targets;
} EvalResult;

// The memory in use after step one (EV_MEASURED): `used` bytes, `what` they are; on a GPU
// the driver's figures, the card's total when the plan's preset card is this one.
typedef struct MeasuredMemory {
    int64_t used;
    char what[200];
    bool device;            // a GPU's figures below (else the process's peak resident set)
    char name[256];
    int64_t total, free_bytes;   // the driver's
    bool card;              // the plan's preset card, whose total (nvidia-smi's) is `nominal`
    int64_t nominal;
} MeasuredMemory;

struct TrainSession {
    const RunOptions *o;
    const Plan *p;
    Comm *comm;
    int ranks, rank;
    bool lead;              // rank 0: it prints, saves, writes the report
    FILE *out;              // progress and notes: o->out on rank 0, /dev/null elsewhere
    const TrainListener *listen;   // ended by one without on_event
    // set up
    Backend *be, *host;
    Exec x;
    Feed feed;
    Profile *prof;          // --profile: rank 0's device work, timed from step two on
    const char *report_dir; // --report, else --save; rank 0's alone (NULL: none)
    int lock, report_lock;  // the --save and --report directories' locks (-1: none)
    bool early;             // the plan updates inside backward
    int64_t steps, done;    // the run's last step; the checkpoint's it resumed after
    uint64_t seed;
    uint64_t data_print;    // the training file's fingerprint (data_fingerprint)
    char ckpt[4400];        // --resume: the checkpoint
    int loaded, fresh;      // parameters read from --weights, LoRA adapters initialised
    int adapted;            // LoRA adapter tensors read from --adapter
    char tuned[1400];       // what tuning the GEMMs did, or ""
    HostRates rates;
    int64_t eval_batches, eval_tokens;
    int64_t per_step, tokens_per_step;   // windows and tokens of a global step
    char mems[32];          // the arenas' bytes, for people
    // so far
    int64_t step;           // the last step taken
    double t0, t1st, tend;  // the clock at step one's start, its end, the run's end
    double first_loss, recent[10];
    int64_t first_step, nrecent;   // nrecent: steps updated
    int64_t skipped0;       // steps skipped before this run (a checkpoint's)
    int64_t trained;        // the targets the loss counted (not masked)
    int64_t saved_at;       // the step of this run's last complete save
    StepResult last;
    EvalResult eval;
    MeasuredMemory mem;
};

// Opens a session of plan p for options o on comm's rank, listeners `listen` told of its
// events, progress to `out`: everything checked and set up for step one, said (EV_OPEN).
// 0, or -1 after printing why; rt_session_close ends it either way.
int rt_session_open(TrainSession *s, const RunOptions *o, const Plan *p, Comm *comm, FILE *out,
                    const TrainListener *listen);
// Takes step s->step + 1: trained, evaluated when due, recorded, checkpointed when due.
int rt_session_step(TrainSession *s);
// Evaluates the weights now on the eval file; -1 after printing why.
int rt_session_eval(TrainSession *s);
// Saves the weights into --save DIR, and with `state` the training state as a checkpoint
// of step s->x.step; -1 after printing why.
int rt_session_save(TrainSession *s, bool state);
// Ends the run after step s->step, which a signal stopped it after.
void rt_session_stop(TrainSession *s, int signal);
// Ends the session: with rc 0 the last step drained, summed up, saved; then (or after an
// error) everything let go. 0, or 1 when the run failed.
int rt_session_close(TrainSession *s, int rc);

//
// progress.c — the console: on a terminal one progress line rewritten in place each step
// (with an estimate of the time left), kept every --log-every steps when that is given;
// elsewhere a plain line every --log-every steps (every step by default), the first and
// the last and every skipped one too. Any other line first ends a line left in place.
//

typedef struct Console {
    FILE *out;
    bool tty, pending;
    int64_t every;          // 0 on a terminal: nothing kept but the last
} Console;

// The console of a job of `ranks` ranks writing to out.
void rt_console_init(Console *c, FILE *out, int ranks, int64_t log_every);
// What the console says of event e (ctx: its Console).
int rt_console_on_event(void *ctx, const TrainEvent *e, char *err, size_t errlen);

//
// report.c — the run report as a listener (ctx: a RunReport *, NULL until EV_OPEN opens
// it in the session's report directory; closed when the run ends).
//

int rt_report_on_event(void *ctx, const TrainEvent *e, char *err, size_t errlen);

//
// run_errors.c — the job's errors.
//

// A run of `command` ("ftc run", "ftc eval") starts with no errors; on a job of several
// ranks its lines name this one.
void rt_run_errors_begin(const char *command, int rank, int ranks);
// "ftc run: error: " (the command's; the rank, on a job of several), the message, on
// standard error in one write; kept for the run report. Returns 1.
int rt_run_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Every error of the run so far, in order ("" when none).
const char *rt_run_errors(void);
// "rank 1 of 4: " on a job of several ranks, else "".
const char *rt_run_who(void);
// The command the errors are of: "ftc run".
const char *rt_run_command(void);

//
// train.c — the job, and ftc run's.
//

// What a job does on one rank: 0, or 1 after saying why. `out`: where it prints (o->out
// on rank 0, /dev/null elsewhere); ctx: the caller's.
typedef int (*JobBody)(const RunOptions *o, const Plan *p, Comm *comm, FILE *out, void *ctx);
// Runs `body` as `command`'s job: the plan in o->plan_dir read and verified; this process
// alone, or one rank of what mpirun or srun started (MPI opened only then), a rank that
// fails ending the job. 0, or 1 after saying why.
int rt_run_job(const char *command, const RunOptions *o, JobBody body, void *ctx);

#endif
