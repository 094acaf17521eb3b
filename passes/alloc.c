// alloc.c — static offsets: every tensor of the step gets a place in its arena.
//
// Storage blocks are the tensors that own bytes (views share their base's; an in-place
// output shares its input's, so a reuse chain is one block over the union of the
// lifetimes). Tensors live for the whole step (parameters, gradients, optimizer state)
// are stacked first; the rest are placed best-fit among the blocks they overlap in time,
// under four orders — by start, by size, by size x lifetime, by lifetime — keeping the
// smallest arena, as XLA's heap simulator keeps the best of several (stopping early when
// one reaches the lower bound). The last order is also repaired (squeaky-wheel
// optimisation): while its arena is above the bound, the blocks that reach its top go
// first and the order is placed again — a small block living across several large
// single-instruction ones (GEMM workspaces) finds no gap when placed late, and one when
// placed early. The bound alone (alloc_bounds) is what the planner asks of a candidate
// first. The liveness lower bound (the most bytes live at any node) is reported beside
// the arena.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

enum {
    ALIGN = 256,
    LARGE = 4000,           // blocks beyond which only the linear order runs
    REPAIRS = 48,           // re-placements of the lifetime order, at most, ...
    REPAIR_WORK = 10000000, // ... and while (placements x blocks^2) stays below this (~10 ms)
};

typedef struct Block {
    int root;               // the tensor owning the bytes
    int first, last;
    int64_t size;           // aligned
    int64_t offset;
} Block;

static int64_t align(int64_t b) { return (b + ALIGN - 1) / ALIGN * ALIGN; }
static int64_t place_by_start(Block *blocks, int n, int64_t base);

// liveness_root of every tensor (op_roots: its base, then along reuse links).
static int *roots(const IrGraph *g) {
    int nt = g->tensors.len, *next = xmalloc(sizeof(int) * (size_t)(nt + 1));
    int *r = xmalloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++)
        next[i] = g->tensors.at[i].alias_of >= 0 ? g->tensors.at[i].alias_of : g->tensors.at[i].reuse;
    op_roots(nt, next, r);
    free(next);
    return r;
}

static const char *order_name[] = {"size", "area", "start", "life"};

// Orders blocks for placement; `ctx` points at the order (0 size, 1 area, 2 start, 3 life).
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
    case 3:   // longest lived first, then earliest, then larger
        if (a->last - a->first != b->last - b->first)
            return a->last - a->first > b->last - b->first ? -1 : 1;
        if (a->first != b->first)
            return a->first < b->first ? -1 : 1;
        ka = a->size, kb = b->size;
        break;
    }
    if (ka != kb)
        return ka > kb ? -1 : 1;
    return a->root < b->root ? -1 : a->root > b->root;
}

// The blocks placed so far, sorted by offset, as parallel arrays (a scan reads them in
// order, touching nothing else): offset, end, and the nodes of their first and last use.
typedef struct Placed {
    int64_t *at, *end;
    int *first, *last;
    int n;
} Placed;

// The best-fitting offset above `base` for block b among the placed blocks live with it: the
// smallest gap that holds it, else the top.
static int64_t best_fit(const Placed *p, int64_t base, const Block *b) {
    int64_t prev_end = base, best = -1, best_gap = 0;
    for (int k = 0; k < p->n; k++) {
        if (p->last[k] < b->first || p->first[k] > b->last)
            continue;   // not live at the same time
        int64_t gap = p->at[k] - prev_end;
        if (gap >= b->size && (best < 0 || gap < best_gap))
            best = prev_end, best_gap = gap;
        if (p->end[k] > prev_end)
            prev_end = p->end[k];
    }
    return best >= 0 ? best : prev_end;
}

// Places blocks[] (already ordered) best-fit above `base`; returns the arena top.
static int64_t place(Block *blocks, int n, int64_t base) {
    Placed p = {xmalloc(sizeof(int64_t) * (size_t)(n + 1)), xmalloc(sizeof(int64_t) * (size_t)(n + 1)),
                xmalloc(sizeof(int) * (size_t)(n + 1)), xmalloc(sizeof(int) * (size_t)(n + 1)), 0};
    int64_t top = base;
    for (int i = 0; i < n; i++) {
        Block *b = &blocks[i];
        b->offset = best_fit(&p, base, b);
        if (b->offset + b->size > top)
            top = b->offset + b->size;
        int k = p.n;   // after every block at or below its offset, keeping the order
        while (k > 0 && p.at[k - 1] > b->offset)
            k--;
        size_t tail = (size_t)(p.n - k);
        memmove(p.at + k + 1, p.at + k, sizeof(int64_t) * tail);
        memmove(p.end + k + 1, p.end + k, sizeof(int64_t) * tail);
        memmove(p.first + k + 1, p.first + k, sizeof(int) * tail);
        memmove(p.last + k + 1, p.last + k, sizeof(int) * tail);
        p.at[k] = b->offset, p.end[k] = b->offset + b->size, p.first[k] = b->first, p.last[k] = b->last;
        p.n++;
    }
    free(p.at), free(p.end), free(p.first), free(p.last);
    return top;
}

