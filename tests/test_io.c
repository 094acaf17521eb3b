// test_io.c: tests of the runtime's file formats, runtime/safetensors.c and runtime/data.c.
//
// One line per case, "ok   name" or "FAIL name" after its failed checks (tests/check.h), then
// "N passed, M failed"; the exit status is non-zero when any case fails. Every input is built
// in a fresh mkdtemp directory by writing bytes directly, so nothing outside the repository is
// needed. Covers: safetensors round trips of every dtype (bit-exact values, header padding,
// alignment, no gaps), sharded checkpoints through model.safetensors.index.json, every
// malformed header and index with its message (file and tensor named), read and write errors
// including I/O failures; token files converted in all three modes, windows and their
// contents, paired files (preference pairs) and their malformed layouts, the feed of a plan
// that reads pairs (rows, order, counts, refusals), the shuffle's determinism and pinned
// values, every malformed token file and converter error.
//
// Build and run (one line):
//   gcc -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -ffp-contract=off -Iruntime
//       -Iruntime/cpu runtime/safetensors.c runtime/data.c runtime/fileio.c runtime/cpu/kernels.c
//       tests/test_io.c -ljansson -lopenblas -lm -o /tmp/test_io && /tmp/test_io
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700 // mkdtemp, nftw, truncate
#endif

#include "data.h"
#include "kernels.h"
#include "safetensors.h"
#include "runtime.h"
#include "session.h"

#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Test helpers (the checks and the counting are tests/check.h's)

static char tmp_root[64];     // the mkdtemp directory all cases write under
static int case_no;           // numbers each case's own subdirectory

// The call rc succeeded; otherwise its message is the detail.
#define CHECK_OK(rc, err) CHECKF((rc) == 0, "%s failed: %s", #rc, err)

// The call failed with one line that starts "file: ", names tensor (unless NULL) as
// "tensor 'name'" and contains fragment.
#define CHECK_ERR(rc, err, file, tensor, fragment)                                             \
    do {                                                                                       \
        char why_[1024];                                                                       \
        CHECKF(err_ok(why_, sizeof why_, #rc, (rc), (err), (file), (tensor), (fragment)),      \
               "%s", why_);                                                                    \
    } while (0)

// Whether rc and err are the failure CHECK_ERR wants; if not, says what is wrong in why.
static int err_ok(char *why, size_t cap, const char *call, int rc, const char *err,
                  const char *file, const char *tensor, const char *fragment) {
    char quoted[256];
    if (tensor)
        snprintf(quoted, sizeof quoted, "tensor '%s'", tensor);
    size_t n = strlen(file);
    if (rc != -1)
        snprintf(why, cap, "%s returned %d, want -1", call, rc);
    else if (strncmp(err, file, n) != 0 || strncmp(err + n, ": ", 2) != 0)
        snprintf(why, cap, "message does not start with \"%s: \": %s", file, err);
    else if (tensor && !strstr(err, quoted))
        snprintf(why, cap, "message does not name %s: %s", quoted, err);
    else if (!strstr(err, fragment))
        snprintf(why, cap, "message lacks \"%s\": %s", fragment, err);
    else if (strchr(err, '\n'))
        snprintf(why, cap, "message is not one line: %s", err);
    else
        return 1;
    return 0;
}

// Strings and buffers live until the end of the running case.
enum { MAX_ALLOCS = 256 };
static void *allocs[MAX_ALLOCS];
static int n_allocs;

static void *alloc_zeroed(size_t bytes) {
    if (n_allocs == MAX_ALLOCS) {
        fprintf(stderr, "test_io: too many allocations in one case\n");
        exit(2);
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "test_io: out of memory\n");
        exit(2);
    }
    return allocs[n_allocs++] = p;
}

// Formats a string that lives until the end of the case.
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *s = alloc_zeroed((size_t)n + 1);
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

static char case_dir[128]; // the running case's own empty directory

// Returns the path of name inside the running case's directory.
static char *tpath(const char *name) { return fmt("%s/%s", case_dir, name); }

// Runs fn as the case called name (RUN_NAMED) in a new directory of its own, and frees its
// allocations after it.
static void run(const char *name, void (*fn)(void)) {
    snprintf(case_dir, sizeof case_dir, "%s/%03d", tmp_root, case_no++);
    if (mkdir(case_dir, 0755) != 0) {
        fprintf(stderr, "test_io: cannot create %s: %s\n", case_dir, strerror(errno));
        exit(2);
    }
    RUN_NAMED(name, fn());
    while (n_allocs > 0)
        free(allocs[--n_allocs]);
}

// ---------------------------------------------------------------------------------------------
// File helpers

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "test_io: cannot write %s\n", path);
        exit(2);
    }
}

static void write_text(const char *path, const char *text) { write_file(path, text, strlen(text)); }

// Reads a whole file into a case-lifetime buffer; *n gets its size.
static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        check_fail_at(__FILE__, __LINE__, "cannot read %s", path);
        *n = 0;
        return alloc_zeroed(1);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = alloc_zeroed((size_t)size + 1);
    *n = fread(p, 1, (size_t)size, f);
    fclose(f);
    return p;
}

// A safetensors file by hand: an 8-byte length hlen, then header, then data_bytes zero bytes.
static void write_st_raw(const char *path, uint64_t hlen, const char *header, size_t data_bytes) {
    size_t h = strlen(header);
    unsigned char *buf = alloc_zeroed(8 + h + data_bytes);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, h);
    write_file(path, buf, 8 + h + data_bytes);
}

static void write_st_header(const char *path, const char *header, size_t data_bytes) {
    write_st_raw(path, strlen(header), header, data_bytes);
}

// Counts the entries of dir other than . and ..
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// Lowers the file size limit to `bytes` (writes past it fail with EFBIG instead of killing the
// process), or restores the saved limit when bytes is 0.
static void limit_file_size(rlim_t bytes) {
    static struct rlimit saved;
    if (bytes) {
        getrlimit(RLIMIT_FSIZE, &saved);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit r = {bytes, saved.rlim_max};
        setrlimit(RLIMIT_FSIZE, &r);
    } else {
        setrlimit(RLIMIT_FSIZE, &saved);
        signal(SIGXFSZ, SIG_DFL);
    }
}

// ---------------------------------------------------------------------------------------------
// Safetensors: round trips

static const int64_t SH_F32[] = {2, 3}, SH_BF16[] = {5}, SH_F16[] = {2, 2}, SH_I64[] = {2},
                     SH_U8[] = {3}, SH_EMPTY[] = {0, 4}, SH_BIG[] = {100, 200};

typedef struct {
    float f32[6];
    uint16_t bf16[5], f16[4];
    float bf16_want[5], f16_want[4];
    int32_t i32;
    int64_t i64[2];
    uint8_t u8[3];
    uint16_t big[100 * 200];
} Sample;

// Fills a sample with edge values whose conversions are exact.
static Sample *sample_new(void) {
    Sample *s = alloc_zeroed(sizeof *s);
    const float f32[6] = {-0.0f, -1.5f, 3.25f, 1e-20f, -7e30f, INFINITY};
    memcpy(s->f32, f32, sizeof f32);
    const float bf[5] = {1.0f, -2.5f, 0.15625f, 65536.0f, -0.0078125f};
    for (int i = 0; i < 5; i++)
        s->bf16[i] = cpu_f32_to_bf16(bf[i]), s->bf16_want[i] = bf[i];
    const float hf[4] = {1.0f, -2.0f, 65504.0f, 0x1p-24f}; // the largest half and the smallest
    for (int i = 0; i < 4; i++)
        s->f16[i] = cpu_f32_to_f16(hf[i]), s->f16_want[i] = hf[i];
    s->i32 = 123456;
    s->i64[0] = -1, s->i64[1] = (int64_t)1 << 40;
    s->u8[0] = 1, s->u8[1] = 2, s->u8[2] = 255;
    for (int i = 0; i < 100 * 200; i++)
        s->big[i] = (uint16_t)(0x3f80 + (i % 977));
    return s;
}

// The sample as st_write input, deliberately in an order that would misalign if kept on disk.
static int sample_writes(const Sample *s, StWrite *w) {
    int n = 0;
    w[n++] = (StWrite){"u8", ST_U8, 1, SH_U8, s->u8};
    w[n++] = (StWrite){"bf16", ST_BF16, 1, SH_BF16, s->bf16};
    w[n++] = (StWrite){"f32", ST_F32, 2, SH_F32, s->f32};
    w[n++] = (StWrite){"f16", ST_F16, 2, SH_F16, s->f16};
    w[n++] = (StWrite){"i32", ST_I32, 0, NULL, &s->i32};
    w[n++] = (StWrite){"i64", ST_I64, 1, SH_I64, s->i64};
    w[n++] = (StWrite){"empty", ST_F32, 2, SH_EMPTY, NULL};
    w[n++] = (StWrite){"big", ST_BF16, 2, SH_BIG, s->big};
    return n;
}

static const char *const META[] = {"format", "pt", "producer", "ftc", NULL};

