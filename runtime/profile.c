// profile.c — ftc run --profile: the device work timed instruction by instruction, after a
// warm-up, by the backend's timing marks where its launches return before their work is done
// (CUDA events on a GPU), else by the clock around each call (the cpu and emu backends); summed
// per kernel (a grouped launch as one, a GEMM by its shapes) and set beside the cost model's
// estimate the plan carries for it (us=), so that a first run on a GPU says where the model
// is wrong.
#include "runtime.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct Profile {
    int n;                  // instructions of the training step (ids 0..n-1; the eval phase's
                            // come after them and are not timed)
    bool on;
    double *ms;             // per instruction: summed over its timed runs
    int64_t *calls;
    double *t0;             // the clock at its call (backends without marks)
    int *pending, npending; // marked since the last collect
};

Profile *rt_profile_new(const Plan *p) {
    Profile *pr = calloc(1, sizeof *pr);
    if (!pr)
        return NULL;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        if (ph != PHASE_EVAL)
            pr->n += p->nins[ph];
    size_t n = (size_t)pr->n + 1;
    pr->ms = calloc(n, sizeof *pr->ms), pr->calls = calloc(n, sizeof *pr->calls);
    pr->t0 = calloc(n, sizeof *pr->t0), pr->pending = calloc(n, sizeof *pr->pending);
    if (!pr->ms || !pr->calls || !pr->t0 || !pr->pending) {
        rt_profile_free(pr);
        return NULL;
    }
    return pr;
}

void rt_profile_free(Profile *pr) {
    if (!pr)
        return;
    free(pr->ms), free(pr->calls), free(pr->t0), free(pr->pending);
    free(pr);
}

void rt_profile_on(Exec *x, Profile *pr, bool on) {
    x->prof = pr;
    pr->on = on;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

// The device's work: generated kernels and library GEMMs; not views, copies, collectives or
// host work.
static bool timed(const Exec *x, const PlanInstr *in) {
    OpClass c = op_desc(in->op)->cls;
    return x->prof && x->prof->on && in->stream != STREAM_HOST && in->by < 0 && in->id < x->prof->n &&
           (in->nlaunch > 0 || c == OPC_GEMM || c == OPC_LOSS_GEMM);
}

void rt_profile_before(Exec *x, const PlanInstr *in) {
    if (!timed(x, in))
        return;
    if (x->be->time_mark)
        x->be->time_mark(x->be, 2 * in->id, in->stream);
    else
        x->prof->t0[in->id] = now_ms();
}

void rt_profile_after(Exec *x, const PlanInstr *in) {
    Profile *pr = x->prof;
    if (!timed(x, in))
        return;
    if (!x->be->time_mark) {
        pr->ms[in->id] += now_ms() - pr->t0[in->id];
        pr->calls[in->id]++;
        return;
    }
    x->be->time_mark(x->be, 2 * in->id + 1, in->stream);
    pr->pending[pr->npending++] = in->id;   // (an instruction runs once a phase)
}

void rt_profile_collect(Exec *x) {
    Profile *pr = x->prof;
    if (!pr)
        return;
    for (int k = 0; k < pr->npending; k++) {
        int id = pr->pending[k];
        pr->ms[id] += x->be->time_between(x->be, 2 * id, 2 * id + 1);
        pr->calls[id]++;
    }
    pr->npending = 0;
}

// One row of the table: what ran, summed over the instructions that share its label.
typedef struct Row {
    char label[200];
    double ms, est_us;
    int64_t calls;
} Row;

// An instruction's label: its op and kernels ("attention_bwd k16_...+k17_..."), a grouped
// launch with its size, a GEMM by its operands' shapes.
static void label_of(const Plan *p, const PlanInstr *in, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s", op_desc(in->op)->name);
    for (int l = 0; l < in->nlaunch && n > 0 && (size_t)n < cap; l++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%s", l ? "+" : " ", in->launch[l].name);
    if (in->group && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " (%d tensors)", in->group);
    if (in->nlaunch == 0)   // a library call: its output's and inputs' shapes
        for (int k = -1; k < 2 && k < in->nin && n > 0 && (size_t)n < cap; k++) {
            int b = k < 0 ? in->out[0] : in->in[k];
            if (b < 0)
                continue;
            n += snprintf(buf + n, cap - (size_t)n, "%s", k < 0 ? " " : k == 0 ? " <- " : ", ");
            const PlanBuffer *t = &p->buf[b];
            for (int d = 0; d < t->ndim && n > 0 && (size_t)n < cap; d++)
                n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
        }
}

static int by_time(const void *a, const void *b) {
    double x = ((const Row *)a)->ms, y = ((const Row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

int rt_profile_write(const Profile *pr, const Plan *p, const char *path, const char *device,
                     int64_t steps, char *err, size_t errlen) {
    Row *rows = calloc((size_t)pr->n + 1, sizeof *rows);
    if (!rows)
        return rt_fail(err, errlen, "out of memory");
    int nrows = 0;
    double total = 0, total_est = 0;
    for (int id = 0; id < pr->n; id++) {
        if (!pr->calls[id])
            continue;
        const PlanInstr *in = plan_instr(p, id);
        char label[200];
        label_of(p, in, label, sizeof label);
        int r = 0;
        while (r < nrows && strcmp(rows[r].label, label) != 0)
            r++;
        if (r == nrows)
            snprintf(rows[nrows++].label, sizeof rows[0].label, "%s", label);
        rows[r].ms += pr->ms[id];
        rows[r].calls += pr->calls[id];
        rows[r].est_us += in->est_us * (double)pr->calls[id];
        total += pr->ms[id], total_est += in->est_us * (double)pr->calls[id];
    }
    qsort(rows, (size_t)nrows, sizeof *rows, by_time);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(rows);
        return rt_fail(err, errlen, "--profile %s: %s", path, strerror(errno));
    }
    double s = steps > 0 ? (double)steps : 1;
    fprintf(f, "# ftc run --profile: plan %s on %s, %lld steps timed (after one untimed)\n", p->model,
            device, (long long)steps);
    fprintf(f, "# the device's work: %.3f ms a step measured, %.3f ms estimated (%.2fx)\n", total / s,
            total_est * 1e-3 / s, total_est > 0 ? total / (total_est * 1e-3) : 0.0);
    fprintf(f, "%10s %10s %12s %12s %8s  %s\n", "calls/step", "ms/step", "us/call", "est us/call",
            "meas/est", "what");
    for (int r = 0; r < nrows; r++) {
        double per = rows[r].ms * 1e3 / (double)rows[r].calls, est = rows[r].est_us / (double)rows[r].calls;
        fprintf(f, "%10.1f %10.3f %12.2f %12.2f %8.2f  %s\n", (double)rows[r].calls / s, rows[r].ms / s,
                per, est, est > 0 ? per / est : 0.0, rows[r].label);
    }
    free(rows);
    if (ferror(f) | fclose(f))
        return rt_fail(err, errlen, "--profile %s: cannot write it", path);
    return 0;
}
