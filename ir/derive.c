// derive.c — the derivative rules: the autodiff's column of the op table. Each rule
// appends the gradient nodes of a forward node through grad.c's builders (ad_dy the
// gradient reaching an output, ad_add / ad_acc handing gradients to the inputs); ops
// without a rule (backward and optimizer ops) are not differentiated.
#include "ir.h"

#include <string.h>

#define T_AD(ad, id) (&(ad)->g->tensors.at[(id)])

// Sums `d` down to input k's shape when k was broadcast (its shape a suffix).
static int unbroadcast(Autodiff *ad, const IrNode *n, int d, int k) {
    const IrTensor *t = T_AD(ad, n->in[k]), *dt = T_AD(ad, d);
    if (ir_same_shape(t, dt))
        return d;
    OpAttr a = {.ndim = t->ndim};
    memcpy(a.shape, t->shape, sizeof a.shape);
    return ad_op(ad, n, OP_SUM_TO, 1, &d, a, "sum");
}

// Hands gradient `d` of input k to it, summed down to its shape when it was broadcast: a
// broadcast parameter's sum adds straight into its gradient (sum_to +=), no sum of its own.
static void add_unbroadcast(Autodiff *ad, const IrNode *n, int d, int k) {
    const IrTensor *t = T_AD(ad, n->in[k]), *dt = T_AD(ad, d);
    if (!ir_same_shape(t, dt) && t->kind == TK_PARAM && t->trainable) {
        OpAttr a = {.ndim = t->ndim};
        memcpy(a.shape, t->shape, sizeof a.shape);
        ad_acc(ad, n, n->in[k], OP_SUM_TO, 1, &d, a);
        return;
    }
    ad_add(ad, n, n->in[k], unbroadcast(ad, n, d, k));
}

static void bwd_add_sub(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    if (ad_needs(ad, n->in[0]))
        ad_add(ad, n, n->in[0], dy);
    if (ad_needs(ad, n->in[1])) {
        int d = dy;
        if (n->op == OP_SUB)
            d = ad_op(ad, n, OP_SCALE, 1, &dy, (OpAttr){.f = -1}, "neg");
        add_unbroadcast(ad, n, d, 1);
    }
}

static void bwd_mul(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    if (ad_needs(ad, n->in[0])) {
        int in[2] = {dy, n->in[1]};
        ad_add(ad, n, n->in[0], ad_op(ad, n, OP_MUL, 2, in, (OpAttr){0}, "da"));
    }
    if (ad_needs(ad, n->in[1])) {
        int in[2] = {dy, n->in[0]};
        int d = ad_op(ad, n, OP_MUL, 2, in, (OpAttr){0}, "db");
        add_unbroadcast(ad, n, d, 1);
    }
}

// y = a / b: da = dy / b; db = -sum(dy·a / b²).
static void bwd_div(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    int a = n->in[0], b = n->in[1];
    if (ad_needs(ad, a)) {
        int in[2] = {dy, b};
        ad_add(ad, n, a, ad_op(ad, n, OP_DIV, 2, in, (OpAttr){0}, "da"));
    }
    if (ad_needs(ad, b)) {
        int i1[2] = {dy, a}, i2[2] = {b, b};
        int t = ad_op(ad, n, OP_MUL, 2, i1, (OpAttr){0}, "dya");
        int bb = ad_op(ad, n, OP_MUL, 2, i2, (OpAttr){0}, "bb");
        int i3[2] = {t, bb};
        int q = ad_op(ad, n, OP_DIV, 2, i3, (OpAttr){0}, "q");
        int d = ad_op(ad, n, OP_SCALE, 1, &q, (OpAttr){.f = -1}, "db");
        add_unbroadcast(ad, n, d, 1);
    }
}

static void bwd_scale(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy >= 0 && ad_needs(ad, n->in[0]))
        ad_add(ad, n, n->in[0], ad_op(ad, n, OP_SCALE, 1, &dy, n->attr, "dx"));
}

