// test_nf4.c: tests of runtime/cpu/nf4.c against real bitsandbytes vectors.
//
//   test_nf4 tests/fixtures/nf4
//
// One line per case, "ok   name" or "FAIL name" after its failed checks (tests/check.h; informative
// lines start with "#"), then "N passed, M failed"; the exit status is non-zero when any case fails
// or the fixture cannot be read. Covers: the codebook and dynamic-map tables (and recomputing the
// map); for every fixture tensor, bit-exact packed codes, absmax, dequantised weights, double-quant
// codes, scales, mean, rebuilt absmax and weights dequantised through double quant; torch's
// multi-threaded mean; storage byte counts (bits per weight printed); round-trip error bounds and
// idempotence on generated data; and self-tests showing the checks can fail (a one-ulp change, a
// different tie rule, a plain nearest-code rule for the 8-bit step, a plain mean).
#include "nf4.h"

#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Test helpers (the checks and the counting are tests/check.h's)

// Allocations live until the end of the running case.
enum { MAX_ALLOCS = 256 };
static void *allocs[MAX_ALLOCS];
static int n_allocs;

static void *alloc_zeroed(size_t bytes) {
    if (n_allocs == MAX_ALLOCS) {
        fprintf(stderr, "test_nf4: too many allocations in one case\n");
        exit(2);
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "test_nf4: out of memory\n");
        exit(2);
    }
    return allocs[n_allocs++] = p;
}

static float *fnew(size_t n) { return alloc_zeroed(n * sizeof(float)); }
static uint8_t *bnew(size_t n) { return alloc_zeroed(n); }

static uint64_t rng_state;

// splitmix64; each case restarts it from the same seed, so failures reproduce.
static uint64_t rand_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rand_unit(void) { return (double)(rand_u64() >> 11) * 0x1p-53; } // [0, 1)

static float rand_normal(void) { // Box-Muller
    double u = rand_unit(), v = rand_unit();
    return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v));
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static const char *current_arg;

// Runs fn(arg) as the case called "name arg" (or name without arg; RUN_NAMED), with the
// generator reseeded before it and its allocations freed after it.
static void run(const char *name, void (*fn)(const char *), const char *arg) {
    char full[160];
    if (arg) snprintf(full, sizeof full, "%s %s", name, arg);
    else snprintf(full, sizeof full, "%s", name);
    rng_state = 20240611;
    current_arg = arg;
    RUN_NAMED(full, fn(arg));
    while (n_allocs > 0) free(allocs[--n_allocs]);
}

// Number of positions where the float arrays differ bitwise; *first gets the first one.
static size_t f32_mismatches(const float *a, const float *b, size_t n, size_t *first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (f32_bits(a[i]) != f32_bits(b[i]) && bad++ == 0 && first) *first = i;
    return bad;
}

static size_t u8_mismatches(const uint8_t *a, const uint8_t *b, size_t n, size_t *first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i] && bad++ == 0 && first) *first = i;
    return bad;
}

