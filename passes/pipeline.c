// pipeline.c — the compile pipeline as one ordered table of named passes with one
// signature, run for one planner choice:
//
//   elaborate (B, S) → lora → tile → fuse_loss → autodiff → quantize → chunk_loss → remat → eval → decode
//     → shard → offload → fuse → early_update → schedule → buckets → liveness → alloc
//     → streams
//
// The frontend elaborates (a callback: the passes never see the AST); every pass runs
// for every choice, doing nothing when the choice or the train section asks nothing of
// it, so the IR can be printed after any of them. The IR verifier runs between passes
// when asked (debug builds and tests). `streams` orders copies and host work with
// events; it changes no byte or lifetime, so only a plan to be written needs it.
#include "passes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct PassCtx {
    IrGraph *g;
    const Pipeline *p;
    const PlanChoice *c;
    BuildStats *bs;
    PassDiag *d;
    bool unplaced;      // the PLACE passes are skipped (pipeline_plan_choice runs them)
    bool bound;         // a planner's bound (BuildNeed.bound): no eval phase
    int64_t enough[2];  // alloc: an arena (device, host) this small needs no smaller placement
} PassCtx;

typedef int (*PassFn)(PassCtx *x);

static int run_lora(PassCtx *x) {
    const PipelineSpec *s = &x->p->spec;
    return s->lora ? lora_apply(x->g, &s->lora_spec, x->d) : 0;
}

static int run_tile(PassCtx *x) { return tile_apply(x->g, x->c->tile, x->c->tile_blocks, &x->bs->tile); }

static int run_fuse_loss(PassCtx *x) {
    x->bs->fused_loss = x->p->spec.fused_loss && fuse_loss_apply(x->g);
    return 0;
}

static int run_autodiff(PassCtx *x) {
    return autodiff_apply(x->g, (int)(x->p->spec.global_batch / x->c->micro), x->p->spec.grad_temporaries,
                          x->d);
}

static int run_quantize(PassCtx *x) {
    const PipelineSpec *s = &x->p->spec;
    return s->quantize ? quantize_apply(x->g, s->double_quant, &x->bs->quant) : 0;
}

static int run_chunk_loss(PassCtx *x) {
    x->bs->loss_chunk_rows = chunk_loss_apply(x->g, x->p->spec.loss_chunk_bytes, x->c->loss_chunk);
    x->bs->loss_rows = x->g->batch * x->g->seq;
    return 0;
}

static int run_remat(PassCtx *x) {
    const PlanChoice *c = x->c;
    int layers = ir_layers(x->g);
    if (layers == 0)
        return 0;
    RematPolicy *pol = arena_alloc(x->g->arena, sizeof(RematPolicy) * (size_t)layers);
    for (int l = 0; l < layers; l++)
        pol[l] = c->per_layer ? c->per_layer[l] : l < c->n_policy ? c->policy : c->rest;
    uint8_t *masks = NULL;   // a keep mask a block: each block's, or the first n_policy blocks' and the rest's
    if ((c->keep || c->keep_blocks) && c->nkeep > 0) {
        masks = arena_alloc(x->g->arena, (size_t)layers * (size_t)c->nkeep);
        for (int l = 0; l < layers; l++)
            memcpy(masks + (size_t)l * (size_t)c->nkeep, plan_choice_mask(c, l), (size_t)c->nkeep);
    }
    return remat_apply(x->g, pol, layers, masks, c->nkeep, &x->bs->remat);
}

static int run_shard(PassCtx *x) {
    ShardSpec s = {x->p->spec.ranks > 1 ? x->p->spec.ranks : 1, x->c->zero};
    return shard_apply(x->g, &s, &x->bs->shard);
}

static int run_buckets(PassCtx *x) {
    return buckets_apply(x->g, x->c->bucket_bytes > 0 ? x->c->bucket_bytes : BUCKET_DEFAULT_BYTES,
                         &x->bs->buckets);
}

