// cost.c — the estimated time of a training step on a GPU preset.
//
// Device nodes: GEMMs (linear and its backward, matmul) run at the preset's bf16 peak
// times an efficiency that falls with small dimensions, e(M,N,K) = 0.8·f(M)·f(N)·f(K)
// with f(x) = x / (x + 48); attention by its kernels' design (attention_us); everything
// else is bound by memory traffic at 80% of the HBM bandwidth (16-byte loads and stores:
// a STREAM copy reaches ~90% on these parts); each kernel costs a launch. Host nodes: gradients reach the host over the link on a copy stream
// that overlaps the backward, and swapped activations likewise; the gradients' norm over
// host gradients runs first, at the host's rate for a serial sum; then the CPU AdamW
// runs at the host's rate while the updated weights go back, the two overlapping layer
// by layer. The host (its AdamW rate, its link) is the training machine's as ftc compile
// was told (HostSpec), never the compiling machine's.
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LAUNCH_US = 4 };

static double gemm_eff(double m, double n, double k) {
    double f = (m / (m + 48)) * (n / (n + 48)) * (k / (k + 48));
    return 0.8 * f;
}

// The fused loss: per row chunk its products (each at its shape's efficiency) and the
// loss's kernels over the chunk's logits (passes over them, bandwidth-bound), a launch
// each. *recompute_us gets the time of the products that form again what another formed.
static double loss_us(const IrGraph *g, const IrNode *n, const CostModel *cm, double *recompute_us,
                      double *gemm_us) {
    int64_t dims[4][3];
    bool again[4];
    int np = op_info(n->op)->gemm_loss(g, n, dims, again);
    const IrTensor *x = &g->tensors.at[n->in[0]];
    int64_t k = x->shape[x->ndim - 1], rows = ir_tensor_elems(x) / k, v = g->tensors.at[n->in[1]].shape[0];
    int64_t chunk = n->attr.chunk_rows > 0 && n->attr.chunk_rows < rows ? n->attr.chunk_rows : rows;
    double peak = cm->gpu->bf16_tflops * 1e12, hbm = cm->gpu->hbm_gbps * 1e9 * 0.8;
    double chunk_us = 0, again_us = 0, products_us = 0;
    int elt = (int)dtype_bytes(x->dtype, 1);
    for (int i = 0; i < np; i++) {
        double m = (double)dims[i][0], nn = (double)dims[i][1], kk = (double)dims[i][2];
        double bytes = (m * kk + kk * nn + m * nn) * elt;
        double t = LAUNCH_US + fmax(2 * m * nn * kk / (peak * gemm_eff(m, nn, kk)), bytes / hbm) * 1e6;
        chunk_us += t;
        products_us += t;
        if (again[i])
            again_us += t;
    }
    // the loss's kernels: read (twice), write; the log-probabilities' read, their gradient's
    // read (twice) and write
    double passes = n->op == OP_LINEAR_CE ? 2 : n->op == OP_LINEAR_LOGPROBS ? 1 : 3;
    chunk_us += LAUNCH_US + passes * (double)(chunk * v * elt) / hbm * 1e6;
    double chunks = (double)(rows / chunk);
    *recompute_us = again_us * chunks;
    if (gemm_us)
        *gemm_us = products_us * chunks;
    return chunk_us * chunks + LAUNCH_US;
}

// Attention. The tiled kernels: the preset's efficiency for the direction (gpu.c), times
// S / (S + 256) for the tiles' set-up and tail on short sequences, times the blocks' share of
// the last wave (the grid in blocks of 64 query rows, or of keys backward, with two forward
// blocks and one backward block resident an SM: their registers and shared memory). The
// warp-a-row kernels (other dtypes, head dims the tiles do not take): 5% of the peak. Each
// launch (one forward, three backward) costs one.
static double attention_us(const IrGraph *g, const IrNode *n, const CostModel *cm, double flops,
                           double bytes) {
    const GpuPreset *gpu = cm->gpu;
    bool fwd = n->op != OP_ATTENTION_BWD;   // (attention and attention_decode read q first)
    const IrTensor *q = &g->tensors.at[n->in[fwd ? 0 : 1]];
    double peak = gpu->bf16_tflops * 1e12, hbm = gpu->hbm_gbps * 1e9 * 0.8, eff = 0.05;
    if (ir_attention_tiled(g, n)) {
        int64_t S = q->shape[1], tile = fwd ? 64 : op_attention_tile(q->shape[3]);
        double blocks = (double)q->shape[0] * (double)q->shape[2] * (double)((S + tile - 1) / tile);
        double slots = (double)(gpu->sms > 0 ? gpu->sms : 108) * (fwd ? 2 : 1);
        double wave = blocks / (ceil(blocks / slots) * slots);
        eff = (fwd ? gpu->attn_fwd_eff : gpu->attn_bwd_eff) * (double)S / (double)(S + 256) * wave;
    }
    return (fwd ? 1 : 3) * LAUNCH_US + fmax(flops / (peak * eff), bytes / hbm) * 1e6;
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
        return attention_us(g, n, cm, flops, bytes);
    case OPC_LOSS_GEMM: {
        double again;
        return loss_us(g, n, cm, &again, NULL);
    }
    default:
        break;
    }
    return LAUNCH_US + bytes / hbm * 1e6;
}

