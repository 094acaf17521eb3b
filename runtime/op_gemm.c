// op_gemm.c — the op contract's GEMM dimensions: the one product each GEMM op runs, as
// every backend calls its BLAS (cpu cblas, cuBLASLt) and the cost model prices it.
#include "ops.h"

static int64_t last(const OpOperand *b) { return b->ndim ? b->shape[b->ndim - 1] : 1; }
static int64_t from_end(const OpOperand *b, int k) { return b->ndim > k ? b->shape[b->ndim - 1 - k] : 1; }

bool op_gemm(OpKind op, const OpOperand *a, const OpOperand *b, const OpOperand *out, OpGemm *g) {
    *g = (OpGemm){.batch = 1};
    switch (op) {
    case OP_LINEAR:     // y[M,N] = x[M,K] W[N,K]^T
    case OP_LINEAR_ACC: // (+ y, the product scaled)
        g->tb = true, g->K = last(a), g->M = a->elems / g->K, g->N = b->shape[0];
        return true;
    case OP_LINEAR_DX:  // dx[M,K] = dy[M,N'] W[N',K]
        g->K = last(a), g->M = a->elems / g->K, g->N = last(b);
        return true;
    case OP_LINEAR_DW:  // dW[N',K'] += dy[R,N']^T x[R,K']
        g->ta = true, g->M = last(a), g->K = a->elems / g->M, g->N = last(b);
        return true;
    case OP_MATMUL:     // out[..,M,N] = a[..,M,K] b[..,K,N]
        g->M = from_end(a, 1), g->K = last(a), g->N = last(b);
        break;
    case OP_MATMUL_DA:  // da[..,M,K'] = dy[..,M,N'] b[..,K',N']^T
        g->tb = true, g->M = from_end(a, 1), g->K = last(a), g->N = from_end(b, 1);
        break;
    case OP_MATMUL_DB:  // db[..,K',N'] = a[..,M',K']^T dy[..,M',N']
        g->ta = true, g->M = last(a), g->K = from_end(a, 1), g->N = last(b);
        break;
    default:
        return false;
    }
    // A 2-D weight (b, or db's output) shared by every row of a batched operand: one product
    // over all the rows.
    const OpOperand *w = op == OP_MATMUL_DB ? out : b;
    if (w->ndim == 2 && a->ndim > 2) {
        if (op == OP_MATMUL_DB)
            g->K = a->elems / g->M;
        else
            g->M = a->elems / g->K;
    }
    g->batch = g->M > 0 && g->K > 0 ? a->elems / (g->M * g->K) : 1;
    return true;
}
