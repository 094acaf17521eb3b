// liveness.c — for every tensor, the first and last node that touch it, in the
// scheduled order; categories from lifetimes; workspace tensors for nodes that need
// scratch; and in-place reuse: an elementwise node whose input dies at that node
// writes its output over the input's bytes when sizes and dtypes agree.
//
// Lifetimes are node indices over all phases. Parameters, gradients and optimizer
// state live for the whole step; the batch (tokens, targets) from node 0, since the
// runtime fills it before the micro-step starts; the loss to the end of the micro-step,
// since the runtime reads it after it (the eval loss likewise to the end of its phase). The logits are a value like any other: they die at
// their last reader (the loss's backward), as nothing after the step reads them.
#include "passes.h"

#include <stdlib.h>

// Whole-step tensors: the parameters and what belongs to them, and the gradients'
// reduction, which the runtime reads after the step.
static bool persistent(const IrGraph *g, const IrTensor *t) {
    return t->kind == TK_PARAM || t->kind == TK_GRAD || t->kind == TK_STATE || t->kind == TK_QUANT ||
           t->id == g->grad_stats || t->id == g->grad_factor;
}

// The tensor whose bytes `t` finally occupies: its base, then along reuse links.
int liveness_root(const IrGraph *g, int t) {
    t = ir_tensor_base(g, t);
    while (g->tensors.at[t].reuse >= 0)
        t = g->tensors.at[t].reuse;
    return t;
}

static void touch(IrGraph *g, int t, int i) {
    IrTensor *x = &g->tensors.at[ir_tensor_base(g, t)];
    if (x->first < 0 || i < x->first)
        x->first = i;
    if (i > x->last)
        x->last = i;
}

// Every tensor's first and last node touching it, in the scheduled order (each node's id
// set to its index); no reuse yet.
static void spans(IrGraph *g) {
    for (int i = 0; i < g->tensors.len; i++) {
        IrTensor *t = &g->tensors.at[i];
        t->first = t->last = -1;
        t->reuse = -1;
    }
    for (int i = 0, lead = 0; i < g->nodes.len; i++) {
        IrNode *nd = &g->nodes.at[i];
        nd->id = i;
        // A bucket of collectives runs as one call at its first node: what each member
        // touches is alive from there.
        if (nd->bucket < 0 || i == 0 || g->nodes.at[i - 1].bucket != nd->bucket)
            lead = i;
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                touch(g, nd->in[k], lead), touch(g, nd->in[k], i);
        for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++)
            touch(g, nd->out[k], lead), touch(g, nd->out[k], i);
    }
}

// The loss is read by the runtime after the micro-step's last node, the eval loss after
// the eval phase's, the decode logits after the decode phase's; a KV cache lives through
// the decode phase, keeping its rows from one run to the next.
static void loss_ends(IrGraph *g) {
    int end = -1, eval_end = -1, decode_start = -1, decode_end = -1, ref_end = -1;
    for (int i = 0; i < g->nodes.len; i++) {
        IrPhase ph = g->nodes.at[i].phase;
        if (ph == PHASE_FORWARD || ph == PHASE_BACKWARD)
            end = i;
        else if (ph == PHASE_EVALUATION)
            eval_end = i;
        else if (ph == PHASE_DECODING)
            decode_end = i, decode_start = decode_start < 0 ? i : decode_start;
        else if (ph == PHASE_REFERENCE)
            ref_end = i;
    }
    if (g->ref_out >= 0 && ref_end > g->tensors.at[ir_tensor_base(g, g->ref_out)].last)
        g->tensors.at[ir_tensor_base(g, g->ref_out)].last = ref_end;   // (the runtime reads it after)
    for (int t = 0; t < g->tensors.len && decode_start >= 0; t++)
        if (g->tensors.at[t].kind == TK_CACHE)
            g->tensors.at[t].first = decode_start, g->tensors.at[t].last = decode_end;
    if (g->decode_logits >= 0 && decode_end > g->tensors.at[ir_tensor_base(g, g->decode_logits)].last)
        g->tensors.at[ir_tensor_base(g, g->decode_logits)].last = decode_end;
    if (g->loss >= 0 && end > g->tensors.at[ir_tensor_base(g, g->loss)].last)
        g->tensors.at[ir_tensor_base(g, g->loss)].last = end;
    if (g->pref_stats >= 0 && end > g->tensors.at[ir_tensor_base(g, g->pref_stats)].last)   // (read with it)
        g->tensors.at[ir_tensor_base(g, g->pref_stats)].last = end;
    if (g->eval_loss >= 0 && eval_end > g->tensors.at[ir_tensor_base(g, g->eval_loss)].last)
        g->tensors.at[ir_tensor_base(g, g->eval_loss)].last = eval_end;
}

