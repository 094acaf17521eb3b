// planner.c — the fastest plan that fits the budget.
//
// The choices: the micro-batch (a divisor of the global batch; the rest is
// accumulation), the recompute policy of each block (keep, selective, full; blocks are
// identical, so a mixed plan is "the first k blocks one way, the rest another"), and
// the offload level (nothing; optimizer state and master weights on the host; and the
// gradients too). For each offload level whose model states fit on the device at all,
// and each policy, a binary search finds the largest micro-batch that fits; where the
// cheaper policy stops fitting at that micro-batch, a second binary search finds how
// many blocks can keep it. Every choice tried is scheduled and priced by the caller's
// build function, but placed (offsets) only where it could matter: a candidate whose
// liveness bound exceeds a budget cannot fit, and one no faster than the fastest plan
// that fits cannot win. Bounds prune whole searches too: each (stage, offload level)
// is first priced at its most generous setting (no recompute, the largest micro-batch,
// not placed), the levels are searched fastest bound first, and a level, or a mixed
// search, whose bound is no faster than the best plan found so far is skipped. The
// fastest by the cost model wins. The binary searches of one level are independent of
// each other, so they run on several threads; the candidates are merged in a fixed
// order, so the result does not depend on timing.
#include "passes.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The levels: offload none, optimizer, grads, weights; and LEVEL_EARLY, offload none with
// each update inside backward (one micro-step: the largest micro-batch only).
enum { LEVELS = 5, LEVEL_EARLY = 4 };
static const OffloadSpec levels[LEVELS] = {{false, false, false}, {true, false, false}, {true, true, false},
                                           {true, true, true}, {false, false, false}};

// The level of choice c.
static int level_of(const PlanChoice *c) {
    if (c->early_update)
        return LEVEL_EARLY;
    int lv = 0;
    while (lv < LEVEL_EARLY && memcmp(&levels[lv], &c->offload, sizeof c->offload))
        lv++;
    return lv;
}

const uint8_t *plan_choice_mask(const PlanChoice *c, int l) {
    return c->keep_blocks ? c->keep_blocks + (size_t)l * (size_t)c->nkeep
           : c->keep_rest && l >= c->n_policy ? c->keep_rest
                                              : c->keep;
}

int64_t plan_choice_tile(const PlanChoice *c, int l) {
    int64_t t = c->tile_blocks ? c->tile_blocks[l] : c->tile;
    return t > 1 ? t : 1;
}

// Each run of blocks with the same tiles as "T<sep>N", the runs joined by `join`; with
// `spec`, the last run without its N (the blocks left, as --tile reads it). Returns the
// characters written.
static int tile_runs(char *buf, size_t cap, const PlanChoice *c, int nlayers, const char *sep, const char *join,
                     bool spec) {
    int n = 0;
    buf[0] = '\0';
    for (int l = 0; l < nlayers && n >= 0 && (size_t)n < cap;) {
        int s = l;
        while (l < nlayers && plan_choice_tile(c, l) == plan_choice_tile(c, s))
            l++;
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", s ? join : "", (long long)plan_choice_tile(c, s));
        if ((!spec || l < nlayers) && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "%s%d", sep, l - s);
    }
    return n;
}

bool planner_tile_spec(char *buf, size_t cap, const PlanChoice *c, int nlayers) {
    bool tiled = false;
    for (int l = 0; l < nlayers; l++)
        tiled |= plan_choice_tile(c, l) > 1;
    if (!tiled || cap == 0)
        return false;
    int n = tile_runs(buf, cap, c, nlayers, "x", "+", true);
    return n > 0 && (size_t)n < cap;
}

// "tensors (K of M kept a block xN + J xR ...)": each run of blocks keeping as many.
static void tensors_str(char *buf, size_t cap, const PlanChoice *c, int nlayers) {
    int n = snprintf(buf, cap, "tensors (");
    for (int l = 0; l < nlayers && n > 0 && (size_t)n < cap;) {
        int kept = 0, run = 0;
        for (int j = 0; j < c->nkeep; j++)
            kept += plan_choice_mask(c, l)[j];
        for (; l < nlayers && !memcmp(plan_choice_mask(c, l), plan_choice_mask(c, l - run), (size_t)c->nkeep); l++)
            run++;
        if (run == nlayers)
            n += snprintf(buf + n, cap - (size_t)n, "%d of %d kept a block", kept, c->nkeep);
        else if (l - run == 0)
            n += snprintf(buf + n, cap - (size_t)n, "%d of %d kept a block x%d", kept, c->nkeep, run);
        else
            n += snprintf(buf + n, cap - (size_t)n, " + %d x%d", kept, run);
    }
    if (n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ")");
}

// One block's mask as K^I,J: the chain mask nearest it (fewest flips; K its kept count),
// and the candidates flipped from it.
static int mask_spec(char *buf, size_t cap, const uint8_t *m, const uint8_t *chain, int nchain, int nkeep) {
    int best = 0, bd = nkeep + 1;
    for (int k = 0; k < nchain; k++) {
        int d = 0;
        for (int j = 0; j < nkeep; j++)
            d += chain[(size_t)k * (size_t)nkeep + (size_t)j] != m[j];
        if (d < bd)
            best = k, bd = d;
    }
    int n = snprintf(buf, cap, "%d", nkeep - best);
    for (int j = 0, f = 0; j < nkeep && n > 0 && (size_t)n < cap; j++)
        if (chain[(size_t)best * (size_t)nkeep + (size_t)j] != m[j])
            n += snprintf(buf + n, cap - (size_t)n, "%c%d", f++ ? ',' : '^', j);
    return n;
}

bool planner_tensors_spec(char *buf, size_t cap, const PlanChoice *c, int nlayers, const uint8_t *chain,
                          int nchain) {
    if (c->policy != REMAT_TENSORS || !(c->keep || c->keep_blocks) || nchain < 1 || cap == 0)
        return false;
    int n = 0;
    buf[0] = '\0';
    for (int l = 0; l < nlayers && n >= 0 && (size_t)n < cap;) {
        int run = 0;
        for (int s = l; l < nlayers && !memcmp(plan_choice_mask(c, l), plan_choice_mask(c, s), (size_t)c->nkeep); l++)
            run++;
        if (n > 0)
            n += snprintf(buf + n, cap - (size_t)n, "+");
        if ((size_t)n < cap)
            n += mask_spec(buf + n, cap - (size_t)n, plan_choice_mask(c, l - run), chain, nchain, c->nkeep);
        if (l < nlayers && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "x%d", run);
    }
    return n > 0 && (size_t)n < cap;
}

