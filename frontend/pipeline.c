// pipeline.c — the compile pipeline as one visible sequence of passes, and what
// ftc compile prints and writes about the plan it chose:
//
//   elaborate (B, S) → lora → autodiff → chunked loss → remat → offload
//     → schedule → liveness → alloc
//
// fe_build runs it for one planner choice; fe_compile_plan runs the planner over
// choices and reports the decision, or why nothing fits.
#include "frontend.h"
#include "../passes/passes.h"

#include <math.h>
#include <time.h>

// The loss's backward works on row chunks of this many fp32 bytes at most.
enum { LOSS_CHUNK_BYTES = 64 << 20 };

static void pass_to_fe(void *ctx, SrcLoc loc, const char *msg) { fe_error(ctx, loc, "%s", msg); }

static void dump(FILE *f, const char *pass, const IrGraph *g) {
    if (!f)
        return;
    fprintf(f, "# after %s\n", pass);
    ir_print(f, g);
}

IrGraph *fe_build(FtSource *src, const FtModel *m, const PlanChoice *c, Arena *a, BuildStats *bs,
                  FILE *dump_to) {
    memset(bs, 0, sizeof *bs);
    IrGraph *g = fe_elaborate(src, m, c->micro, a);
    if (!g)
        return NULL;
    dump(dump_to, "elaborate", g);
    const TrainSpec *t = &m->train;
    if (t->lora) {
        const char **names = arena_alloc(a, sizeof(char *) * (size_t)t->n_lora_targets);
        SrcLoc *locs = arena_alloc(a, sizeof(SrcLoc) * (size_t)t->n_lora_targets);
        for (int i = 0; i < t->n_lora_targets; i++)
            names[i] = t->lora_targets[i].name, locs[i] = t->lora_targets[i].loc;
        LoraSpec ls = {t->lora_r, t->lora_alpha, t->lora_dropout, t->n_lora_targets, names, locs};
        PassDiag d = {pass_to_fe, src, 0};
        if (lora_apply(g, &ls, &d) != 0) {
            ir_graph_free(g);
            return NULL;
        }
        dump(dump_to, "lora", g);
    }
    autodiff_apply(g, (int)(t->batch / c->micro));
    dump(dump_to, "autodiff", g);
    if (t->quantize) {
        quantize_apply(g, t->double_quant, &bs->quant);
        dump(dump_to, "quantize", g);
    }
    for (int i = 0; i < g->nodes.len; i++) {   // the loss over row chunks
        IrNode *n = &g->nodes.at[i];
        if (n->op != OP_CROSS_ENTROPY_BWD)
            continue;
        const IrTensor *lg = &g->tensors.at[n->in[0]];
        int64_t v = lg->shape[lg->ndim - 1], rows = ir_tensor_elems(lg) / v;
        int64_t chunk = LOSS_CHUNK_BYTES / (v * 4);
        n->attr.chunk_rows = chunk >= 1 && chunk < rows ? chunk : chunk < 1 ? 1 : 0;
    }
    int layers = ir_layers(g);
    if (layers > 0 && (c->per_layer || c->policy != REMAT_KEEP || c->rest != REMAT_KEEP)) {
        RematPolicy *pol = arena_alloc(a, sizeof(RematPolicy) * (size_t)layers);
        for (int l = 0; l < layers; l++)
            pol[l] = c->per_layer ? c->per_layer[l] : l < c->n_policy ? c->policy : c->rest;
        remat_apply(g, pol, layers, &bs->remat);
        dump(dump_to, "remat", g);
    }
    offload_apply(g, &c->offload, &bs->offload);
    schedule_apply(g, &bs->schedule);
    liveness_apply(g, true);
    alloc_apply(g, &bs->alloc);
    dump(dump_to, "alloc", g);
    return g;
}

