// backend.c — the emu backend: a plan's generated kernels (DIR/kernels.cu, the very text
// NVRTC compiles for a GPU) compiled by the host C compiler against DIR/ftc_emu.h, the
// CUDA execution model on the CPU, and run instruction by instruction. It proves the
// kernels without a GPU. Memory, copies, events and the GEMMs (cuBLASLt's part on a GPU)
// are the cpu backend's: GEMMs through its BLAS, so only the generated kernels differ.
//
// The shared object is cached by the hash of the source, the header and the compiler's
// command line ($FTC_CACHE_DIR/emu, else ~/.cache/ftc/emu). The compiler is $FTC_CC, else
// `cc`.
#include "../runtime.h"
#include "../fileio.h"
#include "../kernel_args.h"
#include "../loss.h"
#include "../cpu/kernels.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct EmuDim {
    unsigned x, y, z;
} EmuDim;

typedef int (*EmuLaunch)(const char *name, EmuDim grid, EmuDim block, KernelArgs args, char *err,
                         size_t errlen);
typedef int (*EmuLaunchGroup)(const char *name, EmuDim grid, EmuDim block, const KernelGroupArgs *args,
                              char *err, size_t errlen);
typedef void (*EmuDynamicSmem)(unsigned bytes);

// An entry of a kernels.so's table (ftc_emu.h's FtcEmuKernel), mirrored.
typedef struct EmuEntry {
    const char *name;
    void (*fn)(void);
    int syncs, group;
} EmuEntry;

struct EmuKernels {
    void *so;
    EmuLaunch launch;
    EmuLaunchGroup launch_group;
    EmuDynamicSmem dynamic_smem;
    const EmuEntry *table;
};

typedef struct EmuState {
    Backend *cpu;           // memory, copies, GEMMs
    EmuKernels *k;
    char dir[4096];
} EmuState;


// Runs argv (argv[0] looked up in PATH) with stderr into `log`; the exit status, or -1.
static int run(char *const *argv, char *log, size_t loglen) {
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 2);
        dup2(fds[1], 1);
        close(fds[0]), close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    for (ssize_t got; (got = read(fds[0], log + n, loglen - 1 - n)) > 0 && n + 1 < loglen;)
        n += (size_t)got;
    char sink[4096];
    while (read(fds[0], sink, sizeof sink) > 0)
        ;
    log[n] = '\0';
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Compiles DIR/kernels.cu into a cached shared object; its path in `so`.
static int build(const char *dir, char *so, size_t solen, char *err, size_t errlen) {
    char src[4200], hdr[4200], cache[4096];
    snprintf(src, sizeof src, "%s/kernels.cu", dir);
    snprintf(hdr, sizeof hdr, "%s/ftc_emu.h", dir);
    size_t slen, hlen;
    char *s = rt_read_whole(src, &slen), *h = rt_read_whole(hdr, &hlen);
    if (!s || !h) {
        free(s), free(h);
        return rt_fail(err, errlen, "%s: cannot read %s (recompile the plan with this ftc)", dir,
                       !s ? "kernels.cu" : "ftc_emu.h");
    }
    const char *cc = getenv("FTC_CC") && *getenv("FTC_CC") ? getenv("FTC_CC") : "cc";
    char inc[4200];
    snprintf(inc, sizeof inc, "-I%s", dir);
    // -ffp-contract=off: a*b+c rounds twice, as on the cpu backend and under NVRTC's
    // --fmad=false.
    const char *flags[] = {"-std=gnu11", "-O1", "-g0", "-ffp-contract=off", "-fPIC", "-shared",
                           "-DFTC_EMU", "-w"};
    enum { NF = sizeof flags / sizeof flags[0] };
    uint64_t key = rt_fnv1a64(RT_FNV_BASIS, s, slen);
    key = rt_fnv1a64(key, h, hlen);
    key = rt_fnv1a64(key, cc, strlen(cc));
    for (int i = 0; i < NF; i++)
        key = rt_fnv1a64(key, flags[i], strlen(flags[i]) + 1);
    free(s), free(h);
    if (rt_cache_path("emu", cache, sizeof cache) != 0)
        return rt_fail(err, errlen, "no cache directory for the emulated kernels: set FTC_CACHE_DIR");
    if (rt_mkdir_p(cache) != 0)
        return rt_fail(err, errlen, "cannot create %s: %s", cache, strerror(errno));
    snprintf(so, solen, "%s/kernels-%016llx.so", cache, (unsigned long long)key);
    struct stat st;
    if (stat(so, &st) == 0 && st.st_size > 0)
        return 0;
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", so, (int)getpid());
    char *argv[NF + 9];   // cc, the flags, 7 more, NULL
    int a = 0;
    argv[a++] = (char *)cc;
    for (int i = 0; i < NF; i++)
        argv[a++] = (char *)flags[i];
    argv[a++] = inc;
    argv[a++] = "-x";
    argv[a++] = "c";
    argv[a++] = src;
    argv[a++] = "-o";
    argv[a++] = tmp;
    argv[a++] = "-lm";
    argv[a] = NULL;
    char log[4096];
    int rc = run(argv, log, sizeof log);
    if (rc != 0) {
        unlink(tmp);
        return rt_fail(err, errlen, "%s: the host compiler (%s) failed on kernels.cu (exit %d): %.1500s",
                       dir, cc, rc, log);
    }
    if (rename(tmp, so) != 0) {
        unlink(tmp);
        return rt_fail(err, errlen, "cannot write %s: %s", so, strerror(errno));
    }
    return 0;
}

