// count.c — parameter counts, and the memory of a step with no technique applied:
// the baseline the planner improves on, and what ftc compile reports first.
#include "passes.h"

#include <stdlib.h>

ParamCount count_params(const IrGraph *g) {
    ParamCount c = {0};
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (t->kind != TK_PARAM)
            continue;
        int64_t n = ir_tensor_elems(t);
        c.total += n;
        c.trainable += t->trainable ? n : 0;
        c.tensors++;
    }
    return c;
}

MemBreakdown count_naive_memory(const IrGraph *g, int64_t reserve_bytes) {
    MemBreakdown m = {0};
    const IrStep *st = &g->step;
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        int64_t n = ir_tensor_elems(t);
        if (t->kind == TK_PARAM) {
            m.bytes[MEM_WEIGHTS] += ir_tensor_bytes(t);
            if (!t->trainable)
                continue;
            m.bytes[MEM_GRADS] += dtype_bytes(st->grad_dt, n);
            if (st->adam8 && n >= st->adam8_min_elems)   // two u8 codes, two fp32 absmaxes a block
                m.bytes[MEM_OPTIMIZER] += 2 * n + 8 * ((n + IR_ADAM8_BLOCK - 1) / IR_ADAM8_BLOCK);
            else
                m.bytes[MEM_OPTIMIZER] += st->optim_states * dtype_bytes(st->adam8 ? DT_F32 : st->optim_dt, n);
            if (st->master)
                m.bytes[MEM_MASTER] += dtype_bytes(DT_F32, n);
            else if (st->kahan && st->optim_states == 2)   // the compensation, the weight's dtype
                m.bytes[MEM_OPTIMIZER] += ir_tensor_bytes(t);
        } else if (t->kind == TK_INPUT) {
            m.bytes[MEM_IO] += ir_tensor_bytes(t);
        } else if (t->kind == TK_QUANT) {
            m.bytes[MEM_WEIGHTS] += ir_tensor_bytes(t);
        }
    }
    // Saved for backward: every tensor some backward reads, counted once, by its base.
    char *saved = xcalloc((size_t)g->tensors.len, 1);
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        const OpInfo *op = op_info(n->op);
        if (n->phase != PHASE_FORWARD)
            continue;
        uint8_t need = 0;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0 && g->tensors.at[n->in[k]].requires_grad)
                need |= op->grad_needs[k];
        for (int k = 0; k < n->nin; k++)
            if ((need & (NEED_IN0 << k)) && n->in[k] >= 0)
                saved[ir_tensor_base(g, n->in[k])] = 1;
        if (need & NEED_OUT)
            saved[ir_tensor_base(g, n->out[0])] = 1;
        if ((need & NEED_AUX) && n->out[1] >= 0)
            saved[n->out[1]] = 1;
    }
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (saved[i] && t->kind == TK_VALUE && i != g->logits)
            m.bytes[MEM_ACTIVATIONS] += ir_tensor_bytes(t);
    }
    free(saved);
    // The logits live into the loss's backward whatever else is saved, and the loss's
    // backward forms an fp32 gradient of them (in one piece: no technique applied).
    if (g->logits >= 0) {
        const IrTensor *lg = &g->tensors.at[ir_tensor_base(g, g->logits)];
        m.logits_bytes = ir_tensor_bytes(lg) + dtype_bytes(DT_F32, ir_tensor_elems(lg));
    }
    m.bytes[MEM_RESERVE] = reserve_bytes;
    m.total = m.logits_bytes;
    for (int c = 0; c < MEM_COUNT; c++)
        m.total += m.bytes[c];
    return m;
}