// Unary ops whose backward op reads (dy, x) or (dy, y).
static void bwd_unary(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0 || !ad_needs(ad, n->in[0]))
        return;
    int d;
    if (n->op == OP_EXP) {
        int in[2] = {dy, n->out[0]};
        d = ad_op(ad, n, OP_MUL, 2, in, (OpAttr){0}, "dx");
    } else if (n->op == OP_ROPE) {
        int in[3] = {dy, n->nin > 1 ? n->in[1] : -1, n->nin > 2 ? n->in[2] : -1};
        d = ad_op(ad, n, OP_ROPE_BWD, in[2] >= 0 ? 3 : in[1] >= 0 ? 2 : 1, in, n->attr, "dx");
    } else if (n->op == OP_SOFTMAX) {
        int in[2] = {dy, n->out[0]};
        d = ad_op(ad, n, OP_SOFTMAX_BWD, 2, in, n->attr, "dx");
    } else if (n->op == OP_DROPOUT) {
        if (n->attr.f == 0) {
            d = dy;
        } else {
            int in[2] = {dy, n->out[1]};
            d = ad_op(ad, n, OP_DROPOUT_BWD, 2, in, n->attr, "dx");
        }
    } else {
        int in[2] = {dy, n->in[0]};
        d = ad_op(ad, n, n->op == OP_SILU ? OP_SILU_BWD : OP_GELU_BWD, 2, in, n->attr, "dx");
    }
    ad_add(ad, n, n->in[0], d);
}

// tanh, softcap: their backward reads the output; gelu_exact: the input.
static void bwd_activation(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0 || !ad_needs(ad, n->in[0]))
        return;
    OpKind op = n->op == OP_TANH ? OP_TANH_BWD : n->op == OP_SOFTCAP ? OP_SOFTCAP_BWD : OP_GELU_EXACT_BWD;
    int in[2] = {dy, n->op == OP_GELU_EXACT ? n->in[0] : n->out[0]};
    ad_add(ad, n, n->in[0], ad_op(ad, n, op, 2, in, n->attr, "dx"));
}

// The slice's gradient is dy in its range of the input, zero elsewhere; into a parameter's
// gradient it is added in place.
static void bwd_slice(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0 || !ad_needs(ad, n->in[0]))
        return;
    const IrTensor *x = T_AD(ad, n->in[0]);
    OpAttr a = n->attr;
    a.axis = ir_dim_index(a.axis, x->ndim);
    a.ndim = x->ndim;
    memcpy(a.shape, x->shape, sizeof a.shape);
    ad_acc(ad, n, n->in[0], OP_SLICE_BWD, 1, &dy, a);
}

// Each input's gradient is its range of dy.
static void bwd_concat(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    int ax = ir_dim_index(n->attr.axis, T_AD(ad, n->in[0])->ndim);
    int64_t at = 0;
    for (int k = 0; k < n->nin; k++) {
        int64_t size = T_AD(ad, n->in[k])->shape[ax];
        if (ad_needs(ad, n->in[k])) {
            OpAttr a = {.axis = ax, .start = at, .size = size};
            ad_add(ad, n, n->in[k], ad_op(ad, n, OP_SLICE, 1, &dy, a, "dpart"));
        }
        at += size;
    }
}

static void bwd_embed(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0 || !ad_needs(ad, n->in[0]))
        return;
    const IrTensor *tab = T_AD(ad, n->in[0]);
    OpAttr a = {.ndim = 2, .shape = {tab->shape[0], tab->shape[1]}, .pad = n->attr.pad};
    int in[2] = {dy, n->in[1]};
    ad_acc(ad, n, n->in[0], OP_EMBED_BWD, 2, in, a);
}

// x's and W's gradients of x Wᵀ, given the output's gradient dy.
// x's and W's gradients of x Wᵀ with dy scaled by `scale` (1: not), the scale the GEMMs'
// alpha (no kernel scales dy first).
static void linear_dx_dw(Autodiff *ad, const IrNode *n, int dy, double scale) {
    OpAttr a = {.f = scale == 1.0 ? 0 : scale};
    if (ad_needs(ad, n->in[0])) {
        int in[2] = {dy, n->in[1]};
        ad_add(ad, n, n->in[0], ad_op(ad, n, OP_LINEAR_DX, 2, in, a, "dx"));
    }
    if (ad_needs(ad, n->in[1])) {
        int in[2] = {dy, n->in[0]};
        ad_acc(ad, n, n->in[1], OP_LINEAR_DW, 2, in, a);
    }
}

static void bwd_linear(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    linear_dx_dw(ad, n, dy, 1.0);
    if (n->nin == 3 && n->in[2] >= 0 && ad_needs(ad, n->in[2])) {
        OpAttr a = {.ndim = 1, .shape = {T_AD(ad, n->in[2])->shape[0]}};
        ad_acc(ad, n, n->in[2], OP_SUM_TO, 1, &dy, a);
    }
}