static void test_st_roundtrip(void) {
    char err[512] = "";
    Sample *s = sample_new();
    StWrite w[8];
    int n = sample_writes(s, w);
    const char *path = tpath("model.safetensors");
    CHECK_OK(st_write(path, w, n, META, err, sizeof err), err);
    StSet *set = NULL;
    CHECK_OK(st_open(&set, path, err, sizeof err), err);
    if (!set)
        return;
    CHECK(st_count(set) == n);
    for (int i = 1; i < st_count(set); i++)
        CHECK(strcmp(st_at(set, i - 1)->name, st_at(set, i)->name) < 0);
    CHECK(st_at(set, -1) == NULL && st_at(set, n) == NULL);
    CHECK(st_find(set, "nope") == NULL);
    CHECK(strcmp(st_file_path(set, 0), path) == 0 && st_file_path(set, 1) == NULL);

    const StTensor *t = st_find(set, "f32");
    CHECK(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
          t->shape[2] == 0 && t->file == 0 && st_elems(t) == 6);
    float f[6];
    CHECK_OK(st_read_f32(set, t, f, 6, err, sizeof err), err);
    for (int i = 0; i < 6; i++)
        CHECK(f32_bits(f[i]) == f32_bits(s->f32[i]));

    t = st_find(set, "bf16");
    float b[5];
    CHECK(t && t->dtype == ST_BF16 && t->ndim == 1 && t->shape[0] == 5);
    CHECK_OK(st_read_f32(set, t, b, 5, err, sizeof err), err);
    for (int i = 0; i < 5; i++)
        CHECK(b[i] == s->bf16_want[i]);

    t = st_find(set, "f16");
    float h[4];
    CHECK(t && t->dtype == ST_F16);
    CHECK_OK(st_read_f32(set, t, h, 4, err, sizeof err), err);
    for (int i = 0; i < 4; i++)
        CHECK(h[i] == s->f16_want[i]);

    t = st_find(set, "big"); // more elements than one conversion chunk
    float *big = alloc_zeroed(100 * 200 * sizeof(float));
    CHECK_OK(st_read_f32(set, t, big, 100 * 200, err, sizeof err), err);
    int same = 1;
    for (int i = 0; i < 100 * 200; i++)
        same &= f32_bits(big[i]) == f32_bits(cpu_bf16_to_f32(s->big[i]));
    CHECK(same);

    int32_t i32 = 0;
    t = st_find(set, "i32");
    CHECK(t && t->dtype == ST_I32 && t->ndim == 0 && st_elems(t) == 1);
    CHECK_OK(st_read_raw(set, t, &i32, 4, err, sizeof err), err);
    CHECK(i32 == 123456);
    int64_t i64[2] = {0, 0};
    CHECK_OK(st_read_raw(set, st_find(set, "i64"), i64, 16, err, sizeof err), err);
    CHECK(i64[0] == -1 && i64[1] == (int64_t)1 << 40);
    uint8_t u8[3] = {0, 0, 0};
    CHECK_OK(st_read_raw(set, st_find(set, "u8"), u8, 3, err, sizeof err), err);
    CHECK(u8[0] == 1 && u8[1] == 2 && u8[2] == 255);
    t = st_find(set, "empty");
    CHECK(t && t->shape[0] == 0 && t->shape[1] == 4 && t->begin == t->end && st_elems(t) == 0);
    CHECK_OK(st_read_f32(set, t, f, 0, err, sizeof err), err);
    st_close(set);
}

// The bytes on disk are what the Python library writes and accepts: padded header, metadata,
// tensors in the data section without gaps, each aligned to its element size.
static void test_st_write_layout(void) {
    char err[512] = "";
    Sample *s = sample_new();
    StWrite w[8];
    int n = sample_writes(s, w);
    const char *path = tpath("model.safetensors");
    CHECK_OK(st_write(path, w, n, META, err, sizeof err), err);
    size_t size;
    unsigned char *file = read_file(path, &size);
    uint64_t hlen = le64(file);
    CHECK(hlen % 8 == 0 && 8 + hlen <= size);
    const char *hdr = (const char *)file + 8;
    const char *start = "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"ftc\"},\"u8\":";
    CHECK(strncmp(hdr, start, strlen(start)) == 0);
    size_t end = (size_t)hlen;
    while (end > 0 && hdr[end - 1] == ' ')
        end--;
    CHECK(end > 0 && hdr[end - 1] == '}' && hlen - end < 8);
    // The header lists the tensors in the order given.
    const char *prev = hdr;
    for (int i = 0; i < n; i++) {
        const char *at = strstr(hdr, fmt("\"%s\":{\"dtype\"", w[i].name));
        CHECK(at && at > prev);
        prev = at ? at : prev;
    }

    StSet *set = NULL;
    CHECK_OK(st_open(&set, path, err, sizeof err), err);
    if (!set)
        return;
    const StTensor *by[8];
    for (int i = 0; i < n; i++)
        by[i] = st_at(set, i);
    for (int i = 0; i < n; i++) // sort by begin, empties after their neighbours
        for (int j = i + 1; j < n; j++)
            if (by[j]->begin < by[i]->begin ||
                (by[j]->begin == by[i]->begin && by[j]->end < by[i]->end)) {
                const StTensor *x = by[i];
                by[i] = by[j], by[j] = x;
            }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        CHECK(by[i]->begin == at);
        CHECK(by[i]->begin % st_dtype_bytes(by[i]->dtype) == 0);
        at = by[i]->end;
    }
    CHECK(at == size - 8 - hlen);
    // Larger elements first: i64 (8), then f32, i32 (4, in the given order), then 2, then 1.
    CHECK(st_find(set, "i64")->begin == 0);
    CHECK(st_find(set, "f32")->begin == 16 && st_find(set, "i32")->begin == 40);
    CHECK(st_find(set, "u8")->end == size - 8 - hlen);
    st_close(set);
}

static void test_st_overwrite(void) {
    char err[512] = "";
    const char *path = tpath("w.safetensors");
    float one = 1.0f, two[2] = {2.0f, 3.0f};
    int64_t sh1 = 1, sh2 = 2;
    StWrite a = {"x", ST_F32, 1, &sh1, &one}, b = {"y", ST_F32, 1, &sh2, two};
    CHECK_OK(st_write(path, &a, 1, NULL, err, sizeof err), err);
    CHECK_OK(st_write(path, &b, 1, NULL, err, sizeof err), err);
    StSet *set = NULL;
    CHECK_OK(st_open(&set, path, err, sizeof err), err);
    if (!set)
        return;
    float got[2];
    CHECK(st_count(set) == 1 && st_find(set, "x") == NULL);
    CHECK_OK(st_read_f32(set, st_find(set, "y"), got, 2, err, sizeof err), err);
    CHECK(got[0] == 2.0f && got[1] == 3.0f);
    st_close(set);
    CHECK(count_entries(case_dir) == 1); // no temporary file left behind

    // No tensors at all is a valid file too ("{}" padded).
    CHECK_OK(st_write(path, NULL, 0, NULL, err, sizeof err), err);
    CHECK_OK(st_open(&set, path, err, sizeof err), err);
    CHECK(set && st_count(set) == 0);
    st_close(set);
}

// Writes one shard holding the F32 tensors names[i] = {i+base, ...} of shape (2).
static void write_shard(const char *path, const char *const *names, int n, float base) {
    char err[512] = "";
    static const int64_t sh[] = {2};
    float *v = alloc_zeroed(8 * sizeof(float));
    StWrite w[4];
    for (int i = 0; i < n; i++) {
        v[2 * i] = base + (float)i, v[2 * i + 1] = -(base + (float)i);
        w[i] = (StWrite){names[i], ST_F32, 1, sh, &v[2 * i]};
    }
    CHECK_OK(st_write(path, w, n, META, err, sizeof err), err);
}

static const char *const SHARD1[] = {"model.embed.weight", "model.layers.0.w"};
static const char *const SHARD2[] = {"lm_head.weight"};
static const char INDEX_OK[] =
    "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
    "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
    "\"model.embed.weight\": \"model-00001-of-00002.safetensors\","
    "\"model.layers.0.w\": \"model-00001-of-00002.safetensors\"}}";

static void write_sharded(const char *index) {
    write_shard(tpath("model-00001-of-00002.safetensors"), SHARD1, 2, 10.0f);
    write_shard(tpath("model-00002-of-00002.safetensors"), SHARD2, 1, 20.0f);
    write_text(tpath("model.safetensors.index.json"), index);
}

static void test_st_sharded(void) {
    char err[512] = "";
    write_sharded(INDEX_OK);
    const char *opens[] = {case_dir, tpath("model.safetensors.index.json")};
    for (int k = 0; k < 2; k++) {
        StSet *set = NULL;
        CHECK_OK(st_open(&set, opens[k], err, sizeof err), err);
        if (!set)
            continue;
        CHECK(st_count(set) == 3);
        CHECK(strcmp(st_at(set, 0)->name, "lm_head.weight") == 0);
        CHECK(strcmp(st_at(set, 2)->name, "model.layers.0.w") == 0);
        const StTensor *lm = st_find(set, "lm_head.weight"), *w = st_find(set, "model.layers.0.w");
        CHECK(lm && w && lm->file != w->file);
        CHECK(strstr(st_file_path(set, lm->file), "/model-00002-of-00002.safetensors"));
        CHECK(strstr(st_file_path(set, w->file), "/model-00001-of-00002.safetensors"));
        float v[2];
        CHECK_OK(st_read_f32(set, lm, v, 2, err, sizeof err), err);
        CHECK(v[0] == 20.0f && v[1] == -20.0f);
        CHECK_OK(st_read_f32(set, w, v, 2, err, sizeof err), err);
        CHECK(v[0] == 11.0f && v[1] == -11.0f);
        st_close(set);
    }
}

