// shard.c — data parallelism: one rank's step of a job of g->ranks ranks, with the model
// states sharded as ZeRO's stage says (Rajbhandari et al. 2020), and the collectives that
// keep the ranks in step. Each rank runs the same graph on its micro-batches; a tensor's
// shard is this rank's 1/ranks of its flat elements (IrTensor.shard_of), so one plan serves
// every rank.
//
//   stage 0  every gradient all-reduced (summed) after its last contribution, on the last
//            micro-step of the step only (the others accumulate locally, as DDP's no_sync)
//   stage 1  + optimizer state sharded: the gradient reduce-scattered (last micro-step) into
//            this rank's slice of it, the update of that slice, the parameter all-gathered
//   stage 2  + gradients sharded: backward writes a whole gradient per micro-step, which is
//            reduce-scattered and added into this rank's gradient shard, every micro-step
//   stage 3  + parameters sharded: each phase all-gathers a parameter before its first
//            reader there and lets it go after its last (the optimizer updates the shard)
//
// A tensor whose elements the rank count does not divide stays whole on every rank and its
// gradient is all-reduced, whatever the stage (LLM tensors divide by any power of two up
// to 64); so does an NF4 parameter, and one with AdamW8bit's 8-bit state (its codes and
// absmaxes are blocks of 256, not flat elements). Each micro-batch's loss is already its share of the
// whole global step's (its terms over the step's target count, every rank's windows
// counted), so the sums are what one rank would have accumulated.
// Collectives are placed here next to what they need; the buckets pass places them for
// overlap after scheduling and groups them into buckets.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct Param {
    int stage;              // what this parameter gets: -1 untouched, else 0..3
    int grad;               // its gradient, or -1 (frozen)
    int ndim;               // its whole shape
    int64_t shape[IR_MAX_DIMS];
    int whole;              // stage >= 2: the whole gradient backward writes each micro-step
    int mine;               // stage 1, 2: this rank's slice of the parameter (a view)
    int gmine;              // stage 1: this rank's slice of the gradient (a view, made by the RS)
    int gathered[2];        // stage 3: its whole copy in forward and in backward, or -1
    int next;               // the next parameter reduced after the same node, or -1
    bool written;           // stage >= 2: a backward node already wrote `whole` (this micro-step)
} Param;

// A view of this rank's slice of `base` (elems of them).
static int slice_of(IrGraph *g, int base, const char *what, int64_t elems) {
    const IrTensor b = g->tensors.at[base];
    int id = ir_tensor_add(g, arena_printf(g->arena, "%s.%s", b.name, what), TK_VALUE, b.dtype, 1,
                           &elems, b.loc);
    IrTensor *t = &g->tensors.at[id];
    t->alias_of = base, t->shard_of = base, t->layer = b.layer, t->cat = b.cat;
    return id;
}

// A collective on the comm stream: its output a new tensor `name` (out < 0) or the
// existing `out`, which it writes.
static int collective(IrGraph *g, OpKind op, int in, int out, const IrNode *at, IrPhase phase,
                      const char *name) {
    int id;
    if (out < 0) {
        IrShapeErr err;
        id = ir_node_add(g, op, 1, &in, (OpAttr){0}, name, at->layer, at->loc, &err);
        IR_ASSERT(id >= 0);
    } else {
        id = ir_node_add_update(g, op, 1, &in, (OpAttr){0}, 1, &out, at->layer, at->loc);
    }
    IrNode *n = &g->nodes.at[id];
    n->phase = phase;
    n->stream = STREAM_COMM;
    return id;
}

// The reduction of parameter x's gradient after its last contribution (node `at`).
static void reduce(IrGraph *g, Param *pm, int x, const IrNode *at, ShardStats *st) {
    Param *p = &pm[x];
    const char *gname = g->tensors.at[p->grad].name;
    if (p->stage == 0) {   // summed on the last micro-step; the others accumulate locally
        int id = collective(g, OP_ALL_REDUCE, p->grad, p->grad, at, PHASE_BACKWARD, NULL);
        g->nodes.at[id].last = true;
    } else if (p->stage == 1) {   // this rank's slice of the sum, likewise
        int id = collective(g, OP_REDUCE_SCATTER, p->grad, -1, at, PHASE_BACKWARD,
                            arena_printf(g->arena, "%s.mine", gname));
        g->nodes.at[id].last = true;
        p->gmine = g->nodes.at[id].out[0];
        IrTensor *v = &g->tensors.at[p->gmine];
        v->alias_of = p->grad, v->shard_of = p->grad, v->cat = MEM_GRADS;
    } else {   // every micro-step: the whole gradient's slice, added into the shard
        int id = collective(g, OP_REDUCE_SCATTER, p->whole, -1, at, PHASE_BACKWARD,
                            arena_printf(g->arena, "%s.mine", g->tensors.at[p->whole].name));
        int mine = g->nodes.at[id].out[0];
        IrTensor *v = &g->tensors.at[mine];
        v->alias_of = p->whole, v->shard_of = p->whole, v->cat = MEM_GRADS;
        int acc = ir_node_add_update(g, OP_ACC, 1, &mine, (OpAttr){0}, 1, &p->grad, at->layer, at->loc);
        g->nodes.at[acc].phase = PHASE_BACKWARD;
    }
    st->reduce_bytes += ir_tensor_bytes(&g->tensors.at[p->stage >= 2 ? p->whole : p->grad]);
    st->collectives++;
}

