// fuse.c — elementwise chains into one kernel. A node whose op has device code (OpInfo.
// device: the arithmetic of one element) absorbs the elementwise producers of its
// inputs when each such input is read by it alone, has its element count, lives in the
// same phase on the compute stream, and is not the loss or the logits; the producers'
// producers likewise, up to IR_MAX_FUSED steps and FUSED_MAX_IN distinct inputs. The
// group becomes one OP_FUSED node at the last step's place, its steps kept in order; the
// intermediates become virtual (no bytes, no buffer in the arena), so the memory
// planner and the cost model (fewer bytes moved, one launch) see the kernel as it runs.
// A step rounds its result to its tensor's dtype as the unfused op would store it, so
// fused and unfused plans compute the same bits.
//
// First, recompute through fusion: a forward elementwise value that backward reads only
// in elementwise ops, and whose own inputs backward keeps anyway (or that are parameters
// and inputs), is not saved: each backward reader gets a copy of its producer right
// before it, which then fuses into the reader. SwiGLU's silu(gate) is the large case: the
// gate is kept for silu's own gradient, so silu(gate) [B, S, ffn] need not be, and in the
// forward silu and the product fuse into one kernel. The arithmetic is the forward's, so
// the results are bitwise those of keeping the value.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

// The distinct inputs of a fused kernel: ops.def's fused row (its kernel's arguments).
enum { FUSED_MAX_IN = 6 };
_Static_assert((int)FUSED_MAX_IN <= (int)IR_MAX_INPUTS, "a fused node holds its inputs in IrNode.in");

typedef struct Fuse {
    IrGraph *g;
    int *readers;           // per base tensor: nodes reading it (a node counted once)
    int *group;             // per node: the root node of its group, or -1
    FuseStats *st;
} Fuse;

// Whether node n may be a step of a fused kernel.
static bool fusible(const IrNode *n) {
    return op_info(n->op)->device && !n->update && ir_node_nout(n) == 1 &&
           n->stream == STREAM_COMPUTE && n->fused < 0;
}

// Whether input k of node c (a fusible node) may come from a step fused into c's kernel.
static int producer_to_absorb(const Fuse *f, const IrNode *c, int k) {
    const IrGraph *g = f->g;
    int t = c->in[k];
    if (t < 0)
        return -1;
    const IrTensor *x = &g->tensors.at[t];
    if (x->kind != TK_VALUE || x->alias_of >= 0 || x->producer < 0 || t == g->loss || t == g->eval_loss ||
        t == g->decode_logits ||
        t == g->logits || f->readers[t] != 1)
        return -1;
    const IrNode *p = &g->nodes.at[x->producer];
    if (!fusible(p) || f->group[p->id] >= 0 || p->phase != c->phase ||
        ir_tensor_elems(x) != ir_tensor_elems(&g->tensors.at[c->out[0]]))
        return -1;
    return p->id;
}

// Collects into steps[] (producers before consumers) the group rooted at `root`;
// returns the number of steps. inputs[] gathers the distinct external inputs. `pending`
// counts the steps still to be placed after the ones this call adds (node and the
// consumers above it), so the group never outgrows IR_MAX_FUSED.
static int collect(Fuse *f, int node, int root, int *steps, int nsteps, int pending, int *inputs,
                   int *ninputs) {
    IrGraph *g = f->g;
    const IrNode *n = &g->nodes.at[node];
    f->group[node] = root;
    for (int k = 0; k < n->nin; k++) {
        int p = producer_to_absorb(f, n, k);
        if (p >= 0 && nsteps + pending + 1 + 1 <= IR_MAX_FUSED) {
            // The producer's own external inputs must still fit.
            int before = *ninputs, before_steps = nsteps;
            nsteps = collect(f, p, root, steps, nsteps, pending + 1, inputs, ninputs);
            if (*ninputs <= FUSED_MAX_IN)
                continue;
            for (int s = before_steps; s < nsteps; s++)   // undo: it stays a node of its own
                f->group[steps[s]] = -1;
            nsteps = before_steps;
            *ninputs = before;
        }
        int t = n->in[k];
        if (t < 0)
            continue;
        int prod = g->tensors.at[t].producer;
        if (prod >= 0 && g->tensors.at[t].kind == TK_VALUE && f->group[prod] == root && prod != node)
            continue;   // made by a step of this group already (a value read twice)
        bool have = false;
        for (int i = 0; i < *ninputs && i < FUSED_MAX_IN + 1; i++)
            have |= inputs[i] == t;
        if (!have && *ninputs <= FUSED_MAX_IN)
            inputs[(*ninputs)++] = t;
    }
    steps[nsteps++] = node;
    return nsteps;
}

// Readers of each base tensor, split by phase: forward, and the rest.
typedef struct Readers {
    int *fwd, *bwd;         // counts
    int *bwd_other;         // backward readers that are not fusible elementwise ops
} Readers;

