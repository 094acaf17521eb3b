// quantize.c — QLoRA's base: frozen linear weights inside the blocks (those of a linear,
// and 2-D ones a matmul applies to every row, stored [in, out]) are stored as
// NF4 (bitsandbytes' layout: two 4-bit codes a byte, element 2j in the high nibble,
// one absmax per block of 64; with double quantisation the absmaxes minus their mean
// as 8-bit dynamic codes in blocks of 256, one fp32 scale each). Embeddings, lm_head,
// norms, biases and every trainable tensor keep their dtype. A node that reads a
// quantised weight (the forward linear, the backward linear_dx) reads instead a bf16
// copy that a dequant node makes just before it; the copy lives only for that node, so
// one layer's worth of scratch is reused across layers.
#include "passes.h"

#include <stdlib.h>

static int companion(IrGraph *g, int w, const char *what, DType dt, int64_t elems) {
    const IrTensor wc = g->tensors.at[w];   // a copy: adding a tensor may move the array
    int id = ir_tensor_add(g, arena_printf(g->arena, "%s.%s", wc.name, what), TK_QUANT, dt, 1,
                           &elems, wc.loc);
    IrTensor *t = ir_tensor(g, id);
    t->of = w;
    t->layer = wc.layer;
    t->cat = MEM_WEIGHTS;
    t->decl = arena_printf(g->arena, "nf4_%s", what);
    return id;
}

int quantize_apply(IrGraph *g, bool double_quant, QuantStats *st) {
    *st = (QuantStats){0};
    int nt = g->tensors.len;
    // The weights to quantise, and their companions: deq[w] = {nin, inputs...}.
    int (*deq)[5] = xmalloc(sizeof(int[5]) * (size_t)nt);
    for (int i = 0; i < nt; i++)
        deq[i][0] = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if ((n->op != OP_LINEAR && n->op != OP_MATMUL) || n->phase != PHASE_FORWARD)
            continue;
        int w = n->in[1];
        IrTensor *t = &g->tensors.at[w];
        if (deq[w][0] || t->kind != TK_PARAM || t->trainable || t->layer < 0 || t->ndim != 2 ||
            t->dtype == DT_NF4)
            continue;
        int64_t e = ir_tensor_elems(t), blocks = (e + 63) / 64;
        st->weights += e;
        st->bf16_bytes += ir_tensor_bytes(t);
        t->dtype = DT_NF4;
        deq[w][1] = w;
        if (double_quant) {
            deq[w][0] = 4;
            deq[w][2] = companion(g, w, "absmax_codes", DT_U8, blocks);
            deq[w][3] = companion(g, w, "absmax_scales", DT_F32, (blocks + 255) / 256);
            deq[w][4] = companion(g, w, "absmax_mean", DT_F32, 1);
        } else {
            deq[w][0] = 2;
            deq[w][2] = companion(g, w, "absmax", DT_F32, blocks);
        }
        st->nf4_bytes += ir_tensor_bytes(&g->tensors.at[w]);
        for (int k = 2; k <= deq[w][0]; k++)
            st->nf4_bytes += ir_tensor_bytes(&g->tensors.at[deq[w][k]]);
    }
    // Rebuild the node list: a dequant before each node reading a quantised weight.
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        for (int k = 0; k < nd.nin; k++) {
            int w = nd.in[k];
            if (w < 0 || w >= nt || !deq[w][0])
                continue;
            IrShapeErr err;
            const char *name = arena_printf(g->arena, "%s.bf16", g->tensors.at[w].name);
            int id = ir_node_add(g, OP_DEQUANT, deq[w][0], &deq[w][1], (OpAttr){0}, name, nd.layer,
                                 nd.loc, &err);
            IR_ASSERT(id >= 0);
            g->nodes.at[id].phase = nd.phase;
            nd.in[k] = g->nodes.at[id].out[0];
        }
        ir_rewrite_keep(&rw, &nd);
    }
    ir_rewrite_end(&rw);
    free(deq);
    return 0;
}