static bool has_kernels(const PlanInstr *in) { return in->nlaunch > 0; }

// Whether the instruction needs no generated kernel: a GEMM (the cpu backend's BLAS) or a
// view (nothing moves).
static bool library(const PlanInstr *in) {
    OpClass c = op_desc(in->op)->cls;
    return c == OPC_GEMM || (c == OPC_MOVEMENT && !has_kernels(in));
}

static int emu_prepare(Backend *be, const Plan *p, int stream, char *err, size_t errlen) {
    EmuState *s = be->state;
    if (s->cpu->prepare(s->cpu, p, stream, err, errlen) != 0)
        return -1;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++) {
            const PlanInstr *in = &p->ins[ph][i];
            if ((stream >= 0 && (int)in->stream != stream) || op_desc(in->op)->cls == OPC_COPY)
                continue;
            if (!has_kernels(in) && !library(in) && in->by < 0)
                return rt_fail(err, errlen, "instruction %d (%s) names no kernel: the plan predates "
                               "kernels.cu; recompile it", in->id, op_desc(in->op)->name);
        }
    return 0;
}

// The fused loss's products on the CPU: storage widened to fp32, BLAS, the result rounded
// to its dtype (a GPU's library GEMM reads and writes storage likewise).
static void widen_to(float *dst, const void *src, PlanDType t, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = t == PDT_F32    ? ((const float *)src)[i]
                 : t == PDT_BF16 ? cpu_bf16_to_f32(((const uint16_t *)src)[i])
                                 : cpu_f16_to_f32(((const uint16_t *)src)[i]);
}

static int loss_gemm(void *ctx, const PlanInstr *in, const LossGemm *g, char *err, size_t errlen) {
    (void)ctx, (void)in;
    int64_t na = g->m * g->k, nb = g->k * g->n, nc = g->m * g->n;
    float *a = malloc(sizeof(float) * (size_t)(na + nb + nc + 3));
    if (!a)
        return rt_fail(err, errlen, "out of memory (a loss chunk's product)");
    float *b = a + na + 1, *c = b + nb + 1;
    widen_to(a, g->a, g->ta, na);
    widen_to(b, g->b, g->tb, nb);
    if (g->beta != 0.0f)
        widen_to(c, g->c, g->tc, nc);
    cpu_gemm(g->trans_a, g->trans_b, (size_t)g->m, (size_t)g->n, (size_t)g->k, a, b, g->beta, c);
    for (int64_t i = 0; i < nc; i++) {
        if (g->tc == PDT_F32)
            ((float *)g->c)[i] = c[i];
        else if (g->tc == PDT_BF16)
            ((uint16_t *)g->c)[i] = cpu_f32_to_bf16(c[i]);
        else
            ((uint16_t *)g->c)[i] = cpu_f32_to_f16(c[i]);
    }
    free(a);
    return 0;
}

static int loss_launch(void *ctx, const PlanInstr *in, int l, const KernelArgs *a, char *err,
                       size_t errlen) {
    EmuKernels *k = ctx;
    if (l >= in->nlaunch)
        return rt_fail(err, errlen, "the fused loss names %d launches, not %d", in->nlaunch, l + 1);
    return rt_emu_kernels_launch(k, in->launch[l].name, in->launch[l].grid, in->launch[l].block,
                                 in->launch[l].smem, a, false, err, errlen);
}

int rt_emu_kernels_launch(EmuKernels *k, const char *name, const unsigned grid[3],
                          const unsigned block[3], unsigned smem, const void *args, bool group,
                          char *err, size_t errlen) {
    EmuDim g = {grid[0], grid[1], grid[2]}, b = {block[0], block[1], block[2]};
    k->dynamic_smem(smem);
    return group ? k->launch_group(name, g, b, args, err, errlen)
                 : k->launch(name, g, b, *(const KernelArgs *)args, err, errlen);
}

static int emu_launch(Backend *be, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    EmuState *s = be->state;
    if (in->by >= 0)   // done by its group's launch
        return 0;
    if (in->group) {   // member k's operands (outputs, then inputs) in a.p[k]
        KernelGroupArgs *a = malloc(sizeof *a);
        if (!a)
            return rt_fail(err, errlen, "out of memory");
        rt_kernel_group_args(x, in, a);
        int rc = rt_emu_kernels_launch(s->k, in->launch[0].name, in->launch[0].grid,
                                       in->launch[0].block, in->launch[0].smem, a, true, err, errlen);
        free(a);
        return rc;
    }
    if (op_desc(in->op)->cls == OPC_LOSS_GEMM) {   // chunks: the GEMMs here, the kernels generated
        LossOps ops = {loss_gemm, loss_launch, s->k};
        return rt_loss_run(x, in, &ops, err, errlen);
    }
    if (library(in))
        return s->cpu->launch(s->cpu, x, in, err, errlen);
    KernelArgs a;
    rt_kernel_args(x, in, &a);
    for (int l = 0; l < in->nlaunch; l++)
        if (rt_emu_kernels_launch(s->k, in->launch[l].name, in->launch[l].grid, in->launch[l].block,
                                  in->launch[l].smem, &a, false, err, errlen) != 0)
            return -1;
    return 0;
}

