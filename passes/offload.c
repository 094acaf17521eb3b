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
//   weights:   the weight matrices live in the host arena too: the frozen ones (the
//              bases of LoRA and QLoRA, NF4 with their scales), or every one when none is
//              frozen (full fine-tuning; then CPU AdamW updates them where they are). Each
//              run of uses in a micro-step (or in the eval phase) reads a device copy, an
//              h2d copy made at the start of the block before (one block ahead, so the
//              link works while that block computes; the schedule keeps the copy there),
//              dead after the run's last reader. A run is the uses of one block (its forward; its backward with its
//              recomputes), or uses outside the blocks with no other block between them.
// Vectors (norm weights, biases) stay on the device. A collective on host bytes goes
// through a device copy.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

// A fresh host tensor holding a copy of device tensor `from`, made by a d2h copy.
static int to_host(IrGraph *g, int from, const IrNode *at, const char *what, OffloadStats *st) {
    const char *name = arena_printf(g->arena, "%s.%s", g->tensors.at[from].name, what);
    IrPhase phase = at->phase;   // (at may lie in the node list, which the copy can move)
    int out = ir_copy_add(g, from, name, at, phase, STREAM_D2H);
    IrTensor *t = &g->tensors.at[out];
    t->arena = 1;
    if (phase != PHASE_OPTIMIZER)
        st->d2h_bytes += ir_tensor_bytes(t);
    return out;
}

// An h2d copy of host tensor `from` into the existing device tensor `to`.
static void to_device(IrGraph *g, int from, int to, const IrNode *at, OffloadStats *st) {
    int id = ir_node_add_update(g, OP_COPY, 1, &from, (OpAttr){0}, 1, &to, at->layer, at->loc);
    g->nodes.at[id].phase = at->phase;
    g->nodes.at[id].stream = STREAM_H2D;
    st->h2d_bytes += ir_tensor_bytes(&g->tensors.at[to]);
}

// An optimizer node on the host: its gradient and its weight through host buffers (a
// streamed weight is updated where it lives), the gradients' factor from `factor` (a
// host tensor).
static void host_update(IrGraph *g, IrRewrite *rw, IrNode *nd, int factor, OffloadStats *st) {
    int grad = nd->in[0], param = nd->out[0];
    if (g->tensors.at[grad].arena == 0)
        nd->in[0] = to_host(g, grad, nd, "host", st);
    nd->in[1] = factor;
    if (g->tensors.at[param].arena == 1) {
        nd->stream = STREAM_HOST;
        ir_rewrite_keep(rw, nd);
        return;
    }
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

// Output k of micro-step node nd adds into host gradient out[k]: the node assigns a device
// part instead (every one of its chunks adding into it), a copy takes it over, and the
// host adds it in.
static void host_accumulate(IrGraph *g, IrRewrite *rw, IrNode *nd, int k, int at, OffloadStats *st) {
    int grad = nd->out[k];
    if (nd->op == OP_ACC) {   // already a contribution made elsewhere: add it on the host
        nd->in[0] = to_host(g, nd->in[0], nd, "host", st);
        nd->stream = STREAM_HOST;
        ir_rewrite_keep(rw, nd);
        return;
    }
    const IrTensor gc = g->tensors.at[grad];
    int part = ir_tensor_add(g, arena_printf(g->arena, "%s.part%d", gc.name, at), TK_VALUE, gc.dtype,
                             gc.ndim, gc.shape, nd->loc);
    g->tensors.at[part].layer = nd->layer;
    nd->out[k] = part;
    nd->update &= (uint8_t)~(1u << k);
    ir_rewrite_keep(rw, nd);
    int staged = to_host(g, part, nd, "host", st);
    int id = ir_node_add_update(g, OP_ACC, 1, &staged, (OpAttr){0}, 1, &grad, nd->layer, nd->loc);
    g->nodes.at[id].phase = nd->phase;
    g->nodes.at[id].stream = STREAM_HOST;
}

// The output of micro-step node nd that adds into a host gradient, or -1 (the fused loss
// forms the lm_head's in the forward).
static int host_grad_output(const IrGraph *g, const IrNode *nd) {
    if (nd->phase == PHASE_OPTIMIZER)
        return -1;
    for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
        const IrTensor *t = &g->tensors.at[nd->out[k]];
        if (((nd->update >> k) & 1u) && t->kind == TK_GRAD && t->arena == 1)
            return k;
    }
    return -1;
}

