// test_emu.c: codegen/cuda/ftc_emu.h, the CUDA execution model on the CPU. Compiles the kernels
// of tests/emu/*.cu with the host compiler exactly as the emu backend does, loads them with
// dlopen and checks each launch against plain C: an elementwise tail on the fast path, a block
// reduction through shared memory and barriers, every warp shuffle and vote on full and partial
// warps, atomics, bf16/f16 rounding against the cpu backend's, the mma.sync emulation against an
// fp32 matmul, synchronisation faults reported instead of hanging, and the cost of a barrier.
//
// Usage: test_emu SRC (the source tree). The compiler is $FTC_CC, else cc; exit 77 when none
// runs.
#include "check.h"
#include "kernels.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// The kernel ABI of codegen/cuda/prelude.cuh, mirrored (checked against ftc_emu_args_bytes).
typedef struct Dim3 {
    unsigned x, y, z;
} Dim3;
typedef struct Args {
    void *p[12];
    long long i[4];
    float f[8];
} Args;
typedef int (*LaunchFn)(const char *name, Dim3 grid, Dim3 block, Args args, char *err,
                        size_t errlen);
typedef struct GroupArgs {
    void *p[64][6];
    long long i[4];
    float f[8];
} GroupArgs;
typedef int (*LaunchGroupFn)(const char *name, Dim3 grid, Dim3 block, const GroupArgs *args,
                             char *err, size_t errlen);

static const char *src_dir;
static char tmp_dir[] = "/tmp/ftc_emu_XXXXXX";
static const char *cc = "cc";
static void *so_kernels, *so_faults;
static LaunchFn launch_kernels, launch_faults;
static char err[2048];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t rng_state = 0x9e3779b9u;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}
// Uniform in [lo, hi).
static float rng_float(float lo, float hi) {
    return lo + (hi - lo) * (float)(rng() >> 8) * (1.0f / 16777216.0f);
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static Dim3 dim3(unsigned x, unsigned y, unsigned z) { return (Dim3){x, y, z}; }

// Runs the shell command `cmd` with its output into `log`; its exit status (-1: did not run).
static int sh(const char *cmd, const char *log) {
    char buf[8192];
    snprintf(buf, sizeof buf, "%s >'%s' 2>&1", cmd, log);
    int rc = system(buf);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

static void print_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        printf("    %s", line);
    fclose(f);
}

// Compiles tests/emu/NAME.cu into TMP/NAME.so with the backend's command line plus `extra`;
// 0 or -1 (having printed the compiler's messages).
static int compile(const char *name, const char *extra, const char *out) {
    char cmd[4096], log[600];
    snprintf(log, sizeof log, "%s/%s.log", tmp_dir, name);
    snprintf(cmd, sizeof cmd,
             "%s -DFTC_EMU -I'%s/codegen/cuda' -I'%s/tests/emu' -x c -O1 -fPIC -shared %s "
             "'%s/tests/emu/%s.cu' -o '%s' -lm",
             cc, src_dir, src_dir, extra, src_dir, name, out);
    if (sh(cmd, log) == 0)
        return 0;
    printf("  %s\n", cmd);
    print_file(log);
    return -1;
}

// Loads TMP/NAME.so and checks its exports; the launcher, or NULL.
static LaunchFn load(const char *path, void **handle) {
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*handle) {
        printf("  dlopen: %s\n", dlerror());
        return NULL;
    }
    const size_t *args_bytes = dlsym(*handle, "ftc_emu_args_bytes");
    const int *n = dlsym(*handle, "ftc_emu_nkernels");
    LaunchFn fn = (LaunchFn)dlsym(*handle, "ftc_emu_launch");
    if (!args_bytes || !n || !fn || !dlsym(*handle, "ftc_emu_kernels")) {
        printf("  %s: missing exports\n", path);
        return NULL;
    }
    const size_t *group_bytes = dlsym(*handle, "ftc_emu_group_args_bytes");
    if (!group_bytes || *group_bytes != sizeof(GroupArgs)) {
        printf("  %s: sizeof(FtcGroupArgs) differs from this test's mirror: update GroupArgs\n", path);
        return NULL;
    }
    if (*args_bytes != sizeof(Args)) {
        printf("  %s: sizeof(FtcArgs) is %zu, this test's mirror %zu: update Args\n", path,
               *args_bytes, sizeof(Args));
        return NULL;
    }
    return fn;
}