static int run_offload(PassCtx *x) { return offload_apply(x->g, &x->c->offload, &x->bs->offload); }
// No eval phase for a rank of ZeRO 3, whose parameters are shards between the phases
// that gather them (below it every rank holds the whole parameters after its step), nor
// for a planner's bound.
static int run_eval(PassCtx *x) {
    if ((x->p->spec.ranks > 1 && x->c->zero >= 3) || x->bound)
        return 0;
    return eval_apply(x->g, &x->bs->eval);
}
// The decode phase, for one process (a rank's plan has none) and not for a bound.
static int run_decode(PassCtx *x) {
    if (x->p->spec.ranks > 1 || x->bound)
        return 0;
    return decode_apply(x->g, x->p->spec.decode_len, &x->bs->decode);
}
static int run_reference(PassCtx *x) { return reference_apply(x->g, &x->bs->reference); }
static int run_fuse(PassCtx *x) { return x->p->spec.no_fusion ? 0 : fuse_apply(x->g, &x->bs->fuse); }
static int run_early_update(PassCtx *x) {
    return x->c->early_update ? early_update_apply(x->g, &x->bs->early) : 0;
}
static int run_schedule(PassCtx *x) { return schedule_apply(x->g, &x->bs->schedule); }
static int run_liveness(PassCtx *x) { return liveness_apply(x->g, true); }
static int run_alloc(PassCtx *x) { return alloc_within(x->g, x->enough[0], x->enough[1], &x->bs->alloc); }
static int run_streams(PassCtx *x) { return streams_apply(x->g, &x->bs->streams); }

// The passes in order: name, entry, what it depends on: PREFIX passes only on the
// train section, the micro-batch and the tiles (their result is cached across choices), CHOICE
// passes on the planner's choice, PLACE (the offsets) too but a candidate that cannot
// fit or win needs only the liveness bound, FINAL passes change nothing the planner
// measures and run only for a plan to be written.
enum { PREFIX, CHOICE, PLACE, FINAL };

#define PASSES(X)                                                                        \
    X(lora, run_lora, PREFIX)                                                            \
    X(tile, run_tile, PREFIX)                                                            \
    X(fuse_loss, run_fuse_loss, PREFIX)                                                  \
    X(autodiff, run_autodiff, PREFIX)                                                    \
    X(quantize, run_quantize, PREFIX)                                                    \
    X(chunk_loss, run_chunk_loss, CHOICE)                                                \
    X(remat, run_remat, CHOICE)                                                          \
    X(eval, run_eval, CHOICE)                                                            \
    X(decode, run_decode, CHOICE)                                                        \
    X(reference, run_reference, CHOICE)                                                  \
    X(shard, run_shard, CHOICE)                                                          \
    X(offload, run_offload, CHOICE)                                                      \
    X(fuse, run_fuse, CHOICE)                                                            \
    X(early_update, run_early_update, CHOICE)                                            \
    X(schedule, run_schedule, CHOICE)                                                    \
    X(buckets, run_buckets, CHOICE)                                                      \
    X(liveness, run_liveness, CHOICE)                                                    \
    X(alloc, run_alloc, PLACE)                                                          \
    X(streams, run_streams, FINAL)

static const struct {
    const char *name;
    PassFn run;
    int kind;
} passes[] = {
#define ROW(name, fn, kind) {#name, fn, kind},
    PASSES(ROW)
#undef ROW
};
enum { NPASSES = sizeof passes / sizeof passes[0] };

const char *const *pipeline_stages(int *n) {
    static const char *const names[] = {
        "elaborate",
#define NAME(name, fn, kind) #name,
        PASSES(NAME)
#undef NAME
    };
    *n = NPASSES + 1;
    return names;
}