#define CHECK_F32_EQ(got, want, n)                                                             \
    do {                                                                                       \
        size_t first_ = 0, bad_ = f32_mismatches((got), (want), (n), &first_);                 \
        CHECKF(bad_ == 0, "%s: %zu of %zu differ from %s, first [%zu] %a vs %a", #got, bad_,   \
               (size_t)(n), #want, first_, (double)(got)[first_], (double)(want)[first_]);     \
    } while (0)

#define CHECK_U8_EQ(got, want, n)                                                              \
    do {                                                                                       \
        size_t first_ = 0, bad_ = u8_mismatches((got), (want), (n), &first_);                  \
        CHECKF(bad_ == 0, "%s: %zu of %zu differ from %s, first [%zu] 0x%02x vs 0x%02x", #got, \
               bad_, (size_t)(n), #want, first_, (got)[first_], (want)[first_]);               \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Fixture: index.txt ("<name> <f32|u8|i32> <count> <offset>") over nf4.bin (little-endian)

enum { MAX_ARRAYS = 256 };
static struct {
    char name[96];
    char dtype[8];
    size_t count, offset;
} fx[MAX_ARRAYS];
static size_t n_fx;
static unsigned char *fx_blob;
static size_t fx_size;

static int load_fixture(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/nf4.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "test_nf4: cannot open %s\n", path), 0;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    fx_blob = malloc(sz > 0 ? (size_t)sz : 1);
    if (!fx_blob || sz < 0 || fread(fx_blob, 1, (size_t)sz, f) != (size_t)sz)
        return fclose(f), fprintf(stderr, "test_nf4: cannot read %s\n", path), 0;
    fclose(f);
    fx_size = (size_t)sz;
    snprintf(path, sizeof path, "%s/index.txt", dir);
    f = fopen(path, "r");
    if (!f) return fprintf(stderr, "test_nf4: cannot open %s\n", path), 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (n_fx == MAX_ARRAYS) return fclose(f), fprintf(stderr, "test_nf4: index too long\n"), 0;
        unsigned long long count, offset;
        if (sscanf(line, "%95s %7s %llu %llu", fx[n_fx].name, fx[n_fx].dtype, &count, &offset) != 4)
            return fclose(f), fprintf(stderr, "test_nf4: bad index line: %s", line), 0;
        size_t esize = strcmp(fx[n_fx].dtype, "u8") == 0 ? 1 : 4;
        if (offset > fx_size || count > (fx_size - offset) / esize || offset % esize)
            return fclose(f),
                   fprintf(stderr, "test_nf4: array %s outside nf4.bin\n", fx[n_fx].name), 0;
        fx[n_fx].count = (size_t)count;
        fx[n_fx].offset = (size_t)offset;
        n_fx++;
    }
    fclose(f);
    return 1;
}

// The array "<case>.<array>" as a fresh little-endian-decoded copy (owned by the case), or NULL
// with a failed check when it is missing or has another dtype.
static void *fx_get(const char *cs, const char *arr, const char *dtype, size_t *count) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, arr);
    for (size_t i = 0; i < n_fx; i++) {
        if (strcmp(fx[i].name, name) != 0) continue;
        if (strcmp(fx[i].dtype, dtype) != 0) {
            check_fail_at(__FILE__, __LINE__, "fixture %s is %s, want %s", name, fx[i].dtype,
                          dtype);
            return NULL;
        }
        *count = fx[i].count;
        const unsigned char *p = fx_blob + fx[i].offset;
        if (strcmp(dtype, "u8") == 0) {
            uint8_t *out = bnew(fx[i].count);
            memcpy(out, p, fx[i].count);
            return out;
        }
        uint32_t *out = alloc_zeroed(fx[i].count * 4);
        for (size_t k = 0; k < fx[i].count; k++)
            out[k] = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 |
                     (uint32_t)p[4 * k + 2] << 16 | (uint32_t)p[4 * k + 3] << 24;
        return out;
    }
    check_fail_at(__FILE__, __LINE__, "fixture has no array %s", name);
    return NULL;
}

static float *fx_f32(const char *cs, const char *arr, size_t *count) {
    return fx_get(cs, arr, "f32", count);
}
static uint8_t *fx_u8(const char *cs, const char *arr, size_t *count) {
    return fx_get(cs, arr, "u8", count);
}

// ---------------------------------------------------------------------------------------------
// Tables

static void test_tables(const char *arg) {
    (void)arg;
    size_t n16 = 0, n256 = 0;
    float *code = fx_f32("tables", "nf4_code", &n16);
    float *dyn = fx_f32("tables", "dynamic_map", &n256);
    if (!code || !dyn) return;
    CHECK(n16 == 16 && n256 == 256);
    CHECK_F32_EQ(cpu_nf4_code, code, 16);
    CHECK_F32_EQ(cpu_nf4_dynamic_code, dyn, 256);
    float *computed = fnew(256);
    cpu_nf4_dynamic_map(computed);
    CHECK_F32_EQ(computed, cpu_nf4_dynamic_code, 256);
    CHECK(cpu_nf4_code[7] == 0.0f && cpu_nf4_code[0] == -1.0f && cpu_nf4_code[15] == 1.0f);
    CHECK(cpu_nf4_dynamic_code[127] == 0.0f && cpu_nf4_dynamic_code[255] == 1.0f);
    for (int i = 0; i < 255; i++) CHECK(cpu_nf4_dynamic_code[i] < cpu_nf4_dynamic_code[i + 1]);
}

