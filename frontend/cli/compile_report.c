// compile_report.c — what ftc compile prints, from compile_plan's result: the counts and
// the step with no technique applied, the model states per precision, the planner's
// decision and candidates, or why nothing fits and what would; then the plan written.
#include "cli.h"

#include <math.h>

#define SIZE(b) fmt_bytes((char[32]){0}, 32, (b))

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

// Prints the counts and the naive memory breakdown for `g` to `out`.
void report_compile(FILE *out, const char *path, const FtModel *m, const CompileResult *r) {
    char a[32], b[32], c[32];
    ParamCount pc = r->params;
    MemBreakdown mb = r->naive;
    const GpuPreset *gpu = &r->gpu;
    int64_t budget = r->budget;
    const TrainSpec *t = &m->train;
    fprintf(out, "ftc: %s: model %s, seq %lld, global batch %lld, micro-batch %lld, %s, %s%s\n",
            path, m->name, (long long)t->seq, (long long)t->batch, (long long)r->naive_micro,
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
            (long long)r->naive_micro, (long long)r->naive_seq);
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
    if (r->asked > budget)
        fprintf(out, "the %s reports %lld MiB (%s) of memory, less than the %s asked: planned for "
                     "the card's\n",
                gpu->name, (long long)(gpu->mem_bytes >> 20), SIZE(gpu->mem_bytes), SIZE(r->asked));
}

// The model states of each precision regime (driver_modes), bytes per parameter of the
// whole model split by category, the train section's own regime marked.
void report_modes(FILE *out, const FtModel *m, const DriverModes *dm, const CompileResult *r) {
    bool adam = fe_adam_like(m->train.optimizer);
    fprintf(out, "\nmodel states per parameter by precision (%s; weights + grads + optimizer + master):\n",
            fe_optimizer_name(m->train.optimizer));
    for (int i = 0; i < dm->n; i++) {
        const ModeStates *s = &r->modes[i];
        if (!s->built)
            continue;
        double n = (double)s->params;
        int64_t st = s->weights + s->grads + s->optimizer + s->master;
        fprintf(out, "  %-38s %6.2f = %.2f + %.2f + %.2f + %.2f  %9.2f GB%s\n", dm->name[i], (double)st / n,
                (double)s->weights / n, (double)s->grads / n, (double)s->optimizer / n, (double)s->master / n,
                (double)st / 1e9, dm->ours[i] ? "  <- this train section" : "");
    }
    fprintf(out, "  (fp16 AdamW without the master is refused; every mode adds the gradients' reduction: "
                 "16 bytes%s)\n", adam ? "; adamw8bit keeps 32-bit moments for tensors below min_8bit_size" : "");
}

