// autodiff.c — reverse mode over the forward graph: turns forward + loss into the
// whole training step. Each forward node's derivative rule (its op-table row) emits
// its backward nodes; trainable parameters get a gradient tensor that accumulates
// (+=) across micro-batches, optimizer state (AdamW's moments, 8-bit codes and absmaxes
// under AdamW8bit), an fp32 master copy when the precision asks for one, and an update
// node followed by a zeroing of the gradient.
#include "passes.h"

#include <stdlib.h>

// A tensor shaped like parameter `param` that belongs to it (gradient, state, master).
static int state_tensor(IrGraph *g, int param, const char *what, DType dt, MemCategory cat,
                        TensorKind kind) {
    const IrTensor p = g->tensors.at[param];   // a copy: adding a tensor may move the array
    int id = ir_tensor_add(g, arena_printf(g->arena, "%s.%s", what, p.name), kind, dt, p.ndim,
                           p.shape, p.loc);
    IrTensor *t = ir_tensor(g, id);
    t->of = param;
    t->layer = p.layer;
    t->cat = cat;
    return id;
}

// A state tensor of parameter `param` with a shape of its own (AdamW8bit's codes and
// absmaxes).
static int state_shaped(IrGraph *g, int param, const char *what, DType dt, int64_t rows, int64_t cols) {
    const IrTensor p = g->tensors.at[param];
    int64_t shape[2] = {rows, cols};
    int id = ir_tensor_add(g, arena_printf(g->arena, "%s.%s", what, p.name), TK_STATE, dt, 2, shape, p.loc);
    IrTensor *t = ir_tensor(g, id);
    t->of = param;
    t->layer = p.layer;
    t->cat = MEM_OPTIMIZER;
    return id;
}

// The first trainable parameter flowing into input k of `n`, for messages, or -1.
static int param_behind(const IrGraph *g, int t) {
    for (int guard = 0; guard < 100000 && t >= 0; guard++) {
        const IrTensor *x = &g->tensors.at[t];
        if (x->kind == TK_PARAM)
            return x->trainable ? t : -1;
        if (x->producer < 0)
            return -1;
        const IrNode *n = &g->nodes.at[x->producer];
        int next = -1;
        for (int k = 0; k < n->nin && next < 0; k++)
            if (n->in[k] >= 0 && g->tensors.at[n->in[k]].requires_grad)
                next = n->in[k];
        t = next;
    }
    return -1;
}

// Walks the forward nodes (the first nfwd) backwards; a rule does nothing when no gradient
// reaches it. An op without a rule where a gradient reaches it and a trainable parameter
// lies behind it would silently cut that parameter off: an error at its line (into d).
static void backward(Autodiff *ad, int nfwd, PassDiag *d) {
    IrGraph *g = ad->g;
    for (int i = nfwd - 1; i >= 0; i--) {
        IrNode n = g->nodes.at[i];   // a copy: rules append nodes and may move the array
        AdRule rule = ad_rule(n.op);
        if (n.phase != PHASE_FORWARD)
            continue;
        if (rule) {
            rule(ad, &n);
            continue;
        }
        int p = -1;
        for (int k = 0; k < n.nin && p < 0; k++)
            if (ad_needs(ad, n.in[k]))
                p = param_behind(g, n.in[k]);
        if (ad_dy(ad, &n, 0) >= 0 && p >= 0 && d)
            pass_error(d, n.loc, "'%s' has no derivative rule, so '%s' would train on no "
                       "gradient through it", op_desc(n.op)->name, g->tensors.at[p].decl
                       ? g->tensors.at[p].decl : g->tensors.at[p].name);
    }
}

// The gradients' sum of squares (and non-finite count) into one pair, g->grad_stats, in
// parameter order (grads: per parameter its gradient, or -1); false where nothing trains.
static bool grad_sumsq(IrGraph *g, const int *grads, int nparams) {
    SrcLoc at = g->tensors.at[g->loss].loc;
    int64_t two = 2;
    g->grad_stats = ir_tensor_add(g, "grad_stats", TK_VALUE, DT_F32, 1, &two, at);
    g->tensors.at[g->grad_stats].cat = MEM_OPTIMIZER;
    bool first = true;
    for (int i = 0; i < nparams; i++) {
        if (grads[i] < 0)
            continue;
        const IrTensor p = g->tensors.at[i];
        int id = ir_node_add_update(g, OP_GRAD_SUMSQ, 1, &grads[i], (OpAttr){0}, 1, &g->grad_stats,
                                    p.layer, p.loc);
        g->nodes.at[id].phase = PHASE_OPTIMIZER;
        if (first)   // the first assigns: nothing carries over from the step before
            g->nodes.at[id].update = 0, g->tensors.at[g->grad_stats].producer = id;
        first = false;
    }
    return !first;
}

