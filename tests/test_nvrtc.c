// test_nvrtc.c: tests of runtime/nvrtc.c — NVRTC loaded with dlopen, CUBINs and ptxas'
// resource report, the on-disk kernel cache.
//
// One line per case (tests/check.h), then "N passed, M failed". The cases that need no NVRTC
// run first (the ELF reader, the default cache directory, a bad $FTC_NVRTC in a child
// process); then, where NVRTC cannot be loaded, the test prints why and exits 77 (ctest
// reports a skip). No GPU is needed: NVRTC compiles to SASS without a driver. Covers: CUBINs
// for sm_80 and sm_90 (ELF magic, EM_CUDA, the SM in e_flags), the report of a bf16 kernel
// and a __shared__ reduction (registers, smem, barriers, no spills), spills and stack frames
// of a register-starved kernel, compile errors naming the source and line, bad arguments,
// cache hits (timed), misses on a changed source, arch or option, truncated and corrupted
// entries rebuilt, the default directory, an unwritable one, threads racing on one entry.
// The caches live in a mkdtemp directory under $TMPDIR (or /tmp), removed at the end.
//
// Build and run (one line):
//   gcc -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Iruntime -Itests runtime/nvrtc.c
//       runtime/fileio.c tests/test_nvrtc.c -ldl -lpthread -o /tmp/test_nvrtc && /tmp/test_nvrtc
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700 // mkdtemp, nftw, truncate
#endif

#include "nvrtc.h"

#include "check.h"

#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// Two kernels in the subset ftc emits: bf16 storage as unsigned short (no cuda_bf16.h), and
// a block reduction through __shared__ memory. Line numbers matter to compile_error.
static const char *KERNELS =
    "extern \"C\" __global__ void add_bf16(const unsigned short *a, const unsigned short *b,\n"
    "                                      unsigned short *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n) return;\n"
    "    float s = __uint_as_float((unsigned)a[i] << 16) + __uint_as_float((unsigned)b[i] << 16);\n"
    "    unsigned u = __float_as_uint(s);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) { y[i] = 0x7fff; return; }\n"
    "    u += 0x7fffu + ((u >> 16) & 1u);\n"
    "    y[i] = (unsigned short)(u >> 16);\n"
    "}\n"
    "extern \"C\" __global__ void block_sum(const float *x, float *out) {\n"
    "    __shared__ float s[256];\n"
    "    s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];\n"
    "    __syncthreads();\n"
    "    for (int k = 128; k > 0; k >>= 1) {\n"
    "        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] = s[0];\n"
    "}\n";

static char cache_root[512];   // the mkdtemp directory; the cache is a subdirectory of it
static char cache_dir[600];

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static const NvrtcKernel *find_kernel(const NvrtcResult *r, const char *name) {
    for (int i = 0; i < r->nkernels; i++)
        if (strcmp(r->kernels[i].name, name) == 0)
            return &r->kernels[i];
    return NULL;
}

// A 64-byte ELF header with the given ABI version and e_flags, for the reader's own cases.
static void fake_elf(unsigned char *b, int abi, uint32_t flags) {
    memset(b, 0, 64);
    memcpy(b, "\x7f" "ELF", 4);
    b[4] = 2, b[5] = 1, b[6] = 1, b[7] = abi >= 8 ? 0x41 : 0x33, b[8] = (unsigned char)abi;
    b[18] = 190;
    for (int i = 0; i < 4; i++)
        b[48 + i] = (unsigned char)(flags >> (8 * i));
}

static void cubin_sm_reader(void) {
    unsigned char b[64];
    fake_elf(b, 8, 0x6005a04);   // what NVRTC 13 writes for sm_90
    CHECK_EQ(90, rt_nvrtc_cubin_sm(b, sizeof b));
    fake_elf(b, 8, 0x6005004);
    CHECK_EQ(80, rt_nvrtc_cubin_sm(b, sizeof b));
    fake_elf(b, 7, 0x500550);    // the older layout: the SM in the low byte
    CHECK_EQ(80, rt_nvrtc_cubin_sm(b, sizeof b));
    CHECK_EQ(-1, rt_nvrtc_cubin_sm(b, 63));
    CHECK_EQ(-1, rt_nvrtc_cubin_sm(NULL, 64));
    b[18] = 62;                  // EM_X86_64
    CHECK_EQ(-1, rt_nvrtc_cubin_sm(b, sizeof b));
    b[18] = 190, b[0] = 0;
    CHECK_EQ(-1, rt_nvrtc_cubin_sm(b, sizeof b));
}