// place, repaired (squeaky-wheel optimisation): while the arena is above `lb`, the blocks
// that reach its top move to the front of the order (in their order) and the order is
// placed again, `repairs` times at most; blocks[] ends in the order and places of the
// smallest arena found, which is returned.
static int64_t place_repaired(Block *blocks, int n, int64_t base, int64_t lb, int repairs) {
    int64_t top = place(blocks, n, base), best_top = top;
    Block *best = xmalloc(sizeof(Block) * (size_t)(n + 1)), *rest = xmalloc(sizeof(Block) * (size_t)(n + 1));
    memcpy(best, blocks, sizeof(Block) * (size_t)n);
    for (int r = 0; r < repairs && top > lb; r++) {
        int front = 0, back = 0;
        for (int k = 0; k < n; k++) {
            if (blocks[k].offset + blocks[k].size == top)
                blocks[front++] = blocks[k];
            else
                rest[back++] = blocks[k];
        }
        memcpy(blocks + front, rest, sizeof(Block) * (size_t)back);
        top = place(blocks, n, base);
        if (top < best_top) {
            best_top = top;
            memcpy(best, blocks, sizeof(Block) * (size_t)n);
        }
    }
    memcpy(blocks, best, sizeof(Block) * (size_t)n);
    free(best), free(rest);
    return best_top;
}

// Each tensor's last use, a reuse chain's root's extended to the chain's last (the chain
// is one block), from liveness_root of every tensor.
static int *chain_last(const IrGraph *g, const int *root) {
    int nt = g->tensors.len;
    int *last = xmalloc(sizeof(int) * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++)
        last[i] = g->tensors.at[i].last;
    for (int i = 0; i < nt; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (t->reuse >= 0 && t->alias_of < 0 && t->last > last[root[i]])
            last[root[i]] = t->last;
    }
    return last;
}

// The storage blocks of arena `a` that are not live for the whole step, into *out (the
// caller frees it); their count. The whole-step tensors' bytes are stacked in *fixed
// (their offsets are set when `place` is true). `last`: chain_last's.
static int blocks_of(const IrGraph *g, int a, bool place, const int *last, Block **out, int64_t *fixed) {
    int nt = g->tensors.len, n = g->nodes.len;
    Block *blocks = xmalloc(sizeof(Block) * (size_t)(nt + 1));
    int nb = 0;
    *fixed = 0;
    for (int i = 0; i < nt; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (t->alias_of >= 0 || t->reuse >= 0 || ir_tensor_bytes(t) == 0 || t->arena != a)
            continue;
        if (t->first == 0 && t->last == n - 1 && t->kind != TK_VALUE && t->kind != TK_INPUT) {
            if (place)
                g->tensors.at[i].offset = *fixed;
            *fixed += align(ir_tensor_bytes(t));
            continue;
        }
        Block b = {.root = i, .first = t->first, .last = last[i], .size = align(ir_tensor_bytes(t))};
        if (b.first < 0)
            b.first = b.last = 0;   // never touched: a dead value still gets its bytes
        blocks[nb++] = b;
    }
    *out = blocks;
    return nb;
}

// The bytes live at each node, the stack included, into live[n].
static void live_of(const Block *blocks, int nb, int64_t fixed, int n, int64_t *live) {
    int64_t *delta = xcalloc((size_t)n + 2, sizeof(int64_t));
    for (int k = 0; k < nb; k++) {
        delta[blocks[k].first] += blocks[k].size;
        delta[blocks[k].last + 1] -= blocks[k].size;
    }
    int64_t sum = fixed;
    for (int i = 0; i < n; i++)
        live[i] = sum += delta[i];
    free(delta);
}

