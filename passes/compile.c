// compile.c — ftc compile's computation: the options checked against each other and the
// program, the step with no technique applied, the planner's search (or what would fit
// when nothing does), and the chosen plan built through every pass with each figure its
// header states. Computed here once; the command line only formats it.
#include "passes.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static CompileStatus refuse(CompileResult *r, CompileStatus st, const char *bad, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Records why the request cannot be met, and at which option (NULL: the program).
static CompileStatus refuse(CompileResult *r, CompileStatus st, const char *bad, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    r->bad = bad;
    return st;
}

// Appends ", name" (or "name" first) to the list a refusal names the presets by.
static void list_add(char *list, size_t cap, const char *name) {
    size_t at = strlen(list);
    snprintf(list + at, cap - at, "%s%s", at ? ", " : "", name);
}

// The options against each other, and the presets they name.
static CompileStatus check_options(const CompileOptions *o, CompileResult *r) {
    int n;
    char list[256];
    if (o->zero >= 0 && o->ranks == 1)
        return refuse(r, COMPILE_USAGE, "--zero", "--zero shards across ranks: it needs --ranks N with N > 1");
    if (o->link && o->ranks == 1)
        return refuse(r, COMPILE_USAGE, "--link", "--link is the link between ranks: it needs --ranks N with N > 1");
    if (o->ranks > 1 && o->offload == 2 && o->zero >= 0 && o->zero < 2)
        return refuse(r, COMPILE_USAGE, "--offload", "--offload grads with several ranks needs --zero 2 or 3 "
                      "(each rank reduces its gradients on the device, then sends its shard to the host)");
    if (o->ranks > 1 && o->offload == 3)
        return refuse(r, COMPILE_USAGE, "--offload", "--offload weights streams one GPU's weights from its "
                      "host: with several ranks, --zero 3 shards them instead (use --offload grads or below)");
    if (o->ranks > 1) {
        r->link = link_preset(o->link ? o->link : o->ranks <= 8 ? "nvlink" : "ib");
        if (!r->link) {
            const LinkPreset *l = link_presets(&n);
            list[0] = '\0';
            for (int i = 0; i < n; i++)
                list_add(list, sizeof list, l[i].name);
            return refuse(r, COMPILE_USAGE, "--link", "unknown link preset '%s' (one of: %s)", o->link, list);
        }
    }
    const char *name = o->gpu ? o->gpu : "a100-40g";
    const GpuPreset *gpu = gpu_preset(name);
    if (!gpu) {
        const GpuPreset *p = gpu_presets(&n);
        list[0] = '\0';
        for (int i = 0; i < n; i++)
            list_add(list, sizeof list, p[i].name);
        return refuse(r, COMPILE_USAGE, "--gpu", "unknown GPU preset '%s' (one of: %s)", name, list);
    }
    r->gpu = *gpu;
    if (o->reserve >= 0)
        r->gpu.reserve_bytes = o->reserve;
    return COMPILE_OK;
}

// Why every gradient of the step must be complete before the first update (so the
// updates cannot run inside backward), or NULL when nothing asks that: with `ranks`,
// the micro-batch (0: the planner's) and the offload level (-1: the planner's).
static const char *whole_step_grads(const CompileTrain *t, int64_t ranks, int64_t micro, int offload) {
    if (ranks > 1)
        return "with several ranks a gradient is complete only after its reduction over them";
    if (t->clip > 0)
        return "clipping (clip) scales every update by the norm of all the gradients";
    if (t->fp16)
        return "fp16's loss scale skips the step when any gradient overflows";
    if (micro && micro < t->batch)
        return "with accumulation a gradient is complete only after the last micro-step";
    if (offload > 0)
        return "the updates run on the host (--offload) after the gradients are copied there";
    return NULL;
}