// st_write_model shards as huggingface_hub does: a, BIG, b, c at 40 bytes a shard puts BIG
// alone in shard 1 (numbered when met), a and b in shard 2 (numbered when it closes), c in
// 3; the index maps each and totals the bytes; the shards read back as one checkpoint.
// Under the limit one model.safetensors, no index; a failure leaves no file.
static void test_st_write_model(void) {
    char err[512] = "";
    static const int64_t four[] = {4}, sixteen[] = {16};
    float v[16] = {1, 2, 3, 4};
    const StWrite w[] = {{"a", ST_F32, 1, four, v}, {"big", ST_F32, 1, sixteen, v},
                         {"b", ST_F32, 1, four, v}, {"c", ST_F32, 1, four, v}};
    int shards = 0;
    CHECK_OK(st_write_model(case_dir, w, 4, META, 40, &shards, err, sizeof err), err);
    CHECK_EQ(3, shards);
    size_t len = 0;
    const char *index = (const char *)read_file(tpath("model.safetensors.index.json"), &len);
    CHECK(index && strstr(index, "\"total_size\": 112"));
    CHECK(index && strstr(index, "\"big\": \"model-00001-of-00003.safetensors\""));
    CHECK(index && strstr(index, "\"a\": \"model-00002-of-00003.safetensors\""));
    CHECK(index && strstr(index, "\"b\": \"model-00002-of-00003.safetensors\""));
    CHECK(index && strstr(index, "\"c\": \"model-00003-of-00003.safetensors\""));
    StSet *set = NULL;
    CHECK_OK(st_open(&set, case_dir, err, sizeof err), err);
    float got[4];
    const StTensor *c = set ? st_find(set, "c") : NULL;
    CHECK(c && st_read_f32(set, c, got, 4, err, sizeof err) == 0 && got[3] == 4.0f);
    st_close(set);
    char one[4200];
    snprintf(one, sizeof one, "%s/one", case_dir);
    mkdir(one, 0755);
    CHECK_OK(st_write_model(one, w, 4, META, 112, &shards, err, sizeof err), err);
    CHECK(shards == 1 && access(tpath("one/model.safetensors"), F_OK) == 0 &&
          access(tpath("one/model.safetensors.index.json"), F_OK) != 0);
    const StWrite broken[] = {w[0], w[1], {"c", ST_F32, 1, four, NULL}};   // no data
    char none[4200];
    snprintf(none, sizeof none, "%s/none", case_dir);
    mkdir(none, 0755);
    CHECK(st_write_model(none, broken, 3, META, 40, &shards, err, sizeof err) != 0);
    CHECK(strstr(err, "tensor 'c': data is NULL"));
    DIR *d = opendir(none);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        files += e->d_name[0] != '.';
    if (d)
        closedir(d);
    CHECK_EQ(0, files);
}

// A shard linked to a file outside the checkpoint directory is refused; one linked
// inside it is followed.
static void test_st_shard_link_outside(void) {
    char err[512] = "";
    mkdir(tpath("ck"), 0755);
    write_shard(tpath("model-00001-of-00002.safetensors"), SHARD1, 2, 10.0f);   // outside ck/
    write_shard(tpath("ck/real-2.safetensors"), SHARD2, 1, 20.0f);
    CHECK(symlink("../model-00001-of-00002.safetensors", tpath("ck/model-00001-of-00002.safetensors")) == 0);
    CHECK(symlink("real-2.safetensors", tpath("ck/model-00002-of-00002.safetensors")) == 0);
    write_text(tpath("ck/model.safetensors.index.json"), INDEX_OK);
    StSet *set = NULL;
    CHECK(st_open(&set, tpath("ck"), err, sizeof err) != 0 && !set);
    CHECKF(strstr(err, "model-00001-of-00002.safetensors leads outside the checkpoint directory"), "%s", err);
    // the same shard copied in: it opens, through the inside link too
    write_shard(tpath("ck/model-00001-of-00002.safetensors.real"), SHARD1, 2, 10.0f);
    unlink(tpath("ck/model-00001-of-00002.safetensors"));
    CHECK(symlink("model-00001-of-00002.safetensors.real", tpath("ck/model-00001-of-00002.safetensors")) == 0);
    CHECK_OK(st_open(&set, tpath("ck"), err, sizeof err), err);
    st_close(set);
}

// A FIFO where a file is expected is refused at once, never waited on: as a checkpoint,
// a shard, an index and a token file.
static void test_fifo_inputs(void) {
    char err[512] = "";
    CHECK(mkfifo(tpath("pipe"), 0600) == 0);
    StSet *set = NULL;
    CHECK(st_open(&set, tpath("pipe"), err, sizeof err) != 0);
    CHECKF(strstr(err, "not a regular file"), "%s", err);
    write_shard(tpath("model-00002-of-00002.safetensors"), SHARD2, 1, 20.0f);
    CHECK(mkfifo(tpath("model-00001-of-00002.safetensors"), 0600) == 0);
    write_text(tpath("model.safetensors.index.json"), INDEX_OK);
    CHECK(st_open(&set, case_dir, err, sizeof err) != 0);
    CHECKF(strstr(err, "model-00001-of-00002.safetensors: not a regular file"), "%s", err);
    CHECK(mkfifo(tpath("x.index.json"), 0600) == 0);
    CHECK(st_open(&set, tpath("x.index.json"), err, sizeof err) != 0);
    CHECKF(strstr(err, "not a regular file"), "%s", err);
    DataFile *d = NULL;
    CHECK(data_open(&d, tpath("pipe"), err, sizeof err) != 0);
    CHECKF(strstr(err, "not a regular file"), "%s", err);
}

// A directory with model.safetensors opens that file even if an index sits beside it.
static void test_st_directory_single(void) {
    char err[512] = "";
    write_sharded(INDEX_OK);
    write_shard(tpath("model.safetensors"), SHARD2, 1, 5.0f);
    StSet *set = NULL;
    CHECK_OK(st_open(&set, case_dir, err, sizeof err), err);
    CHECK(set && st_count(set) == 1 && strcmp(st_at(set, 0)->name, "lm_head.weight") == 0);
    CHECK(set && strcmp(st_file_path(set, 0), tpath("model.safetensors")) == 0);
    st_close(set);
}

// ---------------------------------------------------------------------------------------------
// Safetensors: malformed files, one case each

typedef struct {
    const char *name;
    const char *header;
    int64_t hlen;       // the length field; -1: the header's length
    size_t data_bytes;  // zero bytes after the header
    const char *tensor; // the tensor the message must name, or NULL
    const char *fragment;
} BadSt;

static const BadSt BAD_ST[] = {
    {"st_bad_header_len_zero", "", 0, 16, NULL, "header length is 0"},
    {"st_bad_header_len_over_100mb", "{}", 200000000, 0, NULL,
     "header length 200000000 exceeds the 100 MB limit"},
    {"st_bad_header_len_past_eof", "{}", 1000, 0, NULL,
     "header length 1000 exceeds the file size (10 bytes)"},
    {"st_bad_json_syntax", "{\"w\": {\"dtype\": \"F32\",", -1, 0, NULL,
     "header is not valid JSON: "},
    {"st_bad_json_duplicate_key",
     "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     -1, 2, NULL, "duplicate object key"},
    {"st_bad_json_not_object", "[1, 2]", -1, 0, NULL, "header is not a JSON object"},
    {"st_bad_json_trailing_garbage", "{} x", -1, 0, NULL, "header is not valid JSON"},
    {"st_bad_entry_not_object", "{\"w\": 5}", -1, 0, "w", "header entry is not an object"},
    {"st_bad_metadata_not_object", "{\"__metadata__\": [1]}", -1, 0, NULL,
     "\"__metadata__\" is not an object"},
    {"st_bad_metadata_value", "{\"__metadata__\": {\"format\": 1}}", -1, 0, NULL,
     "\"__metadata__\" value 'format' is not a string"},
    {"st_bad_dtype_missing", "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 4, "w",
     "\"dtype\" is missing or not a string"},
    {"st_bad_dtype_not_string", "{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}",
     -1, 4, "w", "\"dtype\" is missing or not a string"},
    {"st_bad_dtype_unknown",
     "{\"w\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", -1, 8, "w",
     "unknown dtype 'F64'"},
    {"st_bad_shape_missing", "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", -1, 4,
     "w", "\"shape\" is missing or not a list of non-negative integers"},
    {"st_bad_shape_negative",
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", -1, 4, "w",
     "\"shape\" is missing or not a list of non-negative integers"},
    {"st_bad_shape_not_integer",
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [2.0], \"data_offsets\": [0, 8]}}", -1, 8, "w",
     "\"shape\" is missing or not a list of non-negative integers"},
    {"st_bad_shape_too_many_dims",
     "{\"w\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", -1,
     1, "w", "shape has 9 dimensions, at most 8 are supported"},
    {"st_bad_shape_too_large",
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 4]}}",
     -1, 4, "w", "shape [4294967296, 4294967296] is too large"},
    {"st_bad_offsets_missing", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", -1, 4, "w",
     "\"data_offsets\" is missing or not [begin, end]"},
    {"st_bad_offsets_three",
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", -1, 8, "w",
     "\"data_offsets\" is missing or not [begin, end]"},
    {"st_bad_offsets_negative",
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", -1, 4, "w",
     "\"data_offsets\" is missing or not [begin, end]"},
    {"st_bad_offsets_reversed",
     "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", -1, 8, "w",
     "data_offsets [8, 4] end before they begin"},
    {"st_bad_offsets_size_mismatch",
     "{\"x\": {\"dtype\": \"BF16\", \"shape\": [3, 4], \"data_offsets\": [0, 100]}}", -1, 100, "x",
     "data_offsets [0, 100] hold 100 bytes, but BF16 [3, 4] needs 24"},
    {"st_bad_offsets_out_of_range",
     "{\"lm_head.weight\": {\"dtype\": \"F32\", \"shape\": [25], \"data_offsets\": [0, 100]}}", -1,
     64, "lm_head.weight", "data_offsets [0, 100] exceed the file's data section (64 bytes)"},
    {"st_bad_overlap",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
     " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
     -1, 24, "b", "data_offsets [8, 24] overlap tensor 'a' [0, 16]"},
    {"st_bad_overlap_contained",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 32]},"
     " \"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
     " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
     -1, 32, "b", "overlap tensor 'a' [0, 32]"},
};
enum { N_BAD_ST = (int)(sizeof BAD_ST / sizeof BAD_ST[0]) };

