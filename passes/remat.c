// remat.c — rematerialisation: which forward tensors backward finds kept, and which
// it recomputes. Each repeated block (layer) gets a policy:
//   keep       every tensor backward reads stays from the forward;
//   selective  keep what is costly to make (GEMM outputs, attention's output and
//              logsumexp, embeddings) and the block's outputs; recompute norms,
//              elementwise ops and rope from them;
//   full       keep only the block's outputs (the next block's input); recompute the
//              rest of the block from its input;
//   swap       as full, but the block's input waits for backward in host memory: a
//              copy to the host after its last forward use, and back just before
//              backward first needs it;
//   tensors    keep the tensors a keep mask names (one bit for each of the forward values
//              the block makes, its outputs aside), recompute the rest: the planner's
//              choice tensor by tensor (Checkmate's problem, solved greedily along a
//              chain of masks: remat_keep_chain).
// Tensors outside any block are kept. A backward node that reads a tensor not kept
// reads a copy made by re-running its forward producers just before it (inputs kept
// or themselves recomputed); a dropout re-run draws the same mask (same seed). The
// arithmetic is the forward's, so results are bitwise those of keeping everything.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

const char *remat_policy_name(RematPolicy p) {
    static const char *n[] = {"keep", "selective", "full", "swap", "tensors"};
    return n[p];
}

typedef struct Remat {
    IrGraph *g;
    const RematPolicy *policy;
    int nlayers;
    const uint8_t *keep;    // REMAT_TENSORS blocks' keep masks, nkeep a block
    int nkeep;
    int *cand;              // per tensor: its index among its block's candidates, or -1
    int nfwd;               // forward nodes come first
    int nt0;                // tensors before the pass
    bool *kept;             // per tensor (forward values): kept from the forward
    int *copy;              // per tensor: its recomputed copy in backward, or -1
    int *consumer_layer;    // per tensor: -2 none, a layer, or -3 for several / outside
    int *swap_layer;        // per tensor: the swapped block it is the input of, else -1
    int *host;              // per tensor: its copy in host memory, or -1
    int *back;              // per tensor: its copy back on the device, or -1
    int *last_fwd;          // per tensor: its last forward reader
    RematStats *st;
} Remat;

// What selective recompute keeps: the outputs of the kernels that are costly to re-run.
static bool costly(OpKind op) {
    OpClass c = op_desc(op)->cls;
    return c == OPC_GEMM || c == OPC_ATTENTION || c == OPC_GATHER;
}

// Decides, per forward value, whether backward finds it kept.
static void decide(Remat *r) {
    IrGraph *g = r->g;
    int nt = g->tensors.len;
    for (int i = 0; i < nt; i++)
        r->consumer_layer[i] = -2;
    for (int i = 0; i < r->nfwd; i++) {
        const IrNode *n = &g->nodes.at[i];
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0)
                continue;
            int b = ir_tensor_base(g, n->in[k]);
            int *c = &r->consumer_layer[b];
            *c = *c == -2 ? n->layer : *c == n->layer ? *c : -3;
        }
    }
    for (int i = 0; i < nt; i++) {
        const IrTensor *t = &g->tensors.at[i];
        r->kept[i] = true;
        if (t->kind != TK_VALUE || t->producer < 0 || t->producer >= r->nfwd)
            continue;
        const IrNode *p = &g->nodes.at[t->producer];
        int layer = p->layer;
        if (layer < 0 || layer >= r->nlayers || r->policy[layer] == REMAT_KEEP)
            continue;
        int b = ir_tensor_base(g, i);
        // A block's output: read by another block or outside any block.
        int c = r->consumer_layer[b];
        bool output = c == -3 || (c >= -1 && c != layer) || b == g->logits || b == g->loss;
        if (output)
            continue;
        if (t->alias_of >= 0)         // a view is kept when its base is: below
            continue;
        if (r->policy[layer] == REMAT_TENSORS)
            r->kept[i] = r->cand[i] < 0 || r->cand[i] >= r->nkeep ||
                         r->keep[(size_t)layer * (size_t)r->nkeep + (size_t)r->cand[i]];
        else
            r->kept[i] = r->policy[layer] == REMAT_SELECTIVE && costly(p->op);   // full, swap: no
    }
    // The inputs of swapped blocks: made outside the block, read inside it.
    for (int i = 0; i < nt; i++)
        r->swap_layer[i] = -1;
    for (int i = 0; i < r->nfwd; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (n->layer < 0 || n->layer >= r->nlayers || r->policy[n->layer] != REMAT_SWAP)
            continue;
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0)
                continue;
            int b = ir_tensor_base(g, n->in[k]);
            const IrTensor *t = &g->tensors.at[b];
            if (t->kind == TK_VALUE && t->producer >= 0 && g->nodes.at[t->producer].layer != n->layer)
                r->swap_layer[b] = n->layer;
        }
    }
    for (int i = 0; i < nt; i++)
        if (g->tensors.at[i].alias_of >= 0)
            r->kept[i] = r->kept[g->tensors.at[i].alias_of];
}

