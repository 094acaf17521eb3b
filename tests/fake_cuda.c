// fake_cuda.c — the simulated CUDA driver and cuBLASLt of fake_cuda.h.
#include "fake_cuda.h"
#include "../runtime/cpu/kernels.h"
#include "../runtime/kernel_args.h"
#include "../runtime/nvrtc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { F_LAUNCH, F_GEMM, F_COPY, F_MEMSET, F_RECORD, F_WAIT, F_HOST };
enum { MAX_STREAMS = 64, MAX_EVENTS = 4096, MAX_POINTS = PLAN_GROUP_MAX * PLAN_GROUP_OPERANDS + 8 };

typedef struct FDesc {
    int compute, scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;
} FDesc;

typedef struct FLayout {
    int type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
} FLayout;

typedef struct FPref {
    uint64_t ws;
    uint32_t align[4];              // the operands' least alignment it may assume (0: 256)
} FPref;

typedef struct FFunction {
    char name[64];
    bool group;
    int max_dynamic_smem;           // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
} FFunction;

typedef struct FOp {
    int kind;
    long seq;
    int stream;
    const char *what;               // for race messages
    uintptr_t point[MAX_POINTS];    // touched at unknown extent (a kernel's or GEMM's operands)
    int npoint;
    uintptr_t w0, w1, r0, r1;       // the byte ranges written and read (copies, memsets)
    // payload
    FFunction *fn;
    void *args;
    unsigned grid[3], block[3], smem;
    FDesc desc;
    FLayout la, lb, lc, ld;
    float alpha, beta;
    const void *a, *b, *c;
    void *d;
    uint32_t value;
    int width;
    int wait_stream;                // F_WAIT: the event's stream and position when issued
    long wait_pos;
    int (*host)(void *arg);         // F_HOST: runs with args; 0 done, 1 not yet
    bool checked;                   // its race check is done (an F_HOST op may run again)
    int us;                         // its time on the simulated clock (cuEventElapsedTime)
    long lpos;                      // captured: its place on its lane (F_WAIT: wait_stream and
                                    // wait_pos are a lane and a place there)
} FOp;

typedef struct FStream {
    FOp **op;
    int n, cap, done;               // ops issued, and how many have run (a prefix)
} FStream;

typedef struct FEvent {
    int stream;                     // -1: never recorded
    long pos;
    int lane;                       // recorded inside the capture under way: its lane (else -1)
    long lpos;                      // ... and place there
} FEvent;

// A graph: the operations captured, in issue order, each on the lane of the stream it was
// issued to (lane 0 the stream the capture began on). An instantiated graph keeps its own
// copy, run on private streams (one a lane) each time it is launched.
typedef struct FGraph {
    FOp **op;
    int n, cap;
    int nlanes;
    long lane_len[MAX_STREAMS];
    int lane_stream[MAX_STREAMS];   // an instantiated graph: the private stream of each lane
    CuGraphNode last[MAX_STREAMS];  // a lane's last node (cuStreamGetCaptureInfo's dependency)
} FGraph;

typedef struct Alloc {
    uintptr_t p;
    size_t n;
} Alloc;

static struct {
    pthread_mutex_t mu;
    FakeOptions o;
    EmuKernels *k;
    FStream stream[MAX_STREAMS];
    int nstreams;
    FEvent event[MAX_EVENTS];
    int nevents;
    FFunction *fns[4096];
    int nfns;
    Alloc *alloc;
    int nalloc, alloc_cap;
    Alloc pinned[256];              // cuMemHostAlloc's blocks (a copy from elsewhere is pageable)
    int npinned;
    FOp *late[64];                  // pageable cuMemcpyHtoD's DMA, still to land
    int nlate;
    int64_t allocated;
    long seq;
    FakeStats st;
    size_t log_len, log_cap;
    char first_error[512];
    CuResult sticky;                // a kernel's fault: every later call that waits returns it
    // Stream capture: the graph being captured, each stream's lane in it (-1: not capturing),
    // the stream it began on, and whether something unsupported happened meanwhile.
    FGraph *cap;
    int lane_of[MAX_STREAMS];
    int origin;
    CuResult cap_error;
    unsigned long long cap_id;
} fk = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void log_launch(const char *name) {
    size_t n = strlen(name);
    if (fk.log_len + n + 2 > fk.log_cap) {
        fk.log_cap = (fk.log_len + n + 2) * 2;
        fk.st.launch_log = realloc(fk.st.launch_log, fk.log_cap);
    }
    memcpy(fk.st.launch_log + fk.log_len, name, n);
    fk.log_len += n;
    fk.st.launch_log[fk.log_len++] = '\n';
    fk.st.launch_log[fk.log_len] = '\0';
}

static void race(const FOp *x, const FOp *y) {
    if (!fk.st.races++)
        snprintf(fk.st.first_race, sizeof fk.st.first_race,
                 "%s (stream %d, issued #%ld) ran while %s (stream %d, issued #%ld) had not, and "
                 "they touch the same bytes, one writing",
                 x->what, x->stream, x->seq, y->what, y->stream, y->seq);
}