static int bad_st_at; // the BAD_ST row the running case checks

static void test_st_bad(void) {
    const BadSt *c = &BAD_ST[bad_st_at];
    const char *path = tpath("model.safetensors");
    write_st_raw(path, c->hlen < 0 ? strlen(c->header) : (uint64_t)c->hlen, c->header,
                 c->data_bytes);
    char err[512] = "";
    StSet *set = (StSet *)1;
    CHECK_ERR(st_open(&set, path, err, sizeof err), err, path, c->tensor, c->fragment);
    CHECK(set == NULL);
    // The same file opened through its directory gives the same message.
    char err2[512] = "";
    CHECK_ERR(st_open(&set, case_dir, err2, sizeof err2), err2, path, c->tensor, c->fragment);
    CHECK(strcmp(err, err2) == 0);
}

static void test_st_bad_exact_message(void) {
    const char *path = tpath("model.safetensors");
    write_st_header(path,
                    "{\"lm_head.weight\": {\"dtype\": \"F32\", \"shape\": [25], "
                    "\"data_offsets\": [0, 100]}}",
                    64);
    char err[512] = "";
    StSet *set;
    CHECK(st_open(&set, path, err, sizeof err) == -1);
    CHECK(strcmp(err, fmt("%s: tensor 'lm_head.weight': data_offsets [0, 100] exceed the file's "
                          "data section (64 bytes)",
                          path)) == 0);
    // A short buffer gets a truncated, terminated message; no buffer at all is allowed.
    char small[8];
    CHECK(st_open(&set, path, small, sizeof small) == -1 && strlen(small) == 7);
    CHECK(st_open(&set, path, NULL, 0) == -1 && set == NULL);
}

static void test_st_bad_short_file(void) {
    const char *path = tpath("x.safetensors");
    write_text(path, "abc");
    char err[512] = "";
    StSet *set;
    CHECK_ERR(st_open(&set, path, err, sizeof err), err, path, NULL,
              "file is 3 bytes, too short for the 8-byte header length");
}

static void test_st_bad_paths(void) {
    char err[512] = "";
    StSet *set;
    const char *missing = tpath("missing.safetensors");
    CHECK_ERR(st_open(&set, missing, err, sizeof err), err, missing, NULL,
              "cannot open: No such file or directory");
    CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, case_dir, NULL,
              "directory holds neither model.safetensors nor model.safetensors.index.json");
    CHECK_ERR(st_open(&set, "/dev/null", err, sizeof err), err, "/dev/null", NULL,
              "not a regular file");
    const char *index = tpath("missing.index.json");
    CHECK_ERR(st_open(&set, index, err, sizeof err), err, index, NULL, "cannot open");
}

// Sharded checkpoints whose shards or index disagree.
static void test_st_bad_shard_duplicate(void) {
    static const char *const a[] = {"x", "y"}, *const b[] = {"x", "z"};
    write_shard(tpath("a.safetensors"), a, 2, 1.0f);
    write_shard(tpath("b.safetensors"), b, 2, 2.0f);
    write_text(tpath("model.safetensors.index.json"),
               "{\"weight_map\": {\"y\": \"a.safetensors\", \"z\": \"b.safetensors\"}}");
    char err[512] = "";
    StSet *set;
    int rc = st_open(&set, case_dir, err, sizeof err);
    CHECK(rc == -1 && set == NULL);
    CHECK(strstr(err, "tensor 'x': also in ") && strstr(err, "/a.safetensors") &&
          strstr(err, "/b.safetensors"));
}

static void test_st_bad_index_absent(void) {
    write_sharded("{\"weight_map\": {"
                  "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
                  "\"model.embed.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.layers.0.w\": \"model-00001-of-00002.safetensors\","
                  "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}");
    const char *index = tpath("model.safetensors.index.json");
    char err[512] = "";
    StSet *set;
    CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, index, "model.norm.weight",
              fmt("mapped to %s, which does not contain it",
                  tpath("model-00002-of-00002.safetensors")));
}

static void test_st_bad_index_wrong_shard(void) {
    write_sharded("{\"weight_map\": {"
                  "\"lm_head.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.embed.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.layers.0.w\": \"model-00002-of-00002.safetensors\"}}");
    const char *index = tpath("model.safetensors.index.json");
    char err[512] = "";
    StSet *set;
    CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, index, "lm_head.weight",
              fmt("mapped to %s, but it is in %s", tpath("model-00001-of-00002.safetensors"),
                  tpath("model-00002-of-00002.safetensors")));
}

static void test_st_bad_index_unlisted(void) {
    write_sharded("{\"weight_map\": {"
                  "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
                  "\"model.embed.weight\": \"model-00001-of-00002.safetensors\"}}");
    const char *shard = tpath("model-00001-of-00002.safetensors");
    char err[512] = "";
    StSet *set;
    CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, shard, "model.layers.0.w",
              "not listed in the weight_map of");
}

static void test_st_bad_index_shard_malformed(void) {
    write_text(tpath("model.safetensors.index.json"),
               "{\"weight_map\": {\"w\": \"model-00001-of-00001.safetensors\"}}");
    const char *shard = tpath("model-00001-of-00001.safetensors");
    write_st_header(shard,
                    "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4);
    char err[512] = "";
    StSet *set;
    CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, shard, "w",
              "exceed the file's data section (4 bytes)");
    unlink(shard);
    CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, shard, NULL,
              "cannot open: No such file or directory");
}

static void test_st_bad_index_json(void) {
    const char *index = tpath("model.safetensors.index.json");
    static const struct {
        const char *text, *tensor, *fragment;
    } cases[] = {
        {"{\"weight_map\": ", NULL, "not valid JSON"},
        {"{\"weight_map\": {}, \"weight_map\": {}}", NULL, "duplicate object key"},
        {"[]", NULL, "no \"weight_map\" object naming at least one tensor"},
        {"{\"metadata\": {}}", NULL, "no \"weight_map\" object naming at least one tensor"},
        {"{\"weight_map\": {}}", NULL, "no \"weight_map\" object naming at least one tensor"},
        {"{\"weight_map\": [\"a.safetensors\"]}", NULL, "no \"weight_map\" object"},
        {"{\"weight_map\": {\"w\": 3}}", "w", "weight_map value is not a shard file name"},
        {"{\"weight_map\": {\"w\": \"../x.safetensors\"}}", "w",
         "weight_map value is not a shard file name in this directory"},
        {"{\"weight_map\": {\"w\": \"..\"}}", "w", "not a shard file name"},
        {"{\"weight_map\": {\"w\": \"\"}}", "w", "not a shard file name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(index, cases[i].text);
        char err[512] = "";
        StSet *set = (StSet *)1;
        CHECK_ERR(st_open(&set, case_dir, err, sizeof err), err, index, cases[i].tensor,
                  cases[i].fragment);
        CHECK(set == NULL);
    }
}

// ---------------------------------------------------------------------------------------------
// Safetensors: read and write errors

static void test_st_read_errors(void) {
    char err[512] = "";
    Sample *s = sample_new();
    StWrite w[8];
    int n = sample_writes(s, w);
    const char *path = tpath("model.safetensors");
    CHECK_OK(st_write(path, w, n, NULL, err, sizeof err), err);
    StSet *set = NULL;
    CHECK_OK(st_open(&set, path, err, sizeof err), err);
    if (!set)
        return;
    float f[16];
    int64_t i64[2];
    const StTensor *t = st_find(set, "f32");
    CHECK(st_read_f32(set, t, f, 16, err, sizeof err) == -1);
    CHECK(strcmp(err, fmt("%s: tensor 'f32': has 6 elements [2, 3], the model expects 16", path)) ==
          0);
    CHECK_ERR(st_read_f32(set, st_find(set, "i32"), f, 1, err, sizeof err), err, path, "i32",
              "dtype I32 cannot be read as float");
    CHECK_ERR(st_read_raw(set, st_find(set, "i64"), i64, 8, err, sizeof err), err, path, "i64",
              "holds 16 bytes, the caller expects 8");
    StTensor forged = *t;
    forged.file = 3;
    CHECK(st_read_raw(set, &forged, f, 24, err, sizeof err) == -1 &&
          strstr(err, "tensor 'f32': not a tensor of this checkpoint"));
    CHECK(st_read_f32(set, &forged, f, 6, err, sizeof err) == -1);

    // The file shrinks under an open set: each read path reports it.
    CHECK(truncate(path, 8 + 16) == 0);
    CHECK_ERR(st_read_f32(set, t, f, 6, err, sizeof err), err, path, "f32",
              "cannot read: the file ended early");
    CHECK_ERR(st_read_f32(set, st_find(set, "bf16"), f, 5, err, sizeof err), err, path, "bf16",
              "cannot read: the file ended early");
    CHECK_ERR(st_read_raw(set, st_find(set, "i64"), i64, 16, err, sizeof err), err, path, "i64",
              "cannot read");
    st_close(set);
    st_close(NULL);
}

static void test_st_write_errors(void) {
    char err[512] = "";
    const char *path = tpath("out.safetensors");
    float v[4] = {1, 2, 3, 4};
    int64_t sh[9] = {4, 1, 1, 1, 1, 1, 1, 1, 1}, neg[1] = {-4}, huge[2] = {INT64_MAX, 2};
    StWrite ok = {"w", ST_F32, 1, sh, v};
    StWrite w[2] = {ok, ok};
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "w", "name given twice");
    w[1].name = "__metadata__";
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "__metadata__",
              "the name is reserved");
    w[1].name = "";
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, NULL, "empty name");
    w[1].name = NULL;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, NULL, "empty name");
    w[1] = ok, w[1].name = "bad\xff\xfe";
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, NULL,
              "a tensor name is not valid UTF-8");
    w[1] = ok, w[1].name = "v", w[1].dtype = (StDType)99;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v", "invalid dtype 99");
    w[1] = ok, w[1].name = "v", w[1].ndim = 9;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v",
              "ndim 9 is not in 0..8,");
    w[1].ndim = -1;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v", "ndim -1");
    w[1].ndim = 1, w[1].shape = NULL;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v",
              "ndim 1 is not in 0..8, or its shape is NULL");
    w[1].shape = neg;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v",
              "dimension 0 is negative (-4)");
    w[1].ndim = 2, w[1].shape = huge;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v", "shape is too large");
    w[1].ndim = 1, w[1].shape = sh, w[1].data = NULL;
    CHECK_ERR(st_write(path, w, 2, NULL, err, sizeof err), err, path, "v", "data is NULL");
    CHECK_ERR(st_write(path, w, -1, NULL, err, sizeof err), err, path, NULL,
              "invalid tensor list (n = -1)");
    CHECK_ERR(st_write(path, NULL, 1, NULL, err, sizeof err), err, path, NULL,
              "invalid tensor list (n = 1)");

    static const char *const odd[] = {"format", "pt", "lonely", NULL};
    CHECK_ERR(st_write(path, &ok, 1, odd, err, sizeof err), err, path, NULL,
              "metadata key 'lonely' has no value");
    static const char *const twice[] = {"format", "pt", "format", "np", NULL};
    CHECK_ERR(st_write(path, &ok, 1, twice, err, sizeof err), err, path, NULL,
              "metadata key 'format' given twice");
    static const char *const bad_utf8[] = {"format", "p\xfft", NULL};
    CHECK_ERR(st_write(path, &ok, 1, bad_utf8, err, sizeof err), err, path, NULL,
              "metadata key 'format': key or value is not UTF-8");
    CHECK(count_entries(case_dir) == 0);

    // A header over 100 MB: one huge metadata value.
    size_t big = 100000000;
    char *value = malloc(big + 1);
    if (value) {
        memset(value, 'a', big);
        value[big] = '\0';
        const char *const kv[] = {"blob", value, NULL};
        CHECK_ERR(st_write(path, &ok, 1, kv, err, sizeof err), err, path, NULL,
                  "exceeds the 100 MB limit");
        free(value);
    }

    const char *nodir = tpath("no/such/dir/out.safetensors");
    CHECK_ERR(st_write(nodir, &ok, 1, NULL, err, sizeof err), err, nodir, NULL,
              "cannot create a temporary file: No such file or directory");

    // rename fails: the destination is a non-empty directory.
    const char *dir = tpath("taken");
    mkdir(dir, 0755);
    write_text(fmt("%s/keep", dir), "x");
    CHECK_ERR(st_write(dir, &ok, 1, NULL, err, sizeof err), err, dir, NULL, "cannot replace: ");

    // write fails: the file size limit is below the tensor's size.
    float *large = alloc_zeroed(1 << 16);
    int64_t n_large = (1 << 16) / 4;
    StWrite lw = {"large", ST_F32, 1, &n_large, large};
    limit_file_size(4096);
    int rc = st_write(path, &lw, 1, NULL, err, sizeof err);
    limit_file_size(0);
    CHECK_ERR(rc, err, path, NULL, "cannot write: File too large");
    CHECK(count_entries(case_dir) == 1); // only "taken": no temporary file survived
}