// y + c·x Wᵀ: y's gradient is dy itself; x's and W's are linear's, of c·dy (c the GEMMs'
// alpha).
static void bwd_linear_acc(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    if (ad_needs(ad, n->in[2]))
        ad_add(ad, n, n->in[2], dy);
    linear_dx_dw(ad, n, dy, n->attr.f);
}

// b's gradient: added into a parameter's by the GEMM itself (β = 1), else a value of its own.
static void matmul_db(Autodiff *ad, const IrNode *n, int dy) {
    int in[2] = {n->in[0], dy};
    const IrTensor *a = T_AD(ad, n->in[0]), *b = T_AD(ad, n->in[1]);
    OpAttr at = {0};
    if (b->ndim == 2 && a->ndim > 2)   // a weight shared by every row: summed over them
        at = (OpAttr){.ndim = 2, .shape = {b->shape[0], b->shape[1]}};
    if (b->kind == TK_PARAM)
        ad_acc(ad, n, n->in[1], OP_MATMUL_DB, 2, in, at);
    else
        ad_add(ad, n, n->in[1], ad_op(ad, n, OP_MATMUL_DB, 2, in, at, "db"));
}

static void bwd_matmul(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    // A weight's gradient first: it allocates nothing and may be the last reader of a.
    bool weight = ad_needs(ad, n->in[1]) && T_AD(ad, n->in[1])->kind == TK_PARAM;
    if (weight)
        matmul_db(ad, n, dy);
    if (ad_needs(ad, n->in[0])) {
        int in[2] = {dy, n->in[1]};
        ad_add(ad, n, n->in[0], ad_op(ad, n, OP_MATMUL_DA, 2, in, (OpAttr){0}, "da"));
    }
    if (ad_needs(ad, n->in[1]) && !weight)
        matmul_db(ad, n, dy);
}

static void bwd_norm(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    bool rms = n->op == OP_RMSNORM;
    if (ad_needs(ad, n->in[0])) {
        int in[4] = {dy, n->in[0], n->in[1], n->out[1]};
        ad_add(ad, n, n->in[0],
               ad_op(ad, n, rms ? OP_RMSNORM_DX : OP_LAYERNORM_DX, 4, in, n->attr, "dx"));
    }
    if (ad_needs(ad, n->in[1])) {
        int in[3] = {dy, n->in[0], n->out[1]};
        ad_acc(ad, n, n->in[1], rms ? OP_RMSNORM_DW : OP_LAYERNORM_DW, 3, in, n->attr);
    }
    if (!rms && ad_needs(ad, n->in[2])) {
        OpAttr a = {.ndim = 1, .shape = {T_AD(ad, n->in[2])->shape[0]}};
        ad_acc(ad, n, n->in[2], OP_SUM_TO, 1, &dy, a);
    }
}

static void bwd_attention(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0)
        return;
    bool pos = n->nin > 3 && n->in[3] >= 0;   // document masking: the same keys are masked
    int in[7] = {dy, n->in[0], n->in[1], n->in[2], n->out[0], n->out[1], pos ? n->in[3] : -1};
    int id = ad_node(ad, n, OP_ATTENTION_BWD, pos ? 7 : 6, in, n->attr, "d");
    for (int k = 0; k < 3; k++)
        if (ad_needs(ad, n->in[k]))
            ad_add(ad, n, n->in[k], ad->g->nodes.at[id].out[k]);
}

static void bwd_view(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0 || !ad_needs(ad, n->in[0]))
        return;
    const IrTensor *x = T_AD(ad, n->in[0]);
    OpAttr a = n->attr;
    if (n->op == OP_VIEW) {
        a.ndim = x->ndim;
        memcpy(a.shape, x->shape, sizeof a.shape);
    }
    ad_add(ad, n, n->in[0], ad_op(ad, n, n->op, 1, &dy, a, "dx"));
}

// The loss is the root: its gradient is the accumulation scale, folded into the op. A
// loss over the step's trained targets (a count input) sums over the micro-steps as it
// is: each is its own share of the step's mean, so the scale is 1.
static void bwd_cross_entropy(Autodiff *ad, const IrNode *n) {
    if (!ad_needs(ad, n->in[0]))
        return;
    bool counted = n->nin > 2 && n->in[2] >= 0;
    int in[3] = {n->in[0], n->in[1], counted ? n->in[2] : -1};
    OpAttr a = n->attr;
    a.f = counted ? 1.0 : ad->loss_scale;
    ad_add(ad, n, n->in[0], ad_op(ad, n, OP_CROSS_ENTROPY_BWD, counted ? 3 : 2, in, a, "dlogits"));
}