static bool in_range(uintptr_t p, uintptr_t lo, uintptr_t hi) { return lo < hi && p >= lo && p < hi; }
static bool overlap(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1) {
    return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

static bool conflict(const FOp *x, const FOp *y) {
    if (overlap(x->w0, x->w1, y->w0, y->w1) || overlap(x->w0, x->w1, y->r0, y->r1) ||
        overlap(x->r0, x->r1, y->w0, y->w1))
        return true;
    for (int i = 0; i < x->npoint; i++)
        if (in_range(x->point[i], y->w0, y->w1))
            return true;
    for (int i = 0; i < y->npoint; i++)
        if (in_range(y->point[i], x->w0, x->w1))
            return true;
    return false;
}

// An operation about to run against every one issued before it, elsewhere, not yet run
// (the DMA of a pageable copy among them).
static void check(const FOp *x) {
    for (int i = 0; i < fk.nlate; i++)
        if (fk.late[i]->seq < x->seq && conflict(x, fk.late[i]))
            race(x, fk.late[i]);
    for (int t = 0; t < fk.nstreams; t++) {
        if (t == x->stream)
            continue;
        const FStream *s = &fk.stream[t];
        for (int i = s->done; i < s->n && s->op[i]->seq < x->seq; i++)
            if (s->op[i]->kind != F_RECORD && s->op[i]->kind != F_WAIT && conflict(x, s->op[i]))
                race(x, s->op[i]);
    }
}

//
// GEMMs in fp32 from the column-major descriptors.
//

static float load(const void *base, int type, int64_t i) {
    if (type == LTX_R_32F)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return type == LTX_R_16BF ? cpu_bf16_to_f32(h) : cpu_f16_to_f32(h);
}

static void store(void *base, int type, int64_t i, float v) {
    if (type == LTX_R_32F)
        ((float *)base)[i] = v;
    else
        ((uint16_t *)base)[i] = type == LTX_R_16BF ? cpu_f32_to_bf16(v) : cpu_f32_to_f16(v);
}

static float at(const void *base, const FLayout *l, int64_t r, int64_t c, int64_t b) {
    return load(base, l->type, r + c * l->ld + b * l->stride);
}

static void run_gemm(const FOp *g) {
    int64_t m = (int64_t)g->lc.rows, n = (int64_t)g->lc.cols;
    int64_t k = g->desc.transa ? (int64_t)g->la.rows : (int64_t)g->la.cols;
    int64_t batch = g->lc.batch > 1 ? g->lc.batch : 1;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                float acc = 0.0f;
                for (int64_t q = 0; q < k; q++) {
                    float x = g->desc.transa ? at(g->a, &g->la, q, i, b) : at(g->a, &g->la, i, q, b);
                    float y = g->desc.transb ? at(g->b, &g->lb, j, q, b) : at(g->b, &g->lb, q, j, b);
                    acc += x * y;
                }
                float v = g->alpha * acc;
                if (g->beta != 0.0f)
                    v += g->beta * at(g->c, &g->lc, i, j, b);
                if (g->desc.epilogue == LTX_EPILOGUE_BIAS)
                    v += load(g->desc.bias, g->desc.bias_type, i);
                store(g->d, g->ld.type, i + j * g->ld.ld + b * g->ld.stride, v);
            }
}

//
// Running issued work.
//

// Runs x; false when it is a host operation that is not done yet (the stream waits there).
static bool execute(FOp *x) {
    if (fk.sticky)   // the context is lost: nothing more runs
        return true;
    if (!x->checked)
        check(x);
    x->checked = true;
    char err[1024];
    switch (x->kind) {
    case F_LAUNCH:
        if (fk.o.fault_kernel && strstr(x->fn->name, fk.o.fault_kernel)) {
            fk.sticky = 700;   // CUDA_ERROR_ILLEGAL_ADDRESS, on the context from now on
            break;
        }
        if (rt_emu_kernels_launch(fk.k, x->fn->name, x->grid, x->block, x->smem, x->args,
                                  x->fn->group, err, sizeof err) != 0 &&
            !fk.first_error[0])
            snprintf(fk.first_error, sizeof fk.first_error, "%.500s", err);
        break;
    case F_GEMM:
        run_gemm(x);
        break;
    case F_COPY:
        memmove((void *)x->w0, (const void *)x->r0, x->w1 - x->w0);
        break;
    case F_MEMSET:
        for (uintptr_t p = x->w0; p + (uintptr_t)x->width <= x->w1; p += (uintptr_t)x->width)
            memcpy((void *)p, &x->value, (size_t)x->width);
        break;
    case F_HOST:
        return x->host(x->args) == 0;
    default:
        break;
    }
    return true;
}

// Runs stream s up to and including position pos, and whatever that waits for first; false
// when a host operation on the way is not done yet.
static bool run_to(int s, long pos) {
    FStream *st = &fk.stream[s];
    while (st->done <= pos && st->done < st->n) {
        FOp *x = st->op[st->done];
        if (x->kind == F_WAIT && x->wait_stream >= 0 && !run_to(x->wait_stream, x->wait_pos))
            return false;
        if (!execute(x))
            return false;
        st->done++;
    }
    return true;
}

static void run_all(void) {
    for (int s = fk.nstreams - 1; s >= 0; s--)
        run_to(s, fk.stream[s].n - 1);
}

static bool capturing(int id) { return fk.cap && fk.lane_of[id] >= 0; }

// An operation issued on a stream in capture: appended to the graph, on the stream's lane.
static FOp *capture(int kind, int id, const char *what) {
    FGraph *g = fk.cap;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->op = realloc(g->op, sizeof *g->op * (size_t)g->cap);
    }
    FOp *x = calloc(1, sizeof *x);
    int lane = fk.lane_of[id];
    *x = (FOp){.kind = kind, .seq = ++fk.seq, .stream = lane, .what = what, .wait_stream = -1, .us = 1,
               .lpos = g->lane_len[lane]++};
    g->op[g->n++] = x;
    g->last[lane] = (CuGraphNode)(uintptr_t)g->n;   // a node is its number in the graph, from 1
    return x;
}

static FOp *issue(int kind, CuStream s, const char *what) {
    int id = (int)(uintptr_t)s - 1;
    if (capturing(id))
        return capture(kind, id, what);
    FStream *st = &fk.stream[id];
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 1024;
        st->op = realloc(st->op, sizeof *st->op * (size_t)st->cap);
    }
    FOp *x = calloc(1, sizeof *x);
    x->kind = kind;
    x->seq = ++fk.seq;
    x->stream = id;
    x->what = what;
    x->wait_stream = -1;
    x->us = 1;
    st->op[st->n++] = x;
    return x;
}

// A stream or event is its number from 1; one the driver never made (NULL, say) is
// CUDA_ERROR_INVALID_HANDLE, as a driver answers it, and counted (fake_cuda_close aborts).
static bool valid_handle(uintptr_t h, int made) {
    bool ok = h >= 1 && h <= (uintptr_t)made;
    if (!ok)
        __atomic_add_fetch(&fk.st.bad_handles, 1, __ATOMIC_RELAXED);
    return ok;
}
static bool valid_stream(CuStream s) { return valid_handle((uintptr_t)s, fk.nstreams); }
static bool valid_event(CuEvent e) { return valid_handle((uintptr_t)e, fk.nevents); }

//
// The driver.
//

#define LOCKED(...)                                                                                \
    do {                                                                                           \
        pthread_mutex_lock(&fk.mu);                                                                \
        __VA_ARGS__;                                                                               \
        pthread_mutex_unlock(&fk.mu);                                                              \
    } while (0)

