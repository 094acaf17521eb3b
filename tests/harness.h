// harness.h — for tests that compile .ft text and run the plan: parse, check, the
// whole pipeline (the IR verified after every pass), write the plan to a temporary
// directory, load it and lay it out on the cpu backend (poison on). Header-only;
// include once per test.
#ifndef FTC_TEST_HARNESS_H
#define FTC_TEST_HARNESS_H

#include "../frontend/cli/cli.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

// The SM the plans' kernels.cu is compiled for by NVRTC (NULL: none, kernels.cu only).
static const char *harness_arch;
// The data-parallel ranks the plans are for (a choice's zero is their ZeRO stage).
static int harness_ranks = 1;
// The loss as the two ops the .ft writes (projection, cross entropy) instead of fused;
// else the fused loss's rows per chunk when not 0.
static bool harness_unfused_loss;
static int64_t harness_loss_chunk;
// The decode phase's KV cache length (passes/decode.c; 0: no decode phase).
static int64_t harness_decode_len;

// A file's text (static storage, truncated at 64 KiB): a model to compile.
__attribute__((unused)) static const char *harness_file(const char *path) {
    static char text[65536];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    return text;
}

typedef struct Harness {
    Arena *a;
    FtModel m;
    Plan *plan;
    Backend *be, *host;
    Exec x;
    char dir[256];
} Harness;

// Compiles `text` (named `name` in messages) for planner choice `c`; false after
// printing why. The caller frees with harness_free in either case.
static bool harness_compile_choice(Harness *h, const char *name, const char *text,
                                   const PlanChoice *choice) {
    int64_t batch = choice->micro;
    static int serial;
    char err[1024], path[512];
    memset(h, 0, sizeof *h);
    FtSource src;
    fe_source_from_string(&src, name, text);
    h->a = arena_new();
    Ast *p = fe_parse(&src, h->a);
    bool ok = p && fe_check(&src, p, &h->m, h->a) == 0;
    // The compile pipeline itself, the IR verified after every pass.
    PlanChoice c = *choice;
    BuildStats bs = {0};
    DriverSource ds = {&src, &h->m};
    PassDiag diag = driver_diag(&src);
    Pipeline pipe = driver_pipeline(&ds, h->a, &diag);
    pipe.verify = pipe.final = true;
    pipe.spec.ranks = harness_ranks;
    pipe.spec.fused_loss = !harness_unfused_loss;
    pipe.spec.decode_len = harness_decode_len;
    IrGraph *g = ok ? pipeline_build(&pipe, &c, h->a, &bs) : NULL;
    ok = g != NULL && ir_verify(g, stdout) == 0;
    AllocStats as = bs.alloc;
    char targets[512] = "";
    for (int i = 0; i < h->m.train.n_lora_targets; i++)
        snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s%s", i ? "," : "",
                 h->m.train.lora_targets[i].name);
    if (ok) {
        snprintf(h->dir, sizeof h->dir, "%s/ftc-test-%d-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                 (int)getpid(), serial++);
        PlanMeta meta = {.model = h->m.name, .source = name, .gpu = "none", .arch = harness_arch,
                         .accum = h->m.train.batch / (batch * harness_ranks),
                         .zero = harness_ranks > 1 ? c.zero : -1, .arena_bytes = as.arena_bytes,
                         .host_bytes = as.host_bytes, .lora_r = h->m.train.lora ? h->m.train.lora_r : 0,
                         .lora_alpha = h->m.train.lora_alpha, .lora_dropout = h->m.train.lora_dropout,
                         .lora_targets = targets};
        driver_meta_train(&meta, &h->m.train);
        ok = codegen_plan_dir(h->dir, g, &meta, err, sizeof err) == 0;
        snprintf(path, sizeof path, "%s/plan", h->dir);
        if (ok && plan_load(&h->plan, path, err, sizeof err) != 0)
            ok = false;
        if (ok) {
            h->be = rt_cpu_backend();
            h->host = rt_cpu_backend();
            ok = rt_exec_init(&h->x, h->plan, h->be, h->host, LAYOUT_PLANNED, err, sizeof err) == 0;
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

// Compiles `text` for micro-batch `batch`, everything kept and on the device.
__attribute__((unused)) static bool harness_compile(Harness *h, const char *name, const char *text,
                                                    int64_t batch) {
    PlanChoice c = {.micro = batch, .policy = REMAT_KEEP, .n_policy = 0, .rest = REMAT_KEEP,
                    .offload = {.optimizer = false, .grads = false}, .loss_chunk = harness_loss_chunk};
    return harness_compile_choice(h, name, text, &c);
}

static void harness_free(Harness *h) {
    if (h->x.plan)
        rt_exec_free(&h->x);
    if (h->be)
        h->be->destroy(h->be);
    if (h->host)
        h->host->destroy(h->host);
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
    rt_read_f32(&h->x, plan_role(h->plan, PR_LOSS)->id, &l);
    return l;
}

#endif