static int copy_node(Remat *r, int from, IrPhase phase, const IrNode *at, const char *what,
                     Stream stream) {
    IrGraph *g = r->g;
    const char *name = arena_printf(g->arena, "%s.%s", g->tensors.at[from].name, what);
    return ir_copy_add(g, from, name, at, phase, stream);
}

// The tensor backward should read in place of forward tensor t: t itself when kept,
// its copy back from the host when swapped, else a copy recomputed (with whatever it
// needs) on first use.
static int recompute(Remat *r, int t, const IrNode *user) {
    IrGraph *g = r->g;
    if (t < 0)
        return t;
    int b = ir_tensor_base(g, t);
    if (b < r->nt0 && r->host[b] >= 0 && t == b) {   // swapped: bring it back once
        if (r->back[b] < 0) {
            r->back[b] = copy_node(r, r->host[b], PHASE_BACKWARD, user, "back", STREAM_H2D);
            r->st->swap_bytes += ir_tensor_bytes(&g->tensors.at[b]);
        }
        return r->back[b];
    }
    bool swapped_view = b < r->nt0 && r->host[b] >= 0;   // a view of a swapped tensor
    if (r->kept[t] && !swapped_view)
        return t;
    if (r->copy[t] >= 0)
        return r->copy[t];
    IrNode src = g->nodes.at[g->tensors.at[t].producer];   // a copy: the array grows
    int in[IR_MAX_INPUTS];
    for (int k = 0; k < src.nin; k++)
        in[k] = recompute(r, src.in[k], user);
    const char *name = arena_printf(g->arena, "%s.re", g->tensors.at[src.out[0]].name);
    int id = ir_node_redo(g, &src, in, name, PHASE_BACKWARD);   // (before the list is read)
    IrNode *made = &g->nodes.at[id];
    made->recompute = true;
    r->st->recompute_flops += op_flops(g, made);
    r->st->recompute_nodes++;
    for (int k = 0; k < IR_MAX_OUTPUTS && src.out[k] >= 0; k++)
        r->copy[src.out[k]] = made->out[k];
    return r->copy[t];
}

// Whether forward tensor i (a value made in a block) is the block's output: read by another
// block or outside any block (consumer_layer per base tensor, as decide() computes it).
static bool block_output(const IrGraph *g, const int *consumer_layer, int i, int layer) {
    int b = ir_tensor_base(g, i);
    int c = consumer_layer[b];
    return c == -3 || (c >= -1 && c != layer) || b == g->logits || b == g->loss;
}

// consumer_layer of every tensor over the forward nodes (-2 none, a layer, -3 several or
// outside), and the number of forward nodes.
static int consumers(const IrGraph *g, int *consumer_layer) {
    int nfwd = 0;
    while (nfwd < g->nodes.len && g->nodes.at[nfwd].phase == PHASE_FORWARD)
        nfwd++;
    for (int i = 0; i < g->tensors.len; i++)
        consumer_layer[i] = -2;
    for (int i = 0; i < nfwd; i++) {
        const IrNode *n = &g->nodes.at[i];
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0)
                continue;
            int *c = &consumer_layer[ir_tensor_base(g, n->in[k])];
            *c = *c == -2 ? n->layer : *c == n->layer ? *c : -3;
        }
    }
    return nfwd;
}

// Per tensor: its index among the candidates of its block (the block's forward values in
// the order their nodes run, outputs and views aside), or -1. Returns the count of
// block `layer`'s (all blocks have as many: they are alike).
static int number_candidates(const IrGraph *g, const int *consumer_layer, int nfwd, int *cand, int layer) {
    for (int i = 0; i < g->tensors.len; i++)
        cand[i] = -1;
    int *next = xcalloc((size_t)ir_layers(g) + 1, sizeof(int)), count = 0;
    for (int i = 0; i < nfwd; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (n->layer < 0)
            continue;
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++) {
            int t = n->out[k];
            const IrTensor *x = &g->tensors.at[t];
            if (x->kind != TK_VALUE || x->alias_of >= 0 || block_output(g, consumer_layer, t, n->layer))
                continue;
            cand[t] = next[n->layer]++;
        }
    }
    if (layer >= 0 && layer < ir_layers(g))
        count = next[layer];
    free(next);
    return count;
}

