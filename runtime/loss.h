// loss.h — the fused loss's chunks on library-GEMM backends (emu, cuda): loss.c.
#ifndef FTC_RUNTIME_LOSS_H
#define FTC_RUNTIME_LOSS_H

#include "kernel_args.h"

enum { LOSS_LOGITS, LOSS_DX, LOSS_DW, LOSS_GEMMS };

// One product of a chunk, row-major: c [m, n] = op(a) op(b) + beta · c, op(a) [m, k] (a
// stored [k, m] when trans_a), op(b) [k, n] (b stored [n, k] when trans_b).
typedef struct LossGemm {
    int which;              // LOSS_LOGITS: x_c Wᵀ; LOSS_DX: dlogits W; LOSS_DW: dlogitsᵀ x_c
    void *c;
    const void *a, *b;
    PlanDType ta, tb, tc;
    int64_t m, n, k;
    bool trans_a, trans_b;
    float beta;             // 0 assigns, 1 accumulates
    void *ws;               // the library's workspace for it (the instruction's, past its
    size_t ws_bytes;        // own layout: plan_loss), or NULL and 0
} LossGemm;

// What the backend does for the fused loss: a product on its memory, and launch l of the
// instruction's kernels with these arguments; each -1 with err on failure.
typedef struct LossOps {
    int (*gemm)(void *ctx, const PlanInstr *in, const LossGemm *g, char *err, size_t errlen);
    int (*launch)(void *ctx, const PlanInstr *in, int l, const KernelArgs *a, char *err, size_t errlen);
    void *ctx;
} LossOps;

// Whether fused-loss instruction `in` forms a gradient, and the outputs it writes dx and
// (when W trains) dW into; -1 where it has none.
static inline bool rt_loss_grads(const PlanInstr *in) {
    return in->op == OP_LINEAR_CE_GRAD || in->op == OP_LINEAR_LOGPROBS_BWD;
}
static inline int rt_loss_dx(const PlanInstr *in) {
    return in->op == OP_LINEAR_CE_GRAD ? 1 : in->op == OP_LINEAR_LOGPROBS_BWD ? 0 : -1;
}
static inline int rt_loss_dw(const PlanInstr *in) {
    int k = rt_loss_dx(in) + 1;
    return k > 0 && k < in->nout ? k : -1;
}
// Whether it is the cross entropy (its launches: the count, a chunk's terms and gradient,
// the mean), else the targets' log-probabilities (one launch a chunk: their values, or
// their gradient).
static inline bool rt_loss_is_ce(const PlanInstr *in) { return in->op == OP_LINEAR_CE || in->op == OP_LINEAR_CE_GRAD; }

// The shape and dtypes of product `which` of fused-loss instruction `in` (no pointers).
void rt_loss_gemm_shape(const Plan *p, const PlanInstr *in, int which, LossGemm *g);
// Runs fused-loss instruction `in`: launch 0 (the valid targets), per chunk the logits'
// product, launch 1 (the chunk's loss terms and their gradient, in place), the chunk's
// rows of dx and, when W trains, its part of dW (the first chunk assigns unless the
// instruction updates), then launch 2 (the mean). The log-probabilities (linear_logprobs
// and its backward) have one launch, per chunk: their values, or their gradient in place.
// -1 with err.
int rt_loss_run(const Exec *x, const PlanInstr *in, const LossOps *ops, char *err, size_t errlen);

#endif