// The device bytes live at the peak node, by category (for reports).
static void peak_breakdown(const IrGraph *g, int at, int64_t *live) {
    memset(live, 0, sizeof(int64_t) * MEM_COUNT);
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (t->alias_of >= 0 || t->arena != 0 || t->first > at || t->last < at)
            continue;
        if (t->reuse >= 0 && t->first == at)   // written in place: its input still counts
            continue;
        live[t->cat] += ir_tensor_bytes(t);
    }
}

typedef FePlanCtx Ctx;

int fe_plan_choice(void *vctx, const PlanChoice *c, PlanOutcome *out) {
    Ctx *x = vctx;
    Arena *a = arena_new();
    BuildStats bs;
    IrGraph *g = fe_build(x->src, &x->m, c, a, &bs, NULL);
    if (!g) {
        arena_free(a);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->device_bytes = bs.alloc.arena_bytes + x->gpu->reserve_bytes;
    out->host_bytes = bs.alloc.host_bytes;
    out->cost = cost_step(g, &x->cm, x->m.train.batch / c->micro, x->m.train.batch * x->m.train.seq);
    out->remat = bs.remat;
    peak_breakdown(g, bs.alloc.lower_bound_at, out->live);
    out->live[MEM_RESERVE] = x->gpu->reserve_bytes;
    ir_graph_free(g);
    arena_free(a);
    return 0;
}

static const char *gib(char *buf, int64_t b) {
    if (b >= (1LL << 30) || b == 0)
        sprintf(buf, "%.2f GiB", (double)b / 0x1p30);
    else if (b >= (1LL << 20))
        sprintf(buf, "%.1f MiB", (double)b / 0x1p20);
    else
        sprintf(buf, "%.1f KiB", (double)b / 0x1p10);
    return buf;
}

static void candidates_table(FILE *f, const PlannerResult *r, int nlayers) {
    fprintf(f, "  %-70s %11s %11s %9s %6s %s\n", "candidate", "device", "host", "step", "MFU", "fits");
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        char d[128], a[32], b[32];
        planner_choice_str(d, sizeof d, &c->c, nlayers);
        fprintf(f, "  %-70s %11s %11s %8.2fs %5.1f%% %s%s\n", d, gib(a, c->o.device_bytes),
                gib(b, c->o.host_bytes), c->o.cost.step_us * 1e-6, c->o.cost.mfu * 100,
                c->fits ? "yes" : "no", i == r->best ? "  <- chosen" : "");
    }
}

static void decision(FILE *f, const Candidate *c, const FtModel *m, const GpuPreset *gpu,
                     int64_t budget, int nlayers) {
    char a[32], b[32], d[160];
    planner_choice_str(d, sizeof d, &c->c, nlayers);
    int64_t accum = m->train.batch / c->c.micro;
    fprintf(f, "plan: %s\n", d);
    fprintf(f, "  global batch %lld = micro-batch %lld x %lld accumulation steps, seq %lld\n",
            (long long)m->train.batch, (long long)c->c.micro, (long long)accum, (long long)m->train.seq);
    fprintf(f, "  device %s of %s budget (%s, context reserve included); host %s\n",
            gib(a, c->o.device_bytes), gib(b, budget), gpu->name, gib(d, c->o.host_bytes));
    fprintf(f, "  at the peak:");
    for (int k = 0; k < MEM_COUNT; k++)
        if (c->o.live[k])
            fprintf(f, " %s %s;", mem_category_name((MemCategory)k), gib(a, c->o.live[k]));
    fprintf(f, "\n");
    if (c->c.offload.optimizer)
        fprintf(f, "  on the host: AdamW moments and fp32 master weights%s; AdamW runs on the CPU\n",
                c->c.offload.grads ? ", and the gradients (streamed as backward makes them)" : "");
    const StepCost *k = &c->o.cost;
    fprintf(f, "  estimated step %.2f s (micro-step %.0f ms x %lld + optimizer %.0f ms), %.0f tokens/s, "
               "MFU %.1f%%, recompute %.1f%% of the step\n",
            k->step_us * 1e-6, k->micro_us * 1e-3, (long long)accum, k->opt_us * 1e-3, k->tokens_per_s,
            k->mfu * 100, k->step_us > 0 ? 100 * k->recompute_us / k->step_us : 0.0);
}