// ---------------------------------------------------------------------------------------------
// Fixture tensors: 4-bit codes, absmax, dequantisation, double quantisation

static void test_tensor(const char *cs) {
    size_t n = 0, np = 0, nb = 0, nd = 0, nc = 0, ns = 0, nm = 0, nda = 0, ndw = 0;
    float *w = fx_f32(cs, "w", &n);
    uint8_t *packed_want = fx_u8(cs, "packed", &np);
    float *absmax_want = fx_f32(cs, "absmax", &nb);
    float *dq_want = fx_f32(cs, "dq", &nd);
    uint8_t *codes_want = fx_u8(cs, "dq_codes", &nc);
    float *scales_want = fx_f32(cs, "dq_scales", &ns);
    float *mean_want = fx_f32(cs, "dq_mean", &nm);
    float *dq_absmax_want = fx_f32(cs, "dq_absmax", &nda);
    float *dq_w_want = fx_f32(cs, "dq_w", &ndw);
    if (CASE_FAILED()) return;
    CHECK(np == cpu_nf4_packed_bytes(n) && nb == cpu_nf4_blocks(n) && nd == n && nc == nb);
    CHECK(ns == cpu_nf4_absmax_scales(nb) && nm == 1 && nda == nb && ndw == n);
    if (CASE_FAILED()) return;

    uint8_t *packed = bnew(np);
    float *absmax = fnew(nb), *dq = fnew(n);
    cpu_nf4_quantize(packed, absmax, w, n);
    CHECK_U8_EQ(packed, packed_want, np);
    CHECK_F32_EQ(absmax, absmax_want, nb);
    cpu_nf4_dequantize(dq, packed_want, absmax_want, n);
    CHECK_F32_EQ(dq, dq_want, n);

    uint8_t *codes = bnew(nb);
    float *scales = fnew(ns), mean = 0.0f, *dq_absmax = fnew(nb), *dq_w = fnew(n);
    cpu_nf4_quantize_absmax(codes, scales, &mean, absmax, nb);
    CHECK_U8_EQ(codes, codes_want, nb);
    CHECK_F32_EQ(scales, scales_want, ns);
    CHECK_F32_EQ(&mean, mean_want, 1);
    cpu_nf4_dequantize_absmax(dq_absmax, codes_want, scales_want, mean_want[0], nb);
    CHECK_F32_EQ(dq_absmax, dq_absmax_want, nb);
    cpu_nf4_dequantize(dq_w, packed_want, dq_absmax, n);
    CHECK_F32_EQ(dq_w, dq_w_want, n);
}

// Double quantisation alone, of a stored absmax vector.
static void test_absmax(const char *cs) {
    size_t nb = 0, nc = 0, ns = 0, nm = 0, nda = 0;
    float *absmax = fx_f32(cs, "absmax", &nb);
    uint8_t *codes_want = fx_u8(cs, "dq_codes", &nc);
    float *scales_want = fx_f32(cs, "dq_scales", &ns);
    float *mean_want = fx_f32(cs, "dq_mean", &nm);
    float *dq_absmax_want = fx_f32(cs, "dq_absmax", &nda);
    if (CASE_FAILED()) return;
    CHECK(nc == nb && ns == cpu_nf4_absmax_scales(nb) && nm == 1 && nda == nb);
    if (CASE_FAILED()) return;
    uint8_t *codes = bnew(nb);
    float *scales = fnew(ns), mean = 0.0f, *dq_absmax = fnew(nb);
    cpu_nf4_quantize_absmax(codes, scales, &mean, absmax, nb);
    CHECK_F32_EQ(&mean, mean_want, 1);
    CHECK_F32_EQ(scales, scales_want, ns);
    CHECK_U8_EQ(codes, codes_want, nb);
    cpu_nf4_dequantize_absmax(dq_absmax, codes, scales, mean, nb);
    CHECK_F32_EQ(dq_absmax, dq_absmax_want, nb);
}