// Per parameter, the node of its gradient's last contribution, or -1 (into last_writer, nt
// entries): in backward, or in forward where the fused loss makes the projection's
// gradient with the loss; such a gradient is reduced as backward starts (after the last
// forward node), so that every reduction is a backward node.
static void last_writers(const IrGraph *g, int nt, int *last_writer) {
    int last_fwd = -1;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *nd = &g->nodes.at[i];
        if (nd->phase == PHASE_FORWARD)
            last_fwd = i;
        for (int k = 0; nd->phase != PHASE_OPTIMIZER && k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
            const IrTensor *t = &g->tensors.at[nd->out[k]];
            if (t->kind == TK_GRAD && t->of >= 0)
                last_writer[t->of] = i;
        }
    }
    for (int i = 0; i < nt; i++)
        if (last_writer[i] >= 0 && g->nodes.at[last_writer[i]].phase == PHASE_FORWARD)
            last_writer[i] = last_fwd;
}

// What parameter i gets (pm[i]), with its whole shape kept; listed in `first` after the
// node of its gradient's last contribution (lw). Its views and its whole gradient exist
// before the shards take their shapes (collectives' shape rules see them).
static void plan_param(IrGraph *g, const ShardSpec *spec, Param *pm, int *first, int lw, int i, ShardStats *st) {
    const IrTensor *t = &g->tensors.at[i];
    Param *p = &pm[i];
    int R = spec->ranks;
    int64_t e = ir_tensor_elems(t);
    // (AdamW8bit's codes and absmaxes go by blocks, not by the flat elements a shard is)
    bool q8 = g->step.adam8 && t->trainable && e >= g->step.adam8_min_elems;
    bool divides = e % R == 0 && t->dtype != DT_NF4 && !q8;
    if (p->grad >= 0)
        p->stage = divides ? spec->zero : 0;
    else if (spec->zero == 3 && divides)
        p->stage = 3;   // frozen: only its storage is sharded
    if (p->stage < 0)
        return;
    p->ndim = t->ndim;
    memcpy(p->shape, t->shape, sizeof p->shape);
    if (p->stage > 0)
        st->sharded++, st->sharded_elems += e;
    else
        st->whole++;
    if (p->grad >= 0 && lw >= 0) {
        p->next = first[lw];
        first[lw] = i;
    }
    if (p->stage == 1 || p->stage == 2)
        p->mine = slice_of(g, i, "mine", e / R);
    if (p->stage >= 2 && p->grad >= 0) {
        const IrTensor gt = g->tensors.at[p->grad];
        p->whole = ir_tensor_add(g, arena_printf(g->arena, "%s.whole", gt.name), TK_VALUE, gt.dtype, p->ndim,
                                 p->shape, gt.loc);
        g->tensors.at[p->whole].layer = gt.layer;
        g->tensors.at[p->whole].cat = MEM_GRADS;
    }
}

// The shards' shapes, this rank's flat 1/R: optimizer state (stage 1+), gradients (2+),
// parameters (3).
static void shard_shapes(IrGraph *g, const Param *pm, int nt, int R) {
    for (int i = 0; i < nt; i++) {
        IrTensor *t = &g->tensors.at[i];
        int of = t->kind == TK_PARAM ? i : t->of;
        if (of < 0 || pm[of].stage < 1)
            continue;
        int stage = pm[of].stage;
        bool shard = t->kind == TK_PARAM ? stage == 3
                   : t->kind == TK_GRAD  ? stage >= 2
                   : t->kind == TK_STATE;
        if (!shard)
            continue;
        t->shape[0] = ir_tensor_elems(t) / R;   // (each has its parameter's elements)
        t->ndim = 1;
        t->shard_of = stage <= 2 ? of : -1;   // stage 3: named by the gathered copy, below
    }
}

