// graph.c — building the graph: tensors and nodes (a node through its op's shape rule).
#include "ir.h"

#include <stdlib.h>
#include <string.h>

IrGraph *ir_graph_new(Arena *a) {
    IrGraph *g = arena_alloc(a, sizeof *g);
    g->arena = a;
    g->loss = g->logits = g->eval_loss = g->grad_stats = g->grad_factor = g->pref_stats = -1;
    g->ref_out = g->ref_logps = -1;
    g->decode_token = g->decode_pos = g->decode_logits = -1;
    g->ranks = 1;
    return g;
}

void ir_graph_free(IrGraph *g) {
    if (!g)
        return;
    vec_free(&g->tensors);
    vec_free(&g->nodes);
    vec_free(&g->fused);
}

IrGraph *ir_graph_clone(const IrGraph *g, Arena *a) {
    IrGraph *c = arena_alloc(a, sizeof *c);
    *c = *g;
    c->arena = a;
    // (room to grow: the passes after a clone add tensors and nodes)
    c->tensors.cap = g->tensors.len + g->tensors.len / 2 + 16;
    c->nodes.cap = g->nodes.len + g->nodes.len / 2 + 16;
    c->tensors.at = xmalloc(sizeof(IrTensor) * (size_t)c->tensors.cap);
    c->nodes.at = xmalloc(sizeof(IrNode) * (size_t)c->nodes.cap);
    IR_ASSERT(c->tensors.at && c->nodes.at);
    memcpy(c->tensors.at, g->tensors.at, sizeof(IrTensor) * (size_t)g->tensors.len);
    memcpy(c->nodes.at, g->nodes.at, sizeof(IrNode) * (size_t)g->nodes.len);
    c->fused.at = NULL;
    c->fused.len = c->fused.cap = 0;
    for (int i = 0; i < g->fused.len; i++)
        vec_push(&c->fused, g->fused.at[i]);
    return c;
}

