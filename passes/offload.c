// offload.c — what lives in host memory (ZeRO-Offload style).
//   optimizer: AdamW's moments and the fp32 master weights live in the host arena and
//              the update runs on the CPU; the updated bf16 weights go back to the
//              device over the link.
//   grads:     the gradients accumulate in the host arena too: each backward node that
//              would add into a gradient writes a device buffer of its own instead,
//              and an `acc` node on the host adds it in as it arrives, so a gradient
//              occupies the device only between its making and its copy.
// Parameters stay on the device.
#include "passes.h"

#include <stdlib.h>

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
    for (int i = 0; i < g->nodes.len; i++) {
        IrNode *n = &g->nodes.at[i];
        n->host = o->optimizer && (n->op == OP_ADAMW || n->op == OP_SGD);
        if (n->host)   // the weights it updates go back to the device
            st->h2d_bytes += ir_tensor_bytes(&g->tensors.at[n->out[0]]);
        if (o->optimizer && n->op == OP_ZERO && g->tensors.at[n->out[0]].arena == 1)
            n->host = true;
    }
    if (!o->grads)
        return 0;
    // Rebuild: a backward write into a host gradient goes to a device tensor first.
    IrNode *old = g->nodes.at;
    int n = g->nodes.len;
    g->nodes.at = NULL;
    g->nodes.len = g->nodes.cap = 0;
    for (int i = 0; i < n; i++) {
        IrNode nd = old[i];
        int gt = nd.out[0];
        bool into_host_grad = nd.phase == PHASE_BACKWARD && (nd.update & 1u) && gt >= 0 &&
                              g->tensors.at[gt].kind == TK_GRAD;
        if (!into_host_grad) {
            nd.id = g->nodes.len;
            for (int k = 0; k < IR_MAX_OUTPUTS && nd.out[k] >= 0; k++)
                if (!((nd.update >> k) & 1))
                    g->tensors.at[nd.out[k]].producer = nd.id;
            vec_push(&g->nodes, nd);
            continue;
        }
        if (nd.op == OP_ACC) {   // already a contribution made elsewhere: add it on the host
            nd.id = g->nodes.len;
            nd.host = true;
            st->d2h_bytes += ir_tensor_bytes(&g->tensors.at[nd.in[0]]);
            vec_push(&g->nodes, nd);
            continue;
        }
        // The same op, assigning a device tensor shaped like the gradient ...
        IrShapeErr err;
        const IrTensor gtc = g->tensors.at[gt];
        const char *name = arena_printf(g->arena, "%s.part%d", gtc.name, i);
        int id = ir_node_add(g, nd.op, nd.nin, nd.in, nd.attr, name, nd.layer, nd.loc, &err);
        IR_ASSERT(id >= 0);
        g->nodes.at[id].phase = PHASE_BACKWARD;
        int part = g->nodes.at[id].out[0];
        IrTensor *pt = &g->tensors.at[part];
        pt->dtype = gtc.dtype;   // what goes over the link: the gradient's dtype
        pt->requires_grad = false;
        // ... then the host adds it in.
        id = ir_node_add_update(g, OP_ACC, 1, &part, (IrAttr){0}, 1, &gt, nd.layer, nd.loc);
        g->nodes.at[id].phase = PHASE_BACKWARD;
        g->nodes.at[id].host = true;
        st->d2h_bytes += ir_tensor_bytes(&g->tensors.at[part]);
    }
    free(old);
    return 0;
}