// The lower bound: the most bytes live at one node (the stack included), and that node.
static int64_t bound_of(const Block *blocks, int nb, int64_t fixed, int n, int *at) {
    int64_t *live = xmalloc(sizeof(int64_t) * ((size_t)n + 1)), lb = fixed;
    live_of(blocks, nb, fixed, n, live);
    *at = 0;
    for (int i = 0; i < n; i++)
        if (live[i] > lb)
            lb = live[i], *at = i;
    free(live);
    return lb;
}

void alloc_bounds(const IrGraph *g, int64_t bound[2], int *at) {
    int *root = roots(g), *last = chain_last(g, root), host_at;
    for (int a = 0; a < 2; a++) {
        Block *blocks;
        int64_t fixed;
        int nb = blocks_of(g, a, false, last, &blocks, &fixed);
        bound[a] = bound_of(blocks, nb, fixed, g->nodes.len, a == 0 ? at : &host_at);
        free(blocks);
    }
    free(root), free(last);
}

void alloc_live(const IrGraph *g, int64_t *live) {
    int *root = roots(g), *last = chain_last(g, root);
    Block *blocks;
    int64_t fixed;
    int nb = blocks_of(g, 0, false, last, &blocks, &fixed);
    live_of(blocks, nb, fixed, g->nodes.len, live);
    free(blocks), free(root), free(last);
}

// The best of the orders for blocks that no other block outlives into or out of (a
// segment), placed above `fixed`: their offsets set in place, the top returned. By start
// first (near-linear: when it reaches the bound, as it mostly does, the quadratic orders
// never run); very large segments get only that one. `tried` takes each order's top.
static int64_t place_segment(Block *blocks, int nb, int64_t fixed, int64_t lb, int64_t enough, int64_t tried[4],
                             const char **strategy, bool *cut) {
    Block *best = xmalloc(sizeof(Block) * (size_t)(nb + 1));
    int64_t arena = -1;
    static const int orders[4] = {2, 0, 1, 3};
    double work = (double)nb * (double)nb;   // (the quadratic orders' work a placement)
    int repairs = (int)(REPAIR_WORK / (work + 1)) - 1;
    int norders = nb > LARGE ? 1 : repairs < 0 ? 3 : 4;
    if (repairs > REPAIRS)
        repairs = REPAIRS;
    for (int k = 0; k < norders; k++) {
        int o = orders[k];
        qsort_r(blocks, (size_t)nb, sizeof(Block), cmp_blocks, &o);
        int64_t top = o == 2   ? place_by_start(blocks, nb, fixed)
                      : o == 3 ? place_repaired(blocks, nb, fixed, lb, repairs)
                               : place(blocks, nb, fixed);
        tried[o] = top;
        if (arena < 0 || top < arena) {
            arena = top;
            *strategy = order_name[o];
            memcpy(best, blocks, sizeof(Block) * (size_t)nb);
        }
        if (arena == lb)
            break;   // at the lower bound: no order can do better
        if (arena <= enough) {   // small enough
            *cut |= k + 1 < norders;
            break;
        }
    }
    memcpy(blocks, best, sizeof(Block) * (size_t)nb);
    free(best);
    return arena;
}

static int by_first(const void *pa, const void *pb) {
    const Block *a = pa, *b = pb;
    return a->first != b->first ? (a->first > b->first) - (a->first < b->first) : (a->root > b->root) - (a->root < b->root);
}