// The gradients' statistics (clipping, the skip): each rank sums its shards' squares, the
// sum over the ranks is the whole's; a gradient kept whole is the same on every rank, so
// its sum of squares is added after that sum, and counted once.
typedef struct GradStats {
    bool sharded;           // some gradient is sharded (else nothing here changes)
    IrNode *whole_sumsq;    // the sums of squares of whole gradients, held back ...
    int nwhole;             // ... how many
    bool written;           // a sum of squares assigned the statistics already
} GradStats;

// Node nd as the statistics over sharded gradients need it; false where it is held back
// (kept after the sum over the ranks instead).
static bool grad_stats_node(IrGraph *g, const Param *pm, IrRewrite *rw, IrNode *nd, GradStats *gs,
                            ShardStats *st) {
    if (!gs->sharded)
        return true;
    if (nd->op == OP_GRAD_SUMSQ) {
        const IrTensor *gt = &g->tensors.at[nd->in[0]];
        const Param *p = gt->kind == TK_GRAD && gt->of >= 0 ? &pm[gt->of] : NULL;
        if (!p || p->stage < 1) {   // after the sum over the ranks
            gs->whole_sumsq[gs->nwhole++] = *nd;
            return false;
        }
        nd->in[0] = p->stage == 1 ? p->gmine : p->grad;   // this rank's slice of it
    }
    if (nd->op == OP_GRAD_FACTOR && g->grad_stats >= 0) {
        collective(g, OP_ALL_REDUCE, g->grad_stats, g->grad_stats, nd, PHASE_OPTIMIZER, NULL);
        st->collectives++;
        for (int k = 0; k < gs->nwhole; k++) {
            gs->whole_sumsq[k].update = 1;
            ir_rewrite_keep(rw, &gs->whole_sumsq[k]);
        }
        gs->nwhole = 0;
    }
    if (nd->op == OP_GRAD_SUMSQ) {   // the first of them assigns
        nd->update = gs->written ? 1 : 0;
        gs->written = true;
    }
    return true;
}

// Node nd reading the gathered copies of stage-3 parameters (nt tensors before this pass),
// each gathered before its first reader in the node's phase.
static void read_gathered(IrGraph *g, Param *pm, int nt, IrNode *nd, ShardStats *st) {
    int ph = nd->phase == PHASE_FORWARD ? 0 : nd->phase == PHASE_BACKWARD ? 1 : -1;
    for (int k = 0; ph >= 0 && k < nd->nin; k++) {
        int x = nd->in[k];
        if (x < 0 || x >= nt || g->tensors.at[x].kind != TK_PARAM || pm[x].stage != 3)
            continue;
        Param *p = &pm[x];
        if (p->gathered[ph] < 0) {   // its first reader in this phase: gathered before it
            int id = collective(g, OP_ALL_GATHER, x, -1, nd, nd->phase,
                                arena_printf(g->arena, ph ? "%s.gathered.bwd" : "%s.gathered",
                                             g->tensors.at[x].name));
            IrTensor *o = &g->tensors.at[g->nodes.at[id].out[0]];
            o->ndim = p->ndim;
            memcpy(o->shape, p->shape, sizeof o->shape);
            o->layer = nd->layer, o->cat = MEM_WEIGHTS;
            p->gathered[ph] = o->id;
            st->gather_bytes += ir_tensor_bytes(o);
            st->collectives++;
        }
        nd->in[k] = p->gathered[ph];
        // A view of the parameter (a slice of its rows) is one of the gathered copy,
        // which then lives as long as the view is read.
        for (int o = 0; o < IR_MAX_OUTPUTS && nd->out[o] >= 0; o++)
            if (g->tensors.at[nd->out[o]].alias_of == x)
                g->tensors.at[nd->out[o]].alias_of = p->gathered[ph];
    }
}

// Node nd (forward or backward) writing the whole gradients of stage 2 and 3 parameters
// instead of their shards.
static void write_whole(IrGraph *g, Param *pm, IrNode *nd) {
    for (int k = 0; nd->phase != PHASE_OPTIMIZER && k < IR_MAX_OUTPUTS && nd->out[k] >= 0; k++) {
        const IrTensor *t = &g->tensors.at[nd->out[k]];
        if (t->kind != TK_GRAD || t->of < 0 || pm[t->of].stage < 2)
            continue;
        Param *p = &pm[t->of];
        nd->out[k] = p->whole;
        if (!p->written && nd->op == OP_ACC) {   // acc only adds: the whole zeroed first
            int z = ir_node_add_update(g, OP_ZERO, 0, NULL, (OpAttr){0}, 1, &p->whole, nd->layer, nd->loc);
            g->nodes.at[z].phase = nd->phase, g->nodes.at[z].update = 0;   // it makes it
            ir_claim_outputs(g, &g->nodes.at[z]);
        } else if (!p->written) {   // the micro-step's first contribution assigns
            nd->update &= (uint8_t)~(1u << k);
        }
        p->written = true;
    }
}