// What user-side changes would need, when nothing fits.
static void suggestions(FILE *f, Ctx *x, const PlannerInput *pin, int64_t budget) {
    char a[32];
    const PlanChoice frugal = {1, REMAT_SWAP, 1 << 30, REMAT_SWAP, {true, true}, NULL};
    fprintf(f, "what would fit (each alone, with the most frugal plan: micro-batch 1, full recompute "
               "with block inputs swapped out, everything offloadable on the host):\n");
    // LoRA on the attention's q and v projections, as the field usually starts.
    bool has_qv = false;
    {
        Arena *ar = arena_new();
        IrGraph *g = fe_elaborate(x->src, &x->m, 1, ar);
        int q = 0, v = 0;
        for (int i = 0; g && i < g->tensors.len; i++) {
            const char *hf = g->tensors.at[i].hf_name;
            q += hf && strstr(hf, ".q_proj.weight") != NULL;
            v += hf && strstr(hf, ".v_proj.weight") != NULL;
        }
        has_qv = q && v;
        if (g)
            ir_graph_free(g);
        arena_free(ar);
    }
    // The bf16 weights stay on the device: when they alone exceed the budget, neither
    // LoRA nor a shorter sequence can help; only a smaller base (NF4) can.
    bool weights_too_big = pin->weights_bytes + pin->reserve_bytes > budget;
    if (weights_too_big)
        fprintf(f, "  the bf16 weights alone take %s: LoRA alone or a shorter sequence cannot help\n",
                gib(a, pin->weights_bytes));
    if (!x->m.train.lora && has_qv && !weights_too_big) {
        Ctx y = *x;
        static LoraTarget targets[2];
        targets[0] = (LoraTarget){"q_proj", {0}};
        targets[1] = (LoraTarget){"v_proj", {0}};
        y.m.train.lora = true;
        y.m.train.lora_r = 8, y.m.train.lora_alpha = 16, y.m.train.lora_dropout = 0;
        y.m.train.lora_targets = targets, y.m.train.n_lora_targets = 2;
        PlanOutcome o;
        if (fe_plan_choice(&y, &frugal, &o) == 0)
            fprintf(f, "  with lora(r = 8, targets = [q_proj, v_proj]): %s on the device (%s)\n",
                    gib(a, o.device_bytes), o.device_bytes <= budget ? "fits" : "still too much");
    }
    // QLoRA: the same adapters on a base whose block weights are NF4 with double quantisation.
    if (!x->m.train.quantize && has_qv) {
        Ctx y = *x;
        static LoraTarget targets[2];
        targets[0] = (LoraTarget){"q_proj", {0}};
        targets[1] = (LoraTarget){"v_proj", {0}};
        if (!y.m.train.lora) {
            y.m.train.lora = true;
            y.m.train.lora_r = 8, y.m.train.lora_alpha = 16, y.m.train.lora_dropout = 0;
            y.m.train.lora_targets = targets, y.m.train.n_lora_targets = 2;
        }
        y.m.train.quantize = y.m.train.double_quant = true;
        PlanOutcome o;
        if (fe_plan_choice(&y, &frugal, &o) == 0)
            fprintf(f, "  with lora(r = 8, targets = [q_proj, v_proj]) and quantize(nf4, double_quant = true): "
                       "%s on the device (%s)\n",
                    gib(a, o.device_bytes), o.device_bytes <= budget ? "fits" : "still too much");
    }
    // Shorter sequences.
    for (int64_t s = x->m.train.seq / 2; s >= 64 && !weights_too_big; s /= 2) {
        Ctx y = *x;
        y.m.train.seq = s;
        PlanOutcome o;
        if (fe_plan_choice(&y, &frugal, &o) == 0 && o.device_bytes <= budget) {
            fprintf(f, "  with seq = %lld (instead of %lld): %s on the device\n", (long long)s,
                    (long long)x->m.train.seq, gib(a, o.device_bytes));
            break;
        }
    }
    fprintf(f, "  a smaller global batch changes only the accumulation at micro-batch 1, not the memory\n");
}