void planner_choice_str(char *buf, size_t cap, const PlanChoice *c, int nlayers) {
    char remat[320];
    if (c->policy == REMAT_TENSORS && (c->keep || c->keep_blocks))
        tensors_str(remat, sizeof remat, c, nlayers);
    else if (c->n_policy >= nlayers || c->policy == c->rest)
        snprintf(remat, sizeof remat, "%s", remat_policy_name(c->policy));
    else
        snprintf(remat, sizeof remat, "%s x%d + %s x%d", remat_policy_name(c->policy), c->n_policy,
                 remat_policy_name(c->rest), nlayers - c->n_policy);
    int n = snprintf(buf, cap, "micro-batch %lld, recompute %s, offload %s", (long long)c->micro, remat,
                     c->offload.weights     ? "optimizer+master+grads+weights"
                     : c->offload.grads     ? "optimizer+master+grads"
                     : c->offload.optimizer ? "optimizer+master"
                                            : "none");
    if (c->bucket_bytes > 0 && n > 0 && (size_t)n < cap)   // a data-parallel plan
        n += snprintf(buf + n, cap - (size_t)n, ", ZeRO-%d, buckets %lld MiB", c->zero,
                      (long long)(c->bucket_bytes >> 20));
    if (c->loss_chunk > 0 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", loss chunk %lld", (long long)c->loss_chunk);
    bool uniform = true;
    for (int l = 1; l < nlayers; l++)
        uniform &= plan_choice_tile(c, l) == plan_choice_tile(c, 0);
    if (uniform && plan_choice_tile(c, 0) > 1 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", %lld sequence tiles", (long long)plan_choice_tile(c, 0));
    else if (!uniform && n > 0 && (size_t)n < cap) {
        char runs[256];
        tile_runs(runs, sizeof runs, c, nlayers, " x", " + ", false);
        n += snprintf(buf + n, cap - (size_t)n, ", sequence tiles %s", runs);
    }
    if (c->early_update && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", updates in backward");
}

static bool same_choice(const PlanChoice *a, const PlanChoice *b) {
    return a->micro == b->micro && a->policy == b->policy && a->n_policy == b->n_policy &&
           a->rest == b->rest && a->offload.optimizer == b->offload.optimizer &&
           a->offload.grads == b->offload.grads && a->offload.weights == b->offload.weights &&
           a->per_layer == b->per_layer && a->keep == b->keep && a->keep_rest == b->keep_rest &&
           a->keep_blocks == b->keep_blocks &&
           a->loss_chunk == b->loss_chunk && a->zero == b->zero && a->bucket_bytes == b->bucket_bytes &&
           a->early_update == b->early_update && a->tile == b->tile && a->tile_blocks == b->tile_blocks;
}

// The buckets' size a candidate starts with: none for one rank.
static int64_t bucket(const PlannerInput *in) { return in->ranks > 1 ? BUCKET_DEFAULT_BYTES : 0; }

// Policy `pol` in every block at micro-batch `micro`, offload level `lv`, ZeRO stage `z`.
static PlanChoice uniform(const PlannerInput *in, int64_t micro, int pol, int lv, int z) {
    PlanChoice c = {.micro = micro, .policy = (RematPolicy)pol, .n_policy = in->nlayers,
                    .rest = (RematPolicy)pol, .offload = levels[lv], .zero = z, .bucket_bytes = bucket(in),
                    .early_update = lv == LEVEL_EARLY, .tile = in->tile, .tile_blocks = in->tile_blocks};
    if (pol == REMAT_TENSORS && in->tensors_masks)   // the user's masks
        c.keep_blocks = in->tensors_masks, c.nkeep = in->nkeep;
    return c;
}

// Plan `base` at micro-batch `micro` keeping every tensor: the first of the keep chain.
static PlanChoice keep_all(const PlannerInput *in, const PlanChoice *base, int64_t micro) {
    PlanChoice c = *base;
    c.micro = micro;
    c.policy = c.rest = REMAT_KEEP;
    c.n_policy = in->nlayers;
    c.per_layer = NULL, c.keep = c.keep_rest = NULL, c.nkeep = 0, c.chain_at = c.chain_rest = 0;
    c.loss_chunk = in->loss_chunk;
    return c;
}

// One piece of the search, run on a planning thread: a level's bound; a binary search
// over micro-batch sizes for one (level, policy), over the number of blocks keeping the
// faster policy of a pair, or over the keep masks of per-tensor recompute at one
// micro-batch.
typedef enum { JOB_BOUND, JOB_MICRO, JOB_PAIR, JOB_TENSORS } JobKind;

typedef struct Job {
    JobKind kind;
    const PlannerInput *in;
    const int64_t *micros;
    int nm;
    int level;
    int zero;               // the ZeRO stage (several ranks)
    int fast, slow, m;      // the policies (JOB_MICRO, JOB_BOUND: slow) and the micro-batch index
    PlanChoice base;        // JOB_TENSORS: the plan whose masks are tried (at micros[m])
    double bar_us;          // the fastest plan that fits so far (0: none): nothing slower is placed
    VEC(Candidate) tried;   // in the order tried
    int fit_at;             // JOB_MICRO: index of the largest fitting micro, or -1; JOB_TENSORS:
                            // the first mask that fits, or -1 ...
    bool unknown;           // ... JOB_TENSORS: some mask's fit unknown (not placed, slower)
    StepCost bound;         // JOB_BOUND: the level's bound (its most generous plan, priced; a
                            // pair search's too; step_us 0: none) ...
    int64_t bound_bytes;    // ... and its device bytes (the liveness bound) ...
    int64_t bound_floor;    // ... and those live as backward starts
    StepCost slow_end;      // a pair search: the slower policy's cost at micros[m] ...
    int64_t slow_bytes;     // ... and footprint (0: not tried)
    StepCost fast_end;      // the faster's (JOB_TENSORS: keeping everything) where tried
    int64_t fast_bytes;     // already (step_us 0: the search prices it)
    bool pruned;            // a pair search not run: its bound is no faster than bar_us
    int64_t states_bytes;   // JOB_MICRO: the device bytes no micro-batch changes (a bound) ...
    int64_t over_micro;     // ... the smallest micro-batch known over the budget (0: none) ...
    int64_t over_bytes;     // ... and its device bytes
} Job;

// Builds one choice into the job's list, placed unless it cannot fit or is no faster
// than `bar_us`; its index there, or -1.
static int try_at(Job *j, const PlanChoice *c, double bar_us) {
    const PlannerInput *in = j->in;
    Candidate cand = {.c = *c};
    if (!cand.c.loss_chunk)
        cand.c.loss_chunk = in->loss_chunk;
    BuildNeed need = {.budget_bytes = in->budget_bytes, .host_budget_bytes = in->host_budget_bytes, .bar_us = bar_us};
    if (in->build(in->ctx, &cand.c, &need, &cand.o) != 0)
        return -1;
    bool within = cand.o.device_bytes <= in->budget_bytes && cand.o.host_bytes <= in->host_budget_bytes;
    cand.fits = cand.o.placed && within;
    cand.slower = !cand.o.placed && within;
    vec_push(&j->tried, cand);
    return j->tried.len - 1;
}

static int job_try(Job *j, const PlanChoice *c) { return try_at(j, c, j->bar_us); }

// A fraction w of the way from cost a to cost b (two plans at one level and micro-batch):
// what cost_step_at reads, as a mixed plan between them is estimated.
static StepCost blend(const StepCost *a, const StepCost *b, double w) {
    StepCost c = *a;
#define MIX(f) c.f = a->f + (b->f - a->f) * w
    MIX(step_us), MIX(micro_device_us), MIX(micro_link_bytes), MIX(micro_stall_us), MIX(opt_device_us);
    MIX(opt_link_bytes), MIX(host_params), MIX(host_sumsq_elems), MIX(micro_last_extra_us);
#undef MIX
    return c;
}

