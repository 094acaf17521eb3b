// xalloc.h — allocation that cannot fail quietly: on failure ftc says how much it could
// not have and exits 1, as it does for any other error it cannot recover from. Every room
// allocates through these (ops.h includes this header, so every room sees them); an
// allocation whose failure a caller handles itself (a plan's arena, a file's contents:
// sizes an input chose) checks malloc's result instead.
#ifndef FTC_XALLOC_H
#define FTC_XALLOC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn static inline void xalloc_failed(size_t n) {
    fprintf(stderr, "ftc: out of memory (%zu bytes)\n", n);
    exit(EXIT_FAILURE);
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p)
        xalloc_failed(n);
    return p;
}

static inline void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        xalloc_failed(n * size);
    return p;
}

static inline void *xrealloc(void *old, size_t n) {
    void *p = realloc(old, n ? n : 1);
    if (!p)
        xalloc_failed(n);
    return p;
}

static inline char *xstrdup(const char *s) {
    char *p = strdup(s);
    if (!p)
        xalloc_failed(strlen(s) + 1);
    return p;
}

static inline char *xstrndup(const char *s, size_t n) {
    char *p = strndup(s, n);
    if (!p)
        xalloc_failed(n + 1);
    return p;
}

#endif