static CuResult f_init(unsigned flags) { return flags ? 1 : CUX_SUCCESS; }
static CuResult f_version(int *v) { *v = fk.o.driver_version ? fk.o.driver_version : 13000; return CUX_SUCCESS; }
// The devices this process sees: CUDA_VISIBLE_DEVICES's entries where it is set (as a
// launcher binding a GPU to each rank sets it), else the options' (1 unless given).
static int visible_devices(void) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v)
        return fk.o.devices > 0 ? fk.o.devices : 1;
    int n = 0;
    for (const char *p = v; *p; p++)
        n += (p == v || p[-1] == ',') && *p != ',';
    return n;
}
static CuResult f_count(int *n) { *n = visible_devices(); return CUX_SUCCESS; }
static CuResult f_get(CuDevice *d, int i) { *d = i; return i >= 0 && i < visible_devices() ? CUX_SUCCESS : 101; }
static CuResult f_name(char *name, int len, CuDevice d) {
    (void)d;
    snprintf(name, (size_t)len, "Simulated GPU");
    return CUX_SUCCESS;
}
// The shared memory a block may have with the attribute raised: 227 KiB from sm_90, 163 KiB on
// sm_80 and sm_87, 99 KiB on the other Ampere and Ada parts.
static int smem_optin(void) {
    int cc = fk.o.cc_major * 10 + fk.o.cc_minor;
    return cc >= 90 ? 232448 : cc == 80 || cc == 87 ? 166912 : 101376;
}
static CuResult f_attr(int *v, int attr, CuDevice d) {
    (void)d;
    *v = attr == CUX_ATTR_CC_MAJOR ? fk.o.cc_major : attr == CUX_ATTR_CC_MINOR ? fk.o.cc_minor
         : attr == CUX_ATTR_SMEM_OPTIN ? smem_optin() : 0;
    return CUX_SUCCESS;
}
// A kernel's limit on dynamic shared memory, as the driver takes it: up to the device's.
static CuResult f_func_set_attr(CuFunction f, int attr, int value) {
    FFunction *fn = (FFunction *)f;
    if (!fn || attr != CUX_FUNC_MAX_DYNAMIC_SMEM || value < 0 || value > smem_optin())
        return 1;   // CUDA_ERROR_INVALID_VALUE
    fn->max_dynamic_smem = value;
    return CUX_SUCCESS;
}
static CuResult f_retain(CuContext *c, CuDevice d) {
    (void)d;
    *c = (CuContext)(uintptr_t)0xc0;
    return CUX_SUCCESS;
}
static CuResult f_release(CuDevice d) { (void)d; return CUX_SUCCESS; }
static CuResult f_ctx_flags(CuDevice d, unsigned flags) {
    (void)d;
    if (flags & ~7u)
        return 1;   // CUDA_ERROR_INVALID_VALUE: only the scheduling flags here
    fk.st.ctx_flags = (int)flags;
    return CUX_SUCCESS;
}
static CuResult f_set_current(CuContext c) { return c ? CUX_SUCCESS : 201; }
static void land_late(void);
// What a capture cannot hold, called while one is under way: refused, and the capture
// invalidated (a driver's answer in the capture's thread).
static CuResult refuse_in_capture(void) {
    CuResult r = CUX_SUCCESS;
    LOCKED(if (fk.cap) r = fk.cap_error = CUX_ERROR_CAPTURE_UNSUPPORTED);
    return r;
}
static CuResult f_ctx_sync(void) {
    if (refuse_in_capture())
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    LOCKED(fk.st.host_syncs++; fk.st.ctx_syncs++; run_all(); land_late());
    return fk.sticky;
}
static CuResult f_mem_info(size_t *free_b, size_t *total) {
    LOCKED(int64_t f = fk.o.total_bytes - fk.o.context_bytes - fk.allocated; *total = (size_t)fk.o.total_bytes;
           *free_b = (size_t)(f > 0 ? f : 0));
    return CUX_SUCCESS;
}
static CuResult f_alloc(CuDevPtr *p, size_t n) {
    CuResult r = CUX_SUCCESS;
    LOCKED(if ((int64_t)n > fk.o.total_bytes - fk.o.context_bytes - fk.allocated) r =
               CUX_ERROR_OUT_OF_MEMORY;
           else {
               void *m = aligned_alloc(256, (n + 255) / 256 * 256);
               if (fk.nalloc == fk.alloc_cap) {
                   fk.alloc_cap = fk.alloc_cap ? 2 * fk.alloc_cap : 64;
                   fk.alloc = realloc(fk.alloc, sizeof *fk.alloc * (size_t)fk.alloc_cap);
               }
               fk.alloc[fk.nalloc++] = (Alloc){(uintptr_t)m, n};
               fk.allocated += (int64_t)n;
               *p = (CuDevPtr)(uintptr_t)m;
           });
    return r;
}
static CuResult f_free(CuDevPtr p) {
    CuResult r = 1;
    LOCKED(for (int i = 0; i < fk.nalloc; i++) if (fk.alloc[i].p == (uintptr_t)p) {
        fk.allocated -= (int64_t)fk.alloc[i].n;
        free((void *)fk.alloc[i].p);
        fk.alloc[i] = fk.alloc[--fk.nalloc];
        r = CUX_SUCCESS;
        break;
    });
    return r;
}
static CuResult f_host_alloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    *p = aligned_alloc(256, (n + 255) / 256 * 256);
    if (*p)
        LOCKED(if (fk.npinned < (int)(sizeof fk.pinned / sizeof fk.pinned[0]))
                   fk.pinned[fk.npinned++] = (Alloc){(uintptr_t)*p, n});
    return *p ? CUX_SUCCESS : CUX_ERROR_OUT_OF_MEMORY;
}
static CuResult f_host_free(void *p) {
    LOCKED(for (int i = 0; i < fk.npinned; i++) if (fk.pinned[i].p == (uintptr_t)p) {
        fk.pinned[i] = fk.pinned[--fk.npinned];
        break;
    });
    free(p);
    return CUX_SUCCESS;
}
static bool pinned(const void *p, size_t n) {
    for (int i = 0; i < fk.npinned; i++)
        if ((uintptr_t)p >= fk.pinned[i].p && (uintptr_t)p + n <= fk.pinned[i].p + fk.pinned[i].n)
            return true;
    return false;
}

// The DMA of pageable copies lands when the legacy stream is synchronised with: at a
// synchronous copy or cuCtxSynchronize, not at a non-blocking stream's wait.
static void land_late(void) {
    for (int i = 0; i < fk.nlate; i++) {
        FOp *x = fk.late[i];
        memmove((void *)x->w0, x->args, x->w1 - x->w0);
        free(x->args);
        free(x);
    }
    fk.nlate = 0;
}

