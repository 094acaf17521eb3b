// nvrtc.c — NVRTC loaded with dlopen, a compile call that returns the CUBIN with ptxas'
// resource report, and the on-disk kernel cache (nvrtc.h).
//
// nvrtc.h is not included: the few types and entry points used are declared here, so this
// file builds where no CUDA toolkit is installed. The only global state is the loaded
// library, written once under pthread_once and read-only afterwards.
#include "nvrtc.h"

#include "fileio.h"
#include "xalloc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- the library -------------------------------------------------------------------------

// NVRTC's ABI, as nvrtc.h declares it: results are an enum (0 is NVRTC_SUCCESS), a
// program an opaque pointer.
typedef struct NvrtcProgramImpl *NvrtcProgram;
enum { NVRTC_OK = 0 };

typedef struct Nvrtc {
    bool ok;
    NvrtcInfo info;
    char error[2048];           // why not ok: each path tried and dlerror's answer
    int (*version)(int *major, int *minor);
    int (*create)(NvrtcProgram *prog, const char *src, const char *name, int nheaders,
                  const char *const *headers, const char *const *include_names);
    int (*compile)(NvrtcProgram prog, int nopts, const char *const *opts);
    int (*log_size)(NvrtcProgram prog, size_t *bytes);
    int (*log)(NvrtcProgram prog, char *log);
    int (*cubin_size)(NvrtcProgram prog, size_t *bytes);
    int (*cubin)(NvrtcProgram prog, char *cubin);
    int (*ptx_size)(NvrtcProgram prog, size_t *bytes);
    int (*ptx)(NvrtcProgram prog, char *ptx);
    int (*destroy)(NvrtcProgram *prog);
    const char *(*error_string)(int result);
} Nvrtc;

static Nvrtc nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

// Appends "  what: dlerror" to nv.error, so a failed load names every candidate.
static void note_tried(const char *what, const char *why) {
    size_t n = strlen(what), used = strlen(nv.error);
    if (strncmp(why, what, n) == 0 && strncmp(why + n, ": ", 2) == 0)
        why += n + 2;   // dlerror repeats the path
    snprintf(nv.error + used, sizeof nv.error - used, "\n  %s: %s", what, why);
}

// dlopens path and resolves every entry point; on failure closes it and notes why.
static bool open_lib(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        note_tried(path, why ? why : "not found");
        return false;
    }
    static const struct {
        const char *name;
        size_t offset;
    } syms[] = {
        {"nvrtcVersion", offsetof(Nvrtc, version)},
        {"nvrtcCreateProgram", offsetof(Nvrtc, create)},
        {"nvrtcCompileProgram", offsetof(Nvrtc, compile)},
        {"nvrtcGetProgramLogSize", offsetof(Nvrtc, log_size)},
        {"nvrtcGetProgramLog", offsetof(Nvrtc, log)},
        {"nvrtcGetCUBINSize", offsetof(Nvrtc, cubin_size)},
        {"nvrtcGetCUBIN", offsetof(Nvrtc, cubin)},
        {"nvrtcGetPTXSize", offsetof(Nvrtc, ptx_size)},
        {"nvrtcGetPTX", offsetof(Nvrtc, ptx)},
        {"nvrtcDestroyProgram", offsetof(Nvrtc, destroy)},
        {"nvrtcGetErrorString", offsetof(Nvrtc, error_string)},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f) {
            char why[128];
            snprintf(why, sizeof why, "loaded, but it has no %s (not NVRTC?)", syms[i].name);
            note_tried(path, why);
            dlclose(h);
            return false;
        }
        // Function and object pointers share a representation on every POSIX system;
        // dlsym's own contract relies on it.
        memcpy((char *)&nv + syms[i].offset, &f, sizeof f);
    }
    Dl_info dl;
    const char *real = dladdr((void *)nv.version, &dl) && dl.dli_fname ? dl.dli_fname : path;
    snprintf(nv.info.lib, sizeof nv.info.lib, "%s", real);
    return true;
}

// True when dir/cuda_bf16.h exists; then dir, resolved ("lib/../include" as the directory
// it names), becomes info.include.
static bool try_include(const char *dir) {
    char path[PATH_MAX], real[PATH_MAX];
    if (!dir || !*dir || snprintf(path, sizeof path, "%s/cuda_bf16.h", dir) >= (int)sizeof path)
        return false;
    if (access(path, R_OK) != 0)
        return false;
    // A path that does not fit would be a wrong -I; such a directory is passed over.
    const char *use = realpath(dir, real) ? real : dir;
    size_t n = strlen(use);
    if (n >= sizeof nv.info.include)
        return false;
    memcpy(nv.info.include, use, n + 1);
    return true;
}