// Launches kernel `name` of kernels.cu and expects success.
static int run(const char *name, Dim3 g, Dim3 b, Args a) {
    err[0] = '\0';
    int rc = launch_kernels(name, g, b, a, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", name, err);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// The cases

// The header compiles without a warning (-Wall -Wextra) wherever a kernels.cu may be built.
static void warnings(void) {
    const char *flags[] = {"-std=gnu11 -Wall -Wextra -Werror",
                           "-std=gnu11 -Wall -Wextra -Werror -O2"};
    const char *files[] = {"kernels", "faults"};
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 2; i++) {
            char out[600];
            snprintf(out, sizeof out, "%s/%s_w%d.so", tmp_dir, files[f], i);
            CHECKF(compile(files[f], flags[i], out) == 0, "%s.cu with %s", files[f], flags[i]);
            unlink(out);
        }
}

static void elementwise_tail(void) {
    enum { N = 1000, T = 128, G = (N + T - 1) / T, PAD = G * T };
    float *x = malloc(PAD * sizeof *x), *out = malloc(PAD * sizeof *out);
    for (int i = 0; i < PAD; i++)
        x[i] = rng_float(-4, 4), out[i] = -7.0f;
    Args a = {.p = {out, x}, .i = {N}, .f = {1.5, 0.25}};
    run("k_scale", dim3(G, 1, 1), dim3(T, 1, 1), a);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += bits_of(out[i]) != bits_of(x[i] * 1.5f + 0.25f);
    CHECK_EQ(0, bad);
    for (int i = N; i < PAD; i++)
        bad += out[i] != -7.0f;
    CHECK_EQ(0, bad); // the tail threads wrote nothing
    free(x), free(out);
}

static void block_reduction(void) {
    enum { N = 1000, T = 256, GX = 3, GY = 2, NB = GX * GY };
    float *x = malloc(NB * N * sizeof *x), out[NB];
    for (int i = 0; i < NB * N; i++)
        x[i] = rng_float(-1, 1);
    Args a = {.p = {out, x}};
    // A 2-D grid of 2-D blocks: (64, 4) threads, linear t = x + 64 y.
    run("k_block_sum", dim3(GX, GY, 1), dim3(64, 4, 1), a);
    for (int b = 0; b < NB; b++) {
        // The kernel's order of operations, replayed: bitwise equal.
        float s[T];
        double exact = 0;
        for (int t = 0; t < T; t++) {
            s[t] = 0.0f;
            for (int i = t; i < N; i += T)
                s[t] += x[b * N + i];
        }
        for (int k = T / 2; k > 0; k /= 2)
            for (int t = 0; t < k; t++)
                s[t] += s[t + k];
        for (int i = 0; i < N; i++)
            exact += x[b * N + i];
        CHECKF(bits_of(out[b]) == bits_of(s[0]), "block %d: %.9g, want %.9g", b, out[b], s[0]);
        CHECK_NEAR(out[b], exact, 1e-4, 1e-5);
    }
    free(x);
}

// What a lane reads from lane `src` of its warp (`nexist` lanes exist, all taking part): the
// source's value when it exists, else its own (ftc_emu.h's rule for absent and out-of-range
// lanes; CUDA's for out-of-range ones).
static int readable(int src, int nexist) { return src >= 0 && src < nexist; }

// k_warp on a block of `block` threads (2 blocks), against a lane-by-lane replay.
static void warp_ops_case(Dim3 block) {
    enum { W_F = 8, W_I = 8, G = 2 };
    int n = (int)(block.x * block.y * block.z), stride = G * n;
    float *fo = calloc((size_t)W_F * stride, sizeof *fo);
    int *io = calloc((size_t)W_I * stride, sizeof *io);
    Args a = {.p = {fo, io}};
    if (run("k_warp", dim3(G, 1, 1), block, a) != 0)
        goto done;
    int bad = 0;
    for (int b = 0; b < G; b++)
        for (int w0 = 0; w0 < n; w0 += 32) {
            int ne = n - w0 < 32 ? n - w0 : 32; // lanes that exist
            float v[32], s[32], ns[32], want[W_F][32];
            int wi[W_I][32], si[32], nsi[32];
            for (int l = 0; l < ne; l++)
                v[l] = (float)(((w0 + l) * 7) % 13 + 1);
            // F0: xor butterfly sum. F1: shfl_down sum. F2: shfl_up inclusive scan.
            memcpy(s, v, sizeof v);
            for (int o = 16; o > 0; o /= 2) {
                for (int l = 0; l < ne; l++)
                    ns[l] = s[l] + (readable(l ^ o, ne) ? s[l ^ o] : s[l]);
                memcpy(s, ns, sizeof s);
            }
            memcpy(want[0], s, sizeof s);
            memcpy(s, v, sizeof v);
            for (int o = 16; o > 0; o /= 2) {
                for (int l = 0; l < ne; l++)
                    ns[l] = s[l] + (l + o < 32 && readable(l + o, ne) ? s[l + o] : s[l]);
                memcpy(s, ns, sizeof s);
            }
            memcpy(want[1], s, sizeof s);
            memcpy(s, v, sizeof v);
            for (int o = 1; o < 32; o *= 2) {
                for (int l = 0; l < ne; l++)
                    ns[l] = l >= o ? s[l] + s[l - o] : s[l];
                memcpy(s, ns, sizeof s);
            }
            memcpy(want[2], s, sizeof s);
            // F3: broadcast of lane 5. F4: shfl_down sum in segments of 8.
            for (int l = 0; l < ne; l++)
                want[3][l] = readable(5, ne) ? v[5] : v[l];
            memcpy(s, v, sizeof v);
            for (int o = 4; o > 0; o /= 2) {
                for (int l = 0; l < ne; l++)
                    ns[l] = s[l] + ((l % 8) + o < 8 && readable(l + o, ne) ? s[l + o] : s[l]);
                memcpy(s, ns, sizeof s);
            }
            memcpy(want[4], s, sizeof s);
            // F5: a double from lane ^ 3. F6: srcLane past 31 wraps. F7: xor 20 in segments of
            // 16: the lower segment reads the upper one's own value back, the upper reads down.
            for (int l = 0; l < ne; l++) {
                want[5][l] = readable(l ^ 3, ne) ? v[l ^ 3] * 0.5f : v[l] * 0.5f;
                int s6 = (l + 40) & 31, s7 = l ^ 20;
                want[6][l] = readable(s6, ne) ? v[s6] : v[l];
                want[7][l] = s7 >= (l & ~15) + 16 || !readable(s7, ne) ? v[l] : v[s7];
            }
            // I0: int xor sum of t. I1..I4: votes. I5: activemask. I6: unsigned from 31 - lane.
            for (int l = 0; l < ne; l++)
                si[l] = w0 + l;
            for (int o = 16; o > 0; o /= 2) {
                for (int l = 0; l < ne; l++)
                    nsi[l] = si[l] + (readable(l ^ o, ne) ? si[l ^ o] : si[l]);
                memcpy(si, nsi, sizeof si);
            }
            unsigned exist = ne == 32 ? 0xffffffffu : (1u << ne) - 1u, ballot = 0, lt20 = 0;
            int any40 = 0;
            for (int l = 0; l < ne; l++) {
                ballot |= (unsigned)((w0 + l) % 3 == 0) << l;
                lt20 |= (unsigned)(l < 20) << l;
                any40 |= w0 + l == 40;
            }
            int count5 = 0;
            for (int t = 0; t < n; t++)
                count5 += t % 5 == 0;
            for (int l = 0; l < ne; l++) {
                wi[0][l] = si[l];
                wi[1][l] = (int)ballot;
                wi[2][l] = any40;
                wi[3][l] = 1;
                wi[4][l] = lt20 == exist;
                wi[5][l] = (int)exist;
                int src = 31 - l;
                wi[6][l] = (int)((unsigned)(readable(src, ne) ? w0 + src : w0 + l) * 0x10001u);
                wi[7][l] = count5;
            }
            for (int k = 0; k < W_F; k++)
                for (int l = 0; l < ne; l++) {
                    float got = fo[k * stride + b * n + w0 + l];
                    if (got != want[k][l] && bad++ < 8)
                        printf("  F%d block %d thread %d: %g, want %g\n", k, b, w0 + l, got,
                               want[k][l]);
                }
            for (int k = 0; k < W_I; k++)
                for (int l = 0; l < ne; l++) {
                    int got = io[k * stride + b * n + w0 + l];
                    if (got != wi[k][l] && bad++ < 8)
                        printf("  I%d block %d thread %d: %d (0x%x), want %d (0x%x)\n", k, b,
                               w0 + l, got, (unsigned)got, wi[k][l], (unsigned)wi[k][l]);
                }
        }
    CHECK_EQ(0, bad);
done:
    free(fo), free(io);
}

static void warp_ops(void) {
    warp_ops_case(dim3(16, 6, 1)); // 96 threads: three full warps, over a 2-D block
    warp_ops_case(dim3(80, 1, 1)); // 80: the last warp has 16 lanes
}

static void atomics(void) {
    enum { G = 64, T = 128, N = G * T };
    float fs[2] = {0, 0};
    int is[5] = {0, -1, 1 << 30, 0, 0};
    unsigned long long us[2] = {0, 0};
    double ds[1] = {0};
    Args a = {.p = {fs, is, us, ds}};
    run("k_atomics", dim3(G, 1, 1), dim3(T, 1, 1), a);
    long long sum = 0, maxv = -1, minv = 1 << 30;
    unsigned long long usum = 0;
    for (int g = 0; g < N; g++) {
        int m = (g * 37) % 1001;
        sum += g, usum += (unsigned long long)g << 20;
        maxv = m > maxv ? m : maxv;
        minv = m + 5 < minv ? m + 5 : minv;
    }
    CHECK(fs[0] == (float)N);
    CHECK(fs[1] == (float)N * 0.5f);
    CHECK_EQ(sum, is[0]);
    CHECK_EQ(maxv, is[1]);
    CHECK_EQ(minv, is[2]);
    CHECK_EQ(2 * N, is[3]);
    CHECK_EQ(7, is[4]);
    CHECK(us[0] == usum);
    CHECK(us[1] == 3ull * N);
    CHECK(ds[0] == 0.25 * N);

    // Shared-memory atomics under barriers: a histogram per block, added up.
    enum { HG = 8, HT = 256 };
    int *x = malloc(HG * HT * sizeof *x), hist[16] = {0}, want[16] = {0};
    for (int i = 0; i < HG * HT; i++)
        x[i] = (int)(rng() % 16), want[x[i]]++;
    Args h = {.p = {hist, x}};
    run("k_histogram", dim3(HG, 1, 1), dim3(HT, 1, 1), h);
    for (int k = 0; k < 16; k++)
        CHECK_EQ(want[k], hist[k]);
    free(x);
}

static void conversions(void) {
    static const uint32_t special[] = {
        0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, // 0, 1, inf
        0x7fc00000, 0xffc00000, 0x7f800001, 0xff812345, 0x7fffffff, 0x7f80ffff, // NaNs
        0x00000001, 0x80000001, 0x007fffff, 0x00400000, 0x00800000,             // subnormal
        0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff,                         // max, bf16 edge
        0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf808000,             // bf16 ties
        0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, 0xc77ff000,             // f16 overflow
        0x38800000, 0x387fffff, 0x33000000, 0x33000001, 0x32ffffff, 0x33800000, // f16 subnormal
        0x33c00000, 0x34200000, 0x34600000, 0x38000000, 0x37ffe000, 0x3f801000, // f16 ties
        0x3f803000, 0x3f802000, 0x3f800fff, 0x3f801001, 0x387fc000, 0xb87fc000,
    };
    enum { NS = sizeof special / sizeof special[0], NR = 200000, N = NS + NR, T = 256 };
    float *x = malloc(N * sizeof *x), *bfw = malloc(N * sizeof *bfw), *hw = malloc(N * sizeof *hw);
    uint16_t *bf = malloc(N * sizeof *bf), *h = malloc(N * sizeof *h);
    for (int i = 0; i < NS; i++)
        x[i] = float_of(special[i]);
    for (int i = NS; i < N; i++) // every other value near the f16 range, where most cases are
        x[i] = float_of(i % 2 ? rng() : (rng() & 0x8fffffffu) | 0x30000000u);
    Args a = {.p = {bf, h, bfw, hw, x}, .i = {N}};
    run("k_convert", dim3((N + T - 1) / T, 1, 1), dim3(T, 1, 1), a);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t wb = cpu_f32_to_bf16(x[i]), wh = cpu_f32_to_f16(x[i]);
        float wbw = cpu_bf16_to_f32(wb), whw = cpu_f16_to_f32(wh);
        if ((bf[i] != wb || h[i] != wh || bits_of(bfw[i]) != bits_of(wbw) ||
             bits_of(hw[i]) != bits_of(whw)) &&
            bad++ < 8)
            printf("  x 0x%08x: bf16 0x%04x want 0x%04x, f16 0x%04x want 0x%04x\n",
                   bits_of(x[i]), bf[i], wb, h[i], wh);
    }
    CHECK_EQ(0, bad);

    enum { NH = 65536 };
    uint16_t *bits = malloc(NH * sizeof *bits);
    float *wbf = malloc(NH * sizeof *wbf), *whf = malloc(NH * sizeof *whf);
    for (int i = 0; i < NH; i++)
        bits[i] = (uint16_t)i;
    Args w = {.p = {wbf, whf, bits}};
    run("k_widen", dim3(NH / T, 1, 1), dim3(T, 1, 1), w);
    int badw = 0;
    for (int i = 0; i < NH; i++)
        badw += bits_of(wbf[i]) != bits_of(cpu_bf16_to_f32((uint16_t)i)) ||
                bits_of(whf[i]) != bits_of(cpu_f16_to_f32((uint16_t)i));
    CHECK_EQ(0, badw);
    free(x), free(bfw), free(hw), free(bf), free(h), free(bits), free(wbf), free(whf);
}