static bool persistent(const IrTensor *t) {
    return t->kind == TK_PARAM || t->kind == TK_GRAD || t->kind == TK_STATE ||
           t->kind == TK_QUANT || t->kind == TK_INPUT;
}

// Whether forward node `e` may be recomputed inside its backward readers: see the top.
static bool recompute_in_readers(const IrGraph *g, const IrNode *e, const Readers *r) {
    if (!fusible(e) || e->phase != PHASE_FORWARD)
        return false;
    int t = e->out[0];
    const IrTensor *x = &g->tensors.at[t];
    if (x->kind != TK_VALUE || x->alias_of >= 0 || t == g->loss || t == g->eval_loss || t == g->logits ||
        t == g->decode_logits ||
        r->bwd[t] == 0 || r->bwd_other[t] > 0)
        return false;
    for (int k = 0; k < e->nin; k++) {   // its inputs live into backward whatever happens
        if (e->in[k] < 0)
            continue;
        int b = ir_tensor_base(g, e->in[k]);
        if (!persistent(&g->tensors.at[b]) && r->bwd[b] == 0)
            return false;
    }
    return true;
}

// Gives each backward reader of a recomputable forward value a copy of its producer.
static void recompute_cheap(IrGraph *g, FuseStats *st) {
    int nt = g->tensors.len, n = g->nodes.len;
    Readers r = {xcalloc((size_t)nt + 1, sizeof(int)), xcalloc((size_t)nt + 1, sizeof(int)),
                 xcalloc((size_t)nt + 1, sizeof(int))};
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++) {
            if (nd->in[k] < 0)
                continue;
            int b = ir_tensor_base(g, nd->in[k]);
            if (nd->phase == PHASE_FORWARD) {
                r.fwd[b]++;
            } else {
                r.bwd[b]++;
                if (!fusible(nd) || nd->in[k] != b)   // (through a view: not this pass's)
                    r.bwd_other[b]++;
            }
        }
    }
    bool *recompute = xcalloc((size_t)nt + 1, sizeof(bool));
    int any = 0;
    for (int i = 0; i < n; i++) {
        const IrNode *nd = &g->nodes.at[i];
        if (recompute_in_readers(g, nd, &r))
            recompute[nd->out[0]] = true, any++;
    }
    if (any) {
        IrRewrite rw;
        ir_rewrite_begin(&rw, g);
        for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
            for (int k = 0; nd.phase != PHASE_FORWARD && k < nd.nin; k++) {
                int t = nd.in[k];
                if (t < 0 || t >= nt || !recompute[t])
                    continue;
                int p = g->tensors.at[t].producer;   // (an old node's id: its index there)
                if (p < 0 || p >= rw.nold || rw.old[p].out[0] != t || rw.old[p].phase != PHASE_FORWARD)
                    for (p = 0; p < rw.nold; p++)
                        if (rw.old[p].out[0] == t && rw.old[p].phase == PHASE_FORWARD)
                            break;
                IrNode e = rw.old[p];   // (recompute_in_readers found it: it exists)
                const char *name = arena_printf(g->arena, "%s.re", g->tensors.at[t].name);
                int id = ir_node_redo(g, &e, e.in, name, nd.phase);
                g->nodes.at[id].recompute = true;
                int copy = g->nodes.at[id].out[0];
                for (int j = k; j < nd.nin; j++)   // every read of t by this node
                    if (nd.in[j] == t)
                        nd.in[j] = copy;
                st->recomputed++;
                st->unsaved_bytes += ir_tensor_bytes(&g->tensors.at[t]);
            }
            ir_rewrite_keep(&rw, &nd);
        }
        ir_rewrite_end(&rw);
    }
    free(r.fwd), free(r.bwd), free(r.bwd_other), free(recompute);
}

