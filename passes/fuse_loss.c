// fuse_loss.c — the loss as one op with the projection feeding it: where the logits are a
// bias-free linear of a parameter and nothing but the cross entropy reads them, the two
// become linear_cross_entropy, which forms the logits one row chunk at a time in its
// workspace (and its backward, from autodiff's rule, forms them again chunk by chunk,
// writing the chunk's dx rows and adding its part of dW). The full logits and their
// gradient never exist. Before autodiff, so the backward is the fused op's own.
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

int fuse_loss_apply(IrGraph *g) {
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
