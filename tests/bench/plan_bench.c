// plan_bench.c — the memory planner on every shipped model at micro-batch 1, 2 and 8:
// the device arena against the liveness lower bound (the most bytes live at one node,
// 256-byte aligned), and how long planning took (elaborate .. alloc, best of 3).
// Exits non-zero when an arena is more than 2% above its bound.
//
//     build/tests/bench_plan [SOURCE_DIR]
#include "../../frontend/frontend.h"
#include "../../passes/passes.h"

#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
    const char *src = argc > 1 ? argv[1] : ".";
    static const char *models[] = {"tiny", "qwen2-0.5b", "qwen2-1.5b", "qwen2", "llama2-7b", "qwen2-72b",
                                   "gpt2", "llama-3.1-8b", "gemma-2-9b", "gemma-3-1b",
                                   "phi-3-mini-4k", "pythia-160m"};
    static const int64_t batches[] = {1, 2, 8};
    int over = 0;
    printf("%-12s %5s %8s %16s %16s %8s %10s %9s\n", "model", "micro", "nodes", "lower bound",
           "arena", "ratio", "plan ms", "order");
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s.ft", src, models[mi]);
        FtSource s;
        if (fe_source_read(&s, path) != 0) {
            printf("%s: cannot read\n", path);
            return 2;
        }
        for (size_t bi = 0; bi < 3; bi++) {
            double best = 1e30;
            AllocStats as = {0};
            int nodes = 0;
            for (int rep = 0; rep < 3; rep++) {
                Arena *a = arena_new();
                FtModel m;
                double t0 = now_ms();
                Ast *p = fe_parse(&s, a);
                if (!p || fe_check(&s, p, &m, a) != 0)
                    return 2;
                IrGraph *g = fe_elaborate(&s, &m, batches[bi], a);
                autodiff_apply(g, 1, false, NULL);
                ScheduleStats ss;
                schedule_apply(g, &ss);
                liveness_apply(g, true);
                alloc_apply(g, &as);
                double t = now_ms() - t0;
                if (t < best)
                    best = t;
                nodes = g->nodes.len;
                ir_graph_free(g);
                arena_free(a);
            }
            double ratio = (double)as.arena_bytes / (double)as.lower_bound;
            over += ratio > 1.02;
            printf("%-12s %5lld %8d %16lld %16lld %8.4f %10.1f %9s\n", models[mi], (long long)batches[bi],
                   nodes, (long long)as.lower_bound, (long long)as.arena_bytes, ratio, best, as.strategy);
        }
        fe_source_free(&s);
    }
    printf("%d of %zu arenas more than 2%% above the lower bound\n", over,
           3 * sizeof models / sizeof models[0]);
    return over ? 1 : 0;
}
