// compile.c — ftc compile: counts and the naive step, the planner's search and its
// report (or why nothing fits and what would), the chosen plan built through every pass,
// and the plan directory. The passes run in passes/pipeline.c; this file hands them the
// elaboration (the only part of the pipeline that reads the .ft) and prints.
#include "driver.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

// The loss's chunks of logits take this many bytes at most, unless the planner finds a
// larger chunk faster (or --loss-chunk fixes one).
enum { LOSS_CHUNK_BYTES = 64 << 20 };

// The IR verifier between passes: in debug builds, and in tests (FTC_VERIFY_PASSES=1).
#ifdef NDEBUG
#define VERIFY_PASSES (getenv("FTC_VERIFY_PASSES") != NULL)
#else
#define VERIFY_PASSES true
#endif

void usage_compile(FILE *f) {
    int n;
    const GpuPreset *p = gpu_presets(&n);
    fputs("usage: ftc compile FILE.ft [--budget SIZE] [--gpu PRESET] [--host-mem SIZE] [-o DIR]\n"
          "                   [--micro-batch N] [--remat P] [--offload L] [--update W] [--dump-ir]\n"
          "                   [--dump-after PASS] [--emit-graph FILE.json] [--time-passes] [--exhaustive]\n"
          "                   [--no-fusion] [--unfused-loss] [--grad-temporaries] [--loss-chunk N]\n"
          "                   [--reserve SIZE] [--host-cores N] [--host-adamw RATE] [--host-link GBPS]\n"
          "                   [--ranks N [--zero 0|1|2|3] [--link PRESET]]\n"
          "\n"
          "  --budget SIZE     device memory the step must fit (default, and at most: the card's\n"
          "                    memory as it reports it, the preset's)\n"
          "  --host-mem SIZE   host memory for offloaded state (default: this machine's RAM)\n"
          "  --gpu PRESET      GPU preset (default a100-40g):",
          f);
    for (int i = 0; i < n; i++)
        fprintf(f, " %s", p[i].name);
    fputs("\n"
          "  --reserve SIZE    the card's memory no plan can have (default: the preset's: what\n"
          "                    the driver keeps below the card's total, 512M for the context,\n"
          "                    64M for the kernels and cuBLASLt; a100-40g 1197M)\n"
          "The training host, for the cost model (defaults: a typical training server):\n"
          "  --host-cores N    threads the CPU AdamW runs on (default 32)\n"
          "  --host-adamw RATE fp32 AdamW parameters per second per core, every core busy\n"
          "                    (default 200M; k, M, G multiply by 10^3, 10^6, 10^9)\n"
          "  --host-link GBPS  host-device link, GB/s each way (default: the preset's)\n"
          "  -o DIR            the plan directory to write (default: NAME.plan, NAME the file's stem)\n"
          "  --dump-ir         print the IR after each pass of the chosen plan\n"
          "  --dump-after PASS print the IR after one pass of the chosen plan: elaborate, lora,\n"
          "                    fuse_loss, autodiff, quantize, chunk_loss, remat, eval, shard,\n"
          "                    offload, fuse, early_update, schedule, buckets, liveness, alloc or\n"
          "                    streams\n"
          "  --emit-graph F    write the training graph (FLOPs, bytes, edges) as JSON to F\n"
          "  --time-passes     print the time spent in each pass, over every candidate planned\n"
          "  --exhaustive      place every candidate and skip no search by its bound (slower: the\n"
          "                    reference the bound-first search must match)\n"
          "  --no-fusion       give every op a kernel of its own (the fuse pass does nothing)\n"
          "  --unfused-loss    keep the projection to the logits and the loss two ops (the full\n"
          "                    logits exist; the loss's backward still works in row chunks)\n"
          "  --grad-temporaries  each weight gradient's GEMM writes a temporary that an acc adds\n"
          "                    into the gradient (the plan without beta = 1, for comparison)\n"
          "  --ranks N         plan one rank of a data-parallel job of N (one process a GPU, started\n"
          "                    with mpirun -np N or srun -n N): the global batch splits over the\n"
          "                    ranks, the ZeRO stage shards optimizer state (1), gradients (2) and\n"
          "                    parameters (3) across them, collectives run on a stream of their own\n"
          "  --link PRESET     the link between ranks, for the collectives' time: nvlink (default\n"
          "                    up to 8 ranks, one node), pcie, ib (default beyond 8)\n"
          "The planner chooses these; each fixes one:\n"
          "  --micro-batch N   sequences per micro-batch (the rest of the global batch accumulates)\n"
          "  --remat P         keep, selective, full (recompute from the block's input), swap\n"
          "                    (full, with the block's input waiting in host memory) in every block,\n"
          "                    or tensors:K (every block keeps K of its tensors, the rest recomputed:\n"
          "                    the first K along the planner's chain, which drops one at a time) or\n"
          "                    tensors:KxN+J (the first N blocks K, the later ones J): the report's\n"
          "                    \"tensors (K of M kept a block xN + J xR)\" as it chose them\n"
          "  --offload L       none, optimizer (moments and master weights on the host, CPU AdamW),\n"
          "                    grads (the gradients too; with several ranks, from --zero 2) or\n"
          "                    weights (the weight matrices too: LoRA's frozen bases, else all;\n"
          "                    each streamed to the device a block ahead of its use; one rank)\n"
          "  --update W        step (every update after the whole backward) or backward (each\n"
          "                    parameter's update as soon as its gradient is complete, which then\n"
          "                    dies: one micro-step, no clip, no loss scale, one rank, offload none)\n"
          "  --zero Z          with --ranks: the ZeRO stage, 0 (data parallel) to 3\n"
          "  --loss-chunk N    rows of logits the fused loss forms at a time (a divisor of\n"
          "                    micro-batch x seq; the largest at most N)\n"
          "Exit status 1 when nothing fits: the smallest plan and what would fit are printed.\n",
          f);
}


static const char *precision_name(const TrainSpec *t) {
    bool q8 = t->optimizer == OPTIM_ADAMW8BIT;   // (its moments are the optimizer's line)
    switch (t->precision) {
    case PREC_BF16: return t->master_weights ? q8 ? "bf16 mixed (fp32 master weights)"
                                                  : "bf16 mixed (fp32 master weights and optimizer state)"
                         : q8 ? "bf16 weights, no master copy" : "bf16 weights, fp32 optimizer state, no master copy";
    case PREC_FP16: return t->master_weights ? q8 ? "fp16 mixed (fp32 master weights)"
                                                  : "fp16 mixed (fp32 master weights and optimizer state)"
                         : q8 ? "fp16 weights, no master copy" : "fp16 weights, fp32 optimizer state, no master copy";
    case PREC_FP32: return "fp32";
    default: return t->master_weights || !fe_adam_like(t->optimizer) ? "pure bf16"
                    : t->kahan ? "pure bf16, Kahan-compensated updates (kahan = true: 2 bytes a parameter)"
                               : "pure bf16, updates not Kahan-compensated (kahan = false)";
    }
}

// --remat tensors:K or tensors:KxN+J into kept[] (K, N, J; -1 where absent): whole numbers,
// N at least 1. Whether it reads so.
static bool tensors_spec(const char *s, int kept[3]) {
    char *end;
    errno = 0;
    long k = strtol(s, &end, 10), n = -1, j = -1;
    if (end == s || errno || k < 0 || k > 1 << 20)
        return false;
    if (*end == 'x') {
        const char *at = end + 1;
        n = strtol(at, &end, 10);
        if (end == at || *end != '+' || n < 1 || n > 1 << 20)
            return false;
        at = end + 1;
        j = strtol(at, &end, 10);
        if (end == at || j < 0 || j > 1 << 20)
            return false;
    }
    if (*end)
        return false;
    kept[0] = (int)k, kept[1] = (int)n, kept[2] = (int)j;
    return true;
}