static int preferred_major;   // rt_nvrtc_prefer's, 0: none

void rt_nvrtc_prefer(int major) { preferred_major = major; }

// The pthread_once body: $FTC_NVRTC alone when set (a path the user named is never
// silently replaced by another NVRTC), else the sonames, then the toolkit directories.
static void load_once(void) {
    snprintf(nv.error, sizeof nv.error, "NVRTC not found; tried:");
    const char *env = getenv("FTC_NVRTC");
    const char *cuda_home = getenv("CUDA_HOME");
    bool loaded = false;
    if (env && *env) {
        loaded = open_lib(env);
        if (!loaded) {
            size_t used = strlen(nv.error);
            snprintf(nv.error + used, sizeof nv.error - used, "\n  (the path in $FTC_NVRTC; "
                     "unset it to search libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so, "
                     "$CUDA_HOME/lib64, /usr/local/cuda/lib64)");
        }
    } else {
        char home_lib[PATH_MAX] = "";
        if (cuda_home && *cuda_home)
            snprintf(home_lib, sizeof home_lib, "%s/lib64/libnvrtc.so", cuda_home);
        char preferred[32] = "";
        if (preferred_major > 0 && preferred_major < 100)
            snprintf(preferred, sizeof preferred, "libnvrtc.so.%d", preferred_major);
        const char *candidates[] = {preferred, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", home_lib,
                                    "/usr/local/cuda/lib64/libnvrtc.so"};
        for (size_t i = 0; !loaded && i < sizeof candidates / sizeof candidates[0]; i++)
            if (*candidates[i])
                loaded = open_lib(candidates[i]);
    }
    if (!loaded)
        return;
    int r = nv.version(&nv.info.major, &nv.info.minor);
    if (r != NVRTC_OK) {
        snprintf(nv.error, sizeof nv.error, "%s: nvrtcVersion failed: %s", nv.info.lib,
                 nv.error_string(r));
        return;
    }
    // Headers: the first of $FTC_CUDA_INCLUDE, $CUDA_HOME/include, the include directory
    // beside the library's (a toolkit found through the loader) and /usr/local/cuda/include
    // that holds cuda_bf16.h.
    char buf[PATH_MAX] = "";
    if (!try_include(getenv("FTC_CUDA_INCLUDE"))) {
        if (cuda_home && *cuda_home)
            snprintf(buf, sizeof buf, "%s/include", cuda_home);
        if (!try_include(buf)) {
            snprintf(buf, sizeof buf, "%s", nv.info.lib);
            char *slash = strrchr(buf, '/');
            if (slash)
                snprintf(slash, sizeof buf - (size_t)(slash - buf), "/../include");
            if (!slash || !try_include(buf))
                try_include("/usr/local/cuda/include");
        }
    }
    nv.error[0] = '\0';
    nv.ok = true;
}

bool rt_nvrtc_available(NvrtcInfo *info) {
    pthread_once(&nv_once, load_once);
    if (nv.ok && info)
        *info = nv.info;
    return nv.ok;
}

const char *rt_nvrtc_load_error(void) {
    pthread_once(&nv_once, load_once);
    return nv.error;
}

// ---- ptxas' report -----------------------------------------------------------------------

// The numbers on one ptxas line ("Used 72 registers, used 1 barriers, 1024 bytes smem,
// 364 bytes cmem[0]" or "0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads");
// -1 where the line does not say.
typedef struct Fields {
    int64_t registers, barriers, smem, cmem, gmem, stack, stack_total, spill_st, spill_ld;
} Fields;

static void parse_fields(const char *body, Fields *f) {
    *f = (Fields){-1, -1, -1, -1, -1, -1, -1, -1, -1};
    for (const char *p = body; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[160];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        char *q = item;
        while (*q && (*q < '0' || *q > '9'))
            q++;
        if (*q) {
            char *unit;
            int64_t v = strtoll(q, &unit, 10);
            while (*unit == ' ')
                unit++;
            if (strncmp(unit, "bytes ", 6) == 0)
                unit += 6;
            if (strncmp(unit, "registers", 9) == 0)
                f->registers = v;
            else if (strncmp(unit, "barriers", 8) == 0)
                f->barriers = v;
            else if (strncmp(unit, "smem", 4) == 0)
                f->smem = v;
            else if (strncmp(unit, "cmem[", 5) == 0)
                f->cmem = (f->cmem < 0 ? 0 : f->cmem) + v;   // one item per bank
            else if (strncmp(unit, "gmem", 4) == 0)
                f->gmem = v;
            else if (strncmp(unit, "cumulative stack size", 21) == 0)
                f->stack_total = v;
            else if (strncmp(unit, "stack frame", 11) == 0)
                f->stack = v;
            else if (strncmp(unit, "spill stores", 12) == 0)
                f->spill_st = v;
            else if (strncmp(unit, "spill loads", 11) == 0)
                f->spill_ld = v;
        }
        p = end ? end + 1 : p + len;
    }
}

