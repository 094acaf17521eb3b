// eval.c — the eval phase: the forward and its loss once more, as a phase of its own
// after the optimizer, on a batch the runtime writes between steps (ftc run
// --eval-data). It reads the parameters and the batch inputs (tokens, targets, position
// ids, the target count) and nothing the training step made, and nothing reads what it
// makes but itself and the runtime (its loss), so every value it makes dies at its last
// reader inside the phase: no activation is saved and no gradient exists, whatever the
// training step keeps. Dropout is the identity, as in a model's eval mode; the fused loss
// (linear_cross_entropy_grad, which makes its gradient in the forward) is its loss alone
// (linear_cross_entropy, chunk by chunk as the training step's).
//
// It runs after remat, so it copies the forward as the user wrote it (its compute-stream
// nodes; a swap's copies to the host are the training step's); before shard and offload,
// which treat its reads of the parameters as the forward's (streamed weights come a block
// ahead of its uses too); and before fuse, schedule, liveness and alloc, which plan it
// like any phase.
#include "passes.h"

#include <stdlib.h>

int eval_apply(IrGraph *g, EvalStats *st) {
    if (g->loss < 0)
        return 0;
    int nt = g->tensors.len, nforward = 0;
    int *map = xmalloc(sizeof(int) * (size_t)(nt + 1));   // training tensor -> eval tensor
    for (int t = 0; t < nt; t++)
        map[t] = t;
    while (nforward < g->nodes.len && g->nodes.at[nforward].phase == PHASE_FORWARD)
        nforward++;
    for (int i = 0; i < nforward; i++) {
        IrNode n = g->nodes.at[i];   // (ir_node_add may move the node list)
        if (n.stream != STREAM_COMPUTE || op_desc(n.op)->cls == OPC_COPY)
            continue;
        IR_ASSERT(!n.recompute);
        if (n.op == OP_DROPOUT) {
            map[n.out[0]] = map[n.in[0]];
            continue;
        }
        if (n.op == OP_LINEAR_CE_GRAD) {   // the fused loss and its gradient: the loss alone
            n.op = OP_LINEAR_CE;
            n.out[1] = n.out[2] = -1;
            n.update = 0;
        }
        IR_ASSERT(!n.update);
        int in[IR_MAX_INPUTS];
        for (int k = 0; k < n.nin; k++)
            in[k] = n.in[k] < 0 ? -1 : map[n.in[k]];
        const char *name = arena_printf(g->arena, "eval.%s", g->tensors.at[n.out[0]].name);
        int id = ir_node_redo(g, &n, in, name, PHASE_EVALUATION);   // (before the list is read)
        const IrNode *e = &g->nodes.at[id];
        for (int k = 0; k < IR_MAX_OUTPUTS && n.out[k] >= 0; k++) {
            IR_ASSERT(e->out[k] >= 0);
            map[n.out[k]] = e->out[k];
        }
        st->nodes++;
    }
    g->eval_loss = map[g->loss];
    IR_ASSERT(g->eval_loss != g->loss);
    free(map);
    return 0;
}
