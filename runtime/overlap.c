// overlap.c — successions of byte holders: per arena, the current holder of every byte
// as a sorted list of disjoint intervals; a span taking [lo, hi) reports the holders of
// the intervals it covers and replaces them with itself (keeping the parts outside).
#include "overlap.h"
#include "xalloc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct Piece {
    int64_t lo, hi;
    int id;
} Piece;

typedef struct Map {
    int arena;
    Piece *at;
    int n, cap;
} Map;

static int by_birth(const void *x, const void *y) {
    const ByteSpan *a = x, *b = y;
    if (a->birth != b->birth)
        return a->birth < b->birth ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

// The first piece whose end is past `off`.
static int first_after(const Map *m, int64_t off) {
    int lo = 0, hi = m->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (m->at[mid].hi <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void take(Map *m, const ByteSpan *s, void (*fn)(int, int, void *), void *ctx) {
    int64_t lo = s->offset, hi = s->offset + s->bytes;
    int i = first_after(m, lo), j = i;
    Piece keep[2];
    int nkeep = 0;
    for (; j < m->n && m->at[j].lo < hi; j++) {
        const Piece *p = &m->at[j];
        // A holder is reported once however many pieces it has here (past 64 pieces it
        // may be reported again: harmless to the callers, and no quadratic search).
        bool seen = false;
        for (int k = j - i <= 64 ? i : j; k < j && !seen; k++)
            seen = m->at[k].id == p->id;
        if (!seen)
            fn(p->id, s->id, ctx);
        if (p->lo < lo)
            keep[nkeep++] = (Piece){p->lo, lo, p->id};
        if (p->hi > hi)
            keep[nkeep++] = (Piece){hi, p->hi, p->id};
    }
    // pieces [i, j) become: the part before lo, the span, the part after hi
    Piece put[3];
    int nput = 0;
    if (nkeep && keep[0].lo < lo)
        put[nput++] = keep[0];
    put[nput++] = (Piece){lo, hi, s->id};
    if (nkeep && keep[nkeep - 1].hi > hi)
        put[nput++] = keep[nkeep - 1];
    int grow = nput - (j - i);
    if (m->n + grow > m->cap) {
        m->cap = 2 * (m->n + grow) + 16;
        m->at = xrealloc(m->at, sizeof *m->at * (size_t)m->cap);
    }
    memmove(&m->at[i + nput], &m->at[j], sizeof *m->at * (size_t)(m->n - j));
    memcpy(&m->at[i], put, sizeof *put * (size_t)nput);
    m->n += grow;
}

void byte_successions(ByteSpan *r, int n, void (*fn)(int prev, int next, void *ctx), void *ctx) {
    qsort(r, (size_t)n, sizeof *r, by_birth);
    Map *maps = NULL;
    int nmaps = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < nmaps && maps[k].arena != r[i].arena)
            k++;
        if (k == nmaps) {
            maps = xrealloc(maps, sizeof *maps * (size_t)(nmaps + 1));
            maps[nmaps++] = (Map){.arena = r[i].arena};
        }
        take(&maps[k], &r[i], fn, ctx);
    }
    for (int k = 0; k < nmaps; k++)
        free(maps[k].at);
    free(maps);
}