// Last, the residual's add into the RMSNorm after it: s = add(a, b) read by rmsnorm(s, w)
// becomes one add_rmsnorm(a, b, w) -> (y, rstd, s) at the norm's place, which stores s (the
// residual stream, which later adds and backward read) and normalises those stored bits:
// the unfused arithmetic, one launch and one read of s fewer. Where a and b have s's shape,
// both nodes run in one phase on the compute stream, and nothing between them reads s.
static void fuse_add_norm(IrGraph *g, FuseStats *st) {
    int n = g->nodes.len;
    int *merge = xmalloc(sizeof(int) * (size_t)(n + 1));   // norm node -> the add it takes, or -1
    bool *gone = xcalloc((size_t)n + 1, sizeof(bool));      // an add taken by a norm
    for (int i = 0; i < n; i++) {
        merge[i] = -1;
        const IrNode *nd = &g->nodes.at[i];
        if (nd->op != OP_RMSNORM || nd->update || nd->stream != STREAM_COMPUTE)
            continue;
        int s = nd->in[0], m = g->tensors.at[s].producer;
        if (m < 0 || m >= i || gone[m])
            continue;
        const IrNode *add = &g->nodes.at[m];
        if (add->op != OP_ADD || add->update || add->stream != STREAM_COMPUTE || add->phase != nd->phase ||
            add->out[0] != s || g->tensors.at[s].virt)
            continue;
        const IrTensor *t = &g->tensors.at[s];
        if (!ir_same_shape(&g->tensors.at[add->in[0]], t) || !ir_same_shape(&g->tensors.at[add->in[1]], t))
            continue;
        bool read = false;   // s (or a view of it) read between the add and the norm
        for (int j = m + 1; j < i && !read; j++)
            for (int k = 0; k < g->nodes.at[j].nin && !read; k++)
                read = g->nodes.at[j].in[k] >= 0 && ir_tensor_base(g, g->nodes.at[j].in[k]) == ir_tensor_base(g, s);
        if (read)
            continue;
        merge[i] = m;
        gone[m] = true;
    }
    for (int i = 0; i < n; i++) {
        if (merge[i] < 0)
            continue;
        IrNode *nd = &g->nodes.at[i];
        const IrNode *add = &g->nodes.at[merge[i]];
        nd->op = OP_ADD_RMSNORM;
        nd->nin = 3;
        nd->in[2] = nd->in[1];
        nd->in[0] = add->in[0], nd->in[1] = add->in[1];
        nd->out[2] = add->out[0];
        st->add_norms++;
    }
    ir_nodes_drop(g, gone);
    free(merge), free(gone);
}

int fuse_apply(IrGraph *g, FuseStats *st) {
    memset(st, 0, sizeof *st);
    recompute_cheap(g, st);
    int nt = g->tensors.len, n = g->nodes.len;
    Fuse f = {.g = g, .st = st};
    f.readers = xcalloc((size_t)nt + 1, sizeof(int));
    f.group = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        f.group[i] = -1;
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++) {
            if (nd->in[k] < 0)
                continue;
            bool again = false;   // a node reading one tensor twice is one reader
            for (int j = 0; j < k; j++)
                again |= nd->in[j] >= 0 && ir_tensor_base(g, nd->in[j]) == ir_tensor_base(g, nd->in[k]);
            if (!again)
                f.readers[ir_tensor_base(g, nd->in[k])]++;
        }
    }
    // Roots from the last node back: a node not yet in a group, fusible, with at least
    // one producer to absorb.
    int *fused_of = xmalloc(sizeof(int) * (size_t)(n + 1));   // root node -> g->fused index
    for (int i = 0; i < n; i++)
        fused_of[i] = -1;
    int steps[IR_MAX_FUSED], inputs[IR_MAX_INPUTS + 1];
    for (int i = n - 1; i >= 0; i--) {
        const IrNode *c = &g->nodes.at[i];
        if (f.group[i] >= 0 || !fusible(c))
            continue;
        bool any = false;
        for (int k = 0; k < c->nin && !any; k++)
            any = producer_to_absorb(&f, c, k) >= 0;
        if (!any)
            continue;
        int ninputs = 0;
        int nsteps = collect(&f, i, i, steps, 0, 0, inputs, &ninputs);
        if (nsteps < 2 || ninputs > FUSED_MAX_IN) {
            for (int s = 0; s < nsteps; s++)
                f.group[steps[s]] = -1;
            continue;
        }
        IrFused fz = {.n = nsteps};
        for (int s = 0; s < nsteps; s++) {
            fz.step[s] = g->nodes.at[steps[s]];
            if (s < nsteps - 1) {   // an intermediate: no bytes of its own
                g->tensors.at[fz.step[s].out[0]].virt = true;
                st->virtual_bytes += dtype_bytes(g->tensors.at[fz.step[s].out[0]].dtype,
                                                 ir_tensor_elems(&g->tensors.at[fz.step[s].out[0]]));
            }
        }
        vec_push(&g->fused, fz);
        fused_of[i] = g->fused.len - 1;
        st->kernels++;
        st->steps += nsteps;
        // inputs[] for the node
        IrNode *root = &g->nodes.at[i];
        root->op = OP_FUSED;
        root->nin = ninputs;
        for (int k = 0; k < IR_MAX_INPUTS; k++)
            root->in[k] = k < ninputs ? inputs[k] : -1;
        root->attr = (OpAttr){0};
        root->fused = g->fused.len - 1;
    }
    // Drop the absorbed steps from the node list; the fused node stands at its root's place.
    bool *absorbed = xmalloc(sizeof(bool) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        absorbed[i] = f.group[i] >= 0 && f.group[i] != i;
    ir_nodes_drop(g, absorbed);   // the virtual intermediates are made inside it now
    free(absorbed);
    free(f.readers), free(f.group), free(fused_of);
    fuse_add_norm(g, st);
    return 0;
}