// The step time of the most generous plan of a search, priced and not placed (without
// the eval phase, and on several ranks with the collectives free: a bound over every
// bucket size): a bound on every choice the search can make, since recompute and smaller
// micro-batches only add work. Kept in j->bound; not listed among the candidates. 0 if it
// cannot be built (no bound).
static double price(Job *j, const PlanChoice *c) {
    const PlannerInput *in = j->in;
    PlanChoice pc = *c;
    if (!pc.loss_chunk)
        pc.loss_chunk = in->loss_chunk;
    BuildNeed need = {.bound = true};   // (budgets of 0: never placed)
    PlanOutcome o;
    if (in->build(in->ctx, &pc, &need, &o) != 0)
        return 0;
    j->bound = o.cost, j->bound_bytes = o.device_bytes, j->bound_floor = o.backward_start_bytes;
    return o.cost.step_us;
}

// Per-tensor recompute at micros[m]: the chain's first mask (the one keeping the most)
// that fits, by a binary search (the masks along the chain hold less and less). A mask
// no faster than the bar is not placed: every mask after it is slower still, so the
// search looks before it.
static void tensors_run(Job *j) {
    const PlannerInput *in = j->in;
    int64_t keep_bytes = j->fast_bytes;
    if (j->bar_us > 0) {   // keeping everything bounds every mask's time here
        PlanChoice all = keep_all(in, &j->base, j->micros[j->m]);
        double t = j->fast_end.step_us > 0 ? j->fast_end.step_us : price(j, &all);
        if (j->fast_end.step_us <= 0)
            keep_bytes = j->bound_bytes;
        if (t >= j->bar_us) {
            j->unknown = true;   // (nothing here can win; a larger micro-batch still may)
            return;
        }
    }
    // The masks' footprints fall along the chain: once one is known on each side of the
    // budget, the next probe is where the line between them crosses it (twice at most,
    // then halving again: the guard for a chain far from straight).
    int lo = 0, hi = in->nchain - 1, xl = -1, xr = -1, guided = 2;
    int64_t bl = 0, br = 0;
    if (keep_bytes > in->budget_bytes)
        xl = 0, bl = keep_bytes;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (guided > 0 && xl >= 0 && xr >= 0 && bl > in->budget_bytes && bl > br) {
            int x = xl + (int)((double)(bl - in->budget_bytes) / (double)(bl - br) * (double)(xr - xl));
            if (x >= lo && x <= hi)
                mid = x, guided--;
        }
        PlanChoice c = j->base;
        c.micro = j->micros[j->m];
        c.policy = c.rest = REMAT_TENSORS;
        c.n_policy = in->nlayers;
        c.per_layer = NULL;
        c.keep = in->chain + (size_t)mid * (size_t)in->nkeep;
        c.nkeep = in->nkeep;
        c.chain_at = mid;
        c.loss_chunk = 0;
        int id = job_try(j, &c);
        bool fits = id >= 0 && j->tried.at[id].fits, slower = id >= 0 && j->tried.at[id].slower;
        int64_t bytes = id >= 0 ? j->tried.at[id].o.device_bytes : 0;
        j->unknown |= slower;
        if (fits)
            j->fit_at = mid;
        if (fits || slower) {
            hi = mid - 1;
            xr = mid, br = bytes;
        } else {
            lo = mid + 1;
            if (id >= 0)
                xl = mid, bl = bytes;
        }
    }
}

static void job_run(Job *j) {
    const PlannerInput *in = j->in;
    j->fit_at = -1;
    if (j->kind == JOB_TENSORS) {
        tensors_run(j);
        return;
    }
    if (j->kind == JOB_BOUND) {   // a level's bound: one plan priced, not placed, not listed
        PlanChoice c = uniform(in, j->micros[j->m], j->slow, j->level, j->zero);
        price(j, &c);
        return;
    }
    if (j->kind == JOB_MICRO) {   // the largest micro-batch that fits under one policy
        int lo = 0, hi = j->nm - 1;
        while (lo <= hi) {   // (every fit known: a larger micro-batch can be faster)
            int mid = (lo + hi) / 2;
            // What scales with the micro-batch scales linearly: from the smallest micro-batch
            // known to be over, a footprint far over the budget is not built.
            if (j->over_micro > 0 && !in->exhaustive) {   // (and a larger micro-batch holds more)
                double per = (double)(j->over_bytes - j->states_bytes) / (double)j->over_micro;
                int64_t m = j->micros[mid] < j->over_micro ? j->micros[mid] : j->over_micro;
                if ((double)j->states_bytes + per * (double)m > (double)in->budget_bytes * 1.05) {
                    hi = mid - 1;
                    continue;
                }
            }
            PlanChoice c = uniform(in, j->micros[mid], j->slow, j->level, j->zero);
            int id = try_at(j, &c, 0);
            if (id >= 0 && j->tried.at[id].fits) {
                j->fit_at = mid, lo = mid + 1;
            } else {
                hi = mid - 1;
                if (id >= 0 && j->tried.at[id].o.device_bytes > in->budget_bytes)
                    j->over_micro = j->micros[mid], j->over_bytes = j->tried.at[id].o.device_bytes;
            }
        }
        return;
    }
    // Every block keeping the faster policy: a bound on the search's time, and with the
    // slower policy's footprint (slow_bytes) the two ends of a footprint nearly linear
    // in the blocks that keep the faster one — where the search looks first.
    PlanChoice all = uniform(in, j->micros[j->m], j->fast, j->level, j->zero);
    double bound = j->fast_end.step_us > 0 ? j->fast_end.step_us : price(j, &all);
    if (j->fast_end.step_us > 0)
        j->bound = j->fast_end, j->bound_bytes = j->fast_bytes;
    if (j->bar_us > 0 && bound >= j->bar_us) {
        j->pruned = true;
        return;
    }
    int L = in->nlayers, lo = 1, hi = L - 1, guess = -1, guided = 2;
    if (bound > 0 && j->slow_bytes > 0 && j->bound_bytes > j->slow_bytes) {
        guess = (int)((double)(in->budget_bytes - j->slow_bytes) * L / (double)(j->bound_bytes - j->slow_bytes));
        // Time is as nearly linear in those blocks: where even two blocks more than fit
        // would be no faster than the bar, the search cannot win. (The faster end's
        // footprint is its bound, so the blocks that fit are overestimated, not under.)
        int k = guess + 2 < L ? guess + 2 : L;
        double at = j->slow_end.step_us + (bound - j->slow_end.step_us) * (double)k / (double)L;
        if (j->bar_us > 0 && j->slow_end.step_us > 0 && at >= j->bar_us) {
            j->pruned = true;
            j->bound = blend(&j->slow_end, &j->bound, (double)k / (double)L);   // (what it stands for)
            return;
        }
    }
    while (lo <= hi) {   // as many blocks as fit keep the faster policy
        int k = guided > 0 && guess >= lo && guess <= hi ? guess : (lo + hi) / 2;
        guided--;
        PlanChoice c = uniform(in, j->micros[j->m], j->fast, j->level, j->zero);
        c.n_policy = k, c.rest = (RematPolicy)j->slow;
        int id = job_try(j, &c);   // slower than the bar: so is every smaller k
        if (id >= 0 && (j->tried.at[id].fits || j->tried.at[id].slower))
            lo = k + 1, guess = k + 1;
        else
            hi = k - 1, guess = k - 1;
    }
}

typedef struct Pool {
    Job *jobs;
    int njobs;
    _Atomic int next;
} Pool;

