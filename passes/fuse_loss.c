// fuse_loss.c — the loss as one op with the projection feeding it: where the logits are a
// bias-free linear of a parameter and nothing but the cross entropy reads them, the two
// become linear_cross_entropy, which forms the logits one row chunk at a time in its
// workspace (and its backward, from autodiff's rule, forms them again chunk by chunk,
// writing the chunk's dx rows and adding its part of dW). The full logits and their
// gradient never exist. Before autodiff, so the backward is the fused op's own. A
// preference loss's log-probabilities fuse alike (linear_logprobs; its backward a node of
// its own, after the loss: the pairs' loss must be known before any row's gradient).
#include "passes.h"

// The nodes reading tensor t (through views: any reader of its bytes).
static int readers(const IrGraph *g, int t, int *only) {
    int count = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0 && ir_tensor_base(g, n->in[k]) == t) {
                count++, *only = i;
                break;
            }
    }
    return count;
}

// A preference loss's log-probabilities (the policy's and a reference's) likewise: each
// logprobs of a bias-free linear of a parameter that nothing else reads becomes
// linear_logprobs, its backward autodiff's. How many were fused.
static int fuse_logprobs(IrGraph *g) {
    int n = g->nodes.len, fused = 0;
    int *skip = xmalloc(sizeof(int) * (size_t)(n + 1));   // node -> skipped (the linear fused)
    for (int i = 0; i < n; i++)
        skip[i] = 0;
    for (int i = 0; i < n; i++) {
        IrNode *lp = &g->nodes.at[i];
        const IrTensor *lg = lp->op == OP_LOGPROBS ? &g->tensors.at[lp->in[0]] : NULL;
        if (!lg || lg->alias_of >= 0 || lg->producer < 0)
            continue;
        const IrNode *lin = &g->nodes.at[lg->producer];
        int reader = -1;
        if (lin->op != OP_LINEAR || (lin->nin > 2 && lin->in[2] >= 0) || g->tensors.at[lin->in[1]].kind != TK_PARAM ||
            readers(g, lp->in[0], &reader) != 1 || reader != i)
            continue;
        int tg = lp->in[1];
        lp->op = OP_LINEAR_LOGPROBS, lp->nin = 3;
        lp->in[0] = lin->in[0], lp->in[1] = lin->in[1], lp->in[2] = tg;
        lp->attr = (OpAttr){0};
        skip[lin->id] = 1, fused++;
        if (lg->id == g->logits)
            g->logits = -1;
    }
    if (fused) {
        IrRewrite rw;
        ir_rewrite_begin(&rw, g);
        for (IrNode nd; ir_rewrite_next(&rw, &nd);)
            if (!skip[rw.at - 1])
                ir_rewrite_keep(&rw, &nd);
        ir_rewrite_end(&rw);
        ir_drop_unused(g);
    }
    free(skip);
    return fused;
}

int fuse_loss_apply(IrGraph *g) {
    if (g->loss >= 0 && g->pref_stats >= 0)
        return fuse_logprobs(g);
    if (g->loss < 0 || g->logits < 0)
        return 0;
    const IrTensor *lg = &g->tensors.at[g->logits];
    const IrTensor *loss = &g->tensors.at[g->loss];
    if (lg->alias_of >= 0 || lg->producer < 0 || loss->producer < 0)
        return 0;
    const IrNode *lin = &g->nodes.at[lg->producer], *ce = &g->nodes.at[loss->producer];
    int reader = -1;
    bool fits = lin->op == OP_LINEAR && (lin->nin == 2 || lin->in[2] < 0) &&
                g->tensors.at[lin->in[1]].kind == TK_PARAM && ce->op == OP_CROSS_ENTROPY &&
                ce->in[0] == g->logits && readers(g, g->logits, &reader) == 1 && reader == ce->id;
    if (!fits)
        return 0;
    int x = lin->in[0], w = lin->in[1], targets = ce->in[1], skip = lin->id, at = ce->id;
    int count = ce->nin > 2 ? ce->in[2] : -1;   // the step's trained targets, when counted
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int i = rw.at - 1;
        if (i == skip)
            continue;
        if (i == at) {   // the loss, now of x and W: same output, place and location
            nd.op = OP_LINEAR_CE;
            nd.nin = count >= 0 ? 4 : 3;
            nd.in[0] = x, nd.in[1] = w, nd.in[2] = targets, nd.in[3] = count;
            nd.attr = (OpAttr){0};
        }
        ir_rewrite_keep(&rw, &nd);
    }
    ir_rewrite_end(&rw);
    g->logits = -1;
    ir_drop_unused(g);
    return 1;
}