static void candidates_table(FILE *f, const PlannerResult *r, int nlayers) {
    // (a data-parallel choice also names its stage and buckets)
    int w = r->tried.len && r->tried.at[0].c.bucket_bytes ? 100 : 70;
    fprintf(f, "  %-*s %11s %11s %9s %6s %s\n", w, "candidate", "device", "host", "step", "MFU", "fits");
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        char d[512];
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
    char d[512];
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
    char spec[TENSOR_GROUPS * 24];
    if (planner_tensors_spec(spec, sizeof spec, &c->c, pin->nlayers, pin->chain, pin->nchain))
        fprintf(f, "  kept block by block as --remat tensors:%s asks (each block's count along the keep chain, "
                   "^ the candidates flipped from it)\n", spec);
    if (planner_tile_spec(spec, sizeof spec, &c->c, pin->nlayers))
        fprintf(f, "  sequence tiles: the per-token work after attention of %d of %d blocks in tiles, the "
                   "smallest of %lld tokens (--tile %s: TxN the first N blocks' tiles)\n",
                c->o.tile.blocks, pin->nlayers, (long long)c->o.tile.rows, spec);
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

// One change of the optimizer's state, when nothing fits: what the planner makes of it.
static void put_optim(FILE *f, const WhatIfOptim *q8, WhatIfOptimChange change, int nlayers) {
    if (change == WHATIF_ADAMW8BIT)
        fprintf(f, "  with optimizer = adamw8bit(...) (its moments 8-bit: the optimizer state %s -> %s): ",
                SIZE(q8->optimizer_bytes[0]), SIZE(q8->optimizer_bytes[1]));
    else
        fprintf(f, "  without Kahan summation (adamw(..., kahan = false): bf16 updates that round away "
                   "what falls below half a weight's ulp; the optimizer state %s -> %s): ",
                SIZE(q8->optimizer_bytes[0]), SIZE(q8->optimizer_bytes[1]));
    if (q8->fits) {
        char d[512];
        planner_choice_str(d, sizeof d, &q8->plan.c, nlayers);
        fprintf(f, "the planner's choice is %s, %s on the device and %s on the host (fits)\n", d,
                SIZE(q8->plan.o.device_bytes), SIZE(q8->plan.o.host_bytes));
    } else if (q8->planned) {
        fprintf(f, "the planner's smallest plan needs %s on the device and %s on the host (still too much)\n",
                SIZE(q8->plan.o.device_bytes), SIZE(q8->plan.o.host_bytes));
    } else {
        fprintf(f, "the model states still need %s of host memory where they go (still too much)\n",
                SIZE(q8->host_need));
    }
}

// What user-side changes would need, when nothing fits.
static void suggestions(FILE *f, const CompileResult *r, const FtModel *m) {
    const WhatIf *w = &r->whatif;
    int64_t budget = r->budget;
    fprintf(f, "what would fit (each alone, with the most frugal plan: micro-batch 1, full recompute "
               "with block inputs swapped out, everything offloadable on the host%s):\n",
            r->pin.ranks > 1 ? ", everything sharded" : "");
    if (w->stream.device >= 0) {
        fputs("  with the weights streamed from the host (--offload weights): ", f);
        put_whatif(f, &w->stream, budget);
    }
    for (int change = WHATIF_ADAMW8BIT; change <= WHATIF_NO_KAHAN; change++)
        if (r->optim[change].tried)
            put_optim(f, &r->optim[change], (WhatIfOptimChange)change, r->nlayers);
    if (w->weights_too_big)
        fprintf(f, "  kept on the device, the bf16 weights alone take %s%s: LoRA alone or a shorter "
                   "sequence cannot help\n",
                SIZE(r->rank_weights), r->pin.ranks > 1 ? " a rank" : "");
    if (w->lora.device >= 0) {
        fprintf(f, "  with lora(r = 8, targets = [%s, %s]): ", w->q_target, w->v_target);
        put_whatif(f, &w->lora, budget);
    }
    if (w->qlora.device >= 0) {
        fprintf(f, "  with lora(r = 8, targets = [%s, %s]) and quantize(nf4, double_quant = true): ",
                w->q_target, w->v_target);
        put_whatif(f, &w->qlora, budget);
    }
    if (w->seq) {
        fprintf(f, "  with seq = %lld (instead of %lld): ", (long long)w->seq, (long long)m->train.seq);
        put_whatif(f, &w->seq_plan, budget);
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

// The planner's line, its decision and the candidates it priced.
void report_planner(FILE *f, const CompileResult *r, const FtModel *m, const HostSpec *host) {
    const PlannerResult *s = &r->search;
    int placed = 0;
    for (int i = 0; i < s->tried.len; i++)
        placed += s->tried.at[i].o.placed;
    fprintf(f, "\nplanner: %d candidates priced, %d placed, %d searches skipped by their bound, in %.0f ms "
               "(host: %d cores x %.0f M AdamW parameters/s, link %.1f GB/s)\n",
            s->tried.len, placed, s->bound_pruned, r->search_ms, host->cores, host->adamw_per_core / 1e6,
            r->pc.cm.link_bytes_per_s / 1e9);
    if (s->best >= 0) {
        decision(f, &s->tried.at[s->best], m, &r->pc, &r->pin);
        holds_line(f, &r->holds, &r->pc.cm);
    }
    if (s->tried.len)
        candidates_table(f, s, r->nlayers);
}

// Why nothing fits, and what would.
void report_nofit(FILE *out, const CompileResult *r, const FtModel *m) {
    const PlannerInput *pin = &r->pin;
    fprintf(out, "\nnothing fits %s", SIZE(pin->budget_bytes));
    if (r->search.smallest >= 0) {
        const Candidate *c = &r->search.tried.at[r->search.smallest];
        char d[512];
        planner_choice_str(d, sizeof d, &c->c, pin->nlayers);
        fprintf(out, ": the smallest plan needs %s on the device (%s)", SIZE(c->o.device_bytes), d);
        if (c->o.device_bytes <= pin->budget_bytes)
            fprintf(out, ", which fits, but %s of host memory%s, more than the %s of --host-mem "
                         "(%sdefault: this machine's RAM; give the training machine's)",
                    SIZE(c->o.host_bytes), pin->ranks > 1 ? " a rank" : "",
                    SIZE(pin->host_budget_bytes), pin->ranks > 1 ? "a rank's host memory; " : "");
        fprintf(out, "\n");
        peak_line(out, c->o.live, true);
    } else if (r->search.host_pruned) {
        fprintf(out, ": the model states need %s of host memory where they go, more than the %s "
                     "of --host-mem (default: this machine's RAM; give the training machine's)\n",
                SIZE(r->search.host_need), SIZE(pin->host_budget_bytes));
    } else {
        fprintf(out, ": the bf16 weights alone take %s%s, and --offload keeps them on the device\n",
                SIZE(r->rank_weights), pin->ranks > 1 ? " a rank" : "");
    }
    suggestions(out, r, m);
}

// The plan's last lines: its arena against the liveness bound, the eval phase, where it is.
void report_plan_written(FILE *out, const CompileResult *r, const char *dir, bool time_passes) {
    char a1[32], a2[32];
    const AllocStats *al = &r->stats.alloc;
    fprintf(out, "\ndevice arena %s, liveness lower bound %s (%.2f%% above it)\n",
            fmt_bytes(a1, sizeof a1, al->arena_bytes), fmt_bytes(a2, sizeof a2, al->lower_bound),
            al->lower_bound ? 100.0 * (double)(al->arena_bytes - al->lower_bound) / (double)al->lower_bound
                            : 0.0);
    if (r->eval_nodes > 0)
        fprintf(out, "eval phase (ftc run --eval-data): %d instructions, forward only, nothing saved; "
                     "device peak %s\n", r->eval_nodes, fmt_bytes(a1, sizeof a1, r->eval_peak));
    const DecodeStats *ds = &r->stats.decode;
    if (r->decode_nodes > 0)
        fprintf(out, "decode phase (ftc generate): %d instructions, one token over a KV cache of %lld tokens "
                     "(%s); device peak %s\n", r->decode_nodes, (long long)ds->max_len,
                fmt_bytes(a1, sizeof a1, ds->cache_bytes), fmt_bytes(a2, sizeof a2, r->decode_peak));
    else if (ds->why[0])
        fprintf(out, "no decode phase (ftc generate cannot run this plan): %s%s%.0d\n", ds->why,
                ds->line ? ", line " : "", ds->line);
    fprintf(out, "plan: %s/plan (kernels.cu, memory.txt, memory.html, report.txt beside it)\n", dir);
    if (time_passes)
        print_times(out, &r->times);
}

// A time for people: "1.23s", or "4.56ms" below a second.
static const char *seconds(char *buf, size_t cap, double us) {
    if (us < 1e6)
        snprintf(buf, cap, "%.2fms", us / 1e3);
    else
        snprintf(buf, cap, "%.2fs", us / 1e6);
    return buf;
}

// What each way of having the reference takes (reference = auto), the chosen one marked,
// and why.
void report_references(FILE *out, const RefChoice *rc, RefMode used) {
    static const char *const what[REF_COUNT] = {
        [REF_LORA_OFF] = "the base itself, its adapters left out: nothing more held",
        [REF_COPY] = "a frozen copy of the weights beside the policy",
        [REF_PRECOMPUTED] = "a pass over the data before the first step: nothing of it in the step"};
    if (rc->n == 0) {   // (the train section chose, or the loss has no reference)
        if (used > REF_AUTO && used < REF_COUNT)
            fprintf(out, "\nreference: %s, as the train section asks: %s\n", ref_mode_name(used), what[used]);
        return;
    }
    fprintf(out, "\nreference: each way of having the reference model's log-probabilities, planned\n");
    fprintf(out, "  %-12s %6s %12s %12s %10s %12s %5s\n", "reference", "micro", "device", "host", "step",
            "+ pass/step", "fits");
    for (int i = 0; i < rc->n; i++) {
        const RefOption *o = &rc->opt[i];
        if (!o->planned) {
            fprintf(out, "  %-12s %6s %12s %12s %10s %12s %5s\n", ref_mode_name(o->mode), "-", "-", "-", "-", "-", "no");
            continue;
        }
        char pass[32] = "-", step[32];
        if (o->mode == REF_PRECOMPUTED && o->fits)
            seconds(pass, sizeof pass, o->pass_us);
        fprintf(out, "  %-12s %6lld %12s %12s %10s %12s %5s%s\n", ref_mode_name(o->mode), (long long)o->micro,
                SIZE(o->device), SIZE(o->host), seconds(step, sizeof step, o->step_us), pass,
                o->fits ? "yes" : "no", i == rc->chosen ? "  <- chosen" : "");
    }
    if (rc->chosen >= 0)
        fprintf(out, "  chosen: %s, %s; the fastest that fits (its pass over the data counted as a step's share "
                     "of one epoch)\n", ref_mode_name(rc->opt[rc->chosen].mode), what[rc->opt[rc->chosen].mode]);
    else
        fprintf(out, "  none fits with any of them; what follows is %s's\n", ref_mode_name(used));
}