static void *worker(void *arg) {
    Pool *p = arg;
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->njobs;)
        job_run(&p->jobs[i]);
    return NULL;
}

// Runs the jobs on up to `threads` threads (the caller's among them).
static void run_jobs(Job *jobs, int njobs, int threads) {
    Pool pool = {.jobs = jobs, .njobs = njobs};
    atomic_init(&pool.next, 0);
    int extra = threads - 1 < njobs - 1 ? threads - 1 : njobs - 1;
    pthread_t tid[64];
    int started = 0;
    for (int t = 0; t < extra && t < 64; t++)
        if (pthread_create(&tid[started], NULL, worker, &pool) == 0)
            started++;
    worker(&pool);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

// Appends a job's candidates to the result, in the job's order (a choice tried before
// keeps its place, taking the new outcome when only that one is placed).
static void merge(PlannerResult *r, Job *j) {
    for (int i = 0; i < j->tried.len; i++) {
        const Candidate *cand = &j->tried.at[i];
        int dup = -1;
        for (int k = 0; k < r->tried.len && dup < 0; k++)
            if (same_choice(&r->tried.at[k].c, &cand->c))
                dup = k;
        if (dup >= 0 && cand->o.placed && !r->tried.at[dup].o.placed)
            r->tried.at[dup] = *cand;
        else if (dup < 0)
            vec_push(&r->tried, *cand);
    }
    vec_free(&j->tried);
    r->best = r->smallest = -1;
    for (int id = 0; id < r->tried.len; id++) {
        const Candidate *c = &r->tried.at[id];
        if (r->smallest < 0 || c->o.device_bytes < r->tried.at[r->smallest].o.device_bytes)
            r->smallest = id;
        if (c->fits && !c->declined && (r->best < 0 || c->o.cost.step_us < r->tried.at[r->best].o.cost.step_us))
            r->best = id;
    }
}

static double best_us(const PlannerResult *r) { return r->best >= 0 ? r->tried.at[r->best].o.cost.step_us : 0; }

// The least gain a refinement must bring to be chosen: 1% (below that the cost model
// cannot tell two plans apart, and the one chosen before holds less or is simpler). The
// updates inside backward must bring it too, over every plan that updates after backward
// (or be all that fits): the ordinary step can skip a step whose gradients are not finite,
// and groups its updates' launches.
#define MIN_GAIN 0.99

// A level's place in the search: its bound, the updates inside backward after every other.
static double level_key(const Job *j) { return j->level == LEVEL_EARLY ? INFINITY : j->bound.step_us; }

// Declines each plan with the updates inside backward that is not MIN_GAIN faster than
// the fastest plan that fits without them; best and smallest again.
static void decline_early(PlannerResult *r) {
    double us = 0;
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        if (c->fits && !c->declined && !c->c.early_update && (us == 0 || c->o.cost.step_us < us))
            us = c->o.cost.step_us;
    }
    for (int i = 0; us > 0 && i < r->tried.len; i++) {
        Candidate *c = &r->tried.at[i];
        if (c->c.early_update && c->fits && c->o.cost.step_us > us * MIN_GAIN)
            c->declined = true;
    }
    Job none = {0};
    merge(r, &none);
}

enum { FINALISTS = 4 };   // several ranks: the plans whose buckets are sized (see below)

// The bar a candidate must beat to matter: the fastest plan that fits, or with several
// ranks the FINALISTS-th fastest (a plan slower at the default buckets than the best can
// be the fastest at another size); 0 while there is none.
static double bar(const PlannerInput *in, const PlannerResult *r) {
    if (in->exhaustive)
        return 0;
    if (in->ranks <= 1)
        return best_us(r);
    double top[FINALISTS];   // the fastest that fit, ascending
    int n = 0;
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        double us = c->o.cost.step_us;
        if (!c->fits || c->declined || (n == FINALISTS && us >= top[n - 1]))
            continue;
        int k = n < FINALISTS ? n++ : FINALISTS - 1;
        for (; k > 0 && top[k - 1] > us; k--)
            top[k] = top[k - 1];
        top[k] = us;
    }
    return n == FINALISTS ? top[FINALISTS - 1] : 0;
}

// Per-tensor recompute on the chosen plan's offload level: at its micro-batch and each
// larger one, the chain's mask keeping the most that fits, while one fits (or may).
// Chosen where it is the fastest. The micro-batches are searched at once; those past
// the first where nothing fits are dropped.
static void refine_tensors(const PlannerInput *in, PlannerResult *r, const int64_t *micros, int nm,
                           int threads) {
    if (r->best < 0 || in->nchain < 2 || in->remat >= 0)
        return;
    const Candidate best = r->tried.at[r->best];
    int m0 = 0;
    while (m0 < nm && micros[m0] != best.c.micro)
        m0++;
    Job jobs[64];
    int nj = 0;
    for (int mi = m0; mi < nm; mi++) {
        Job tj = {.kind = JOB_TENSORS, .in = in, .micros = micros, .nm = nm, .m = mi, .base = best.c,
                  .bar_us = bar(in, r)};
        PlanChoice all = keep_all(in, &best.c, micros[mi]);   // (where tried already)
        for (int i = 0; i < r->tried.len && in->ranks <= 1; i++)
            if (same_choice(&r->tried.at[i].c, &all))
                tj.fast_end = r->tried.at[i].o.cost, tj.fast_bytes = r->tried.at[i].o.device_bytes;
        jobs[nj++] = tj;
    }
    run_jobs(jobs, nj, threads);
    bool done = false;
    for (int i = 0; i < nj; i++) {
        if (done) {
            vec_free(&jobs[i].tried);
            continue;
        }
        done = jobs[i].fit_at < 0 && !jobs[i].unknown;   // nothing fits here: nor at a larger one
        merge(r, &jobs[i]);
    }
}

// Per-tensor recompute chosen per block, on the chosen plan when it keeps tensor by tensor
// (chain position a in every block). The first blocks' saved tensors wait for backward
// longest; a late block's backward runs with every earlier block's saved tensors live, and
// there the copies its recompute makes, in bulk at its backward's start, set the peak. So
// the exact optimum (tests/bench/remat_milp.py: Checkmate's MILP over the liveness peak)
// keeps nearly everything in the last block and recomputes in the first ones. The last R
// blocks keep by a chain mask q before a (more kept), the first L - R by the mask p that
// keeps the most and fits (a binary search from q: masks along the chain hold less and
// less), for R = 1, 2, 3 (and L / 2 past 8 blocks) and every q; chosen where at least 1%
// faster than the plan before (below that the model cannot tell them apart). A pair is
// priced only where the blend of its two masks' uniform prices, block by block, is that
// much faster (the blocks' work adds up); one no faster than the best so far is not placed.
typedef struct ChainPrice {
    double us;          // the step, priced (0: not yet)
    int64_t floor;      // the device bytes live as backward starts: adds up block by block
} ChainPrice;

// Chain mask x in every block, priced (memoised in memo[x]).
static ChainPrice chain_price(const PlannerInput *in, const PlanChoice *base, int x, ChainPrice *memo) {
    if (memo[x].us == 0) {
        Job t = {.in = in};
        PlanChoice c = *base;
        c.policy = c.rest = REMAT_TENSORS, c.nkeep = in->nkeep;
        c.keep = in->chain + (size_t)x * (size_t)in->nkeep, c.chain_at = x;
        double us = price(&t, &c);
        memo[x] = us > 0 ? (ChainPrice){us, t.bound_floor} : (ChainPrice){INFINITY, INT64_MAX};
    }
    return memo[x];
}

