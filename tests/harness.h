// harness.h — for tests that compile .ft text and run the plan: parse, check,
// elaborate, lora, autodiff, write the plan to a temporary directory, load it and
// lay it out on the cpu backend (poison on). Header-only; include once per test.
#ifndef FTC_TEST_HARNESS_H
#define FTC_TEST_HARNESS_H

#include "../codegen/codegen.h"
#include "../frontend/frontend.h"
#include "../passes/passes.h"
#include "../runtime/runtime.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct Harness {
    Arena *a;
    FtModel m;
    Plan *plan;
    Backend *be;
    Exec x;
    char dir[256];
} Harness;

// Compiles `text` (named `name` in messages) for micro-batch `batch`; false after
// printing why. The caller frees with harness_free in either case.
static bool harness_compile(Harness *h, const char *name, const char *text, int64_t batch) {
    static int serial;
    char err[1024], path[512];
    memset(h, 0, sizeof *h);
    FtSource src;
    fe_source_from_string(&src, name, text);
    h->a = arena_new();
    Ast *p = fe_parse(&src, h->a);
    IrGraph *g = p && fe_check(&src, p, &h->m, h->a) == 0 ? fe_elaborate(&src, &h->m, batch, h->a)
                                                           : NULL;
    bool ok = g != NULL;
    if (ok && h->m.train.lora) {
        const char **names = arena_alloc(h->a, sizeof(char *) * (size_t)h->m.train.n_lora_targets);
        SrcLoc *locs = arena_alloc(h->a, sizeof(SrcLoc) * (size_t)h->m.train.n_lora_targets);
        for (int i = 0; i < h->m.train.n_lora_targets; i++)
            names[i] = h->m.train.lora_targets[i].name, locs[i] = h->m.train.lora_targets[i].loc;
        LoraSpec ls = {h->m.train.lora_r, h->m.train.lora_alpha, h->m.train.lora_dropout,
                       h->m.train.n_lora_targets, names, locs};
        PassDiag d = {0};
        ok = lora_apply(g, &ls, &d) == 0;
    }
    AllocStats as = {0};
    if (ok) {
        autodiff_apply(g, (int)(h->m.train.batch / batch));
        ScheduleStats ss;
        schedule_apply(g, &ss);
        liveness_apply(g, true);
        alloc_apply(g, &as);
        ok = ir_verify(g, stdout) == 0;
    }
    if (ok) {
        static const char *prec[] = {"bf16", "fp16", "fp32", "bf16_pure"};
        snprintf(h->dir, sizeof h->dir, "%s/ftc-test-%d-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                 (int)getpid(), serial++);
        PlanMeta meta = {.model = h->m.name, .source = name, .gpu = "none",
                         .accum = h->m.train.batch / batch, .precision = prec[h->m.train.precision],
                         .optimizer = h->m.train.optimizer, .lr = h->m.train.lr,
                         .beta1 = h->m.train.beta1, .beta2 = h->m.train.beta2, .eps = h->m.train.eps,
                         .weight_decay = h->m.train.weight_decay, .arena_bytes = as.arena_bytes};
        ok = codegen_plan_dir(h->dir, g, &meta, err, sizeof err) == 0;
        snprintf(path, sizeof path, "%s/plan", h->dir);
        if (ok && plan_load(&h->plan, path, err, sizeof err) != 0)
            ok = false;
        if (ok) {
            h->be = rt_cpu_backend();
            ok = rt_exec_init(&h->x, h->plan, h->be, LAYOUT_PLANNED, err, sizeof err) == 0;
            h->x.poison = true;
        }
        if (!ok)
            printf("  %s: %s\n", name, err);
    }
    if (g)
        ir_graph_free(g);
    fe_source_free(&src);
    return ok;
}

static void harness_free(Harness *h) {
    if (h->x.plan)
        rt_exec_free(&h->x);
    if (h->be)
        h->be->destroy(h->be);
    plan_free(h->plan);
    arena_free(h->a);
    if (h->dir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->dir);
        if (system(cmd) != 0)
            printf("  could not remove %s\n", h->dir);
    }
    memset(h, 0, sizeof *h);
}

// Runs forward and backward once; false after printing why.
__attribute__((unused)) static bool harness_step(Harness *h) {
    char err[1024];
    if (rt_exec_phase(&h->x, PHASE_FWD, err, sizeof err) == 0 &&
        rt_exec_phase(&h->x, PHASE_BWD, err, sizeof err) == 0)
        return true;
    printf("  %s\n", err);
    return false;
}

// The loss of the last forward.
__attribute__((unused)) static float harness_loss(Harness *h) {
    float l;
    rt_read_f32(&h->x, plan_role(h->plan, "loss")->id, &l);
    return l;
}

#endif
