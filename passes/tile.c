// tile.c — sequence tiling of the per-token work. A block's working set grows with the
// sequence: at 131,072 tokens one MLP intermediate of Llama-3.1-8B is 3.5 GiB, and a
// block's backward (recomputed or not) holds several at once, whatever is swapped. Most
// of a block treats every token alone — the projections, norms, activations, LoRA paths
// and residual adds — and only attention mixes tokens. So the block's tail after its
// last token-mixing node (for a decoder: the attention output's view, the output
// projection, the residual, the norm, the MLP and the second residual) is written T
// times over S/T-token slices of its inputs, and the slices' results are joined again
// (concat) where the tail's values leave it. Every tile is an ordinary subgraph:
// autodiff gives each its own backward (dy's slices in, the inputs' gradients as slices
// added into the whole), remat recomputes a tile just before the tile's backward needs
// it, liveness lets each tile's intermediates die before the next tile's are made, and
// every backend runs it unchanged. The planner chooses T block by block (PlanChoice.tile
// or .tile_blocks, 1: none) with the micro-batch, recompute and offload, and prices it: T times as many GEMMs of S/T
// rows (cost.c's efficiency by shape) and the slices, joins and their gradients' sums.
//
// Why the graph and not a runtime loop over row slices (as the fused loss loops over
// chunks inside one op): a loop would need a plan construct re-running an instruction
// range at offsets, and its own story in recompute, liveness, the streams and every
// backend; here the tiles are plain nodes the existing passes already plan exactly.
// The cost is a graph T times longer in the tail (a tile count is searched only where
// a tile keeps at least TILE_MIN_ROWS rows, unless forced).
//
// Attention stays whole (FlashAttention is already linear in memory), and so does what
// feeds it: RoPE reads its position, the q/k/v projections are made once for every
// query. A dropout with p > 0 is not tiled (its mask is drawn by element index: a
// tile would draw another), and ends the tail before it. The arithmetic of every row is
// the untiled row's; sums over rows (a weight's gradient, a norm weight's) add the
// tiles' parts in turn, so they differ from the untiled sums in rounding only.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

enum { CONCAT_MAX = 6 };   // ops.def: concat takes at most six inputs

// A value laid out [B, S, ...]: the batch, then the sequence.
static bool token_major(const IrGraph *g, const IrTensor *t) {
    return t->ndim >= 2 && t->shape[0] == g->batch && t->shape[1] == g->seq;
}

// Whether node n works on each token alone: an op that reads and writes rows
// independently, every input a parameter or a [B, S, ...] value, every output [B, S, ...].
static bool per_token(const IrGraph *g, const IrNode *n) {
    switch (n->op) {
    case OP_LINEAR: case OP_LINEAR_ACC: case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV:
    case OP_SCALE: case OP_SILU: case OP_GELU: case OP_GELU_EXACT: case OP_TANH: case OP_SOFTCAP:
    case OP_EXP: case OP_RMSNORM: case OP_LAYERNORM: case OP_VIEW:
        break;
    case OP_MATMUL:   // by a 2-D weight (GPT-2's Conv1D)
        if (g->tensors.at[n->in[1]].kind != TK_PARAM || g->tensors.at[n->in[1]].ndim != 2)
            return false;
        break;
    case OP_DROPOUT:
        if (n->attr.f != 0)
            return false;
        break;
    default:
        return false;
    }
    if (n->phase != PHASE_FORWARD)
        return false;
    for (int k = 0; k < n->nin; k++) {
        if (n->in[k] < 0)
            continue;
        const IrTensor *t = &g->tensors.at[n->in[k]];
        if (t->kind != TK_PARAM && !token_major(g, t))
            return false;
    }
    for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
        if (!token_major(g, &g->tensors.at[n->out[k]]))
            return false;
    return true;
}

// The tail of block `layer` that tiles: [*from, *to] of the node list, or false. The tail
// is the longest run of the block's per-token nodes ending at its last node (consecutive
// in the list: what the elaborator shares between blocks, a RoPE table, may sit earlier
// in the first one), holding at least one GEMM (else nothing is worth tiling).
static bool block_tail(const IrGraph *g, int layer, int *from, int *to) {
    int last = -1;
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.at[i].layer == layer)
            last = i;
    if (last < 0)
        return false;
    int s = last + 1;
    bool gemm = false;
    while (s > 0 && g->nodes.at[s - 1].layer == layer && per_token(g, &g->nodes.at[s - 1])) {
        s--;
        gemm |= op_desc(g->nodes.at[s].op)->cls == OPC_GEMM;
    }
    *from = s, *to = last;
    return s <= last && gemm;
}