// Tensor t's category from its lifetime. Saved for backward: made in the forward phase,
// read in the backward phase. (The shard pass's keep their categories: gathered weights,
// a micro-step's whole gradient.) A streamed weight's device copy is a weight.
static void categorize(const IrGraph *g, IrTensor *t) {
    const IrNode *pn = t->producer >= 0 ? &g->nodes.at[t->producer] : NULL;
    if (pn && pn->op == OP_COPY && pn->stream == STREAM_H2D && pn->in[0] >= 0 &&
        (g->tensors.at[pn->in[0]].kind == TK_PARAM || g->tensors.at[pn->in[0]].kind == TK_QUANT)) {
        t->cat = g->tensors.at[pn->in[0]].cat == MEM_REFERENCE ? MEM_REFERENCE : MEM_WEIGHTS;   // (a weight streamed in)
    } else if (t->kind == TK_VALUE && t->alias_of < 0 && t->producer >= 0 && t->last >= 0 && !persistent(g, t) &&
               op_desc(pn->op)->cls != OPC_COLLECTIVE && t->cat != MEM_GRADS) {
        bool fwd = g->nodes.at[t->producer].phase == PHASE_FORWARD;
        bool bwd = g->nodes.at[t->last].phase != PHASE_FORWARD;
        t->cat = g->nodes.at[t->producer].recompute ? MEM_RECOMPUTE
                 : fwd && bwd                       ? MEM_ACTIVATIONS
                                                    : MEM_TEMPORARIES;
    }
}

// Scratch of node i: a tensor of its own, live only while the node runs (where its op
// needs some and it has none yet).
static void add_workspace(IrGraph *g, int i) {
    const OpInfo *op = op_info(g->nodes.at[i].op);
    if (!op->scratch_bytes || g->nodes.at[i].ws >= 0)
        return;
    int64_t bytes = op->scratch_bytes(g, &g->nodes.at[i]);
    if (bytes <= 0)
        return;
    const char *name = arena_printf(g->arena, "%s.workspace", g->tensors.at[g->nodes.at[i].out[0]].name);
    int ws = ir_tensor_add(g, name, TK_WORKSPACE, DT_U8, 1, &bytes, g->nodes.at[i].loc);
    IrTensor *t = ir_tensor(g, ws);
    t->cat = MEM_WORKSPACE;
    t->producer = i;
    t->first = t->last = i;
    t->layer = g->nodes.at[i].layer;
    t->arena = g->nodes.at[i].stream == STREAM_HOST;   // where its node runs
    g->nodes.at[i].ws = ws;
}

// In place: node i's output takes over the bytes of an input that dies there.
static void reuse_in_place(IrGraph *g, int i) {
    IrNode *nd = &g->nodes.at[i];
    if (!(op_desc(nd->op)->flags & OPF_INPLACE) || nd->update)
        return;
    IrTensor *o = &g->tensors.at[nd->out[0]];
    if (o->kind != TK_VALUE || o->alias_of >= 0 || nd->out[0] == g->loss || nd->out[0] == g->eval_loss ||
        nd->out[0] == g->decode_logits)
        return;
    int only = op_info(nd->op)->inplace_in - 1;
    for (int k = 0; k < nd->nin; k++) {
        if (nd->in[k] < 0 || (only >= 0 && k != only))
            continue;
        int b = ir_tensor_base(g, nd->in[k]);
        const IrTensor *x = &g->tensors.at[b];
        if (x->kind != TK_VALUE || x->last != i || x->dtype != o->dtype || ir_tensor_bytes(x) != ir_tensor_bytes(o))
            continue;
        o->reuse = b;
        break;
    }
}

int liveness_apply(IrGraph *g, bool in_place) {
    int n = g->nodes.len;
    spans(g);
    loss_ends(g);
    for (int i = 0; i < g->tensors.len; i++) {
        IrTensor *t = &g->tensors.at[i];
        if (persistent(g, t))
            t->first = 0, t->last = n - 1;
        else if (t->kind == TK_INPUT)
            t->first = 0;
        if (t->alias_of >= 0) {   // a view lives and dies with its base
            t->first = g->tensors.at[t->alias_of].first;
            t->last = g->tensors.at[t->alias_of].last;
        }
        categorize(g, t);
    }
    for (int i = 0; i < n; i++)
        add_workspace(g, i);
    for (int i = 0; in_place && i < n; i++)
        reuse_in_place(g, i);
    return 0;
}
