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
//              backward first needs it.
// Tensors outside any block are kept. A backward node that reads a tensor not kept
// reads a copy made by re-running its forward producers just before it (inputs kept
// or themselves recomputed); a dropout re-run draws the same mask (same seed). The
// arithmetic is the forward's, so results are bitwise those of keeping everything.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

const char *remat_policy_name(RematPolicy p) {
    static const char *n[] = {"keep", "selective", "full", "swap"};
    return n[p];
}

typedef struct Remat {
    IrGraph *g;
    const RematPolicy *policy;
    int nlayers;
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
    IrShapeErr err;
    const char *name = arena_printf(g->arena, "%s.%s", g->tensors.at[from].name, what);
    int id = ir_node_add(g, OP_COPY, 1, &from, (OpAttr){0}, name, at->layer, at->loc, &err);
    IR_ASSERT(id >= 0);
    g->nodes.at[id].phase = phase;
    g->nodes.at[id].stream = stream;
    int out = g->nodes.at[id].out[0];
    g->tensors.at[out].requires_grad = false;
    return out;
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
    IrShapeErr err;
    const char *name = arena_printf(g->arena, "%s.re", g->tensors.at[src.out[0]].name);
    int id = ir_node_add(g, src.op, src.nin, in, src.attr, name, src.layer, src.loc, &err);
    IR_ASSERT(id >= 0);
    IrNode *made = &g->nodes.at[id];
    made->phase = PHASE_BACKWARD;
    made->recompute = true;
    r->st->recompute_flops += op_flops(g, made);
    r->st->recompute_nodes++;
    for (int k = 0; k < IR_MAX_OUTPUTS && src.out[k] >= 0; k++) {
        int o = made->out[k];
        g->tensors.at[o].requires_grad = false;
        r->copy[src.out[k]] = o;
    }
    return r->copy[t];
}

int remat_apply(IrGraph *g, const RematPolicy *policy, int nlayers, RematStats *st) {
    memset(st, 0, sizeof *st);
    int n = g->nodes.len, nt0 = g->tensors.len;
    Remat r = {.g = g, .policy = policy, .nlayers = nlayers, .st = st};
    while (r.nfwd < n && g->nodes.at[r.nfwd].phase == PHASE_FORWARD)
        r.nfwd++;
    r.nt0 = nt0;
    r.kept = malloc(sizeof(bool) * (size_t)nt0);
    r.consumer_layer = malloc(sizeof(int) * (size_t)nt0);
    r.swap_layer = malloc(sizeof(int) * (size_t)nt0);
    r.host = malloc(sizeof(int) * (size_t)nt0);
    r.back = malloc(sizeof(int) * (size_t)nt0);
    r.last_fwd = malloc(sizeof(int) * (size_t)nt0);
    decide(&r);
    bool any = false;
    for (int i = 0; i < nt0; i++) {
        any |= !r.kept[i] || r.swap_layer[i] >= 0;
        r.host[i] = r.back[i] = r.last_fwd[i] = -1;
    }
    if (!any) {
        free(r.kept), free(r.consumer_layer), free(r.swap_layer), free(r.host), free(r.back);
        free(r.last_fwd);
        return 0;
    }
    for (int i = 0; i < r.nfwd; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                r.last_fwd[ir_tensor_base(g, nd->in[k])] = i;
    }
    // Copies can be made of tensors created during the rebuild too; size generously.
    r.copy = malloc(sizeof(int) * (size_t)nt0);
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
    free(r.back), free(r.last_fwd);
    return 0;
}