typedef struct Tiler {
    IrGraph *g;
    int tiles;              // the tail being written: its block's tiles ...
    int64_t rows;           // ... and S / tiles
    int nt0;                // tensors before the pass
    int *remap;             // per old tensor: what later nodes read instead (a join), else itself
    int *made_in;           // per old tensor: the node of the tail that makes it, else -1
    int *cur;               // per tensor (ncur): its version in the tile being written, else -1
    int ncur;
    int *set;               // the entries of cur set in this tile (nset)
    int nset;
    const char **name;      // per old tensor: its name before tile 0 took its place
} Tiler;

// Tensor x's version in the tile being written: cur, grown to the tensors made so far
// (a tail reads the join of the tail before it, a tensor the pass made).
static int *cur(Tiler *z, int x) {
    if (x >= z->ncur) {
        int n = z->g->tensors.len + 64;
        z->cur = xrealloc(z->cur, sizeof(int) * (size_t)n);
        z->set = xrealloc(z->set, sizeof(int) * (size_t)n);
        for (int i = z->ncur; i < n; i++)
            z->cur[i] = -1;
        z->ncur = n;
    }
    return &z->cur[x];
}

static void cur_put(Tiler *z, int x, int v) {
    int *c = cur(z, x);
    if (*c < 0)
        z->set[z->nset++] = x;
    *c = v;
}

// Tile t's slice of region input x (made once a tile, where the tile first reads it).
static int slice_of(Tiler *z, int x, int t, const IrNode *at) {
    if (*cur(z, x) >= 0)
        return *cur(z, x);
    IrGraph *g = z->g;
    OpAttr a = {.axis = 1, .start = t * z->rows, .size = z->rows};
    IrShapeErr err;
    const char *name = arena_printf(g->arena, "%s.s%d", g->tensors.at[x].name, t);
    int id = ir_node_add(g, OP_SLICE, 1, &x, a, name, at->layer, at->loc, &err);
    IR_ASSERT(id >= 0);
    cur_put(z, x, g->nodes.at[id].out[0]);
    return g->nodes.at[id].out[0];
}

// Tile 0's output k of node `made` takes the id of the tail's tensor `old` (and its
// place in the tensor list): the tensors before it keep their ids, and so the plan's
// buffers their order, by which the runtime seeds each parameter's initialisation (a
// tiled plan starts from the untiled plan's weights). The tensor made for it is left
// unread (dropped at the end).
static void keep_id(IrGraph *g, IrNode *made, int k, int old) {
    IrTensor t = g->tensors.at[made->out[k]];
    t.id = old;
    g->tensors.at[old] = t;
    made->out[k] = old;
}

// The tail's nodes old[from..to] once for tile t, on the tile's slices of its inputs.
static void write_tile(Tiler *z, const IrNode *old, int from, int to, int t) {
    IrGraph *g = z->g;
    for (int i = 0; i < z->nset; i++)
        z->cur[z->set[i]] = -1;
    z->nset = 0;
    for (int i = from; i <= to; i++) {
        const IrNode *n = &old[i];
        int in[IR_MAX_INPUTS];
        for (int k = 0; k < n->nin; k++) {
            int x = n->in[k] >= 0 ? z->remap[n->in[k]] : -1;
            bool inside = x >= 0 && x < z->nt0 && z->made_in[x] >= 0;
            if (inside)
                x = *cur(z, x);
            else if (x >= 0 && g->tensors.at[x].kind != TK_PARAM)
                x = slice_of(z, x, t, n);
            in[k] = x;
        }
        OpAttr a = n->attr;
        if (n->op == OP_VIEW)
            a.shape[1] = z->rows;   // (per_token: the view keeps [B, S, ...])
        IrShapeErr err;
        const char *name = arena_printf(g->arena, "%s.t%d", z->name[n->out[0]], t);
        int id = ir_node_add(g, n->op, n->nin, in, a, name, n->layer, n->loc, &err);
        if (id < 0) {
            fprintf(stderr, "tile: %s: %s\n", op_desc(n->op)->name, err.msg);
            IR_ASSERT(id >= 0);
        }
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++) {
            if (t == 0)
                keep_id(g, &g->nodes.at[id], k, n->out[k]);
            cur_put(z, n->out[k], g->nodes.at[id].out[k]);
        }
    }
}

// parts[0..n) joined along the sequence into one tensor named `name`: one concat, or a
// tree of them where there are more parts than a concat takes.
static int join(IrGraph *g, int *parts, int n, const char *name, const IrNode *at) {
    for (int level = 0; n > 1; level++) {
        int groups = (n + CONCAT_MAX - 1) / CONCAT_MAX, m = 0;
        for (int k = 0, used = 0; k < groups; k++) {
            int size = n / groups + (k < n % groups);
            if (size == 1) {
                parts[m++] = parts[used++];
                continue;
            }
            const char *nm = groups == 1 ? name : arena_printf(g->arena, "%s.j%d.%d", name, level, k);
            IrShapeErr err;
            int id = ir_node_add(g, OP_CONCAT, size, parts + used, (OpAttr){.axis = 1}, nm, at->layer, at->loc,
                                 &err);
            IR_ASSERT(id >= 0);
            parts[m++] = g->nodes.at[id].out[0];
            used += size;
        }
        n = m;
    }
    return parts[0];
}