// Why every gradient of the step must be complete before the first update (so the
// updates cannot run inside backward), or NULL when nothing asks that: with `ranks`,
// the micro-batch (0: the planner's) and the offload level (-1: the planner's) asked for.
static const char *whole_step_grads(const FtModel *m, int64_t ranks, int64_t micro, int offload) {
    const TrainSpec *t = &m->train;
    if (ranks > 1)
        return "with several ranks a gradient is complete only after its reduction over them";
    if (t->clip > 0)
        return "clipping (clip) scales every update by the norm of all the gradients";
    if (t->precision == PREC_FP16)
        return "fp16's loss scale skips the step when any gradient overflows";
    if (micro && micro < t->batch)
        return "with accumulation a gradient is complete only after the last micro-step";
    if (offload > 0)
        return "the updates run on the host (--offload) after the gradients are copied there";
    return NULL;
}

// Prints the counts and the naive memory breakdown for `g` to `out`.
static void report_compile(FILE *out, const char *path, const FtModel *m, const IrGraph *g,
                           const GpuPreset *gpu, int64_t budget) {
    char a[32], b[32], c[32];
    ParamCount pc = count_params(g);
    MemBreakdown mb = count_naive_memory(g, gpu->reserve_bytes);
    const TrainSpec *t = &m->train;
    fprintf(out, "ftc: %s: model %s, seq %lld, global batch %lld, micro-batch %lld, %s, %s%s\n",
            path, m->name, (long long)t->seq, (long long)t->batch, (long long)g->batch,
            precision_name(t), fe_optimizer_name(t->optimizer),
            t->optimizer != OPTIM_ADAMW8BIT ? "" : " (8-bit moments, an fp32 absmax per 256)");
    if (t->lora)
        fprintf(out, "lora: r=%lld alpha=%g dropout=%g on %d target%s\n", (long long)t->lora_r,
                t->lora_alpha, t->lora_dropout, t->n_lora_targets, t->n_lora_targets == 1 ? "" : "s");
    fprintf(out, "\nparameters: %s in %lld tensors\n", commas(a, pc.total), (long long)pc.tensors);
    fprintf(out, "trainable params: %s || all params: %s || trainable%%: %.4f\n",
            commas(a, pc.trainable), commas(b, pc.total),
            pc.total ? 100.0 * (double)pc.trainable / (double)pc.total : 0.0);

    fprintf(out, "\nmemory of one step with no technique applied (micro-batch %lld x seq %lld):\n",
            (long long)g->batch, (long long)g->seq);
    fprintf(out, "  %-12s %22s %12s %12s\n", "category", "bytes", "GiB", "GB");
    static const MemCategory order[] = {MEM_WEIGHTS, MEM_GRADS, MEM_OPTIMIZER, MEM_MASTER,
                                        MEM_ACTIVATIONS, MEM_COUNT, MEM_IO, MEM_RESERVE};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        // MEM_COUNT marks the logits row: the logits and the loss's fp32 gradient
        int64_t v = order[i] == MEM_COUNT ? mb.logits_bytes : mb.bytes[order[i]];
        const char *name = order[i] == MEM_COUNT ? "logits" : mem_category_name(order[i]);
        fprintf(out, "  %-12s %22s %12.2f %12.2f\n", name, commas(a, v), (double)v / 0x1p30,
                (double)v / 1e9);
    }
    fprintf(out, "  %-12s %22s %12.2f %12.2f\n", "total", commas(a, mb.total),
            (double)mb.total / 0x1p30, (double)mb.total / 1e9);

    int64_t states = mb.bytes[MEM_WEIGHTS] + mb.bytes[MEM_GRADS] + mb.bytes[MEM_OPTIMIZER] +
                     mb.bytes[MEM_MASTER];
    fprintf(out, "\nmodel states (weights + grads + optimizer + master): %s bytes = %.2f GB, "
                 "%.2f bytes/param\n",
            commas(a, states), (double)states / 1e9, pc.total ? (double)states / (double)pc.total : 0.0);
    if (mb.total <= budget)
        fprintf(out, "budget %s bytes = %s (%s): fits, %s to spare\n", commas(b, budget),
                fmt_bytes(a, sizeof a, budget), gpu->name, fmt_bytes(c, sizeof c, budget - mb.total));
    else
        fprintf(out, "budget %s bytes = %s (%s): does not fit with no technique applied "
                     "(needs %s, %.1fx the budget)\n",
                commas(b, budget), fmt_bytes(a, sizeof a, budget), gpu->name,
                fmt_bytes(c, sizeof c, mb.total), (double)mb.total / (double)budget);
}

// The model states of each precision regime (the train section's optimizer, LoRA and
// quantisation kept): the graph elaborated as that regime, through quantize, counted as
// the naive step counts them (count_naive_memory). Bytes per parameter of the whole
// model, split by category; the train section's own regime marked. With AdamW, a last
// row for the section's precision with the other AdamW: adamw8bit's 8-bit moments, or
// adamw's 32-bit ones.
static void report_modes(FILE *out, FtSource *src, const FtModel *m) {
    typedef struct { const char *name; Precision p; bool master; int kahan; } Mode;
    static const Mode modes[] = {
        {"fp32", PREC_FP32, false, -1},
        {"bf16 mixed (fp32 master)", PREC_BF16, true, -1},
        {"fp16 mixed (fp32 master, loss scale)", PREC_FP16, true, -1},
        {"bf16 without a master", PREC_BF16, false, -1},
        {"bf16_pure (Kahan-compensated)", PREC_BF16_PURE, false, 1},
        {"bf16_pure, kahan = false", PREC_BF16_PURE, false, 0},
    };
    const char *opt = fe_optimizer_name(m->train.optimizer);
    bool adam = fe_adam_like(m->train.optimizer);
    OptimizerKind other = m->train.optimizer == OPTIM_ADAMW ? OPTIM_ADAMW8BIT : OPTIM_ADAMW;
    int nmodes = (int)(sizeof modes / sizeof modes[0]);
    fprintf(out, "\nmodel states per parameter by precision (%s; weights + grads + optimizer + master):\n", opt);
    for (int i = 0; i < nmodes + adam; i++) {
        FtModel mm = *m;
        TrainSpec *t = &mm.train;
        const Mode *md = &modes[i % nmodes];
        char name[96];
        if (i < nmodes) {
            snprintf(name, sizeof name, "%s", md->name);
        } else {   // the section's own precision, the other AdamW
            for (int k = 0; k < nmodes; k++)
                if (modes[k].p == m->train.precision && modes[k].master == m->train.master_weights &&
                    (modes[k].kahan < 0 || (modes[k].kahan != 0) == (m->train.kahan != 0)))
                    md = &modes[k];
            t->optimizer = other;
            snprintf(name, sizeof name, "%s, %s", md->name, fe_optimizer_name(other));
        }
        t->precision = md->p;
        t->master_weights = md->master;
        t->kahan = md->kahan;
        t->optim_dtype = md->p == PREC_BF16_PURE ? DT_BF16 : DT_F32;
        DriverSource ds = {src, &mm};
        Arena *a = arena_new();
        Pipeline pipe = driver_pipeline(&ds, a, NULL);
        pipe.verify = false;
        pipe.stop_after = m->train.quantize ? "quantize" : "lora";
        PlanChoice one = {.micro = 1, .policy = REMAT_KEEP, .rest = REMAT_KEEP};
        BuildStats bs;
        IrGraph *g = pipeline_build(&pipe, &one, a, &bs);
        if (g) {
            MemBreakdown mb = count_naive_memory(g, 0);
            double n = (double)count_params(g).total;
            int64_t st = mb.bytes[MEM_WEIGHTS] + mb.bytes[MEM_GRADS] + mb.bytes[MEM_OPTIMIZER] +
                         mb.bytes[MEM_MASTER];
            bool ours = i < nmodes && m->train.precision == md->p && m->train.master_weights == md->master &&
                        (md->kahan < 0 || (md->kahan != 0) == (m->train.kahan != 0));
            fprintf(out, "  %-38s %6.2f = %.2f + %.2f + %.2f + %.2f  %9.2f GB%s\n", name,
                    (double)st / n, (double)mb.bytes[MEM_WEIGHTS] / n, (double)mb.bytes[MEM_GRADS] / n,
                    (double)mb.bytes[MEM_OPTIMIZER] / n, (double)mb.bytes[MEM_MASTER] / n,
                    (double)st / 1e9, ours ? "  <- this train section" : "");
            ir_graph_free(g);
        }
        arena_free(a);
    }
    fprintf(out, "  (fp16 AdamW without the master is refused; every mode adds the gradients' reduction: "
                 "16 bytes%s)\n", adam ? "; adamw8bit keeps 32-bit moments for tensors below min_8bit_size" : "");
}