// The collectives of a data-parallel step (comm stream) against the device's compute, per
// phase: each node starts when its stream is free and what it reads is made (a bucket of
// collectives as one call), so compute waits for a gathered weight and a reduction for its
// bucket's last gradient. `last`: the last micro-step's collectives too. The phase's time,
// its comm stream's busy time in *comm.
static double overlap(const IrGraph *g, const CostModel *cm, IrPhase ph, bool last, double *ready,
                      double *comm) {
    double tc = 0, tm = 0;
    *comm = 0;
    memset(ready, 0, sizeof(double) * (size_t)g->tensors.len);   // (phases start drained)
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        OpClass cls = op_desc(n->op)->cls;
        if (n->phase != ph || cls == OPC_COPY || n->stream == STREAM_HOST || (n->last && !last))
            continue;
        if (cls != OPC_COLLECTIVE) {
            double start = tc;
            for (int k = 0; k < n->nin; k++)
                if (n->in[k] >= 0 && ready[ir_tensor_base(g, n->in[k])] > start)
                    start = ready[ir_tensor_base(g, n->in[k])];
            tc = start + cost_node_us(g, n, cm);
            for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
                ready[ir_tensor_base(g, n->out[k])] = tc;
            continue;
        }
        if (i > 0 && n->bucket >= 0 && g->nodes.at[i - 1].bucket == n->bucket)
            continue;   // (its bucket's first did it)
        int end = i + 1;
        while (n->bucket >= 0 && end < g->nodes.len && g->nodes.at[end].bucket == n->bucket)
            end++;
        double start = tm;
        int64_t bytes = 0;
        for (int j = i; j < end; j++) {
            const IrNode *m = &g->nodes.at[j];
            const IrTensor *t = &g->tensors.at[m->op == OP_ALL_GATHER ? m->out[0] : m->in[0]];
            bytes += dtype_bytes(t->dtype, ir_tensor_elems(t));
            if (ready[ir_tensor_base(g, m->in[0])] > start)
                start = ready[ir_tensor_base(g, m->in[0])];
        }
        double dur = link_collective_us(cm->link, n->op, bytes, g->ranks);
        tm = start + dur;
        *comm += dur;
        for (int j = i; j < end; j++)
            ready[ir_tensor_base(g, g->nodes.at[j].out[0])] = tm;
    }
    return tc > tm ? tc : tm;
}

static double link_of(const CostModel *cm) {
    return cm->link_bytes_per_s > 0 ? cm->link_bytes_per_s : cm->gpu->link_gbps * 1e9;
}

double cost_step_at(const StepCost *c, double adamw_per_s, double link_bytes_per_s) {
    double copies = c->micro_link_bytes / link_bytes_per_s * 1e6;
    double micro = fmax(c->micro_device_us, fmax(c->micro_device_us, copies) + c->micro_stall_us);
    double opt = c->opt_device_us;
    if (c->host_sumsq_elems > 0)   // a serial sum: one core's share of the AdamW rate, times 5
        opt += c->host_sumsq_elems / (adamw_per_s * c->sumsq_per_adamw) * 1e6;
    if (c->host_params > 0)   // CPU AdamW while the weights go back, layer by layer
        opt += fmax(c->host_params / adamw_per_s * 1e6, c->opt_link_bytes / link_bytes_per_s * 1e6);
    if (c->micro_last_extra_us > 0)   // the last micro-step's reductions
        return micro * (double)(c->accum - 1) +
               fmax(c->micro_device_us + c->micro_last_extra_us, copies + fmax(c->micro_stall_us, 0)) + opt;
    return micro * (double)c->accum + opt;
}