// Tiles the tail old[from..to] of a block: every tile's nodes, then a join of each value
// the tail hands to the nodes after it (`read_after`), which those nodes then read.
static void tile_tail(Tiler *z, const IrNode *old, int from, int to, const bool *read_after) {
    IrGraph *g = z->g;
    int nout = 0;
    for (int i = from; i <= to; i++)
        for (int k = 0; k < IR_MAX_OUTPUTS && old[i].out[k] >= 0; k++) {
            z->made_in[old[i].out[k]] = i;
            nout += read_after[old[i].out[k]];
        }
    int *parts = xmalloc(sizeof(int) * (size_t)(nout > 0 ? nout : 1) * (size_t)z->tiles);
    int *outs = xmalloc(sizeof(int) * (size_t)(nout > 0 ? nout : 1));
    int no = 0;
    for (int i = from; i <= to; i++)
        for (int k = 0; k < IR_MAX_OUTPUTS && old[i].out[k] >= 0; k++)
            if (read_after[old[i].out[k]])
                outs[no++] = old[i].out[k];
    for (int t = 0; t < z->tiles; t++) {
        write_tile(z, old, from, to, t);
        for (int o = 0; o < no; o++)
            parts[(size_t)o * (size_t)z->tiles + (size_t)t] = *cur(z, outs[o]);
    }
    for (int o = 0; o < no; o++) {
        z->remap[outs[o]] = join(g, parts + (size_t)o * (size_t)z->tiles, z->tiles, z->name[outs[o]], &old[to]);
    }
    free(parts), free(outs);
}

int tile_apply(IrGraph *g, int64_t tiles, const int64_t *per_block, TileStats *st) {
    memset(st, 0, sizeof *st);
    int layers = ir_layers(g), n = g->nodes.len, nt0 = g->tensors.len;
    int *tail_end = xmalloc(sizeof(int) * (size_t)(n + 1));   // per node: the end of the tail it starts, or -1
    int64_t *tail_tiles = xmalloc(sizeof(int64_t) * (size_t)(n + 1));   // ... and its tiles
    for (int i = 0; i < n; i++)
        tail_end[i] = -1;
    for (int l = 0; l < layers; l++) {
        int64_t t = per_block ? per_block[l] : tiles;
        int from, to;
        if (t <= 1 || !block_tail(g, l, &from, &to))
            continue;
        IR_ASSERT(g->seq % t == 0);
        tail_end[from] = to, tail_tiles[from] = t;
        st->blocks++;
        st->nodes = to - from + 1;
        if (t > st->tiles)
            st->tiles = t, st->rows = g->seq / t;
    }
    if (st->blocks == 0) {
        free(tail_end), free(tail_tiles);
        return 0;
    }
    // What the nodes after each tail read of it: every read of a tail's value from outside
    // the tail (tails are disjoint and consecutive, so a reader after `to` is outside).
    bool *read_after = xcalloc((size_t)nt0 + 1, 1);
    for (int i = 0, end = -1; i < n; i++) {
        if (tail_end[i] >= 0)
            end = tail_end[i];
        if (i <= end)
            continue;
        const IrNode *nd = &g->nodes.at[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                read_after[nd->in[k]] = true;
    }
    Tiler z = {.g = g, .nt0 = nt0};
    z.remap = xmalloc(sizeof(int) * (size_t)nt0);
    z.made_in = xmalloc(sizeof(int) * (size_t)nt0);
    z.name = xmalloc(sizeof(char *) * (size_t)nt0);
    for (int i = 0; i < nt0; i++)
        z.remap[i] = i, z.made_in[i] = -1, z.name[i] = g->tensors.at[i].name;
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode nd; ir_rewrite_next(&rw, &nd);) {
        int i = rw.at - 1;
        if (tail_end[i] >= 0) {
            z.tiles = (int)tail_tiles[i], z.rows = g->seq / tail_tiles[i];
            tile_tail(&z, rw.old, i, tail_end[i], read_after);
            rw.at = tail_end[i] + 1;   // (the tail's nodes are replaced by its tiles)
            continue;
        }
        for (int k = 0; k < nd.nin; k++)
            if (nd.in[k] >= 0)
                nd.in[k] = z.remap[nd.in[k]];
        ir_rewrite_keep(&rw, &nd);
    }
    ir_rewrite_end(&rw);
    if (g->loss >= 0)
        g->loss = z.remap[g->loss];
    if (g->logits >= 0)
        g->logits = z.remap[g->logits];
    free(tail_end), free(tail_tiles), free(read_after), free(z.remap), free(z.made_in), free(z.cur), free(z.set), free(z.name);
    ir_drop_unused(g);
    ir_mark_requires_grad(g);
    return 0;
}