// A time proxy for re-running node n: its FLOPs at an A100's bf16 rate or its bytes at its
// HBM rate, the larger (what the order of the chain needs, not the cost model's figure).
static double rerun_us(const IrGraph *g, const IrNode *n) {
    double f = (double)op_flops(g, n) / 250e12, b = (double)(op_bytes_read(g, n) + op_bytes_written(g, n)) / 1.2e12;
    return 4e-6 + (f > b ? f : b);
}

int remat_candidates(const IrGraph *g, int layer, int64_t *bytes, double *cost, int cap) {
    int *cl = xmalloc(sizeof(int) * (size_t)(g->tensors.len + 1)), *cand = xmalloc(sizeof(int) * (size_t)(g->tensors.len + 1));
    int nfwd = consumers(g, cl), count = number_candidates(g, cl, nfwd, cand, layer);
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *x = &g->tensors.at[i];
        if (cand[i] < 0 || x->layer != layer || cand[i] >= cap)
            continue;
        if (bytes)
            bytes[cand[i]] = ir_tensor_bytes(x);
        if (cost)
            cost[cand[i]] = rerun_us(g, &g->nodes.at[x->producer]);
    }
    free(cl), free(cand);
    return count;
}

// The recompute a keep mask costs in block `layer`: every candidate backward reads that is
// not kept has its producer re-run, and so has every dropped input of a node re-run, each
// node once (the chain's estimate; remat_apply does the real thing).
static double mask_cost(const IrGraph *g, int nfwd, const int *cand, int layer, const uint8_t *keep,
                        const bool *needed, bool *rerun, double *bytes_rerun) {
    int n = g->nodes.len;
    memset(rerun, 0, sizeof(bool) * (size_t)n);
    int *stack = xmalloc(sizeof(int) * (size_t)(g->tensors.len + 1)), top = 0;
    for (int t = 0; t < g->tensors.len; t++)
        if (cand[t] >= 0 && g->tensors.at[t].layer == layer && needed[t] && !keep[cand[t]])
            stack[top++] = t;
    double cost = 0;
    *bytes_rerun = 0;
    while (top > 0) {
        int t = stack[--top], p = g->tensors.at[t].producer;
        if (p < 0 || p >= nfwd || rerun[p])
            continue;
        rerun[p] = true;
        cost += rerun_us(g, &g->nodes.at[p]);
        for (int k = 0; k < IR_MAX_OUTPUTS && g->nodes.at[p].out[k] >= 0; k++)
            *bytes_rerun += (double)ir_tensor_bytes(&g->tensors.at[g->nodes.at[p].out[k]]);
        for (int k = 0; k < g->nodes.at[p].nin; k++) {
            int u = g->nodes.at[p].in[k] >= 0 ? ir_tensor_base(g, g->nodes.at[p].in[k]) : -1;
            if (u >= 0 && cand[u] >= 0 && g->tensors.at[u].layer == layer && !keep[cand[u]])
                stack[top++] = u;
        }
    }
    free(stack);
    return cost;
}

int remat_keep_chain(const IrGraph *g, int layer, uint8_t **masks, int *ncand) {
    int nt = g->tensors.len, n = g->nodes.len;
    int *cl = xmalloc(sizeof(int) * (size_t)(nt + 1)), *cand = xmalloc(sizeof(int) * (size_t)(nt + 1));
    int nfwd = consumers(g, cl), m = number_candidates(g, cl, nfwd, cand, layer);
    *ncand = m;
    *masks = NULL;
    if (m == 0) {
        free(cl), free(cand);
        return 0;
    }
    // What backward reads (the tensors a mask must keep or have recomputed).
    bool *needed = xcalloc((size_t)nt + 1, sizeof(bool));
    for (int i = nfwd; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                needed[ir_tensor_base(g, nd->in[k])] = true;
    }
    int64_t *bytes = xcalloc((size_t)m + 1, sizeof(int64_t));
    remat_candidates(g, layer, bytes, NULL, m);
    uint8_t *chain = xmalloc((size_t)(m + 1) * (size_t)m), *cur = xmalloc((size_t)m);
    bool *rerun = xmalloc(sizeof(bool) * (size_t)(n + 1));
    memset(cur, 1, (size_t)m);
    memcpy(chain, cur, (size_t)m);
    double bytes_rerun, cost = mask_cost(g, nfwd, cand, layer, cur, needed, rerun, &bytes_rerun);
    for (int step = 1; step <= m; step++) {
        int best = -1;
        double best_ratio = -1, best_cost = 0;
        for (int j = 0; j < m; j++) {
            if (!cur[j])
                continue;
            cur[j] = 0;
            double c = mask_cost(g, nfwd, cand, layer, cur, needed, rerun, &bytes_rerun);
            cur[j] = 1;
            double ratio = (double)bytes[j] / (c - cost + 1e-9);
            if (best < 0 || ratio > best_ratio)
                best = j, best_ratio = ratio, best_cost = c;
        }
        cur[best] = 0;
        cost = best_cost;
        memcpy(chain + (size_t)step * (size_t)m, cur, (size_t)m);
    }
    free(cl), free(cand), free(needed), free(bytes), free(cur), free(rerun);
    *masks = chain;
    return m + 1;
}