// What every update multiplies its gradient by (the clip coefficient over the loss scale)
// and whether the step is skipped: g->grad_factor.
static void grad_factor(IrGraph *g) {
    IrShapeErr err;
    int fid = ir_node_add(g, OP_GRAD_FACTOR, 1, &g->grad_stats, (OpAttr){.f = g->step.clip}, "grad_factor", -1,
                          g->tensors.at[g->loss].loc, &err);
    IR_ASSERT(fid >= 0);
    g->nodes.at[fid].phase = PHASE_OPTIMIZER;
    g->grad_factor = g->nodes.at[fid].out[0];
    g->tensors.at[g->grad_factor].cat = MEM_OPTIMIZER;
}

// The update of trainable parameter i from its gradient `grad`, with its optimizer state
// (made here) and weight decay where it applies (decay).
static void add_update(IrGraph *g, int i, int grad, bool decay) {
    const IrStep *st = &g->step;
    const IrTensor p = g->tensors.at[i];
    int outs[4], nout = 0;
    int64_t n = ir_tensor_elems(&p);
    bool q8 = st->adam8 && n >= st->adam8_min_elems;
    outs[nout++] = i;
    if (q8) {   // m's and v's codes, a row each; their absmaxes likewise
        outs[nout++] = state_shaped(g, i, "adam_q8", DT_U8, 2, n);
        outs[nout++] = state_shaped(g, i, "adam_absmax", DT_F32, 2, (n + IR_ADAM8_BLOCK - 1) / IR_ADAM8_BLOCK);
    } else if (st->optim_states == 2) {   // (AdamW8bit's small tensors: 32-bit moments)
        DType dt = st->adam8 ? DT_F32 : st->optim_dt;
        outs[nout++] = state_tensor(g, i, "adam_m", dt, MEM_OPTIMIZER, TK_STATE);
        outs[nout++] = state_tensor(g, i, "adam_v", dt, MEM_OPTIMIZER, TK_STATE);
    }
    if (st->master)
        outs[nout++] = state_tensor(g, i, "master", DT_F32, MEM_MASTER, TK_STATE);
    else if (st->kahan && st->optim_states == 2)   // what the weight's rounding left out
        outs[nout++] = state_tensor(g, i, "kahan", p.dtype, MEM_OPTIMIZER, TK_STATE);
    int in[2] = {grad, g->grad_factor};
    OpAttr attr = {.f = st->optim_states == 2 && decay ? st->weight_decay : 0};
    OpKind op = st->optim_states != 2 ? OP_SGD : st->adam8 ? OP_ADAMW8BIT : OP_ADAMW;
    int id = ir_node_add_update(g, op, 2, in, attr, nout, outs, p.layer, p.loc);
    g->nodes.at[id].phase = PHASE_OPTIMIZER;
}

// The optimizer: one update per trainable parameter (grads[i] >= 0); then the gradients
// are zeroed (updates side by side can share one launch: codegen's grouped kernels).
static void optimizer(IrGraph *g, const int *grads, int nparams) {
    bool *decays = xmalloc(sizeof(bool) * (size_t)(g->tensors.len + 1));
    ir_param_decays(g, decays);
    for (int i = 0; i < nparams; i++)
        if (grads[i] >= 0)
            add_update(g, i, grads[i], decays[i]);
    free(decays);
    for (int i = 0; i < nparams; i++) {
        if (grads[i] < 0)
            continue;
        const IrTensor p = g->tensors.at[i];
        int id = ir_node_add_update(g, OP_ZERO, 0, NULL, (OpAttr){0}, 1, &grads[i], p.layer, p.loc);
        g->nodes.at[id].phase = PHASE_OPTIMIZER;
    }
}

int autodiff_apply(IrGraph *g, int accum_steps, bool gemm_temporaries, PassDiag *d) {
    IR_ASSERT(g->loss >= 0 && accum_steps >= 1);
    const IrStep *st = &g->step;
    int nparams = g->tensors.len, nfwd = g->nodes.len;
    Autodiff ad = {.g = g, .loss_scale = 1.0 / accum_steps, .gemm_temporaries = gemm_temporaries};
    ad.cap = g->tensors.len * 2;
    ad.grad = xmalloc(sizeof(int) * (size_t)ad.cap);
    for (int i = 0; i < ad.cap; i++)
        ad.grad[i] = -1;
    // Gradient tensors first, so rules can accumulate into them.
    int *grads = xmalloc(sizeof(int) * (size_t)nparams);
    for (int i = 0; i < nparams; i++) {
        grads[i] = -1;
        if (g->tensors.at[i].kind == TK_PARAM && g->tensors.at[i].trainable)
            ad.grad[i] = grads[i] = state_tensor(g, i, "grad", st->grad_dt, MEM_GRADS, TK_GRAD);
    }
    int errors = d ? d->errors : 0;
    backward(&ad, nfwd, d);
    int rc = d && d->errors > errors ? -1 : 0;
    // The gradients' global reduction, then the updates; nothing trains: nothing to update.
    if (rc == 0 && grad_sumsq(g, grads, nparams)) {
        grad_factor(g);
        optimizer(g, grads, nparams);
    } else if (rc == 0) {
        g->grad_stats = -1;
    }
    free(grads);
    free(ad.grad);
    return rc;
}
