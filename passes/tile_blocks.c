// tile_blocks.c — the sequence tiles chosen block by block.
//
// Why. A block's tiles shrink its working set (its MLP's intermediates and their
// gradients are a tile's) and cost time: T GEMMs of S/T rows, T times the launches, the
// slices' joins and the gradients' sums. But the blocks' peaks differ: block l's forward
// and backward run with what every earlier block keeps still live (its input where it
// recomputes, its tensors where it keeps), so the last blocks' regions hold the most and
// the first blocks' the least. A count sized for the worst block tiles the others for
// nothing, and a plan whose cheaper recompute fails at T tiles only in some blocks fits
// with more tiles in those.
//
// How. For each seed — the fastest plan that fits, and the fastest few faster than it
// that do not — its choice is priced with every block at each count the search tried
// (bound builds, peaks region by region: RegionPeaks). A block's tiles leave what it
// keeps as it was (a tile keeps the slices of the untiled tensors; the joins are the
// untiled outputs), so a mixed plan's peak in block l's forward and backward is
// predicted as the uniform plan's there at block l's count; before and after the blocks
// as block 0's count's; at the loss, the last block's. Each block takes the fewest tiles
// predicted to fit, and the step is predicted as the blend of the uniform steps block by
// block. With what each block keeps fixed, the blocks' choices do not interact, so no
// DP is needed (keep_masks.c needs one: there a block's choice is what it keeps). The
// assignment is built and placed; one over the budget is asked again under a budget
// smaller by its excess, TRIES times at most. Chosen where faster than every plan the
// search found (the build the judge).
//
// Not per phase: the tile pass writes the forward before autodiff, which derives each
// tile's backward from the tile's own forward nodes, and recompute re-runs those nodes.
// A forward untiled under a tiled backward would need autodiff to differentiate nodes
// the forward does not run (a backward-only copy of the tail), a mechanism of its own in
// autodiff and remat, for what the cost model prices at a fraction of 1% of the tail's
// forward GEMMs at tiles of TILE_MIN_ROWS tokens or more.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

enum { SEEDS = 4, TRIES = 3 };

typedef VEC(Candidate) Candidates;

// One seed's uniform plans, a count each: their steps and peaks region by region.
typedef struct Uniform {
    double us;
    int64_t host_bytes;
    int64_t pre, head, tail;
    int64_t *fwd, *bwd;         // nlayers each
} Uniform;