#define SET_IF(dst, v) \
    do {               \
        if ((v) >= 0)  \
            dst = (v); \
    } while (0)

// Appends a kernel named name[0..len) to out; NULL when out of memory.
static NvrtcKernel *add_kernel(NvrtcResult *out, const char *name, size_t len) {
    NvrtcKernel *k = realloc(out->kernels, (size_t)(out->nkernels + 1) * sizeof *k);
    if (!k)
        return NULL;
    out->kernels = k;
    k += out->nkernels;
    *k = (NvrtcKernel){0};
    if (!(k->name = strndup(name, len)))
        return NULL;
    out->nkernels++;
    return k;
}

// Fills out's kernels and module sizes from the ptxas lines of log, whose shape is
//   ptxas info    : 0 bytes gmem, 64 bytes cmem[3]
//   ptxas info    : Compiling entry function 'NAME' for 'sm_90'
//   ptxas info    : Function properties for NAME
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 368 bytes cmem[0]
// ("Function properties" also follows for non-inlined device functions, which are not
// kernels: their lines are skipped). Returns -1 only when out of memory.
static int parse_report(const char *log, NvrtcResult *out) {
    int entry = -1, props = -1;   // the kernel "Used" lines and "." lines belong to
    for (const char *line = log; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[4096];   // long enough for mangled template names
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        line += len + (eol != NULL);
        if (strncmp(buf, "ptxas", 5) != 0)
            continue;
        char *p = buf + 5;
        while (*p == ' ')
            p++;
        bool dot = *p == '.', info = strncmp(p, "info", 4) == 0;
        if (!dot && !info)
            continue;   // ptxas warnings stay in the log only
        p = dot ? p + 1 : strchr(p, ':');
        if (!p)
            continue;
        p += *p == ':';
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, "\r");
        p[n] = '\0';
        Fields f;
        if (dot) {
            if (props < 0)
                continue;
            NvrtcKernel *k = &out->kernels[props];
            parse_fields(p, &f);
            SET_IF(k->stack_bytes, f.stack);
            SET_IF(k->spill_store_bytes, f.spill_st);
            SET_IF(k->spill_load_bytes, f.spill_ld);
        } else if (strncmp(p, "Compiling entry function '", 26) == 0) {
            const char *name = p + 26, *quote = strchr(name, '\'');
            if (!add_kernel(out, name, quote ? (size_t)(quote - name) : strlen(name)))
                return -1;
            entry = props = out->nkernels - 1;
        } else if (strncmp(p, "Function properties for ", 24) == 0) {
            const char *name = p + 24;
            props = -1;
            for (int i = 0; i < out->nkernels; i++)
                if (strcmp(out->kernels[i].name, name) == 0)
                    props = i;
        } else if (strncmp(p, "Used ", 5) == 0) {
            if (entry < 0)
                continue;
            NvrtcKernel *k = &out->kernels[entry];
            parse_fields(p, &f);
            SET_IF(k->registers, (int)f.registers);
            SET_IF(k->barriers, (int)f.barriers);
            SET_IF(k->smem_bytes, f.smem);
            SET_IF(k->const_bytes, f.cmem);
            SET_IF(k->stack_total_bytes, f.stack_total);
        } else if (strstr(p, "bytes gmem")) {
            parse_fields(p, &f);
            SET_IF(out->gmem_bytes, f.gmem);
            SET_IF(out->cmem_bytes, f.cmem);
        }
    }
    // ptxas prints the cumulative stack only when a callee adds to it.
    for (int i = 0; i < out->nkernels; i++)
        if (out->kernels[i].stack_total_bytes < out->kernels[i].stack_bytes)
            out->kernels[i].stack_total_bytes = out->kernels[i].stack_bytes;
    return 0;
}

// ---- compiling ---------------------------------------------------------------------------

enum { MAX_FIXED_OPTS = 6 };

