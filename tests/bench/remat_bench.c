// remat_bench.c — how much recompute ftc's planner needs, against per-layer
// checkpointing, at the peak per-layer checkpointing reaches.
//
// Per-layer checkpointing (PyTorch's checkpoint around each block, as
// gradient_checkpointing_enable() does) keeps each block's input and re-runs the whole
// block forward in backward: its recompute is every forward FLOP inside the blocks. Its
// peak is measured here by planning ftc's `full` policy (the same kept tensors). At
// that budget the planner then picks recompute per block (keep / selective / full,
// mixed across blocks) with the same micro-batch and no offload; the table prints the
// recompute FLOPs of its choice over per-layer checkpointing's. Both are planned with
// ftc's own build (pipeline_plan_choice) and cost model.
//
//     build/tests/bench_remat [SOURCE_DIR]
#include "../../frontend/cli/cli.h"


int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : ".";
    static const char *models[] = {"qwen2-0.5b", "qwen2"};
    static const int64_t micros[] = {1, 4};
    printf("%-11s %5s %14s %18s %18s %8s  %s\n", "model", "micro", "ckpt peak", "ckpt recompute",
           "ftc recompute", "ratio", "ftc's choice");
    for (size_t mi = 0; mi < 2; mi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s.ft", root, models[mi]);
        FtSource src;
        if (fe_source_read(&src, path) != 0)
            return 2;
        Arena *a = arena_new();
        FtModel model;
        Ast *p = fe_parse(&src, a);
        if (!p || fe_check(&src, p, &model, a) != 0)
            return 2;
        DriverSource ds = {&src, &model};
        Pipeline pipe = driver_pipeline(&ds, a, NULL);
        PlanCtx x = {.pipeline = &pipe, .gpu = gpu_preset("a100-40g")};
        x.cm = (CostModel){x.gpu, 1e9, 5e9, 0, NULL};
        for (size_t bi = 0; bi < 2; bi++) {
            int64_t mb = micros[bi];
            // Per-layer checkpointing: its peak, and the forward FLOPs inside the blocks.
            PlanChoice full = {.micro = mb, .policy = REMAT_FULL, .n_policy = 1 << 20, .rest = REMAT_FULL,
                               .offload = {.optimizer = false, .grads = false}};
            PlanOutcome ck;
            pipeline_plan_choice(&x, &full, NULL, &ck);
            Arena *ga = arena_new();
            IrGraph *g = fe_elaborate(&src, &model, mb, ga);
            int64_t block_fwd = 0;
            for (int i = 0; i < g->nodes.len; i++)
                if (g->nodes.at[i].layer >= 0)
                    block_fwd += op_flops(g, &g->nodes.at[i]);
            int layers = ir_layers(g);
            ir_graph_free(g);
            arena_free(ga);
            PlannerInput in = {.global_batch = model.train.batch, .nlayers = layers,
                               .budget_bytes = ck.device_bytes, .host_budget_bytes = INT64_MAX,
                               .micro = mb, .remat = -1, .offload = 0, .build = pipeline_plan_choice, .ctx = &x};
            PlannerResult r;
            planner_search(&in, &r);
            if (r.best < 0) {
                printf("%-11s %5lld: no plan at the checkpointing peak\n", models[mi], (long long)mb);
                planner_result_free(&r);
                continue;
            }
            const Candidate *c = &r.tried.at[r.best];
            char d[160];
            planner_choice_str(d, sizeof d, &c->c, layers);
            printf("%-11s %5lld %11.2f GiB %13.1f TFLOP %13.1f TFLOP %8.3f  %s\n", models[mi],
                   (long long)mb, (double)ck.device_bytes / 0x1p30, (double)block_fwd / 1e12,
                   (double)c->o.remat.recompute_flops / 1e12,
                   (double)c->o.remat.recompute_flops / (double)block_fwd, d);
            planner_result_free(&r);
        }
        arena_free(a);
        fe_source_free(&src);
    }
    return 0;
}
