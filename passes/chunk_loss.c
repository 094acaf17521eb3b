// chunk_loss.c — the loss's backward over row chunks: an op that takes a row chunk
// (ATTR_CHUNK: the cross-entropy backward) forms the fp32 gradient of that many rows
// of logits at a time, so its scratch is a chunk, never the whole fp32 logits.
#include "passes.h"

int64_t chunk_loss_apply(IrGraph *g, int64_t max_bytes) {
    int64_t last = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        IrNode *n = &g->nodes.at[i];
        if (!(op_desc(n->op)->attrs & ATTR_CHUNK))
            continue;
        const IrTensor *lg = &g->tensors.at[n->in[0]];
        int64_t v = lg->shape[lg->ndim - 1], rows = ir_tensor_elems(lg) / v;
        int64_t chunk = max_bytes / (v * 4);
        n->attr.chunk_rows = chunk >= 1 && chunk < rows ? chunk : chunk < 1 ? 1 : 0;
        last = n->attr.chunk_rows;
    }
    return last;
}