// Pipeline.elaborate: the program at another micro-batch or sequence length. Planner
// threads call it at once: each call counts errors in a source of its own.
static IrGraph *elaborate(void *ctx, int64_t micro, int64_t seq, Arena *a) {
    const DriverSource *s = ctx;
    FtSource src = *s->src;
    FtModel m = *s->m;
    m.train.seq = seq;
    return fe_elaborate(&src, &m, micro, a);
}

static void pass_to_fe(void *ctx, SrcLoc loc, const char *msg) { fe_error(ctx, loc, "%s", msg); }

PassDiag driver_diag(FtSource *src) { return (PassDiag){pass_to_fe, src, 0}; }

// What the train section asks of the pipeline.
static PipelineSpec spec_of(const FtModel *m, Arena *a) {
    const TrainSpec *t = &m->train;
    PipelineSpec s = {.global_batch = t->batch, .seq = t->seq, .lora = t->lora,
                      .quantize = t->quantize, .double_quant = t->double_quant,
                      .fused_loss = true, .loss_chunk_bytes = LOSS_CHUNK_BYTES};
    if (t->lora) {
        const char **names = arena_alloc(a, sizeof(char *) * (size_t)(t->n_lora_targets + 1));
        SrcLoc *locs = arena_alloc(a, sizeof(SrcLoc) * (size_t)(t->n_lora_targets + 1));
        for (int i = 0; i < t->n_lora_targets; i++)
            names[i] = t->lora_targets[i].name, locs[i] = t->lora_targets[i].loc;
        s.lora_spec = (LoraSpec){t->lora_r, t->lora_alpha, t->lora_dropout, t->n_lora_targets,
                                 names, locs};
    }
    return s;
}

Pipeline driver_pipeline(DriverSource *ds, Arena *a, PassDiag *diag) {
    return (Pipeline){.elaborate = elaborate, .ctx = ds, .spec = spec_of(ds->m, a), .diag = diag,
                      .verify = VERIFY_PASSES};
}

void driver_meta_train(PlanMeta *meta, const TrainSpec *t) {
    static const char *const prec[] = {"bf16", "fp16", "fp32", "bf16_pure"};
    static const char *const sched[] = {"constant", "linear", "cosine"};
    meta->precision = prec[t->precision];
    meta->optimizer = fe_optimizer_name(t->optimizer);
    meta->lr = t->lr, meta->beta1 = t->beta1, meta->beta2 = t->beta2, meta->eps = t->eps;
    meta->weight_decay = t->weight_decay;
    meta->lr_schedule = sched[t->lr_schedule];
    meta->warmup_steps = t->warmup_steps, meta->steps = t->steps, meta->min_lr = t->min_lr;
    if (t->precision == PREC_FP16) {
        meta->scale_init = t->scale_init, meta->scale_growth = t->scale_growth;
        meta->scale_backoff = t->scale_backoff, meta->scale_interval = t->scale_interval;
    }
}

// The module names the adapters attach to ("q_proj,v_proj"), for adapter_config.json:
// PEFT names target modules by the checkpoint's module names.
static void adapter_modules(const IrGraph *g, char *targets, size_t cap) {
    for (int i = 0; i < g->tensors.len; i++) {
        const char *hf = g->tensors.at[i].hf_name, *a = hf ? strstr(hf, ".lora_A.weight") : NULL;
        if (!a)
            continue;
        const char *s0 = a;
        while (s0 > hf && s0[-1] != '.')
            s0--;
        char mod[128];
        snprintf(mod, sizeof mod, "%.*s", (int)(a - s0), s0);
        bool seen = false;
        for (char *t = strstr(targets, mod); t; t = strstr(t + 1, mod))
            seen |= (t == targets || t[-1] == ',') && (t[strlen(mod)] == ',' || !t[strlen(mod)]);
        if (!seen)
            snprintf(targets + strlen(targets), cap - strlen(targets), "%s%s", targets[0] ? "," : "",
                     mod);
    }
}

#define SIZE(b) fmt_bytes((char[32]){0}, 32, (b))

static void candidates_table(FILE *f, const PlannerResult *r, int nlayers) {
    // (a data-parallel choice also names its stage and buckets)
    int w = r->tried.len && r->tried.at[0].c.bucket_bytes ? 100 : 70;
    fprintf(f, "  %-*s %11s %11s %9s %6s %s\n", w, "candidate", "device", "host", "step", "MFU", "fits");
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        char d[160];
        planner_choice_str(d, sizeof d, &c->c, nlayers);
        char dev[40], hst[40];   // not placed: the bounds
        snprintf(dev, sizeof dev, "%s%s", c->o.placed ? "" : ">=", SIZE(c->o.device_bytes));
        snprintf(hst, sizeof hst, "%s%s", c->o.placed ? "" : ">=", SIZE(c->o.host_bytes));
        fprintf(f, "  %-*s %11s %11s %8.2fs %5.1f%% %s%s\n", w, d, dev, hst, c->o.cost.step_us * 1e-6,
                c->o.cost.mfu * 100, c->fits ? "yes" : c->slower ? "slower" : "no",
                i == r->best ? "  <- chosen" : "");
    }
    fprintf(f, "  (device and host: the first placement that fits, the chosen plan's the smallest; >=: not "
               "placed, the liveness bound; slower: no faster than a plan that fits, so not placed%s)\n",
            r->bound_pruned ? "; searches skipped by their bound are not listed" : "");
}

static void peak_line(FILE *f, const int64_t *live, bool its) {
    fprintf(f, "  at %s peak:", its ? "its" : "the");
    for (int k = 0; k < MEM_COUNT; k++)
        if (live[k])
            fprintf(f, " %s %s;", mem_category_name((MemCategory)k), SIZE(live[k]));
    fprintf(f, "\n");
}