// Places the tensors of arena `a`; returns its size, and the lower bound in *lb. An order
// whose arena is at most `enough` ends the search (as one at the lower bound does). The
// blocks split into segments no block's life crosses (the training step; the eval phase;
// the decode phase: each starts after everything of the one before has died), each placed
// on its own above the whole-step tensors: a segment's placement cannot touch another's,
// so the arena is the largest segment's, and each gets the orders its own size allows.
static int64_t alloc_arena(IrGraph *g, int a, const int *last, int64_t enough, AllocStats *st, int64_t *lb,
                           int *lb_at) {
    Block *blocks;
    int64_t fixed;
    int nb = blocks_of(g, a, true, last, &blocks, &fixed);
    *lb = bound_of(blocks, nb, fixed, g->nodes.len, lb_at);
    qsort(blocks, (size_t)nb, sizeof(Block), by_first);
    // The batch's inputs, written before the step and read by the eval and decode phases
    // too, would join every segment into one: they are stacked above the whole-step
    // tensors (live from the start, they hold their bytes wherever training peaks).
    int ni = 0;
    for (int k = 0; k < nb; k++)
        if (blocks[k].first == 0 && g->tensors.at[blocks[k].root].kind == TK_INPUT) {
            Block in = blocks[k];
            memmove(blocks + ni + 1, blocks + ni, sizeof(Block) * (size_t)(k - ni));
            in.offset = fixed, fixed += in.size, blocks[ni++] = in;
        }
    int64_t arena = fixed, tried[4] = {0, 0, 0, 0};
    const char *strategy = order_name[2];
    bool cut = false;
    for (int s = ni; s < nb;) {
        int e = s + 1, end = blocks[s].last;
        while (e < nb && blocks[e].first <= end)
            end = blocks[e].last > end ? blocks[e].last : end, e++;
        int at;
        int64_t seg_lb = bound_of(blocks + s, e - s, fixed, g->nodes.len, &at), seg_tried[4] = {0, 0, 0, 0};
        const char *seg_strategy = order_name[2];
        int64_t top = place_segment(blocks + s, e - s, fixed, seg_lb, enough, seg_tried, &seg_strategy, &cut);
        for (int o = 0; o < 4; o++)
            tried[o] = seg_tried[o] > tried[o] ? seg_tried[o] : tried[o];
        if (top > arena)
            arena = top, strategy = seg_strategy;
        s = e;
    }
    for (int k = 0; k < nb; k++)
        g->tensors.at[blocks[k].root].offset = blocks[k].offset;
    if (a == 0) {
        st->fixed_bytes = fixed, st->strategy = strategy, st->cut |= cut;
        memcpy(st->tried, tried, sizeof tried);
    }
    free(blocks);
    return arena;
}

// The free gaps between live blocks, ordered by (size, offset): a treap in an array. Each
// gap remembers the live block just below it (-1: the base).
typedef struct TNode {
    int64_t a, b;           // the key: size, offset
    int below;
    int l, r;
    uint32_t pri;
} TNode;

typedef struct Treap {
    TNode *n;
    int len, root, free_list;
    uint32_t seed;
} Treap;

static bool key_less(int64_t a1, int64_t b1, int64_t a2, int64_t b2) {
    return a1 < a2 || (a1 == a2 && b1 < b2);
}

// Splits tree x into the keys below (a, b) and the rest.
static void tsplit(Treap *t, int x, int64_t a, int64_t b, int *lo, int *hi) {
    while (x >= 0) {
        if (key_less(t->n[x].a, t->n[x].b, a, b)) {
            *lo = x;
            lo = &t->n[x].r;
            x = t->n[x].r;
        } else {
            *hi = x;
            hi = &t->n[x].l;
            x = t->n[x].l;
        }
    }
    *lo = *hi = -1;
}

// Joins trees x and y, every key of x below every key of y.
static int tmerge(Treap *t, int x, int y) {
    int root = -1, *at = &root;
    while (x >= 0 && y >= 0) {
        if (t->n[x].pri > t->n[y].pri) {
            *at = x;
            at = &t->n[x].r;
            x = t->n[x].r;
        } else {
            *at = y;
            at = &t->n[y].l;
            y = t->n[y].l;
        }
    }
    *at = x >= 0 ? x : y;
    return root;
}

// Inserts (a, b) where its priority puts it: down the path to the first node of lower
// priority, which it replaces, that subtree split around it.
static void tinsert(Treap *t, int64_t a, int64_t b, int below) {
    int x = t->free_list;
    if (x >= 0)
        t->free_list = t->n[x].l;
    else
        x = t->len++;
    t->seed = t->seed * 1664525u + 1013904223u;
    t->n[x] = (TNode){a, b, below, -1, -1, t->seed};
    int *at = &t->root;
    while (*at >= 0 && t->n[*at].pri > t->n[x].pri)
        at = key_less(a, b, t->n[*at].a, t->n[*at].b) ? &t->n[*at].l : &t->n[*at].r;
    tsplit(t, *at, a, b, &t->n[x].l, &t->n[x].r);
    *at = x;
}

// Erases the key (a, b), which is present: its children merged in its place.
static void terase(Treap *t, int64_t a, int64_t b) {
    int *at = &t->root;
    while (t->n[*at].a != a || t->n[*at].b != b)
        at = key_less(a, b, t->n[*at].a, t->n[*at].b) ? &t->n[*at].l : &t->n[*at].r;
    int x = *at;
    *at = tmerge(t, t->n[x].l, t->n[x].r);
    t->n[x].l = t->free_list;
    t->free_list = x;
}

