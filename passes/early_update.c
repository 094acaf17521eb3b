// early_update.c — each parameter's optimizer update inside backward, as soon as its
// gradient is complete, so that the gradient dies there instead of living the whole step
// (torchtune's optimizer_in_bwd; the planner's choice, PlanChoice.early_update).
//
// It holds only for a step that needs no global view of the gradients before the first
// update: one micro-step, no clipping, no loss scale, one rank, the optimizer on the
// device (the planner offers it only then). The optimizer phase autodiff made —
//
//   grad_sumsq(g_i) → grad_stats (+=) for each i; grad_factor(grad_stats) → factor;
//   update_i(g_i, factor); zero(g_i)
//
// — becomes, in backward:
//
//   at its start          grad_factor() → factor: with no statistics, 1 / loss scale (1)
//                         and never a skip, which is what the ordinary factor is for a
//                         step that clips nothing and finds every gradient finite
//   after the last node   grad_sumsq(g_i) → grad_stats (+=; the first assigns), then
//   touching g_i or what  update_i(g_i, factor)
//   update_i writes
//
// and the zeroing goes: the first contribution to each gradient assigns it (a view's or
// an acc's is preceded by a zero of the whole), so a gradient is a value like any other,
// alive from its first contribution to its update (TK_VALUE, category gradients). Each
// update reads the same gradient bits and the same factor as in the ordinary step, so
// the weights after it are the same bits. The runtime reads grad_stats after the step as
// before: a gradient that is not finite is found then, after the updates.
//
// Runs after fuse (every reader of a parameter is final) and before schedule, which keeps
// an update after the readers of what it writes (a write-after-read edge).
#include "passes.h"

#include <stdlib.h>

// Whether output k of node n, adding into a gradient, cannot simply assign it instead:
// a view writes part of it, and acc only adds. Then the whole is zeroed first.
static bool needs_zero(const IrGraph *g, const IrNode *n, int k) {
    return n->op == OP_ACC || g->tensors.at[n->out[k]].alias_of >= 0;
}

// Appends optimizer node m to the list of those placed after node `slot`.
static void place_after(int *after, int *next, int *tail, int slot, int m) {
    if (tail[slot] < 0)
        after[slot] = m;
    else
        next[tail[slot]] = m;
    tail[slot] = m;
}

// One application: the phases' bounds and, per base tensor and per node, what the moves need.
typedef struct Early {
    IrGraph *g;
    int bwd, opt, end;      // the first node of backward, of the optimizer phase, after it
    int factor;             // the grad_factor node
    int *last;              // per base: the last node before opt touching it
    int *first;             // per base: the first one writing it
    int *sumsq;             // per gradient: its grad_sumsq
    bool *zero;             // per base: zeroed before its first writer
    int *after;             // per node: the first optimizer node
    int *next;              // placed after it, and the next, in order
    int *tail;
    EarlyUpdateStats *st;
} Early;

// Per base tensor, the last node before the optimizer phase touching it and the first
// writing it.
static void touch_spans(Early *e) {
    const IrGraph *g = e->g;
    for (int i = 0; i < e->opt; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                e->last[ir_tensor_base(g, nd->in[k])] = i;
        for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
            int b = ir_tensor_base(g, nd->out[k]);
            e->last[b] = i;
            if (e->first[b] < 0)
                e->first[b] = i;
        }
    }
}

// Each update, with its gradient's sum of squares, goes after the last node touching its
// gradient or anything it writes (the weight backward reads), and not before backward
// (the lm_head's gradient, complete in the fused loss: backward's start, after the
// factor). The zeros go; so does nothing else. Sets e->factor and e->end.
static void place_updates(Early *e) {
    const IrGraph *g = e->g;
    int n = g->nodes.len;
    e->factor = -1, e->end = e->opt;
    for (; e->end < n && g->nodes.at[e->end].phase == PHASE_OPTIMIZER; e->end++) {
        const IrNode *nd = &g->nodes.at[e->end];
        if (nd->op == OP_GRAD_SUMSQ) {
            e->sumsq[nd->in[0]] = e->end;
        } else if (nd->op == OP_GRAD_FACTOR) {
            e->factor = e->end;
        } else if (op_desc(nd->op)->cls == OPC_OPTIMIZER) {
            IR_ASSERT(nd->stream == STREAM_COMPUTE && nd->in[0] >= 0 && e->sumsq[nd->in[0]] >= 0);
            int at = e->last[ir_tensor_base(g, nd->in[0])];
            for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
                int o = e->last[ir_tensor_base(g, nd->out[k])];
                at = o > at ? o : at;
            }
            at = at < e->bwd ? e->bwd - 1 : at;
            place_after(e->after, e->next, e->tail, at, e->sumsq[nd->in[0]]);
            place_after(e->after, e->next, e->tail, at, e->end);
            e->st->moved++;
        } else {
            IR_ASSERT(nd->op == OP_ZERO);
        }
    }
    IR_ASSERT(e->factor >= 0);
}