// One micro-step (forward, then backward, every stream drained between them) played out
// on its four streams: each runs its nodes in order, a node starting when its stream is
// free and its inputs are made; a copy to the device (a swapped activation coming back, a
// streamed weight a block ahead) not before the node issued before it starts, since the
// bytes it writes were another tensor's until the plan's order reached it. Copies take the
// link (each direction its own), host sums the host's rate, device nodes `dur`.
static double simulate_micro(const IrGraph *g, const CostModel *cm, const double *dur, double link) {
    int nt = g->tensors.len;
    double *ready = xcalloc((size_t)nt + 1, sizeof(double));
    double clock[STREAM_COUNT] = {0}, phase_start = 0, prev_start = 0;
    IrPhase phase = PHASE_FORWARD;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (n->phase == PHASE_OPTIMIZER)
            break;
        if (n->phase != phase) {   // the phase ends with every stream drained
            for (int k = 0; k < STREAM_COUNT; k++)
                phase_start = fmax(phase_start, clock[k]);
            for (int k = 0; k < STREAM_COUNT; k++)
                clock[k] = phase_start;
            phase = n->phase;
        }
        double start = fmax(clock[n->stream], phase_start);
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0)
                start = fmax(start, ready[ir_tensor_base(g, n->in[k])]);
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
            start = fmax(start, ready[ir_tensor_base(g, n->out[k])]);   // earlier writers first
        double d = dur[i];
        if (op_desc(n->op)->cls == OPC_COPY) {
            d = (double)ir_tensor_bytes(&g->tensors.at[n->out[0]]) / link * 1e6;
            if (n->stream == STREAM_H2D)
                start = fmax(start, prev_start);
        } else if (n->stream == STREAM_HOST) {   // a host sum: ~4 elements per AdamW update's time
            d = (double)ir_tensor_elems(&g->tensors.at[n->out[0]]) / (4 * cm->host_adamw_per_s) * 1e6;
        }
        double end = start + d;
        clock[n->stream] = end;
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
            ready[ir_tensor_base(g, n->out[k])] = end;
        prev_start = start;
    }
    double end = phase_start;
    for (int k = 0; k < STREAM_COUNT; k++)
        end = fmax(end, clock[k]);
    free(ready);
    return end;
}

void cost_stamp(IrGraph *g, const CostModel *cm) {
    for (int i = 0; i < g->nodes.len; i++) {
        IrNode *n = &g->nodes.at[i];
        OpClass cls = op_desc(n->op)->cls;
        n->est_us = cls == OPC_COPY || cls == OPC_COLLECTIVE || n->stream == STREAM_HOST ? 0
                                                                                         : cost_node_us(g, n, cm);
    }
}

// Device node n's time t (n outside the optimizer phase) into c: recompute, the model's
// FLOPs, GEMM time (the fused loss's split into what it forms again and its products),
// the micro-step's device time.
static void price_micro_node(const IrGraph *g, const IrNode *n, const CostModel *cm, double t, StepCost *c) {
    OpClass cls = op_desc(n->op)->cls;
    if (n->recompute)
        c->recompute_us += t;
    else if (cls != OPC_OPTIMIZER && n->op != OP_GRAD_SUMSQ)   // (updates inside backward)
        c->model_flops += op_flops(g, n);
    if (cls == OPC_LOSS_GEMM) {   // what it forms again, and its products
        double again, products;
        loss_us(g, n, cm, &again, &products);
        c->recompute_us += again;
        c->gemm_us += products;
    } else if (cls == OPC_GEMM) {
        c->gemm_us += t;
    }
    c->micro_device_us += t;
}

// Every node of the step but the eval and decode phases', priced into c: copies by their bytes,
// host nodes by their elements, device nodes by time (into dur, per node; collectives
// are overlap's).
static void price_nodes(const IrGraph *g, const CostModel *cm, StepCost *c, double *dur) {
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (n->phase >= PHASE_EVALUATION)   // between steps, or apart: not part of one
            continue;
        OpClass cls = op_desc(n->op)->cls;
        double bytes_in = n->nin > 0 ? (double)ir_tensor_bytes(&g->tensors.at[n->in[0]]) : 0;
        if (cls == OPC_COPY) {   // a swap, a gradient streamed out, a weight coming in or back
            *(n->phase == PHASE_OPTIMIZER ? &c->opt_link_bytes : &c->micro_link_bytes) += bytes_in;
            continue;
        }
        if (cls == OPC_COLLECTIVE)   // (their time: overlap() below)
            continue;
        if (n->stream == STREAM_HOST) {   // host sums hide behind the backward
            if (n->phase == PHASE_OPTIMIZER && cls == OPC_OPTIMIZER)
                c->host_params += (double)ir_tensor_elems(&g->tensors.at[n->in[0]]);
            else if (n->op == OP_GRAD_SUMSQ)   // the gradients' norm, before any update
                c->host_sumsq_elems += (double)ir_tensor_elems(&g->tensors.at[n->in[0]]);
            continue;
        }
        double t = dur[i] = cost_node_us(g, n, cm);
        if (n->phase == PHASE_OPTIMIZER)
            c->opt_device_us += t;
        else
            price_micro_node(g, n, cm, t, c);
    }
}