static double measure_host_adamw(void) {
    // The host AdamW rate, measured once: a plain fp32 AdamW loop over 1M parameters.
    enum { N = 1 << 20 };
    static float p[N], g[N], m[N], v[N];
    for (int i = 0; i < N; i++)
        p[i] = 1e-3f * (float)(i % 97), g[i] = 1e-4f * (float)(i % 89), m[i] = v[i] = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < N; i++) {
            m[i] = 0.9f * m[i] + 0.1f * g[i];
            v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
            p[i] -= 1e-3f * (m[i] / (sqrtf(v[i]) + 1e-8f) + 0.01f * p[i]);
        }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return s > 0 ? 3.0 * N / s : 1e9;
}

int fe_compile_plan(FtSource *src, const FtModel *m, const GpuPreset *gpu, const CompileOptions *o,
                    FILE *out, FILE *report, PlanChoice *chosen) {
    Ctx x = {.src = src, .m = *m, .gpu = gpu};
    x.cm = (CostModel){gpu, measure_host_adamw()};
    PlannerInput pin = {.global_batch = m->train.batch, .budget_bytes = o->budget_bytes,
                        .host_budget_bytes = o->host_bytes, .reserve_bytes = gpu->reserve_bytes,
                        .weights_bytes = o->states.bytes[MEM_WEIGHTS],
                        .grads_bytes = o->states.bytes[MEM_GRADS],
                        .states_bytes = o->states.bytes[MEM_OPTIMIZER] + o->states.bytes[MEM_MASTER],
                        .build = fe_plan_choice, .ctx = &x, .nlayers = o->nlayers, .micro = o->micro,
                        .remat = o->remat, .offload = o->offload};
    PlannerResult r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    planner_search(&pin, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    char a[32];
    FILE *sinks[2] = {out, report};
    for (int s = 0; s < 2; s++) {
        FILE *f = sinks[s];
        if (!f)
            continue;
        fprintf(f, "\nplanner: %d candidates planned in %.0f ms (host AdamW measured at %.0f M params/s)\n",
                r.tried.len, ms, x.cm.host_adam_params_per_s / 1e6);
        if (r.best >= 0)
            decision(f, &r.tried.at[r.best], m, gpu, o->budget_bytes, o->nlayers);
        if (r.tried.len)
            candidates_table(f, &r, o->nlayers);
    }
    int rc = 0;
    if (r.best >= 0) {
        *chosen = r.tried.at[r.best].c;
    } else {
        rc = -1;
        fprintf(out, "\nnothing fits %s", gib(a, o->budget_bytes));
        if (r.smallest >= 0) {
            const Candidate *c = &r.tried.at[r.smallest];
            char d[160];
            planner_choice_str(d, sizeof d, &c->c, o->nlayers);
            fprintf(out, ": the smallest plan needs %s on the device (%s)", gib(a, c->o.device_bytes), d);
            if (c->o.device_bytes <= o->budget_bytes)
                fprintf(out, ", which fits, but %s of host memory, more than the %s of --host-mem "
                             "(default: this machine's RAM; give the training machine's)",
                        gib(a, c->o.host_bytes), gib(d, o->host_bytes));
            fprintf(out, "\n  at its peak:");
            for (int k = 0; k < MEM_COUNT; k++)
                if (c->o.live[k])
                    fprintf(out, " %s %s;", mem_category_name((MemCategory)k), gib(a, c->o.live[k]));
            fprintf(out, "\n");
        } else {
            fprintf(out, ": the bf16 weights alone take %s, and ftc keeps them on the device\n",
                    gib(a, pin.weights_bytes));
        }
        suggestions(out, &x, &pin, o->budget_bytes);
    }
    vec_free(&r.tried);
    return rc;
}
