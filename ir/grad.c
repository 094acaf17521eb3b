// grad.c — the calls a derivative rule makes: read the gradient of a node's
// outputs, emit backward ops, hand gradients to inputs. Gradients of values are
// single-assignment (a second contribution is added with a new node); a trainable
// parameter's gradient is its TK_GRAD tensor, accumulated in place.
#include "ir.h"

#include <stdlib.h>

static void ensure(Autodiff *ad) {
    int n = ad->g->tensors.len;
    if (n <= ad->cap)
        return;
    int cap = n * 2;
    ad->grad = xrealloc(ad->grad, sizeof(int) * (size_t)cap);
    IR_ASSERT(ad->grad);
    for (int i = ad->cap; i < cap; i++)
        ad->grad[i] = -1;
    ad->cap = cap;
}

bool ad_needs(const Autodiff *ad, int t) {
    return t >= 0 && ad->g->tensors.at[t].requires_grad;
}

int ad_dy(Autodiff *ad, const IrNode *n, int k) {
    ensure(ad);
    return n->out[k] >= 0 ? ad->grad[n->out[k]] : -1;
}

static const char *grad_name(Autodiff *ad, const IrNode *n, const char *what) {
    return arena_printf(ad->g->arena, "%s.%s", ad->g->tensors.at[n->out[0]].name, what);
}

int ad_node(Autodiff *ad, const IrNode *n, OpKind op, int nin, const int *in, OpAttr attr,
            const char *what) {
    IrShapeErr err;
    int id = ir_node_add(ad->g, op, nin, in, attr, grad_name(ad, n, what), n->layer, n->loc, &err);
    if (id < 0) {
        fprintf(stderr, "autodiff: %s of %s: %s\n", op_desc(op)->name,
                op_desc(n->op)->name, err.msg);
        IR_ASSERT(id >= 0);
    }
    IrNode *made = &ad->g->nodes.at[id];
    made->phase = PHASE_BACKWARD;
    for (int k = 0; k < IR_MAX_OUTPUTS && made->out[k] >= 0; k++) {
        IrTensor *t = &ad->g->tensors.at[made->out[k]];
        t->requires_grad = false;   // no second derivatives
    }
    ensure(ad);
    return id;
}

int ad_op(Autodiff *ad, const IrNode *n, OpKind op, int nin, const int *in, OpAttr attr,
          const char *what) {
    int id = ad_node(ad, n, op, nin, in, attr, what);   // may move g->nodes
    return ad->g->nodes.at[id].out[0];
}

static bool is_trainable(const Autodiff *ad, int t) {
    const IrTensor *x = &ad->g->tensors.at[t];
    return x->kind == TK_PARAM && x->trainable;
}

void ad_add(Autodiff *ad, const IrNode *n, int t, int contribution) {
    ensure(ad);
    if (is_trainable(ad, t)) {
        int gt = ad->grad[t];
        int id = ir_node_add_update(ad->g, OP_ACC, 1, &contribution, (OpAttr){0}, 1, &gt,
                                    n->layer, n->loc);
        ad->g->nodes.at[id].phase = PHASE_BACKWARD;
        return;
    }
    if (ad->grad[t] < 0) {
        ad->grad[t] = contribution;
        return;
    }
    // A contribution whose op can add its result into a sum (OpInfo.acc_in: linear's dx as
    // its GEMM's C with beta = 1, rounded once with the sum; a norm's dx, rounding dx first
    // as the add would) takes the sum so far there: no add kernel, one pass fewer.
    const IrTensor *c = &ad->g->tensors.at[contribution], *so_far = &ad->g->tensors.at[ad->grad[t]];
    IrNode *p = c->producer >= 0 ? &ad->g->nodes.at[c->producer] : NULL;
    int acc = p ? op_info(p->op)->acc_in - 1 : -1;
    if (acc >= 0 && p->nin == acc && p->out[0] == contribution && c->dtype == so_far->dtype &&
        ir_same_shape(c, so_far)) {
        p->in[acc] = ad->grad[t];
        p->nin = acc + 1;
        ad->grad[t] = contribution;
        return;
    }
    int in[2] = {ad->grad[t], contribution};
    int sum = ad_op(ad, n, OP_ADD, 2, in, (OpAttr){0}, "dsum");
    ensure(ad);
    ad->grad[t] = sum;
}

void ad_acc(Autodiff *ad, const IrNode *n, int t, OpKind op, int nin, const int *in, OpAttr attr) {
    ensure(ad);
    if (is_trainable(ad, t) && !(ad->gemm_temporaries && op_desc(op)->cls == OPC_GEMM)) {
        int gt = ad->grad[t];
        int id = ir_node_add_update(ad->g, op, nin, in, attr, 1, &gt, n->layer, n->loc);
        ad->g->nodes.at[id].phase = PHASE_BACKWARD;
        return;
    }
    ad_add(ad, n, t, ad_op(ad, n, op, nin, in, attr, "dacc"));
}

void ad_acc_output(Autodiff *ad, int node, int k, int t) {
    ensure(ad);
    IR_ASSERT(is_trainable(ad, t) && k > 0 && k < IR_MAX_OUTPUTS);
    IrNode *n = &ad->g->nodes.at[node];
    n->out[k] = ad->grad[t];
    n->update |= (uint8_t)(1u << k);
}

int ad_fold_output(Autodiff *ad, const IrNode *n, OpKind op, OpAttr attr, int like, const char *what) {
    const IrTensor l = ad->g->tensors.at[like];   // a copy: adding a tensor may move the array
    int t = ir_tensor_add(ad->g, grad_name(ad, n, what), TK_VALUE, l.dtype, l.ndim, l.shape, n->loc);
    IrTensor *x = ir_tensor(ad->g, t);
    x->producer = n->id;
    x->layer = n->layer;
    IrNode *f = &ad->g->nodes.at[n->id];
    f->op = op;
    f->attr = attr;
    f->out[1] = t;
    ensure(ad);
    return t;
}