// With several ranks, the compute again with the collectives beside it: a micro-step
// without the last one's reductions, the last with them, the optimizer's gathers.
static void price_collectives(const IrGraph *g, const CostModel *cm, int64_t accum, StepCost *c) {
    double *ready = xcalloc((size_t)g->tensors.len + 1, sizeof(double)), comm_f, comm_b, comm_lf, comm_lb, comm_o;
    double plain = overlap(g, cm, PHASE_FORWARD, false, ready, &comm_f);
    plain += overlap(g, cm, PHASE_BACKWARD, false, ready, &comm_b);
    double last = overlap(g, cm, PHASE_FORWARD, true, ready, &comm_lf);
    last += overlap(g, cm, PHASE_BACKWARD, true, ready, &comm_lb);
    double opt = overlap(g, cm, PHASE_OPTIMIZER, true, ready, &comm_o);
    free(ready);
    c->comm_us = (comm_f + comm_b) * (double)(accum - 1) + comm_lf + comm_lb + comm_o;
    c->comm_exposed_us = (plain - c->micro_device_us) * (double)(accum - 1) + (last - c->micro_device_us) +
                         (opt - c->opt_device_us);
    c->micro_device_us = plain, c->micro_last_extra_us = last - plain, c->opt_device_us = opt;
}

// The step's totals from its micro-step and optimizer parts: the optimizer's and the
// copies' times, the step time, the per-step sums, throughput and MFU.
static void step_totals(const CostModel *cm, double link, int64_t accum, int64_t tokens_per_step, StepCost *c) {
    double micro_copy = c->micro_link_bytes / link * 1e6;
    c->sumsq_per_adamw = cm->host_sumsq_per_s / cm->host_adamw_per_s;
    c->opt_us = c->opt_device_us;
    if (c->host_sumsq_elems > 0)
        c->opt_us += c->host_sumsq_elems / cm->host_sumsq_per_s * 1e6;
    c->copy_us = micro_copy * (double)accum;
    if (c->host_params > 0) {
        double wire = c->opt_link_bytes / link * 1e6;
        c->opt_us += fmax(c->host_params / cm->host_adamw_per_s * 1e6, wire);
        c->copy_us += wire;
    }
    c->step_us = cost_step_at(c, cm->host_adamw_per_s, link);
    c->recompute_us *= (double)accum;
    c->gemm_us *= (double)accum;
    c->device_us = c->micro_device_us * (double)accum + c->opt_device_us;
    c->model_flops *= accum;
    c->tokens_per_s = c->step_us > 0 ? (double)tokens_per_step / (c->step_us * 1e-6) : 0;
    c->mfu = c->step_us > 0 ? (double)c->model_flops / (c->step_us * 1e-6) / (cm->gpu->bf16_tflops * 1e12) : 0;
}

StepCost cost_step(const IrGraph *g, const CostModel *cm, int64_t accum, int64_t tokens_per_step) {
    StepCost c = {.accum = accum, .tokens = tokens_per_step};
    double link = link_of(cm);
    double *dur = xcalloc((size_t)g->nodes.len + 1, sizeof(double));
    price_nodes(g, cm, &c, dur);
    // The streams overlap as far as the order and the data let them: what the micro-step
    // takes beyond its busiest resource is a stall (a copy the compute waits for).
    c.micro_us = simulate_micro(g, cm, dur, link);
    free(dur);
    c.micro_stall_us = c.micro_us - fmax(c.micro_device_us, c.micro_link_bytes / link * 1e6);
    if (g->ranks > 1)
        price_collectives(g, cm, accum, &c);
    step_totals(cm, link, accum, tokens_per_step, &c);
    return c;
}
