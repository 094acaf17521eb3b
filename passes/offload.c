// offload.c — what lives in host memory (ZeRO-Offload style), and the copies that carry
// bytes across, so that every node touches only the memory of the stream it runs on:
//   optimizer: AdamW's moments and the fp32 master weights live in the host arena, and
//              the update runs on the CPU (the host stream) over host buffers only: the
//              gradient comes over first (a d2h copy, unless it already accumulates on
//              the host), the update writes the new weight into a host staging buffer,
//              and an h2d copy takes it back to the device. Without a master copy the
//              update reads the weight, so the weight comes over first too.
//   grads:     the gradients accumulate in the host arena: a backward node that would
//              add into a gradient writes a device buffer of its own instead, a d2h copy
//              takes it to a host staging buffer, and an `acc` on the host stream adds it
//              in. A gradient's bytes occupy the device only between its making and its
//              copy.
// A collective on host bytes goes through a device copy. Parameters stay on the device.
#include "passes.h"

#include <stdlib.h>

// A fresh host tensor holding a copy of device tensor `from`, made by a d2h copy.
static int to_host(IrGraph *g, int from, const IrNode *at, const char *what, OffloadStats *st) {
    IrShapeErr err;
    const char *name = arena_printf(g->arena, "%s.%s", g->tensors.at[from].name, what);
    int id = ir_node_add(g, OP_COPY, 1, &from, (OpAttr){0}, name, at->layer, at->loc, &err);
    IR_ASSERT(id >= 0);
    IrNode *n = &g->nodes.at[id];
    n->phase = at->phase;
    n->stream = STREAM_D2H;
    IrTensor *t = &g->tensors.at[n->out[0]];
    t->arena = 1;
    t->requires_grad = false;
    if (at->phase != PHASE_OPTIMIZER)
        st->d2h_bytes += ir_tensor_bytes(t);
    return n->out[0];
}

// An h2d copy of host tensor `from` into the existing device tensor `to`.
static void to_device(IrGraph *g, int from, int to, const IrNode *at, OffloadStats *st) {
    int id = ir_node_add_update(g, OP_COPY, 1, &from, (OpAttr){0}, 1, &to, at->layer, at->loc);
    g->nodes.at[id].phase = at->phase;
    g->nodes.at[id].stream = STREAM_H2D;
    st->h2d_bytes += ir_tensor_bytes(&g->tensors.at[to]);
}

// An optimizer node on the host: its gradient and its weight through host buffers, the
// gradients' factor from `factor` (a host tensor).
static void host_update(IrGraph *g, IrRewrite *rw, IrNode *nd, int factor, OffloadStats *st) {
    int grad = nd->in[0], param = nd->out[0];
    if (g->tensors.at[grad].arena == 0)
        nd->in[0] = to_host(g, grad, nd, "host", st);
    nd->in[1] = factor;
    bool master = false;   // the update starts from an fp32 master copy, not the weight
    for (int k = 1; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++)
        master |= g->tensors.at[nd->out[k]].cat == MEM_MASTER;
    int stage;
    if (master) {   // the update assigns the weight: a fresh host buffer
        const IrTensor p = g->tensors.at[param];
        stage = ir_tensor_add(g, arena_printf(g->arena, "%s.host", p.name), TK_VALUE, p.dtype,
                              p.ndim, p.shape, p.loc);
        g->tensors.at[stage].arena = 1;
        g->tensors.at[stage].layer = p.layer;
        nd->update &= (uint8_t)~1u;
    } else {
        stage = to_host(g, param, nd, "host", st);
    }
    nd->out[0] = stage;
    nd->stream = STREAM_HOST;
    ir_rewrite_keep(rw, nd);
    to_device(g, stage, param, nd, st);
}