// ldmatrix's fragments as the PTX ISA lays them out: lane 4r + w takes, of matrix j (quarter j
// of M: rows 8 (j % 2).., columns 8 (j / 2)..), elements (r, 2w) and (r, 2w + 1), or
// transposed (2w, r) and (2w + 1, r); and cp.async's bytes only after the wait.
static void ldmatrix(void) {
    uint16_t M[256];
    uint32_t out[320];
    for (int i = 0; i < 256; i++)
        M[i] = (uint16_t)(i * 37 + 11);
    Args a = {.p = {out, M}};
    if (run("k_ldmatrix", dim3(1, 1, 1), dim3(32, 1, 1), a) != 0)
        return;
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        bad += out[l] != 0;   // read before the wait: the zeros it overwrites later
        bad += out[32 + l] != ((uint32_t)M[l * 8] | (uint32_t)M[l * 8 + 1] << 16);
        int r = l / 4, w = l % 4;
        for (int j = 0; j < 4; j++) {
            int r0 = 8 * (j % 2), c0 = 8 * (j / 2);
            uint32_t plain = (uint32_t)M[(r0 + r) * 16 + c0 + 2 * w] |
                             (uint32_t)M[(r0 + r) * 16 + c0 + 2 * w + 1] << 16;
            uint32_t trans = (uint32_t)M[(r0 + 2 * w) * 16 + c0 + r] |
                             (uint32_t)M[(r0 + 2 * w + 1) * 16 + c0 + r] << 16;
            bad += out[64 + 4 * l + j] != plain;
            bad += out[192 + 4 * l + j] != trans;
        }
    }
    CHECK_EQ(0, bad);
}

