// alloc.c — static offsets: every tensor of the step gets a place in its arena.
//
// Storage blocks are the tensors that own bytes (views share their base's; an in-place
// output shares its input's, so a reuse chain is one block over the union of the
// lifetimes). Tensors live for the whole step (parameters, gradients, optimizer state)
// are stacked first; the rest are placed best-fit among the blocks they overlap in time,
// under three orders — by size, by size x lifetime, by start — keeping the smallest
// arena, as XLA's heap simulator keeps the best of several (stopping early when one
// reaches the lower bound). The liveness lower bound (the
// most bytes live at any node) is reported beside the arena.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

enum { ALIGN = 256, LARGE = 4000 };   // blocks beyond which only the linear order runs

typedef struct Block {
    int root;               // the tensor owning the bytes
    int first, last;
    int64_t size;           // aligned
    int64_t offset;
} Block;

static int64_t align(int64_t b) { return (b + ALIGN - 1) / ALIGN * ALIGN; }
static int64_t place_by_start(Block *blocks, int n, int64_t base);

// liveness_root of every tensor, each link followed once (in-place chains can be long).
static int *roots(const IrGraph *g) {
    int nt = g->tensors.len;
    int *r = malloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++)
        r[i] = -1;
    int *stack = malloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++) {
        int n = 0, t = i;
        while (r[t] < 0) {
            const IrTensor *x = &g->tensors.at[t];
            int next = x->alias_of >= 0 ? x->alias_of : x->reuse;
            if (next < 0) {
                r[t] = t;
                break;
            }
            stack[n++] = t;
            t = next;
        }
        while (n > 0)
            r[stack[--n]] = r[t];
    }
    free(stack);
    return r;
}

static const char *order_name[] = {"size", "area", "start"};

// Orders blocks for placement; `ctx` points at the order (0 size, 1 area, 2 start).
static int cmp_blocks(const void *pa, const void *pb, void *ctx) {
    const Block *a = pa, *b = pb;
    int64_t ka = 0, kb = 0;
    switch (*(const int *)ctx) {
    case 0: ka = a->size, kb = b->size; break;
    case 1:
        ka = a->size * (a->last - a->first + 1), kb = b->size * (b->last - b->first + 1);
        break;
    case 2:   // earliest first, larger first among equals
        if (a->first != b->first)
            return a->first < b->first ? -1 : 1;
        ka = a->size, kb = b->size;
        break;
    }
    if (ka != kb)
        return ka > kb ? -1 : 1;
    return a->root < b->root ? -1 : a->root > b->root;
}

// The best-fitting offset above `base` for a block of `size` among the blocks `ids`
// (sorted by offset) it must not overlap: the smallest gap that holds it, else the top.
static int64_t best_fit(const Block *blocks, const int *ids, int n, int64_t base, int64_t size,
                        const Block *b) {
    int64_t prev_end = base, best = -1, best_gap = 0;
    for (int k = 0; k < n; k++) {
        const Block *p = &blocks[ids[k]];
        if (b && (p->last < b->first || p->first > b->last))
            continue;   // not live at the same time
        int64_t gap = p->offset - prev_end;
        if (gap >= size && (best < 0 || gap < best_gap))
            best = prev_end, best_gap = gap;
        if (p->offset + p->size > prev_end)
            prev_end = p->offset + p->size;
    }
    return best >= 0 ? best : prev_end;
}

// Places blocks[] (already ordered) best-fit above `base`; returns the arena top.
static int64_t place(Block *blocks, int n, int64_t base) {
    // placed: indices into blocks, sorted by offset
    int *placed = malloc(sizeof(int) * (size_t)(n + 1)), np = 0;
    int64_t top = base;
    for (int i = 0; i < n; i++) {
        Block *b = &blocks[i];
        b->offset = best_fit(blocks, placed, np, base, b->size, b);
        if (b->offset + b->size > top)
            top = b->offset + b->size;
        int k = np;   // insert, keeping placed sorted by offset
        while (k > 0 && blocks[placed[k - 1]].offset > b->offset) {
            placed[k] = placed[k - 1];
            k--;
        }
        placed[k] = i;
        np++;
    }
    free(placed);
    return top;
}

