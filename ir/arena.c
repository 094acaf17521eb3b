// arena.c — bump allocation for compile-time objects, and the growable vector.
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} Chunk;

struct Arena {
    Chunk *head;
};

enum { CHUNK_BYTES = 1 << 20 };

Arena *arena_new(void) {
    Arena *a = xmalloc(sizeof *a);
    a->head = NULL;
    return a;
}

void arena_free(Arena *a) {
    if (!a)
        return;
    for (Chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a);
}

void *arena_alloc(Arena *a, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    Chunk *c = a->head;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES;
        c = xmalloc(sizeof *c + cap);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
    char buf[256];   // (names mostly fit: formatted once)
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *p = arena_alloc(a, (size_t)n + 1);
    if ((size_t)n < sizeof buf) {
        memcpy(p, buf, (size_t)n + 1);
        return p;
    }
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void vec_grow_(void **at, int *cap, size_t elem) {
    int ncap = *cap ? *cap * 2 : 16;
    *at = xrealloc(*at, (size_t)ncap * elem);
    *cap = ncap;
}

_Noreturn void ir_fatal_(const char *file, int line, const char *what) {
    fprintf(stderr, "%s:%d: internal error: assertion failed: %s\n", file, line, what);
    abort();
}
