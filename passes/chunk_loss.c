// chunk_loss.c — the loss's row chunks. The fused linear + cross entropy (and its
// backward) forms the logits of `chunk` rows at a time: the planner's choice, else the
// most rows whose logits fit `max_bytes`; the chunk divides the rows, so every chunk is
// alike. An unfused cross-entropy backward (ATTR_CHUNK, no GEMM) forms the fp32
// gradient of that many rows at a time, so its scratch is a chunk, never the whole fp32
// logits.
#include "passes.h"

// The largest divisor of rows that is at most `most` (at least 1).
static int64_t divisor_at_most(int64_t rows, int64_t most) {
    if (most >= rows)
        return rows;
    for (int64_t d = most < 1 ? 1 : most; d > 1; d--)
        if (rows % d == 0)
            return d;
    return 1;
}

int64_t chunk_loss_apply(IrGraph *g, int64_t max_bytes, int64_t chunk) {
    int64_t last = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        IrNode *n = &g->nodes.at[i];
        if (!(op_desc(n->op)->attrs & ATTR_CHUNK))
            continue;
        const IrTensor *x = &g->tensors.at[n->in[0]];
        int64_t k = x->shape[x->ndim - 1], rows = ir_tensor_elems(x) / k;
        if (op_desc(n->op)->cls == OPC_LOSS_GEMM) {
            int64_t v = g->tensors.at[n->in[1]].shape[0];
            int64_t most = chunk > 0 ? chunk : max_bytes / dtype_bytes(x->dtype, v);
            n->attr.chunk_rows = divisor_at_most(rows, most);
        } else {
            int64_t c = max_bytes / (k * 4);   // k is the vocabulary here
            n->attr.chunk_rows = c >= 1 && c < rows ? c : c < 1 ? 1 : 0;
        }
        last = n->attr.chunk_rows;
    }
    return last;
}