// A synchronous copy waits for nothing on our (non-blocking) streams: with work in flight
// on its bytes it is a race.
static CuResult sync_copy(void *dst, const void *src, size_t n, const char *what) {
    LOCKED(land_late(); FOp x = {.kind = F_COPY, .seq = ++fk.seq, .stream = -1, .what = what,
                                 .w0 = (uintptr_t)dst, .w1 = (uintptr_t)dst + n, .r0 = (uintptr_t)src,
                                 .r1 = (uintptr_t)src + n};
           check(&x); memmove(dst, src, n));
    return CUX_SUCCESS;
}
// From pageable memory, as a driver may: the call returns once the bytes are staged, and the
// DMA lands later, unordered with the non-blocking streams (a kernel that reads them before
// is a race, and reads what was there).
static CuResult f_htod(CuDevPtr d, const void *s, size_t n) {
    if (refuse_in_capture())
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    CuResult r = CUX_SUCCESS;
    LOCKED(if (pinned(s, n) || fk.nlate == (int)(sizeof fk.late / sizeof fk.late[0])) r = 1;
           else {
               FOp *x = calloc(1, sizeof *x);
               *x = (FOp){.kind = F_COPY, .seq = ++fk.seq, .stream = -1,
                          .what = "the DMA of a cuMemcpyHtoD from pageable memory",
                          .w0 = (uintptr_t)d, .w1 = (uintptr_t)d + n, .args = malloc(n ? n : 1)};
               memcpy(x->args, s, n);
               fk.late[fk.nlate++] = x;
           });
    return r == CUX_SUCCESS ? r : sync_copy((void *)(uintptr_t)d, s, n, "cuMemcpyHtoD");
}
static CuResult f_dtoh(void *d, CuDevPtr s, size_t n) {
    if (refuse_in_capture())
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    return sync_copy(d, (const void *)(uintptr_t)s, n, "cuMemcpyDtoH");
}
static CuResult f_copy_async(CuDevPtr d, CuDevPtr s, size_t n, CuStream st) {
    if (!valid_stream(st))
        return 400;
    LOCKED(FOp *x = issue(F_COPY, st, "cuMemcpyAsync"); x->w0 = (uintptr_t)d; x->w1 = x->w0 + n;
           x->r0 = (uintptr_t)s; x->r1 = x->r0 + n; fk.st.copies++);
    return CUX_SUCCESS;
}
static CuResult memset_async(CuDevPtr d, uint32_t v, int width, size_t n, CuStream st) {
    if (!valid_stream(st))
        return 400;
    LOCKED(FOp *x = issue(F_MEMSET, st, "cuMemsetAsync"); x->w0 = (uintptr_t)d;
           x->w1 = x->w0 + n * (size_t)width; x->value = v; x->width = width; fk.st.memsets++);
    return CUX_SUCCESS;
}
static CuResult f_memset8(CuDevPtr d, unsigned char v, size_t n, CuStream s) { return memset_async(d, v, 1, n, s); }
static CuResult f_memset16(CuDevPtr d, unsigned short v, size_t n, CuStream s) { return memset_async(d, v, 2, n, s); }
static CuResult f_memset32(CuDevPtr d, unsigned int v, size_t n, CuStream s) { return memset_async(d, v, 4, n, s); }
static CuResult f_stream_create(CuStream *s, unsigned flags) {
    CuResult r = CUX_SUCCESS;
    LOCKED(if (flags != CUX_STREAM_NON_BLOCKING || fk.nstreams == MAX_STREAMS) r = 1;
           else *s = (CuStream)(uintptr_t)(++fk.nstreams));
    return r;
}
// Priorities as on an A100 or H100: 0 (least) to -5 (greatest); the stream's recorded.
static CuResult f_priority_range(int *least, int *greatest) {
    *least = 0, *greatest = -5;
    return CUX_SUCCESS;
}
static CuResult f_stream_create_priority(CuStream *s, unsigned flags, int priority) {
    if (priority < -5 || priority > 0)
        return 1;
    CuResult r = f_stream_create(s, flags);
    if (r == CUX_SUCCESS && priority < fk.st.top_priority)
        fk.st.top_priority = priority, fk.st.top_priority_stream = (int)(uintptr_t)*s - 1;
    return r;
}
static CuResult f_stream_destroy(CuStream s) { return valid_stream(s) ? CUX_SUCCESS : 400; }
static CuResult f_stream_sync(CuStream s) {
    if (!valid_stream(s))
        return 400;
    if (refuse_in_capture())
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    LOCKED(fk.st.host_syncs++; int id = (int)(uintptr_t)s - 1; run_to(id, fk.stream[id].n - 1));
    return fk.sticky;
}
static CuResult f_event_create(CuEvent *e, unsigned flags) {
    (void)flags;
    CuResult r = CUX_SUCCESS;
    LOCKED(if (fk.nevents == MAX_EVENTS) r = 2;
           else { fk.event[fk.nevents].stream = fk.event[fk.nevents].lane = -1; *e = (CuEvent)(uintptr_t)(++fk.nevents); });
    return r;
}
static CuResult f_event_destroy(CuEvent e) { (void)e; return CUX_SUCCESS; }
static CuResult f_event_record(CuEvent e, CuStream s) {
    if (!valid_stream(s) || !valid_event(e))
        return 400;
    LOCKED(int id = (int)(uintptr_t)e - 1; FOp *x = issue(F_RECORD, s, "cuEventRecord"); x->us = 0;
           if (capturing((int)(uintptr_t)s - 1)) { fk.event[id].lane = x->stream; fk.event[id].lpos = x->lpos; }
           else { fk.event[id].lane = -1; fk.event[id].stream = x->stream; fk.event[id].pos = fk.stream[x->stream].n - 1; });
    return CUX_SUCCESS;
}
static CuResult f_wait_event(CuStream s, CuEvent e, unsigned flags) {
    (void)flags;
    if (!valid_stream(s) || !valid_event(e))
        return 400;
    CuResult r = CUX_SUCCESS;
    LOCKED(int id = (int)(uintptr_t)e - 1; int sid = (int)(uintptr_t)s - 1;
           bool inside = fk.cap && fk.event[id].lane >= 0;   // recorded in the capture under way
           if (capturing(sid) && !inside) {   // a capture waits only on its own work
               r = fk.cap_error = CUX_ERROR_CAPTURE_ISOLATION;
           } else {
               if (inside && fk.lane_of[sid] < 0)   // the stream joins the capture
                   fk.lane_of[sid] = fk.cap->nlanes++;
               FOp *x = issue(F_WAIT, s, "cuStreamWaitEvent");
               fk.st.waits++;
               if (fk.o.ignore_waits) {
               } else if (inside) {
                   x->wait_stream = fk.event[id].lane; x->wait_pos = fk.event[id].lpos;
               } else if (fk.event[id].lane < 0) {   // (one recorded in a capture is not recorded)
                   x->wait_stream = fk.event[id].stream; x->wait_pos = fk.event[id].pos;
               }
           });
    return r;
}
static CuResult f_event_sync(CuEvent e) {
    if (!valid_event(e))
        return 400;
    if (refuse_in_capture())
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    LOCKED(fk.st.host_syncs++; int id = (int)(uintptr_t)e - 1;
           if (fk.event[id].stream >= 0) run_to(fk.event[id].stream, fk.event[id].pos));
    return fk.sticky;
}
// The time between two recorded events: as the simulated GPU has no clock, a microsecond for
// every operation of the stream between them but records, a GEMM its algorithm's time; both
// on one stream, the end not before the start; their work run first, as cuEventElapsedTime
// needs it done.
static CuResult f_event_elapsed(float *ms, CuEvent a, CuEvent b) {
    CuResult r = CUX_SUCCESS;
    LOCKED(int i = (int)(uintptr_t)a - 1, j = (int)(uintptr_t)b - 1;
           if (!ms || i < 0 || j < 0 || i >= fk.nevents || j >= fk.nevents || fk.event[i].stream < 0 ||
               fk.event[j].stream < 0) r = 400;   // CUDA_ERROR_INVALID_HANDLE
           else {
               run_to(fk.event[j].stream, fk.event[j].pos);
               const FEvent *x = &fk.event[i], *y = &fk.event[j];
               long us = 0;
               for (long k = x->pos + 1; x->stream == y->stream && k <= y->pos; k++)
                   us += fk.stream[x->stream].op[k]->us;
               *ms = (float)us * 1e-3f;
           });
    return r;
}
// Work runs when the host asks for it: a query runs what the event follows, unless a
// host operation there has not finished (a collective of the simulated NCCL still waiting).
static CuResult f_event_query(CuEvent e) {
    if (!valid_event(e))
        return 400;
    if (refuse_in_capture())
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    bool done = true;
    LOCKED(fk.st.host_syncs++; int id = (int)(uintptr_t)e - 1;
           if (fk.event[id].stream >= 0) done = run_to(fk.event[id].stream, fk.event[id].pos));
    return fk.sticky ? fk.sticky : done ? CUX_SUCCESS : CUX_ERROR_NOT_READY;
}
// As a driver takes an image: one built by a toolkit newer than the driver refused
// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION: a CUBIN of ELF ABI 8 or PTX ISA 9, CUDA 13's, under a
// 12.x driver); a CUBIN for this SM or an earlier minor of its major
// (CUDA_ERROR_NO_BINARY_FOR_GPU otherwise); PTX for a virtual architecture up to this GPU's,
// which it compiles.
static CuResult f_module_load(CuModule *m, const void *image) {
    int cc = fk.o.cc_major * 10 + fk.o.cc_minor, sm = rt_nvrtc_cubin_sm(image, 64);
    bool old_driver = (fk.o.driver_version ? fk.o.driver_version : 13000) < 13000;
    if (sm >= 0) {
        if (old_driver && ((const unsigned char *)image)[8] >= 8)
            return 222;
        if (sm / 10 != fk.o.cc_major || sm % 10 > fk.o.cc_minor)
            return 209;
    } else {
        const char *t = strstr(image, "\n.target sm_"), *v = strstr(image, "\n.version ");
        if (!t || !v)
            return 200;   // CUDA_ERROR_INVALID_IMAGE
        if (old_driver && atoi(v + 10) >= 9)
            return 222;
        if (atoi(t + 12) > cc || atoi(t + 12) < 10)
            return 218;   // CUDA_ERROR_INVALID_PTX
    }
    *m = (CuModule)(uintptr_t)0x30d;
    fk.st.module_loads++;
    return CUX_SUCCESS;
}
static CuResult f_module_unload(CuModule m) { (void)m; return CUX_SUCCESS; }
static CuResult f_get_function(CuFunction *f, CuModule m, const char *name) {
    (void)m;
    int kind = rt_emu_kernels_kind(fk.k, name);
    if (kind < 0)
        return 500;   // CUDA_ERROR_NOT_FOUND
    CuResult r = CUX_SUCCESS;
    LOCKED(if (fk.nfns == 4096) r = 2; else {
        FFunction *fn = calloc(1, sizeof *fn);
        snprintf(fn->name, sizeof fn->name, "%s", name);
        fn->group = kind == 1;
        fn->max_dynamic_smem = CUX_STATIC_SMEM_MAX;
        fk.fns[fk.nfns++] = fn;
        *f = (CuFunction)fn;
    });
    return r;
}
static CuResult f_launch(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shared, CuStream s, void **params, void **extra) {
    FFunction *fn = (FFunction *)f;
    // More dynamic shared memory than the kernel was let have: refused, as by the driver.
    if (!valid_stream(s) || !params || extra || (int)shared > fn->max_dynamic_smem)
        return 1;
    if (fk.sticky)
        return fk.sticky;
    size_t bytes = fn->group ? sizeof(KernelGroupArgs) : sizeof(KernelArgs);
    LOCKED(FOp *x = issue(F_LAUNCH, s, fn->name); x->fn = fn; x->args = malloc(bytes);
           memcpy(x->args, params[0], bytes);   // the driver copies the arguments at the launch
           x->grid[0] = gx; x->grid[1] = gy; x->grid[2] = gz;
           x->block[0] = bx; x->block[1] = by; x->block[2] = bz; x->smem = shared;
           void *const *p = fn->group ? &((KernelGroupArgs *)x->args)->p[0][0] : ((KernelArgs *)x->args)->p;
           int np = fn->group ? PLAN_GROUP_MAX * PLAN_GROUP_OPERANDS : 12;
           for (int i = 0; i < np; i++) if (p[i]) x->point[x->npoint++] = (uintptr_t)p[i];
           if (!capturing((int)(uintptr_t)s - 1)) {   // (a graph's count as it runs)
               fk.st.launches++; fk.st.group_launches += fn->group; log_launch(fn->name);
           });
    return CUX_SUCCESS;
}
static CuResult f_error_string(CuResult r, const char **s) {
    *s = r == CUX_ERROR_OUT_OF_MEMORY ? "out of memory" : "simulated driver error";
    return CUX_SUCCESS;
}