static void mma(void) {
    enum { W = 2 }; // two warps, two independent products
    uint16_t A[W * 256], B[W * 128];
    float C[W * 128], D[W * 128], E[W * 128];
    for (int i = 0; i < W * 256; i++)
        A[i] = cpu_f32_to_bf16(rng_float(-2, 2));
    for (int i = 0; i < W * 128; i++)
        B[i] = cpu_f32_to_bf16(rng_float(-2, 2)), C[i] = rng_float(-1, 1);
    Args a = {.p = {D, E, A, B, C}};
    if (run("k_mma", dim3(1, 1, 1), dim3(32 * W, 1, 1), a) != 0)
        return;
    for (int w = 0; w < W; w++)
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ab = 0, mag = 0;
                for (int k = 0; k < 16; k++) {
                    double p = (double)cpu_bf16_to_f32(A[w * 256 + m * 16 + k]) *
                               cpu_bf16_to_f32(B[w * 128 + k * 8 + n]);
                    ab += p, mag += fabs(p);
                }
                int i = w * 128 + m * 8 + n;
                double c = C[i];
                // Relative to the terms' magnitude: the k-order is unspecified.
                CHECKF(fabs(D[i] - (ab + c)) <= 1e-5 * (mag + fabs(c)),
                       "D[%d][%d][%d] = %.9g, want %.9g", w, m, n, D[i], ab + c);
                CHECKF(fabs(E[i] - (2 * ab + c)) <= 1e-5 * (2 * mag + fabs(c)),
                       "E[%d][%d][%d] = %.9g, want %.9g", w, m, n, E[i], 2 * ab + c);
            }
}