// Streaming: the weights on the host, and per run of uses a device copy.
typedef struct Run {
    IrPhase phase;
    int layer, start;       // its nodes' layer, its first node
} Run;

typedef struct Copy {
    int at;                 // the old node it goes before
    int from, to;           // the host tensor, its device copy
} Copy;

typedef struct Streaming {
    IrGraph *g;
    Run *runs;              // maximal runs of micro-step nodes of one phase and layer
    int nruns;
    int *run_of;            // per old node: its run
    Copy *copies;
    int ncopies, cap;
    int *use_to;            // per (old node, input): the device copy it reads, or -1
} Streaming;

// Whether the weight matrix t streams: frozen, or trainable when nothing is frozen.
static bool streamed(const IrTensor *t, bool any_frozen) {
    return t->kind == TK_PARAM && t->ndim == 2 && (!t->trainable || !any_frozen);
}

// The node the copy for a run of uses starting in run `r` goes before: the start of the
// nearest earlier run of the phase in another block, else the phase's first node.
static int prefetch_at(const Streaming *s, int r) {
    const Run *u = &s->runs[r];
    int first = u->start;
    for (int k = r - 1; k >= 0 && s->runs[k].phase == u->phase; k--) {
        first = s->runs[k].start;
        if (s->runs[k].layer >= 0 && s->runs[k].layer != u->layer)
            return s->runs[k].start;
    }
    return first;
}

// Whether a block other than `layer` runs between runs a and b (exclusive).
static bool block_between(const Streaming *s, int a, int b, int layer) {
    for (int k = a + 1; k < b; k++)
        if (s->runs[k].layer >= 0 && s->runs[k].layer != layer)
            return true;
    return false;
}

// Plans the copies of host tensor t: one per run of its uses (uses: t's (node, input)
// pairs in order), every use pointed at its run's copy.
static void plan_copies(Streaming *s, int t, const int *uses, int nuses, OffloadStats *st) {
    IrGraph *g = s->g;
    int last_run = -1, copy = -1, n = 0;
    for (int u = 0; u < nuses; u++) {
        int i = uses[u] / IR_MAX_INPUTS, r = s->run_of[i];
        if (copy < 0 || s->runs[r].phase != s->runs[last_run].phase ||
            block_between(s, last_run, r, g->tensors.at[t].layer)) {
            const IrTensor p = g->tensors.at[t];   // a copy: adding a tensor may move the array
            copy = ir_tensor_add(g, arena_printf(g->arena, "%s.dev%d", p.name, n++), TK_VALUE, p.dtype,
                                 p.ndim, p.shape, p.loc);
            g->tensors.at[copy].layer = p.layer;
            g->tensors.at[copy].cat = MEM_WEIGHTS;
            if (s->ncopies == s->cap) {
                s->cap = s->cap ? 2 * s->cap : 64;
                s->copies = xrealloc(s->copies, sizeof(Copy) * (size_t)s->cap);
            }
            s->copies[s->ncopies++] = (Copy){prefetch_at(s, r), t, copy};
            st->stream_bytes += ir_tensor_bytes(&g->tensors.at[t]);
        }
        last_run = r;
        s->use_to[uses[u]] = copy;
    }
}

static int by_place(const void *a, const void *b) {
    const Copy *x = a, *y = b;
    return x->at != y->at ? x->at - y->at : x->to - y->to;
}