// ---------------------------------------------------------------------------------------------
// Token files

// Writes a token file header by hand followed by payload.
static void write_tok(const char *path, const char *magic, uint32_t version, uint32_t width,
                      uint64_t count, uint64_t reserved, const void *payload, size_t n) {
    unsigned char *b = alloc_zeroed(32 + n);
    memcpy(b, magic, 8);
    for (int i = 0; i < 4; i++)
        b[8 + i] = (unsigned char)(version >> (8 * i)),
            b[12 + i] = (unsigned char)(width >> (8 * i));
    for (int i = 0; i < 8; i++)
        b[16 + i] = (unsigned char)(count >> (8 * i)),
            b[24 + i] = (unsigned char)(reserved >> (8 * i));
    if (n)
        memcpy(b + 32, payload, n);
    write_file(path, b, 32 + n);
}

// Converts raw bytes in the given mode and checks the header and every window against want.
static void check_convert(DataMode mode, const void *raw, size_t raw_n, const uint32_t *want,
                          uint64_t n, int width, int seq, int32_t vocab) {
    char err[512] = "";
    const char *in = tpath(fmt("in%d.bin", (int)mode)), *out = tpath(fmt("out%d.tok", (int)mode));
    write_file(in, raw, raw_n);
    uint64_t got_n = 0;
    CHECK_OK(data_convert(in, out, mode, &got_n, err, sizeof err), err);
    CHECK(got_n == n);
    size_t size;
    unsigned char *b = read_file(out, &size);
    CHECK(size == 64 + n * (uint64_t)width);
    CHECK(memcmp(b, "FTCTOKEN\2\0\0\0", 12) == 0 && b[12] == width && b[13] == 0);
    CHECK(le64(b + 16) == n && le64(b + 24) == 0 && le64(b + 32) == 0 && le64(b + 40) == 0);
    struct stat st;
    CHECK(stat(out, &st) == 0 && (st.st_mode & 0777) == 0644);

    DataFile *d = NULL;
    CHECK_OK(data_open(&d, out, err, sizeof err), err);
    if (!d)
        return;
    CHECK(data_count(d) == n && data_token_bytes(d) == width && strcmp(data_path(d), out) == 0);
    uint64_t nw = 0;
    CHECK_OK(data_window_count(d, seq, &nw, err, sizeof err), err);
    CHECK(nw == (n - 1) / (uint64_t)seq);
    int32_t *win = alloc_zeroed(((size_t)seq + 1) * sizeof(int32_t));
    for (uint64_t i = 0; i < nw; i++) {
        uint8_t info[8];
        CHECK_OK(data_read_window(d, i, seq, win, info, vocab, err, sizeof err), err);
        for (int k = 0; k <= seq; k++)
            CHECK((uint32_t)win[k] == want[i * (uint64_t)seq + (uint64_t)k] && info[k] == DATA_TRAIN);
    }
    data_close(d);
    CHECK(count_entries(case_dir) == 2);
}

// Initialisation in parallel ranges gives the stream a single range gives, for every
// scheme, including ranges of odd lengths and more ranges than values.
static void test_init_split(void) {
    enum { N = 100003 };
    static float one[N], many[N];
    PlanInit schemes[] = {PINIT_NORMAL, PINIT_KAIMING_UNIFORM, PINIT_ONES, PINIT_ZEROS};
    for (size_t k = 0; k < sizeof schemes / sizeof schemes[0]; k++) {
        rt_weights_fill(one, N, schemes[k], 0.02, 1234, 7, 1);
        for (int parts = 2; parts <= 64; parts = parts * 3 + 1) {
            rt_weights_fill(many, N, schemes[k], 0.02, 1234, 7, parts);
            CHECK(memcmp(one, many, sizeof one) == 0);
        }
        rt_weights_fill(many, 5, schemes[k], 0.02, 1234, 7, 40);
        CHECK(memcmp(one, many, 5 * sizeof(float)) == 0);
    }
    double sum = 0, sq = 0;   // and it is the stream it claims: normal(0, 0.02)
    rt_weights_fill(one, N, PINIT_NORMAL, 0.02, 99, 3, 0);
    for (int i = 0; i < N; i++)
        sum += one[i], sq += (double)one[i] * one[i];
    CHECK(fabs(sum / N) < 3 * 0.02 / sqrt(N));
    CHECK(fabs(sqrt(sq / N) - 0.02) < 0.0005);
    rt_weights_fill(many, N, PINIT_NORMAL, 0.02, 99, 4, 0);
    CHECK(memcmp(one, many, sizeof one) != 0);   // another buffer, another stream
}

static void test_data_convert_bytes(void) {
    static const unsigned char raw[] = "hello\0\xff";
    uint32_t want[7];
    for (int i = 0; i < 7; i++)
        want[i] = raw[i];
    check_convert(DATA_BYTES, raw, 7, want, 7, 2, 2, 256);
}

static void test_data_convert_u16(void) {
    static const unsigned char raw[] = {0, 0, 1, 0, 0xff, 0xff, 0x2c, 0x01, 7, 0};
    static const uint32_t want[] = {0, 1, 65535, 300, 7};
    check_convert(DATA_U16, raw, sizeof raw, want, 5, 2, 1, 65536);
}

static void test_data_convert_u32(void) {
    static const uint32_t want[] = {0, 70000, 2147483646u, 5, 123456789};
    unsigned char raw[20];
    for (int i = 0; i < 20; i++)
        raw[i] = (unsigned char)(want[i / 4] >> (8 * (i % 4)));
    check_convert(DATA_U32, raw, sizeof raw, want, 5, 4, 2, INT32_MAX);
}

// Writes tokens 0..n-1 (uint16) as a token file.
static const char *tok_seq(const char *name, int n) {
    unsigned char *b = alloc_zeroed(2 * (size_t)n);
    for (int i = 0; i < n; i++)
        b[2 * i] = (unsigned char)i, b[2 * i + 1] = (unsigned char)(i >> 8);
    const char *path = tpath(name);
    write_tok(path, "FTCTOKEN", 1, 2, (uint64_t)n, 0, b, 2 * (size_t)n);
    return path;
}