// The chain position of the chosen plan where the per-block searches start from it (a
// per-tensor plan keeping one chain mask in every block, or full recompute: the chain's
// last mask), else -1.
static int blocks_start(const PlannerInput *in, const PlannerResult *r) {
    if (r->best < 0 || in->nchain < 2 || in->remat >= 0 || in->nlayers < 2)
        return -1;
    const PlanChoice *c = &r->tried.at[r->best].c;
    if (c->policy == REMAT_FULL && c->rest == REMAT_FULL && !c->per_layer)
        return in->nchain - 1;
    if (c->policy != REMAT_TENSORS || c->rest != REMAT_TENSORS || c->keep_rest || c->keep_blocks || c->chain_at <= 0)
        return -1;
    return c->chain_at;
}

static void refine_tensor_blocks(const PlannerInput *in, PlannerResult *r) {
    int a = blocks_start(in, r), L = in->nlayers;
    if (a < 0)
        return;
    const Candidate best = r->tried.at[r->best];
    double us = best.o.cost.step_us;
    int rs[4], nr = 0;
    for (int R = 1; R <= 3 && R < L; R++)
        rs[nr++] = R;
    if (L >= 8)
        rs[nr++] = L / 2;
    Job j = {.in = in, .bar_us = in->exhaustive ? 0 : us * MIN_GAIN};
    ChainPrice *memo = xcalloc((size_t)in->nchain, sizeof(ChainPrice));
    // A blend's bar: 1% under the uniform plan's price, then the blend of the fastest pair
    // that fits (a pair whose blend is no faster is taken as slower, and not built). A pair
    // whose bytes as backward starts (the blend of its masks' uniform ones: the blocks' kept
    // tensors add up) are over the budget cannot fit, and is not built either.
    double bar_blend = chain_price(in, &best.c, a, memo).us - us * (1 - MIN_GAIN);
    for (int ri = 0; ri < nr; ri++)
        for (int q = 0; q < a; q++) {
            int lo = q, hi = in->nchain - 1, R = rs[ri];
            ChainPrice tq = chain_price(in, &best.c, q, memo);
            while (lo <= hi) {   // (the masks along the chain hold less and less, and cost more)
                int p = (lo + hi) / 2;
                ChainPrice tp = chain_price(in, &best.c, p, memo);
                double blend = ((L - R) * tp.us + R * tq.us) / L;
                double floor = ((double)(L - R) * (double)tp.floor + (double)R * (double)tq.floor) / L;
                if (!in->exhaustive && blend >= bar_blend) {
                    hi = p - 1;
                    continue;
                }
                if (!in->exhaustive && floor > (double)in->budget_bytes) {
                    lo = p + 1;
                    continue;
                }
                PlanChoice c = best.c;
                c.policy = c.rest = REMAT_TENSORS, c.nkeep = in->nkeep;
                c.n_policy = L - R;
                c.keep = in->chain + (size_t)p * (size_t)in->nkeep, c.chain_at = p;
                c.keep_rest = in->chain + (size_t)q * (size_t)in->nkeep, c.chain_rest = q;
                int id = job_try(&j, &c);
                const Candidate *t = id >= 0 ? &j.tried.at[id] : NULL;
                bool fits = t && t->fits, slower = t && t->slower;
                if (fits && !in->exhaustive && t->o.cost.step_us < j.bar_us)
                    j.bar_us = t->o.cost.step_us, bar_blend = blend;   // (what is slower is not placed)
                if (fits || slower)
                    hi = p - 1;
                else
                    lo = p + 1;
            }
        }
    free(memo);
    for (int i = 0; i < j.tried.len; i++)   // (--exhaustive places them all)
        j.tried.at[i].declined |= j.tried.at[i].o.cost.step_us > us * MIN_GAIN;
    merge(r, &j);
}

// A keep mask per block (keep_masks.c), on the plan the searches before chose where it
// keeps tensor by tensor or recomputes fully, at its micro-batch and offload level:
// the assignment predicted fastest within the budget is built. One over it is asked
// again under a budget smaller by its excess (at least 256 B, doubled each time), TRIES
// times at most; one that fits has its masks' flips priced and the DP asked again,
// ROUNDS times at most, while it finds faster. Chosen where faster than every plan
// before (the prediction of the step is the blend the pair search trusts; the build is
// the judge), by at least 0.1% (MASK_GAIN: the step is the built plan's, not a blend, so
// the pair search's 1% is not needed; a smaller gain is the cost model's rounding). Only
// on models whose blocks x candidates are at most MASK_WORK (tiny.ft: 36; Qwen2-7B LoRA:
// 728, where the table's few hundred builds would take seconds): there the pair search
// alone.
enum { TRIES = 4, ROUNDS = 3, MASK_WORK = 256 };
#define MASK_GAIN 0.999

static void refine_keep_masks(const PlannerInput *in, PlannerResult *r, int start) {
    if (start < 0 || r->best < 0 || in->nlayers * in->nkeep > MASK_WORK)
        return;
    const Candidate best = r->tried.at[r->best];
    PlanChoice base = best.c;
    base.keep = in->chain + (size_t)start * (size_t)in->nkeep, base.keep_rest = NULL, base.keep_blocks = NULL;
    KeepTable *t = keep_table_new(in, &base);
    size_t bytes = (size_t)in->nlayers * (size_t)in->nkeep;
    Job j = {.in = in, .bar_us = in->exhaustive ? 0 : best.o.cost.step_us * MASK_GAIN};
    double bar = best.o.cost.step_us * MASK_GAIN, us;
    int64_t budget = in->budget_bytes;
    for (int tries = 0, rounds = 0; tries < TRIES && rounds < ROUNDS;) {
        uint8_t *m = xmalloc(bytes + 1);
        if (!keep_table_assign(t, budget, m, &us) || (!in->exhaustive && us >= bar)) {
            free(m);
            break;
        }
        vec_push(&r->masks, m);
        PlanChoice c = base;
        c.policy = c.rest = REMAT_TENSORS, c.n_policy = in->nlayers, c.per_layer = NULL;
        c.keep = NULL, c.keep_blocks = m, c.nkeep = in->nkeep, c.chain_at = -1;
        int id = job_try(&j, &c);
        const Candidate *x = id >= 0 ? &j.tried.at[id] : NULL;
        if (x && x->fits) {
            bar = x->o.cost.step_us, rounds++, budget = in->budget_bytes;   // (then any gain)
            if (!in->exhaustive)
                j.bar_us = bar;
            keep_table_extend(t, in, &base, m);
        } else if (x && !x->slower && x->o.device_bytes > in->budget_bytes) {
            int64_t excess = x->o.device_bytes - in->budget_bytes;
            budget -= (excess > 256 ? excess : 256) << tries++;   // (the prediction is off by more each try)
        } else {
            break;
        }
    }
    keep_table_free(t);
    merge(r, &j);
}