// A backward node adding into a host gradient: a device part, its copy, a host sum.
static void host_accumulate(IrGraph *g, IrRewrite *rw, IrNode *nd, int at, OffloadStats *st) {
    int grad = nd->out[0];
    if (nd->op == OP_ACC) {   // already a contribution made elsewhere: add it on the host
        nd->in[0] = to_host(g, nd->in[0], nd, "host", st);
        nd->stream = STREAM_HOST;
        ir_rewrite_keep(rw, nd);
        return;
    }
    // The same op, assigning a device tensor shaped like the gradient ...
    IrShapeErr err;
    const IrTensor gc = g->tensors.at[grad];
    const char *name = arena_printf(g->arena, "%s.part%d", gc.name, at);
    int id = ir_node_add(g, nd->op, nd->nin, nd->in, nd->attr, name, nd->layer, nd->loc, &err);
    IR_ASSERT(id >= 0);
    g->nodes.at[id].phase = PHASE_BACKWARD;
    int part = g->nodes.at[id].out[0];
    IrTensor *pt = &g->tensors.at[part];
    pt->dtype = gc.dtype;   // what goes over the link: the gradient's dtype
    pt->requires_grad = false;
    // ... its bytes to the host, and the host adds them in.
    int staged = to_host(g, part, nd, "host", st);
    id = ir_node_add_update(g, OP_ACC, 1, &staged, (OpAttr){0}, 1, &grad, nd->layer, nd->loc);
    g->nodes.at[id].phase = PHASE_BACKWARD;
    g->nodes.at[id].stream = STREAM_HOST;
}

int offload_apply(IrGraph *g, const OffloadSpec *o, OffloadStats *st) {
    *st = (OffloadStats){0};
    for (int i = 0; i < g->tensors.len; i++) {
        IrTensor *t = &g->tensors.at[i];
        bool host = (o->optimizer && t->kind == TK_STATE) || (o->grads && t->kind == TK_GRAD);
        if (host) {   // (swapped activations are already there)
            t->arena = 1;
            st->host_bytes += ir_tensor_bytes(t);
        }
    }
    if (!o->optimizer && !o->grads)
        return 0;
    // The gradients' reduction runs where they are: on the host with them, else on the
    // device, its factor then copied over for the host updates.
    if (o->grads && g->grad_stats >= 0)
        g->tensors.at[g->grad_stats].arena = g->tensors.at[g->grad_factor].arena = 1;
    int factor = g->grad_factor;
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int out = nd.out[0];
        bool into_host_grad = nd.phase == PHASE_BACKWARD && (nd.update & 1u) && out >= 0 &&
                              g->tensors.at[out].kind == TK_GRAD && g->tensors.at[out].arena == 1;
        if (op_desc(nd.op)->cls == OPC_COLLECTIVE && g->tensors.at[nd.out[0]].arena == 1) {
            // A sum over the ranks of host bytes (the gradients' statistics where the
            // gradients are): collectives run on device memory, so through a device copy.
            int host = nd.out[0];
            IrShapeErr err;
            int id = ir_node_add(g, OP_COPY, 1, &host, (OpAttr){0},
                                 arena_printf(g->arena, "%s.device", g->tensors.at[host].name), nd.layer,
                                 nd.loc, &err);
            IR_ASSERT(id >= 0);
            g->nodes.at[id].phase = nd.phase;
            g->nodes.at[id].stream = STREAM_H2D;
            int dev = g->nodes.at[id].out[0];
            nd.in[0] = nd.out[0] = dev;
            ir_rewrite_keep(&rw, &nd);
            id = ir_node_add_update(g, OP_COPY, 1, &dev, (OpAttr){0}, 1, &host, nd.layer, nd.loc);
            g->nodes.at[id].phase = nd.phase;
            g->nodes.at[id].stream = STREAM_D2H;
        } else if (nd.op == OP_GRAD_SUMSQ || nd.op == OP_GRAD_FACTOR) {
            if (o->grads)
                nd.stream = STREAM_HOST;
            ir_rewrite_keep(&rw, &nd);
            if (nd.op == OP_GRAD_FACTOR && o->optimizer && !o->grads)
                factor = to_host(g, nd.out[0], &nd, "host", st);
        } else if (o->optimizer && op_desc(nd.op)->cls == OPC_OPTIMIZER) {
            host_update(g, &rw, &nd, factor, st);
        } else if (into_host_grad) {
            host_accumulate(g, &rw, &nd, rw.at - 1, st);
        } else {
            if (nd.op == OP_ZERO && g->tensors.at[out].arena == 1)
                nd.stream = STREAM_HOST;   // a host gradient zeroed after its update
            ir_rewrite_keep(&rw, &nd);
        }
    }
    ir_rewrite_end(&rw);
    return 0;
}