static void intrinsics(void) {
    float fo[8];
    int io[18];
    Args a = {.p = {fo, io}};
    if (run("k_intrinsics", dim3(1, 1, 1), dim3(1, 1, 1), a) != 0)
        return;
    const float wf[8] = {-1.0f, 2.5f, 1.0f, 0.0f, 0.5f, 0.25f, 1.0f, float_of(0x40490fdbu)};
    const int wi[18] = {-3, 7, -6, 2, 4, -2, -3, 8, 31, 4, INT32_MIN, 0x3f800000, INT32_MIN,
                        32, 16, 16, INT32_MAX, 11};
    for (int k = 0; k < 8; k++)
        CHECKF(bits_of(fo[k]) == bits_of(wf[k]), "float %d: %.9g, want %.9g", k, fo[k], wf[k]);
    for (int k = 0; k < 18; k++)
        CHECKF(io[k] == wi[k], "int %d: %d, want %d", k, io[k], wi[k]);
}

// Launches kernel `name` of faults.cu and expects it to fail with every one of `want` (up to 3
// strings, NULL-ended) in the message.
static void expect_fault(const char *name, Dim3 g, Dim3 b, const char *w1, const char *w2,
                         const char *w3) {
    int out[256] = {0};
    Args a = {.p = {out}};
    err[0] = '\0';
    double t0 = now_s();
    int rc = launch_faults(name, g, b, a, err, sizeof err);
    CHECKF(rc == -1, "%s: launch returned %d", name, rc);
    CHECKF(now_s() - t0 < 5.0, "%s: took %.1f s to fail", name, now_s() - t0);
    const char *want[] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        CHECKF(!want[i] || strstr(err, want[i]), "%s: \"%s\" lacks \"%s\"", name, err, want[i]);
    printf("  %s: %s\n", name, err);
}

