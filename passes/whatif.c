// whatif.c — when nothing fits, what each change the user could make would need: LoRA
// on the attention's q and v projections (where fine-tuning usually starts), that on an
// NF4 base (QLoRA), and shorter sequences. Each is planned with the most frugal choice
// the planner has: micro-batch 1, every block recomputed from its input with the input
// waiting in host memory, optimizer state, master weights and gradients on the host.
// AdamW8bit, which shrinks what lives on the host as much as what lives on the device,
// gets the planner's whole search instead.
// The projections are found in the graph, not by name: the linears whose outputs reach
// the first attention's q and v through views, elementwise ops and norms whose other
// inputs are parameters, batch inputs or constant tables (rope's position ids and angles, a
// q/k norm's weight).
#include "passes.h"

#include <stdlib.h>
#include <string.h>

// The .ft name of the weight of the linear that feeds tensor `t`, or NULL.
static const char *projection(const IrGraph *g, int t) {
    for (int guard = 0; guard < 64 && t >= 0; guard++) {
        const IrTensor *x = &g->tensors.at[t];
        if (x->producer < 0)
            return NULL;
        const IrNode *n = &g->nodes.at[x->producer];
        OpClass c = op_desc(n->op)->cls;
        if (c == OPC_GEMM) {   // a projection: a product with a weight
            const IrTensor *w = &g->tensors.at[n->in[1]];
            return w->kind == TK_PARAM ? w->decl : NULL;
        }
        // Through ops whose other inputs are parameters, batch inputs or tables made from
        // constants (a norm's weight, rope's position ids and angles): the value still comes
        // from in[0].
        bool through = c == OPC_MOVEMENT || c == OPC_ELEMENTWISE || c == OPC_REDUCTION;
        for (int k = 1; through && k < n->nin; k++) {
            const IrTensor *o = n->in[k] >= 0 ? &g->tensors.at[n->in[k]] : NULL;
            through = !o || o->kind == TK_PARAM || o->kind == TK_INPUT ||
                      (o->producer >= 0 && g->nodes.at[o->producer].nin == 0);
        }
        if (!through)
            return NULL;
        t = n->in[0];
    }
    return NULL;
}

static void find_qv(const PlanCtx *x, WhatIf *w) {
    Arena *a = arena_new();
    const Pipeline *p = x->pipeline;
    IrGraph *g = p->elaborate(p->ctx, pipeline_min_micro(&p->spec), p->spec.seq, a);
    for (int i = 0; g && i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (op_desc(n->op)->cls != OPC_ATTENTION || n->phase != PHASE_FORWARD)
            continue;
        const char *q = projection(g, n->in[0]), *v = projection(g, n->in[2]);
        if (q && v) {   // the names outlive the graph's arena: they point into the AST
            w->q_target = q;
            w->v_target = v;
        }
        break;
    }
    if (g)
        ir_graph_free(g);
    arena_free(a);
}

// The most frugal choice under `spec` (the weights streamed unless `keep`) planned, against
// the device and host budgets; device -1 when it does not build.
static WhatIfPlan frugal(const PlanCtx *x, const PipelineSpec *spec, bool keep, int64_t budget,
                         int64_t host_budget) {
    bool dp = spec->ranks > 1;   // several ranks: everything sharded as well
    const PlanChoice c = {.micro = pipeline_min_micro(spec), .policy = REMAT_SWAP, .n_policy = 1 << 30, .rest = REMAT_SWAP,
                          .offload = {.optimizer = true, .grads = true, .weights = !keep},
                          .zero = dp ? 3 : 0, .bucket_bytes = dp ? BUCKET_DEFAULT_BYTES : 0};
    Pipeline p = *x->pipeline;
    p.spec = *spec;
    p.diag = NULL;
    p.cache = NULL;   // a cache belongs to one spec
    PlanCtx y = *x;
    y.pipeline = &p;
    PlanOutcome o;
    if (pipeline_plan_choice(&y, &c, NULL, &o) != 0)
        return (WhatIfPlan){.device = -1};
    return (WhatIfPlan){.device = o.device_bytes, .host = o.host_bytes,
                        .fits = o.device_bytes <= budget && o.host_bytes <= host_budget};
}