//
// cuBLASLt.
//

static LtStatus l_create(LtHandle *h) { *h = (LtHandle)(uintptr_t)0x17; return LTX_SUCCESS; }
static LtStatus l_destroy(LtHandle h) { (void)h; return LTX_SUCCESS; }
static size_t l_version(void) { return 130000; }
static LtStatus l_desc_create(LtDesc *d, int compute, int scale) {
    FDesc *x = calloc(1, sizeof *x);
    *x = (FDesc){.compute = compute, .scale = scale, .epilogue = LTX_EPILOGUE_DEFAULT, .bias_type = -1};
    *d = (LtDesc)x;
    return LTX_SUCCESS;
}
static LtStatus l_desc_destroy(LtDesc d) { free(d); return LTX_SUCCESS; }
static LtStatus l_desc_set(LtDesc d, int attr, const void *buf, size_t n) {
    FDesc *x = (FDesc *)d;
    if (attr == LTX_DESC_TRANSA && n == 4)
        memcpy(&x->transa, buf, 4);
    else if (attr == LTX_DESC_TRANSB && n == 4)
        memcpy(&x->transb, buf, 4);
    else if (attr == LTX_DESC_EPILOGUE && n == 4)
        memcpy(&x->epilogue, buf, 4);
    else if (attr == LTX_DESC_BIAS_POINTER && n == sizeof(void *))
        memcpy(&x->bias, buf, n);
    else if (attr == LTX_DESC_BIAS_DATA_TYPE && n == 4)
        memcpy(&x->bias_type, buf, 4);
    else
        return 7;   // CUBLAS_STATUS_INVALID_VALUE
    return LTX_SUCCESS;
}
static LtStatus l_layout_create(LtLayout *l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows)
        return 7;
    FLayout *x = calloc(1, sizeof *x);
    *x = (FLayout){type, rows, cols, ld, 1, 0};
    *l = (LtLayout)x;
    return LTX_SUCCESS;
}
static LtStatus l_layout_destroy(LtLayout l) { free(l); return LTX_SUCCESS; }
static LtStatus l_layout_set(LtLayout l, int attr, const void *buf, size_t n) {
    FLayout *x = (FLayout *)l;
    if (attr == LTX_LAYOUT_BATCH_COUNT && n == 4)
        memcpy(&x->batch, buf, 4);
    else if (attr == LTX_LAYOUT_STRIDED_BATCH_OFFSET && n == 8)
        memcpy(&x->stride, buf, 8);
    else
        return 7;
    return LTX_SUCCESS;
}
static LtStatus l_pref_create(LtPref *p) { *p = (LtPref)calloc(1, sizeof(FPref)); return LTX_SUCCESS; }
static LtStatus l_pref_destroy(LtPref p) { free(p); return LTX_SUCCESS; }
static LtStatus l_pref_set(LtPref p, int attr, const void *buf, size_t n) {
    FPref *f = (FPref *)p;
    if (attr == LTX_PREF_MAX_WORKSPACE_BYTES && n == 8)
        memcpy(&f->ws, buf, 8);
    else if (attr >= LTX_PREF_MIN_ALIGNMENT_A && attr < LTX_PREF_MIN_ALIGNMENT_A + 4 && n == 4)
        memcpy(&f->align[attr - LTX_PREF_MIN_ALIGNMENT_A], buf, 4);
    else
        return 7;
    return LTX_SUCCESS;
}