// A grouped launch: each member's buffers from its row of the arguments, the members'
// elements end to end; and each kind of kernel refused when launched as the other.
static void grouped(void) {
    LaunchGroupFn launch_group = (LaunchGroupFn)dlsym(so_kernels, "ftc_emu_launch_group");
    CHECK(launch_group != NULL);
    if (!launch_group)
        return;
    static float x[3][300], out[3][300];
    static const int n[3] = {5, 0, 295};
    GroupArgs *a = calloc(1, sizeof *a);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 300; i++)
            x[k][i] = rng_float(-2, 2), out[k][i] = -7.0f;
        a->p[k][0] = out[k], a->p[k][1] = x[k];
    }
    a->f[0] = 0.5;
    // Two blocks of 64: 128 threads stride over 300 elements, crossing members.
    CHECKF(launch_group("k_group", dim3(2, 1, 1), dim3(64, 1, 1), a, err, sizeof err) == 0, "%s",
           err);
    int bad = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 300; i++)
            bad += bits_of(out[k][i]) != bits_of(i < n[k] ? x[k][i] * (float)(k + 1) + 0.5f : -7.0f);
    CHECK_EQ(0, bad);
    err[0] = '\0';
    CHECK(launch_group("k_scale", dim3(1, 1, 1), dim3(32, 1, 1), a, err, sizeof err) != 0);
    CHECK(strstr(err, "a plain kernel, launched as a grouped one") != NULL);
    Args plain = {.p = {out[0], x[0]}};
    err[0] = '\0';
    CHECK(launch_kernels("k_group", dim3(1, 1, 1), dim3(32, 1, 1), plain, err, sizeof err) != 0);
    CHECK(strstr(err, "a grouped kernel, launched as a plain one") != NULL);
    free(a);
}