static void test_data_windows(void) {
    char err[512] = "";
    const char *path = tok_seq("seq.tok", 10);
    DataFile *d = NULL;
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (!d)
        return;
    static const struct {
        int seq;
        uint64_t windows;
    } counts[] = {{1, 9}, {2, 4}, {3, 3}, {4, 2}, {5, 1}, {8, 1}, {9, 1}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        uint64_t n = 0;
        CHECK_OK(data_window_count(d, counts[i].seq, &n, err, sizeof err), err);
        CHECK(n == counts[i].windows);
    }
    int32_t w[11];
    for (uint64_t i = 0; i < 3; i++) { // seq 3: [0..3], [3..6], [6..9], sharing one token each
        CHECK_OK(data_read_window(d, i, 3, w, NULL, 10, err, sizeof err), err);
        for (int k = 0; k < 4; k++)
            CHECK(w[k] == (int32_t)(3 * i) + k);
    }
    CHECK_OK(data_read_window(d, 0, 9, w, NULL, 10, err, sizeof err), err);
    CHECK(w[0] == 0 && w[9] == 9);

    uint64_t n;
    CHECK_ERR(data_window_count(d, 10, &n, err, sizeof err), err, path, NULL,
              "holds 10 tokens, fewer than one window of seq+1 = 11 tokens");
    CHECK_ERR(data_window_count(d, 0, &n, err, sizeof err), err, path, NULL,
              "sequence length 0, must be at least 1");
    CHECK_ERR(data_read_window(d, 3, 3, w, NULL, 10, err, sizeof err), err, path, NULL,
              "window 3 is past the last one (3 windows of 4 tokens)");
    CHECK_ERR(data_read_window(d, 0, 10, w, NULL, 10, err, sizeof err), err, path, NULL,
              "fewer than one window");
    CHECK_ERR(data_read_window(d, 0, 3, w, NULL, 0, err, sizeof err), err, path, NULL,
              "vocabulary size 0, must be at least 1");
    CHECK(data_read_window(d, 2, 3, w, NULL, 9, err, sizeof err) == -1);
    CHECK(strcmp(err, fmt("%s: token 9 is 9, not below the vocabulary size 9", path)) == 0);

    // The file shrinks under an open reader.
    CHECK(truncate(path, 32 + 8) == 0);
    CHECK_ERR(data_read_window(d, 2, 3, w, NULL, 10, err, sizeof err), err, path, NULL,
              "cannot read window 2: the file ended early");
    data_close(d);
    data_close(NULL);
}

static void test_data_token_over_vocab(void) {
    char err[512] = "";
    static const unsigned char raw[] = {1, 0, 2, 0, 3, 0, 0xe7, 0x03, 5, 0, 0xe8, 0x03};
    const char *path = tpath("t.tok");
    write_tok(path, "FTCTOKEN", 1, 2, 6, 0, raw, sizeof raw);
    DataFile *d = NULL;
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (!d)
        return;
    int32_t w[6];
    CHECK_ERR(data_read_window(d, 0, 5, w, NULL, 500, err, sizeof err), err, path, NULL,
              "token 3 is 999, not below the vocabulary size 500");
    CHECK_OK(data_read_window(d, 0, 5, w, NULL, 1001, err, sizeof err), err);
    CHECK(w[3] == 999 && w[5] == 1000);
    data_close(d);

    // A uint32 token beyond int32 is rejected, not wrapped negative.
    static const unsigned char wide[] = {1, 0, 0, 0, 0, 0x28, 0x6b, 0xee};
    write_tok(path, "FTCTOKEN", 1, 4, 2, 0, wide, sizeof wide);
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (!d)
        return;
    CHECK_ERR(data_read_window(d, 0, 1, w, NULL, INT32_MAX, err, sizeof err), err, path, NULL,
              "token 1 is 4000000000, not below the vocabulary size 2147483647");
    data_close(d);
}

// Version 2 with info bytes, through the writer: windows bring their tokens' info, the
// vocabulary pass counts the trained targets and refuses unknown info bits; a dropped writer
// leaves nothing; malformed version 2 headers are refused.
static void test_data_writer_info(void) {
    char err[512] = "";
    const char *path = tpath("info.tok");
    int32_t ids[10];
    uint8_t info[10];
    for (int i = 0; i < 10; i++)
        ids[i] = 70000 + i, info[i] = (uint8_t)((i % 3 ? DATA_TRAIN : 0) | (i % 4 == 0 ? DATA_START : 0));
    DataWriter *w = NULL;
    CHECK_OK(data_writer_open(&w, path, 4, true, err, sizeof err), err);
    if (!w)
        return;
    CHECK_OK(data_writer_put(w, ids, info, 4, err, sizeof err), err);
    CHECK_OK(data_writer_put(w, ids + 4, info + 4, 6, err, sizeof err), err);
    CHECK(data_writer_count(w) == 10);
    CHECK_OK(data_writer_close(w, 3, 2, err, sizeof err), err);
    size_t size;
    unsigned char *b = read_file(path, &size);
    CHECK(size == 64 + 10 * 4 + 10);
    CHECK(memcmp(b, "FTCTOKEN\2\0\0\0\4\0\0\0", 16) == 0 && le64(b + 16) == 10 && le64(b + 24) == 1 &&
          le64(b + 32) == 3 && le64(b + 40) == 2 && le64(b + 48) == 0 && le64(b + 56) == 0);
    CHECK(memcmp(b + 64 + 40, info, 10) == 0);
    DataFile *d = NULL;
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (!d)
        return;
    CHECK(data_has_info(d) && data_packed_window(d) == 3 && data_records(d) == 2 && data_count(d) == 10);
    int32_t win[4];
    uint8_t got[4];
    for (uint64_t k = 0; k < 3; k++) {
        CHECK_OK(data_read_window(d, k, 3, win, got, 80000, err, sizeof err), err);
        for (int i = 0; i < 4; i++)
            CHECK(win[i] == ids[3 * k + (uint64_t)i] && got[i] == info[3 * k + (uint64_t)i]);
    }
    uint64_t trained = 0;
    CHECK_OK(data_check_vocab(d, 80000, &trained, err, sizeof err), err);
    CHECK(trained == 6);   // tokens 1, 2, 4, 5, 7, 8
    data_close(d);
    b[64 + 40 + 7] |= 0x80;
    write_file(path, b, size);
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (d)
        CHECK_ERR(data_check_vocab(d, 80000, NULL, err, sizeof err), err, path, NULL,
                  "token 7's info byte is 0x81");
    data_close(d);
    // v2 headers: an unknown flag, reserved bytes, a size that leaves out the info bytes
    static const struct { int at; unsigned char v; size_t size; const char *want; } bad[] = {
        {24, 5, 64 + 50, "header flags 0x5, only bits 0 (info bytes) and 1 (pairs) are defined"},
        {50, 1, 64 + 50, "reserved header bytes 48..63 are not 0"},
        {0, 0, 64 + 45, "header says 10 tokens of 4 bytes and their info bytes, but 45 bytes follow"},
        {0, 0, 40, "shorter than the 64-byte header of version 2"},
    };
    b[64 + 40 + 7] &= 0x7f;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        unsigned char keep = b[bad[k].at];
        if (bad[k].at)
            b[bad[k].at] = bad[k].v;
        write_file(path, b, bad[k].size);
        CHECK_ERR(data_open(&d, path, err, sizeof err), err, path, NULL, bad[k].want);
        b[bad[k].at] = keep;
    }
    // a token that does not fit the width, and a dropped writer
    CHECK_OK(data_writer_open(&w, path, 2, false, err, sizeof err), err);
    CHECK_ERR(data_writer_put(w, ids, NULL, 1, err, sizeof err), err, path, NULL, "token 70000 does not fit 2 bytes");
    data_writer_drop(w);
    data_writer_drop(NULL);
    CHECK(access(path, F_OK) == 0);   // the earlier file is still there, and nothing beside it
    CHECK(count_entries(case_dir) == 1);
}