// What cuBLASLt accepts for fp32 compute: A and B alike; 16-bit inputs into their own type
// or fp32, fp32 into fp32; a bias of D's type or fp32; shapes that chain.
static bool supported(const FDesc *d, const FLayout *a, const FLayout *b, const FLayout *c) {
    if (d->compute != LTX_COMPUTE_32F || d->scale != LTX_R_32F || a->type != b->type)
        return false;
    if (a->type == LTX_R_32F ? c->type != LTX_R_32F : c->type != a->type && c->type != LTX_R_32F)
        return false;
    if (d->epilogue == LTX_EPILOGUE_BIAS && d->bias_type != c->type && d->bias_type != LTX_R_32F)
        return false;
    uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
    uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
    return am == c->rows && bn == c->cols && ak == bk && a->batch == c->batch && b->batch == c->batch;
}

// The simulated GPU's time for a product by candidate: the heuristic's first is not the
// fastest, so that timing them shows.
enum { GEMM_ALGOS = 4 };
static const int gemm_us[GEMM_ALGOS] = {3, 1, 2, 4};

static LtStatus l_heuristic(LtHandle h, LtDesc d, LtLayout a, LtLayout b, LtLayout c, LtLayout dl,
                            LtPref p, int n, LtHeuristic *res, int *got) {
    (void)h;
    *got = 0;
    if (n < 1 || c != dl)
        return 7;
    if (!supported((FDesc *)d, (FLayout *)a, (FLayout *)b, (FLayout *)c))
        return 15;   // CUBLAS_STATUS_NOT_SUPPORTED
    // Candidates as cuBLASLt ranks them, the first not the fastest (gemm_us).
    int m = n < GEMM_ALGOS ? n : GEMM_ALGOS;
    memset(res, 0, (size_t)m * sizeof *res);
    for (int i = 0; i < m; i++) {
        res[i].algo.data[0] = 0xfa4e;
        for (int k = 0; k < 4; k++)   // the alignment the algorithm is chosen for, A, B, C, D
            res[i].algo.data[1 + k] = ((FPref *)p)->align[k] ? ((FPref *)p)->align[k] : 256;
        res[i].algo.data[5] = (uint64_t)i;   // which candidate
    }
    *got = m;
    return LTX_SUCCESS;
}

static LtStatus l_matmul(LtHandle h, LtDesc d, const void *alpha, const void *a, LtLayout al,
                         const void *b, LtLayout bl, const void *beta, const void *c, LtLayout cl,
                         void *dst, LtLayout dl, const LtAlgo *algo, void *ws, size_t wsb, CuStream s) {
    (void)h, (void)ws, (void)wsb;
    if (!algo || algo->data[0] != 0xfa4e || algo->data[5] >= GEMM_ALGOS || !valid_stream(s))
        return 7;
    // An operand less aligned than the algorithm was chosen for: refused (a GPU's vector loads
    // would fault or read across it).
    const void *ops[4] = {a, b, c, dst};
    for (int k = 0; k < 4; k++)
        if ((uintptr_t)ops[k] % algo->data[1 + k] != 0)
            return 7;   // CUBLAS_STATUS_INVALID_VALUE
    LOCKED(FOp *x = issue(F_GEMM, s, "cublasLtMatmul"); x->desc = *(FDesc *)d;
           x->la = *(FLayout *)al; x->lb = *(FLayout *)bl; x->lc = *(FLayout *)cl; x->ld = *(FLayout *)dl;
           x->alpha = *(const float *)alpha; x->beta = *(const float *)beta;
           x->a = a; x->b = b; x->c = c; x->d = dst; x->us = gemm_us[algo->data[5]];
           const void *pts[] = {a, b, c, dst, x->desc.epilogue == LTX_EPILOGUE_BIAS ? x->desc.bias : NULL, ws};
           for (int i = 0; i < 6; i++) if (pts[i]) x->point[x->npoint++] = (uintptr_t)pts[i];
           fk.st.gemms++);
    return LTX_SUCCESS;
}