static void faults(void) {
    expect_fault("k_deadlock", dim3(1, 1, 1), dim3(64, 1, 1), "kernel 'k_deadlock'", "deadlock",
                 "thread (0,0,0)");
    expect_fault("k_warp_exited", dim3(1, 1, 1), dim3(64, 1, 1), "k_warp_exited", "lane 3",
                 "exited");
    expect_fault("k_warp_vs_barrier", dim3(1, 1, 1), dim3(32, 1, 1), "k_warp_vs_barrier",
                 "deadlock", "lane 0, which waits at __syncthreads");
    expect_fault("k_fast_barrier", dim3(1, 1, 1), dim3(32, 1, 1), "k_fast_barrier",
                 "__syncthreads", "not synchronising");
    expect_fault("k_mask_mismatch", dim3(1, 1, 1), dim3(32, 1, 1), "k_mask_mismatch",
                 "0xffff0000", "0xffffffff");
    expect_fault("k_mask_self", dim3(1, 1, 1), dim3(32, 1, 1), "k_mask_self", "excludes",
                 "lane 0");
    expect_fault("k_trap", dim3(3, 1, 1), dim3(32, 1, 1), "k_trap", "thread (7,0,0) block (1,0,0)",
                 "__trap");
    expect_fault("k_mma_partial", dim3(1, 1, 1), dim3(48, 1, 1), "k_mma_partial", "32 lanes",
                 "16 threads");
    expect_fault("k_ldmatrix_misaligned", dim3(1, 1, 1), dim3(32, 1, 1), "ldmatrix", "lane 5",
                 "not 16-byte aligned");
    expect_fault("k_cp_async_misaligned", dim3(1, 1, 1), dim3(1, 1, 1), "cp.async", "16-byte aligned",
                 NULL);
    expect_fault("k_nosuch", dim3(1, 1, 1), dim3(32, 1, 1), "k_nosuch", "no such kernel", NULL);
    expect_fault("k_ok", dim3(1, 1, 1), dim3(2048, 1, 1), "k_ok", "bad launch geometry", NULL);
    expect_fault("k_ok", dim3(0, 1, 1), dim3(32, 1, 1), "k_ok", "bad launch geometry", NULL);
    // A failed launch leaves nothing behind: the next one runs.
    int out[256] = {0}, bad = 0;
    Args a = {.p = {out}};
    CHECKF(launch_faults("k_ok", dim3(1, 1, 1), dim3(256, 1, 1), a, err, sizeof err) == 0, "%s",
           err);
    for (int i = 0; i < 256; i++)
        bad += out[i] != i + 1;
    CHECK_EQ(0, bad);
    // Nor does handing the fibers back: the next launch maps them again.
    void (*release)(void) = (void (*)(void))dlsym(so_faults, "ftc_emu_release");
    CHECK(release != NULL);
    if (release)
        release();
    memset(out, 0, sizeof out);
    CHECKF(launch_faults("k_ok", dim3(1, 1, 1), dim3(96, 1, 1), a, err, sizeof err) == 0, "%s",
           err);
    CHECK_EQ(96, out[95]);
}

