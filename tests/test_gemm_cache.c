// test_gemm_cache.c — the cache of timed cuBLASLt algorithms (runtime/cuda/gemm_cache.c):
// entries round-trip bit for bit, a line that does not read as one is ignored (and a file
// of another format wholly), saves from two processes merge with the newer entry winning,
// and a cache that cannot be written says why.
#include "../runtime/cuda/gemm_cache.h"
#include "../runtime/fileio.h"
#include "check.h"

#include <stdlib.h>
#include <unistd.h>

static char dir[256];

static LtAlgo algo_of(uint64_t seed) {
    LtAlgo a;
    for (int w = 0; w < 8; w++)
        a.data[w] = (seed + (uint64_t)w) * 0x9e3779b97f4a7c15ull;
    return a;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_round_trip(void) {
    GemmCache c;
    gemm_cache_open(&c, dir, "GPU A", 9, 0, 130100);
    CHECK(c.path[0] && c.n == 0);
    LtAlgo a = algo_of(1), b = algo_of(2), got;
    gemm_cache_put(&c, 0xffffffffffffffffull, &a, 12.5f);
    gemm_cache_put(&c, 7, &b, 0.25f);
    char err[512] = "";
    CHECKF(gemm_cache_save(&c, err, sizeof err) == 0, "%s", err);
    char path[4200];
    snprintf(path, sizeof path, "%s", c.path);
    gemm_cache_free(&c);
    gemm_cache_open(&c, dir, "GPU A", 9, 0, 130100);
    CHECK_STR(path, c.path);
    float us = 0;
    CHECK(gemm_cache_get(&c, 0xffffffffffffffffull, &got, &us) && !memcmp(&got, &a, sizeof a) && us == 12.5f);
    CHECK(gemm_cache_get(&c, 7, &got, &us) && !memcmp(&got, &b, sizeof b) && us == 0.25f);
    CHECK(!gemm_cache_get(&c, 8, &got, NULL));
    gemm_cache_free(&c);
    // another GPU, capability or library version: another file
    static const struct { const char *name; int major, minor; size_t v; } other[] = {
        {"GPU B", 9, 0, 130100}, {"GPU A", 8, 0, 130100}, {"GPU A", 9, 0, 130200}};
    for (int k = 0; k < 3; k++) {
        gemm_cache_open(&c, dir, other[k].name, other[k].major, other[k].minor, other[k].v);
        CHECK(strcmp(c.path, path) != 0 && c.n == 0);
        gemm_cache_free(&c);
    }
}

static void test_garbage_ignored(void) {
    GemmCache c;
    gemm_cache_open(&c, dir, "GPU G", 8, 0, 1);
    char path[4200], good[400], line[400];
    snprintf(path, sizeof path, "%s", c.path);
    gemm_cache_free(&c);
    char algo[129];
    for (int i = 0; i < 128; i++)
        algo[i] = "0123456789abcdef"[i % 16];
    algo[128] = '\0';
    snprintf(good, sizeof good, "00000000000000aa %s 3.500\n", algo);
    char text[8192];
    int n = snprintf(text, sizeof text, "ftc-gemm-cache 1\n%s", good);
    static const char *const bad[] = {
        "00000000000000AB %s 1.0\n",     // upper-case digits
        "0000000000000ab %s 1.0\n",      // a short key
        "00000000000000ac %s -1.0\n",    // a negative time
        "00000000000000ad %s nan\n",     // not a number
        "00000000000000ae %s 1e300\n",   // too large
        "00000000000000af %s 1.0x\n",    // trailing junk
        "00000000000000b0 %s\n",         // no time
        "00000000000000b1  %s 1.0\n",    // two spaces
        "zz\n", "\n", "%s\n",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(line, sizeof line, bad[k], algo);
        n += snprintf(text + n, sizeof text - (size_t)n, "%s", line);
    }
    snprintf(line, sizeof line, "00000000000000b2 %.100s 1.0", algo);   // a short algorithm, no newline
    n += snprintf(text + n, sizeof text - (size_t)n, "%s", line);
    write_file(path, text);
    gemm_cache_open(&c, dir, "GPU G", 8, 0, 1);
    LtAlgo got;
    float us;
    CHECKF(c.n == 1 && gemm_cache_get(&c, 0xaa, &got, &us) && us == 3.5f && got.data[0] == 0x0123456789abcdefull,
           "%d entries", c.n);
    gemm_cache_free(&c);
    // another format's file: nothing read from it; a binary one likewise
    snprintf(text, sizeof text, "ftc-gemm-cache 2\n%s", good);
    write_file(path, text);
    gemm_cache_open(&c, dir, "GPU G", 8, 0, 1);
    CHECK(c.n == 0);
    gemm_cache_free(&c);
    FILE *f = fopen(path, "wb");
    if (f) {
        for (int i = 0; i < 4096; i++)
            fputc((i * 131) & 255, f);
        fclose(f);
    }
    gemm_cache_open(&c, dir, "GPU G", 8, 0, 1);
    CHECK(c.n == 0);
    gemm_cache_free(&c);
}

// Two runs of one GPU save in turn: the file holds both's entries, a product both timed
// the later save's.
static void test_saves_merge(void) {
    GemmCache a, b;
    gemm_cache_open(&a, dir, "GPU M", 8, 6, 1);
    gemm_cache_open(&b, dir, "GPU M", 8, 6, 1);
    LtAlgo x = algo_of(10), y = algo_of(20), z = algo_of(30), got;
    gemm_cache_put(&a, 1, &x, 1);
    gemm_cache_put(&a, 2, &x, 1);
    gemm_cache_put(&b, 2, &y, 2);
    gemm_cache_put(&b, 3, &z, 3);
    char err[512] = "";
    CHECKF(gemm_cache_save(&a, err, sizeof err) == 0 && gemm_cache_save(&b, err, sizeof err) == 0, "%s", err);
    gemm_cache_free(&a);
    gemm_cache_free(&b);
    gemm_cache_open(&a, dir, "GPU M", 8, 6, 1);
    CHECK(a.n == 3);
    CHECK(gemm_cache_get(&a, 1, &got, NULL) && !memcmp(&got, &x, sizeof x));
    CHECK(gemm_cache_get(&a, 2, &got, NULL) && !memcmp(&got, &y, sizeof y));
    CHECK(gemm_cache_get(&a, 3, &got, NULL) && !memcmp(&got, &z, sizeof z));
    gemm_cache_free(&a);
}

static void test_unwritable_said(void) {
    GemmCache c;
    char err[512] = "";
    gemm_cache_open(&c, "/dev/null/gemm", "GPU U", 8, 0, 1);   // under a file: no directory there
    LtAlgo x = algo_of(1);
    gemm_cache_put(&c, 1, &x, 1);
    CHECKF(gemm_cache_save(&c, err, sizeof err) == -1 && strstr(err, "/dev/null/gemm: cannot create it: "), "%s", err);
    gemm_cache_free(&c);
    // no cache directory at all
    const char *keys[] = {"FTC_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    char *was[3];
    for (int k = 0; k < 3; k++) {
        const char *v = getenv(keys[k]);
        was[k] = v ? strdup(v) : NULL;
        unsetenv(keys[k]);
    }
    gemm_cache_open(&c, NULL, "GPU U", 8, 0, 1);
    gemm_cache_put(&c, 1, &x, 1);
    CHECKF(!c.path[0] && gemm_cache_save(&c, err, sizeof err) == -1 && strstr(err, "no cache directory"), "%s", err);
    gemm_cache_free(&c);
    for (int k = 0; k < 3; k++) {
        if (was[k])
            setenv(keys[k], was[k], 1);
        free(was[k]);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ftc-gemm-cache-%d", (int)getpid());
    RUN(test_round_trip);
    RUN(test_garbage_ignored);
    RUN(test_saves_merge);
    RUN(test_unwritable_said);
    rt_remove_dir(dir, NULL);
    return CHECK_DONE();
}