// The options every compile passes, in order, written into opts[] (storage for the
// formatted ones in arch_opt and inc_opt); returns how many.
static int fixed_opts(const char *arch, const char **opts, char *arch_opt, size_t arch_len,
                      char *inc_opt, size_t inc_len) {
    int n = 0;
    snprintf(arch_opt, arch_len, "--gpu-architecture=%s", arch);
    opts[n++] = arch_opt;
    opts[n++] = "-default-device";
    opts[n++] = "--std=c++17";
    if (nv.info.include[0]) {
        snprintf(inc_opt, inc_len, "-I%s", nv.info.include);
        opts[n++] = inc_opt;
    }
    opts[n++] = "--ptxas-options=-v";
    return n;
}

// True when arch is "sm_" and a number with an optional feature letter ("sm_90a"): the
// names that give SASS. compute_XX would give PTX only, which this module does not return.
static bool arch_ok(const char *arch) {
    if (!arch || strlen(arch) > 16 || strncmp(arch, "sm_", 3) != 0 || arch[3] < '1' ||
        arch[3] > '9')
        return false;
    const char *p = arch + 3;
    while (*p >= '0' && *p <= '9')
        p++;
    return p[0] == '\0' || ((p[0] == 'a' || p[0] == 'f') && p[1] == '\0');
}

// Checks the arguments common to both entry points and loads NVRTC; 0 or -1 with err.
static int check_args(const char *source, const char *arch, const char *const *extra,
                      int nextra, char *err, size_t errlen) {
    if (!source)
        return rt_fail(err, errlen, "nvrtc: no source to compile");
    if (!arch_ok(arch))
        return rt_fail(err, errlen, "nvrtc: architecture '%s' is not sm_<number> (for example "
                       "sm_80, sm_90): a CUBIN needs a real GPU architecture",
                       arch ? arch : "(null)");
    if (nextra < 0 || (nextra > 0 && !extra))
        return rt_fail(err, errlen, "nvrtc: %d extra options but no option array", nextra);
    for (int i = 0; i < nextra; i++)
        if (!extra[i])
            return rt_fail(err, errlen, "nvrtc: extra option %d is NULL", i);
    if (!rt_nvrtc_available(NULL))
        return rt_fail(err, errlen, "%s", nv.error);
    return 0;
}

// Copies the first lines of log into dst (at most max_lines lines, dst_len bytes).
static void first_lines(const char *log, int max_lines, char *dst, size_t dst_len) {
    const char *p = log;
    for (int i = 0; i < max_lines && *p; i++) {
        const char *eol = strchr(p, '\n');
        p = eol ? eol + 1 : p + strlen(p);
    }
    size_t n = (size_t)(p - log);
    while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == '\r'))
        n--;
    snprintf(dst, dst_len, "%.*s", (int)n, log);
}

// Each kernel's PTX facts, from the program's PTX (a kernel ptxas names but the PTX does not
// keeps zeros). -1 when the PTX cannot be had.
static int read_ptx_facts(NvrtcProgram prog, NvrtcResult *out) {
    size_t bytes = 0;
    char *ptx = NULL;
    if (nv.ptx_size(prog, &bytes) != NVRTC_OK || !(ptx = xmalloc(bytes + 1)) || nv.ptx(prog, ptx) != NVRTC_OK) {
        free(ptx);
        return -1;
    }
    ptx[bytes] = '\0';
    for (int i = 0; i < out->nkernels; i++)
        rt_ptx_facts(ptx, out->kernels[i].name, &out->kernels[i].ptx);
    free(ptx);
    return 0;
}

