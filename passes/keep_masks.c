// keep_masks.c — per-tensor recompute chosen block by block: a keep mask for every block,
// by a dynamic programme over the blocks on peaks predicted from uniform plans.
//
// Why. A block's kept tensors wait from its forward to its backward: the first blocks'
// through nearly the whole step, the last block's hardly at all. The peak is where some
// block's backward runs (its recompute's copies, its gradients) with every earlier
// block's kept tensors still live. So the least recompute at a peak keeps a lot in the
// last blocks and little in the first, and the masks it uses are not all on the
// planner's chain (remat_keep_chain: one tensor dropped at a time, by bytes saved per
// microsecond re-run): the exact optimum (tests/bench/remat_milp.py) drops, say, the v
// projection in block 0 while keeping the norm before it, where the chain drops the norm
// first. The pair search of planner.c (the first blocks one chain mask, the last R
// another) cannot say that.
//
// How. Every candidate mask — each of the chain's, and each with one tensor more or one
// less — is priced once, kept alike in every block: a bound build (scheduled, priced,
// not placed) with its peaks region by region (RegionPeaks). For a plan keeping m_l in
// block l, each region's peak is predicted from m_l's uniform plan:
//   - block l's forward and its backward: the uniform plan's peak there, less what its
//     l earlier blocks keep (l K(m_l)), plus what this plan's earlier blocks keep
//     (K(m_0) + ... + K(m_{l-1}));
//   - the loss between forward and backward: m_{L-1}'s, with every block's kept bytes
//     put in the same way; before the blocks and after them, m_0's, which no block's
//     kept tensors reach;
// where K(m), a block's kept bytes, is what each earlier block adds to a block's forward
// peak in m's uniform plan (the slope of those peaks over the blocks; not of the backward
// peaks, where the last block, whose backward follows its forward, holds less of its own). The
// step is the blend of the masks' uniform steps, block by block (the blocks' work adds
// up). The cheapest assignment whose every predicted peak fits the budget is found by a
// DP over the blocks in order: its state is the bytes the earlier blocks keep, and each
// block's states are pruned to their Pareto front (no other keeps fewer bytes for less
// time), at most FRONT of them. The prediction is only that: the planner builds the
// assignment and, where it does not fit, asks again under a budget smaller by the excess;
// where it fits, the masks it uses are each flipped once more (keep_table_extend) and
// the DP asked again: the optimum's masks may be several flips off the chain.
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    FRONT = 4096,   // the states a block keeps at most (past it, thinned evenly)
};

struct KeepTable {
    int nlayers, nkeep;
    int n;              // masks priced
    uint8_t *mask;      // n x nkeep
    double *us;         // the uniform plan's step
    double *kept;       // K(m): the bytes as backward starts over the blocks
    int64_t *fwd, *bwd; // n x nlayers: the uniform plan's peak in each block's forward, backward
    int64_t *pre, *head, *tail;
    bool *inert;        // nkeep: candidates whose keeping changes nothing (never flipped)
    int cap;
};

static void grow(KeepTable *t) {
    if (t->n < t->cap)
        return;
    t->cap = t->cap ? 2 * t->cap : 64;
    size_t c = (size_t)t->cap, L = (size_t)t->nlayers;
    t->mask = xrealloc(t->mask, c * (size_t)t->nkeep);
    t->us = xrealloc(t->us, c * sizeof(double));
    t->kept = xrealloc(t->kept, c * sizeof(double));
    t->fwd = xrealloc(t->fwd, c * L * sizeof(int64_t));
    t->bwd = xrealloc(t->bwd, c * L * sizeof(int64_t));
    t->pre = xrealloc(t->pre, c * sizeof(int64_t));
    t->head = xrealloc(t->head, c * sizeof(int64_t));
    t->tail = xrealloc(t->tail, c * sizeof(int64_t));
}

// Prices mask m kept in every block of `base` and adds it to the table; its index, or
// -1 where it cannot be built. A mask already there is not priced again.
static int add_mask(KeepTable *t, const PlannerInput *in, const PlanChoice *base, const uint8_t *m) {
    for (int i = 0; i < t->n; i++)
        if (!memcmp(t->mask + (size_t)i * (size_t)t->nkeep, m, (size_t)t->nkeep))
            return i;
    grow(t);
    int i = t->n, L = t->nlayers;
    RegionPeaks rp = {.fwd = t->fwd + (size_t)i * (size_t)L, .bwd = t->bwd + (size_t)i * (size_t)L};
    PlanChoice c = *base;
    c.policy = c.rest = REMAT_TENSORS, c.n_policy = L, c.per_layer = NULL;
    c.keep = m, c.nkeep = t->nkeep, c.keep_rest = NULL, c.keep_blocks = NULL, c.chain_at = -1;
    if (!c.loss_chunk)
        c.loss_chunk = in->loss_chunk;
    BuildNeed need = {.bound = true, .peaks = &rp};
    PlanOutcome o;
    if (in->build(in->ctx, &c, &need, &o) != 0)
        return -1;
    memcpy(t->mask + (size_t)i * (size_t)t->nkeep, m, (size_t)t->nkeep);
    t->us[i] = o.cost.step_us;
    t->kept[i] = (double)(rp.fwd[L - 1] - rp.fwd[0]) / (L - 1);
    t->pre[i] = rp.pre, t->head[i] = rp.head, t->tail[i] = rp.tail;
    return t->n++;
}

// Each of the masks (nmasks of them) with one candidate flipped, not inert, priced.
static void add_flips(KeepTable *t, const PlannerInput *in, const PlanChoice *base, const uint8_t *masks,
                      int nmasks) {
    int nk = t->nkeep;
    uint8_t *m = xmalloc((size_t)nk + 1);
    for (int k = 0; k < nmasks; k++)
        for (int j = 0; j < nk; j++) {
            if (t->inert[j])
                continue;
            memcpy(m, masks + (size_t)k * (size_t)nk, (size_t)nk);
            m[j] ^= 1;
            add_mask(t, in, base, m);
        }
    free(m);
}

