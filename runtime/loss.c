// loss.c — the fused loss (linear_cross_entropy_grad, and linear_cross_entropy: the same
// without the gradient's GEMMs) on a backend whose
// GEMMs are library calls and whose other kernels are the plan's kernels.cu (emu, cuda):
// per row chunk the chunk's GEMMs and the instruction's launches, in the order the
// generated kernels assume, with the chunk's index in the launch arguments (i[3]). The
// chunk's logits live in the workspace (plan_loss), never more than one chunk of them.
#include "loss.h"

#include <string.h>

void rt_loss_gemm_shape(const Plan *p, const PlanInstr *in, int which, LossGemm *g) {
    PlanLoss l = plan_loss(p, in);
    PlanDType x = p->buf[in->in[0]].dtype, w = p->buf[in->in[1]].dtype;
    *g = (LossGemm){.which = which};
    switch (which) {
    case LOSS_LOGITS:   // logits [C, V] = x_c [C, K] · W [V, K]ᵀ
        *g = (LossGemm){.which = which, .m = l.chunk, .n = l.vocab, .k = l.k, .trans_b = true,
                        .ta = x, .tb = w, .tc = x};
        break;
    case LOSS_DX:       // dx_c [C, K] = dlogits [C, V] · W [V, K]
        *g = (LossGemm){.which = which, .m = l.chunk, .n = l.k, .k = l.vocab, .ta = x, .tb = w,
                        .tc = rt_loss_dx(in) >= 0 ? p->buf[in->out[rt_loss_dx(in)]].dtype : x};
        break;
    default:            // dW [V, K] (+)= dlogits [C, V]ᵀ · x_c [C, K]
        *g = (LossGemm){.which = which, .m = l.vocab, .n = l.k, .k = l.chunk, .trans_a = true, .ta = x,
                        .tb = x, .tc = rt_loss_dw(in) >= 0 ? p->buf[in->out[rt_loss_dw(in)]].dtype : x};
        break;
    }
}

// The library's workspace for product g: the instruction's past the loss's own (plan_loss).
static void with_lib(LossGemm *g, char *ws, const PlanLoss *l) {
    g->ws = l->lib_bytes ? ws + l->bytes : NULL, g->ws_bytes = (size_t)l->lib_bytes;
}

int rt_loss_run(const Exec *x, const PlanInstr *in, const LossOps *ops, char *err, size_t errlen) {
    const Plan *p = x->plan;
    PlanLoss l = plan_loss(p, in);
    KernelArgs a;
    rt_kernel_args(x, in, &a);
    char *xs = x->ptr[in->in[0]], *ws = x->ptr[in->ws];
    int64_t xrow = plan_dtype_bytes(p->buf[in->in[0]].dtype, l.k);
    bool ce = rt_loss_is_ce(in);
    int step = ce ? 1 : 0, dx = rt_loss_dx(in), dw = rt_loss_dw(in);
    if (ce && ops->launch(ops->ctx, in, 0, &a, err, errlen) != 0)   // the valid targets
        return -1;
    for (int64_t c = 0; c < l.rows / l.chunk; c++) {
        int64_t r0 = c * l.chunk;
        LossGemm g;
        rt_loss_gemm_shape(p, in, LOSS_LOGITS, &g);
        g.a = xs + r0 * xrow, g.b = x->ptr[in->in[1]], g.c = ws;
        a.i[3] = c;
        with_lib(&g, ws, &l);
        if (ops->gemm(ops->ctx, in, &g, err, errlen) != 0 || ops->launch(ops->ctx, in, step, &a, err, errlen) != 0)
            return -1;
        if (dx < 0)   // the loss (or the log-probabilities) alone
            continue;
        rt_loss_gemm_shape(p, in, LOSS_DX, &g);   // the chunk's rows of dx
        g.a = ws, g.b = x->ptr[in->in[1]];
        g.c = (char *)x->ptr[in->out[dx]] + r0 * plan_dtype_bytes(p->buf[in->out[dx]].dtype, l.k);
        with_lib(&g, ws, &l);
        if (ops->gemm(ops->ctx, in, &g, err, errlen) != 0)
            return -1;
        if (dw < 0)
            continue;
        rt_loss_gemm_shape(p, in, LOSS_DW, &g);   // the chunk's part of dW
        g.a = ws, g.b = xs + r0 * xrow, g.c = x->ptr[in->out[dw]];
        g.beta = c > 0 || (in->update & (1u << dw)) ? 1.0f : 0.0f;
        with_lib(&g, ws, &l);
        if (ops->gemm(ops->ctx, in, &g, err, errlen) != 0)
            return -1;
    }
    return ce ? ops->launch(ops->ctx, in, 2, &a, err, errlen) : 0;   // the mean
}