// The fused loss's chunk of the chosen plan: the search plans with chunks whose logits
// take at most the default cap; larger chunks (divisors of the rows, each at least half
// again the last) are tried while the plan fits and each step is at least 1% faster —
// below that the cost model cannot tell them apart, and the smaller chunk holds less.
static void refine_loss_chunk(const PlannerInput *in, PlannerResult *r) {
    if (r->best < 0 || in->loss_chunk > 0)
        return;
    const Candidate best = r->tried.at[r->best];
    int64_t rows = best.o.loss_rows, cur = best.o.loss_chunk;
    if (cur <= 0 || rows <= cur)
        return;
    double us = best.o.cost.step_us;
    for (int64_t d = cur + 1; d <= rows; d++) {
        if (rows % d || d < cur + cur / 2)
            continue;
        double b = bar(in, r);   // (several ranks: a declined chunk can still be a finalist)
        Job j = {.in = in, .bar_us = in->exhaustive ? 0 : in->ranks > 1 && b > us * MIN_GAIN ? b : us * MIN_GAIN};
        PlanChoice c = best.c;
        c.loss_chunk = d;
        int id = job_try(&j, &c);
        bool better = id >= 0 && j.tried.at[id].fits && j.tried.at[id].o.cost.step_us < us * MIN_GAIN;
        if (better)
            us = j.tried.at[id].o.cost.step_us, cur = d;
        if (!better && id >= 0)
            j.tried.at[id].declined = true;
        int kept = r->best;
        merge(r, &j);
        if (!better) {
            r->best = kept;   // (less than 1% faster: the smaller chunk stays chosen)
            break;
        }
    }
}

void planner_result_free(PlannerResult *r) {
    vec_free(&r->tried);
    vec_free(&r->bounds);
    for (int i = 0; i < r->masks.len; i++)
        free(r->masks.at[i]);
    vec_free(&r->masks);
}

// Nothing fits, and the smallest plan is what the user is shown: its bytes must be
// exact. The candidate smallest by its bound is placed, until the smallest is placed
// (a bound is at most the footprint placed, so no other can be smaller).
static void settle_smallest(const PlannerInput *in, PlannerResult *r) {
    for (;;) {
        int k = -1;
        for (int i = 0; i < r->tried.len; i++)
            if (k < 0 || r->tried.at[i].o.device_bytes < r->tried.at[k].o.device_bytes)
                k = i;
        if (k < 0 || r->tried.at[k].o.placed)
            break;
        Candidate *c = &r->tried.at[k];
        if (in->build(in->ctx, &c->c, NULL, &c->o) != 0)
            c->o = (PlanOutcome){.device_bytes = INT64_MAX, .host_bytes = INT64_MAX, .placed = true};
        c->slower = false;
        c->fits = c->o.device_bytes <= in->budget_bytes && c->o.host_bytes <= in->host_budget_bytes;
    }
    Job none = {.in = in};
    merge(r, &none);   // (best and smallest again)
}

// The divisors of a rank's share of the batch (at most 64; only in->micro where the user
// fixed it), ascending, into micros; how many.
static int micro_batches(const PlannerInput *in, int64_t per_rank, int64_t *micros) {
    int nm = 0;
    for (int64_t d = 1; d <= per_rank && nm < 64; d++)
        if (per_rank % d == 0 && (!in->micro || d == in->micro) && (!in->pairs || d % 2 == 0))
            micros[nm++] = d;
    return nm;
}

// The bound job of ZeRO stage z and offload level lv into *j, where the level is allowed and
// its model states alone can fit (a rank's share: stage 1 shards optimizer state and master
// weights, 2 the gradients too, 3 the weights too; streaming keeps little on the device) and
// its host part fits the host; false (the level counted pruned) where not. With several
// ranks, gradients on the host need them sharded first (a reduction runs on the device), and
// the weights are not streamed (a rank's weights are its shard and the gathers of the
// others'). The updates inside backward: where the step allows them (in->early), at one
// micro-step.
static bool level_job(const PlannerInput *in, PlannerResult *r, const int64_t *micros, int nm, int z, int lv,
                      bool one_step, Job *j) {
    int R = in->ranks > 1 ? in->ranks : 1;
    bool early = lv == LEVEL_EARLY;
    if (in->offload >= 0 && lv != in->offload && !(early && in->offload == 0))
        return false;
    if (early ? in->early == 0 || R > 1 || !one_step : in->early == 1)
        return false;
    if (R > 1 && ((lv == 2 && (z < 2 || in->grads_whole)) || lv == 3))
        return false;
    int64_t w = in->weights_bytes / (z >= 3 ? R : 1), gr = in->grads_bytes / (z >= 2 ? R : 1),
            os = in->states_bytes / (z >= 1 ? R : 1);
    int64_t fixed[LEVELS] = {w + gr + os, w + gr, w, 0, w + os}, host[LEVELS] = {0, os, os + gr, os + gr + w, 0};
    if (fixed[lv] + in->reserve_bytes > in->budget_bytes) {
        r->pruned_levels += !early;   // (level 0's variant)
        return false;
    }
    if (host[lv] > in->host_budget_bytes) {
        r->pruned_levels++;
        r->host_pruned++;
        if (!r->host_need || host[lv] < r->host_need)
            r->host_need = host[lv];
        return false;
    }
    // Its bound: no recompute (or the policy asked for) at the largest micro-batch.
    const int64_t *lm = early ? micros + nm - 1 : micros;   // the level's micro-batches
    int lnm = early ? 1 : nm;
    *j = (Job){.kind = JOB_BOUND, .in = in, .micros = lm, .nm = lnm, .level = lv, .zero = z,
               .states_bytes = fixed[lv] + in->reserve_bytes, .slow = in->remat >= 0 ? in->remat : REMAT_KEEP,
               .m = lnm - 1};
    return true;
}

// The bound of every (ZeRO stage z0..z1, offload level) that can fit, priced, into
// levels_by in order of their bounds (ties: stage, then level); the updates inside
// backward last, judged against the best of the others (MIN_GAIN). How many.
static int level_bounds(const PlannerInput *in, PlannerResult *r, const int64_t *micros, int nm, int z0, int z1,
                        bool one_step, int threads, Job *levels_by) {
    Job jobs[4 * LEVELS];
    int nj = 0;
    for (int z = z0; z <= z1; z++)
        for (int lv = 0; lv < LEVELS; lv++)
            nj += level_job(in, r, micros, nm, z, lv, one_step, &jobs[nj]);
    run_jobs(jobs, nj, threads);
    for (int i = 0; i < nj; i++) {
        int at = i;
        while (at > 0 && level_key(&levels_by[at - 1]) > level_key(&jobs[i])) {
            levels_by[at] = levels_by[at - 1];
            at--;
        }
        levels_by[at] = jobs[i];
    }
    return nj;
}

// The micro-batch search of policy pol at level levels_by[li]. What another level's search
// found over the budget is over here too, give or take the model states the two levels
// keep on the device: the smallest such micro-batch is where the search stops building.
static Job micro_job(const PlannerInput *in, const PlannerResult *r, const Job *levels_by, int nl, int li, int pol) {
    const Job *l = &levels_by[li];
    int z = l->zero;
    Job mj = {.kind = JOB_MICRO, .in = in, .micros = l->micros, .nm = l->nm, .level = l->level, .zero = z,
              .slow = pol, .states_bytes = l->states_bytes};
    if (pol == l->slow && l->bound_bytes > in->budget_bytes)   // (the bound's plan)
        mj.over_micro = l->micros[l->nm - 1], mj.over_bytes = l->bound_bytes;
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        const PlanChoice *o = &c->c;
        if (o->policy != (RematPolicy)pol || o->rest != (RematPolicy)pol || o->n_policy != in->nlayers ||
            o->per_layer || o->keep || o->zero != z || o->loss_chunk != in->loss_chunk ||
            o->bucket_bytes != bucket(in) || c->o.device_bytes <= in->budget_bytes)
            continue;
        int64_t there = -1;
        for (int k = 0; k < nl; k++)
            if (levels_by[k].zero == z && levels_by[k].level == level_of(o))
                there = levels_by[k].states_bytes;
        int64_t here = there < 0 ? 0 : c->o.device_bytes - there + l->states_bytes;
        if (here > in->budget_bytes && (!mj.over_micro || o->micro < mj.over_micro))
            mj.over_micro = o->micro, mj.over_bytes = here;
    }
    return mj;
}