// An algorithm's configuration: its id the candidate's number from 1, tile 18, no split-k,
// stages 8 (any numbers: the backend only reports them).
static LtStatus l_algo_attr(const LtAlgo *algo, int attr, void *buf, size_t n, size_t *written) {
    if (!algo || algo->data[0] != 0xfa4e || n < 4)
        return 7;
    int32_t v = attr == LTX_ALGO_ID ? (int32_t)algo->data[5] + 1 : attr == LTX_ALGO_TILE ? 18 : attr == LTX_ALGO_SPLITK ? 1 : attr == LTX_ALGO_STAGES ? 8 : 0;
    memcpy(buf, &v, 4);
    if (written)
        *written = 4;
    return LTX_SUCCESS;
}

void fake_cuda_take(int64_t bytes) { LOCKED(fk.o.context_bytes += bytes); }

int fake_cuda_host_op(CuStream s, int (*fn)(void *arg), void *arg, const char *what, uintptr_t r0,
                      uintptr_t r1, uintptr_t w0, uintptr_t w1) {
    if (!valid_stream(s))
        return 400;
    LOCKED(FOp *x = issue(F_HOST, s, what); x->host = fn; x->args = arg;
           x->r0 = r0, x->r1 = r1, x->w0 = w0, x->w1 = w1);
    return CUX_SUCCESS;
}

//
// Graphs: stream capture, instantiation and launch.
//

static void graph_free(FGraph *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n; i++) {
        free(g->op[i]->args);
        free(g->op[i]);
    }
    free(g->op);
    free(g);
}

static CuResult f_begin_capture(CuStream s, int mode) {
    if (!valid_stream(s))
        return 400;
    CuResult r = CUX_SUCCESS;
    if (fk.o.refuse_capture)
        return CUX_ERROR_CAPTURE_UNSUPPORTED;
    LOCKED(if (fk.cap || mode != CUX_CAPTURE_MODE_THREAD_LOCAL) r = 1;   // (one at a time here)
           else {
               fk.cap = calloc(1, sizeof *fk.cap);
               fk.cap->nlanes = 1;
               for (int i = 0; i < MAX_STREAMS; i++)
                   fk.lane_of[i] = -1;
               fk.origin = (int)(uintptr_t)s - 1;
               fk.lane_of[fk.origin] = 0;
               fk.cap_error = CUX_SUCCESS;
               fk.cap_id++;
           });
    return r;
}

// Every lane but the origin's must end where the origin waits for it (its last operation
// recorded, and that record waited for on lane 0), else the capture is unjoined.
static bool joined(const FGraph *g) {
    for (int l = 1; l < g->nlanes; l++) {
        bool ok = false;
        for (int i = 0; i < g->n && !ok; i++)
            ok = g->op[i]->kind == F_WAIT && g->op[i]->stream == 0 && g->op[i]->wait_stream == l &&
                 g->op[i]->wait_pos == g->lane_len[l] - 1;
        if (!ok)
            return false;
    }
    return true;
}

static CuResult f_end_capture(CuStream s, CuGraph *out) {
    if (!valid_stream(s))
        return 400;
    CuResult r = CUX_SUCCESS;
    LOCKED(if (!fk.cap || (int)(uintptr_t)s - 1 != fk.origin) r = 1;   // not capturing there
           else {
               FGraph *g = fk.cap;
               fk.cap = NULL;
               for (int i = 0; i < MAX_STREAMS; i++)
                   fk.lane_of[i] = -1;
               for (int e = 0; e < fk.nevents; e++)   // recorded inside: not recorded outside
                   if (fk.event[e].lane >= 0)
                       fk.event[e].lane = -2;
               r = fk.cap_error ? CUX_ERROR_CAPTURE_INVALIDATED : joined(g) ? CUX_SUCCESS
                                                                          : CUX_ERROR_CAPTURE_UNJOINED;
               if (r == CUX_SUCCESS) {
                   *out = (CuGraph)g;
                   fk.st.captures++;
               } else {
                   graph_free(g);
               }
           });
    return r;
}

static CuResult f_capture_info(CuStream s, int *status, unsigned long long *id, CuGraph *g,
                               const CuGraphNode **deps, size_t *ndeps) {
    if (!valid_stream(s))
        return 400;
    LOCKED(int sid = (int)(uintptr_t)s - 1; bool on = capturing(sid);
           if (status) *status = on ? CUX_CAPTURE_STATUS_ACTIVE : 0;
           if (id) *id = on ? fk.cap_id : 0;
           if (g) *g = on ? (CuGraph)fk.cap : NULL;
           if (deps) *deps = on && fk.cap->lane_len[fk.lane_of[sid]] ? &fk.cap->last[fk.lane_of[sid]] : NULL;
           if (ndeps) *ndeps = on && fk.cap->lane_len[fk.lane_of[sid]] ? 1 : 0);
    return CUX_SUCCESS;
}

static FStream *new_stream(int *id) {
    if (fk.nstreams == MAX_STREAMS)
        return NULL;
    *id = fk.nstreams++;
    return &fk.stream[*id];
}

// A copy of the graph, each lane on a private stream of its own.
static CuResult f_instantiate(CuGraphExec *e, CuGraph gr, unsigned long long flags) {
    const FGraph *g = (const FGraph *)gr;
    if (!g || flags)
        return 1;
    CuResult r = CUX_SUCCESS;
    LOCKED(FGraph *x = calloc(1, sizeof *x); *x = *g;
           x->op = malloc(sizeof *x->op * (size_t)(g->n + 1));
           for (int i = 0; i < g->n; i++) {
               x->op[i] = malloc(sizeof **x->op);
               *x->op[i] = *g->op[i];
               if (g->op[i]->kind == F_LAUNCH) {
                   size_t bytes = g->op[i]->fn->group ? sizeof(KernelGroupArgs) : sizeof(KernelArgs);
                   x->op[i]->args = malloc(bytes);
                   memcpy(x->op[i]->args, g->op[i]->args, bytes);
               }
           }
           for (int l = 0; l < g->nlanes && r == CUX_SUCCESS; l++)
               if (!new_stream(&x->lane_stream[l])) r = 2;
           if (r == CUX_SUCCESS) *e = (CuGraphExec)x; else graph_free(x));
    return r;
}