// The nodes: readers of sharded parameters read gathered copies, backward writes whole
// gradients (stages 2, 3), each gradient reduced after its last contribution (first: per
// node, the parameters reduced after it), the updates on slices, and the parameters
// gathered after them (stages 1 and 2).
static void rewrite_nodes(IrGraph *g, Param *pm, const int *first, int nt, ShardStats *st) {
    int n = g->nodes.len;
    GradStats gs = {.whole_sumsq = xmalloc(sizeof(IrNode) * (size_t)(n + 1))};
    for (int i = 0; i < nt; i++)
        gs.sharded |= g->tensors.at[i].kind == TK_PARAM && pm[i].grad >= 0 && pm[i].stage >= 1;
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int at = rw.at - 1;
        if (!grad_stats_node(g, pm, &rw, &nd, &gs, st))
            continue;
        read_gathered(g, pm, nt, &nd, st);
        write_whole(g, pm, &nd);
        int param = op_desc(nd.op)->cls == OPC_OPTIMIZER ? nd.out[0] : -1;
        if (param >= 0 && param < nt && pm[param].stage >= 1) {   // the update of a slice
            Param *p = &pm[param];
            nd.in[0] = p->stage == 1 ? p->gmine : p->grad;
            if (p->stage <= 2)
                nd.out[0] = p->mine;
        }
        ir_rewrite_keep(&rw, &nd);
        if (param >= 0 && param < nt && (pm[param].stage == 1 || pm[param].stage == 2)) {
            collective(g, OP_ALL_GATHER, pm[param].mine, param, &nd, PHASE_OPTIMIZER, NULL);
            st->gather_bytes += ir_tensor_bytes(&g->tensors.at[param]);
            st->collectives++;
        }
        for (int x = at < n ? first[at] : -1; x >= 0; x = pm[x].next)
            reduce(g, pm, x, &nd, st);
    }
    ir_rewrite_end(&rw);
    IR_ASSERT(gs.nwhole == 0);
    free(gs.whole_sumsq);
}

// Stage 3: a parameter and its state are slices of the whole its gathered copy holds.
static void gathered_wholes(IrGraph *g, const Param *pm, int nt) {
    for (int i = 0; i < nt; i++) {
        IrTensor *t = &g->tensors.at[i];
        int of = t->kind == TK_PARAM ? i : t->of;
        if (of < 0 || pm[of].stage != 3 || t->kind == TK_INPUT || t->kind == TK_VALUE)
            continue;
        int whole = pm[of].gathered[0] >= 0 ? pm[of].gathered[0] : pm[of].gathered[1];
        IR_ASSERT(whole >= 0);
        t->shard_of = whole;
    }
}

int shard_apply(IrGraph *g, const ShardSpec *spec, ShardStats *st) {
    memset(st, 0, sizeof *st);
    int R = spec->ranks;
    if (R <= 1)
        return 0;
    g->ranks = R;
    int nt = g->tensors.len, n = g->nodes.len;
    Param *pm = xcalloc((size_t)nt + 1, sizeof *pm);
    int *first = xmalloc(sizeof(int) * (size_t)(n + 1));   // per node: params reduced after it
    for (int i = 0; i < n; i++)
        first[i] = -1;
    int *last_writer = xmalloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++) {
        pm[i] = (Param){.stage = -1, .grad = -1, .whole = -1, .mine = -1, .gmine = -1,
                        .gathered = {-1, -1}, .next = -1};
        last_writer[i] = -1;
    }
    for (int i = 0; i < nt; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (t->kind == TK_GRAD && t->of >= 0)
            pm[t->of].grad = i;
    }
    last_writers(g, nt, last_writer);
    for (int i = 0; i < nt; i++)
        if (g->tensors.at[i].kind == TK_PARAM)
            plan_param(g, spec, pm, first, last_writer[i], i, st);
    shard_shapes(g, pm, nt, R);
    rewrite_nodes(g, pm, first, nt, st);
    gathered_wholes(g, pm, nt);
    free(pm), free(first), free(last_writer);
    return 0;
}
