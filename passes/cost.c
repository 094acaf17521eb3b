// cost.c — the estimated time of a training step on a GPU preset.
//
// Device nodes: GEMMs (linear and its backward, matmul) run at the preset's bf16 peak
// times an efficiency that falls with small dimensions, e(M,N,K) = 0.8·f(M)·f(N)·f(K)
// with f(x) = x / (x + 48); attention at half the peak (flash-attention class kernels);
// everything else is bound by memory traffic at 80% of the HBM bandwidth; each kernel
// costs a launch. Host nodes: gradients reach the host over the link on a copy stream
// that overlaps the backward, and swapped activations likewise; the gradients' norm over
// host gradients runs first, at the measured host rate; then the CPU AdamW runs at the
// measured host rate while the updated weights go back, the two overlapping layer by
// layer.
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

enum { LAUNCH_US = 4 };

static double gemm_eff(double m, double n, double k) {
    double f = (m / (m + 48)) * (n / (n + 48)) * (k / (k + 48));
    return 0.8 * f;
}

double cost_node_us(const IrGraph *g, const IrNode *n, const CostModel *cm) {
    double flops = (double)op_flops(g, n);
    double bytes = (double)(op_bytes_read(g, n) + op_bytes_written(g, n));
    double peak = cm->gpu->bf16_tflops * 1e12, hbm = cm->gpu->hbm_gbps * 1e9 * 0.8;
    switch (op_desc(n->op)->cls) {
    case OPC_MOVEMENT:
        if (bytes == 0)   // a view: no kernel
            return 0;
        break;
    case OPC_GEMM: {
        int64_t m, nn, k;
        op_info(n->op)->gemm(g, n, &m, &nn, &k);
        double e = gemm_eff((double)m, (double)nn, (double)k);
        return LAUNCH_US + fmax(flops / (peak * e), bytes / hbm) * 1e6;
    }
    case OPC_ATTENTION:
        return LAUNCH_US + fmax(flops / (peak * 0.5), bytes / hbm) * 1e6;
    default:
        break;
    }
    return LAUNCH_US + bytes / hbm * 1e6;
}

StepCost cost_step(const IrGraph *g, const CostModel *cm, int64_t accum, int64_t tokens_per_step) {
    StepCost c = {0};
    double link = cm->gpu->link_gbps * 1e9;
    double micro_link = 0, opt_link = 0, cpu_params = 0;
    bool optimizer_on_host = false;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        OpClass cls = op_desc(n->op)->cls;
        double bytes_in = n->nin > 0 ? (double)ir_tensor_bytes(&g->tensors.at[n->in[0]]) : 0;
        if (cls == OPC_COPY) {   // a swap, a gradient streamed out, a weight coming back
            *(n->phase == PHASE_OPTIMIZER ? &opt_link : &micro_link) += bytes_in;
            continue;
        }
        if (n->stream == STREAM_HOST) {   // host sums hide behind the backward
            if (n->phase == PHASE_OPTIMIZER && cls == OPC_OPTIMIZER) {
                optimizer_on_host = true;
                cpu_params += (double)ir_tensor_elems(&g->tensors.at[n->in[0]]);
            } else if (n->op == OP_GRAD_SUMSQ && cm->host_sumsq_per_s > 0) {
                // the gradients' norm on the host, before any update can start
                c.opt_us += (double)ir_tensor_elems(&g->tensors.at[n->in[0]]) / cm->host_sumsq_per_s * 1e6;
            }
            continue;
        }
        double t = cost_node_us(g, n, cm);
        if (n->phase == PHASE_OPTIMIZER) {
            c.opt_us += t;
        } else {
            if (n->recompute)
                c.recompute_us += t;
            else
                c.model_flops += op_flops(g, n);
            c.micro_us += t;
        }
    }
    // Copies in the micro-step run on copy streams that overlap the compute.
    c.copy_us = micro_link / link * 1e6;
    c.micro_us = fmax(c.micro_us, c.copy_us);
    if (optimizer_on_host) {   // CPU AdamW while the weights go back, layer by layer
        double cpu = cpu_params / cm->host_adam_params_per_s * 1e6;
        double wire = opt_link / link * 1e6;
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

double cost_measure_host_adamw(void) {
    // A plain fp32 AdamW loop over 1M parameters, three times.
    enum { N = 1 << 20 };
    float *p = malloc(sizeof(float) * 4 * N), *g = p + N, *m = g + N, *v = m + N;
    if (!p)
        return 1e9;
    for (int i = 0; i < N; i++)
        p[i] = 1e-3f * (float)(i % 97), g[i] = 1e-4f * (float)(i % 89), m[i] = v[i] = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < N; i++) {
            m[i] = 0.9f * m[i] + 0.1f * g[i];
            v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
            p[i] -= 1e-3f * (m[i] / (sqrtf(v[i]) + 1e-8f) + 0.01f * p[i]);
        }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(p);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return s > 0 ? 3.0 * N / s : 1e9;
}

double cost_measure_host_sumsq(void) {
    // The reduction's loop (runtime/cpu: squares summed in double) over 4M floats, twice.
    enum { N = 1 << 22 };
    float *x = malloc(sizeof(float) * N);
    if (!x)
        return 0;
    for (int i = 0; i < N; i++)
        x[i] = 1e-3f * (float)(i % 101);
    struct timespec t0, t1;
    volatile double sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int rep = 0; rep < 2; rep++) {
        double s = 0;
        for (int i = 0; i < N; i++)
            s += (double)x[i] * x[i];
        sink += s;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(x);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return s > 0 ? 2.0 * N / s : 0;
}