// After stage `name`: the IR when asked, and the verifier when asked. False when the
// verifier found problems (an internal error: reported, the build fails).
static bool after(const Pipeline *p, const char *name, const IrGraph *g) {
    if (p->dump_to && p->dump_after && (!strcmp(p->dump_after, "all") || !strcmp(p->dump_after, name))) {
        fprintf(p->dump_to, "# after %s\n", name);
        ir_print(p->dump_to, g);
    }
    if (p->verify && ir_verify(g, stderr) != 0) {
        fprintf(stderr, "ftc: internal error: the IR failed verification after %s\n", name);
        return false;
    }
    return true;
}

static void ignore(void *ctx, SrcLoc loc, const char *msg) { (void)ctx, (void)loc, (void)msg; }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void timed(const Pipeline *p, int stage, int64_t since) {
    if (p->times) {
        p->times->ns[stage] += now_ns() - since;
        p->times->runs[stage]++;
    }
}

// Runs passes [from, to) on g (the stages after elaborate); false after errors.
static bool run_passes(const Pipeline *p, PassCtx *x, int from, int to, bool *stopped) {
    for (int i = from; i < to && !*stopped; i++) {
        if ((passes[i].kind == FINAL && !p->final) || (passes[i].kind == PLACE && x->unplaced))
            continue;
        int64_t t0 = now_ns();
        bool ok = passes[i].run(x) == 0;
        timed(p, i + 1, t0);
        if (!ok || !after(p, passes[i].name, x->g))
            return false;
        *stopped = p->stop_after && !strcmp(p->stop_after, passes[i].name);
    }
    return true;
}

// The first pass of `kind` (the table is in kind order).
static int first_of(int kind) {
    int i = 0;
    while (i < NPASSES && passes[i].kind < kind)
        i++;
    return i;
}

static int prefix_end(void) { return first_of(CHOICE); }