KeepTable *keep_table_new(const PlannerInput *in, const PlanChoice *base) {
    KeepTable *t = xcalloc(1, sizeof *t);
    t->nlayers = in->nlayers, t->nkeep = in->nkeep;
    int nk = in->nkeep, nc = in->nchain;
    // The chain first. A tensor whose dropping changes neither the step nor the bytes
    // (nothing in backward reads it) is never flipped.
    int *at = xmalloc(sizeof(int) * (size_t)nc);
    t->inert = xcalloc((size_t)nk + 1, sizeof(bool));
    for (int k = 0; k < nc; k++)
        at[k] = add_mask(t, in, base, in->chain + (size_t)k * (size_t)nk);
    for (int k = 0; k + 1 < nc; k++) {
        const uint8_t *a = in->chain + (size_t)k * (size_t)nk, *b = a + nk;
        if (at[k] < 0 || at[k + 1] < 0 || t->us[at[k]] != t->us[at[k + 1]] || t->kept[at[k]] != t->kept[at[k + 1]])
            continue;
        for (int j = 0; j < nk; j++)
            t->inert[j] |= a[j] != b[j];
    }
    // Then each chain mask with one tensor flipped (once for a run of masks alike).
    for (int k = 0; k < nc; k++)
        if (at[k] >= 0 && !(k + 1 < nc && at[k + 1] >= 0 && t->us[at[k]] == t->us[at[k + 1]] &&
                            t->kept[at[k]] == t->kept[at[k + 1]]))
            add_flips(t, in, base, in->chain + (size_t)k * (size_t)nk, 1);
    free(at);
    return t;
}

void keep_table_extend(KeepTable *t, const PlannerInput *in, const PlanChoice *base, const uint8_t *masks) {
    add_flips(t, in, base, masks, t->nlayers);
}

int keep_table_size(const KeepTable *t) { return t ? t->n : 0; }

void keep_table_free(KeepTable *t) {
    if (!t)
        return;
    free(t->mask), free(t->us), free(t->kept), free(t->fwd), free(t->bwd);
    free(t->pre), free(t->head), free(t->tail), free(t->inert), free(t);
}

typedef struct State {
    double bytes;       // what the blocks before keep
    double us;          // their share of the step
    int mask, prev;     // this block's mask, the state before (in the previous front)
} State;

static int by_bytes(const void *pa, const void *pb) {
    const State *a = pa, *b = pb;
    return a->bytes < b->bytes ? -1 : a->bytes > b->bytes ? 1 : a->us < b->us ? -1 : a->us > b->us;
}

// The states of one block's front: sorted, the dominated dropped, thinned to FRONT.
static int prune(State *s, int n) {
    qsort(s, (size_t)n, sizeof *s, by_bytes);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || s[i].us < s[k - 1].us)
            s[k++] = s[i];
    if (k > FRONT) {   // (evenly, the ends kept)
        for (int i = 0; i < FRONT; i++)
            s[i] = s[(int)((double)i * (k - 1) / (FRONT - 1))];
        k = FRONT;
    }
    return k;
}

// Mask m in block l after blocks keeping `bytes`: whether every predicted peak it sets
// is within the budget. (The loss's region, after the last block: m's uniform peak there
// less its L blocks' kept bytes plus this plan's, bytes + K(m): the same shift.)
static bool fits(const KeepTable *t, int l, int m, double bytes, double budget) {
    size_t at = (size_t)m * (size_t)t->nlayers + (size_t)l;
    double shift = bytes - l * t->kept[m];   // this plan's earlier blocks for the uniform plan's
    int64_t p = t->fwd[at] > t->bwd[at] ? t->fwd[at] : t->bwd[at];
    if ((double)p + shift > budget)
        return false;
    if (l == 0 && ((double)t->pre[m] > budget || (double)t->tail[m] > budget))
        return false;
    return l < t->nlayers - 1 || (double)t->head[m] + shift <= budget;
}

bool keep_table_assign(const KeepTable *t, int64_t budget, uint8_t *masks, double *us) {
    int L = t->nlayers;
    State **front = xcalloc((size_t)L + 1, sizeof(State *));
    int *len = xcalloc((size_t)L + 1, sizeof(int));
    front[0] = xmalloc(sizeof(State));
    front[0][0] = (State){0, 0, -1, -1}, len[0] = 1;
    for (int l = 0; l < L; l++) {
        State *next = xmalloc(sizeof(State) * ((size_t)len[l] * (size_t)t->n + 1));
        int n = 0;
        for (int s = 0; s < len[l]; s++)
            for (int m = 0; m < t->n; m++)
                if (fits(t, l, m, front[l][s].bytes, (double)budget))
                    next[n++] = (State){front[l][s].bytes + t->kept[m], front[l][s].us + t->us[m] / L, m, s};
        front[l + 1] = next, len[l + 1] = prune(next, n);
    }
    int best = -1;
    for (int s = 0; s < len[L]; s++)
        if (best < 0 || front[L][s].us < front[L][best].us)
            best = s;
    if (best >= 0) {
        *us = front[L][best].us;
        for (int l = L, s = best; l > 0; s = front[l][s].prev, l--)
            memcpy(masks + (size_t)(l - 1) * (size_t)t->nkeep,
                   t->mask + (size_t)front[l][s].mask * (size_t)t->nkeep, (size_t)t->nkeep);
    }
    for (int l = 0; l <= L; l++)
        free(front[l]);
    free(front), free(len);
    return best >= 0;
}