// Memory, copies and streams are the cpu backend's.
static void *emu_alloc(Backend *be, MemKind k, int64_t bytes) {
    EmuState *s = be->state;
    return s->cpu->alloc(s->cpu, k, bytes);
}
static void emu_free(Backend *be, MemKind k, void *p) {
    EmuState *s = be->state;
    s->cpu->free(s->cpu, k, p);
}
static void emu_set(Backend *be, MemKind k, void *dst, const void *src, int64_t bytes) {
    EmuState *s = be->state;
    s->cpu->set(s->cpu, k, dst, src, bytes);
}
static void emu_get(Backend *be, MemKind k, void *dst, const void *src, int64_t bytes) {
    EmuState *s = be->state;
    s->cpu->get(s->cpu, k, dst, src, bytes);
}
static void emu_fill(Backend *be, MemKind k, void *dst, uint32_t pattern, int width, int64_t bytes,
                     Stream stream) {
    EmuState *s = be->state;
    s->cpu->fill(s->cpu, k, dst, pattern, width, bytes, stream);
}
static void emu_copy(Backend *be, void *dst, MemKind dk, const void *src, MemKind sk, int64_t bytes,
                     Stream stream) {
    EmuState *s = be->state;
    s->cpu->copy(s->cpu, dst, dk, src, sk, bytes, stream);
}
static int emu_sync(Backend *be, char *err, size_t errlen) {
    EmuState *s = be->state;
    return s->cpu->sync(s->cpu, err, errlen);
}

static void emu_destroy(Backend *be) {
    EmuState *s = be->state;
    rt_emu_kernels_close(s->k);
    s->cpu->destroy(s->cpu);
    free(s);
    free(be);
}

EmuKernels *rt_emu_kernels_open(const char *plan_dir, char *err, size_t errlen) {
    char so[4300];
    if (build(plan_dir, so, sizeof so, err, errlen) != 0)
        return NULL;
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    EmuLaunch launch = h ? (EmuLaunch)dlsym(h, "ftc_emu_launch") : NULL;
    if (!launch) {
        rt_fail(err, errlen, "cannot load %s: %s", so, dlerror());
        if (h)
            dlclose(h);
        return NULL;
    }
    EmuLaunchGroup launch_group = (EmuLaunchGroup)dlsym(h, "ftc_emu_launch_group");
    EmuDynamicSmem dynamic_smem = (EmuDynamicSmem)dlsym(h, "ftc_emu_dynamic_smem");
    const size_t *args_bytes = dlsym(h, "ftc_emu_args_bytes");
    const size_t *group_bytes = dlsym(h, "ftc_emu_group_args_bytes");
    const EmuEntry *table = dlsym(h, "ftc_emu_kernels");
    if (!launch_group || !dynamic_smem || !args_bytes || !group_bytes || !table ||
        *args_bytes != sizeof(KernelArgs) ||
        *group_bytes != sizeof(KernelGroupArgs)) {
        rt_fail(err, errlen, "%s/kernels.cu was generated for another kernel ABI; recompile the plan",
                plan_dir);
        dlclose(h);
        return NULL;
    }
    EmuKernels *k = xcalloc(1, sizeof *k);
    *k = (EmuKernels){h, launch, launch_group, dynamic_smem, table};
    return k;
}

int rt_emu_kernels_kind(const EmuKernels *k, const char *name) {
    for (const EmuEntry *e = k->table; e->name; e++)
        if (strcmp(e->name, name) == 0)
            return e->group;
    return -1;
}

void rt_emu_kernels_close(EmuKernels *k) {
    if (!k)
        return;
    dlclose(k->so);
    free(k);
}

Backend *rt_emu_backend(const char *plan_dir, char *err, size_t errlen) {
    EmuKernels *k = rt_emu_kernels_open(plan_dir, err, errlen);
    if (!k)
        return NULL;
    Backend *be = xcalloc(1, sizeof *be);
    EmuState *s = xcalloc(1, sizeof *s);
    s->cpu = rt_cpu_backend();
    s->k = k;
    snprintf(s->dir, sizeof s->dir, "%s", plan_dir);
    *be = (Backend){.name = "emu", .host_addressable = true, .prepare = emu_prepare, .alloc = emu_alloc, .free = emu_free,
                    .set = emu_set, .get = emu_get, .fill = emu_fill, .copy = emu_copy,
                    .launch = emu_launch, .sync = emu_sync, .destroy = emu_destroy, .state = s};
    return be;
}