// Places the tensors of arena `a`; returns its size, and the lower bound in *lb.
static int64_t alloc_arena(IrGraph *g, int a, AllocStats *st, int64_t *lb, int *lb_at) {
    int nt = g->tensors.len, n = g->nodes.len;
    Block *blocks = malloc(sizeof(Block) * (size_t)(nt + 1));
    int nb = 0;
    int64_t fixed = 0;   // the stack of whole-step tensors
    for (int i = 0; i < nt; i++) {
        IrTensor *t = &g->tensors.at[i];
        if (t->alias_of >= 0 || t->reuse >= 0 || ir_tensor_bytes(t) == 0 || t->arena != a)
            continue;
        if (t->first == 0 && t->last == n - 1 && t->kind != TK_VALUE && t->kind != TK_INPUT) {
            t->offset = fixed;
            fixed += align(ir_tensor_bytes(t));
            continue;
        }
        Block b = {.root = i, .first = t->first, .last = t->last, .size = align(ir_tensor_bytes(t))};
        if (b.first < 0)
            b.first = b.last = 0;   // never touched: a dead value still gets its bytes
        blocks[nb++] = b;
    }
    // A reuse chain extends its root's block to the chain's last use.
    int *root = roots(g), *block_of = malloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++)
        block_of[i] = -1;
    for (int k = 0; k < nb; k++)
        block_of[blocks[k].root] = k;
    for (int i = 0; i < nt; i++) {
        const IrTensor *t = &g->tensors.at[i];
        int k = t->reuse >= 0 && t->alias_of < 0 ? block_of[root[i]] : -1;
        if (k >= 0 && t->last > blocks[k].last)
            blocks[k].last = t->last;
    }
    free(root), free(block_of);
    // The lower bound: the most bytes live at one node.
    int64_t *delta = calloc((size_t)n + 2, sizeof(int64_t));
    for (int k = 0; k < nb; k++) {
        delta[blocks[k].first] += blocks[k].size;
        delta[blocks[k].last + 1] -= blocks[k].size;
    }
    int64_t live = 0;
    *lb = fixed, *lb_at = 0;
    for (int i = 0; i < n; i++) {
        live += delta[i];
        if (fixed + live > *lb)
            *lb = fixed + live, *lb_at = i;
    }
    free(delta);
    // Best of the orders.
    Block *best = malloc(sizeof(Block) * (size_t)(nb + 1));
    int64_t arena = -1;
    // Very large graphs get only the start order, whose placement is near-linear.
    for (int o = nb > LARGE ? 2 : 0; o < 3; o++) {
        qsort_r(blocks, (size_t)nb, sizeof(Block), cmp_blocks, &o);
        int64_t top = o == 2 ? place_by_start(blocks, nb, fixed) : place(blocks, nb, fixed);
        if (a == 0)
            st->tried[o] = top;
        if (arena < 0 || top < arena) {
            arena = top;
            if (a == 0)
                st->strategy = order_name[o];
            memcpy(best, blocks, sizeof(Block) * (size_t)nb);
        }
        if (arena == *lb)
            break;   // at the lower bound: no order can do better
    }
    for (int k = 0; k < nb; k++)
        g->tensors.at[best[k].root].offset = best[k].offset;
    if (a == 0)
        st->fixed_bytes = fixed;
    free(blocks), free(best);
    return arena;
}

// Best fit for blocks sorted by start: only the blocks still live can overlap a later
// one, so the scan keeps just those (sorted by offset). O(n·k), k the live blocks.
static int64_t place_by_start(Block *blocks, int n, int64_t base) {
    int *active = malloc(sizeof(int) * (size_t)(n + 1)), na = 0;
    int64_t top = base;
    for (int i = 0; i < n; i++) {
        Block *b = &blocks[i];
        int keep = 0;   // drop the blocks that died before this one starts
        for (int k = 0; k < na; k++)
            if (blocks[active[k]].last >= b->first)
                active[keep++] = active[k];
        na = keep;
        b->offset = best_fit(blocks, active, na, base, b->size, NULL);   // all of them are live
        if (b->offset + b->size > top)
            top = b->offset + b->size;
        int k = na;
        while (k > 0 && blocks[active[k - 1]].offset > b->offset) {
            active[k] = active[k - 1];
            k--;
        }
        active[k] = i;
        na++;
    }
    free(active);
    return top;
}

int alloc_apply(IrGraph *g, AllocStats *st) {
    memset(st, 0, sizeof *st);
    int64_t lb;
    int lb_at;
    st->arena_bytes = alloc_arena(g, 0, st, &st->lower_bound, &st->lower_bound_at);
    st->host_bytes = alloc_arena(g, 1, st, &lb, &lb_at);
    int *root = roots(g);
    for (int i = 0; i < g->tensors.len; i++) {
        IrTensor *t = &g->tensors.at[i];
        if (t->alias_of >= 0 || t->reuse >= 0) {
            t->offset = g->tensors.at[root[i]].offset;
            t->arena = g->tensors.at[root[i]].arena;
        }
    }
    free(root);
    return 0;
}