static void decision(FILE *f, const Candidate *c, const FtModel *m, const PlanCtx *pc,
                     const PlannerInput *pin) {
    char d[200];
    const GpuPreset *gpu = pc->gpu;
    int64_t budget = pin->budget_bytes, ranks = pin->ranks > 1 ? pin->ranks : 1;
    planner_choice_str(d, sizeof d, &c->c, pin->nlayers);
    int64_t accum = m->train.batch / (c->c.micro * ranks);
    fprintf(f, "plan: %s\n", d);
    if (ranks > 1) {
        static const char *const what[] = {
            "every rank holds the whole model states; gradients all-reduced on the last micro-step",
            "AdamW moments and master weights sharded; gradients reduce-scattered on the last "
            "micro-step, weights all-gathered after the update",
            "AdamW moments, master weights and gradients sharded; gradients reduce-scattered every "
            "micro-step, weights all-gathered after the update",
            "AdamW moments, master weights, gradients and weights sharded; weights all-gathered "
            "before their layers in forward and backward, gradients reduce-scattered every micro-step"};
        fprintf(f, "  global batch %lld = micro-batch %lld x %lld accumulation steps x %lld ranks, seq %lld\n",
                (long long)m->train.batch, (long long)c->c.micro, (long long)accum, (long long)ranks,
                (long long)m->train.seq);
        fprintf(f, "  ZeRO-%d: %s\n", c->c.zero, what[c->c.zero]);
        fprintf(f, "  per rank: device %s of %s budget (%s, context reserve included); host %s\n",
                SIZE(c->o.device_bytes), SIZE(budget), gpu->name, SIZE(c->o.host_bytes));
    } else {
        fprintf(f, "  global batch %lld = micro-batch %lld x %lld accumulation steps, seq %lld\n",
                (long long)m->train.batch, (long long)c->c.micro, (long long)accum, (long long)m->train.seq);
        fprintf(f, "  device %s of %s budget (%s, context reserve included); host %s\n",
                SIZE(c->o.device_bytes), SIZE(budget), gpu->name, SIZE(c->o.host_bytes));
    }
    peak_line(f, c->o.live, false);
    if (c->o.loss_chunk > 0)
        fprintf(f, "  the loss: linear and cross entropy fused, logits formed %lld rows at a time "
                   "(%lld chunks of the %lld rows), never whole\n",
                (long long)c->o.loss_chunk, (long long)(c->o.loss_rows / c->o.loss_chunk),
                (long long)c->o.loss_rows);
    if (c->c.early_update)
        fprintf(f, "  updates inside backward: each parameter's %s update runs as soon as its gradient is "
                   "complete, and the gradient dies there (%s of gradients never live at once); a step "
                   "whose gradients are not finite cannot be skipped (ftc run stops)\n",
                fe_optimizer_name(m->train.optimizer), SIZE(pin->grads_bytes));
    else if (accum == 1 && ranks == 1 && !c->c.offload.optimizer && m->train.clip > 0 &&
             m->train.precision != PREC_FP16)
        fprintf(f, "  the gradients (%s) live the whole step: clipping (clip = %g) scales every update by "
                   "the norm of all of them; without it each update could run inside backward and free "
                   "its gradient there\n",
                SIZE(pin->grads_bytes), m->train.clip);
    if (c->c.offload.optimizer)
        fprintf(f, "  on the host: AdamW moments and fp32 master weights%s; AdamW runs on the CPU\n",
                c->c.offload.weights ? ", the gradients (streamed as backward makes them) and the weight "
                                       "matrices (each copied to the device a block ahead of its use)"
                : c->c.offload.grads ? ", and the gradients (streamed as backward makes them)"
                                     : "");
    const StepCost *k = &c->o.cost;
    fprintf(f, "  estimated step %.2f s (micro-step %.0f ms x %lld + optimizer %.0f ms), %.0f tokens/s, "
               "MFU %.1f%%, recompute %.1f%% of the step; the device's time %.1f%% GEMMs, %.1f%% the "
               "rest\n",
            k->step_us * 1e-6, k->micro_us * 1e-3, (long long)accum, k->opt_us * 1e-3, k->tokens_per_s,
            k->mfu * 100, k->step_us > 0 ? 100 * k->recompute_us / k->step_us : 0.0,
            k->device_us > 0 ? 100 * k->gemm_us / k->device_us : 0.0,
            k->device_us > 0 ? 100 * (1 - k->gemm_us / k->device_us) : 0.0);
    if (ranks > 1)
        fprintf(f, "  collectives %.0f ms a step over %s (%s), %.0f ms of it not hidden behind compute: "
                   "%.1f%% of the step\n", k->comm_us * 1e-3, pc->cm.link->name, pc->cm.link->what,
                k->comm_exposed_us * 1e-3, k->step_us > 0 ? 100 * k->comm_exposed_us / k->step_us : 0.0);
}

// The weights a rank holds at the least: a shard of them where ZeRO-3 may shard them.
static int64_t rank_weights(const PlannerInput *pin) {
    bool shards = pin->ranks > 1 && (pin->zero < 0 || pin->zero == 3);
    return shards ? pin->weights_bytes / pin->ranks : pin->weights_bytes;
}

// A what-if plan's bytes, and whether it fits: "2.98 GiB on the device (fits)"; where
// the device has room and the host has not, the host's bytes too.
static void put_whatif(FILE *f, const WhatIfPlan *p, int64_t budget) {
    fprintf(f, "%s on the device", SIZE(p->device));
    if (p->fits)
        fputs(" (fits)\n", f);
    else if (p->device <= budget)
        fprintf(f, " and %s on the host (more than --host-mem)\n", SIZE(p->host));
    else
        fputs(" (still too much)\n", f);
}

// What user-side changes would need, when nothing fits.
static void suggestions(FILE *f, const PlanCtx *pc, const FtModel *m, const PlannerInput *pin) {
    WhatIf w;
    int64_t weights = rank_weights(pin);
    whatif_search(pc, pin->budget_bytes, pin->host_budget_bytes, weights, pin->offload, &w);
    int64_t budget = pin->budget_bytes;
    fprintf(f, "what would fit (each alone, with the most frugal plan: micro-batch 1, full recompute "
               "with block inputs swapped out, everything offloadable on the host%s):\n",
            pin->ranks > 1 ? ", everything sharded" : "");
    if (w.stream.device >= 0) {
        fputs("  with the weights streamed from the host (--offload weights): ", f);
        put_whatif(f, &w.stream, budget);
    }
    for (int change = WHATIF_ADAMW8BIT; change <= WHATIF_NO_KAHAN; change++) {
        WhatIfOptim q8;
        whatif_optimizer(pin, (WhatIfOptimChange)change, &q8);
        if (!q8.tried)
            continue;
        if (change == WHATIF_ADAMW8BIT)
            fprintf(f, "  with optimizer = adamw8bit(...) (its moments 8-bit: the optimizer state %s -> %s): ",
                    SIZE(q8.optimizer_bytes[0]), SIZE(q8.optimizer_bytes[1]));
        else
            fprintf(f, "  without Kahan summation (adamw(..., kahan = false): bf16 updates that round away "
                       "what falls below half a weight's ulp; the optimizer state %s -> %s): ",
                    SIZE(q8.optimizer_bytes[0]), SIZE(q8.optimizer_bytes[1]));
        if (q8.fits) {
            char d[160];
            planner_choice_str(d, sizeof d, &q8.plan.c, pin->nlayers);
            fprintf(f, "the planner's choice is %s, %s on the device and %s on the host (fits)\n", d,
                    SIZE(q8.plan.o.device_bytes),
                    SIZE(q8.plan.o.host_bytes));
        } else if (q8.planned) {
            fprintf(f, "the planner's smallest plan needs %s on the device and %s on the host (still too much)\n",
                    SIZE(q8.plan.o.device_bytes), SIZE(q8.plan.o.host_bytes));
        } else {
            fprintf(f, "the model states still need %s of host memory where they go (still too much)\n",
                    SIZE(q8.host_need));
        }
    }
    if (w.weights_too_big)
        fprintf(f, "  kept on the device, the bf16 weights alone take %s%s: LoRA alone or a shorter "
                   "sequence cannot help\n",
                SIZE(weights), pin->ranks > 1 ? " a rank" : "");
    if (w.lora.device >= 0) {
        fprintf(f, "  with lora(r = 8, targets = [%s, %s]): ", w.q_target, w.v_target);
        put_whatif(f, &w.lora, budget);
    }
    if (w.qlora.device >= 0) {
        fprintf(f, "  with lora(r = 8, targets = [%s, %s]) and quantize(nf4, double_quant = true): ",
                w.q_target, w.v_target);
        put_whatif(f, &w.qlora, budget);
    }
    if (w.seq) {
        fprintf(f, "  with seq = %lld (instead of %lld): ", (long long)w.seq, (long long)m->train.seq);
        put_whatif(f, &w.seq_plan, budget);
    }
    fprintf(f, "  a smaller global batch changes only the accumulation at micro-batch 1, not the memory\n");
}