int remat_apply(IrGraph *g, const RematPolicy *policy, int nlayers, const uint8_t *keep, int nkeep,
                RematStats *st) {
    memset(st, 0, sizeof *st);
    int n = g->nodes.len, nt0 = g->tensors.len;
    Remat r = {.g = g, .policy = policy, .nlayers = nlayers, .keep = keep, .nkeep = nkeep, .st = st};
    while (r.nfwd < n && g->nodes.at[r.nfwd].phase == PHASE_FORWARD)
        r.nfwd++;
    r.nt0 = nt0;
    r.kept = xmalloc(sizeof(bool) * (size_t)nt0);
    r.consumer_layer = xmalloc(sizeof(int) * (size_t)nt0);
    r.swap_layer = xmalloc(sizeof(int) * (size_t)nt0);
    r.host = xmalloc(sizeof(int) * (size_t)nt0);
    r.back = xmalloc(sizeof(int) * (size_t)nt0);
    r.last_fwd = xmalloc(sizeof(int) * (size_t)nt0);
    r.cand = xmalloc(sizeof(int) * (size_t)(nt0 + 1));
    int *cl = xmalloc(sizeof(int) * (size_t)(nt0 + 1));
    consumers(g, cl);
    number_candidates(g, cl, r.nfwd, r.cand, -1);
    free(cl);
    decide(&r);
    bool any = false;
    for (int i = 0; i < nt0; i++) {
        any |= !r.kept[i] || r.swap_layer[i] >= 0;
        r.host[i] = r.back[i] = r.last_fwd[i] = -1;
    }
    if (!any) {
        free(r.kept), free(r.consumer_layer), free(r.swap_layer), free(r.host), free(r.back);
        free(r.last_fwd), free(r.cand);
        return 0;
    }
    for (int i = 0; i < r.nfwd; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                r.last_fwd[ir_tensor_base(g, nd->in[k])] = i;
    }
    // Copies can be made of tensors created during the rebuild too; size generously.
    r.copy = xmalloc(sizeof(int) * (size_t)nt0);
    for (int i = 0; i < nt0; i++)
        r.copy[i] = -1;
    // Rebuild the node list: forward untouched; before each backward node, the
    // recomputes it needs.
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int i = rw.at - 1;
        if (nd.phase == PHASE_BACKWARD) {
            for (int k = 0; k < nd.nin; k++)
                if (nd.in[k] >= 0 && nd.in[k] < nt0)
                    nd.in[k] = recompute(&r, nd.in[k], &nd);
        }
        ir_rewrite_keep(&rw, &nd);
        if (i >= r.nfwd)
            continue;
        // A swapped block's input goes to the host once the forward is done with it.
        for (int k = 0; k < nd.nin; k++) {
            int b = nd.in[k] >= 0 ? ir_tensor_base(g, nd.in[k]) : -1;
            if (b >= 0 && b < nt0 && r.swap_layer[b] >= 0 && r.last_fwd[b] == i && r.host[b] < 0) {
                r.host[b] = copy_node(&r, b, PHASE_FORWARD, &nd, "host", STREAM_D2H);
                g->tensors.at[r.host[b]].arena = 1;
                g->tensors.at[r.host[b]].cat = MEM_ACTIVATIONS;
            }
        }
    }
    ir_rewrite_end(&rw);
    for (int i = 0; i < nt0; i++)
        if (!r.kept[i] && r.copy[i] < 0 && g->tensors.at[i].kind == TK_VALUE)
            st->dropped_unused++;
    free(r.kept), free(r.copy), free(r.consumer_layer), free(r.swap_layer), free(r.host);
    free(r.back), free(r.last_fwd), free(r.cand);
    return 0;
}