static void performance(void) {
    enum { G = 64, T = 256, N = G * T };
    float *out = malloc(N * sizeof *out);
    Args a = {.p = {out}};
    double best = 1e9, best_fast = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        run("k_perf", dim3(G, 1, 1), dim3(T, 1, 1), a);
        double t1 = now_s();
        best = t1 - t0 < best ? t1 - t0 : best;
    }
    int bad = 0;
    for (int b = 0; b < G; b++)
        for (int t = 0; t < T; t++)
            bad += out[b * T + t] != (float)((t + 1) % 256) + (float)((t + 4) % 256) * 2.0f;
    CHECK_EQ(0, bad);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        run("k_perf_fast", dim3(G, 1, 1), dim3(T, 1, 1), a);
        double t1 = now_s();
        best_fast = t1 - t0 < best_fast ? t1 - t0 : best_fast;
    }
    printf("  %d blocks x %d threads, 4 barriers: %.2f ms (%.0f ns a thread and barrier); "
           "the fast path, no barriers: %.3f ms\n",
           G, T, best * 1e3, best * 1e9 / (N * 4.0), best_fast * 1e3);
    CHECKF(best < 0.5, "%.3f s", best);
    free(out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_emu SRC\n");
        return 2;
    }
    src_dir = argv[1];
    if (getenv("FTC_CC") && *getenv("FTC_CC"))
        cc = getenv("FTC_CC");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char probe[600], log[600];
    snprintf(probe, sizeof probe, "%s --version", cc);
    snprintf(log, sizeof log, "%s/probe.log", tmp_dir);
    if (sh(probe, log) != 0) {
        printf("skip: no C compiler runs as '%s' (set FTC_CC)\n", cc);
        remove(log), rmdir(tmp_dir);
        return 77;
    }

    char kso[600], fso[600];
    snprintf(kso, sizeof kso, "%s/kernels.so", tmp_dir);
    snprintf(fso, sizeof fso, "%s/faults.so", tmp_dir);
    double t0 = now_s();
    int ok = compile("kernels", "", kso) == 0 && compile("faults", "", fso) == 0;
    printf("  compiled tests/emu/kernels.cu and faults.cu in %.2f s\n", now_s() - t0);
    if (ok) {
        launch_kernels = load(kso, &so_kernels);
        launch_faults = load(fso, &so_faults);
    }
    if (!launch_kernels || !launch_faults) {
        printf("FAIL compile and load\n");
        return 1;
    }
    RUN(warnings);
    RUN(elementwise_tail);
    RUN(block_reduction);
    RUN(warp_ops);
    RUN(atomics);
    RUN(conversions);
    RUN(mma);
    RUN(ldmatrix);
    RUN(intrinsics);
    RUN(grouped);
    RUN(faults);
    RUN(performance);

    dlclose(so_kernels), dlclose(so_faults);
    const char *left[] = {"kernels.so", "faults.so", "kernels.log", "faults.log", "probe.log"};
    for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", tmp_dir, left[i]);
        remove(p);
    }
    rmdir(tmp_dir);
    return CHECK_DONE();
}
