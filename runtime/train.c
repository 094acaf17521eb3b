// train.c — the job (this process alone, or one rank of what mpirun or srun started) and
// its signals, which `ftc run` and `ftc eval` share; and `ftc run`'s: a training session
// (session.c) stepped to its last step, the console (progress.c) and the run report
// (report.c) listening to its events.
#include "session.h"
#include "comm.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

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
        snprintf(term_msg[k], sizeof term_msg[k], "%s: %sstopped by %s from %s: the job was ended, from "
                 "outside or after another rank failed (whose error would come first)\n", rt_run_command(),
                 rt_run_who(), k ? "SIGINT" : "SIGTERM", from);
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

// Trains one rank: every rank of a job runs this, rank 0 prints and saves. 0, or 1 after
// saying why.
static int train(const RunOptions *o, const Plan *p, Comm *comm, FILE *out, void *ctx) {
    (void)ctx;
    if (comm->ranks == 1)
        catch_stop();
    Console con;
    RunReport *report = NULL;
    rt_console_init(&con, out, comm->ranks, o->log_every);
    // (the console first: the run described before the report says where it goes, a line
    // left in place ended before another listener's error)
    const TrainListener listen[] = {{rt_console_on_event, &con}, {rt_report_on_event, &report}, {NULL, NULL}};
    TrainSession s;
    int rc = rt_session_open(&s, o, p, comm, out, listen);
    while (rc == 0 && s.step < s.steps) {
        rc = rt_session_step(&s);
        if (rc == 0 && stop_signal && s.step < s.steps)   // (one process: catch_stop)
            rt_session_stop(&s, stop_signal);
    }
    return rt_session_close(&s, rc);
}

// The job's rank: its output (only rank 0 prints; the others' lines would repeat it), a
// rank's signals caught, the body run. A rank that fails ends the job: the others would
// otherwise wait for it until their collectives time out.
static int run_rank(const char *command, const RunOptions *o, const Plan *p, Comm *comm, JobBody body,
                    void *ctx) {
    FILE *out = comm->rank == 0 ? o->out : fopen("/dev/null", "w");
    if (!out)
        return rt_run_error("cannot open /dev/null: %s", strerror(errno));
    if (comm->ranks > 1) {
        rt_run_errors_begin(command, comm->rank, comm->ranks);
        catch_term(comm);
    }
    int rc = body(o, p, comm, out, ctx);
    if (comm->rank != 0)
        fclose(out);
    if (rc != 0)
        rt_comm_abort(comm, 1);
    return rc;
}

int rt_run_job(const char *command, const RunOptions *o, JobBody body, void *ctx) {
    char err[1024], path[4096];
    rt_run_errors_begin(command, 0, 1);
    snprintf(path, sizeof path, "%s/plan", o->plan_dir);
    Plan *p = NULL;
    if (plan_load(&p, path, err, sizeof err) != 0)
        return rt_run_error("%s", err);
    if (plan_verify(p, stderr) != 0) {
        plan_free(p);
        return rt_run_error("%s: the plan failed verification; it was not run", path);
    }
    // The job: this process alone, or one rank of what mpirun or srun started, the
    // launcher's rank count the plan's.
    Comm *comm = rt_comm_open(p->ranks, o->comm_timeout_s, err, sizeof err);
    if (!comm) {
        plan_free(p);
        return rt_run_error("%s", err);
    }
    int rc = run_rank(command, o, p, comm, body, ctx);
    rt_comm_close(comm);
    plan_free(p);
    return rc;
}

int rt_train(const RunOptions *o) {
    int rc = rt_run_job("ftc run", o, train, NULL);
    return rc == 0 && stop_signal ? 128 + stop_signal : rc;
}