// Moves the streamed weights (and an NF4 one's scales) to the host and plans their copies.
static void stream_weights(IrGraph *g, Streaming *s, OffloadStats *st) {
    // The nodes that read weights: the micro-step's, and the eval phase's after the
    // optimizer (which updates the weights where they are).
    int n = g->nodes.len, nt0 = g->tensors.len;
    bool any_frozen = false;
    for (int i = 0; i < nt0; i++)
        any_frozen |= g->tensors.at[i].kind == TK_PARAM && g->tensors.at[i].ndim == 2 &&
                      !g->tensors.at[i].trainable;
    *s = (Streaming){.g = g};
    s->runs = xmalloc(sizeof(Run) * (size_t)(n + 1));
    s->run_of = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        s->run_of[i] = -1;
        if (nd->phase == PHASE_OPTIMIZER)
            continue;
        if (s->nruns == 0 || nd->phase != s->runs[s->nruns - 1].phase || nd->layer != s->runs[s->nruns - 1].layer)
            s->runs[s->nruns++] = (Run){nd->phase, nd->layer, i};
        s->run_of[i] = s->nruns - 1;
    }
    s->use_to = xmalloc(sizeof(int) * (size_t)(n + 1) * IR_MAX_INPUTS);
    for (int i = 0; i < (n + 1) * IR_MAX_INPUTS; i++)
        s->use_to[i] = -1;
    // Which tensors stream, and each one's uses (node x IR_MAX_INPUTS + input), in order.
    bool *go = xcalloc((size_t)nt0 + 1, sizeof(bool));
    int *count = xcalloc((size_t)nt0 + 2, sizeof(int));
    for (int t = 0; t < nt0; t++) {
        const IrTensor *x = &g->tensors.at[t];
        go[t] = streamed(x, any_frozen) || (x->kind == TK_QUANT && streamed(&g->tensors.at[x->of], any_frozen));
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; g->nodes.at[i].phase != PHASE_OPTIMIZER && k < g->nodes.at[i].nin; k++) {
            int t = g->nodes.at[i].in[k];
            if (t >= 0 && t < nt0 && go[t])
                count[t + 1]++;
        }
    for (int t = 0; t < nt0; t++)
        count[t + 1] += count[t];
    int *uses = xmalloc(sizeof(int) * (size_t)(count[nt0] + 1)), *fill = xcalloc((size_t)nt0 + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        for (int k = 0; g->nodes.at[i].phase != PHASE_OPTIMIZER && k < g->nodes.at[i].nin; k++) {
            int t = g->nodes.at[i].in[k];
            if (t >= 0 && t < nt0 && go[t])
                uses[count[t] + fill[t]++] = i * IR_MAX_INPUTS + k;
        }
    for (int t = 0; t < nt0; t++) {
        if (!go[t])
            continue;
        g->tensors.at[t].arena = 1;
        st->host_bytes += ir_tensor_bytes(&g->tensors.at[t]);
        st->streamed++;
        plan_copies(s, t, uses + count[t], count[t + 1] - count[t], st);
    }
    free(go), free(count), free(uses), free(fill);
    qsort(s->copies, (size_t)s->ncopies, sizeof(Copy), by_place);
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
    Streaming s = {0};
    if (o->weights)
        stream_weights(g, &s, st);
    int next_copy = 0;
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int i = rw.at - 1;
        for (; next_copy < s.ncopies && s.copies[next_copy].at == i; next_copy++) {   // a block ahead
            const Copy *c = &s.copies[next_copy];
            int id = ir_node_add_update(g, OP_COPY, 1, &c->from, (OpAttr){0}, 1, &c->to, nd.layer, nd.loc);
            IrNode *cp = &g->nodes.at[id];
            cp->update = 0;   // it makes the copy
            cp->phase = nd.phase;
            cp->stream = STREAM_H2D;
            g->tensors.at[c->to].producer = id;
        }
        if (s.use_to && nd.phase != PHASE_OPTIMIZER)
            for (int k = 0; k < nd.nin; k++)
                if (s.use_to[i * IR_MAX_INPUTS + k] >= 0)
                    nd.in[k] = s.use_to[i * IR_MAX_INPUTS + k];
        int out = nd.out[0], k = host_grad_output(g, &nd);
        if (op_desc(nd.op)->cls == OPC_COLLECTIVE && g->tensors.at[nd.out[0]].arena == 1) {
            // A sum over the ranks of host bytes (the gradients' statistics where the
            // gradients are): collectives run on device memory, so through a device copy.
            int host = nd.out[0];
            int dev = ir_copy_add(g, host, arena_printf(g->arena, "%s.device", g->tensors.at[host].name),
                                  &nd, nd.phase, STREAM_H2D);
            nd.in[0] = nd.out[0] = dev;
            ir_rewrite_keep(&rw, &nd);
            int id = ir_node_add_update(g, OP_COPY, 1, &dev, (OpAttr){0}, 1, &host, nd.layer, nd.loc);
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
        } else if (k >= 0) {
            host_accumulate(g, &rw, &nd, k, rw.at - 1, st);
        } else {
            if (nd.op == OP_ZERO && g->tensors.at[out].arena == 1)
                nd.stream = STREAM_HOST;   // a host gradient zeroed after its update
            ir_rewrite_keep(&rw, &nd);
        }
    }
    ir_rewrite_end(&rw);
    free(s.runs), free(s.run_of), free(s.copies), free(s.use_to);
    return 0;
}