// "between A and B UNIT", "of at least A UNIT", "of at most B UNIT".
static void range(FILE *f, double lo, double hi, const char *fmt, const char *unit) {
    char a[32], b[32];
    snprintf(a, sizeof a, fmt, lo);
    snprintf(b, sizeof b, fmt, hi);
    if (lo > 0 && isfinite(hi))
        fprintf(f, "between %s and %s %s", a, b, unit);
    else if (lo > 0)
        fprintf(f, "of at least %s %s", a, unit);
    else
        fprintf(f, "of at most %s %s", b, unit);
}

// The host rates over which the choice holds, when some other plan would win outside.
static void holds_line(FILE *f, const PlanHolds *h, const CostModel *cm) {
    bool adamw = h->adamw_lo > 0 || isfinite(h->adamw_hi), link = h->link_lo > 0 || isfinite(h->link_hi);
    if (!adamw && !link)
        return;
    fprintf(f, "  the choice holds for");
    if (adamw) {
        fprintf(f, " a host AdamW ");
        range(f, h->adamw_lo / 1e6, h->adamw_hi / 1e6, "%.0f", "M parameters/s");
        fprintf(f, " (assumed %.0f M)", cm->host_adamw_per_s / 1e6);
    }
    if (adamw && link)
        fprintf(f, " and");
    if (link) {
        fprintf(f, " a link ");
        range(f, h->link_lo / 1e9, h->link_hi / 1e9, "%.1f", "GB/s");
        fprintf(f, " (assumed %.1f)", cm->link_bytes_per_s / 1e9);
    }
    fprintf(f, "; ftc run warns outside\n");
}

// The eval phase's nodes, and into *peak the most device bytes live at one of them.
static int eval_phase_peak(const IrGraph *g, int64_t *peak) {
    int n = g->nodes.len, count = 0;
    int64_t *delta = calloc((size_t)n + 2, sizeof(int64_t)), live = 0;
    for (int t = 0; t < g->tensors.len; t++) {
        const IrTensor *x = &g->tensors.at[t];
        if (x->alias_of >= 0 || x->virt || x->arena != 0 || x->first < 0)
            continue;
        int from = x->first + (x->reuse >= 0);   // (written in place: its input still counts there)
        if (from > x->last)
            continue;
        delta[from] += ir_tensor_bytes(x);
        delta[x->last + 1] -= ir_tensor_bytes(x);
    }
    *peak = 0;
    for (int i = 0; i < n; i++) {
        live += delta[i];
        if (g->nodes.at[i].phase != PHASE_EVALUATION)
            continue;
        count++;
        if (live > *peak)
            *peak = live;
    }
    free(delta);
    return count;
}

// Time per stage over every build of this compile (the planner's candidates included).
static void print_times(FILE *f, const PassTimes *t) {
    int n;
    const char *const *names = pipeline_stages(&n);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += t->ns[i];
    fprintf(f, "\ntime per pass, summed over every build (CPU time across planner threads):\n");
    for (int i = 0; i < n; i++)
        if (t->runs[i])
            fprintf(f, "  %-11s %9.1f ms  %5.1f%%  %4lld runs\n", names[i], (double)t->ns[i] * 1e-6,
                    total ? 100.0 * (double)t->ns[i] / (double)total : 0.0, (long long)t->runs[i]);
    fprintf(f, "  %-11s %9.1f ms\n", "total", (double)total * 1e-6);
}