int whatif_search(const PlanCtx *x, int64_t budget, int64_t host_budget, int64_t weights_bytes, int offload,
                  WhatIf *w) {
    memset(w, 0, sizeof *w);
    w->lora.device = w->qlora.device = w->stream.device = -1;
    const PipelineSpec *spec = &x->pipeline->spec;
    // With the weights kept on the device (--offload below weights), when they alone
    // exceed the budget, neither LoRA nor a shorter sequence can help; streaming them from
    // the host, or a smaller base (NF4), can.
    // With several ranks the weights stay (each rank's share of them, at ZeRO 3).
    bool dp = spec->ranks > 1, keep = dp || (offload >= 0 && offload < 3);
    w->weights_too_big = keep && weights_bytes + x->gpu->reserve_bytes > budget;
    if (keep && !dp)
        w->stream = frugal(x, spec, false, budget, host_budget);
    find_qv(x, w);
    const char *targets[2] = {w->q_target, w->v_target};
    SrcLoc locs[2] = {{0}, {0}};
    LoraSpec qv = {.r = 8, .alpha = 16, .dropout = 0, .n_targets = 2, .targets = targets,
                   .target_locs = locs};
    if (w->q_target && !spec->lora && !w->weights_too_big) {
        PipelineSpec s = *spec;
        s.lora = true, s.lora_spec = qv;
        w->lora = frugal(x, &s, keep, budget, host_budget);
    }
    if (w->q_target && !spec->quantize) {
        PipelineSpec s = *spec;
        if (!s.lora)
            s.lora = true, s.lora_spec = qv;
        s.quantize = s.double_quant = true;
        w->qlora = frugal(x, &s, keep, budget, host_budget);
    }
    for (int64_t seq = spec->seq / 2; seq >= 64 && !w->weights_too_big; seq /= 2) {
        PipelineSpec s = *spec;
        s.seq = seq;
        WhatIfPlan b = frugal(x, &s, keep, budget, host_budget);
        if (b.device >= 0 && b.host > host_budget)
            break;   // the host cannot hold the model states: no sequence length helps
        if (b.device >= 0 && b.fits) {
            w->seq = seq, w->seq_plan = b;
            break;
        }
    }
    return 0;
}

// The naive step's model states under `p` (through quantize, micro-batch 1), or NULL when
// it does not build.
static IrGraph *states_graph(const Pipeline *p, Arena *a, MemBreakdown *mb) {
    Pipeline q = *p;
    q.stop_after = "quantize";
    q.cache = NULL;
    q.diag = NULL;
    PlanChoice one = {.micro = pipeline_min_micro(&q.spec), .policy = REMAT_KEEP, .rest = REMAT_KEEP};
    BuildStats bs;
    IrGraph *g = pipeline_build(&q, &one, a, &bs);
    if (g)
        *mb = count_naive_memory(g, 0);
    return g;
}

int whatif_optimizer(const PlannerInput *in, WhatIfOptimChange change, WhatIfOptim *w) {
    memset(w, 0, sizeof *w);
    const PlanCtx *x = in->ctx;
    Pipeline p = *x->pipeline;
    if (p.spec.lora && change == WHATIF_ADAMW8BIT)
        return 0;
    Arena *a = arena_new();
    MemBreakdown plain, q8;
    IrGraph *g = states_graph(&p, a, &plain);
    bool applies = g && (change == WHATIF_ADAMW8BIT ? g->step.optim_states == 2 && !g->step.adam8 : g->step.kahan);
    if (g)
        ir_graph_free(g);
    if (change == WHATIF_ADAMW8BIT)
        p.spec.adamw8bit = true;
    else
        p.spec.no_kahan = true;
    g = applies ? states_graph(&p, a, &q8) : NULL;
    bool built = g != NULL;
    if (g)
        ir_graph_free(g);
    arena_free(a);
    if (!built)
        return 0;
    w->tried = true;
    w->optimizer_bytes[0] = plain.bytes[MEM_OPTIMIZER], w->optimizer_bytes[1] = q8.bytes[MEM_OPTIMIZER];
    p.cache = pipeline_cache_new();   // (a cache serves one spec)
    PlanCtx y = *x;
    y.pipeline = &p;
    PlannerInput i8 = *in;
    i8.ctx = &y;
    i8.states_bytes = q8.bytes[MEM_OPTIMIZER] + q8.bytes[MEM_MASTER];
    i8.grads_whole = in->ranks > 1;
    PlannerResult r;
    planner_search(&i8, &r);
    int at = r.best >= 0 ? r.best : r.smallest;
    w->fits = r.best >= 0;
    w->planned = at >= 0;
    if (at >= 0)
        w->plan = r.tried.at[at];
    w->host_need = r.host_need;
    planner_result_free(&r);
    pipeline_cache_free(p.cache);
    return 0;
}
