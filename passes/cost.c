// cost.c — the estimated time of a training step on a GPU preset.
//
// Device nodes: GEMMs (linear and its backward, matmul) run at the preset's bf16 peak
// times an efficiency that falls with small dimensions, e(M,N,K) = 0.8·f(M)·f(N)·f(K)
// with f(x) = x / (x + 48); attention at half the peak (flash-attention class kernels);
// everything else is bound by memory traffic at 80% of the HBM bandwidth; each kernel
// costs a launch. Host nodes: gradients reach the host over the link on a copy stream
// that overlaps the backward; the CPU AdamW runs at the measured host rate while the
// updated weights go back over the link, the two overlapping layer by layer.
#include "passes.h"

#include <math.h>

enum { LAUNCH_US = 4 };

static double gemm_eff(double m, double n, double k) {
    double f = (m / (m + 48)) * (n / (n + 48)) * (k / (k + 48));
    return 0.8 * f;
}

// The GEMM dimensions of a node, or false.
static bool gemm_dims(const IrGraph *g, const IrNode *n, double *m, double *nn, double *k) {
    const IrTensor *a = &g->tensors.at[n->in[0]], *b = &g->tensors.at[n->in[1]];
    const IrTensor *o = &g->tensors.at[n->out[0]];
    switch (n->op) {
    case OP_LINEAR:
        *m = (double)(ir_tensor_elems(a) / a->shape[a->ndim - 1]), *nn = (double)b->shape[0],
        *k = (double)b->shape[1];
        return true;
    case OP_LINEAR_DX:   // dy [M, N] · W [N, K]
        *m = (double)(ir_tensor_elems(a) / a->shape[a->ndim - 1]), *nn = (double)b->shape[1],
        *k = (double)a->shape[a->ndim - 1];
        return true;
    case OP_LINEAR_DW:   // dyᵀ [N, M] · x [M, K]
        *m = (double)o->shape[0], *nn = (double)o->shape[1],
        *k = (double)(ir_tensor_elems(a) / a->shape[a->ndim - 1]);
        return true;
    case OP_MATMUL:
    case OP_MATMUL_DA:
    case OP_MATMUL_DB:
        *m = (double)o->shape[o->ndim - 2], *nn = (double)o->shape[o->ndim - 1],
        *k = (double)op_flops(g, n) / (2.0 * (double)ir_tensor_elems(o));
        return true;
    default:
        return false;
    }
}

double cost_node_us(const IrGraph *g, const IrNode *n, const CostModel *cm) {
    double flops = (double)op_flops(g, n);
    double bytes = (double)(op_bytes_read(g, n) + op_bytes_written(g, n));
    double peak = cm->gpu->bf16_tflops * 1e12, hbm = cm->gpu->hbm_gbps * 1e9 * 0.8;
    if (n->op == OP_VIEW)
        return 0;
    double m, nn, k;
    if (gemm_dims(g, n, &m, &nn, &k))
        return LAUNCH_US + fmax(flops / (peak * gemm_eff(m, nn, k)), bytes / hbm) * 1e6;
    if (n->op == OP_ATTENTION || n->op == OP_ATTENTION_BWD)
        return LAUNCH_US + fmax(flops / (peak * 0.5), bytes / hbm) * 1e6;
    return LAUNCH_US + bytes / hbm * 1e6;
}

StepCost cost_step(const IrGraph *g, const CostModel *cm, int64_t accum, int64_t tokens_per_step) {
    StepCost c = {0};
    double link = cm->gpu->link_gbps * 1e9;
    double d2h = 0, h2d = 0, cpu_params = 0, grad_bytes_on_device = 0;
    bool optimizer_on_host = false;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        double flops = (double)op_flops(g, n);
        if (n->phase != PHASE_OPTIMIZER) {
            if (n->host || n->op == OP_COPY) {   // a gradient add or a swap: bytes over the link
                d2h += (double)ir_tensor_bytes(&g->tensors.at[n->in[0]]);
                continue;
            }
            double t = cost_node_us(g, n, cm);
            if (n->recompute)
                c.recompute_us += t;
            else
                c.model_flops += (int64_t)flops;
            c.micro_us += t;
            continue;
        }
        if (n->host) {
            if (n->op == OP_ADAMW || n->op == OP_SGD) {
                optimizer_on_host = true;
                cpu_params += (double)ir_tensor_elems(&g->tensors.at[n->in[0]]);
                h2d += (double)ir_tensor_bytes(&g->tensors.at[n->out[0]]);
                if (g->tensors.at[n->in[0]].arena == 0)   // gradient still on the device
                    grad_bytes_on_device += (double)ir_tensor_bytes(&g->tensors.at[n->in[0]]);
            }
            continue;
        }
        c.opt_us += cost_node_us(g, n, cm);
    }
    // Gradients stream during backward on the copy stream.
    c.copy_us = d2h / link * 1e6;
    double micro_dev = c.micro_us;
    c.micro_us = fmax(micro_dev, c.copy_us);
    if (optimizer_on_host) {
        double cpu = cpu_params / cm->host_adam_params_per_s * 1e6;
        double wire = (h2d + grad_bytes_on_device) / link * 1e6;
        c.opt_us += fmax(cpu, wire);
        c.copy_us = c.copy_us * (double)accum + wire;
    } else {
        c.copy_us *= (double)accum;
    }
    c.step_us = c.micro_us * (double)accum + c.opt_us;
    c.recompute_us *= (double)accum;
    c.model_flops *= accum;
    c.tokens_per_s = c.step_us > 0 ? (double)tokens_per_step / (c.step_us * 1e-6) : 0;
    c.mfu = c.step_us > 0 ? (double)c.model_flops / (c.step_us * 1e-6) / (cm->gpu->bf16_tflops * 1e12)
                          : 0;
    return c;
}
