// remat_exact.c — the planner's recompute choice against the optimum. On a graph small
// enough to enumerate (Qwen2-0.5B's shapes with 6 blocks, micro-batch 1, no offload),
// every assignment of keep / selective / full to the blocks (3^6 = 729) is planned
// exactly; at budgets between "everything kept" and "full recompute everywhere" the
// table prints the recompute time of the planner's choice over the optimum's.
//
//     build/tests/bench_remat_exact [SOURCE_DIR]
#include "../../frontend/cli/cli.h"

#include <time.h>


static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : ".";
    char path[1024];
    snprintf(path, sizeof path, "%s/models/qwen2-0.5b.ft", root);
    FtSource src;
    if (fe_source_read(&src, path) != 0)
        return 2;
    char *at = strstr(src.text, "layers   = 24");
    if (!at)
        return 2;
    memcpy(at, "layers   =  6", 13);
    Arena *a = arena_new();
    FtModel model;
    Ast *p = fe_parse(&src, a);
    if (!p || fe_check(&src, p, &model, a) != 0)
        return 2;
    DriverSource ds = {&src, &model};
    Pipeline pipe = driver_pipeline(&ds, a, NULL);
    PlanCtx x = {.pipeline = &pipe, .gpu = gpu_preset("a100-40g")};
    x.cm = (CostModel){x.gpu, 1e9, 5e9, 0, NULL};
    const int L = 6;
    PlanChoice keep = {.micro = 1, .policy = REMAT_KEEP, .n_policy = L, .rest = REMAT_KEEP,
                       .offload = {.optimizer = false, .grads = false}};
    PlanChoice full = {.micro = 1, .policy = REMAT_FULL, .n_policy = L, .rest = REMAT_FULL,
                       .offload = {.optimizer = false, .grads = false}};
    PlanOutcome ok, of;
    pipeline_plan_choice(&x, &keep, NULL, &ok);
    pipeline_plan_choice(&x, &full, NULL, &of);
    printf("6 blocks of Qwen2-0.5B, micro-batch 1, seq 2048: keep %.3f GiB, full %.3f GiB\n",
           (double)ok.device_bytes / 0x1p30, (double)of.device_bytes / 0x1p30);
    printf("%12s %14s %14s %8s %9s  %s\n", "budget", "planner (ms)", "optimum (ms)", "ratio",
           "exact s", "planner's choice");
    double worst = 1;
    for (int k = 0; k <= 6; k++) {
        int64_t budget = of.device_bytes + (ok.device_bytes - of.device_bytes) * k / 6;
        PlannerInput in = {.global_batch = model.train.batch, .nlayers = L, .budget_bytes = budget,
                           .host_budget_bytes = INT64_MAX, .micro = 1, .remat = -1, .offload = 0,
                           .build = pipeline_plan_choice, .ctx = &x};
        PlannerResult r;
        planner_search(&in, &r);
        RematPolicy pol[6];
        Candidate best;
        double t0 = now_s();
        planner_exact(&in, 1, 0, pol, &best);
        double t1 = now_s();
        if (r.best < 0 || !best.fits) {
            printf("%9.3f GiB: no plan\n", (double)budget / 0x1p30);
            planner_result_free(&r);
            continue;
        }
        const Candidate *h = &r.tried.at[r.best];
        double hr = h->o.cost.recompute_us, er = best.o.cost.recompute_us;
        double ratio = er > 0 ? hr / er : hr > 0 ? 1e9 : 1.0;
        if (ratio > worst)
            worst = ratio;
        char d[160];
        planner_choice_str(d, sizeof d, &h->c, L);
        printf("%8.3f GiB %14.1f %14.1f %8.3f %9.2f  %s\n", (double)budget / 0x1p30, hr * 1e-3,
               er * 1e-3, ratio, t1 - t0, d);
        planner_result_free(&r);
    }
    printf("worst ratio of the planner's recompute time to the optimum's: %.3f\n", worst);
    arena_free(a);
    fe_source_free(&src);
    return 0;
}