// The compile proper; check_args has passed.
static int compile(const char *source, const char *name, const char *arch,
                   const char *const *extra, int nextra, NvrtcResult *out, char *err,
                   size_t errlen) {
    const char **opts = malloc((size_t)(MAX_FIXED_OPTS + nextra) * sizeof *opts);
    if (!opts)
        return rt_fail(err, errlen, "nvrtc: %s: out of memory", name);
    char arch_opt[64], inc_opt[sizeof nv.info.include + 2];
    int nopts = fixed_opts(arch, opts, arch_opt, sizeof arch_opt, inc_opt, sizeof inc_opt);
    for (int i = 0; i < nextra; i++)
        opts[nopts++] = extra[i];

    NvrtcProgram prog = NULL;
    int r = nv.create(&prog, source, name, 0, NULL, NULL);
    if (r != NVRTC_OK) {
        free(opts);
        return rt_fail(err, errlen, "nvrtc: %s: nvrtcCreateProgram failed: %s", name,
                       nv.error_string(r));
    }
    int rc = 0;
    int cr = nv.compile(prog, nopts, opts);
    size_t log_bytes = 0;
    if (nv.log_size(prog, &log_bytes) == NVRTC_OK && (out->log = malloc(log_bytes + 1))) {
        if (log_bytes == 0 || nv.log(prog, out->log) != NVRTC_OK)
            log_bytes = 0;
        out->log[log_bytes] = '\0';
    }
    if (!out->log) {
        rc = rt_fail(err, errlen, "nvrtc: %s: cannot read NVRTC's log", name);
    } else if (cr != NVRTC_OK) {
        char head[1600];
        first_lines(out->log, 12, head, sizeof head);
        rc = rt_fail(err, errlen, "nvrtc: %s: compiling for %s failed (%s)%s%s", name, arch,
                     nv.error_string(cr), head[0] ? ":\n" : "", head);
    } else if ((r = nv.cubin_size(prog, &out->cubin_bytes)) != NVRTC_OK) {
        rc = rt_fail(err, errlen, "nvrtc: %s: nvrtcGetCUBINSize failed: %s", name,
                     nv.error_string(r));
    } else if (!(out->cubin = malloc(out->cubin_bytes ? out->cubin_bytes : 1))) {
        rc = rt_fail(err, errlen, "nvrtc: %s: out of memory for a %zu-byte CUBIN", name,
                     out->cubin_bytes);
    } else if ((r = nv.cubin(prog, (char *)out->cubin)) != NVRTC_OK) {
        rc = rt_fail(err, errlen, "nvrtc: %s: nvrtcGetCUBIN failed: %s", name,
                     nv.error_string(r));
    } else if (rt_nvrtc_cubin_sm(out->cubin, out->cubin_bytes) < 0) {
        rc = rt_fail(err, errlen, "nvrtc: %s: NVRTC returned %zu bytes that are not a CUDA "
                     "ELF image", name, out->cubin_bytes);
    } else if (parse_report(out->log, out) != 0) {
        rc = rt_fail(err, errlen, "nvrtc: %s: out of memory reading ptxas' report", name);
    } else if (read_ptx_facts(prog, out) != 0) {
        rc = rt_fail(err, errlen, "nvrtc: %s: cannot read the PTX NVRTC made", name);
    }
    nv.destroy(&prog);
    free(opts);
    if (rc != 0) {
        // Keep the log for the caller; nothing else of a failed compile is valid.
        char *log = out->log;
        out->log = NULL;
        rt_nvrtc_result_free(out);
        out->log = log;
    }
    return rc;
}

int rt_nvrtc_compile(const char *source, const char *name, const char *arch,
                     const char *const *extra_opts, int nextra, NvrtcResult *out, char *err,
                     size_t errlen) {
    *out = (NvrtcResult){0};
    if (err && errlen)
        err[0] = '\0';
    if (!name)
        name = "kernels.cu";
    if (check_args(source, arch, extra_opts, nextra, err, errlen) != 0)
        return -1;
    return compile(source, name, arch, extra_opts, nextra, out, err, errlen);
}

char *rt_nvrtc_ptx(const char *source, const char *name, int sm, const char *const *extra_opts, int nextra,
                   char *err, size_t errlen) {
    if (!name)
        name = "kernels.cu";
    char real[16];
    snprintf(real, sizeof real, "sm_%d", sm);
    if (sm < 10 || sm > 999) {
        rt_fail(err, errlen, "nvrtc: no architecture %d", sm);
        return NULL;
    }
    if (check_args(source, real, extra_opts, nextra, err, errlen) != 0)
        return NULL;
    const char **opts = xmalloc((size_t)(MAX_FIXED_OPTS + nextra) * sizeof *opts);
    char arch_opt[64], inc_opt[sizeof nv.info.include + 2], virt[24];
    snprintf(virt, sizeof virt, "compute_%d", sm);
    // (every fixed option but the last, ptxas' report: no ptxas runs)
    int nopts = fixed_opts(virt, opts, arch_opt, sizeof arch_opt, inc_opt, sizeof inc_opt) - 1;
    for (int i = 0; i < nextra; i++)
        opts[nopts++] = extra_opts[i];
    NvrtcProgram prog = NULL;
    char *ptx = NULL;
    size_t bytes = 0;
    int r = nv.create(&prog, source, name, 0, NULL, NULL);
    if (r != NVRTC_OK)
        rt_fail(err, errlen, "nvrtc: %s: nvrtcCreateProgram failed: %s", name, nv.error_string(r));
    else if ((r = nv.compile(prog, nopts, opts)) != NVRTC_OK)
        rt_fail(err, errlen, "nvrtc: %s: compiling for %s failed (%s)", name, virt, nv.error_string(r));
    else if ((r = nv.ptx_size(prog, &bytes)) != NVRTC_OK || !(ptx = xmalloc(bytes + 1)) ||
             (r = nv.ptx(prog, ptx)) != NVRTC_OK) {
        rt_fail(err, errlen, "nvrtc: %s: cannot read the PTX for %s", name, virt);
        free(ptx);
        ptx = NULL;
    } else {
        ptx[bytes] = '\0';
    }
    if (prog)
        nv.destroy(&prog);
    free(opts);
    return ptx;
}

