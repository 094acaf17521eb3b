// gemm_cache.c — the timed cuBLASLt algorithms on disk (gemm_cache.h).
#include "gemm_cache.h"
#include "../fileio.h"
#include "../xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GEMM_CACHE_MAGIC "ftc-gemm-cache 1"

static int hex_digit(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

// n hex digits at s into *v (most significant first); false unless all n are digits.
static bool hex_u64(const char *s, int n, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < n; i++) {
        int d = hex_digit(s[i]);
        if (d < 0)
            return false;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return true;
}

static GemmCacheEntry *find(const GemmCache *c, uint64_t key) {
    for (int i = 0; i < c->n; i++)
        if (c->at[i].key == key)
            return &c->at[i];
    return NULL;
}

static void put(GemmCache *c, uint64_t key, const LtAlgo *algo, float us) {
    GemmCacheEntry *e = find(c, key);
    if (!e) {
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 32;
            GemmCacheEntry *at = realloc(c->at, (size_t)cap * sizeof *at);
            if (!at)
                return;   // (not cached: the product is timed again next time)
            c->at = at, c->cap = cap;
        }
        e = &c->at[c->n++];
    }
    e->key = key, e->algo = *algo, e->us = us;
}

// "KEY ALGO US": 16 hex digits, a space, 128 hex digits, a space, a finite time >= 0.
static bool parse_line(const char *s, size_t len, GemmCacheEntry *e) {
    if (len < 16 + 1 + 128 + 2 || s[16] != ' ' || s[16 + 1 + 128] != ' ' || !hex_u64(s, 16, &e->key))
        return false;
    for (int w = 0; w < 8; w++)
        if (!hex_u64(s + 17 + 16 * w, 16, &e->algo.data[w]))
            return false;
    char num[32];
    size_t k = len - (16 + 1 + 128 + 1);
    if (k >= sizeof num)
        return false;
    memcpy(num, s + 16 + 1 + 128 + 1, k);
    num[k] = '\0';
    char *end;
    errno = 0;
    double us = strtod(num, &end);
    if (end == num || *end || errno || !(us >= 0 && us < 1e12))
        return false;
    e->us = (float)us;
    return true;
}

// The entries of the file at path, over c's (those already in c are kept: they are newer).
static void read_into(GemmCache *c, const char *path, bool keep_ours) {
    size_t bytes;
    char *text = rt_read_whole(path, &bytes);
    if (!text)
        return;
    size_t magic = strlen(GEMM_CACHE_MAGIC);
    if (bytes > magic && !memcmp(text, GEMM_CACHE_MAGIC, magic) && text[magic] == '\n') {
        for (char *s = text + magic + 1; s < text + bytes;) {
            char *nl = memchr(s, '\n', (size_t)(text + bytes - s));
            size_t len = nl ? (size_t)(nl - s) : (size_t)(text + bytes - s);
            GemmCacheEntry e;
            if (parse_line(s, len, &e) && !(keep_ours && find(c, e.key)))
                put(c, e.key, &e.algo, e.us);
            s += len + 1;
        }
    }
    free(text);
}

void gemm_cache_open(GemmCache *c, const char *dir, const char *device, int cc_major, int cc_minor,
                     size_t lt_version) {
    memset(c, 0, sizeof *c);
    char d[4096];
    if (dir ? snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d : rt_cache_path("gemm", d, sizeof d) != 0)
        return;
    uint64_t h = rt_fnv1a64(RT_FNV_BASIS, device, strlen(device) + 1);
    int cc[2] = {cc_major, cc_minor};
    uint64_t v = lt_version;
    h = rt_fnv1a64(h, cc, sizeof cc);
    h = rt_fnv1a64(h, &v, sizeof v);
    if (snprintf(c->path, sizeof c->path, "%s/%016llx.txt", d, (unsigned long long)h) >= (int)sizeof c->path) {
        c->path[0] = '\0';
        return;
    }
    read_into(c, c->path, false);
}

bool gemm_cache_get(const GemmCache *c, uint64_t key, LtAlgo *algo, float *us) {
    const GemmCacheEntry *e = find(c, key);
    if (!e)
        return false;
    *algo = e->algo;
    if (us)
        *us = e->us;
    return true;
}

void gemm_cache_put(GemmCache *c, uint64_t key, const LtAlgo *algo, float us) {
    put(c, key, algo, us);
    c->dirty++;
}

int gemm_cache_save(GemmCache *c, char *err, size_t errlen) {
    if (!c->dirty)
        return 0;
    if (!c->path[0])
        return rt_fail(err, errlen, "no cache directory ($FTC_CACHE_DIR, $XDG_CACHE_HOME and $HOME are unset)");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", c->path);
    *strrchr(dir, '/') = '\0';
    if (rt_mkdir_p(dir) != 0)
        return rt_fail(err, errlen, "%s: cannot create it: %s", dir, strerror(errno));
    read_into(c, c->path, true);   // what another process saved meanwhile, ours kept
    char tmp[4400];
    int fd = rt_tmp_create(c->path, tmp, sizeof tmp);
    if (fd < 0)
        return rt_fail(err, errlen, "%s: cannot write it: %s", c->path, strerror(errno));
    size_t cap = 32 + (size_t)c->n * (16 + 1 + 128 + 1 + 32);
    char *text = xmalloc(cap);
    size_t n = 0;
    if (text) {
        n += (size_t)snprintf(text, cap, "%s\n", GEMM_CACHE_MAGIC);
        for (int i = 0; i < c->n; i++) {
            const GemmCacheEntry *e = &c->at[i];
            n += (size_t)snprintf(text + n, cap - n, "%016llx ", (unsigned long long)e->key);
            for (int w = 0; w < 8; w++)
                n += (size_t)snprintf(text + n, cap - n, "%016llx", (unsigned long long)e->algo.data[w]);
            n += (size_t)snprintf(text + n, cap - n, " %.3f\n", (double)e->us);
        }
    }
    bool oom = !text, ok = !oom && rt_write_full(fd, text, n) == 0;
    int saved = errno;
    free(text);
    if (close(fd) != 0 && ok)
        ok = false, saved = errno;
    if (ok && rename(tmp, c->path) != 0)
        ok = false, saved = errno;
    if (!ok) {
        unlink(tmp);
        return rt_fail(err, errlen, "%s: cannot write it: %s", c->path, oom ? "out of memory" : strerror(saved));
    }
    c->dirty = 0;
    return 0;
}

void gemm_cache_free(GemmCache *c) {
    free(c->at);
    memset(c, 0, sizeof *c);
}