// A paired file (DATA_PAIRED) through the writer: two pairs of windows of 3, each window
// one record from its start; the flag, the pair count and the windows read back. Then the
// layouts a paired file may not have, each refused naming the file.
static void test_data_paired(void) {
    char err[512] = "";
    const char *path = tpath("pairs.tok");
    enum { W = 3, N = 4 * W + 1 };
    int32_t ids[N];
    uint8_t info[N];
    for (int i = 0; i < N; i++)   // a record of 2 tokens, then one of padding, in every window
        ids[i] = 10 + i, info[i] = i % W == 0 ? DATA_START : i % W == 1 ? DATA_TRAIN : DATA_START;
    DataWriter *w = NULL;
    CHECK_OK(data_writer_open(&w, path, 2, true, err, sizeof err), err);
    if (!w)
        return;
    data_writer_pairs(w);
    CHECK_OK(data_writer_put(w, ids, info, N, err, sizeof err), err);
    CHECK_OK(data_writer_close(w, W, 2, err, sizeof err), err);
    size_t size;
    unsigned char *b = read_file(path, &size);
    CHECK(size == 64 + N * 3 && le64(b + 24) == (DATA_HAS_INFO | DATA_PAIRED) && le64(b + 32) == W &&
          le64(b + 40) == 2);
    DataFile *d = NULL;
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (!d)
        return;
    uint64_t nwin = 0, trained = 0;
    CHECK(data_paired(d) && data_records(d) == 2);
    CHECK_OK(data_window_count(d, W, &nwin, err, sizeof err), err);
    CHECK(nwin == 4);
    CHECK_OK(data_check_vocab(d, 100, &trained, err, sizeof err), err);
    CHECK(trained == 4);
    data_close(d);
    // A window that does not begin a record: found by the pass over every info byte.
    b[64 + N * 2 + 2 * W] = 0;
    write_file(path, b, size);
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    if (d)
        CHECK_ERR(data_check_vocab(d, 100, NULL, err, sizeof err), err, path, NULL,
                  "token 6 begins window 2 of preference pairs but no record");
    data_close(d);
    b[64 + N * 2 + 2 * W] = DATA_START;
    static const struct { uint64_t flags, window, count; const char *want; } bad[] = {
        {DATA_PAIRED, W, N, "preference pairs (header flag 1) without info bytes"},
        {DATA_HAS_INFO | DATA_PAIRED, 0, N, "preference pairs (header flag 1) without a window"},
        {DATA_HAS_INFO | DATA_PAIRED, W, N - 1, "preference pairs in 12 tokens, not whole windows of 3 and one"},
        {DATA_HAS_INFO | DATA_PAIRED, W, N - W, "preference pairs in 3 windows, an odd number: a pair is two"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        unsigned char *h = alloc_zeroed(64 + N * 3);
        memcpy(h, b, 64);
        for (int i = 0; i < 8; i++)
            h[16 + i] = (unsigned char)(bad[k].count >> 8 * i), h[24 + i] = (unsigned char)(bad[k].flags >> 8 * i),
            h[32 + i] = (unsigned char)(bad[k].window >> 8 * i);
        write_file(path, h, 64 + bad[k].count * (bad[k].flags & DATA_HAS_INFO ? 3 : 2));
        CHECK_ERR(data_open(&d, path, err, sizeof err), err, path, NULL, bad[k].want);
    }
    // The writer refuses pairs it could not mark: without info bytes, or without a window.
    CHECK_OK(data_writer_open(&w, path, 2, false, err, sizeof err), err);
    data_writer_pairs(w);
    CHECK_ERR(data_writer_close(w, W, 1, err, sizeof err), err, path, NULL,
              "preference pairs need info bytes and a window");
    CHECK_OK(data_writer_open(&w, path, 2, true, err, sizeof err), err);
    data_writer_pairs(w);
    CHECK_ERR(data_writer_close(w, 0, 1, err, sizeof err), err, path, NULL,
              "preference pairs need info bytes and a window");
}

// The feed of a plan that reads pairs (runtime/feed.c): a plan of the three batch inputs
// alone (micro_batch rows of seq 4, accum 2, target_count i32[2], without pairs i32[1]), on
// the cpu backend, over a paired file whose window k holds tokens 10k .. 10k+3 and trains
// 1 + k % 3 of them.
enum { FS = 4, FMB = 4 };

static const char *feed_plan(bool pairs, int micro_batch) {
    const char *path = tpath(pairs ? "pairs.plan" : "plain.plan");
    int rows = 4 * FS * micro_batch;   // each of tokens and targets, bytes
    write_text(path, fmt("ftc-plan %d\nmodel feed\nseq %d\nmicro_batch %d\naccum 2\nvocab 128\n%s"
                         "precision fp32\noptimizer adamw lr=0.1 beta1=0.9 beta2=0.999 eps=1e-08 weight_decay=0\n"
                         "arena device %d device\nbuffers 3\n"
                         "buffer 0 tokens io device 0 %d i32 %dx%d 0 0 kind=input role=tokens\n"
                         "buffer 1 targets io device %d %d i32 %dx%d 0 0 kind=input role=targets\n"
                         "buffer 2 count io device %d %d i32 %d 0 0 kind=input role=target_count\n"
                         "phase forward 0\nphase backward 0\nphase optimizer 0\nend\n", PLAN_VERSION, FS,
                         micro_batch, pairs ? "pairs 1\n" : "", 2 * rows + 8, rows, micro_batch, FS, rows, rows,
                         micro_batch, FS, 2 * rows, pairs ? 8 : 4, pairs ? 2 : 1));
    return path;
}

// A token file of `pairs` pairs (paired unless not), windows of FS as above.
static const char *feed_file(const char *name, int pairs, bool paired) {
    const char *path = tpath(name);
    char err[512] = "";
    DataWriter *w = NULL;
    CHECK_OK(data_writer_open(&w, path, 2, true, err, sizeof err), err);
    if (!w)
        return path;
    if (paired)
        data_writer_pairs(w);
    for (int k = 0; k < 2 * pairs; k++)
        for (int i = 0; i < FS; i++) {
            int32_t id = 10 * k + i;
            uint8_t info = i == 0 ? DATA_START : i <= 1 + k % 3 ? DATA_TRAIN : 0;
            CHECK_OK(data_writer_put(w, &id, &info, 1, err, sizeof err), err);
        }
    int32_t last = 0;
    uint8_t start = DATA_START;
    CHECK_OK(data_writer_put(w, &last, &start, 1, err, sizeof err), err);
    CHECK_OK(data_writer_close(w, FS, (uint64_t)pairs, err, sizeof err), err);
    return path;
}

// Rows 2j and 2j+1 of every micro-batch are one pair's chosen and rejected windows, in the
// seeded order of pairs; the count is the step's pairs and their chosen rows' trained
// targets; eval rows past the file's end count no pair; a paired file and a plan without
// pairs (and the other way round), and an odd micro-batch, are refused.
static void test_feed_pairs(void) {
    char err[512] = "";
    Plan *p = NULL;
    CHECK_OK(plan_load(&p, feed_plan(true, FMB), err, sizeof err), err);
    if (!p)
        return;
    Backend *be = rt_cpu_backend(), *host = rt_cpu_backend();
    Exec x;
    CHECK_OK(rt_exec_init(&x, p, be, host, LAYOUT_UNPLANNED, err, sizeof err), err);
    Feed f = {0};
    CHECK_OK(rt_feed_open(p, feed_file("train.tok", 4, true), &f.d, &f.nwin, err, sizeof err), err);
    CHECK_OK(rt_feed_open(p, feed_file("eval.tok", 3, true), &f.eval, &f.eval_nwin, err, sizeof err), err);
    CHECK(f.nwin == 8 && f.eval_nwin == 6 && rt_feed_stage(&f, p));
    rt_feed_shuffle(&f, p, 42);
    uint64_t want[4];
    data_shuffle(want, 4, 42);   // the order is over the pairs
    CHECK(memcmp(f.order, want, sizeof want) == 0);
    CHECK_OK(rt_feed_count(&x, &f, 0, err, sizeof err), err);
    // 2 micro-batches of 4 rows: 4 pairs, every window: the chosen 0, 2, 4, 6 train 1 + 3 + 2 + 1,
    // the rejected 1, 3, 5, 7 train 2 + 1 + 3 + 2
    CHECK(f.pairs == 4 && f.chosen == 7 && f.count == 7 + 8);
    int32_t tokens[FMB * FS], targets[FMB * FS], count[2];
    for (uint64_t first = 0; first < 8; first += FMB) {
        CHECK_OK(rt_feed_batch(&x, &f, first, err, sizeof err), err);
        rt_read_raw(&x, plan_role(p, PR_TOKENS)->id, tokens);
        rt_read_raw(&x, plan_role(p, PR_TARGET_COUNT)->id, count);
        CHECK(count[0] == 4 && count[1] == 7);
        for (int b = 0; b < FMB; b++)
            CHECKF(tokens[b * FS] == 10 * (int32_t)(2 * want[(first + (uint64_t)b) / 2] + (uint64_t)b % 2),
                   "row %llu: window %d", (unsigned long long)first + (uint64_t)b, tokens[b * FS] / 10);
    }
    int64_t n = 0;
    CHECK_OK(rt_feed_eval_batch(&x, &f, 4, &n, err, sizeof err), err);
    rt_read_raw(&x, plan_role(p, PR_TARGETS)->id, targets);
    rt_read_raw(&x, plan_role(p, PR_TARGET_COUNT)->id, count);
    CHECK(n == 1 && count[0] == 1 && count[1] == 2);   // pair 2 alone: window 4 trains 2
    for (int i = 2 * FS; i < FMB * FS; i++)
        CHECK(targets[i] == -100);
    rt_feed_close(&f);
    // The refusals, each naming the file first.
#define CHECK_REFUSED(rc, file, fragment)                                                          \
    CHECKF((rc) == -1 && strncmp(err, file, strlen(file)) == 0 && strstr(err, fragment), "%s", err)
    DataFile *d = NULL;
    uint64_t nw;
    const char *plain = feed_file("plain.tok", 2, false), *paired = tpath("train.tok");
    CHECK_REFUSED(rt_feed_open(p, plain, &d, &nw, err, sizeof err), plain,
                  " holds no preference pairs, but the plan trains on pairs (a preference loss)");
    p->micro_batch = 3;
    CHECK_REFUSED(rt_feed_open(p, paired, &d, &nw, err, sizeof err), paired,
                  ": the plan reads preference pairs, two rows each, but its micro-batch is 3 rows");
    Feed g = {0};   // a feed opened, then fed to a plan of odd rows: refused, no pair split
    p->micro_batch = 4;
    CHECK_OK(rt_feed_open(p, paired, &g.d, &g.nwin, err, sizeof err), err);
    p->micro_batch = 3;
    CHECK(rt_feed_stage(&g, p));
    rt_feed_shuffle(&g, p, 1);
    CHECK_REFUSED(rt_feed_batch(&x, &g, 0, err, sizeof err), paired, "its micro-batch is 3 rows");
    rt_feed_close(&g);
    rt_exec_free(&x);
    be->destroy(be), host->destroy(host);
    plan_free(p);
    CHECK_OK(plan_load(&p, feed_plan(false, FMB), err, sizeof err), err);
    if (p)
        CHECK_REFUSED(rt_feed_open(p, paired, &d, &nw, err, sizeof err), paired,
                      " holds preference pairs; train it with a preference loss (dpo, ipo, orpo, simpo)");
    plan_free(p);
#undef CHECK_REFUSED
}

static void test_data_shuffle(void) {
    uint64_t a[1000], b[1000];
    data_shuffle(a, 1000, 7);
    data_shuffle(b, 1000, 7);
    CHECK(memcmp(a, b, sizeof a) == 0);
    unsigned char seen[1000] = {0};
    uint64_t weighted = 0;
    for (int i = 0; i < 1000; i++) {
        CHECK(a[i] < 1000 && !seen[a[i]]);
        if (a[i] < 1000)
            seen[a[i]] = 1;
        weighted += (uint64_t)i * a[i];
    }
    // Pinned values, computed by an independent implementation of the documented algorithm.
    CHECK(weighted == 251193576 && a[0] == 426 && a[1] == 57 && a[4] == 134);
    static const uint64_t want42[10] = {0, 9, 5, 8, 6, 4, 7, 2, 1, 3};
    static const uint64_t want0[10] = {6, 3, 2, 9, 8, 1, 4, 7, 0, 5};
    data_shuffle(a, 10, 42);
    CHECK(memcmp(a, want42, sizeof want42) == 0);
    data_shuffle(a, 10, 0);
    CHECK(memcmp(a, want0, sizeof want0) == 0);
    data_shuffle(b, 10, 43);
    CHECK(memcmp(a, b, 10 * sizeof a[0]) != 0);
    a[0] = 99;
    data_shuffle(a, 1, 5);
    CHECK(a[0] == 0);
    data_shuffle(a, 0, 5);
}

static void test_data_bad_files(void) {
    static const unsigned char tokens[] = {1, 0, 2, 0, 3, 0, 4, 0};
    static const struct {
        const char *magic;
        uint32_t version, width;
        uint64_t count, reserved;
        size_t payload;
        const char *fragment;
    } cases[] = {
        {"FTCTOKEM", 1, 2, 4, 0, 8, "not an ftc token file (no \"FTCTOKEN\" magic"},
        {"FTCTOKEN", 3, 2, 4, 0, 8, "token file version 3, this build reads versions 1 and 2"},
        {"FTCTOKEN", 0, 2, 4, 0, 8, "token file version 0"},
        {"FTCTOKEN", 1, 3, 4, 0, 8, "3 bytes per token, must be 2 or 4"},
        {"FTCTOKEN", 1, 1, 4, 0, 8, "1 bytes per token, must be 2 or 4"},
        {"FTCTOKEN", 1, 2, 4, 7, 8, "reserved header field is 7, must be 0"},
        {"FTCTOKEN", 1, 2, 10, 0, 8,
         "header says 10 tokens of 2 bytes, but 8 bytes follow the header (truncated"},
        {"FTCTOKEN", 1, 2, 3, 0, 8, "header says 3 tokens of 2 bytes, but 8 bytes follow"},
        {"FTCTOKEN", 1, 4, 4, 0, 8, "header says 4 tokens of 4 bytes, but 8 bytes follow"},
        {"FTCTOKEN", 1, 4, UINT64_MAX / 2, 0, 8, "header says 9223372036854775807 tokens"},
    };
    const char *path = tpath("bad.tok");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_tok(path, cases[i].magic, cases[i].version, cases[i].width, cases[i].count,
                  cases[i].reserved, tokens, cases[i].payload);
        char err[512] = "";
        DataFile *d = (DataFile *)1;
        CHECK_ERR(data_open(&d, path, err, sizeof err), err, path, NULL, cases[i].fragment);
        CHECK(d == NULL);
    }
    char err[512] = "";
    DataFile *d;
    write_file(path, "FTCTOKEN\1\0", 10);
    CHECK_ERR(data_open(&d, path, err, sizeof err), err, path, NULL,
              "file is 10 bytes, shorter than the 32-byte token file header");
    const char *missing = tpath("missing.tok");
    CHECK_ERR(data_open(&d, missing, err, sizeof err), err, missing, NULL,
              "cannot open: No such file or directory");
    CHECK_ERR(data_open(&d, case_dir, err, sizeof err), err, case_dir, NULL, "not a regular file");
    // An empty token file is well formed but has no window.
    write_tok(path, "FTCTOKEN", 1, 2, 0, 0, NULL, 0);
    CHECK_OK(data_open(&d, path, err, sizeof err), err);
    uint64_t n;
    CHECK(d && data_count(d) == 0);
    if (d)
        CHECK_ERR(data_window_count(d, 1, &n, err, sizeof err), err, path, NULL,
                  "holds 0 tokens, fewer than one window of seq+1 = 2 tokens");
    data_close(d);
}