// Prices seed c with every block at `tiles` into *u; false where it cannot be built.
static bool price(const PlannerInput *in, const PlanChoice *c, int64_t tiles, Uniform *u) {
    PlanChoice x = *c;
    x.tile = tiles, x.tile_blocks = NULL;
    RegionPeaks rp = {.fwd = u->fwd, .bwd = u->bwd};
    BuildNeed need = {.bound = true, .peaks = &rp};
    PlanOutcome o;
    if (in->build(in->ctx, &x, &need, &o) != 0)
        return false;
    u->us = o.cost.step_us, u->host_bytes = o.host_bytes;
    u->pre = rp.pre, u->head = rp.head, u->tail = rp.tail;
    return true;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Each block's count (an index into u) predicted to fit `budget`, the fewest tiles
// first, into at[]; the blend of the steps into *us. False where some block fits at no
// count.
static bool assign(const PlannerInput *in, const Uniform *u, int nu, int64_t budget, int *at, double *us) {
    int L = in->nlayers;
    for (int l = 0; l < L; l++) {
        at[l] = 0;
        while (at[l] < nu && max64(u[at[l]].fwd[l], u[at[l]].bwd[l]) > budget)
            at[l]++;
        if (at[l] == nu)
            return false;
    }
    while (at[0] < nu && max64(u[at[0]].pre, u[at[0]].tail) > budget)
        at[0]++;
    while (at[L - 1] < nu && u[at[L - 1]].head > budget)
        at[L - 1]++;
    if (at[0] == nu || at[L - 1] == nu)
        return false;
    *us = 0;
    for (int l = 0; l < L; l++)
        *us += u[at[l]].us / L;
    return true;
}

// Whether a and b are one choice but for their tiles and the loss's chunk (which the
// search tries larger on its chosen plan only, where it is at least 1% faster).
static bool same_but_tiles(const PlanChoice *a, const PlanChoice *b) {
    return a->micro == b->micro && a->policy == b->policy && a->n_policy == b->n_policy && a->rest == b->rest &&
           !memcmp(&a->offload, &b->offload, sizeof a->offload) && a->zero == b->zero &&
           a->bucket_bytes == b->bucket_bytes && a->keep == b->keep && a->keep_rest == b->keep_rest &&
           a->early_update == b->early_update;
}

// The seeds: r's best, then the fastest candidates faster than it that do not fit (of
// choices apart from their tiles), at most SEEDS in all; their indices into r->tried.
static int seeds(const PlannerResult *r, int *out) {
    int n = 0;
    double bar = r->best >= 0 ? r->tried.at[r->best].o.cost.step_us : 0;
    if (r->best >= 0)
        out[n++] = r->best;
    while (n < SEEDS) {
        int pick = -1;
        for (int i = 0; i < r->tried.len; i++) {
            const Candidate *x = &r->tried.at[i];
            if (x->fits || x->slower || x->declined || x->c.per_layer || x->c.keep_blocks || x->c.tile_blocks ||
                (bar > 0 && x->o.cost.step_us >= bar))
                continue;
            bool seen = false;
            for (int k = 0; k < n && !seen; k++)
                seen = same_but_tiles(&r->tried.at[out[k]].c, &x->c);
            if (!seen && (pick < 0 || x->o.cost.step_us < r->tried.at[pick].o.cost.step_us))
                pick = i;
        }
        if (pick < 0)
            break;
        out[n++] = pick;
    }
    return n;
}

// Seed c's block-by-block plans, each built into `tried` (counts in `a`); *bar the
// fastest plan that fits so far (0: none), which a plan must beat to be placed.
static void from_seed(const PlannerInput *in, const PlanChoice *c, const int64_t *counts, int ncounts,
                      Arena *a, Candidates *tried, double *bar) {
    int L = in->nlayers;
    Uniform u[32];
    int64_t *peaks = xmalloc(sizeof(int64_t) * 2 * (size_t)L * (size_t)ncounts);
    int nu = 0;
    for (int k = 0; k < ncounts; k++) {
        u[k].fwd = peaks + (size_t)(2 * k) * (size_t)L, u[k].bwd = peaks + (size_t)(2 * k + 1) * (size_t)L;
        if (!price(in, c, counts[k], &u[k]))
            break;
        nu++;
    }
    int *at = xmalloc(sizeof(int) * (size_t)L);
    int64_t budget = in->budget_bytes, *prev = NULL;
    double us;
    for (int tries = 0; nu > 0 && u[nu - 1].host_bytes <= in->host_budget_bytes && tries < TRIES; tries++) {
        if (!assign(in, u, nu, budget, at, &us) || (*bar > 0 && us >= *bar))
            break;
        bool mixed = false;
        for (int l = 1; l < L; l++)
            mixed |= at[l] != at[0];
        if (!mixed)   // (a uniform count: the search's own)
            break;
        int64_t *per = arena_alloc(a, sizeof(int64_t) * (size_t)L);
        for (int l = 0; l < L; l++)
            per[l] = counts[at[l]];
        if (prev && !memcmp(prev, per, sizeof(int64_t) * (size_t)L))
            break;   // (the excess is not where the prediction looks)
        prev = per;
        Candidate x = {.c = *c};
        x.c.tile = 0, x.c.tile_blocks = per;
        BuildNeed need = {.budget_bytes = in->budget_bytes, .host_budget_bytes = in->host_budget_bytes,
                          .bar_us = *bar};
        if (in->build(in->ctx, &x.c, &need, &x.o) != 0)
            break;
        bool within = x.o.device_bytes <= in->budget_bytes && x.o.host_bytes <= in->host_budget_bytes;
        x.fits = x.o.placed && within;
        x.slower = !x.o.placed && within;
        vec_push(tried, x);
        if (x.fits)
            *bar = x.o.cost.step_us;
        if (x.fits || x.slower || x.o.device_bytes <= in->budget_bytes)
            break;
        budget -= x.o.device_bytes - in->budget_bytes;
    }
    free(at), free(peaks);
}

bool tile_blocks_search(const PlannerInput *in, PlannerResult *r, const int64_t *counts, int ncounts, Arena *a) {
    if (in->nlayers < 2 || ncounts < 2 || ncounts > 32)
        return false;
    int seed[SEEDS], ns = seeds(r, seed);
    double bar = r->best >= 0 ? r->tried.at[r->best].o.cost.step_us : 0;
    Candidates tried = {0};
    for (int s = 0; s < ns; s++) {
        PlanChoice c = r->tried.at[seed[s]].c;
        from_seed(in, &c, counts, ncounts, a, &tried, &bar);
    }
    int won = -1;
    for (int i = 0; i < tried.len; i++) {
        int at = r->tried.len;
        vec_push(&r->tried, tried.at[i]);
        const Candidate *x = &r->tried.at[at];
        if (x->fits && (r->best < 0 || x->o.cost.step_us < r->tried.at[r->best].o.cost.step_us))
            r->best = won = at;
        if (r->smallest < 0 || (x->o.placed && x->o.device_bytes < r->tried.at[r->smallest].o.device_bytes))
            r->smallest = at;
    }
    vec_free(&tried);
    return won >= 0;
}