// A preference loss is the root, over the step's pairs (its count input): each micro-step
// its own share, so no accumulation scale. Its gradient reaches the policy's
// log-probabilities alone; a reference's are constants.
static void bwd_preference(Autodiff *ad, const IrNode *n) {
    if (!ad_needs(ad, n->in[0]))
        return;
    int ref = n->nin > 3 ? n->in[3] : -1;
    int in[4] = {n->in[0], n->in[1], n->in[2], ref};
    ad_add(ad, n, n->in[0], ad_op(ad, n, OP_PREFERENCE_BWD, ref >= 0 ? 4 : 3, in, n->attr, "dlp"));
}

static void bwd_logprobs(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    if (dy < 0 || !ad_needs(ad, n->in[0]))
        return;
    int in[3] = {dy, n->in[0], n->in[1]};
    ad_add(ad, n, n->in[0], ad_op(ad, n, OP_LOGPROBS_BWD, 3, in, (OpAttr){0}, "dlogits"));
}

// The fused loss is the root, its gradient the accumulation's scale, known before any
// backward runs: the forward node itself becomes the _grad op, forming in the same pass
// over each chunk of logits their gradient, the chunk's rows of dx and its part of dW
// (llm.c's fused classifier does the same). The logits are never formed twice.
static void bwd_linear_ce(Autodiff *ad, const IrNode *n) {
    bool dw = ad_needs(ad, n->in[1]);
    OpAttr a = n->attr;   // (over the step's target count each micro-step is its own share)
    a.f = n->nin > 3 && n->in[3] >= 0 ? 1.0 : ad->loss_scale;
    int dx = ad_fold_output(ad, n, OP_LINEAR_CE_GRAD, a, n->in[0], "dx");
    if (dw)
        ad_acc_output(ad, n->id, 2, n->in[1]);
    if (ad_needs(ad, n->in[0]))
        ad_add(ad, n, n->in[0], dx);
}

// The fused linear + logprobs: its backward forms each chunk's logits again (they were
// never kept), their gradient by dy, the chunk's rows of dx and its part of dW.
static void bwd_linear_logprobs(Autodiff *ad, const IrNode *n) {
    int dy = ad_dy(ad, n, 0);
    bool dx = ad_needs(ad, n->in[0]), dw = ad_needs(ad, n->in[1]);
    if (dy < 0 || (!dx && !dw))
        return;
    int in[4] = {n->in[0], n->in[1], n->in[2], dy};
    int id = ad_node(ad, n, OP_LINEAR_LOGPROBS_BWD, 4, in, n->attr, "dx");
    int d = ad->g->nodes.at[id].out[0];
    if (dw)
        ad_acc_output(ad, id, 1, n->in[1]);
    if (dx)
        ad_add(ad, n, n->in[0], d);
}

static const AdRule rules[OP_COUNT] = {
    [OP_EMBED] = bwd_embed,
    [OP_LINEAR] = bwd_linear,
    [OP_LINEAR_ACC] = bwd_linear_acc,
    [OP_MATMUL] = bwd_matmul,
    [OP_ADD] = bwd_add_sub,
    [OP_SUB] = bwd_add_sub,
    [OP_MUL] = bwd_mul,
    [OP_DIV] = bwd_div,
    [OP_SCALE] = bwd_scale,
    [OP_SILU] = bwd_unary,
    [OP_GELU] = bwd_unary,
    [OP_EXP] = bwd_unary,
    [OP_RMSNORM] = bwd_norm,
    [OP_LAYERNORM] = bwd_norm,
    [OP_ROPE] = bwd_unary,
    [OP_SOFTMAX] = bwd_unary,
    [OP_ATTENTION] = bwd_attention,
    [OP_VIEW] = bwd_view,
    [OP_TRANSPOSE] = bwd_view,
    [OP_DROPOUT] = bwd_unary,
    [OP_CROSS_ENTROPY] = bwd_cross_entropy,
    [OP_SLICE] = bwd_slice,
    [OP_CONCAT] = bwd_concat,
    [OP_TANH] = bwd_activation,
    [OP_SOFTCAP] = bwd_activation,
    [OP_GELU_EXACT] = bwd_activation,
    [OP_LINEAR_CE] = bwd_linear_ce,
    [OP_LOGPROBS] = bwd_logprobs,
    [OP_LINEAR_LOGPROBS] = bwd_linear_logprobs,
    [OP_PREFERENCE] = bwd_preference,
};

AdRule ad_rule(OpKind op) { return op < OP_COUNT ? rules[op] : NULL; }