static void test_data_convert_errors(void) {
    char err[512] = "";
    const char *in = tpath("in.bin"), *out = tpath("out.tok");
    uint64_t n = 77;
    write_file(in, "", 0);
    CHECK_ERR(data_convert(in, out, DATA_BYTES, &n, err, sizeof err), err, in, NULL,
              "is empty, there are no tokens to convert");
    write_file(in, "abc", 3);
    CHECK_ERR(data_convert(in, out, DATA_U16, &n, err, sizeof err), err, in, NULL,
              "is 3 bytes, not a multiple of 2 (raw uint16 tokens)");
    write_file(in, "abcdef", 6);
    CHECK_ERR(data_convert(in, out, DATA_U32, &n, err, sizeof err), err, in, NULL,
              "is 6 bytes, not a multiple of 4 (raw uint32 tokens)");
    CHECK_ERR(data_convert(in, out, (DataMode)7, &n, err, sizeof err), err, in, NULL,
              "invalid conversion mode 7");
    CHECK_ERR(data_convert(in, out, (DataMode)-1, &n, err, sizeof err), err, in, NULL,
              "invalid conversion mode -1");
    const char *missing = tpath("missing.bin");
    CHECK_ERR(data_convert(missing, out, DATA_BYTES, &n, err, sizeof err), err, missing, NULL,
              "cannot open: No such file or directory");
    CHECK_ERR(data_convert(case_dir, out, DATA_BYTES, &n, err, sizeof err), err, case_dir, NULL,
              "cannot read: Is a directory");
    const char *nodir = tpath("no/such/out.tok");
    CHECK_ERR(data_convert(in, nodir, DATA_U16, &n, err, sizeof err), err, nodir, NULL,
              "cannot create a temporary file: No such file or directory");
    CHECK(n == 77);
    CHECK(count_entries(case_dir) == 1); // only in.bin: no output, no temporary file

    const char *taken = tpath("taken");
    mkdir(taken, 0755);
    write_text(fmt("%s/keep", taken), "x");
    CHECK_ERR(data_convert(in, taken, DATA_U16, &n, err, sizeof err), err, taken, NULL,
              "cannot replace: ");

    unsigned char *big = alloc_zeroed(1 << 16);
    write_file(in, big, 1 << 16);
    limit_file_size(4096);
    int rc = data_convert(in, out, DATA_BYTES, &n, err, sizeof err);
    limit_file_size(0);
    CHECK_ERR(rc, err, out, NULL, "cannot write: File too large");
    CHECK(count_entries(case_dir) == 2); // in.bin and taken

    // Converting over an existing output replaces it; NULL n_tokens is allowed.
    write_file(in, "ab", 2);
    CHECK_OK(data_convert(in, out, DATA_BYTES, NULL, err, sizeof err), err);
    write_file(in, "abcd", 4);
    CHECK_OK(data_convert(in, out, DATA_U16, &n, err, sizeof err), err);
    CHECK(n == 2);
    DataFile *d = NULL;
    CHECK_OK(data_open(&d, out, err, sizeof err), err);
    CHECK(d && data_count(d) == 2);
    data_close(d);
}

// ---------------------------------------------------------------------------------------------

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "%s/test_io.XXXXXX",
             getenv("TMPDIR") && strlen(getenv("TMPDIR")) < 40 ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        fprintf(stderr, "test_io: mkdtemp: %s\n", strerror(errno));
        return 2;
    }
    run("init_split", test_init_split);
    run("st_roundtrip", test_st_roundtrip);
    run("st_write_layout", test_st_write_layout);
    run("st_overwrite", test_st_overwrite);
    run("st_sharded", test_st_sharded);
    run("st_write_model", test_st_write_model);
    run("st_directory_single", test_st_directory_single);
    run("st_shard_link_outside", test_st_shard_link_outside);
    run("fifo_inputs", test_fifo_inputs);
    for (bad_st_at = 0; bad_st_at < N_BAD_ST; bad_st_at++)
        run(BAD_ST[bad_st_at].name, test_st_bad);
    run("st_bad_exact_message", test_st_bad_exact_message);
    run("st_bad_short_file", test_st_bad_short_file);
    run("st_bad_paths", test_st_bad_paths);
    run("st_bad_shard_duplicate", test_st_bad_shard_duplicate);
    run("st_bad_index_absent", test_st_bad_index_absent);
    run("st_bad_index_wrong_shard", test_st_bad_index_wrong_shard);
    run("st_bad_index_unlisted", test_st_bad_index_unlisted);
    run("st_bad_index_shard_malformed", test_st_bad_index_shard_malformed);
    run("st_bad_index_json", test_st_bad_index_json);
    run("st_read_errors", test_st_read_errors);
    run("st_write_errors", test_st_write_errors);
    run("data_convert_bytes", test_data_convert_bytes);
    run("data_convert_u16", test_data_convert_u16);
    run("data_convert_u32", test_data_convert_u32);
    run("data_writer_info", test_data_writer_info);
    run("data_windows", test_data_windows);
    run("data_token_over_vocab", test_data_token_over_vocab);
    run("data_paired", test_data_paired);
    run("feed_pairs", test_feed_pairs);
    run("data_shuffle", test_data_shuffle);
    run("data_bad_files", test_data_bad_files);
    run("data_convert_errors", test_data_convert_errors);
    nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE();
}