// Appends to jobs the micro-batch searches of level levels_by[li], one per policy allowed;
// none where the level's bound is no faster than the bar (the level skipped, its bound
// kept for planner_holds). The new count.
static int add_micro_jobs(const PlannerInput *in, PlannerResult *r, const Job *levels_by, int nl, int li, Job *jobs,
                          int nj) {
    int lv = levels_by[li].level;
    double b = bar(in, r);
    if (lv == LEVEL_EARLY)
        b *= MIN_GAIN;
    if (b > 0 && levels_by[li].bound.step_us >= b) {
        r->bound_pruned++;
        if (lv != LEVEL_EARLY)   // (planner_holds' competitors: see fastest_at)
            vec_push(&r->bounds, levels_by[li].bound);
        return nj;
    }
    for (int pol = REMAT_KEEP; pol <= (in->remat == REMAT_TENSORS ? REMAT_TENSORS : REMAT_SWAP); pol++)
        if (in->remat < 0 || pol == in->remat)
            jobs[nj++] = micro_job(in, r, levels_by, nl, li, pol);
    return nj;
}

// Merges a batch of jobs: first the np pair searches (those skipped by their bound
// counted, their bounds kept), then the micro-batch searches, noting in fit_at, per
// policy, the index of the largest micro-batch that fits.
static void merge_batch(PlannerResult *r, Job *jobs, int np, int nj, int fit_at[5]) {
    for (int i = 0; i < np; i++) {
        if (jobs[i].pruned) {
            r->bound_pruned++;
            if (jobs[i].level != LEVEL_EARLY)
                vec_push(&r->bounds, jobs[i].bound);
        }
        merge(r, &jobs[i]);
    }
    for (int i = np; i < nj; i++) {
        fit_at[jobs[i].slow] = jobs[i].fit_at;
        merge(r, &jobs[i]);
    }
}

// The mixed searches of a level searched at micro-batches lm[0..lnm): at the largest
// micro-batch the more frugal policy of a pair reaches (fit_at), as many blocks as fit keep
// the faster one (every pair: recompute costs per block differ, so any pair can be the
// best). Into pend, with the ends already tried; how many.
static int pair_jobs(const PlannerInput *in, const PlannerResult *r, const int64_t *lm, int lnm, int lv, int z,
                     const int fit_at[5], Job *pend) {
    static const int pairs[5][2] = {{REMAT_KEEP, REMAT_SELECTIVE},
                                    {REMAT_SELECTIVE, REMAT_FULL},
                                    {REMAT_KEEP, REMAT_FULL},
                                    {REMAT_FULL, REMAT_SWAP},
                                    {REMAT_SELECTIVE, REMAT_SWAP}};
    int np = 0;
    for (int pi = 0; pi < 5; pi++) {
        int fast = pairs[pi][0], slow = pairs[pi][1], m = fit_at[slow];
        if (m < 0 || fit_at[fast] >= m)
            continue;
        PlanChoice sc = uniform(in, lm[m], slow, lv, z), fc = uniform(in, lm[m], fast, lv, z);
        sc.loss_chunk = fc.loss_chunk = in->loss_chunk;
        Job pj = {.kind = JOB_PAIR, .in = in, .micros = lm, .nm = lnm, .level = lv, .zero = z,
                  .fast = fast, .slow = slow, .m = m, .bar_us = bar(in, r)};
        for (int i = 0; i < r->tried.len; i++) {
            const Candidate *c = &r->tried.at[i];
            if (same_choice(&c->c, &sc) && c->o.placed)
                pj.slow_bytes = c->o.device_bytes, pj.slow_end = c->o.cost;
            if (same_choice(&c->c, &fc) && in->ranks <= 1)   // (several ranks: priced with free collectives)
                pj.fast_end = c->o.cost, pj.fast_bytes = c->o.device_bytes;
        }
        pend[np++] = pj;
    }
    return np;
}

// The levels in the order of levels_by: per level, for each policy the largest
// micro-batch that fits; then its mixed plans (pair_jobs). A level's mixed searches run
// beside the next level's micro-batch searches (the next level judged by the bar before
// them): one batch of jobs a level, and a last batch for the last level's mixed searches.
static void search_levels(const PlannerInput *in, PlannerResult *r, const Job *levels_by, int nl, int threads) {
    Job jobs[4 * LEVELS], pend[5];
    int np = 0;
    for (int li = 0; li <= nl; li++) {
        int nj = 0;
        for (int i = 0; i < np; i++)
            jobs[nj++] = pend[i];
        if (li < nl)
            nj = add_micro_jobs(in, r, levels_by, nl, li, jobs, nj);
        run_jobs(jobs, nj, threads);
        int fit_at[5] = {-1, -1, -1, -1, -1}, first = np;
        merge_batch(r, jobs, np, nj, fit_at);
        np = 0;
        if (nj > first && in->remat < 0 && in->nlayers >= 2)
            np = pair_jobs(in, r, levels_by[li].micros, levels_by[li].nm, levels_by[li].level, levels_by[li].zero,
                           fit_at, pend);
    }
}

// Up to FINALISTS indices of the fastest candidates that fit, fastest first (ties: in the
// order tried), into fin; how many.
static int finalists(const PlannerResult *r, int fin[FINALISTS]) {
    int nfin = 0;
    for (int i = 0; i < r->tried.len; i++) {   // by insertion
        const Candidate *c = &r->tried.at[i];
        if (!c->fits)
            continue;
        int at = nfin;
        while (at > 0 && r->tried.at[fin[at - 1]].o.cost.step_us > c->o.cost.step_us)
            at--;
        if (at >= FINALISTS)
            continue;
        for (int k = (nfin < FINALISTS ? nfin : FINALISTS - 1); k > at; k--)
            fin[k] = fin[k - 1];
        fin[at] = i;
        nfin += nfin < FINALISTS;
    }
    return nfin;
}

// The buckets of the fastest few (several ranks): other sizes trade the link's latency per
// call against how soon the first starts and how much is left after the last gradient
// (and, at stages 2 and 3, the whole gradients and gathered weights a bucket holds). Not
// of the fastest alone: a plan the default size slows can be the fastest at another
// (Qwen2-72B on 8 ranks: micro-batch 1 with selective recompute is 50.3 s a step at 32 MiB
// and 44.7 s at 512 MiB, where the fastest at 32 MiB gets no better than 46.7 s).
static void refine_buckets(const PlannerInput *in, PlannerResult *r) {
    static const int64_t sizes[] = {4 << 20, 16 << 20, 128 << 20, 512 << 20};
    int fin[FINALISTS], nfin = finalists(r, fin);
    Job j = {.in = in, .bar_us = in->exhaustive ? 0 : best_us(r)};
    for (int f = 0; f < nfin; f++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            PlanChoice c = r->tried.at[fin[f]].c;
            c.bucket_bytes = sizes[k];
            job_try(&j, &c);
        }
    merge(r, &j);
}