void rt_nvrtc_result_free(NvrtcResult *out) {
    if (!out)
        return;
    for (int i = 0; i < out->nkernels; i++)
        free(out->kernels[i].name);
    free(out->kernels);
    free(out->cubin);
    free(out->log);
    *out = (NvrtcResult){0};
}

int rt_nvrtc_cubin_sm(const void *cubin, size_t bytes) {
    const unsigned char *b = cubin;
    if (!b || bytes < 64 || memcmp(b, "\x7f" "ELF", 4) != 0 || b[4] != 2 /* ELFCLASS64 */ ||
        b[5] != 1 /* little-endian */)
        return -1;
    unsigned machine = (unsigned)b[18] | (unsigned)b[19] << 8;
    if (machine != 190)   // EM_CUDA
        return -1;
    uint32_t flags = (uint32_t)b[48] | (uint32_t)b[49] << 8 | (uint32_t)b[50] << 16 |
                     (uint32_t)b[51] << 24;
    // ELF ABI version 8 (CUDA 13: e_flags 0x6005a04 for sm_90, 0x6006402 for sm_100)
    // keeps the SM in bits 8..15; version 7 and older kept it in bits 0..7 (0x5a055a).
    return (int)(b[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
}

// ---- the cache ---------------------------------------------------------------------------

// The first line of every .txt; bumping it (and the key's salt) retires old entries.
#define CACHE_MAGIC "ftc-nvrtc-cache 2"

enum { KEY_HEX = 16 };

// Hashes a field with its length in front, so ("ab", "c") and ("a", "bc") differ.
static uint64_t fnv1a_field(uint64_t h, const void *data, size_t n) {
    uint64_t len = n;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(len >> (8 * i));
    return rt_fnv1a64(rt_fnv1a64(h, le, sizeof le), data, n);
}

static uint64_t fnv1a_str(uint64_t h, const char *s) {
    return fnv1a_field(h, s, strlen(s));
}

// The cache key: everything that decides the CUBIN and its log. The options include the
// architecture and the toolkit include directory; the source name reaches the log and
// -lineinfo's line tables.
static uint64_t cache_key(const char *source, const char *name, const char *arch,
                          const char *const *extra, int nextra) {
    const char *opts[MAX_FIXED_OPTS];
    char arch_opt[64], inc_opt[sizeof nv.info.include + 2], version[32];
    int nopts = fixed_opts(arch, opts, arch_opt, sizeof arch_opt, inc_opt, sizeof inc_opt);
    snprintf(version, sizeof version, "%d.%d", nv.info.major, nv.info.minor);
    uint64_t h = RT_FNV_BASIS;
    h = fnv1a_str(h, CACHE_MAGIC);
    h = fnv1a_str(h, version);
    h = fnv1a_str(h, name);
    h = fnv1a_str(h, source);
    for (int i = 0; i < nopts; i++)
        h = fnv1a_str(h, opts[i]);
    for (int i = 0; i < nextra; i++)
        h = fnv1a_str(h, extra[i]);
    return h;
}

int rt_nvrtc_cache_dir(char *buf, size_t len) { return rt_cache_path("nvrtc", buf, len); }

// Writes data to dir/file through a temporary name and rename, so a reader sees the old
// entry, no entry or the whole new one. No fsync: a file torn by a crash fails the size
// and hash checks on the next read and is compiled again.
static int write_atomic(const char *dir, const char *file, const void *data, size_t n) {
    char tmp[PATH_MAX], dst[PATH_MAX];
    if (snprintf(dst, sizeof dst, "%s/%s", dir, file) >= (int)sizeof dst ||
        snprintf(tmp, sizeof tmp, "%s/.%s.%ld.XXXXXX", dir, file, (long)getpid()) >=
            (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemp(tmp);   // the pid names the writer; the suffix keeps threads apart
    if (fd < 0)
        return -1;
    int rc = fchmod(fd, 0644) == 0 && rt_write_full(fd, data, n) == 0 ? 0 : -1;
    int saved = errno;
    if (close(fd) != 0 && rc == 0)
        rc = -1, saved = errno;
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = -1, saved = errno;
    if (rc != 0)
        unlink(tmp);
    errno = saved;
    return rc;
}

// The .txt of an entry: the header, then the report, then the log's byte count and bytes.
//   ftc-nvrtc-cache 1
//   key 0123456789abcdef
//   nvrtc 13.0
//   arch sm_90
//   cubin 13880 0123456789abcdef      (bytes, FNV-1a 64 of them)
//   gmem 0
//   cmem 64
//   kernels 2
//   kernel REGS BARRIERS SMEM CONST STACK STACK_TOTAL SPILL_ST SPILL_LD PTX NAME
//     (PTX: the facts of PtxFacts, comma-separated in its order)
//   log 890
//   <890 bytes>
// Returns a malloc'd string; NULL when out of memory.
static char *format_txt(const NvrtcResult *r, const char *arch) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "%s\nkey %016" PRIx64 "\nnvrtc %d.%d\narch %s\ncubin %zu %016" PRIx64 "\n",
            CACHE_MAGIC, r->key, nv.info.major, nv.info.minor, arch, r->cubin_bytes,
            rt_fnv1a64(RT_FNV_BASIS, r->cubin, r->cubin_bytes));
    fprintf(f, "gmem %" PRId64 "\ncmem %" PRId64 "\nkernels %d\n", r->gmem_bytes,
            r->cmem_bytes, r->nkernels);
    for (int i = 0; i < r->nkernels; i++) {
        const NvrtcKernel *k = &r->kernels[i];
        const PtxFacts *x = &k->ptx;
        fprintf(f, "kernel %d %d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                " %" PRId64 " %d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d %s\n", k->registers, k->barriers,
                k->smem_bytes, k->const_bytes, k->stack_bytes, k->stack_total_bytes,
                k->spill_store_bytes, k->spill_load_bytes, x->instructions, x->mma, x->ldmatrix,
                x->cp_async, x->load[0], x->load[1], x->load[2], x->store[0], x->store[1],
                x->store[2], x->fp64, k->name);
    }
    fprintf(f, "log %zu\n%s", strlen(r->log), r->log);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

// Reads the next line of a .txt at *p into line (NUL-terminated, without its newline);
// false at the end or when the line does not fit.
static bool next_line(const char **p, const char *end, char *line, size_t len) {
    const char *eol = memchr(*p, '\n', (size_t)(end - *p));
    if (!eol || (size_t)(eol - *p) >= len)
        return false;
    memcpy(line, *p, (size_t)(eol - *p));
    line[eol - *p] = '\0';
    *p = eol + 1;
    return true;
}

// Fills out from the entry at dir/<key>.{txt,cubin} when both are whole and agree with
// key and arch; false (out zeroed) when the entry is missing, short or corrupt. The CUBIN
// is checked by size and hash, and as ELF only loosely (not its SM): the arch is already in
// the key, and an ELF layout this reader does not know must not turn every hit into a miss.
static bool cache_read(const char *dir, uint64_t key, const char *arch, NvrtcResult *out) {
    char path[PATH_MAX];
    size_t txt_bytes = 0, cubin_bytes = 0;
    if (snprintf(path, sizeof path, "%s/%016" PRIx64 ".txt", dir, key) >= (int)sizeof path)
        return false;
    char *txt = rt_read_whole(path, &txt_bytes);
    if (!txt)
        return false;
    const char *p = txt, *end = txt + txt_bytes;
    char line[4096 + 128], want[128];   // room for a kernel line with the longest name
    bool ok = false;
    unsigned long long bytes, hash, log_bytes;
    int nkernels;
    long long gmem, cmem;
    *out = (NvrtcResult){0};

    // Each header line must be exactly what this process would have written.
#define EXPECT(...)                                                                        \
    (snprintf(want, sizeof want, __VA_ARGS__), next_line(&p, end, line, sizeof line) &&    \
                                                   strcmp(line, want) == 0)
    if (!EXPECT("%s", CACHE_MAGIC) || !EXPECT("key %016" PRIx64, key) ||
        !EXPECT("nvrtc %d.%d", nv.info.major, nv.info.minor) || !EXPECT("arch %s", arch))
        goto done;
#undef EXPECT
    if (!next_line(&p, end, line, sizeof line) ||
        sscanf(line, "cubin %llu %llx", &bytes, &hash) != 2 ||
        !next_line(&p, end, line, sizeof line) || sscanf(line, "gmem %lld", &gmem) != 1 ||
        !next_line(&p, end, line, sizeof line) || sscanf(line, "cmem %lld", &cmem) != 1 ||
        !next_line(&p, end, line, sizeof line) ||
        sscanf(line, "kernels %d", &nkernels) != 1 || nkernels < 0)
        goto done;
    out->gmem_bytes = gmem, out->cmem_bytes = cmem;
    for (int i = 0; i < nkernels; i++) {
        NvrtcKernel k = {0};
        long long v[6];
        int at = 0;
        PtxFacts *x = &k.ptx;
        if (!next_line(&p, end, line, sizeof line) ||
            sscanf(line, "kernel %d %d %lld %lld %lld %lld %lld %lld %d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d %n",
                   &k.registers, &k.barriers, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &x->instructions, &x->mma, &x->ldmatrix, &x->cp_async, &x->load[0], &x->load[1],
                   &x->load[2], &x->store[0], &x->store[1], &x->store[2], &x->fp64, &at) != 19 ||
            at == 0 || line[at] == '\0')
            goto done;
        NvrtcKernel *dst = add_kernel(out, line + at, strlen(line + at));
        if (!dst)
            goto done;
        char *name = dst->name;
        *dst = k;
        dst->name = name;
        dst->smem_bytes = v[0], dst->const_bytes = v[1], dst->stack_bytes = v[2];
        dst->stack_total_bytes = v[3], dst->spill_store_bytes = v[4], dst->spill_load_bytes = v[5];
    }
    if (!next_line(&p, end, line, sizeof line) || sscanf(line, "log %llu", &log_bytes) != 1 ||
        log_bytes != (unsigned long long)(end - p) || !(out->log = xstrndup(p, log_bytes)))
        goto done;

    if (snprintf(path, sizeof path, "%s/%016" PRIx64 ".cubin", dir, key) < (int)sizeof path)
        out->cubin = (unsigned char *)rt_read_whole(path, &cubin_bytes);
    out->cubin_bytes = cubin_bytes;
    ok = out->cubin && cubin_bytes == bytes &&
         rt_fnv1a64(RT_FNV_BASIS, out->cubin, cubin_bytes) == hash &&
         rt_nvrtc_cubin_sm(out->cubin, cubin_bytes) >= 0;
done:
    free(txt);
    if (!ok)
        rt_nvrtc_result_free(out);
    return ok;
}

int rt_nvrtc_compile_cached(const char *cache_dir, const char *source, const char *name,
                            const char *arch, const char *const *extra_opts, int nextra,
                            NvrtcResult *out, char *err, size_t errlen) {
    *out = (NvrtcResult){0};
    if (err && errlen)
        err[0] = '\0';
    if (!name)
        name = "kernels.cu";
    if (check_args(source, arch, extra_opts, nextra, err, errlen) != 0)
        return -1;
    char dir[PATH_MAX];
    if (cache_dir ? snprintf(dir, sizeof dir, "%s", cache_dir) >= (int)sizeof dir
                  : rt_nvrtc_cache_dir(dir, sizeof dir) != 0)
        dir[0] = '\0';   // compiled, not cached; the note below says why
    uint64_t key = cache_key(source, name, arch, extra_opts, nextra);

    if (dir[0] && cache_read(dir, key, arch, out)) {
        out->key = key;
        out->cache_hit = true;
        return 0;
    }
    if (compile(source, name, arch, extra_opts, nextra, out, err, errlen) != 0)
        return -1;
    out->key = key;

    // The compile succeeded; a cache that cannot be written costs time, not correctness.
    char file[KEY_HEX + 8], *txt = NULL;
    if (!dir[0] && cache_dir) {
        rt_fail(err, errlen, "nvrtc: the cache directory's path is too long; %s not cached",
                name);
    } else if (!dir[0]) {
        rt_fail(err, errlen, "nvrtc: no cache directory ($FTC_CACHE_DIR, $XDG_CACHE_HOME and "
                "$HOME are unset); %s not cached", name);
    } else if (rt_mkdir_p(dir) != 0) {
        rt_fail(err, errlen, "nvrtc: %s: cannot create the cache directory: %s", dir,
                strerror(errno));
    } else if (!(txt = format_txt(out, arch))) {
        rt_fail(err, errlen, "nvrtc: %s: out of memory formatting a cache entry", name);
    } else {
        // The .cubin first: a .txt always names a .cubin that was written before it.
        snprintf(file, sizeof file, "%016" PRIx64 ".cubin", key);
        int rc = write_atomic(dir, file, out->cubin, out->cubin_bytes);
        if (rc == 0) {
            snprintf(file, sizeof file, "%016" PRIx64 ".txt", key);
            rc = write_atomic(dir, file, txt, strlen(txt));
        }
        if (rc != 0)
            rt_fail(err, errlen, "nvrtc: %s/%s: cannot write the cache entry: %s", dir, file,
                    strerror(errno));
    }
    free(txt);
    return 0;
}