// The graph's operations issued on its lanes' streams, after the work issued on s so far,
// and the work issued on s after them after all of them.
static CuResult f_graph_launch(CuGraphExec e, CuStream s) {
    FGraph *x = (FGraph *)e;
    if (!x || !valid_stream(s))
        return 400;
    if (fk.sticky)
        return fk.sticky;
    LOCKED(int sid = (int)(uintptr_t)s - 1; long base[MAX_STREAMS];
           for (int l = 0; l < x->nlanes; l++) {
               FOp *w = issue(F_WAIT, (CuStream)(uintptr_t)(x->lane_stream[l] + 1), "a graph's start");
               w->wait_stream = sid, w->wait_pos = fk.stream[sid].n - 1;
               base[l] = fk.stream[x->lane_stream[l]].n;
           }
           for (int i = 0; i < x->n; i++) {
               const FOp *c = x->op[i];
               FOp *y = issue(c->kind, (CuStream)(uintptr_t)(x->lane_stream[c->stream] + 1), c->what);
               long seq = y->seq; int stream = y->stream;
               *y = *c;
               y->seq = seq, y->stream = stream, y->checked = false;
               if (c->kind == F_WAIT && c->wait_stream >= 0)
                   y->wait_stream = x->lane_stream[c->wait_stream], y->wait_pos = base[c->wait_stream] + c->wait_pos;
               if (c->kind == F_LAUNCH) {
                   size_t bytes = c->fn->group ? sizeof(KernelGroupArgs) : sizeof(KernelArgs);
                   y->args = malloc(bytes);
                   memcpy(y->args, c->args, bytes);
                   fk.st.launches++; fk.st.group_launches += c->fn->group; log_launch(c->fn->name);
               }
           }
           for (int l = 0; l < x->nlanes; l++) {
               FOp *w = issue(F_WAIT, s, "a graph's end");
               w->wait_stream = x->lane_stream[l], w->wait_pos = fk.stream[x->lane_stream[l]].n - 1;
           }
           fk.st.graph_launches++);
    return CUX_SUCCESS;
}

// A kernel node's arguments changed in the instantiated graph (its launch shape kept).
static CuResult f_set_kernel_params(CuGraphExec e, CuGraphNode n, const CuKernelNodeParams *p) {
    FGraph *x = (FGraph *)e;
    long i = (long)(uintptr_t)n - 1;
    if (!x || !p || i < 0 || i >= x->n || x->op[i]->kind != F_LAUNCH || p->func != (CuFunction)x->op[i]->fn ||
        p->grid_x != x->op[i]->grid[0] || p->block_x != x->op[i]->block[0] || p->extra || p->kern || !p->params)
        return 1;   // CUDA_ERROR_INVALID_VALUE
    LOCKED(memcpy(x->op[i]->args, p->params[0], x->op[i]->fn->group ? sizeof(KernelGroupArgs) : sizeof(KernelArgs));
           fk.st.node_updates++);
    return CUX_SUCCESS;
}

static CuResult f_exec_destroy(CuGraphExec e) {
    LOCKED(graph_free((FGraph *)e));
    return CUX_SUCCESS;
}
static CuResult f_graph_destroy(CuGraph g) {
    LOCKED(graph_free((FGraph *)g));
    return CUX_SUCCESS;
}

//
// The tables.
//

int fake_cuda_open(CudaApi *api, const FakeOptions *o, char *err, size_t errlen) {
    fake_cuda_close();
    fk.o = *o;
    fk.k = rt_emu_kernels_open(o->plan_dir, err, errlen);
    if (!fk.k)
        return -1;
    *api = (CudaApi){
        .cu = {f_init, f_version, f_count, f_get, f_name, f_attr, f_retain, f_release, f_set_current,
               f_ctx_sync, f_mem_info, f_alloc, f_free, f_host_alloc, f_host_free, f_htod, f_dtoh,
               f_copy_async, f_memset8, f_memset16, f_memset32, f_stream_create, f_stream_destroy,
               f_stream_sync, f_wait_event, f_event_create, f_event_destroy, f_event_record,
               f_event_sync, f_module_load, f_module_unload, f_get_function, f_launch,
               f_error_string, f_event_query, f_func_set_attr, f_event_elapsed, f_ctx_flags,
               f_priority_range, f_stream_create_priority, f_begin_capture, f_end_capture,
               f_capture_info, f_instantiate, f_graph_launch, f_set_kernel_params, f_exec_destroy,
               f_graph_destroy},
        .lt = {l_create, l_destroy, l_version, l_desc_create, l_desc_destroy, l_desc_set,
               l_layout_create, l_layout_destroy, l_layout_set, l_pref_create, l_pref_destroy,
               l_pref_set, l_heuristic, l_matmul, l_algo_attr},
    };
    return 0;
}

const FakeStats *fake_cuda_stats(void) {
    if (fk.first_error[0] && !fk.st.races)
        snprintf(fk.st.first_race, sizeof fk.st.first_race, "a kernel failed: %.480s", fk.first_error);
    return &fk.st;
}

void fake_cuda_reset_log(void) {
    fk.log_len = 0;
    if (fk.st.launch_log)
        fk.st.launch_log[0] = '\0';
}

void fake_cuda_close(void) {
    // A stream or event handed to the driver that it never made is a bug of the backend's
    // whichever test it ran under (a real driver's answer, 400, may go unnoticed there).
    if (fk.st.bad_handles) {
        fprintf(stderr, "fake cuda: %d driver calls with a stream or event never made\n", fk.st.bad_handles);
        abort();
    }
    land_late();
    graph_free(fk.cap);
    for (int s = 0; s < fk.nstreams; s++) {
        for (int i = 0; i < fk.stream[s].n; i++) {
            free(fk.stream[s].op[i]->args);
            free(fk.stream[s].op[i]);
        }
        free(fk.stream[s].op);
    }
    for (int i = 0; i < fk.nfns; i++)
        free(fk.fns[i]);
    for (int i = 0; i < fk.nalloc; i++)
        free((void *)fk.alloc[i].p);
    free(fk.alloc);
    free(fk.st.launch_log);
    rt_emu_kernels_close(fk.k);
    pthread_mutex_t mu = fk.mu;
    memset(&fk, 0, sizeof fk);
    fk.mu = mu;
}