// The options against the program's train section; fills the budgets.
static CompileStatus check_program(const CompileOptions *o, CompileResult *r, int64_t *micro) {
    const CompileTrain *t = &o->train;
    r->asked = r->budget = o->budget ? o->budget : r->gpu.mem_bytes;
    if (r->budget > r->gpu.mem_bytes)   // more than the card has is the card's memory
        r->budget = r->gpu.mem_bytes;
    r->host = o->host ? o->host : (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
    r->reserve = r->gpu.reserve_bytes + link_reserve_bytes((int)o->ranks);
    *micro = o->micro;
    if (t->batch % o->ranks)
        return refuse(r, COMPILE_REFUSED, "--ranks", "the global batch %lld does not split over %lld ranks",
                      (long long)t->batch, (long long)o->ranks);
    if (*micro && (t->batch / o->ranks) % *micro) {
        if (o->ranks > 1)
            return refuse(r, COMPILE_REFUSED, "FILE", "micro-batch %lld does not divide a rank's share of "
                          "the global batch (%lld of %lld over %lld ranks)", (long long)*micro,
                          (long long)(t->batch / o->ranks), (long long)t->batch, (long long)o->ranks);
        return refuse(r, COMPILE_REFUSED, "FILE", "micro-batch %lld does not divide the global batch %lld",
                      (long long)*micro, (long long)t->batch);
    }
    if (o->ranks > 1 && o->offload == 2 && t->adamw8bit)
        return refuse(r, COMPILE_REFUSED, "--offload", "--offload grads with several ranks needs every "
                      "gradient sharded, and adamw8bit's 8-bit state keeps its tensors whole on every rank "
                      "(their gradients all-reduced on the device): use --offload optimizer or none");
    bool tiled = false;
    for (int k = 0; k < o->tile.n; k++) {
        if (t->seq % o->tile.tiles[k])
            return refuse(r, COMPILE_REFUSED, "--tile", "--tile %s: the sequence of %lld tokens does not split "
                          "into %lld equal tiles (a tile count must divide it)", o->tile.text, (long long)t->seq,
                          (long long)o->tile.tiles[k]);
        tiled |= o->tile.tiles[k] > 1;
    }
    if (tiled && o->remat == REMAT_TENSORS)
        return refuse(r, COMPILE_REFUSED, "--tile", "--tile with --remat tensors: the keep masks name the "
                      "tensors of an untiled block (use --remat keep, selective, full or swap)");
    const char *whole = whole_step_grads(t, o->ranks, *micro, o->offload);
    if (o->update == 1 && whole)
        return refuse(r, COMPILE_REFUSED, "--update", "--update backward: %s", whole);
    return COMPILE_OK;
}

// The model states of each precision regime of o->modes, through lora (or quantize),
// counted as the naive step counts them.
static void count_modes(const CompileOptions *o, CompileResult *r) {
    r->modes = calloc((size_t)o->nmodes + 1, sizeof *r->modes);
    if (!r->modes)
        return;
    for (int i = 0; i < o->nmodes; i++) {
        Arena *a = arena_new();
        Pipeline pipe = {.elaborate = o->modes[i].elaborate, .ctx = o->modes[i].ctx, .spec = o->modes[i].spec,
                         .stop_after = o->program.spec.quantize ? "quantize" : "lora"};
        PlanChoice one = {.micro = pipeline_min_micro(&pipe.spec), .policy = REMAT_KEEP, .rest = REMAT_KEEP};
        BuildStats bs;
        IrGraph *g = pipeline_build(&pipe, &one, a, &bs);
        if (g) {
            MemBreakdown mb = count_naive_memory(g, 0);
            r->modes[i] = (ModeStates){true, mb.bytes[MEM_WEIGHTS], mb.bytes[MEM_GRADS],
                                       mb.bytes[MEM_OPTIMIZER], mb.bytes[MEM_MASTER], count_params(g).total};
            ir_graph_free(g);
        }
        arena_free(a);
    }
}

// --remat tensors against the model's blocks: how many a plan has and what each may keep;
// each block's mask into r->tensors_masks.
static CompileStatus check_tensors(const CompileOptions *o, CompileResult *r, int nchain, int nkeep) {
    const TensorsSpec *t = &o->tensors;
    if (!nchain)
        return refuse(r, COMPILE_REFUSED, "--remat", "--remat tensors: the model has no repeated block whose "
                      "tensors a plan could keep or recompute");
    int named = 0;
    for (int g = 0; g < t->n; g++) {
        if (t->kept[g] > nkeep)
            return refuse(r, COMPILE_REFUSED, "--remat", "--remat tensors: a block has %d tensors to keep or "
                          "recompute, not %d", nkeep, t->kept[g]);
        for (int f = 0; f < t->nflip[g]; f++)
            if (t->flip[g][f] >= nkeep)
                return refuse(r, COMPILE_REFUSED, "--remat", "--remat tensors: ^%d: a block's tensors to keep or "
                              "recompute are numbered 0 to %d", t->flip[g][f], nkeep - 1);
        named += t->blocks[g] > 0 ? t->blocks[g] : 0;
    }
    if (t->n > 1 && named >= r->nlayers)
        return refuse(r, COMPILE_REFUSED, "--remat", "--remat tensors:KxN+J: the groups' %d blocks of %d must "
                      "leave one for J", named, r->nlayers);
    r->tensors_masks = xmalloc((size_t)r->nlayers * (size_t)nkeep + 1);
    for (int l = 0, g = 0, in_group = 0; l < r->nlayers; l++, in_group++) {
        if (t->blocks[g] > 0 && in_group == t->blocks[g])
            g++, in_group = 0;
        uint8_t *m = r->tensors_masks + (size_t)l * (size_t)nkeep;
        memcpy(m, r->chain + (size_t)(nkeep - t->kept[g]) * (size_t)nkeep, (size_t)nkeep);
        for (int f = 0; f < t->nflip[g]; f++)
            m[t->flip[g][f]] ^= 1;
    }
    return COMPILE_OK;
}

// --tile T1xN1+...+T against the model's blocks: each block's count into r->tile_blocks.
static CompileStatus check_tile_groups(const CompileOptions *o, CompileResult *r) {
    const TileSpec *t = &o->tile;
    if (t->n < 2)
        return COMPILE_OK;
    int named = 0;
    for (int k = 0; k < t->n; k++)
        named += t->blocks[k] > 0 ? t->blocks[k] : 0;
    if (named >= r->nlayers)
        return refuse(r, COMPILE_REFUSED, "--tile", "--tile %s: the groups' %d blocks of %d must leave one for "
                      "the last count", t->text, named, r->nlayers);
    r->tile_blocks = xmalloc(sizeof(int64_t) * (size_t)r->nlayers);
    for (int l = 0, k = 0, in_group = 0; l < r->nlayers; l++, in_group++) {
        if (t->blocks[k] > 0 && in_group == t->blocks[k])
            k++, in_group = 0;
        r->tile_blocks[l] = t->tiles[k];
    }
    return COMPILE_OK;
}

// The step with no technique applied: the whole global batch at once, all on the device,
// built through autodiff and quantize (which report the user's errors); its counts, and
// what a block may keep tensor by tensor (the blocks are alike), from most kept to least.
static CompileStatus naive_step(const CompileOptions *o, CompileResult *r, int64_t micro, int *nchain,
                                int *nkeep) {
    PlanChoice none = {.micro = micro ? micro : o->train.batch, .policy = REMAT_KEEP, .rest = REMAT_KEEP};
    Arena *na = arena_new();
    Pipeline front = r->pipe;
    front.stop_after = "quantize";
    front.spec.fused_loss = false;   // no technique: the whole logits
    BuildStats bs;
    IrGraph *g = pipeline_build(&front, &none, na, &bs);
    if (!g) {
        arena_free(na);
        return refuse(r, COMPILE_REFUSED, NULL, "%s", "");   // (reported through o->diag)
    }
    r->params = count_params(g);
    r->naive = count_naive_memory(g, r->gpu.reserve_bytes);
    r->naive_micro = g->batch, r->naive_seq = g->seq;
    r->nlayers = ir_layers(g);
    MemBreakdown states = count_naive_memory(g, 0);
    r->pin.weights_bytes = states.bytes[MEM_WEIGHTS];
    r->pin.grads_bytes = states.bytes[MEM_GRADS];
    r->pin.states_bytes = states.bytes[MEM_OPTIMIZER] + states.bytes[MEM_MASTER];
    *nkeep = 0;
    *nchain = r->nlayers ? remat_keep_chain(g, 0, &r->chain, nkeep) : 0;
    ir_graph_free(g);
    arena_free(na);
    if (o->remat == REMAT_TENSORS)
        return check_tensors(o, r, *nchain, *nkeep);
    return check_tile_groups(o, r);
}

// The planner's input: the budgets, the model states and what the options fix.
static void planner_input(const CompileOptions *o, CompileResult *r, int64_t micro, int nchain, int nkeep) {
    bool whole = whole_step_grads(&o->train, o->ranks, micro, o->offload) != NULL;
    r->pc = (PlanCtx){.pipeline = &r->pipe, .gpu = &r->gpu,
                      .cm = {&r->gpu, host_adamw_rate(&o->hs), host_sumsq_rate(&o->hs),
                             host_link_bytes_per_s(&o->hs, &r->gpu), r->link}};
    PlannerInput *p = &r->pin;
    p->pairs = r->pipe.spec.pairs;
    p->global_batch = o->train.batch, p->budget_bytes = r->budget, p->host_budget_bytes = r->host;
    p->reserve_bytes = r->reserve;
    p->build = pipeline_plan_choice, p->ctx = &r->pc, p->nlayers = r->nlayers, p->micro = micro;
    p->remat = o->remat, p->offload = o->offload, p->ranks = (int)o->ranks, p->zero = o->zero;
    p->early = o->update == 0 || whole ? 0 : o->update;
    p->grads_whole = o->ranks > 1 && o->train.adamw8bit;
    p->loss_chunk = o->loss_chunk, p->chain = r->chain, p->nchain = nchain, p->nkeep = nkeep;
    p->tensors_masks = r->tensors_masks;
    p->exhaustive = o->exhaustive;
}

// The weights a rank holds at the least: a shard of them where ZeRO-3 may shard them.
static int64_t rank_weights(const PlannerInput *pin) {
    bool shards = pin->ranks > 1 && (pin->zero < 0 || pin->zero == 3);
    return shards ? pin->weights_bytes / pin->ranks : pin->weights_bytes;
}

// The blocks whose per-token tail `tiles` tiles, or per_block's counts where not NULL
// (building the program through the tile pass).
static int tiled_blocks(CompileResult *r, int64_t tiles, const int64_t *per_block) {
    Arena *a = arena_new();
    Pipeline front = r->pipe;
    front.stop_after = "tile";
    PlanChoice one = {.micro = pipeline_min_micro(&front.spec), .policy = REMAT_KEEP, .rest = REMAT_KEEP,
                      .tile = tiles, .tile_blocks = per_block};
    BuildStats bs;
    IrGraph *g = pipeline_build(&front, &one, a, &bs);
    int blocks = g ? bs.tile.blocks : 0;
    if (g)
        ir_graph_free(g);
    arena_free(a);
    return blocks;
}

// Appends search `add` (of other tiles) to `r`: its candidates, the fastest that fits and
// the smallest of both, what each skipped.
static void merge_search(PlannerResult *r, PlannerResult *add) {
    int base = r->tried.len;
    for (int i = 0; i < add->tried.len; i++)
        vec_push(&r->tried, add->tried.at[i]);
    for (int i = 0; i < add->bounds.len; i++)
        vec_push(&r->bounds, add->bounds.at[i]);
    if (add->best >= 0 && (r->best < 0 || add->tried.at[add->best].o.cost.step_us <
                                              r->tried.at[r->best].o.cost.step_us))
        r->best = base + add->best;
    if (add->smallest >= 0 && (r->smallest < 0 || add->tried.at[add->smallest].o.device_bytes <
                                                      r->tried.at[r->smallest].o.device_bytes))
        r->smallest = base + add->smallest;
    r->pruned_levels += add->pruned_levels, r->bound_pruned += add->bound_pruned;
    r->host_pruned += add->host_pruned;
    if (add->host_need > 0 && (r->host_need == 0 || add->host_need < r->host_need))
        r->host_need = add->host_need;
    planner_result_free(add);
}

// The planner's search at `tiles` sequence tiles (per_block's where not NULL), into
// r->search (the first) or merged into it; its fastest plan that fits, or NULL.
// Per-tensor keep masks are the untiled block's (remat_keep_chain), so a tiled search
// goes without them.
static const Candidate *search_at(CompileResult *r, int64_t tiles, const int64_t *per_block, bool first) {
    PlannerResult pr;
    const uint8_t *chain = r->pin.chain;
    int nchain = r->pin.nchain;
    r->pin.tile = tiles, r->pin.tile_blocks = per_block;
    if (tiles > 1 || per_block)
        r->pin.chain = NULL, r->pin.nchain = 0;
    planner_search(&r->pin, first ? &r->search : &pr);
    r->pin.chain = chain, r->pin.nchain = nchain, r->pin.tile = 0, r->pin.tile_blocks = NULL;
    if (first)
        return r->search.best >= 0 ? &r->search.tried.at[r->search.best] : NULL;
    int at = pr.best >= 0 ? r->search.tried.len + pr.best : -1;
    merge_search(&r->search, &pr);
    return at >= 0 ? &r->search.tried.at[at] : NULL;
}

// The sequence tiles searched: --tile's alone; else none, then (where the plan without
// them fits nothing, or recomputes or swaps: a block's working set is what costs) 2, 4,
// 8, ... in every block while they divide the sequence and a tile keeps TILE_MIN_ROWS
// tokens, until a count fits and is not 1% faster than the one before it. Tiles only
// shrink a block's working set, at some time, so past the first count that fits more
// pay only where they let the plan recompute less. Then the counts block by block
// (tile_blocks.c): a block whose peaks fit with fewer tiles than its neighbours' runs
// bigger GEMMs and fewer kernels.
static void search_tiles(const CompileOptions *o, CompileResult *r) {
    if (o->tile.n > 0) {
        search_at(r, o->tile.tiles[0], r->tile_blocks, true);
        return;
    }
    const Candidate *b = search_at(r, 1, NULL, true);
    if (b && b->o.remat.recompute_flops == 0 && b->o.remat.swap_bytes == 0)
        return;
    if (o->train.seq % 2 || o->train.seq / 2 < TILE_MIN_ROWS || tiled_blocks(r, 2, NULL) == 0)
        return;
    int64_t counts[32] = {1};
    int ncounts = 1;
    double last = b ? b->o.cost.step_us : 0;
    for (int64_t t = 2; o->train.seq % t == 0 && o->train.seq / t >= TILE_MIN_ROWS && ncounts < 32; t *= 2) {
        b = search_at(r, t, NULL, false);
        counts[ncounts++] = t;
        if (b && last > 0 && b->o.cost.step_us > 0.99 * last)
            break;
        if (b && (last == 0 || b->o.cost.step_us < last))
            last = b->o.cost.step_us;
    }
    tile_blocks_search(&r->pin, &r->search, counts, ncounts, r->arena);
}

// The search, timed; when nothing fits, what each user-side change would need.
static CompileStatus search(const CompileOptions *o, CompileResult *r) {
    struct timespec t0, t1;
    r->pipe.diag = NULL;   // (user errors were reported by the naive step's build)
    r->pipe.verify = false;
    bool tiled = false;
    for (int k = 0; k < o->tile.n; k++)
        tiled |= o->tile.tiles[k] > 1;
    if (tiled && tiled_blocks(r, o->tile.tiles[0], r->tile_blocks) == 0)
        return refuse(r, COMPILE_REFUSED, "--tile", "--tile %s: no block of the model ends in per-token "
                      "work to tile (after its attention: projections, norms, activations, residual adds, "
                      "with at least one linear)", o->tile.text);
    r->pipe.cache = pipeline_cache_new();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    search_tiles(o, r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->search_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    r->holds = planner_holds(&r->search, r->pc.cm.host_adamw_per_s, r->pc.cm.link_bytes_per_s);
    r->rank_weights = rank_weights(&r->pin);
    CompileStatus st = COMPILE_OK;
    if (r->search.best >= 0) {
        r->best = r->search.tried.at[r->search.best].c;
    } else {
        whatif_search(&r->pc, r->budget, r->host, r->rank_weights, o->offload, &r->whatif);
        for (int change = WHATIF_ADAMW8BIT; change <= WHATIF_NO_KAHAN; change++)
            whatif_optimizer(&r->pin, (WhatIfOptimChange)change, &r->optim[change]);
        st = COMPILE_NOFIT;
    }
    pipeline_cache_free(r->pipe.cache);
    r->pipe.cache = NULL;
    return st;
}

// The training graph before remat and offload, for external solvers (--emit-graph).
static void plain_graph(CompileResult *r) {
    PlanChoice plain = {.micro = r->best.micro, .policy = REMAT_KEEP, .rest = REMAT_KEEP};
    Pipeline ep = r->pipe;
    ep.final = false, ep.dump_after = NULL;
    BuildStats bs;
    r->plain = pipeline_build(&ep, &plain, r->arena, &bs);
}

// Phase ph's nodes, and into *peak the most device bytes live at one of them.
static int phase_peak(const IrGraph *g, IrPhase ph, int64_t *peak) {
    int n = g->nodes.len, count = 0;
    int64_t *delta = calloc((size_t)n + 2, sizeof(int64_t)), live = 0;
    *peak = 0;
    if (!delta)
        return -1;
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
    for (int i = 0; i < n; i++) {
        live += delta[i];
        if (g->nodes.at[i].phase != ph)
            continue;
        count++;
        if (live > *peak)
            *peak = live;
    }
    free(delta);
    return count;
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

// The chosen plan with every pass (the stream events too), verified, costed.
static CompileStatus final_plan(const CompileOptions *o, CompileResult *r) {
    r->pipe.final = true;
    r->pipe.verify = o->verify;
    r->pipe.dump_after = o->dump_after;
    r->pipe.dump_to = o->dump_to;
    r->graph = pipeline_build(&r->pipe, &r->best, r->arena, &r->stats);
    if (!r->graph)
        return refuse(r, COMPILE_REFUSED, NULL, "internal error: the chosen plan did not build");
    if (ir_verify(r->graph, stderr) != 0)
        return refuse(r, COMPILE_REFUSED, NULL, "internal error: the IR failed verification");
    if (o->emit_graph)
        plain_graph(r);
    r->accum = o->train.batch / (r->best.micro * o->ranks);
    r->cost = cost_step(r->graph, &r->pc.cm, r->accum, o->train.batch * o->train.seq);
    cost_stamp(r->graph, &r->pc.cm);
    r->eval_nodes = phase_peak(r->graph, PHASE_EVALUATION, &r->eval_peak);
    r->decode_nodes = phase_peak(r->graph, PHASE_DECODING, &r->decode_peak);
    if (o->program.spec.lora)
        adapter_modules(r->graph, r->adapters, sizeof r->adapters);
    return COMPILE_OK;
}

CompileStatus compile_plan(const CompileOptions *o, CompileResult *r) {
    *r = (CompileResult){0};
    r->arena = arena_new();
    r->pipe = (Pipeline){.elaborate = o->program.elaborate, .ctx = o->program.ctx, .spec = o->program.spec,
                         .diag = o->diag, .verify = o->verify};
    PipelineSpec *s = &r->pipe.spec;
    s->no_fusion = o->no_fusion, s->grad_temporaries = o->grad_temporaries;
    s->fused_loss = !o->unfused_loss;
    s->ranks = (int)o->ranks;
    s->decode_len = o->max_len < 0 ? o->train.seq : o->max_len;
    if (o->time_passes)
        r->pipe.times = &r->times;
    int64_t micro;
    int nchain, nkeep;
    CompileStatus st = check_options(o, r);
    if (st == COMPILE_OK)
        st = check_program(o, r, &micro);
    if (st != COMPILE_OK)
        return st;
    s->gemm_workspace_bytes = r->gpu.workspace_bytes;
    if ((st = naive_step(o, r, micro, &nchain, &nkeep)) != COMPILE_OK)
        return st;
    count_modes(o, r);
    planner_input(o, r, micro, nchain, nkeep);
    if ((st = search(o, r)) != COMPILE_OK)
        return st;
    return final_plan(o, r);
}

void compile_result_free(CompileResult *r) {
    planner_result_free(&r->search);
    if (r->graph)
        ir_graph_free(r->graph);
    if (r->plain)
        ir_graph_free(r->plain);
    free(r->chain);
    free(r->tensors_masks);
    free(r->tile_blocks);
    free(r->modes);
    if (r->arena)
        arena_free(r->arena);
    *r = (CompileResult){0};
}