// The first contribution to each gradient assigns it (or, where it cannot, a zero goes
// first: e->zero); a gradient is a value.
static void grads_as_values(Early *e) {
    IrGraph *g = e->g;
    for (int t = 0; t < g->tensors.len; t++) {
        IrTensor *x = &g->tensors.at[t];
        if (x->kind != TK_GRAD)
            continue;
        x->kind = TK_VALUE;   // (its category stays: gradients)
        if (x->alias_of >= 0 || e->first[t] < 0)
            continue;
        e->st->transient_bytes += ir_tensor_bytes(x);
        IrNode *nd = &g->nodes.at[e->first[t]];
        for (int k = 0; k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++)
            if (ir_tensor_base(g, nd->out[k]) == t && ((nd->update >> k) & 1u)) {
                if (needs_zero(g, nd, k))
                    e->zero[t] = true;
                else
                    nd->update &= (uint8_t)~(1u << k);
            }
    }
}

// Before node nd (old index i, before the optimizer phase): the zero of each gradient it
// is the first writer of and that needs one.
static void zero_before(Early *e, const IrNode *nd, int i) {
    IrGraph *g = e->g;
    for (int k = 0; i < e->opt && k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
        int b = ir_tensor_base(g, nd->out[k]);
        if (!e->zero[b] || e->first[b] != i)
            continue;
        int z = ir_node_add_update(g, OP_ZERO, 0, NULL, (OpAttr){0}, 1, &b, nd->layer, nd->loc);
        g->nodes.at[z].phase = nd->phase, g->nodes.at[z].update = 0;   // it makes it
        ir_claim_outputs(g, &g->nodes.at[z]);
        e->zero[b] = false;
        e->st->zeroed++;
    }
}

// The new order: the zeros before first writers, the factor as backward starts, the
// updates (and sums of squares) after the nodes they wait for; the optimizer phase gone.
static void rewrite(Early *e) {
    IrRewrite rw;
    ir_rewrite_begin(&rw, e->g);
    bool stats_made = false;
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int i = rw.at - 1;
        if (i >= e->opt && i < e->end)
            continue;   // (placed in backward, or dropped)
        zero_before(e, &nd, i);
        ir_rewrite_keep(&rw, &nd);
        if (i == e->bwd - 1) {   // backward starts with the factor
            IrNode f = rw.old[e->factor];
            f.nin = 0, f.in[0] = -1, f.phase = PHASE_BACKWARD;
            ir_rewrite_keep(&rw, &f);
        }
        for (int m = i < e->opt ? e->after[i] : -1; m >= 0; m = e->next[m]) {
            IrNode u = rw.old[m];
            u.phase = PHASE_BACKWARD;
            if (u.op == OP_GRAD_SUMSQ) {   // the first in the new order assigns
                u.update = stats_made ? 1 : 0;
                stats_made = true;
            }
            ir_rewrite_keep(&rw, &u);
        }
    }
    ir_rewrite_end(&rw);
}

int early_update_apply(IrGraph *g, EarlyUpdateStats *st) {
    *st = (EarlyUpdateStats){0};
    int n = g->nodes.len, nt = g->tensors.len;
    int bwd = 0;   // the first node of backward, and of the optimizer phase
    while (bwd < n && g->nodes.at[bwd].phase == PHASE_FORWARD)
        bwd++;
    if (g->grad_factor < 0 || bwd == 0 || bwd == n || g->nodes.at[bwd].phase != PHASE_BACKWARD)
        return 0;   // nothing trains
    int opt = bwd;
    while (opt < n && g->nodes.at[opt].phase == PHASE_BACKWARD)
        opt++;
    Early e = {.g = g, .bwd = bwd, .opt = opt, .st = st};
    e.last = xmalloc(sizeof(int) * (size_t)(nt + 1));
    e.first = xmalloc(sizeof(int) * (size_t)(nt + 1));
    e.sumsq = xmalloc(sizeof(int) * (size_t)(nt + 1));
    e.zero = xcalloc((size_t)nt + 1, sizeof(bool));
    e.after = xmalloc(sizeof(int) * (size_t)(n + 1));
    e.next = xmalloc(sizeof(int) * (size_t)(n + 1));
    e.tail = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < nt; i++)
        e.last[i] = e.first[i] = e.sumsq[i] = -1;
    for (int i = 0; i < n; i++)
        e.after[i] = e.next[i] = e.tail[i] = -1;
    touch_spans(&e);
    place_updates(&e);
    grads_as_values(&e);
    rewrite(&e);
    free(e.last), free(e.first), free(e.sumsq), free(e.zero), free(e.after), free(e.next), free(e.tail);
    return 0;
}