// Elaborates and runs the prefix passes into arena `a`; NULL after errors.
static IrGraph *build_prefix(const Pipeline *p, const PlanChoice *c, Arena *a, BuildStats *bs,
                             bool *stopped) {
    int64_t t0 = now_ns();
    IrGraph *g = p->elaborate(p->ctx, c->micro, p->spec.seq, a);
    if (!g)
        return NULL;
    g->gemm_workspace_bytes = p->spec.gemm_workspace_bytes;
    if (p->spec.adamw8bit && g->step.optim_states == 2 && !g->step.adam8)
        g->step.adam8 = true, g->step.adam8_min_elems = IR_ADAM8_MIN_ELEMS;
    if (p->spec.no_kahan)
        g->step.kahan = false;
    timed(p, 0, t0);
    PassDiag quiet = {ignore, NULL, 0};
    PassCtx x = {.g = g, .p = p, .c = c, .bs = bs, .d = p->diag ? p->diag : &quiet};
    *stopped = p->stop_after && !strcmp(p->stop_after, "elaborate");
    if (!after(p, "elaborate", g) || !run_passes(p, &x, 0, prefix_end(), stopped)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

typedef struct Prefix {
    int64_t micro;
    int64_t *tiles;         // each block's tiles (nlayers of them; 1: none)
    int nlayers;
    Arena *arena;
    IrGraph *g;
    BuildStats bs;
} Prefix;

struct PipelineCache {
    pthread_mutex_t lock;
    VEC(Prefix *) at;       // entries never move and never change once added
};

PipelineCache *pipeline_cache_new(void) {
    PipelineCache *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void prefix_free(Prefix *e) {
    free(e->tiles);
    ir_graph_free(e->g);
    arena_free(e->arena);
    free(e);
}

void pipeline_cache_free(PipelineCache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->at.len; i++)
        prefix_free(c->at.at[i]);
    vec_free(&c->at);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static bool same_prefix(const Prefix *e, const PlanChoice *c) {
    if (e->micro != c->micro)
        return false;
    for (int l = 0; l < e->nlayers; l++)
        if (e->tiles[l] != plan_choice_tile(c, l))
            return false;
    return true;
}

static const Prefix *lookup(PipelineCache *cache, const PlanChoice *c) {
    const Prefix *hit = NULL;
    pthread_mutex_lock(&cache->lock);
    for (int i = 0; i < cache->at.len && !hit; i++)
        if (same_prefix(cache->at.at[i], c))
            hit = cache->at.at[i];
    pthread_mutex_unlock(&cache->lock);
    return hit;
}

// The cached prefix for c's micro-batch, built (outside the lock) when missing.
static const Prefix *cached(const Pipeline *p, const PlanChoice *c) {
    PipelineCache *cache = p->cache;
    const Prefix *hit = lookup(cache, c);
    if (hit)
        return hit;
    Prefix *e = xcalloc(1, sizeof *e);
    e->micro = c->micro;
    e->arena = arena_new();
    bool stopped = false;
    e->g = build_prefix(p, c, e->arena, &e->bs, &stopped);
    if (!e->g) {
        arena_free(e->arena);
        free(e);
        return NULL;
    }
    e->nlayers = ir_layers(e->g);
    e->tiles = xmalloc(sizeof(int64_t) * (size_t)(e->nlayers + 1));
    for (int l = 0; l < e->nlayers; l++)
        e->tiles[l] = plan_choice_tile(c, l);
    pthread_mutex_lock(&cache->lock);
    for (int i = 0; i < cache->at.len && !hit; i++)   // another thread may have won
        if (same_prefix(cache->at.at[i], c))
            hit = cache->at.at[i];
    if (!hit)
        vec_push(&cache->at, e);
    pthread_mutex_unlock(&cache->lock);
    if (hit) {
        prefix_free(e);
        return hit;
    }
    return e;
}

// Builds c through every pass but, when `unplaced`, the PLACE ones.
static IrGraph *build_choice(const Pipeline *p, const PlanChoice *c, Arena *a, BuildStats *bs, bool unplaced,
                             bool bound) {
    _Static_assert(NPASSES + 1 <= PIPELINE_MAX_STAGES, "PassTimes holds every stage");
    memset(bs, 0, sizeof *bs);
    bool stopped = false;
    IrGraph *g;
    if (p->cache && !p->dump_after && !p->verify && !p->diag && !p->stop_after) {
        const Prefix *e = cached(p, c);
        if (!e)
            return NULL;
        g = ir_graph_clone(e->g, a);
        *bs = e->bs;
    } else {
        g = build_prefix(p, c, a, bs, &stopped);
        if (!g)
            return NULL;
    }
    PassDiag quiet = {ignore, NULL, 0};
    PassCtx x = {.g = g, .p = p, .c = c, .bs = bs, .d = p->diag ? p->diag : &quiet, .unplaced = unplaced,
                 .bound = bound};
    if (!run_passes(p, &x, prefix_end(), NPASSES, &stopped)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

IrGraph *pipeline_build(const Pipeline *p, const PlanChoice *c, Arena *a, BuildStats *bs) {
    return build_choice(p, c, a, bs, false, false);
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

// The device bytes live at the first backward node: what the forward left for it (every
// block's kept tensors, adding up block by block) and the head's, a floor of the peak.
static int64_t backward_start_bytes(const IrGraph *g) {
    int at = 0;
    while (at < g->nodes.len && g->nodes.at[at].phase != PHASE_BACKWARD)
        at++;
    if (at == g->nodes.len)
        return 0;
    int64_t live[MEM_COUNT], sum = 0;
    peak_breakdown(g, at, live);
    for (int k = 0; k < MEM_COUNT; k++)
        sum += live[k];
    return sum;
}

// The peaks region by region (RegionPeaks), `add` added to each.
static void region_peaks(const IrGraph *g, int64_t add, RegionPeaks *rp) {
    int n = g->nodes.len, L = ir_layers(g);
    int64_t *live = xmalloc(sizeof(int64_t) * ((size_t)n + 1));
    alloc_live(g, live);
    rp->pre = rp->head = rp->tail = 0;
    for (int l = 0; l < L; l++)
        rp->fwd[l] = rp->bwd[l] = 0;
    bool blocks_seen[2] = {false, false};   // (forward, backward)
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        if (nd->phase == PHASE_EVALUATION)
            continue;
        bool bwd = nd->phase != PHASE_FORWARD;
        int64_t v = live[i] + add, *at;
        if (nd->layer >= 0 && nd->layer < L)
            at = bwd ? &rp->bwd[nd->layer] : &rp->fwd[nd->layer], blocks_seen[bwd] = true;
        else
            at = !bwd ? (blocks_seen[0] ? &rp->head : &rp->pre) : blocks_seen[1] ? &rp->tail : &rp->head;
        if (v > *at)
            *at = v;
    }
    free(live);
}

int pipeline_plan_choice(void *vctx, const PlanChoice *c, const BuildNeed *need, PlanOutcome *out) {
    const PlanCtx *x = vctx;
    const Pipeline *p = x->pipeline;
    const PipelineSpec *s = &p->spec;
    Arena *a = arena_new();
    BuildStats bs;
    bool staged = need && !p->stop_after;   // (a build stopped early has nothing to place)
    IrGraph *g = build_choice(p, c, a, &bs, staged, need && need->bound);
    if (!g) {
        arena_free(a);
        return -1;
    }
    memset(out, 0, sizeof *out);
    int64_t reserve = x->gpu->reserve_bytes + link_reserve_bytes(s->ranks);
    CostModel cm = x->cm;
    if (need && need->bound)
        cm.link = NULL;
    out->cost = cost_step(g, &cm, s->global_batch / (c->micro * (s->ranks > 1 ? s->ranks : 1)),
                          s->global_batch * s->seq);
    out->placed = true;
    out->smallest = !staged;
    int peak_at = bs.alloc.lower_bound_at;
    if (staged) {
        // The bounds first: a candidate over a budget by its bound cannot fit, one no
        // faster than the bar cannot win; only the others are placed.
        int64_t t0 = p->times ? now_ns() : 0;
        int64_t bound[2];
        alloc_bounds(g, bound, &peak_at);
        int64_t dev = bound[0], host = bound[1];
        bool over = dev + reserve > need->budget_bytes || host > need->host_budget_bytes;
        bool slow = need->bar_us > 0 && out->cost.step_us >= need->bar_us;
        if (p->times)   // the bound's time is alloc's (its runs count the placements)
            p->times->ns[first_of(PLACE) + 1] += now_ns() - t0;
        if (over || slow) {
            out->placed = false;
            bs.alloc.arena_bytes = dev, bs.alloc.host_bytes = host;
        } else {
            bool stopped = false;
            PassDiag quiet = {ignore, NULL, 0};
            // Placed to settle the fit: the first order that fits will do (the plan
            // written is placed again, the best of every order).
            PassCtx px = {.g = g, .p = p, .c = c, .bs = &bs, .d = &quiet,
                          .enough = {need->budget_bytes - reserve, need->host_budget_bytes}};
            if (!run_passes(p, &px, first_of(PLACE), first_of(FINAL), &stopped)) {
                ir_graph_free(g);
                arena_free(a);
                return -1;
            }
            peak_at = bs.alloc.lower_bound_at;
            out->smallest = !bs.alloc.cut;
        }
    }
    out->device_bytes = bs.alloc.arena_bytes + reserve;
    out->host_bytes = bs.alloc.host_bytes;
    out->remat = bs.remat;
    peak_breakdown(g, peak_at, out->live);
    out->live[MEM_RESERVE] = reserve;
    if (need && need->bound)   // (what the per-block search prices a mask by)
        out->backward_start_bytes = backward_start_bytes(g) + reserve;
    if (need && need->bound && need->peaks)
        region_peaks(g, reserve, need->peaks);
    if (bs.fused_loss)
        out->loss_chunk = bs.loss_chunk_rows, out->loss_rows = bs.loss_rows;
    out->tile = bs.tile;
    ir_graph_free(g);
    arena_free(a);
    return 0;
}