int ir_tensor_add(IrGraph *g, const char *name, TensorKind kind, DType dt, int ndim,
                  const int64_t *shape, SrcLoc loc) {
    IR_ASSERT(ndim >= 0 && ndim <= IR_MAX_DIMS);
    IrTensor t = {
        .id = g->tensors.len, .name = arena_strdup(g->arena, name), .kind = kind,
        .dtype = dt, .ndim = ndim, .producer = -1, .alias_of = -1, .layer = -1,
        .cat = kind == TK_PARAM ? MEM_WEIGHTS : kind == TK_INPUT ? MEM_IO
             : kind == TK_GRAD  ? MEM_GRADS   : kind == TK_STATE ? MEM_OPTIMIZER
                                                                 : MEM_TEMPORARIES,
        .loc = loc, .of = -1, .copy_of = -1, .shard_of = -1, .init = INIT_NORMAL, .init_scale = 0.02,
        .first = -1, .last = -1, .reuse = -1, .offset = -1,
    };
    for (int i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    vec_push(&g->tensors, t);
    return t.id;
}

IrTensor *ir_tensor(IrGraph *g, int id) {
    IR_ASSERT(id >= 0 && id < g->tensors.len);
    return &g->tensors.at[id];
}

// Runs the shape rule of a new node into outs[]; false with err filled.
static bool run_shape(IrGraph *g, IrNode *n, IrTensor *outs, IrShapeErr *err) {
    for (int k = 0; k < IR_MAX_OUTPUTS; k++)
        outs[k] = (IrTensor){.ndim = -1, .alias_of = -1, .shard_of = -1};
    outs[0].ndim = 0;   // a rule must fill out[0]; scalars keep rank 0
    err->msg[0] = '\0';
    err->arg = -1;
    return op_info(n->op)->shape(g, n, outs, err);
}

static IrNode new_node(IrGraph *g, OpKind op, int nin, const int *in, OpAttr attr, int layer,
                       SrcLoc loc) {
    const OpDesc *d = op_desc(op);
    IR_ASSERT(nin >= d->min_in && nin <= d->max_in);
    IrNode n = {.id = g->nodes.len, .op = op, .nin = nin, .attr = attr, .layer = layer,
                .loc = loc, .ws = -1, .record = -1, .fused = -1, .bucket = -1};
    for (int i = 0; i < IR_MAX_INPUTS; i++)
        n.in[i] = i < nin ? in[i] : -1;
    for (int k = 0; k < IR_MAX_OUTPUTS; k++)
        n.out[k] = -1;
    n.phase = g->nodes.len ? g->nodes.at[g->nodes.len - 1].phase : PHASE_FORWARD;
    return n;
}

int ir_node_add(IrGraph *g, OpKind op, int nin, const int *in, OpAttr attr,
                const char *name, int layer, SrcLoc loc, IrShapeErr *err) {
    if ((op_desc(op)->attrs & ATTR_SEED) && !attr.seed)
        attr.seed = g->nodes.len + 1;   // its own random stream, kept by any copy of the node
    IrNode n = new_node(g, op, nin, in, attr, layer, loc);
    IrTensor outs[IR_MAX_OUTPUTS];
    if (!run_shape(g, &n, outs, err))
        return -1;
    bool rg = false;
    for (int i = 0; i < nin; i++)
        if (n.in[i] >= 0 && g->tensors.at[n.in[i]].requires_grad)
            rg = true;
    for (int k = 0; k < IR_MAX_OUTPUTS && outs[k].ndim >= 0; k++) {
        const char *nm = k == 0 ? name
                       : k == 1 && op_info(op)->aux
                           ? arena_printf(g->arena, "%s.%s", name, op_info(op)->aux)
                           : arena_printf(g->arena, "%s.%d", name, k);
        n.out[k] = ir_tensor_add(g, nm, TK_VALUE, outs[k].dtype, outs[k].ndim, outs[k].shape, loc);
        IrTensor *o = ir_tensor(g, n.out[k]);
        o->producer = n.id;
        o->layer = layer;
        o->alias_of = k == 0 ? outs[0].alias_of : -1;
        o->alias_offset = k == 0 && outs[0].alias_of >= 0 ? outs[0].alias_offset : 0;
        o->requires_grad = k == 0 && rg;
    }
    vec_push(&g->nodes, n);
    return n.id;
}

int ir_node_redo(IrGraph *g, const IrNode *src, const int *in, const char *name, IrPhase phase) {
    IrNode s = *src;   // src may lie in the node list, which the new node can move
    IrShapeErr err;
    int id = ir_node_add(g, s.op, s.nin, in, s.attr, name, s.layer, s.loc, &err);
    IR_ASSERT(id >= 0);
    IrNode *n = &g->nodes.at[id];
    n->phase = phase;
    n->reference = s.reference;
    for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
        g->tensors.at[n->out[k]].requires_grad = false;
    return id;
}

int ir_copy_add(IrGraph *g, int from, const char *name, const IrNode *at, IrPhase phase,
                Stream stream) {
    int layer = at->layer;
    SrcLoc loc = at->loc;
    IrShapeErr err;
    int id = ir_node_add(g, OP_COPY, 1, &from, (OpAttr){0}, name, layer, loc, &err);
    IR_ASSERT(id >= 0);
    IrNode *n = &g->nodes.at[id];
    n->phase = phase;
    n->stream = stream;
    g->tensors.at[n->out[0]].requires_grad = false;
    return n->out[0];
}

int ir_node_add_update(IrGraph *g, OpKind op, int nin, const int *in, OpAttr attr,
                       int nout, const int *outs, int layer, SrcLoc loc) {
    IrNode n = new_node(g, op, nin, in, attr, layer, loc);
    IrTensor want[IR_MAX_OUTPUTS];
    IrShapeErr err;
    IR_ASSERT(run_shape(g, &n, want, &err));
    for (int k = 0; k < nout; k++) {
        n.out[k] = outs[k];
        n.update |= (uint8_t)(1u << k);
        // optimizer ops update tensors of the parameter's size unless their rule shapes
        // them (8-bit state); the others one of the rule's shape
        bool own = op_desc(op)->cls != OPC_OPTIMIZER || want[k].ndim >= 0;
        if (nin > 0)
            IR_ASSERT(ir_tensor_elems(ir_tensor(g, outs[k])) == ir_tensor_elems(&want[own ? k : 0]));
    }
    vec_push(&g->nodes, n);
    return n.id;
}

int ir_drop_unused(IrGraph *g) {
    int nt = g->tensors.len;
    bool *used = xcalloc((size_t)nt + 1, 1);
    int *to = xmalloc(sizeof(int) * ((size_t)nt + 1));
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0)
                used[n->in[k]] = true;
        for (int k = 0; k < IR_MAX_OUTPUTS; k++)
            if (n->out[k] >= 0)
                used[n->out[k]] = true;
        if (n->ws >= 0)
            used[n->ws] = true;
    }
    for (int f = 0; f < g->fused.len; f++)
        for (int s = 0; s < g->fused.at[f].n; s++)
            used[g->fused.at[f].step[s].out[0]] = true;
    for (int i = 0; i < nt; i++) {   // what a kept tensor names is kept too
        const IrTensor *t = &g->tensors.at[i];
        if (t->kind != TK_VALUE || i == g->loss || i == g->logits || i == g->eval_loss || i == g->decode_logits ||
            i == g->grad_stats || i == g->pref_stats || i == g->ref_out ||
            i == g->grad_factor)
            used[i] = true;
        if (used[i] && t->alias_of >= 0)
            used[t->alias_of] = true;
    }
    int m = 0;
    for (int i = 0; i < nt; i++)
        to[i] = used[i] ? m++ : -1;
    int dropped = nt - m;