// Searches for the fastest plan that fits; prints the decision and the candidates to
// `out` and `report`. 0 with *chosen set, or -1 after printing why nothing fits and
// what would.
static int plan(FILE *out, FILE *report, const PlanCtx *pc, const PlannerInput *pin,
                const FtModel *m, const HostSpec *host, PlanChoice *chosen, PlanHolds *holds) {
    PlannerResult r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    planner_search(pin, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *holds = planner_holds(&r, pc->cm.host_adamw_per_s, pc->cm.link_bytes_per_s);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    FILE *sinks[2] = {out, report};
    for (int s = 0; s < 2; s++) {
        FILE *f = sinks[s];
        int placed = 0;
        for (int i = 0; i < r.tried.len; i++)
            placed += r.tried.at[i].o.placed;
        fprintf(f, "\nplanner: %d candidates priced, %d placed, %d searches skipped by their bound, in %.0f ms "
                   "(host: %d cores x %.0f M AdamW parameters/s, link %.1f GB/s)\n",
                r.tried.len, placed, r.bound_pruned, ms, host->cores, host->adamw_per_core / 1e6,
                pc->cm.link_bytes_per_s / 1e9);
        if (r.best >= 0)
            decision(f, &r.tried.at[r.best], m, pc, pin);
        if (r.best >= 0)
            holds_line(f, holds, &pc->cm);
        if (r.tried.len)
            candidates_table(f, &r, pin->nlayers);
    }
    int rc = 0;
    if (r.best >= 0) {
        *chosen = r.tried.at[r.best].c;
    } else {
        rc = -1;
        fprintf(out, "\nnothing fits %s", SIZE(pin->budget_bytes));
        if (r.smallest >= 0) {
            const Candidate *c = &r.tried.at[r.smallest];
            char d[160];
            planner_choice_str(d, sizeof d, &c->c, pin->nlayers);
            fprintf(out, ": the smallest plan needs %s on the device (%s)", SIZE(c->o.device_bytes), d);
            if (c->o.device_bytes <= pin->budget_bytes)
                fprintf(out, ", which fits, but %s of host memory%s, more than the %s of --host-mem "
                             "(%sdefault: this machine's RAM; give the training machine's)",
                        SIZE(c->o.host_bytes), pin->ranks > 1 ? " a rank" : "",
                        SIZE(pin->host_budget_bytes), pin->ranks > 1 ? "a rank's host memory; " : "");
            fprintf(out, "\n");
            peak_line(out, c->o.live, true);
        } else if (r.host_pruned) {
            fprintf(out, ": the model states need %s of host memory where they go, more than the %s "
                         "of --host-mem (default: this machine's RAM; give the training machine's)\n",
                    SIZE(r.host_need), SIZE(pin->host_budget_bytes));
        } else {
            fprintf(out, ": the bf16 weights alone take %s%s, and --offload keeps them on the device\n",
                    SIZE(rank_weights(pin)), pin->ranks > 1 ? " a rank" : "");
        }
        suggestions(out, pc, m, pin);
    }
    planner_result_free(&r);
    return rc;
}

int cmd_compile(Cmdline *cl, int argc, char **argv, int first) {
    const char *path = NULL, *gpu_name = "a100-40g", *outdir = NULL, *emit = NULL;
    int out_arg = -1;
    int path_arg = 0, gpu_arg = 0, remat = -1, offload = -1, update = -1, update_arg = -1, remat_arg = -1;
    int kept[3] = {-1, -1, -1};   // --remat tensors:KxN+J: K, N, J (-1: absent)
    int64_t budget = 0, host = 0, micro = 0, reserve = -1;
    HostSpec hs = host_default();
    int zero = -1, ranks_arg = -1, zero_arg = -1, offload_arg = -1, link_arg = -1;
    int64_t ranks = 1;
    const char *link_name = NULL;
    const char *dump_after = NULL;
    bool time_passes = false, no_fusion = false, unfused_loss = false, grad_temporaries = false, exhaustive = false;
    int64_t loss_chunk = 0;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage_compile(stdout);
            return 0;
        }
        bool takes = !strcmp(s, "--budget") || !strcmp(s, "--gpu") || !strcmp(s, "--micro-batch") ||
                     !strcmp(s, "-o") || !strcmp(s, "--remat") || !strcmp(s, "--offload") ||
                     !strcmp(s, "--host-mem") || !strcmp(s, "--emit-graph") ||
                     !strcmp(s, "--dump-after") || !strcmp(s, "--reserve") ||
                     !strcmp(s, "--host-cores") || !strcmp(s, "--host-adamw") ||
                     !strcmp(s, "--host-link") || !strcmp(s, "--ranks") || !strcmp(s, "--zero") ||
                     !strcmp(s, "--link") || !strcmp(s, "--loss-chunk") || !strcmp(s, "--update");
        if (takes && i + 1 >= argc) {
            arg_error(cl, i, "%s needs a value", s);
            return EXIT_USAGE;
        }
        if (!strcmp(s, "--budget") || !strcmp(s, "--host-mem")) {
            char why[160] = "";
            int64_t *dst = s[2] == 'b' ? &budget : &host;
            i++;
            if (fe_size_parse(argv[i], dst, why, sizeof why) != 0 || *dst <= 0) {
                arg_error(cl, i, "%s", why[0] ? why : "a size must be positive");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--reserve")) {
            char why[160] = "";
            i++;
            if (fe_size_parse(argv[i], &reserve, why, sizeof why) != 0 || reserve < 0) {
                arg_error(cl, i, "%s", why[0] ? why : "a size cannot be negative");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--host-cores")) {
            char *end;
            errno = 0;
            long n = strtol(argv[++i], &end, 10);
            if (errno || *end || n < 1 || n > 65536) {
                arg_error(cl, i, "--host-cores needs a whole number of threads from 1 to 65536");
                return EXIT_USAGE;
            }
            hs.cores = (int)n;
        } else if (!strcmp(s, "--host-adamw") || !strcmp(s, "--host-link")) {
            bool adamw = s[7] == 'a';
            i++;
            char *end;
            errno = 0;
            double v = strtod(argv[i], &end);
            double unit = 1;
            if (adamw && *end && !end[1])
                unit = *end == 'k' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : 0, end += unit > 0;
            if (errno || end == argv[i] || *end || !isfinite(v) || v <= 0) {
                arg_error(cl, i, adamw ? "--host-adamw needs a positive rate in parameters per second "
                                         "(200M, 1.5G)"
                                       : "--host-link needs a positive rate in GB/s (25, 12.5)");
                return EXIT_USAGE;
            }
            if (adamw)
                hs.adamw_per_core = v * unit;
            else
                hs.link_gbps = v;
        } else if (!strcmp(s, "--gpu")) {
            gpu_name = argv[++i];
            gpu_arg = i;
        } else if (!strcmp(s, "--micro-batch")) {
            char *end;
            errno = 0;
            micro = strtoll(argv[++i], &end, 10);
            if (errno || *end || micro < 1) {
                arg_error(cl, i, "--micro-batch needs a positive integer");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--ranks")) {
            char *end;
            errno = 0;
            ranks = strtoll(argv[++i], &end, 10);
            ranks_arg = i;
            if (errno || *end || ranks < 1 || ranks > 65536) {
                arg_error(cl, i, "--ranks needs a rank count from 1 to 65536");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--zero")) {
            i++;
            zero_arg = i;
            if (strlen(argv[i]) != 1 || argv[i][0] < '0' || argv[i][0] > '3') {
                arg_error(cl, i, "--zero takes 0, 1, 2 or 3");
                return EXIT_USAGE;
            }
            zero = argv[i][0] - '0';
        } else if (!strcmp(s, "--link")) {
            link_name = argv[++i];
            link_arg = i;
        } else if (!strcmp(s, "-o")) {
            outdir = argv[++i];
            out_arg = i;
        } else if (!strcmp(s, "--emit-graph")) {
            emit = argv[++i];
        } else if (!strcmp(s, "--remat")) {
            i++;
            remat_arg = i;
            for (int p = REMAT_KEEP; p <= REMAT_SWAP; p++)
                if (strcmp(argv[i], remat_policy_name((RematPolicy)p)) == 0)
                    remat = p;
            if (remat < 0 && !strncmp(argv[i], "tensors:", 8) && tensors_spec(argv[i] + 8, kept))
                remat = REMAT_TENSORS;
            if (remat < 0) {
                arg_error(cl, i, "--remat takes keep, selective, full, swap, or tensors:K (every block "
                          "keeps K of its tensors, along the planner's chain) or tensors:KxN+J (the "
                          "first N blocks K, the rest J)");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--offload")) {
            i++;
            static const char *lv[] = {"none", "optimizer", "grads", "weights"};
            offload_arg = i;
            for (int k = 0; k < 4; k++)
                if (strcmp(argv[i], lv[k]) == 0)
                    offload = k;
            if (offload < 0) {
                arg_error(cl, i, "--offload takes none, optimizer, grads or weights");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--update")) {
            update_arg = ++i;
            update = !strcmp(argv[i], "step") ? 0 : !strcmp(argv[i], "backward") ? 1 : -1;
            if (update < 0) {
                arg_error(cl, i, "--update takes step (after the whole backward) or backward (each "
                          "parameter's as soon as its gradient is complete)");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--dump-ir")) {
            dump_after = "all";
        } else if (!strcmp(s, "--time-passes")) {
            time_passes = true;
        } else if (!strcmp(s, "--exhaustive")) {
            exhaustive = true;
        } else if (!strcmp(s, "--no-fusion")) {
            no_fusion = true;
        } else if (!strcmp(s, "--unfused-loss")) {
            unfused_loss = true;
        } else if (!strcmp(s, "--grad-temporaries")) {
            grad_temporaries = true;
        } else if (!strcmp(s, "--loss-chunk")) {
            char *end;
            errno = 0;
            loss_chunk = strtoll(argv[++i], &end, 10);
            if (errno || *end || loss_chunk < 1) {
                arg_error(cl, i, "--loss-chunk needs a positive number of rows");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--dump-after")) {
            int n;
            const char *const *stages = pipeline_stages(&n);
            dump_after = argv[++i];
            bool known = false;
            char list[256] = "";
            for (int k = 0; k < n; k++) {
                known |= strcmp(dump_after, stages[k]) == 0;
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", stages[k]);
            }
            if (!known) {
                arg_error(cl, i, "unknown pass '%s' (one of: %s)", dump_after, list);
                return EXIT_USAGE;
            }
        } else if (s[0] == '-' && s[1]) {
            arg_error(cl, i, "unknown option '%s' (see ftc help compile)", s);
            return EXIT_USAGE;
        } else if (path) {
            arg_error(cl, i, "one .ft file at a time (already have '%s')", path);
            return EXIT_USAGE;
        } else {
            path = s;
            path_arg = i;
        }
    }
    if (!path) {
        usage_compile(stderr);
        return EXIT_USAGE;
    }
    if (zero >= 0 && ranks == 1) {
        arg_error(cl, zero_arg, "--zero shards across ranks: it needs --ranks N with N > 1");
        return EXIT_USAGE;
    }
    if (link_name && ranks == 1) {
        arg_error(cl, link_arg, "--link is the link between ranks: it needs --ranks N with N > 1");
        return EXIT_USAGE;
    }
    if (ranks > 1 && offload == 2 && zero >= 0 && zero < 2) {
        arg_error(cl, offload_arg, "--offload grads with several ranks needs --zero 2 or 3 (each rank "
                  "reduces its gradients on the device, then sends its shard to the host)");
        return EXIT_USAGE;
    }
    if (ranks > 1 && offload == 3) {
        arg_error(cl, offload_arg, "--offload weights streams one GPU's weights from its host: with "
                  "several ranks, --zero 3 shards them instead (use --offload grads or below)");
        return EXIT_USAGE;
    }
    const LinkPreset *link = NULL;
    if (ranks > 1) {
        link = link_preset(link_name ? link_name : ranks <= 8 ? "nvlink" : "ib");
        if (!link) {
            int n;
            const LinkPreset *l = link_presets(&n);
            char list[128] = "";
            for (int i = 0; i < n; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", l[i].name);
            arg_error(cl, link_arg, "unknown link preset '%s' (one of: %s)", link_name, list);
            return EXIT_USAGE;
        }
    }
    const GpuPreset *gpu = gpu_preset(gpu_name);
    if (!gpu) {
        int n;
        const GpuPreset *p = gpu_presets(&n);
        char list[256] = "";
        for (int i = 0; i < n; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", p[i].name);
        arg_error(cl, gpu_arg, "unknown GPU preset '%s' (one of: %s)", gpu_name, list);
        return EXIT_USAGE;
    }
    GpuPreset card = *gpu;   // the preset, with the reserve the user gave
    if (reserve >= 0)
        card.reserve_bytes = reserve;
    gpu = &card;

    // Where the plan goes: -o, else NAME.plan in the current directory. Checked now (a
    // file, or a directory of other things, is refused) so that no planning is wasted.
    char dir[4096], err[1024];
    if (outdir) {   // "out.plan/" names out.plan
        snprintf(dir, sizeof dir, "%s", outdir);
        for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
            dir[n - 1] = '\0';
    } else {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const char *dot = strrchr(base, '.');
        snprintf(dir, sizeof dir, "%.*s.plan", (int)(dot && dot != base ? dot - base : (long)strlen(base)), base);
    }
    if (codegen_plan_dir_check(dir, err, sizeof err) != 0) {
        if (out_arg >= 0)
            arg_error(cl, out_arg, "%s", err);
        else
            fprintf(stderr, "ftc compile: error: %s\n", err);
        return EXIT_NOFIT;
    }

    FtSource src;
    if (fe_source_read(&src, path) != 0) {
        arg_error(cl, path_arg, "cannot open '%s': %s", path, strerror(errno));
        return EXIT_NOFIT;
    }
    Arena *arena = arena_new();
    char *text = NULL, *rtext = NULL;
    size_t text_len = 0, rlen = 0;
    FILE *out = open_memstream(&text, &text_len), *rep = open_memstream(&rtext, &rlen);
    int rc = EXIT_NOFIT;
    bool show = false;   // print `out` even though the request failed (nothing fits)
    FtModel m;
    IrGraph *g = NULL;
    uint8_t *chain = NULL;   // the planner's keep masks (remat_keep_chain)
    Ast *prog = fe_parse(&src, arena);
    if (!prog || fe_check(&src, prog, &m, arena) != 0)
        goto done;
    if (!budget)
        budget = m.train.budget_bytes ? m.train.budget_bytes : gpu->mem_bytes;
    int64_t asked = budget;   // more than the card has is the card's memory
    if (budget > gpu->mem_bytes)
        budget = gpu->mem_bytes;
    if (!host)
        host = m.train.host_mem_bytes ? m.train.host_mem_bytes
                                      : (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
    if (!micro)
        micro = m.train.micro_batch;
    if (m.train.batch % ranks) {
        arg_error(cl, ranks_arg, "the global batch %lld does not split over %lld ranks",
                  (long long)m.train.batch, (long long)ranks);
        goto done;
    }
    if (micro && (m.train.batch / ranks) % micro) {
        if (ranks > 1)
            arg_error(cl, path_arg, "micro-batch %lld does not divide a rank's share of the global "
                      "batch (%lld of %lld over %lld ranks)", (long long)micro,
                      (long long)(m.train.batch / ranks), (long long)m.train.batch, (long long)ranks);
        else
            arg_error(cl, path_arg, "micro-batch %lld does not divide the global batch %lld",
                      (long long)micro, (long long)m.train.batch);
        goto done;
    }
    if (ranks > 1 && offload == 2 && m.train.optimizer == OPTIM_ADAMW8BIT) {
        arg_error(cl, offload_arg, "--offload grads with several ranks needs every gradient sharded, "
                  "and adamw8bit's 8-bit state keeps its tensors whole on every rank (their gradients "
                  "all-reduced on the device): use --offload optimizer or none");
        goto done;
    }
    const char *whole = whole_step_grads(&m, ranks, micro, offload);
    if (update == 1 && whole) {
        arg_error(cl, update_arg, "--update backward: %s", whole);
        goto done;
    }
    DriverSource source = {&src, &m};
    PassDiag diag = driver_diag(&src);
    Pipeline pipe = driver_pipeline(&source, arena, &diag);
    pipe.spec.no_fusion = no_fusion;
    pipe.spec.grad_temporaries = grad_temporaries;
    pipe.spec.fused_loss = !unfused_loss;
    pipe.spec.gemm_workspace_bytes = gpu->workspace_bytes;
    pipe.spec.ranks = (int)ranks;
    PassTimes times = {0};
    if (time_passes)
        pipe.times = &times;
    // The step with no technique applied: the whole global batch at once, all on the
    // device; built through autodiff and quantize, which report the user's errors.
    PlanChoice none = {.micro = micro ? micro : m.train.batch, .policy = REMAT_KEEP, .n_policy = 0,
                       .rest = REMAT_KEEP,
                       .offload = {.optimizer = false, .grads = false}};
    BuildStats bs;
    Arena *na = arena_new();
    Pipeline front = pipe;
    front.stop_after = "quantize";
    front.spec.fused_loss = false;   // no technique: the whole logits
    IrGraph *naive = pipeline_build(&front, &none, na, &bs);
    if (!naive) {
        arena_free(na);
        goto done;
    }
    report_compile(out, path, &m, naive, gpu, budget);
    if (asked > budget)
        fprintf(out, "the %s reports %lld MiB (%s) of memory, less than the %s asked: planned for "
                     "the card's\n",
                gpu->name, (long long)(gpu->mem_bytes >> 20), SIZE(gpu->mem_bytes), SIZE(asked));
    report_modes(out, &src, &m);
    int nlayers = ir_layers(naive);
    MemBreakdown states = count_naive_memory(naive, 0);
    // What a block may keep tensor by tensor, from most kept to least (the blocks are alike).
    int nkeep = 0, nchain = nlayers ? remat_keep_chain(naive, 0, &chain, &nkeep) : 0;
    if (remat == REMAT_TENSORS && (!nchain || kept[0] > nkeep || kept[2] > nkeep || kept[1] >= nlayers)) {
        if (!nchain)
            arg_error(cl, remat_arg, "--remat tensors: the model has no repeated block whose tensors a "
                      "plan could keep or recompute");
        else if (kept[1] >= nlayers)
            arg_error(cl, remat_arg, "--remat tensors:KxN+J: N blocks of %d must leave one for J", nlayers);
        else
            arg_error(cl, remat_arg, "--remat tensors: a block has %d tensors to keep or recompute, "
                      "not %d", nkeep, kept[0] > nkeep ? kept[0] : kept[2]);
        ir_graph_free(naive);
        arena_free(na);
        goto done;
    }
    ir_graph_free(naive);
    arena_free(na);

    // The planner: candidates on several threads, user errors already reported; each
    // micro-batch's graph through quantize is built once and copied for its choices.
    pipe.diag = NULL;
    pipe.verify = false;
    pipe.cache = pipeline_cache_new();
    PlanCtx pc = {.pipeline = &pipe, .gpu = gpu,
                  .cm = {gpu, host_adamw_rate(&hs), host_sumsq_rate(&hs), host_link_bytes_per_s(&hs, gpu), link}};
    PlannerInput pin = {.global_batch = m.train.batch, .budget_bytes = budget, .host_budget_bytes = host,
                        .reserve_bytes = gpu->reserve_bytes + link_reserve_bytes((int)ranks),
                        .weights_bytes = states.bytes[MEM_WEIGHTS],
                        .grads_bytes = states.bytes[MEM_GRADS],
                        .states_bytes = states.bytes[MEM_OPTIMIZER] + states.bytes[MEM_MASTER],
                        .build = pipeline_plan_choice, .ctx = &pc, .nlayers = nlayers, .micro = micro,
                        .remat = remat, .offload = offload, .ranks = (int)ranks, .zero = zero,
                        .early = update == 0 || whole ? 0 : update,
                        .grads_whole = ranks > 1 && m.train.optimizer == OPTIM_ADAMW8BIT,
                        .loss_chunk = loss_chunk, .chain = chain, .nchain = nchain, .nkeep = nkeep,
                        .tensors_at = kept[0] >= 0 ? nkeep - kept[0] : -1,
                        .tensors_rest_at = kept[2] >= 0 ? nkeep - kept[2] : -1, .tensors_first = kept[1],
                        .exhaustive = exhaustive};
    PlanChoice best;
    PlanHolds holds;
    if (plan(out, rep, &pc, &pin, &m, &hs, &best, &holds) != 0) {
        pipeline_cache_free(pipe.cache);
        show = true;   // the analysis of why nothing fits is the answer
        goto done;
    }
    // The chosen plan, with every pass (the stream events too), verified.
    pipeline_cache_free(pipe.cache);
    pipe.cache = NULL;
    pipe.final = true;
    pipe.verify = VERIFY_PASSES;
    pipe.dump_after = dump_after;
    pipe.dump_to = out;
    g = pipeline_build(&pipe, &best, arena, &bs);
    if (!g)
        goto done;
    if (ir_verify(g, stderr) != 0) {
        fprintf(stderr, "%s: internal error: the IR failed verification\n", path);
        goto done;
    }
    if (emit) {   // the training graph before remat and offload, for external solvers
        Arena *ea = arena_new();
        PlanChoice plain = {.micro = best.micro, .policy = REMAT_KEEP, .n_policy = 0,
                            .rest = REMAT_KEEP,
                            .offload = {.optimizer = false, .grads = false}};
        Pipeline ep = pipe;
        ep.final = false, ep.dump_after = NULL;
        BuildStats ebs;
        IrGraph *eg = pipeline_build(&ep, &plain, ea, &ebs);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", emit, (int)getpid());
        FILE *ef = eg ? fopen(tmp, "w") : NULL;
        bool ok = ef != NULL;
        if (ef) {
            ir_write_json(ef, eg);
            ok = !ferror(ef) & !fclose(ef) && rename(tmp, emit) == 0;
        }
        if (eg)
            ir_graph_free(eg);
        arena_free(ea);
        if (!ok) {
            unlink(tmp);
            fprintf(stderr, "ftc compile: error: cannot write %s\n", emit);
            goto done;
        }
    }
    fclose(rep);
    rep = NULL;
    PlanMeta meta = {.model = m.name, .source = path, .gpu = gpu->name, .arch = gpu->arch,
                     .budget_bytes = budget, .accum = m.train.batch / (best.micro * ranks),
                     .zero = ranks > 1 ? best.zero : -1, .link = link ? link->name : NULL,
                     .comm_bytes_per_s = link ? link->gbps * 1e9 : 0,
                     .comm_latency_us = link ? link->latency_us : 0,
                     .arena_bytes = bs.alloc.arena_bytes, .host_bytes = bs.alloc.host_bytes,
                     .reserve_bytes = gpu->reserve_bytes + link_reserve_bytes((int)ranks),
                     .flops_per_s = gpu->bf16_tflops * 1e12,
                     .bytes_per_s = gpu->hbm_gbps * 1e9, .link_bytes_per_s = pc.cm.link_bytes_per_s,
                     .host_cores = hs.cores, .host_adamw_per_core = hs.adamw_per_core,
                     .host_link = pc.cm.link_bytes_per_s, .adamw_lo = holds.adamw_lo,
                     .adamw_hi = holds.adamw_hi, .link_lo = holds.link_lo, .link_hi = holds.link_hi,
                     .report = rtext};
    driver_meta_train(&meta, &m.train);
    StepCost est = cost_step(g, &pc.cm, meta.accum, m.train.batch * m.train.seq);
    cost_stamp(g, &pc.cm);
    meta.model_flops = est.model_flops, meta.step_us = est.step_us;
    char targets[1024] = "";
    if (m.train.lora) {
        adapter_modules(g, targets, sizeof targets);
        meta.lora_r = m.train.lora_r, meta.lora_alpha = m.train.lora_alpha;
        meta.lora_dropout = m.train.lora_dropout, meta.lora_targets = targets;
    }
    if (codegen_plan_dir(dir, g, &meta, err, sizeof err) != 0) {
        fprintf(stderr, "ftc compile: error: %s\n", err);
        goto done;
    }
    char a1[32], a2[32];
    fprintf(out, "\ndevice arena %s, liveness lower bound %s (%.2f%% above it)\n",
            fmt_bytes(a1, sizeof a1, bs.alloc.arena_bytes), fmt_bytes(a2, sizeof a2, bs.alloc.lower_bound),
            bs.alloc.lower_bound ? 100.0 * (double)(bs.alloc.arena_bytes - bs.alloc.lower_bound) /
                                       (double)bs.alloc.lower_bound
                                 : 0.0);
    int64_t eval_peak;
    int eval_nodes = eval_phase_peak(g, &eval_peak);
    if (eval_nodes > 0)
        fprintf(out, "eval phase (ftc run --eval-data): %d instructions, forward only, nothing saved; "
                     "device peak %s\n", eval_nodes, fmt_bytes(a1, sizeof a1, eval_peak));
    fprintf(out, "plan: %s/plan (kernels.cu, memory.txt, memory.html, report.txt beside it)\n", dir);
    if (time_passes)
        print_times(out, &times);
    rc = 0;
done:
    free(chain);
    fclose(out);
    if (rep)
        fclose(rep);
    if (rc == 0 || show)
        fwrite(text, 1, text_len, stdout);
    free(text);
    free(rtext);
    if (g)
        ir_graph_free(g);
    arena_free(arena);
    fe_source_free(&src);
    return rc;
}
