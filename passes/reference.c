// reference.c — a preference loss's reference precomputed (reference = precomputed). The
// reference model's forward becomes a phase of its own, PHASE_REFERENCE, which `ftc run`
// runs once over every training and eval window before the first step, on the weights as
// they start. From the phase's output, ref_out (the reference's log-probability of each
// target), the runtime sums each row's trained targets and feeds the sums back through the
// batch input ref_logps f32 [B]: the step's loss and the eval phase's read it in place of
// the reference's forward. The step then holds nothing of the reference: no second
// forward in it, no frozen copy of the weights.
//
// The elaborator made the reference's nodes in the forward (marked `reference`), reading
// the policy's own parameters (with LoRA the base alone: no adapter path), which the phase
// reads before any update. This pass runs after eval and decode (the eval pass copied the
// reference's nodes too: dropped here) and before shard, offload, fuse, schedule, liveness
// and alloc, which plan the phase like any other. It moves the nodes to the end of the
// node list, the phases' order.
#include "passes.h"

#include <stdlib.h>

int reference_apply(IrGraph *g, ReferenceStats *st) {
    *st = (ReferenceStats){0};
    if (g->reference != REF_PRECOMPUTED || g->loss < 0)
        return 0;
    const IrNode *loss = &g->nodes.at[g->tensors.at[g->loss].producer];
    IR_ASSERT(loss->op == OP_PREFERENCE && loss->nin > 3 && loss->in[3] >= 0);
    int64_t rows = g->tensors.at[loss->in[0]].shape[0];
    int out = loss->in[3];
    int in = ir_tensor_add(g, "ref_logps", TK_INPUT, DT_F32, 1, &rows, loss->loc);
    int n = g->nodes.len, nmoved = 0;
    IrNode *moved = xmalloc(sizeof(IrNode) * (size_t)(n + 1));
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        if (nd.reference) {   // the forward's to the phase; the eval phase's copies go
            if (nd.phase == PHASE_FORWARD)
                moved[nmoved++] = nd;
            continue;
        }
        if (nd.op == OP_PREFERENCE || nd.op == OP_PREFERENCE_BWD)   // the step's loss, its
            nd.in[3] = in;                                          // gradient, the eval's
        ir_rewrite_keep(&rw, &nd);
    }
    for (int i = 0; i < nmoved; i++) {
        moved[i].phase = PHASE_REFERENCE;
        ir_rewrite_keep(&rw, &moved[i]);
    }
    ir_rewrite_end(&rw);
    free(moved);
    g->ref_out = out, g->ref_logps = in;
    st->nodes = nmoved;
    ir_drop_unused(g);   // (what the eval phase's copies made)
    return 0;
}