// The smallest key at or above (a, b), or -1.
static int tceil(const Treap *t, int64_t a, int64_t b) {
    int best = -1;
    for (int x = t->root; x >= 0;) {
        if (key_less(t->n[x].a, t->n[x].b, a, b)) {
            x = t->n[x].r;
        } else {
            best = x;
            x = t->n[x].l;
        }
    }
    return best;
}

// A min-heap of block indices by their last use.
static void heap_push(int *h, int *n, const Block *blocks, int i) {
    int k = (*n)++;
    for (; k > 0 && blocks[h[(k - 1) / 2]].last > blocks[i].last; k = (k - 1) / 2)
        h[k] = h[(k - 1) / 2];
    h[k] = i;
}

static int heap_pop(int *h, int *n, const Block *blocks) {
    int top = h[0], x = h[--(*n)], k = 0;
    for (;;) {
        int c = 2 * k + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && blocks[h[c + 1]].last < blocks[h[c]].last)
            c++;
        if (blocks[h[c]].last >= blocks[x].last)
            break;
        h[k] = h[c];
        k = c;
    }
    if (*n > 0)
        h[k] = x;
    return top;
}

// Best fit for blocks sorted by start: only the blocks still live can overlap a later
// one, and those do not overlap each other, so the places to consider are the gaps
// between them. The live blocks are a list by offset (a block goes in just above the
// block below its gap, or on top), their gaps a treap by size (ties: the lowest offset,
// as a scan from the bottom would pick), and the blocks that die first a heap:
// O(n log n).
static int64_t place_by_start(Block *blocks, int n, int64_t base) {
    Treap gaps = {.n = xmalloc(sizeof(TNode) * (size_t)(2 * n + 2)), .root = -1, .free_list = -1, .seed = 7};
    int *prev = xmalloc(sizeof(int) * (size_t)(n + 1)), *next = xmalloc(sizeof(int) * (size_t)(n + 1));
    int *heap = xmalloc(sizeof(int) * (size_t)(n + 1)), nheap = 0, head = -1, top_block = -1;   // the lowest and highest live
    int64_t top = base;
    for (int i = 0; i < n; i++) {
        Block *b = &blocks[i];
        while (nheap > 0 && blocks[heap[0]].last < b->first) {   // died before this starts
            int d = heap_pop(heap, &nheap, blocks), p = prev[d], s = next[d];
            int64_t off = blocks[d].offset, end = off + blocks[d].size;
            int64_t prev_end = p >= 0 ? blocks[p].offset + blocks[p].size : base;
            if (off > prev_end)
                terase(&gaps, off - prev_end, prev_end);
            if (s >= 0 && blocks[s].offset > end)
                terase(&gaps, blocks[s].offset - end, end);
            if (s >= 0 && blocks[s].offset > prev_end)
                tinsert(&gaps, blocks[s].offset - prev_end, prev_end, p);
            if (p >= 0)
                next[p] = s;
            else
                head = s;
            if (s >= 0)
                prev[s] = p;
            else
                top_block = p;
        }
        int g = tceil(&gaps, b->size, INT64_MIN), below;
        if (g >= 0) {   // the smallest gap that holds it
            int64_t start = gaps.n[g].b, len = gaps.n[g].a;
            below = gaps.n[g].below;
            terase(&gaps, len, start);
            if (len > b->size)
                tinsert(&gaps, len - b->size, start + b->size, i);
            b->offset = start;
        } else {   // above every live block
            below = top_block;
            b->offset = below >= 0 ? blocks[below].offset + blocks[below].size : base;
        }
        prev[i] = below;
        next[i] = below >= 0 ? next[below] : head;
        if (next[i] >= 0)
            prev[next[i]] = i;
        else
            top_block = i;
        if (below >= 0)
            next[below] = i;
        else
            head = i;
        heap_push(heap, &nheap, blocks, i);
        if (b->offset + b->size > top)
            top = b->offset + b->size;
    }
    free(gaps.n), free(prev), free(next), free(heap);
    return top;
}

int alloc_apply(IrGraph *g, AllocStats *st) { return alloc_within(g, 0, 0, st); }

int alloc_within(IrGraph *g, int64_t device, int64_t host, AllocStats *st) {
    memset(st, 0, sizeof *st);
    int64_t lb;
    int lb_at;
    int *root = roots(g), *last = chain_last(g, root);
    st->arena_bytes = alloc_arena(g, 0, last, device, st, &st->lower_bound, &st->lower_bound_at);
    st->host_bytes = alloc_arena(g, 1, last, host, st, &lb, &lb_at);
    free(last);
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
