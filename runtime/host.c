// host.c — the machine ftc run trains on, as the plan's cost model saw it: the threads
// host-stream work runs on (CPU AdamW over offloaded state, host gradient sums), a
// parallel loop over element ranges for that work (elementwise: the same bits on any
// number of threads), and the check at start that this host's AdamW rate and link are
// within the ranges over which the plan's choice holds (the plan's `host` line).
#include "runtime.h"
#include "cpu/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_THREADS = 256 };

int rt_host_threads(void) {
    const char *e = getenv("FTC_HOST_THREADS");
    long n = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

typedef struct Part {
    void (*fn)(void *ctx, int64_t lo, int64_t hi);
    void *ctx;
    int64_t lo, hi;
} Part;

static void *run_part(void *arg) {
    Part *p = arg;
    p->fn(p->ctx, p->lo, p->hi);
    return NULL;
}

void rt_parallel_for(int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    // Below a few million elements a thread costs more than it saves.
    int t = n >= (1 << 21) ? rt_host_threads() : 1;
    if (t > n / (1 << 19))
        t = (int)(n / (1 << 19)) > 1 ? (int)(n / (1 << 19)) : 1;
    if (t <= 1) {
        fn(ctx, 0, n);
        return;
    }
    Part part[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    bool started[MAX_THREADS] = {0};
    for (int k = 0; k < t; k++) {
        part[k] = (Part){fn, ctx, n * k / t, n * (k + 1) / t};
        started[k] = k > 0 && pthread_create(&tid[k], NULL, run_part, &part[k]) == 0;
    }
    for (int k = 0; k < t; k++)   // this thread takes the first range and any not started
        if (!started[k])
            run_part(&part[k]);
    for (int k = 1; k < t; k++)
        if (started[k])
            pthread_join(tid[k], NULL);
}

typedef struct AdamRange {
    float *p, *g, *m, *v;
} AdamRange;

static void adam_part(void *ctx, int64_t lo, int64_t hi) {
    AdamRange *a = ctx;
    cpu_adamw_step(a->p + lo, a->g + lo, 1.0f, a->m + lo, a->v + lo, (size_t)(hi - lo), 1e-3, 0.9, 0.999,
                   1e-8, 0.0, 1);
}

double rt_host_adamw_rate(void) {
    enum { N = 1 << 23 };   // 8M parameters: 128 MiB of state, past any cache
    float *p = malloc(sizeof(float) * 4 * (size_t)N);
    if (!p)
        return 0;
    AdamRange a = {p, p + N, p + 2 * (size_t)N, p + 3 * (size_t)N};
    for (int64_t i = 0; i < 4 * (int64_t)N; i++)
        p[i] = 1e-3f * (float)(i % 97);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {   // the best of three: the machine, not its noise
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rt_parallel_for(N, adam_part, &a);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (s > 0 && N / s > best)
            best = N / s;
    }
    free(p);
    return best;
}

// Whether the plan's host-stream work includes an optimizer update.
static bool host_optimizer(const Plan *p) {
    for (int i = 0; i < p->nins[PHASE_OPT]; i++) {
        const PlanInstr *in = &p->ins[PHASE_OPT][i];
        if (in->stream == STREAM_HOST && op_desc(in->op)->cls == OPC_OPTIMIZER)
            return true;
    }
    return false;
}

static bool has_copies(const Plan *p) {
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++)
            if (op_desc(p->ins[ph][i].op)->cls == OPC_COPY)
                return true;
    return false;
}

// "between A and B", "at least A", "at most B" (in units of `scale`, `digits` decimals).
static void bounds(char *buf, size_t cap, double lo, double hi, double scale, int digits, const char *unit) {
    if (lo > 0 && isfinite(hi))
        snprintf(buf, cap, "between %.*f and %.*f %s", digits, lo / scale, digits, hi / scale, unit);
    else if (lo > 0)
        snprintf(buf, cap, "at least %.*f %s", digits, lo / scale, unit);
    else
        snprintf(buf, cap, "at most %.*f %s", digits, hi / scale, unit);
}

HostRates rt_host_measure(const Exec *x) {
    const Plan *p = x->plan;
    HostRates r = {0, 0};
    if (p->host_cores <= 0)
        return r;
    if (host_optimizer(p))
        r.adamw = rt_host_adamw_rate();
    if (has_copies(p))
        r.link = x->be && x->be->link_rate ? x->be->link_rate(x->be, x) : 0;
    return r;
}

void rt_host_check(const Plan *p, HostRates r, FILE *out) {
    char range[128];
    if (r.adamw > 0) {
        double assumed = p->host_cores * p->host_adamw_per_core;
        fprintf(out, "host: CPU AdamW at %.0f M parameters/s on %d threads (the plan assumed %.0f M: "
                     "%d cores x %.0f M)\n",
                r.adamw / 1e6, rt_host_threads(), assumed / 1e6, p->host_cores, p->host_adamw_per_core / 1e6);
        if (r.adamw < p->adamw_lo || r.adamw > p->adamw_hi) {
            bounds(range, sizeof range, p->adamw_lo, p->adamw_hi, 1e6, 0, "M parameters/s");
            fprintf(out, "ftc run: warning: the plan's choice is the fastest only for a host AdamW of "
                         "%s; on this machine another plan is faster: re-plan with ftc compile ... "
                         "--host-cores %d --host-adamw %.0fM\n",
                    range, rt_host_threads(), r.adamw / rt_host_threads() / 1e6);
        }
    }
    if (r.link > 0) {
        fprintf(out, "host: link at %.1f GB/s host to device (the plan assumed %.1f)\n", r.link / 1e9,
                p->host_link / 1e9);
        if (r.link < p->link_lo || r.link > p->link_hi) {
            bounds(range, sizeof range, p->link_lo, p->link_hi, 1e9, 1, "GB/s");
            fprintf(out, "ftc run: warning: the plan's choice is the fastest only for a link of %s; "
                         "on this machine another plan is faster: re-plan with ftc compile ... "
                         "--host-link %.1f\n",
                    range, r.link / 1e9);
        }
    }
}