// Restores (or unsets) an environment variable saved by save_env.
static void restore_env(const char *name, const char *saved) {
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
}

static char *save_env(const char *name) {
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

static void default_cache_dir(void) {
    char *ftc = save_env("FTC_CACHE_DIR"), *xdg = save_env("XDG_CACHE_HOME"),
         *home = save_env("HOME");
    char buf[512];
    setenv("FTC_CACHE_DIR", "/a/ftc", 1);
    setenv("XDG_CACHE_HOME", "/b/xdg", 1);
    setenv("HOME", "/c/home", 1);
    CHECK_EQ(0, rt_nvrtc_cache_dir(buf, sizeof buf));
    CHECK_STR("/a/ftc/nvrtc", buf);
    unsetenv("FTC_CACHE_DIR");
    CHECK_EQ(0, rt_nvrtc_cache_dir(buf, sizeof buf));
    CHECK_STR("/b/xdg/ftc/nvrtc", buf);
    setenv("XDG_CACHE_HOME", "", 1);   // empty counts as unset, as the XDG spec says
    CHECK_EQ(0, rt_nvrtc_cache_dir(buf, sizeof buf));
    CHECK_STR("/c/home/.cache/ftc/nvrtc", buf);
    CHECK_EQ(-1, rt_nvrtc_cache_dir(buf, 8));   // does not fit
    unsetenv("HOME");
    unsetenv("XDG_CACHE_HOME");
    CHECK_EQ(-1, rt_nvrtc_cache_dir(buf, sizeof buf));
    restore_env("FTC_CACHE_DIR", ftc), restore_env("XDG_CACHE_HOME", xdg);
    restore_env("HOME", home);
    free(ftc), free(xdg), free(home);
}

// In a child (the library loads once per process): a $FTC_NVRTC that does not load makes
// NVRTC unavailable, with the path named, rather than falling back to another NVRTC.
static void bad_ftc_nvrtc(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("FTC_NVRTC", "/nonexistent/libnvrtc.so.99", 1);
        NvrtcInfo info = {.major = -5};
        int bad = 0;
        bad |= rt_nvrtc_available(&info) << 0;
        bad |= (info.major != -5) << 1;
        bad |= !strstr(rt_nvrtc_load_error(), "/nonexistent/libnvrtc.so.99") << 2;
        bad |= !strstr(rt_nvrtc_load_error(), "$FTC_NVRTC") << 3;
        NvrtcResult r;
        char err[2048];
        bad |= (rt_nvrtc_compile(KERNELS, "k.cu", "sm_90", NULL, 0, &r, err, sizeof err) != -1)
               << 4;
        bad |= !strstr(err, "/nonexistent/libnvrtc.so.99") << 5;
        if (bad)
            printf("  child: bits %#x; err: %s\n", bad, err);
        _exit(bad ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Compiles KERNELS for arch and checks the CUBIN and the report.
static void compile_for(const char *arch, int sm) {
    NvrtcResult r;
    char err[2048];
    double t0 = now_ms();
    int rc = rt_nvrtc_compile(KERNELS, "kernels.cu", arch, NULL, 0, &r, err, sizeof err);
    double ms = now_ms() - t0;
    CHECKF(rc == 0, "%s: %s", arch, err);
    if (rc != 0)
        return;
    printf("  %s: %zu-byte CUBIN in %.1f ms\n", arch, r.cubin_bytes, ms);
    CHECK(r.cubin_bytes > 64);
    CHECK(memcmp(r.cubin, "\x7f" "ELF", 4) == 0);
    CHECK_EQ(190, r.cubin[18] | r.cubin[19] << 8);   // e_machine: EM_CUDA
    CHECK_EQ(sm, rt_nvrtc_cubin_sm(r.cubin, r.cubin_bytes));
    CHECK(!r.cache_hit);
    CHECK(strstr(r.log, "ptxas info") != NULL);
    CHECK_EQ(2, r.nkernels);
    const NvrtcKernel *add = find_kernel(&r, "add_bf16"), *sum = find_kernel(&r, "block_sum");
    CHECK(add && sum);
    if (!add || !sum)
        return;
    for (int i = 0; i < r.nkernels; i++) {
        const NvrtcKernel *k = &r.kernels[i];
        printf("  %s %s: %d registers, %d barriers, %lld smem, %lld cmem, %lld stack, "
               "%lld/%lld spill bytes\n", arch, k->name, k->registers, k->barriers,
               (long long)k->smem_bytes, (long long)k->const_bytes, (long long)k->stack_bytes,
               (long long)k->spill_store_bytes, (long long)k->spill_load_bytes);
        CHECK(k->registers > 0 && k->registers <= 255);
        CHECK_EQ(0, k->spill_store_bytes);
        CHECK_EQ(0, k->spill_load_bytes);
        CHECK_EQ(0, k->stack_bytes);
        CHECK_EQ(0, k->stack_total_bytes);
    }
    CHECK_EQ(0, add->smem_bytes);
    CHECK_EQ(256 * 4, sum->smem_bytes);
    CHECK_EQ(0, add->barriers);
    CHECK_EQ(1, sum->barriers);
    if (sm == 80)   // ptxas 13 prints the parameter bank for sm_80 only
        CHECK(add->const_bytes > 0 && sum->const_bytes > 0);
    rt_nvrtc_result_free(&r);
    CHECK(r.cubin == NULL && r.kernels == NULL && r.log == NULL);
}

static void compile_sm80(void) {
    compile_for("sm_80", 80);
}

static void compile_sm90(void) {
    compile_for("sm_90", 90);
}

// A register-starved kernel calling a non-inlined function: spills, a stack frame, the
// module's globals and constants; the callee is not a kernel.
static void spills_and_stack(void) {
    static const char *src =
        "__device__ int counter;\n"
        "__constant__ float scale[4];\n"
        "__device__ __noinline__ float helper(const float *p, int n) {\n"
        "    float loc[32];\n"
        "    for (int i = 0; i < 32; i++) loc[i] = p[i * n];\n"
        "    return loc[n & 31] + loc[(n >> 5) & 31];\n"
        "}\n"
        "extern \"C\" __global__ void starved(float *y, int n) {\n"
        "    float a[24];\n"
        "    for (int i = 0; i < 24; i++) a[i] = y[i * n];\n"
        "    float s = 0;\n"
        "    for (int j = 0; j < 24; j++)\n"
        "        for (int i = 0; i < 24; i++) s += a[i] * a[(i + j) % 24];\n"
        "    y[threadIdx.x] = s * scale[0] + helper(y, n);\n"
        "    atomicAdd(&counter, 1);\n"
        "}\n";
    const char *opts[] = {"-maxrregcount=24"};
    NvrtcResult r;
    char err[2048];
    int rc = rt_nvrtc_compile(src, "starved.cu", "sm_80", opts, 1, &r, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc != 0)
        return;
    CHECK_EQ(1, r.nkernels);   // helper has "Function properties" lines but is no kernel
    const NvrtcKernel *k = find_kernel(&r, "starved");
    CHECK(k != NULL);
    if (k) {
        printf("  starved: %d registers, %lld stack (%lld with callees), %lld/%lld spill bytes;"
               " module %lld gmem, %lld cmem\n", k->registers, (long long)k->stack_bytes,
               (long long)k->stack_total_bytes, (long long)k->spill_store_bytes,
               (long long)k->spill_load_bytes, (long long)r.gmem_bytes, (long long)r.cmem_bytes);
        CHECK(k->registers > 0 && k->registers <= 24);
        CHECK(k->spill_store_bytes > 0 && k->spill_load_bytes > 0);
        CHECK(k->stack_bytes > 0);
        CHECK(k->stack_total_bytes >= k->stack_bytes);
    }
    CHECK_EQ(4, r.gmem_bytes);      // counter
    CHECK(r.cmem_bytes >= 16);      // scale, and on sm_80 the compiler's own constants
    rt_nvrtc_result_free(&r);
}

static void compile_error(void) {
    static const char *src =
        "extern \"C\" __global__ void broken(float *y) {\n"
        "    y[0] = 1.0f;\n"
        "    y[1] = undeclared_thing;\n"
        "}\n";
    NvrtcResult r;
    char err[2048];
    CHECK_EQ(-1, rt_nvrtc_compile(src, "broken_kernel.cu", "sm_90", NULL, 0, &r, err,
                                  sizeof err));
    printf("  err: %.*s\n", (int)strcspn(err, "\n"), err);
    CHECKF(strstr(err, "broken_kernel.cu(3)") != NULL, "no source and line in: %s", err);
    CHECKF(strstr(err, "undeclared_thing") != NULL, "no identifier in: %s", err);
    CHECKF(strstr(err, "NVRTC_ERROR_COMPILATION") != NULL, "no NVRTC error in: %s", err);
    CHECK(r.log && strstr(r.log, "error"));
    CHECK(r.cubin == NULL && r.nkernels == 0);
    rt_nvrtc_result_free(&r);
    // The cached path reports the same and writes nothing.
    CHECK_EQ(-1, rt_nvrtc_compile_cached(cache_dir, src, "broken_kernel.cu", "sm_90", NULL, 0,
                                         &r, err, sizeof err));
    CHECK(strstr(err, "broken_kernel.cu(3)") != NULL);
    rt_nvrtc_result_free(&r);
    // A small error buffer is filled, truncated, and terminated.
    char small[24];
    CHECK_EQ(-1, rt_nvrtc_compile(src, "broken_kernel.cu", "sm_90", NULL, 0, &r, small,
                                  sizeof small));
    CHECK_EQ(sizeof small - 1, strlen(small));
    rt_nvrtc_result_free(&r);
}

static void bad_arguments(void) {
    NvrtcResult r;
    char err[512];
    CHECK_EQ(-1, rt_nvrtc_compile(KERNELS, "k.cu", "compute_90", NULL, 0, &r, err, sizeof err));
    CHECKF(strstr(err, "compute_90") != NULL, "%s", err);
    CHECK_EQ(-1, rt_nvrtc_compile(KERNELS, "k.cu", NULL, NULL, 0, &r, err, sizeof err));
    CHECK_EQ(-1, rt_nvrtc_compile(KERNELS, "k.cu", "sm_", NULL, 0, &r, err, sizeof err));
    CHECK_EQ(-1, rt_nvrtc_compile(NULL, "k.cu", "sm_90", NULL, 0, &r, err, sizeof err));
    CHECK_EQ(-1, rt_nvrtc_compile(KERNELS, "k.cu", "sm_90", NULL, 2, &r, err, sizeof err));
    // An option NVRTC rejects: its own words reach err.
    const char *opts[] = {"--no-such-option"};
    CHECK_EQ(-1, rt_nvrtc_compile(KERNELS, "k.cu", "sm_90", opts, 1, &r, err, sizeof err));
    CHECKF(strstr(err, "--no-such-option") && strstr(err, "k.cu"), "%s", err);
    rt_nvrtc_result_free(&r);
}

static void replace_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

// One cached compile; returns its hit flag (-1 on failure) and the key.
static int cached(const char *src, const char *arch, const char *const *opts, int nopts,
                  uint64_t *key, double *ms) {
    NvrtcResult r;
    char err[2048];
    double t0 = now_ms();
    int rc = rt_nvrtc_compile_cached(cache_dir, src, "kernels.cu", arch, opts, nopts, &r, err,
                                     sizeof err);
    if (ms)
        *ms = now_ms() - t0;
    CHECKF(rc == 0, "%s", err);
    CHECKF(err[0] == '\0', "note: %s", err);
    if (rc != 0)
        return -1;
    CHECK(rt_nvrtc_cubin_sm(r.cubin, r.cubin_bytes) == atoi(arch + 3));
    CHECK_EQ(2, r.nkernels);
    if (key)
        *key = r.key;
    int hit = r.cache_hit;
    rt_nvrtc_result_free(&r);
    return hit;
}

// A copy of log without ptxas' "Compile time = 3.5 ms" lines, which differ run to run.
static char *without_timings(const char *log) {
    char *out = calloc(strlen(log) + 1, 1), *o = out;
    for (const char *p = log; *p;) {
        size_t n = strcspn(p, "\n");
        n += p[n] == '\n';
        const char *hit = strstr(p, "Compile time =");
        if (!hit || hit >= p + n)
            memcpy(o, p, n), o += n;
        p += n;
    }
    return out;
}

static void cache_hits_and_misses(void) {
    double cold, warm;
    uint64_t key = 0, key2 = 0;
    CHECK_EQ(0, cached(KERNELS, "sm_90", NULL, 0, &key, &cold));   // the dir is created here
    CHECK_EQ(1, cached(KERNELS, "sm_90", NULL, 0, &key2, &warm));
    CHECK(key == key2 && key != 0);
    printf("  sm_90: cold %.1f ms, hit %.3f ms\n", cold, warm);
    CHECKF(warm < 10.0, "a hit took %.3f ms", warm);

    // The hit returns what the compile returned.
    NvrtcResult a, b;
    char err[512];
    CHECK_EQ(0, rt_nvrtc_compile(KERNELS, "kernels.cu", "sm_90", NULL, 0, &a, err, sizeof err));
    CHECK_EQ(0, rt_nvrtc_compile_cached(cache_dir, KERNELS, "kernels.cu", "sm_90", NULL, 0, &b,
                                        err, sizeof err));
    CHECK(b.cache_hit);
    CHECK_EQ(a.cubin_bytes, b.cubin_bytes);
    CHECK(a.cubin_bytes == b.cubin_bytes && memcmp(a.cubin, b.cubin, a.cubin_bytes) == 0);
    char *log_a = without_timings(a.log), *log_b = without_timings(b.log);
    CHECK_STR(log_a, log_b);
    free(log_a), free(log_b);
    CHECK_EQ(a.nkernels, b.nkernels);
    for (int i = 0; i < a.nkernels && i < b.nkernels; i++) {
        CHECK_STR(a.kernels[i].name, b.kernels[i].name);
        CHECK(memcmp(&a.kernels[i].registers, &b.kernels[i].registers,
                     sizeof(NvrtcKernel) - offsetof(NvrtcKernel, registers)) == 0);
    }
    CHECK_EQ(a.gmem_bytes, b.gmem_bytes);
    CHECK_EQ(a.cmem_bytes, b.cmem_bytes);
    rt_nvrtc_result_free(&a), rt_nvrtc_result_free(&b);

    // Misses: another arch, another source, another option; each then hits.
    uint64_t k80, ksrc, kopt;
    CHECK_EQ(0, cached(KERNELS, "sm_80", NULL, 0, &k80, NULL));
    CHECK_EQ(1, cached(KERNELS, "sm_80", NULL, 0, NULL, NULL));
    char *edited = malloc(strlen(KERNELS) + 32);
    sprintf(edited, "%s// edited\n", KERNELS);
    CHECK_EQ(0, cached(edited, "sm_90", NULL, 0, &ksrc, NULL));
    CHECK_EQ(1, cached(edited, "sm_90", NULL, 0, NULL, NULL));
    free(edited);
    const char *lineinfo[] = {"-lineinfo"};
    CHECK_EQ(0, cached(KERNELS, "sm_90", lineinfo, 1, &kopt, NULL));
    CHECK_EQ(1, cached(KERNELS, "sm_90", lineinfo, 1, NULL, NULL));
    CHECK(k80 != key && ksrc != key && kopt != key && k80 != ksrc && ksrc != kopt);

    char cubin[700], txt[700];
    snprintf(cubin, sizeof cubin, "%s/%016llx.cubin", cache_dir, (unsigned long long)key);
    snprintf(txt, sizeof txt, "%s/%016llx.txt", cache_dir, (unsigned long long)key);
    struct stat st;
    CHECK(stat(cubin, &st) == 0 && st.st_size > 64);
    off_t whole = st.st_size;
    CHECK(stat(txt, &st) == 0);   // its size varies: ptxas' log has compile times in it
    off_t whole_txt = st.st_size;

    // A truncated CUBIN is compiled again and rewritten whole; then it hits.
    CHECK(truncate(cubin, whole / 2) == 0);
    CHECK_EQ(0, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    CHECK(stat(cubin, &st) == 0 && st.st_size == whole);
    CHECK_EQ(1, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    // Likewise a flipped byte in the CUBIN (the hash in the .txt catches it)...
    replace_byte(cubin, whole / 2);
    CHECK_EQ(0, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    CHECK_EQ(1, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    // ...a truncated .txt, an empty one, and a missing .cubin.
    CHECK(truncate(txt, whole_txt - 3) == 0);
    CHECK_EQ(0, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    CHECK_EQ(1, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));   // rewritten whole
    CHECK(truncate(txt, 0) == 0);
    CHECK_EQ(0, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    CHECK(unlink(cubin) == 0);
    CHECK_EQ(0, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
    CHECK_EQ(1, cached(KERNELS, "sm_90", NULL, 0, NULL, NULL));
}

// cache_dir NULL: the entry lands in $FTC_CACHE_DIR/nvrtc, created with its parents.
static void cache_default_dir(void) {
    char *saved = save_env("FTC_CACHE_DIR");
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/default/x", cache_root);
    setenv("FTC_CACHE_DIR", dir, 1);
    NvrtcResult r;
    char err[1024];
    CHECK_EQ(0, rt_nvrtc_compile_cached(NULL, KERNELS, "kernels.cu", "sm_90", NULL, 0, &r, err,
                                        sizeof err));
    CHECKF(err[0] == '\0', "%s", err);
    CHECK(!r.cache_hit);
    snprintf(path, sizeof path, "%s/nvrtc/%016llx.cubin", dir, (unsigned long long)r.key);
    CHECKF(access(path, R_OK) == 0, "no %s", path);
    rt_nvrtc_result_free(&r);
    CHECK_EQ(0, rt_nvrtc_compile_cached(NULL, KERNELS, "kernels.cu", "sm_90", NULL, 0, &r, err,
                                        sizeof err));
    CHECK(r.cache_hit);
    rt_nvrtc_result_free(&r);
    restore_env("FTC_CACHE_DIR", saved);
    free(saved);
}

// An unwritable cache still compiles, with a note in err.
static void cache_unwritable(void) {
    char file[700];
    snprintf(file, sizeof file, "%s/not-a-dir", cache_root);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    char dir[800];
    snprintf(dir, sizeof dir, "%s/sub", file);
    NvrtcResult r;
    char err[1024];
    CHECK_EQ(0, rt_nvrtc_compile_cached(dir, KERNELS, "kernels.cu", "sm_90", NULL, 0, &r, err,
                                        sizeof err));
    CHECK(r.cubin && !r.cache_hit);
    CHECKF(strstr(err, "cannot create the cache directory") != NULL, "%s", err);
    rt_nvrtc_result_free(&r);
}

static void *race_one(void *arg) {
    NvrtcResult r;
    char err[1024];
    int rc = rt_nvrtc_compile_cached(arg, KERNELS, "kernels.cu", "sm_89", NULL, 0, &r, err,
                                     sizeof err);
    int ok = rc == 0 && err[0] == '\0' && rt_nvrtc_cubin_sm(r.cubin, r.cubin_bytes) == 89;
    rt_nvrtc_result_free(&r);
    return ok ? arg : NULL;
}

// Threads compiling the same entry at once: every one succeeds, the entry is whole after.
static void cache_race(void) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s/race", cache_root);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ(0, pthread_create(&t[i], NULL, race_one, dir));
    for (int i = 0; i < 4; i++) {
        void *ret = NULL;
        CHECK_EQ(0, pthread_join(t[i], &ret));
        CHECK(ret == dir);
    }
    NvrtcResult r;
    char err[1024];
    CHECK_EQ(0, rt_nvrtc_compile_cached(dir, KERNELS, "kernels.cu", "sm_89", NULL, 0, &r, err,
                                        sizeof err));
    CHECK(r.cache_hit);
    rt_nvrtc_result_free(&r);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    RUN(cubin_sm_reader);
    RUN(default_cache_dir);
    RUN(bad_ftc_nvrtc);

    NvrtcInfo info;
    if (!rt_nvrtc_available(&info)) {
        printf("skip: %s\n", rt_nvrtc_load_error());
        return cases_failed_ ? CHECK_DONE() : 77;
    }
    printf("NVRTC %d.%d: %s; include %s\n", info.major, info.minor, info.lib,
           info.include[0] ? info.include : "(none)");

    const char *tmp = getenv("TMPDIR");
    snprintf(cache_root, sizeof cache_root, "%s/ftc-nvrtc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cache_root)) {
        perror(cache_root);
        return 1;
    }
    snprintf(cache_dir, sizeof cache_dir, "%s/a/b/nvrtc", cache_root);   // made by mkdir -p

    RUN(compile_sm80);
    RUN(compile_sm90);
    RUN(spills_and_stack);
    RUN(compile_error);
    RUN(bad_arguments);
    RUN(cache_hits_and_misses);
    RUN(cache_default_dir);
    RUN(cache_unwritable);
    RUN(cache_race);

    nftw(cache_root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE();
}