#define MAP(x) ((x) = (x) >= 0 ? to[(x)] : (x))
    for (int i = 0; i < nt; i++) {
        if (!used[i])
            continue;
        IrTensor t = g->tensors.at[i];
        t.id = to[i];
        MAP(t.alias_of);
        MAP(t.of);
        MAP(t.copy_of);
        MAP(t.shard_of);
        MAP(t.reuse);
        g->tensors.at[to[i]] = t;
    }
    g->tensors.len = m;
    for (int i = 0; i < g->nodes.len; i++) {
        IrNode *n = &g->nodes.at[i];
        for (int k = 0; k < n->nin; k++)
            MAP(n->in[k]);
        for (int k = 0; k < IR_MAX_OUTPUTS; k++)
            MAP(n->out[k]);
        MAP(n->ws);
    }
    for (int f = 0; f < g->fused.len; f++)
        for (int s = 0; s < g->fused.at[f].n; s++) {
            IrNode *st = &g->fused.at[f].step[s];
            for (int k = 0; k < st->nin; k++)
                MAP(st->in[k]);
            for (int k = 0; k < IR_MAX_OUTPUTS; k++)
                MAP(st->out[k]);
        }
    MAP(g->loss);
    MAP(g->logits);
    MAP(g->eval_loss);
    MAP(g->decode_token);
    MAP(g->decode_pos);
    MAP(g->decode_logits);
    MAP(g->grad_stats);
    MAP(g->pref_stats);
    MAP(g->ref_out);
    MAP(g->ref_logps);
    MAP(g->grad_factor);
#undef MAP
    free(used);
    free(to);
    return dropped;
}

void ir_mark_requires_grad(IrGraph *g) {
    for (int i = 0; i < g->tensors.len; i++) {
        IrTensor *t = &g->tensors.at[i];
        t->requires_grad = t->kind == TK_PARAM && t->trainable;
    }
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        bool rg = false;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0 && g->tensors.at[n->in[k]].requires_grad)
                rg = true;
        if (!n->update)
            g->tensors.at[n->out[0]].requires_grad = rg;
    }
}

void ir_set_param_init(IrGraph *g) {
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        const OpInfo *op = op_info(n->op);
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0 || !op->init[k])
                continue;
            IrTensor *t = &g->tensors.at[n->in[k]];
            if (t->kind == TK_PARAM)
                t->init = (IrInit)op->init[k];
            // A norm weight read as w + 1 starts at 0, so that the weight it applies starts at 1.
            if (t->kind == TK_PARAM && t->init == INIT_ONES && (op_desc(n->op)->attrs & ATTR_OFFSET) &&
                n->attr.offset == 1.0)
                t->init = INIT_ZEROS;
        }
    }
}

void ir_param_decays(const IrGraph *g, bool *decays) {
    for (int i = 0; i < g->tensors.len; i++)
        decays[i] = true;
    if (g->step.decay_all)
        return;
    for (int i = 0; i < g->tensors.len; i++)
        if (g->tensors.at[i].kind == TK_PARAM && g->tensors.at[i].ndim < 2)
            decays[i] = false;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        const OpInfo *op = op_info(n->op);
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0 && op->init[k])
                decays[n->in[k]] = false;
    }
}

int ir_layers(const IrGraph *g) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.at[i].layer + 1 > n)
            n = g->nodes.at[i].layer + 1;
    return n;
}

void ir_rewrite_begin(IrRewrite *rw, IrGraph *g) {
    *rw = (IrRewrite){.g = g, .old = g->nodes.at, .nold = g->nodes.len};
    g->nodes.len = 0;   // room for the nodes kept and a quarter more: a rewrite mostly adds few
    g->nodes.cap = rw->nold + rw->nold / 4 + 16;
    g->nodes.at = xmalloc(sizeof(IrNode) * (size_t)g->nodes.cap);
    IR_ASSERT(g->nodes.at);
}

bool ir_rewrite_next(IrRewrite *rw, IrNode *n) {
    if (rw->at >= rw->nold)
        return false;
    *n = rw->old[rw->at++];
    return true;
}

void ir_claim_outputs(IrGraph *g, const IrNode *n) {
    for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
        if (!((n->update >> k) & 1))
            g->tensors.at[n->out[k]].producer = n->id;
    if (n->fused >= 0)   // a fused node makes its steps' (virtual) intermediates too
        for (int s = 0; s < g->fused.at[n->fused].n - 1; s++)
            g->tensors.at[g->fused.at[n->fused].step[s].out[0]].producer = n->id;
}

int ir_rewrite_keep(IrRewrite *rw, IrNode *n) {
    IrGraph *g = rw->g;
    n->id = g->nodes.len;
    ir_claim_outputs(g, n);
    vec_push(&g->nodes, *n);
    return n->id;
}

void ir_nodes_drop(IrGraph *g, const bool *drop) {
    int m = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        if (drop[i])
            continue;
        if (m != i)
            g->nodes.at[m] = g->nodes.at[i];
        g->nodes.at[m].id = m;
        ir_claim_outputs(g, &g->nodes.at[m]);
        m++;
    }
    g->nodes.len = m;
}

void ir_rewrite_end(IrRewrite *rw) {
    free(rw->old);
    *rw = (IrRewrite){0};
}