// The generated vector make_nf4.py's hash_vector(n) describes.
static void hash_vector(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(((uint32_t)((uint64_t)i * 2654435761u)) >> 8) * 0x1p-24f;
}

static void test_mean_mt(const char *arg) {
    (void)arg;
    static const size_t sizes[] = {1000, 40000, 100003, 17000003};
    size_t nt = 0;
    const int32_t *threads = fx_get("mean_mt", "threads", "i32", &nt);
    if (!threads) return;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        char arr[32];
        snprintf(arr, sizeof arr, "n%zu", sizes[s]);
        size_t nw = 0;
        float *want = fx_f32("mean_mt", arr, &nw);
        if (!want || nw != nt) {
            CHECK(want && nw == nt);
            return;
        }
        float *x = fnew(sizes[s]);
        hash_vector(x, sizes[s]);
        for (size_t t = 0; t < nt; t++) {
            float got = cpu_nf4_mean(x, sizes[s], threads[t]);
            CHECKF(f32_bits(got) == f32_bits(want[t]), "mean n=%zu threads=%d: %a, torch %a",
                   sizes[s], (int)threads[t], (double)got, (double)want[t]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sizes

static void test_storage_bytes(const char *arg) {
    (void)arg;
    CHECK(cpu_nf4_packed_bytes(0) == 0 && cpu_nf4_packed_bytes(1) == 1);
    CHECK(cpu_nf4_packed_bytes(777) == 389);
    CHECK(cpu_nf4_blocks(0) == 0 && cpu_nf4_blocks(64) == 1 && cpu_nf4_blocks(65) == 2);
    CHECK(cpu_nf4_absmax_scales(256) == 1 && cpu_nf4_absmax_scales(257) == 2);
    // n = 1000: 500 packed + 16 blocks
    CHECK(cpu_nf4_storage_bytes(1000, 0) == 500 + 4 * 16);
    CHECK(cpu_nf4_storage_bytes(1000, 1) == 500 + 16 + 4 * 1 + 4);
    // n = 777: 389 packed + 13 blocks
    CHECK(cpu_nf4_storage_bytes(777, 0) == 389 + 52);
    CHECK(cpu_nf4_storage_bytes(777, 1) == 389 + 13 + 4 + 4);
    static const size_t big[][2] = {{4096, 4096}, {4096, 11008}, {8192, 28672}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = big[i][0] * big[i][1];
        size_t plain = cpu_nf4_storage_bytes(n, 0), dq = cpu_nf4_storage_bytes(n, 1);
        double bp = 8.0 * (double)plain / (double)n, bd = 8.0 * (double)dq / (double)n;
        printf("#    %zux%zu = %zu weights: %zu bytes = %.4f bits/weight; double quant %zu bytes = "
               "%.4f bits/weight\n", big[i][0], big[i][1], n, plain, bp, dq, bd);
        CHECK(plain == n / 2 + 4 * (n / 64));
        CHECK(dq == n / 2 + n / 64 + 4 * ((n / 64 + 255) / 256) + 4);
        CHECK(bp == 4.5);
        CHECK(fabs(bd - 4.127) < 0.0005);
    }
}

// ---------------------------------------------------------------------------------------------
// Error bounds and idempotence on generated data

// Largest gap between consecutive entries of an ascending table.
static float max_gap(const float *t, int n) {
    float g = 0.0f;
    for (int i = 0; i + 1 < n; i++)
        if (t[i + 1] - t[i] > g) g = t[i + 1] - t[i];
    return g;
}

static void test_round_trip(const char *arg) {
    (void)arg;
    static const size_t sizes[] = {1, 63, 64, 1001, 64 * 300 + 17};
    const double half4 = 0.5 * max_gap(cpu_nf4_code, 16);
    const double half8 = 0.5 * max_gap(cpu_nf4_dynamic_code, 256) + 1.0 / 65535.0;
    double worst4 = 0.0, worst8 = 0.0, rel_rms = 0.0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s], nb = cpu_nf4_blocks(n), ns = cpu_nf4_absmax_scales(nb);
        float *w = fnew(n), *absmax = fnew(nb), *dq = fnew(n), *absmax2 = fnew(nb);
        float *scales = fnew(ns), *dq_absmax = fnew(nb), mean;
        uint8_t *packed = bnew(cpu_nf4_packed_bytes(n)), *packed2 = bnew(cpu_nf4_packed_bytes(n));
        uint8_t *codes = bnew(nb);
        for (size_t i = 0; i < n; i++) {
            float scale = (float)pow(10.0, (double)((i / 64) % 7) - 4.0); // blocks of 1e-4 .. 1e2
            w[i] = rand_normal() * scale * (rand_unit() < 0.01 ? 20.0f : 1.0f);
        }
        cpu_nf4_quantize(packed, absmax, w, n);
        cpu_nf4_dequantize(dq, packed, absmax, n);
        double se = 0.0, sw = 0.0;
        for (size_t i = 0; i < n; i++) {
            double err = fabs((double)w[i] - (double)dq[i]), a = absmax[i / 64];
            double bound = a * half4 * (1.0 + 1e-6);
            CHECKF(err <= bound, "n=%zu w[%zu]=%g dq=%g err %g > %g", n, i, (double)w[i],
                   (double)dq[i], err, bound);
            if (a > 0 && err / a > worst4) worst4 = err / a;
            se += err * err / (a * a);
            sw += (double)w[i] * w[i] / (a * a);
        }
        if (n == sizes[4]) rel_rms = sqrt(se / sw);
        // Quantising the dequantised weights gives back the same codes and absmax.
        cpu_nf4_quantize(packed2, absmax2, dq, n);
        CHECK_U8_EQ(packed2, packed, cpu_nf4_packed_bytes(n));
        CHECK_F32_EQ(absmax2, absmax, nb);
        // Double quantisation error, per absmax: at most half the largest map gap plus half a LUT
        // bin.
        cpu_nf4_quantize_absmax(codes, scales, &mean, absmax, nb);
        cpu_nf4_dequantize_absmax(dq_absmax, codes, scales, mean, nb);
        for (size_t b = 0; b < nb; b++) {
            double err = fabs((double)absmax[b] - (double)dq_absmax[b]), sc = scales[b / 256];
            double bound =
                sc * half8 * (1.0 + 1e-6) + 1e-6 * fabs((double)absmax[b]) + 1e-6 * fabs(mean);
            CHECKF(err <= bound, "n=%zu absmax[%zu]=%g rebuilt %g err %g > %g", n, b,
                   (double)absmax[b], (double)dq_absmax[b], err, bound);
            if (sc > 0 && err / sc > worst8) worst8 = err / sc;
        }
    }
    printf("#    4-bit: worst |w - dq| / absmax = %.4f (bound %.4f); per-block-normalised relative "
           "rms error %.4f; double quant: worst |absmax - rebuilt| / scale = %.5f (bound %.5f)\n",
           worst4, half4, rel_rms, worst8, half8);
    CHECK(rel_rms < 0.2);
}

// ---------------------------------------------------------------------------------------------
// The checks can fail

// One ulp in one dequantised value is caught; so is one changed nibble.
static void test_detects_one_ulp(const char *arg) {
    (void)arg;
    size_t n = 0, np = 0;
    float *dq = fx_f32("normal_outliers", "dq", &n);
    uint8_t *packed = fx_u8("normal_outliers", "packed", &np);
    if (!dq || !packed) return;
    float *copy = fnew(n);
    memcpy(copy, dq, n * sizeof(float));
    CHECK(f32_mismatches(copy, dq, n, NULL) == 0);
    copy[n / 3] = bits_f32(f32_bits(copy[n / 3]) + 1);
    CHECK(f32_mismatches(copy, dq, n, NULL) == 1);
    uint8_t *pcopy = bnew(np);
    memcpy(pcopy, packed, np);
    pcopy[np / 2] ^= 0x10;
    CHECK(u8_mismatches(pcopy, packed, np, NULL) == 1);
}

// Rounding a value exactly on a threshold up instead of down (a plausible mistake) disagrees
// with the fixture on the 15 exact ties, and only there: the fixture pins the tie rule.
static void test_detects_tie_rule(const char *arg) {
    (void)arg;
    size_t n = 0, np = 0;
    float *w = fx_f32("ties", "w", &n);
    uint8_t *packed_want = fx_u8("ties", "packed", &np);
    if (!w || !packed_want) return;
    float mid[15];
    for (int i = 0; i < 15; i++) mid[i] = (cpu_nf4_code[i] + cpu_nf4_code[i + 1]) / 2.0f;
    size_t ties = 0, wrong = 0;
    for (size_t i = 0; i < n; i++) { // the block's absmax is exactly 1, so w is the scaled value
        unsigned q = 0;
        while (q < 15 && mid[q] <= w[i]) q++; // ties up
        unsigned want = i % 2 == 0 ? packed_want[i / 2] >> 4 : packed_want[i / 2] & 0xfu;
        for (int k = 0; k < 15; k++) ties += w[i] == mid[k];
        wrong += q != want;
    }
    printf("#    ties-up rule: %zu of %zu codes differ from bitsandbytes (%zu exact ties)\n", wrong,
           n, ties);
    CHECK(ties == 15 && wrong == 15);
}

// Two shortcuts that would be close but not bit-exact: the nearest dynamic-map code of the value
// itself (no 65536-bin lookup table) and a mean accumulated in double. Both are printed; the
// lookup-table rule must make a difference somewhere in the fixture.
static void test_detects_shortcuts(const char *arg) {
    (void)arg;
    size_t nb = 0, nc = 0, nm = 0;
    float *absmax = fx_f32("big_absmax", "absmax", &nb);
    uint8_t *codes_want = fx_u8("big_absmax", "dq_codes", &nc);
    float *mean_want = fx_f32("big_absmax", "dq_mean", &nm);
    if (!absmax || !codes_want || !mean_want) return;
    float mean = mean_want[0];
    size_t ns = cpu_nf4_absmax_scales(nb), wrong = 0;
    for (size_t b = 0; b < ns; b++) {
        size_t lo = b * 256, len = nb - lo < 256 ? nb - lo : 256;
        float am = 0.0f;
        for (size_t i = 0; i < len; i++)
            if (fabsf(absmax[lo + i] - mean) > am) am = fabsf(absmax[lo + i] - mean);
        float inv = 1.0f / am;
        for (size_t i = 0; i < len; i++) {
            float v = (absmax[lo + i] - mean) * inv;
            unsigned best = 0;
            for (unsigned k = 1; k < 256; k++)
                if (fabsf(cpu_nf4_dynamic_code[k] - v) < fabsf(cpu_nf4_dynamic_code[best] - v))
                    best = k;
            wrong += best != codes_want[lo + i];
        }
    }
    double s = 0.0;
    for (size_t i = 0; i < nb; i++) s += absmax[i];
    float plain_mean = (float)(s / (double)nb);
    printf("#    plain nearest-code rule: %zu of %zu absmax codes differ from bitsandbytes; "
           "double-precision mean %a vs torch %a\n", wrong, nb, (double)plain_mean, (double)mean);
    CHECK(wrong > 0);
}

// Full blocks multiply by the reciprocal of absmax, the trailing partial block divides, and the
// 8-bit step multiplies by 1/scale: swapping either rule changes codes in the "rounding" and
// "absmax_rounding" fixtures (made so that the two rules disagree there).
static void test_detects_mul_div(const char *arg) {
    (void)arg;
    size_t n = 0, np = 0, nb = 0, nb2 = 0, nc = 0, nm = 0;
    float *w = fx_f32("rounding", "w", &n);
    uint8_t *packed = fx_u8("rounding", "packed", &np);
    float *absmax = fx_f32("rounding", "absmax", &nb);
    float *am8 = fx_f32("absmax_rounding", "absmax", &nb2);
    uint8_t *codes = fx_u8("absmax_rounding", "dq_codes", &nc);
    float *mean = fx_f32("absmax_rounding", "dq_mean", &nm);
    if (CASE_FAILED()) return;
    float mid[15];
    for (int i = 0; i < 15; i++) mid[i] = (cpu_nf4_code[i] + cpu_nf4_code[i + 1]) / 2.0f;
    size_t swapped4[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        float a = absmax[i / 64];
        int full = i / 64 < n / 64;
        float s = full ? w[i] / a : w[i] * (1.0f / a); // the other block kind's rule
        s = s < -1.0f ? -1.0f : s > 1.0f ? 1.0f : s;
        unsigned q = 0;
        while (q < 15 && mid[q] < s) q++;
        unsigned want = i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0xfu;
        swapped4[!full] += q != want;
    }
    // 8-bit: the same lookup-table rule, but (absmax - mean) / scale instead of * (1/scale)
    float dmid[255];
    for (int i = 0; i < 255; i++)
        dmid[i] = 0.5f * (cpu_nf4_dynamic_code[i] + cpu_nf4_dynamic_code[i + 1]);
    size_t swapped8 = 0;
    for (size_t b = 0; b < cpu_nf4_absmax_scales(nb2); b++) {
        size_t lo = b * 256, len = nb2 - lo < 256 ? nb2 - lo : 256;
        float sc = 0.0f;
        for (size_t i = 0; i < len; i++)
            if (fabsf(am8[lo + i] - mean[0]) > sc) sc = fabsf(am8[lo + i] - mean[0]);
        for (size_t i = 0; i < len; i++) {
            float v = (am8[lo + i] - mean[0]) / sc;
            uint16_t k = (uint16_t)(int32_t)fmaf((v + 1.0f) * 0.5f, 65535.0f, 0.5f);
            float c = (2.0f * (float)k) / 65535.0f - 1.0f;
            unsigned q = 0;
            while (q < 255 && dmid[q] < c) q++;
            swapped8 += q != codes[lo + i];
        }
    }
    printf("#    swapped rules: %zu full-block and %zu partial-block NF4 codes, %zu absmax codes "
           "differ from bitsandbytes\n", swapped4[0], swapped4[1], swapped8);
    CHECK(swapped4[0] > 0 && swapped4[1] > 0 && swapped8 > 0);
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR   (tests/fixtures/nf4)\n", argv[0]);
        return 2;
    }
    if (!load_fixture(argv[1])) return 2;
    run("tables match bitsandbytes", test_tables, NULL);
    static const char *tensors[] = {"normal_outliers", "odd_length", "zeros", "codebook",
                                    "ties",            "rounding",   "tiny"};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
        run("bit-exact quantize/dequantize/double quant:", test_tensor, tensors[i]);
    run("bit-exact double quant:", test_absmax, "big_absmax");
    run("bit-exact double quant:", test_absmax, "absmax_rounding");
    run("bit-exact double quant:", test_absmax, "const_absmax");
    run("torch mean with 1..16 threads bit-exact", test_mean_mt, NULL);
    run("storage bytes", test_storage_bytes, NULL);
    run("round-trip error bounds and idempotence", test_round_trip, NULL);
    run("self-test: one ulp / one nibble is caught", test_detects_one_ulp, NULL);
    run("self-test: ties-up rule is caught", test_detects_tie_rule, NULL);
    run("self-test: shortcuts are caught", test_detects_shortcuts, NULL);
    run("self-test: multiply-vs-divide is caught", test_detects_mul_div, NULL);
    (void)current_arg;
    free(fx_blob);
    return CHECK_DONE();
}
