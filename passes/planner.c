// planner.c — the fastest plan that fits the budget.
//
// The choices: the micro-batch (a divisor of the global batch; the rest is
// accumulation), the recompute policy of each block (keep, selective, full; blocks are
// identical, so a mixed plan is "the first k blocks one way, the rest another"), and
// the offload level (nothing; optimizer state and master weights on the host; and the
// gradients too). For each offload level whose model states fit on the device at all,
// and each policy, a binary search finds the largest micro-batch that fits; where the
// cheaper policy stops fitting at that micro-batch, a second binary search finds how
// many blocks can keep it. Every choice tried is planned exactly (schedule, liveness,
// offsets) by the caller's build function; the fastest by the cost model wins.
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const OffloadSpec levels[3] = {{false, false}, {true, false}, {true, true}};

void planner_choice_str(char *buf, size_t cap, const PlanChoice *c, int nlayers) {
    char remat[96];
    if (c->n_policy >= nlayers || c->policy == c->rest)
        snprintf(remat, sizeof remat, "%s", remat_policy_name(c->policy));
    else
        snprintf(remat, sizeof remat, "%s x%d + %s x%d", remat_policy_name(c->policy), c->n_policy,
                 remat_policy_name(c->rest), nlayers - c->n_policy);
    snprintf(buf, cap, "micro-batch %lld, recompute %s, offload %s", (long long)c->micro, remat,
             c->offload.grads ? "optimizer+master+grads" : c->offload.optimizer ? "optimizer+master" : "none");
}

// Builds and records one choice; returns the index in r->tried, or -1.
static int try_choice(const PlannerInput *in, PlannerResult *r, const PlanChoice *c) {
    for (int i = 0; i < r->tried.len; i++)   // already planned
        if (!memcmp(&r->tried.at[i].c, c, sizeof *c))
            return i;
    Candidate cand = {.c = *c};
    if (in->build(in->ctx, c, &cand.o) != 0)
        return -1;
    cand.fits = cand.o.device_bytes <= in->budget_bytes && cand.o.host_bytes <= in->host_budget_bytes;
    vec_push(&r->tried, cand);
    int id = r->tried.len - 1;
    if (r->smallest < 0 || cand.o.device_bytes < r->tried.at[r->smallest].o.device_bytes)
        r->smallest = id;
    if (cand.fits && (r->best < 0 || cand.o.cost.step_us < r->tried.at[r->best].o.cost.step_us))
        r->best = id;
    return id;
}

int planner_search(const PlannerInput *in, PlannerResult *r) {
    memset(r, 0, sizeof *r);
    r->best = r->smallest = -1;
    int64_t micros[64];
    int nm = 0;
    for (int64_t d = 1; d <= in->global_batch && nm < 64; d++)
        if (in->global_batch % d == 0 && (!in->micro || d == in->micro))
            micros[nm++] = d;
    int64_t fixed[3] = {in->weights_bytes + in->grads_bytes + in->states_bytes,
                        in->weights_bytes + in->grads_bytes, in->weights_bytes};
    for (int lv = 0; lv < 3; lv++) {
        if (in->offload >= 0 && lv != in->offload)
            continue;
        // A level whose model states alone exceed the budget cannot fit with any choice.
        if (fixed[lv] + in->reserve_bytes > in->budget_bytes) {
            r->pruned_levels++;
            continue;
        }
        int fit_at[4] = {-1, -1, -1, -1};   // per policy: index of the largest fitting micro
        for (int pol = REMAT_KEEP; pol <= REMAT_SWAP; pol++) {
            if (in->remat >= 0 && pol != in->remat)
                continue;
            int lo = 0, hi = nm - 1;
            while (lo <= hi) {
                int mid = (lo + hi) / 2;
                PlanChoice c = {micros[mid], (RematPolicy)pol, in->nlayers, (RematPolicy)pol, levels[lv], NULL};
                int id = try_choice(in, r, &c);
                if (id >= 0 && r->tried.at[id].fits)
                    fit_at[pol] = mid, lo = mid + 1;
                else
                    hi = mid - 1;
            }
        }
        // Mixed: at the largest micro-batch the more frugal policy reaches, as many
        // blocks as fit keep the faster one (every pair: keep/selective, selective/full,
        // keep/full; recompute costs per block differ, so any pair can be the best).
        static const int pairs[5][2] = {{REMAT_KEEP, REMAT_SELECTIVE},
                                        {REMAT_SELECTIVE, REMAT_FULL},
                                        {REMAT_KEEP, REMAT_FULL},
                                        {REMAT_FULL, REMAT_SWAP},
                                        {REMAT_SELECTIVE, REMAT_SWAP}};
        for (int pi = 0; pi < 5 && in->remat < 0; pi++) {
            int fast = pairs[pi][0], slow = pairs[pi][1], m = fit_at[slow];
            if (m < 0 || fit_at[fast] >= m || in->nlayers < 2)
                continue;
            int lo = 1, hi = in->nlayers - 1;
            while (lo <= hi) {
                int k = (lo + hi) / 2;
                PlanChoice c = {micros[m], (RematPolicy)fast, k, (RematPolicy)slow, levels[lv], NULL};
                int id = try_choice(in, r, &c);
                if (id >= 0 && r->tried.at[id].fits)
                    lo = k + 1;
                else
                    hi = k - 1;
            }
        }
    }
    if (r->smallest < 0 && r->pruned_levels < 3) {   // report the most frugal allowed plan
        PlanChoice c = {micros[0], in->remat >= 0 ? (RematPolicy)in->remat : REMAT_SWAP, in->nlayers,
                        in->remat >= 0 ? (RematPolicy)in->remat : REMAT_SWAP,
                        levels[in->offload >= 0 ? in->offload : 2], NULL};
        c.rest = c.policy;
        try_choice(in, r, &c);
    }
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
    RematPolicy *trial = malloc(sizeof(RematPolicy) * (size_t)L);
    best->fits = false;
    for (int code = 0; code < total; code++) {
        for (int l = 0, c = code; l < L; l++, c /= 3)
            trial[l] = (RematPolicy)(c % 3);
        PlanChoice ch = {micro, REMAT_KEEP, L, REMAT_KEEP, levels[level], trial};
        PlanOutcome o;
        if (in->build(in->ctx, &ch, &o) != 0)
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
