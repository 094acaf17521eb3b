// verify.c — structural invariants of a graph, checked between passes.
#include "ir.h"

#include <stdlib.h>

#define BAD(...) (fprintf(f, "ir: "), fprintf(f, __VA_ARGS__), fputc('\n', f), bad++)

// Tensor i's own invariants; marks it made when it exists before any node runs.
static int verify_tensor(const IrGraph *g, int i, signed char *made, FILE *f) {
    int bad = 0, nt = g->tensors.len;
    const IrTensor *t = &g->tensors.at[i];
    if (t->id != i)
        BAD("tensor %s has id %d at index %d", t->name, t->id, i);
    if (t->ndim < 0 || t->ndim > IR_MAX_DIMS)
        BAD("tensor %s has rank %d", t->name, t->ndim);
    for (int d = 0; d < t->ndim && d < IR_MAX_DIMS; d++)
        if (t->shape[d] <= 0)
            BAD("tensor %s has dim %d = %lld", t->name, d, (long long)t->shape[d]);
    // Params, inputs, gradients, state and workspace exist up front, and so do views of
    // them (a rank's slice of a parameter, which an optimizer updates in place).
    if (t->kind != TK_VALUE || (t->alias_of >= 0 && t->alias_of < nt && t->producer < 0 &&
                                g->tensors.at[t->alias_of].kind != TK_VALUE))
        made[i] = 1;
    if (t->kind == TK_PARAM && !t->hf_name)
        BAD("param %s has no checkpoint name", t->name);
    if ((t->kind == TK_GRAD || t->kind == TK_STATE) &&
        (t->of < 0 || t->of >= nt || g->tensors.at[t->of].kind != TK_PARAM))
        BAD("%s %s does not belong to a parameter", t->kind == TK_GRAD ? "gradient" : "state",
            t->name);
    if (t->alias_of >= nt || (t->alias_of >= 0 && g->tensors.at[t->alias_of].alias_of >= 0))
        BAD("tensor %s aliases %d, which is not a base tensor", t->name, t->alias_of);
    return bad;
}

// Node i's input count and inputs: each present one in range and already made.
static int verify_inputs(const IrGraph *g, int i, const signed char *made, FILE *f) {
    int bad = 0, nt = g->tensors.len;
    const IrNode *n = &g->nodes.at[i];
    const OpDesc *op = op_desc(n->op);
    if (n->nin < op->min_in || n->nin > op->max_in)
        BAD("node %d (%s) has %d inputs", i, op->name, n->nin);
    for (int k = 0; k < n->nin; k++) {
        int t = n->in[k];
        if (t < 0 && k < op->min_in)
            BAD("node %d (%s) lacks input %d", i, op->name, k);
        else if (t >= nt)
            BAD("node %d (%s) input %d out of range", i, op->name, k);
        else if (t >= 0 && !made[t])
            BAD("node %d (%s) reads %s before it is made", i, op->name, g->tensors.at[t].name);
    }
    return bad;
}

// Node i's fused steps, if any: they read what exists and make its intermediates, which
// are marked made.
static int verify_fused(const IrGraph *g, int i, signed char *made, FILE *f) {
    int bad = 0, nt = g->tensors.len;
    const IrNode *n = &g->nodes.at[i];
    if ((n->op == OP_FUSED) != (n->fused >= 0) ||
        (n->fused >= 0 && (n->fused >= g->fused.len || g->fused.at[n->fused].n < 2))) {
        BAD("node %d (%s) has no steps, or steps without being fused", i, op_desc(n->op)->name);
        return bad;
    }
    if (n->fused < 0)
        return bad;
    const IrFused *fz = &g->fused.at[n->fused];
    for (int s = 0; s < fz->n; s++) {
        const IrNode *st = &fz->step[s];
        for (int k = 0; k < st->nin; k++)
            if (st->in[k] >= 0 && (st->in[k] >= nt || !made[st->in[k]]))
                BAD("node %d (fused) step %d reads %d before it is made", i, s, st->in[k]);
        int o = st->out[0];
        if (s == fz->n - 1) {
            if (o != n->out[0])
                BAD("node %d (fused): its last step does not write its output", i);
        } else if (o < 0 || o >= nt || !g->tensors.at[o].virt || made[o]) {
            BAD("node %d (fused) step %d writes %d, not a fresh virtual tensor", i, s, o);
        } else {
            made[o] = 1;
        }
    }
    return bad;
}

// Node i's outputs: updated ones already exist, written ones are fresh, name it as their
// producer and are marked made.
static int verify_outputs(const IrGraph *g, int i, signed char *made, FILE *f) {
    int bad = 0, nt = g->tensors.len;
    const IrNode *n = &g->nodes.at[i];
    const OpDesc *op = op_desc(n->op);
    for (int k = 0; k < IR_MAX_OUTPUTS; k++) {
        int t = n->out[k];
        if (t < 0)
            continue;
        if (t >= nt) {
            BAD("node %d (%s) output %d out of range", i, op->name, k);
            continue;
        }
        if ((n->update >> k) & 1) {   // read-modify-write of an existing tensor
            if (!made[t])
                BAD("node %d (%s) updates %s before it is made", i, op->name,
                    g->tensors.at[t].name);
            continue;
        }
        if (made[t])
            BAD("node %d (%s) writes %s, which already exists", i, op->name,
                g->tensors.at[t].name);
        if (g->tensors.at[t].producer != i)
            BAD("tensor %s names producer %d, not %d", g->tensors.at[t].name,
                g->tensors.at[t].producer, i);
        made[t] = 1;
    }
    return bad;
}

int ir_verify(const IrGraph *g, FILE *f) {
    int bad = 0, nt = g->tensors.len;
    signed char *made = xcalloc((size_t)nt, 1);   // 1 once the tensor exists in order
    for (int i = 0; i < nt; i++)
        bad += verify_tensor(g, i, made, f);
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        bad += verify_inputs(g, i, made, f);
        if (n->out[0] < 0)
            BAD("node %d (%s) has no output", i, op_desc(n->op)->name);
        bad += verify_fused(g, i, made, f);
        bad += verify_outputs(g, i, made, f);
        if (i > 0 && n->phase < g->nodes.at[i - 1].phase)
            BAD("node %d (%s) is in phase %d after phase %d", i, op_desc(n->op)->name,
                (int)n->phase, (int)g->nodes.at[i - 1].phase);
    }
    for (int i = 0; i < nt; i++)
        if (!made[i])
            BAD("tensor %s is never made", g->tensors.at[i].name);
    if (g->loss >= 0 && (g->loss >= nt || g->tensors.at[g->loss].ndim != 0))
        BAD("loss tensor %d is not a scalar", g->loss);
    free(made);
    return bad;
}