// Where nothing was tried, the most frugal plan allowed (ZeRO stage z; the smallest
// micro-batch, or with the updates inside backward the one micro-step): what is reported.
static void try_frugal(const PlannerInput *in, PlannerResult *r, const int64_t *micros, int nm, int z,
                       bool one_step) {
    int R = in->ranks > 1 ? in->ranks : 1;
    RematPolicy pol = in->remat >= 0 ? (RematPolicy)in->remat : REMAT_SWAP;
    int lv = in->early == 1 ? LEVEL_EARLY : in->offload >= 0 ? in->offload : R > 1 ? 2 : LEVEL_EARLY - 1;
    if (R > 1 && lv == 2 && z < 2)
        lv = 1;
    if (lv == 0 && in->early != 0 && R == 1 && one_step)   // (the gradients die young)
        lv = LEVEL_EARLY;
    Job j = {.in = in};
    PlanChoice c = uniform(in, lv == LEVEL_EARLY ? micros[nm - 1] : micros[0], pol, lv, z);
    job_try(&j, &c);
    merge(r, &j);
}

int planner_search(const PlannerInput *in, PlannerResult *r) {
    memset(r, 0, sizeof *r);
    r->best = r->smallest = -1;
    int R = in->ranks > 1 ? in->ranks : 1;
    int64_t per_rank = in->global_batch / R;   // (the driver checked that the ranks divide it)
    int64_t micros[64];
    int nm = micro_batches(in, per_rank, micros);
    int threads = in->threads > 0 ? in->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    // ZeRO stages to try: with one rank none; else the one asked for, or all four.
    int z0 = R == 1 ? 0 : in->zero >= 0 ? in->zero : 0, z1 = R == 1 ? 0 : in->zero >= 0 ? in->zero : 3;
    bool one_step = micros[nm - 1] == per_rank;
    Job levels_by[4 * LEVELS];
    int nl = level_bounds(in, r, micros, nm, z0, z1, one_step, threads, levels_by);
    search_levels(in, r, levels_by, nl, threads);
    decline_early(r);
    refine_tensors(in, r, micros, nm, threads);
    refine_loss_chunk(in, r);
    if (R > 1 && r->best >= 0)
        refine_buckets(in, r);
    // And again for the plan the buckets made fastest: their size changes how much of the
    // step the chunk's time is, and the bucket finalists were chosen at the first chunk.
    if (R > 1)
        refine_loss_chunk(in, r);
    // Last, on the chunk (and buckets) chosen: a larger chunk is worth more, and with several
    // ranks its candidates would crowd the bucket finalists with near copies of one plan.
    int start = blocks_start(in, r);
    refine_tensor_blocks(in, r);
    refine_keep_masks(in, r, start);
    if (r->smallest < 0 && r->pruned_levels < (LEVELS - 1) * (z1 - z0 + 1))   // report the most frugal allowed plan
        try_frugal(in, r, micros, nm, z1, one_step);
    if (r->best < 0)
        settle_smallest(in, r);
    else if (!r->tried.at[r->best].o.smallest)   // placed to settle its fit, the first
        in->build(in->ctx, &r->tried.at[r->best].c, NULL, &r->tried.at[r->best].o);   // order that fit: now the smallest
    return 0;
}

int planner_exact(const PlannerInput *in, int64_t micro, int level, RematPolicy *policies,
                  Candidate *best) {
    int L = in->nlayers;
    if (L < 1 || L > 10)
        return -1;
    int total = 1, fits = 0;
    for (int l = 0; l < L; l++)
        total *= 3;
    RematPolicy *trial = xmalloc(sizeof(RematPolicy) * (size_t)L);
    best->fits = false;
    for (int code = 0; code < total; code++) {
        for (int l = 0, c = code; l < L; l++, c /= 3)
            trial[l] = (RematPolicy)(c % 3);
        PlanChoice ch = {.micro = micro, .policy = REMAT_KEEP, .n_policy = L, .rest = REMAT_KEEP,
                         .offload = levels[level], .per_layer = trial, .tile = in->tile,
                         .tile_blocks = in->tile_blocks};
        PlanOutcome o;
        if (in->build(in->ctx, &ch, NULL, &o) != 0)
            continue;
        if (o.device_bytes > in->budget_bytes || o.host_bytes > in->host_budget_bytes)
            continue;
        fits++;
        if (!best->fits || o.cost.step_us < best->o.cost.step_us) {
            memcpy(policies, trial, sizeof(RematPolicy) * (size_t)L);
            *best = (Candidate){.c = ch, .o = o, .fits = true};
            best->c.per_layer = policies;
        }
    }
    free(trial);
    return fits;
}

// The candidate fastest at (adamw, link) among those that fit or may (a candidate not
// placed because it was slower, a search skipped by its bound: either can be the
// fastest at other rates); -2 when a skipped search's bound is. A plan with the updates
// inside backward competes at its time over MIN_GAIN, as the search chose; the bounds of
// the searches of those plans skipped are left out (the level's bound is not scaled
// so): a plan of theirs could only have won on device time, which no rate here changes
// but the link's under swapping.
static int fastest_at(const PlannerResult *r, double adamw, double link) {
    int best = -1;
    double best_us = 0;
    for (int i = 0; i < r->tried.len; i++) {
        const Candidate *c = &r->tried.at[i];
        if (!(c->fits || c->slower) || c->declined)
            continue;
        double us = cost_step_at(&c->o.cost, adamw, link);
        if (c->c.early_update)   // (chosen only where MIN_GAIN faster than the rest)
            us /= MIN_GAIN;
        if (best < 0 || us < best_us)
            best = i, best_us = us;
    }
    for (int i = 0; i < r->bounds.len; i++) {
        double us = cost_step_at(&r->bounds.at[i], adamw, link);
        if (best < 0 || us < best_us)
            best = -2, best_us = us;
    }
    return best;
}

// How far rate `x` (index 0: AdamW, 1: link) can move by steps of 2^(1/8) before
// another candidate is the fastest; the last factor at which r->best still is.
static double holds_to(const PlannerResult *r, double adamw, double link, int which, double dir) {
    double f = 1;
    for (int k = 1; k <= 80; k++) {   // 2^10 = 1024 either way
        double g = pow(2.0, dir * k / 8.0);
        int b = which == 0 ? fastest_at(r, adamw * g, link) : fastest_at(r, adamw, link * g);
        if (b != r->best)
            return f;
        f = g;
    }
    return dir < 0 ? 0 : INFINITY;
}

PlanHolds planner_holds(const PlannerResult *r, double adamw, double link) {
    PlanHolds h = {0, INFINITY, 0, INFINITY};
    if (r->best < 0)
        return h;
    h.adamw_lo = adamw * holds_to(r, adamw, link, 0, -1);
    h.adamw_hi = adamw * holds_to(r, adamw, link, 0, 1);
    h.link_lo = link * holds_to(r, adamw, link, 1, -1);
    h.link_hi = link * holds_to(r, adamw, link, 1, 1);
    return h;
}
