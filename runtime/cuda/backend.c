// backend.c — the cuda backend: a plan run on a GPU through the CUDA driver API and
// cuBLASLt (cuda.h's tables, loaded with dlopen or handed in by a test).
//
// Memory: one allocation per arena (device memory; page-locked host memory for the host
// arena), made before step one; nothing is allocated after. Kernels: the plan's CUBIN for
// this GPU's architecture, else kernels.cu compiled by NVRTC for it (cached); every launch
// resolved before step one. GEMMs: one cuBLASLt call per instruction, its descriptors and
// algorithm chosen before step one within the workspace the plan gave it. Streams: one
// CUDA stream per plan stream (compute, d2h, h2d), the plan's events as CUDA events; the
// host stream is a worker thread that runs host instructions (CPU AdamW, host gradient
// sums) in plan order on the executor's host backend, waiting for device events with
// cuEventSynchronize, so the CPU updates offloaded state while the GPU goes on. A device
// stream that waits for a host event blocks the issuing thread until the worker has
// recorded it (host events complete in host order, so nothing further is needed).
// Collectives (a job of several ranks): NCCL on the comm stream, its communicator made
// from a unique id rank 0 broadcasts over MPI (rt_cuda_set_comm), a bucket one NCCL group;
// the device is then waited for by polling, against the job's deadline and NCCL's
// asynchronous error, and a collective that fails or never completes aborts the
// communicator (its kernels return) and fails the run, never hangs it.
#include "../runtime.h"
#include "../comm.h"
#include "../fileio.h"
#include "../kernel_args.h"
#include "../loss.h"
#include "../nvrtc.h"
#include "cuda.h"
#include "gemm_cache.h"
#include "nccl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// One GEMM instruction as a cuBLASLt call. The plan's row-major C[M,N] = op(A) op(B) is
// cuBLASLt's column-major C^T[N,M] = op(B)^T op(A)^T: its A is the plan's B and its B the
// plan's A, each transposed when the plan's is stored the other way round.
typedef struct Gemm {
    LtDesc desc;
    LtLayout la, lb, lc;    // cuBLASLt's A (the plan's B), B (the plan's A), C = D
    LtAlgo algo;
    uint32_t align;         // the operands' alignment the algorithm was chosen for (bytes)
    int64_t M, N, K, batch; // its product (the plan's operands: A is M x K, B K x N)
    int ta, tb;
    PlanDType da, db, dc;
    uint64_t ws;            // the workspace it may use
    int a, b, c, bias;      // buffer ids: the plan's A and B operands, the output, bias or -1
    int cin;                // the buffer added in with beta (the output itself but for linear_acc's y)
    float alpha;            // the product's scale (linear_acc's; else 1)
    int dbias;              // the bias's dtype (-1: no bias epilogue)
    float beta;             // 1: accumulate into the output (a weight gradient's +=)
    // How the algorithm was had (rt_cuda_tune_gemms): 0 cuBLASLt's first heuristic choice,
    // untimed; 'T' the fastest of `ncand` candidates timed here, `pick` its rank among them
    // (0: the first), `us` its time and `first_us` the first candidate's; 'C' the cache's.
    char how;
    int ncand, pick;
    float us, first_us;
} Gemm;

// Work for the host stream, in order: an instruction, a fill, a wait for a device event,
// or the record of a host event.
typedef enum { HOST_RUN, HOST_FILL, HOST_WAIT, HOST_RECORD } HostKind;
typedef struct HostItem {
    HostKind kind;
    Exec *x;                // HOST_RUN: the instruction
    const PlanInstr *in;
    void *dst;              // HOST_FILL: `bytes` of a `width`-byte pattern, after the events
    uint32_t pattern;       // in own[] (the device streams' ends when it was issued)
    int width;
    int64_t bytes;
    int nown;
    CuEvent own[STREAM_COUNT];
    int event;              // HOST_WAIT: the device event; HOST_RECORD: the host event ...
    uint64_t gen;           // ... and its generation
} HostItem;

// A phase's work as a CUDA graph (cuda_run_phase), and its kernel nodes whose arguments
// change between micro-steps (rt_args_vary) with the arguments they have now (a grouped
// launch's in `group`, malloc'd).
typedef struct GraphNode {
    CuGraphNode node;
    const PlanInstr *in;
    CuFunction fn;
    const PlanLaunch *pl;
    KernelArgs args;
    KernelGroupArgs *group;
} GraphNode;

static void cuda_destroy(Backend *be);
// Whether `be` is this backend (by its table, not its name).
static bool is_cuda(const Backend *be) { return be && be->destroy == cuda_destroy; }

typedef struct PhaseGraph {
    CuGraph graph;
    CuGraphExec exec;       // NULL: not captured yet
    GraphNode *node;
    int nnode, cap;
} PhaseGraph;

typedef struct CudaState {
    CudaApi api;
    const Plan *plan;
    char dir[4096];
    CuDevice dev;
    CuContext ctx;
    char name[256], arch[16];
    int cc_major, cc_minor;          // the device's compute capability
    int driver_version;              // cuDriverGetVersion's (13000: 13.0)
    char module_from[640];           // where the kernels came from (load_module)
    bool sync_check;                 // wait for and check each instruction (--sync-check)
    int64_t nccl_bytes;              // device memory NCCL's communicator took (-1: not measured)
    CuStream stream[STREAM_COUNT];   // compute, d2h, h2d ([STREAM_HOST]: the worker)
    CuEvent tail[STREAM_COUNT];      // recorded at a stream's end to order a fill after it
    LtHandle lt;
    CuModule module;
    CuFunction *fn;                  // [instruction * PLAN_MAX_LAUNCHES + launch]
    Gemm *gemm;                      // per instruction (desc NULL: not a GEMM)
    Gemm *loss;                      // per instruction x LOSS_GEMMS: the fused loss's products
    int ninstr;
    CuEvent *event;
    CuEvent *timing;                 // --profile's marks, made when first asked for (2 an instruction)
    int ntiming;
    int nevents;
    bool *on_host;                   // event last recorded by a host instruction
    uint64_t *expected, *done;       // host events: generations recorded, and completed
    // The host stream's worker.
    pthread_t worker;
    bool worker_up, quit, busy;
    pthread_mutex_t mu;
    pthread_cond_t more, progress;
    HostItem *q;
    int qhead, qtail, qcap;
    uint64_t queued, ran;            // items ever queued, and run
    // Pinned memory a queued host instruction uses, with the item's number (queued after
    // it): a fill there waits for that item, not for the whole queue.
    struct HostUse { uintptr_t lo, hi; uint64_t item; } *uses;
    int nuses, uses_cap;
    int pinned_fills;                // fills of pinned memory on a device stream: how many
    int fills_queued, fill_waits;    // found host work queued, and waited for some of it
    char failed[512];                // the first error of work done asynchronously
    // Collectives over the job's ranks (rt_cuda_set_comm).
    NcclApi nccl;
    NcclComm ncomm;                  // NULL: one rank
    Comm *comm;
    bool aborted;                    // the communicator was aborted after a failure
    // cuda_set's pinned staging: STAGE_SLOTS slots of STAGE_BYTES, each free again once the
    // copy recorded on its event is done.
    char *staging;
    CuEvent staged[2];
    int next_slot;
    // CUDA graphs: per phase and last micro-step or not, the phase captured once and
    // launched whole after (cuda_run_phase). While a capture is under way, `capturing`; the
    // plan's events recorded in it carry its generation (a wait on any other is for work
    // the previous phase's drain finished, and a capture may not wait on it); its failures
    // go to cap_failed, not failed: a capture that fails leaves graphs off for the run.
    PhaseGraph graph[PHASE_COUNT][2];
    bool capturing, graphs_off;
    uint64_t cap_gen, *recorded_in;
    PhaseGraph taking;               // the nodes of the capture under way
    CuEvent fork, join[STREAM_COUNT];
    char cap_failed[512];
} CudaState;

static const char *const stream_tag[STREAM_COUNT] = {"compute", "d2h", "h2d", "host", "comm"};

// An error a kernel leaves on the context (an illegal address or instruction, a misaligned
// access, a trap, a failed launch): whichever later call notices it reports it.
static bool kernel_fault(CuResult r) { return r == 700 || (r >= 714 && r <= 719); }

// The first asynchronous failure wins; sync reports it.
static void note_failure(CudaState *s, const char *fmt, const char *what, CuResult r) {
    pthread_mutex_lock(&s->mu);
    if (s->capturing) {   // (the capture fails; the phase is issued again, uncaptured)
        if (!s->cap_failed[0]) {
            char text[160];
            snprintf(s->cap_failed, sizeof s->cap_failed, fmt, what, cuda_result_text(&s->api, r, text, sizeof text));
        }
    } else if (!s->failed[0]) {
        char text[160];
        int n = snprintf(s->failed, sizeof s->failed, fmt, what, cuda_result_text(&s->api, r, text, sizeof text));
        if (kernel_fault(r) && !s->sync_check && n > 0 && (size_t)n < sizeof s->failed)
            snprintf(s->failed + n, sizeof s->failed - (size_t)n, " (a kernel's fault, noticed later: "
                     "ftc run --sync-check names the instruction)");
    }
    pthread_mutex_unlock(&s->mu);
}

static bool call_ok(CudaState *s, CuResult r, const char *what) {
    if (r == CUX_SUCCESS)
        return true;
    note_failure(s, "%s: %s", what, r);
    return false;
}

static int fail_cu(CudaState *s, CuResult r, const char *what, char *err, size_t errlen) {
    char text[160];
    return rt_fail(err, errlen, "%s: %s", what, cuda_result_text(&s->api, r, text, sizeof text));
}

static CuDevPtr dptr(const void *p) { return (CuDevPtr)(uintptr_t)p; }

//
// The host stream.
//

static void fill_host(void *dst, uint32_t pattern, int width, int64_t bytes) {
    if (width == 1) {
        memset(dst, (int)(pattern & 0xff), (size_t)bytes);
        return;
    }
    for (int64_t i = 0; i + width <= bytes; i += width)
        memcpy((char *)dst + i, &pattern, (size_t)width);   // little-endian: the low bytes
}

static void host_failure(CudaState *s, const PlanInstr *in, const char *why) {
    pthread_mutex_lock(&s->mu);
    if (!s->failed[0])
        snprintf(s->failed, sizeof s->failed, "instruction %d (%s, from .ft line %d:%d): %s", in->id,
                 op_desc(in->op)->name, in->line, in->col, why);
    pthread_mutex_unlock(&s->mu);
}

// One item; after a failure only the records are kept (so that no waiter hangs).
static void run_item(CudaState *s, HostItem *it, bool failed) {
    char why[400];
    switch (it->kind) {
    case HOST_RUN:
        if (!failed && it->x->host->launch(it->x->host, it->x, it->in, why, sizeof why) != 0)
            host_failure(s, it->in, why);
        break;
    case HOST_FILL:
        for (int k = 0; k < it->nown; k++) {
            if (!failed)
                failed = !call_ok(s, s->api.cu.EventSynchronize(it->own[k]), "cuEventSynchronize");
            s->api.cu.EventDestroy(it->own[k]);
        }
        if (!failed)
            fill_host(it->dst, it->pattern, it->width, it->bytes);
        break;
    case HOST_WAIT:
        if (!failed)
            call_ok(s, s->api.cu.EventSynchronize(s->event[it->event]), "cuEventSynchronize");
        break;
    case HOST_RECORD:
        break;
    }
}

static void *worker_main(void *arg) {
    CudaState *s = arg;
    s->api.cu.CtxSetCurrent(s->ctx);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->qhead == s->qtail && !s->quit)
            pthread_cond_wait(&s->more, &s->mu);
        if (s->qhead == s->qtail)
            break;
        HostItem it = s->q[s->qhead];
        bool failed = s->failed[0] != '\0';
        s->busy = true;
        pthread_mutex_unlock(&s->mu);
        run_item(s, &it, failed);
        pthread_mutex_lock(&s->mu);
        s->qhead++;
        s->ran++;
        if (it.kind == HOST_RECORD)
            s->done[it.event] = it.gen;
        s->busy = false;
        pthread_cond_broadcast(&s->progress);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void enqueue(CudaState *s, const HostItem *it) {
    pthread_mutex_lock(&s->mu);
    if (s->qhead == s->qtail)
        s->qhead = s->qtail = 0;
    if (s->qtail == s->qcap) {
        s->qcap = s->qcap ? 2 * s->qcap : 256;
        s->q = xrealloc(s->q, sizeof *s->q * (size_t)s->qcap);
    }
    s->q[s->qtail++] = *it;
    s->queued++;
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->mu);
}

// Everything queued for the host has run.
static void drain_host(CudaState *s) {
    pthread_mutex_lock(&s->mu);
    while (s->qhead != s->qtail || s->busy)
        pthread_cond_wait(&s->progress, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

// A host instruction was just queued: the pinned memory it reads and writes is in use until
// the worker has run it (the uses of items already run are dropped here). Only the poison's
// fills ask (cuda_fill), so nothing is noted without it.
static void note_host_uses(CudaState *s, Exec *x, const PlanInstr *in) {
    if (!x->poison)
        return;
    pthread_mutex_lock(&s->mu);
    int k = 0;
    for (int i = 0; i < s->nuses; i++)
        if (s->uses[i].item > s->ran)
            s->uses[k++] = s->uses[i];
    s->nuses = k;
    int ids[PLAN_MAX_IN + PLAN_MAX_OUT + 1], n = 0;
    for (int i = 0; i < in->nin; i++)
        ids[n++] = in->in[i];
    for (int i = 0; i < in->nout; i++)
        ids[n++] = in->out[i];
    ids[n++] = in->ws;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || rt_buf_kind(x, ids[i]) != MEMK_PINNED)
            continue;
        if (s->nuses == s->uses_cap) {
            s->uses_cap = s->uses_cap ? 2 * s->uses_cap : 64;
            s->uses = xrealloc(s->uses, sizeof *s->uses * (size_t)s->uses_cap);
        }
        uintptr_t lo = (uintptr_t)x->ptr[ids[i]];
        s->uses[s->nuses++] = (struct HostUse){lo, lo + (uintptr_t)x->plan->buf[ids[i]].bytes, s->queued};
    }
    pthread_mutex_unlock(&s->mu);
}

// Before a device stream writes pinned memory [lo, hi): the worker has run every queued
// host instruction that uses it (usually long since; else the issue waits for that one).
static void wait_host_uses(CudaState *s, uintptr_t lo, uintptr_t hi) {
    pthread_mutex_lock(&s->mu);
    uint64_t need = 0;
    s->pinned_fills++;
    s->fills_queued += s->queued > s->ran;
    for (int i = 0; i < s->nuses; i++)
        if (s->uses[i].item > s->ran && s->uses[i].lo < hi && lo < s->uses[i].hi && s->uses[i].item > need)
            need = s->uses[i].item;
    if (need > s->ran)
        s->fill_waits++;
    while (s->ran < need)
        pthread_cond_wait(&s->progress, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

int rt_cuda_fill_waits(Backend *be, int *fills, int *queued) {
    if (!is_cuda(be))
        return -1;
    CudaState *s = be->state;
    *fills = s->pinned_fills, *queued = s->fills_queued;
    return s->fill_waits;
}

static void wait_host_event(CudaState *s, int ev) {
    pthread_mutex_lock(&s->mu);
    while (s->done[ev] < s->expected[ev])
        pthread_cond_wait(&s->progress, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

//
// Memory.
//

static void *cuda_alloc(Backend *be, MemKind kind, int64_t bytes) {
    CudaState *s = be->state;
    size_t n = (size_t)(bytes > 0 ? bytes : 1);
    if (kind == MEMK_PINNED) {
        void *p = NULL;
        if (s->api.cu.MemHostAlloc(&p, n, CUX_MEMHOSTALLOC_PORTABLE) != CUX_SUCCESS)
            return NULL;
        memset(p, 0, n);
        return p;
    }
    CuDevPtr p = 0;
    if (s->api.cu.MemAlloc(&p, n) != CUX_SUCCESS)
        return NULL;
    if (s->api.cu.MemsetD8Async(p, 0, n, s->stream[STREAM_COMPUTE]) != CUX_SUCCESS ||
        s->api.cu.StreamSynchronize(s->stream[STREAM_COMPUTE]) != CUX_SUCCESS) {
        s->api.cu.MemFree(p);
        return NULL;
    }
    return (void *)(uintptr_t)p;
}

static void cuda_free(Backend *be, MemKind kind, void *p) {
    CudaState *s = be->state;
    if (kind == MEMK_PINNED)
        s->api.cu.MemFreeHost(p);
    else
        s->api.cu.MemFree(dptr(p));
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// With NCCL, the device streams are waited for by polling: until done, or NCCL reports an
// error of its own (a peer died, the network failed), or the job's deadline passes (a peer
// hangs). Then the communicator is aborted, which ends its kernels, so that nothing of ours
// blocks; the failure is what the next sync reports.
static void wait_device(CudaState *s) {
    // (Before the streams' tail events exist, as when the arena is refused after NCCL's
    // communicator is made, nothing has been issued that a collective could hold up.)
    if (!s->ncomm || s->aborted || !s->tail[STREAM_COMPUTE])
        return;
    for (int t = 0; t < STREAM_COUNT; t++)
        if (t != STREAM_HOST)
            call_ok(s, s->api.cu.EventRecord(s->tail[t], s->stream[t]), "cuEventRecord");
    double end = now_s() + s->comm->timeout_s;
    long nap = 2000;
    char why[400] = "";
    for (;;) {
        bool done = true;
        for (int t = 0; t < STREAM_COUNT && done && !why[0]; t++) {
            if (t == STREAM_HOST)
                continue;
            CuResult r = s->api.cu.EventQuery(s->tail[t]);
            if (r == CUX_ERROR_NOT_READY)
                done = false;
            else if (r != CUX_SUCCESS)
                snprintf(why, sizeof why, "the %s stream failed", stream_tag[t]);
        }
        int async = NCCLX_SUCCESS;   // (a collective that failed may still have completed)
        if (!why[0] && s->nccl.CommGetAsyncError(s->ncomm, &async) == NCCLX_SUCCESS &&
            async != NCCLX_SUCCESS && async != NCCLX_IN_PROGRESS)
            snprintf(why, sizeof why, "NCCL: %s", s->nccl.GetErrorString(async));
        if (done && !why[0])
            return;
        if (!why[0] && now_s() > end)
            snprintf(why, sizeof why, "a collective did not complete in %.0f s", s->comm->timeout_s);
        if (why[0])
            break;
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        if (nap < 1000000)
            nap *= 2;
    }
    pthread_mutex_lock(&s->mu);
    if (!s->failed[0])
        snprintf(s->failed, sizeof s->failed, "%s (a rank died or hangs; the job ends)", why);
    pthread_mutex_unlock(&s->mu);
    s->nccl.CommAbort(s->ncomm);
    s->aborted = true;
}

// The runtime's own reads and writes happen between phases: every stream is drained
// first, so they see (and are seen by) all the work issued before.
static void drain(CudaState *s) {
    wait_device(s);
    drain_host(s);
    call_ok(s, s->api.cu.CtxSynchronize(), "cuCtxSynchronize");
}

enum { STAGE_SLOTS = 2, STAGE_BYTES = 8 << 20 };

// A write from the host (the batch, a checkpoint's values) to device memory: through pinned
// staging slots by copies on the compute stream, ordered after the work every device stream
// has been given and before whatever any of them is given next. (cuMemcpyHtoD from pageable
// memory may return once the bytes are staged, its DMA landing later and unordered with the
// plan's non-blocking streams.) Nothing waits for the device but a slot's previous copy, so
// the batch's four writes a micro-step no longer drain it; src may be reused on return.
static void cuda_set(Backend *be, MemKind kind, void *dst, const void *src, int64_t bytes) {
    CudaState *s = be->state;
    if (kind == MEMK_PINNED) {   // the host arena: host work on it so far done first
        drain(s);
        memcpy(dst, src, (size_t)bytes);
        return;
    }
    if (!s->staging) {
        void *p = NULL;
        if (!call_ok(s, s->api.cu.MemHostAlloc(&p, (size_t)STAGE_SLOTS * STAGE_BYTES, CUX_MEMHOSTALLOC_PORTABLE),
                     "cuMemHostAlloc (the staging of host writes)"))
            return;
        s->staging = p;
        for (int k = 0; k < STAGE_SLOTS; k++)
            if (!call_ok(s, s->api.cu.EventCreate(&s->staged[k], CUX_EVENT_DISABLE_TIMING), "cuEventCreate"))
                return;
    }
    CuStream st = s->stream[STREAM_COMPUTE];
    for (int t = 0; t < STREAM_COUNT; t++)
        if (t != STREAM_HOST && t != STREAM_COMPUTE) {
            call_ok(s, s->api.cu.EventRecord(s->tail[t], s->stream[t]), "cuEventRecord");
            call_ok(s, s->api.cu.StreamWaitEvent(st, s->tail[t], 0), "cuStreamWaitEvent");
        }
    for (int64_t at = 0; at < bytes; at += STAGE_BYTES) {
        size_t n = (size_t)(bytes - at < STAGE_BYTES ? bytes - at : STAGE_BYTES);
        int k = s->next_slot;
        s->next_slot = (k + 1) % STAGE_SLOTS;
        char *slot = s->staging + (size_t)k * STAGE_BYTES;
        if (!call_ok(s, s->api.cu.EventSynchronize(s->staged[k]), "cuEventSynchronize"))
            return;
        memcpy(slot, (const char *)src + at, n);
        if (!call_ok(s, s->api.cu.MemcpyAsync(dptr((char *)dst + at), dptr(slot), n, st), "cuMemcpyAsync") ||
            !call_ok(s, s->api.cu.EventRecord(s->staged[k], st), "cuEventRecord"))
            return;
    }
    if (!call_ok(s, s->api.cu.EventRecord(s->tail[STREAM_COMPUTE], st), "cuEventRecord"))
        return;
    for (int t = 0; t < STREAM_COUNT; t++)
        if (t != STREAM_HOST && t != STREAM_COMPUTE)
            call_ok(s, s->api.cu.StreamWaitEvent(s->stream[t], s->tail[STREAM_COMPUTE], 0), "cuStreamWaitEvent");
}

static void cuda_get(Backend *be, MemKind kind, void *dst, const void *src, int64_t bytes) {
    CudaState *s = be->state;
    drain(s);
    if (kind == MEMK_PINNED)
        memcpy(dst, src, (size_t)bytes);
    else
        call_ok(s, s->api.cu.MemcpyDtoH(dst, dptr(src), (size_t)bytes), "cuMemcpyDtoH");
}

// A fill (the executor's poison) comes after everything issued before it on every stream:
// the last instruction touching a buffer need not be ordered after every other that reads
// it, and a fill writes.
static void cuda_fill(Backend *be, MemKind kind, void *dst, uint32_t pattern, int width,
                      int64_t bytes, Stream stream) {
    CudaState *s = be->state;
    if (stream == STREAM_HOST) {   // the worker waits for the device streams' work so far
        HostItem it = {.kind = HOST_FILL, .dst = dst, .pattern = pattern, .width = width, .bytes = bytes};
        for (int t = 0; t < STREAM_COUNT; t++) {
            if (t == STREAM_HOST ||
                !call_ok(s, s->api.cu.EventCreate(&it.own[it.nown], CUX_EVENT_DISABLE_TIMING),
                         "cuEventCreate"))
                continue;
            call_ok(s, s->api.cu.EventRecord(it.own[it.nown], s->stream[t]), "cuEventRecord");
            it.nown++;
        }
        enqueue(s, &it);
        return;
    }
    if (kind == MEMK_PINNED)   // host instructions queued on it have run
        wait_host_uses(s, (uintptr_t)dst, (uintptr_t)dst + (uintptr_t)bytes);
    CuStream st = s->stream[stream];
    for (int t = 0; t < STREAM_COUNT; t++)
        if (t != STREAM_HOST && t != (int)stream) {
            call_ok(s, s->api.cu.EventRecord(s->tail[t], s->stream[t]), "cuEventRecord");
            call_ok(s, s->api.cu.StreamWaitEvent(st, s->tail[t], 0), "cuStreamWaitEvent");
        }
    size_t n = (size_t)(bytes / width);
    CuResult r = width == 4   ? s->api.cu.MemsetD32Async(dptr(dst), pattern, n, st)
                 : width == 2 ? s->api.cu.MemsetD16Async(dptr(dst), (unsigned short)pattern, n, st)
                              : s->api.cu.MemsetD8Async(dptr(dst), (unsigned char)pattern, n, st);
    call_ok(s, r, "cuMemsetAsync");
}

static void cuda_copy(Backend *be, void *dst, MemKind dk, const void *src, MemKind sk, int64_t bytes,
                      Stream stream) {
    CudaState *s = be->state;
    (void)dk, (void)sk;
    call_ok(s, s->api.cu.MemcpyAsync(dptr(dst), dptr(src), (size_t)bytes, s->stream[stream]),
            "cuMemcpyAsync");
}

//
// Events.
//

// --profile: a timing event (made the first time) recorded on the stream; the time between two
// once the stream has drained (-1 where either is missing or not recorded).
static void cuda_time_mark(Backend *be, int slot, Stream stream) {
    CudaState *s = be->state;
    if (slot < 0 || stream == STREAM_HOST)
        return;
    if (!s->timing) {
        s->ntiming = 2 * s->ninstr + 2;
        s->timing = calloc((size_t)s->ntiming, sizeof *s->timing);
    }
    if (!s->timing || slot >= s->ntiming)
        return;
    if (!s->timing[slot] && !call_ok(s, s->api.cu.EventCreate(&s->timing[slot], 0), "cuEventCreate"))
        return;
    call_ok(s, s->api.cu.EventRecord(s->timing[slot], s->stream[stream]), "cuEventRecord");
}

static double cuda_time_between(Backend *be, int a, int b) {
    CudaState *s = be->state;
    float ms = -1;
    if (s->timing && a >= 0 && b >= 0 && a < s->ntiming && b < s->ntiming && s->timing[a] && s->timing[b] &&
        s->api.cu.EventElapsedTime(&ms, s->timing[a], s->timing[b]) != CUX_SUCCESS)
        ms = -1;
    return ms;
}

static void cuda_event_record(Backend *be, int event, Stream stream) {
    CudaState *s = be->state;
    s->on_host[event] = stream == STREAM_HOST;
    if (stream == STREAM_HOST) {
        HostItem it = {.kind = HOST_RECORD, .event = event, .gen = ++s->expected[event]};
        enqueue(s, &it);
    } else {
        call_ok(s, s->api.cu.EventRecord(s->event[event], s->stream[stream]), "cuEventRecord");
        s->recorded_in[event] = s->capturing ? s->cap_gen : 0;
    }
}

// A device stream waits for a device event on the GPU, and for a host event by holding the
// issue of its work until the worker has recorded it; the host stream waits for a device
// event in the worker, and for a host event not at all (host order).
static void cuda_event_wait(Backend *be, Stream stream, int event) {
    CudaState *s = be->state;
    if (stream == STREAM_HOST) {
        if (!s->on_host[event] && !s->recorded_in[event]) {   // (one recorded in a captured
            HostItem it = {.kind = HOST_WAIT, .event = event};   // phase: drained with it)
            enqueue(s, &it);
        }
    } else if (s->on_host[event]) {
        wait_host_event(s, event);
    } else if (s->recorded_in[event] == (s->capturing ? s->cap_gen : 0)) {
        // (an event last recorded in another capture, or in this one's phase before it, marks
        // work that phase's drain finished: nothing to wait for, and a capture may not)
        call_ok(s, s->api.cu.StreamWaitEvent(s->stream[stream], s->event[event], 0),
                "cuStreamWaitEvent");
    }
}

static int cuda_sync(Backend *be, char *err, size_t errlen) {
    CudaState *s = be->state;
    drain(s);
    pthread_mutex_lock(&s->mu);
    int rc = s->failed[0] ? rt_fail(err, errlen, "%s", s->failed) : 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

//
// Kernels and GEMMs.
//

static int lt_type(PlanDType t) {
    return t == PDT_BF16 ? LTX_R_16BF : t == PDT_F16 ? LTX_R_16F : t == PDT_F32 ? LTX_R_32F : -1;
}

// The plan's product for a GEMM instruction: C[M,N] (+)= op(A) op(B), `batch` times, with
// A stored [K,M] when ta (else [M,K]) and B stored [N,K] when tb (else [K,N]): the op
// contract's (op_gemm), as the cpu backend's column runs it too.
typedef struct GemmShape {
    int a, b;
    int ta, tb;
    int64_t M, N, K, batch;
} GemmShape;

static bool gemm_shape(const Plan *p, const PlanInstr *in, GemmShape *g) {
    OpOperand a = plan_operand(p, in->in[0]), b = plan_operand(p, in->in[1]), o = plan_operand(p, in->out[0]);
    OpGemm og;
    if (!op_gemm(in->op, &a, &b, &o, &og))
        return false;
    *g = (GemmShape){.a = in->in[0], .b = in->in[1], .ta = og.ta, .tb = og.tb, .M = og.M, .N = og.N,
                     .K = og.K, .batch = og.batch};
    return true;
}

// cuBLASLt's candidates for g, best first as its heuristic ranks them (at most n into h,
// *got of them), within g's workspace, for operands aligned to `align` bytes (A, B, C and D
// alike).
static LtStatus heuristics(CudaState *s, const Gemm *g, uint32_t align, int n, LtHeuristic *h, int *got) {
    LtPref pref = NULL;
    LtStatus st = s->api.lt.MatmulPreferenceCreate(&pref);
    if (st == LTX_SUCCESS)
        st = s->api.lt.MatmulPreferenceSetAttribute(pref, LTX_PREF_MAX_WORKSPACE_BYTES, &g->ws, sizeof g->ws);
    for (int k = 0; k < 4 && st == LTX_SUCCESS; k++)
        st = s->api.lt.MatmulPreferenceSetAttribute(pref, LTX_PREF_MIN_ALIGNMENT_A + k, &align, sizeof align);
    *got = 0;
    if (st == LTX_SUCCESS)
        st = s->api.lt.MatmulAlgoGetHeuristic(s->lt, g->desc, g->la, g->lb, g->lc, g->lc, pref, n, h, got);
    if (pref)
        s->api.lt.MatmulPreferenceDestroy(pref);
    if (st == LTX_SUCCESS && *got < 1)
        st = 15;   // CUBLAS_STATUS_NOT_SUPPORTED
    return st;
}

// cuBLASLt's first heuristic choice for g, for operands aligned to `align` bytes.
static LtStatus choose_algo(CudaState *s, Gemm *g, uint32_t align) {
    LtHeuristic h;
    int got;
    LtStatus st = heuristics(s, g, align, 1, &h, &got);
    if (st == LTX_SUCCESS)
        g->algo = h.algo, g->align = align, g->how = 0;
    return st;
}

static LtStatus layout(CudaState *s, LtLayout *l, PlanDType t, int64_t rows, int64_t cols,
                       int64_t batch) {
    LtStatus st = s->api.lt.MatrixLayoutCreate(l, lt_type(t), (uint64_t)rows, (uint64_t)cols, rows);
    if (st == LTX_SUCCESS && batch > 1) {
        int32_t count = (int32_t)batch;
        int64_t stride = rows * cols;
        st = s->api.lt.MatrixLayoutSetAttribute(*l, LTX_LAYOUT_BATCH_COUNT, &count, sizeof count);
        if (st == LTX_SUCCESS)
            st = s->api.lt.MatrixLayoutSetAttribute(*l, LTX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof stride);
    }
    return st;
}

// Descriptors, layouts and algorithm for product sh with operands of dtypes da (the plan's
// A), db (B) and dc (C), an optional bias of dtype dbias (-1: none), within `ws` bytes.
static int lt_setup(CudaState *s, const PlanInstr *in, const GemmShape *sh, PlanDType da, PlanDType db,
                    PlanDType dc, int dbias, uint64_t ws, Gemm *g, char *err, size_t errlen) {
    if (lt_type(da) < 0 || lt_type(db) < 0 || lt_type(dc) < 0)
        return rt_fail(err, errlen, "instruction %d (%s): cuBLASLt takes no %s operands", in->id,
                       op_desc(in->op)->name, plan_dtype_name(lt_type(da) < 0 ? da : db));
    int32_t opa = sh->tb ? LTX_OP_T : LTX_OP_N, opb = sh->ta ? LTX_OP_T : LTX_OP_N;
    LtStatus st = s->api.lt.MatmulDescCreate(&g->desc, LTX_COMPUTE_32F, LTX_R_32F);
    if (st == LTX_SUCCESS)
        st = s->api.lt.MatmulDescSetAttribute(g->desc, LTX_DESC_TRANSA, &opa, sizeof opa);
    if (st == LTX_SUCCESS)
        st = s->api.lt.MatmulDescSetAttribute(g->desc, LTX_DESC_TRANSB, &opb, sizeof opb);
    if (st == LTX_SUCCESS && dbias >= 0) {
        uint32_t epilogue = LTX_EPILOGUE_BIAS;
        int32_t bias_type = lt_type((PlanDType)dbias);
        st = s->api.lt.MatmulDescSetAttribute(g->desc, LTX_DESC_EPILOGUE, &epilogue, sizeof epilogue);
        if (st == LTX_SUCCESS)
            st = s->api.lt.MatmulDescSetAttribute(g->desc, LTX_DESC_BIAS_DATA_TYPE, &bias_type,
                                                  sizeof bias_type);
    }
    // Column-major: cuBLASLt's A is the plan's B ([N,K] stored as K x N when tb), its B the
    // plan's A, its C the plan's C as N x M.
    if (st == LTX_SUCCESS)
        st = sh->tb ? layout(s, &g->la, db, sh->K, sh->N, sh->batch)
                    : layout(s, &g->la, db, sh->N, sh->K, sh->batch);
    if (st == LTX_SUCCESS)
        st = sh->ta ? layout(s, &g->lb, da, sh->M, sh->K, sh->batch)
                    : layout(s, &g->lb, da, sh->K, sh->M, sh->batch);
    if (st == LTX_SUCCESS)
        st = layout(s, &g->lc, dc, sh->N, sh->M, sh->batch);
    g->ws = ws, g->M = sh->M, g->N = sh->N, g->K = sh->K, g->batch = sh->batch, g->ta = sh->ta, g->tb = sh->tb;
    g->da = da, g->db = db, g->dc = dc, g->dbias = dbias;
    if (st == LTX_SUCCESS)
        st = choose_algo(s, g, 256);
    if (st != LTX_SUCCESS)
        return rt_fail(err, errlen,
                       "instruction %d (%s, from .ft line %d:%d): cuBLASLt has no algorithm for "
                       "%lld x %lld x %lld (batch %lld), %s x %s -> %s, within %llu bytes of "
                       "workspace (status %d)",
                       in->id, op_desc(in->op)->name, in->line, in->col, (long long)sh->M,
                       (long long)sh->N, (long long)sh->K, (long long)sh->batch, plan_dtype_name(da),
                       plan_dtype_name(db), plan_dtype_name(dc), (unsigned long long)ws, st);
    return 0;
}

// The largest power of two up to 256 that divides every operand's address.
static uint32_t operands_align(const void *a, const void *b, const void *c, const void *d) {
    uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | 256;
    return (uint32_t)(bits & -bits);
}

// Before a product: an algorithm chosen for operands at least as aligned as these are (the
// fused loss's chunks and offset views can be less than the 256 bytes a first choice
// assumes); chosen again, once for each lower alignment met.
static LtStatus align_algo(CudaState *s, Gemm *g, const void *a, const void *b, const void *c,
                           const void *d) {
    uint32_t al = operands_align(a, b, c, d);
    return al >= g->align ? LTX_SUCCESS : choose_algo(s, g, al);
}

static int gemm_setup(CudaState *s, const Plan *p, const PlanInstr *in, Gemm *g, char *err,
                      size_t errlen) {
    GemmShape sh;
    if (!gemm_shape(p, in, &sh))
        return rt_fail(err, errlen, "instruction %d (%s): not a GEMM the cuda backend knows", in->id,
                       op_desc(in->op)->name);
    const PlanBuffer *A = &p->buf[sh.a], *B = &p->buf[sh.b], *C = &p->buf[in->out[0]];
    g->a = sh.a, g->b = sh.b, g->c = in->out[0];
    g->bias = in->op == OP_LINEAR && in->nin > 2 ? in->in[2] : -1;
    // A weight gradient (linear_dw, matmul_db) adds into itself; linear_acc adds its y in,
    // linear_dx its acc where it has one. Their scales are the product's alpha.
    bool acc = in->op == OP_LINEAR_ACC || (in->op == OP_LINEAR_DX && in->nin > 2 && in->in[2] >= 0);
    g->cin = acc ? in->in[2] : in->out[0];
    g->beta = acc || (in->update & 1u) ? 1.0f : 0.0f;
    bool scaled = in->op == OP_LINEAR_ACC || in->op == OP_LINEAR_DX || in->op == OP_LINEAR_DW;
    g->alpha = scaled && in->attr.f != 0 ? (float)in->attr.f : 1.0f;
    uint64_t ws = in->ws >= 0 ? (uint64_t)p->buf[in->ws].bytes : 0;
    return lt_setup(s, in, &sh, A->dtype, B->dtype, C->dtype, g->bias >= 0 ? (int)p->buf[g->bias].dtype : -1,
                    ws, g, err, errlen);
}

// The fused loss's products, one set per instruction: their shapes are fixed, the chunk
// only moves their pointers. Their workspace is the instruction's past the loss's own.
static int loss_setup(CudaState *s, const Plan *p, const PlanInstr *in, Gemm *g, char *err, size_t errlen) {
    int64_t ws = plan_loss(p, in).lib_bytes;
    for (int w = 0; w < LOSS_GEMMS; w++) {
        if ((w == LOSS_DX && rt_loss_dx(in) < 0) || (w == LOSS_DW && rt_loss_dw(in) < 0))
            break;
        LossGemm lg;
        rt_loss_gemm_shape(p, in, w, &lg);
        GemmShape sh = {.ta = lg.trans_a, .tb = lg.trans_b, .M = lg.m, .N = lg.n, .K = lg.k, .batch = 1};
        if (lt_setup(s, in, &sh, lg.ta, lg.tb, lg.tc, -1, (uint64_t)ws, &g[w], err, errlen) != 0)
            return -1;
    }
    return 0;
}

// cuBLASLt's statuses by name (cublas_api.h).
static const char *lt_status_name(LtStatus st) {
    return st == 1 ? "NOT_INITIALIZED" : st == 3 ? "ALLOC_FAILED" : st == 7 ? "INVALID_VALUE"
           : st == 8 ? "ARCH_MISMATCH" : st == 11 ? "MAPPING_ERROR" : st == 13 ? "EXECUTION_FAILED"
           : st == 14 ? "INTERNAL_ERROR" : st == 15 ? "NOT_SUPPORTED" : st == 16 ? "LICENSE_ERROR" : "unknown";
}

// (the fused loss's runner names the instruction itself)
static int gemm_failed(const PlanInstr *in, LtStatus st, char *err, size_t errlen) {
    if (!in)
        return rt_fail(err, errlen, "cublasLtMatmul failed: CUBLAS_STATUS_%s (%d)", lt_status_name(st), st);
    return rt_fail(err, errlen, "instruction %d (%s, from .ft line %d:%d): cublasLtMatmul failed: "
                   "CUBLAS_STATUS_%s (%d)", in->id, op_desc(in->op)->name, in->line, in->col,
                   lt_status_name(st), st);
}

typedef struct LossCtx {
    CudaState *s;
    Gemm *g;
} LossCtx;

static int loss_gemm(void *ctx, const PlanInstr *in, const LossGemm *lg, char *err, size_t errlen) {
    LossCtx *x = ctx;
    CudaState *s = x->s;
    Gemm *g = &x->g[lg->which];
    float alpha = 1.0f, beta = lg->beta;
    LtStatus st = align_algo(s, g, lg->a, lg->b, lg->c, lg->c);
    if (st == LTX_SUCCESS)
        st = s->api.lt.Matmul(s->lt, g->desc, &alpha, lg->b, g->la, lg->a, g->lb, &beta, lg->c, g->lc,
                              lg->c, g->lc, &g->algo, lg->ws, lg->ws_bytes, s->stream[in->stream]);
    return st == LTX_SUCCESS ? 0 : gemm_failed(NULL, st, err, errlen);
}

// One kernel launch of instruction `in`. Captured, a launch whose arguments change between
// micro-steps is noted with its graph node (the one cuStreamGetCaptureInfo says the
// stream's next work would follow: this launch).
static CuResult launch_kernel(CudaState *s, const PlanInstr *in, int l, void *args) {
    const PlanLaunch *pl = &in->launch[l];
    CuFunction fn = s->fn[in->id * PLAN_MAX_LAUNCHES + l];
    CuStream st = s->stream[in->stream];
    void *params[1] = {args};
    CuResult r = s->api.cu.LaunchKernel(fn, pl->grid[0], pl->grid[1], pl->grid[2], pl->block[0],
                                        pl->block[1], pl->block[2], pl->smem, st, params, NULL);
    if (r != CUX_SUCCESS || !s->capturing || !rt_args_vary(in))
        return r;
    int status = 0;
    const CuGraphNode *deps = NULL;
    size_t n = 0;
    r = s->api.cu.StreamGetCaptureInfo(st, &status, NULL, NULL, &deps, &n);
    if (r == CUX_SUCCESS && (status != CUX_CAPTURE_STATUS_ACTIVE || n != 1 || !deps))
        r = CUX_ERROR_CAPTURE_INVALIDATED;
    if (r != CUX_SUCCESS)
        return r;
    PhaseGraph *t = &s->taking;
    if (t->nnode == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->node = xrealloc(t->node, sizeof *t->node * (size_t)t->cap);
    }
    GraphNode gn = {.node = deps[0], .in = in, .fn = fn, .pl = pl};
    if (in->group) {
        gn.group = xmalloc(sizeof *gn.group);
        memcpy(gn.group, args, sizeof *gn.group);
    } else {
        gn.args = *(KernelArgs *)args;
    }
    t->node[t->nnode++] = gn;
    return CUX_SUCCESS;
}

static int loss_launch(void *ctx, const PlanInstr *in, int l, const KernelArgs *a, char *err, size_t errlen) {
    LossCtx *x = ctx;
    CudaState *s = x->s;
    if (l >= in->nlaunch)
        return rt_fail(err, errlen, "the fused loss names %d launches, not %d", in->nlaunch, l + 1);
    CuResult r = launch_kernel(s, in, l, (void *)a);
    return r == CUX_SUCCESS ? 0 : fail_cu(s, r, in->launch[l].name, err, errlen);
}

static int run_gemm(CudaState *s, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    Gemm *g = &s->gemm[in->id];
    LtStatus st = LTX_SUCCESS;
    if (g->bias >= 0) {
        const void *bias = x->ptr[g->bias];
        st = s->api.lt.MatmulDescSetAttribute(g->desc, LTX_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    void *ws = in->ws >= 0 ? x->ptr[in->ws] : NULL;
    size_t wsb = in->ws >= 0 ? (size_t)x->plan->buf[in->ws].bytes : 0;
    if (st == LTX_SUCCESS)
        st = align_algo(s, g, x->ptr[g->a], x->ptr[g->b], x->ptr[g->cin], x->ptr[g->c]);
    if (st == LTX_SUCCESS)
        st = s->api.lt.Matmul(s->lt, g->desc, &g->alpha, x->ptr[g->b], g->la, x->ptr[g->a], g->lb,
                              &g->beta, x->ptr[g->cin], g->lc, x->ptr[g->c], g->lc, &g->algo, ws, wsb,
                              s->stream[in->stream]);
    return st == LTX_SUCCESS ? 0 : gemm_failed(in, st, err, errlen);
}

static bool is_gemm(const PlanInstr *in) { return op_desc(in->op)->cls == OPC_GEMM; }

// ---- cuBLASLt's candidates timed -------------------------------------------------------
//
// The heuristic's first choice is a guess from a model of the GPU; for a few shapes another
// candidate is markedly faster. Before step one, with the arenas placed and nothing loaded
// into them yet (zeros: no operand can be NaN, no result matters), each distinct product
// runs each of its first TUNE_CANDIDATES candidates TUNE_REPS times between two events on
// the compute stream after one untimed run, and keeps the fastest; the choice goes into the
// GPU's cache (gemm_cache.h), which a later run takes without timing (if cuBLASLt still
// offers that candidate), so that reruns compute the same bits.

enum { TUNE_CANDIDATES = 8, TUNE_REPS = 3 };

// Everything that decides a product's candidates and their speed.
static uint64_t product_key(const Gemm *g) {
    int64_t v[] = {g->M, g->N, g->K, g->batch, g->ta, g->tb, g->da, g->db, g->dc, g->dbias,
                   (int64_t)g->ws, g->align, g->beta != 0};
    return rt_fnv1a64(RT_FNV_BASIS, v, sizeof v);
}

typedef struct Tuning {
    GemmCache cache;
    CuEvent ev[2];
    Gemm *met;                  // the distinct products met so far, as chosen
    uint64_t *key;
    int nmet, timed, cached, faster;
    double us, first_us;        // the plan's GEMM instructions once each: as chosen, as first
} Tuning;

// The candidate's time for one product, in microseconds; < 0 when it fails.
static double time_candidate(CudaState *s, Tuning *t, Gemm *g, const LtAlgo *algo, const void *a,
                             const void *b, void *c, void *ws, size_t wsb) {
    float alpha = 1.0f, ms = 0;
    CuStream st = s->stream[STREAM_COMPUTE];
    for (int r = 0; r <= TUNE_REPS; r++) {
        if (r == 1 && s->api.cu.EventRecord(t->ev[0], st) != CUX_SUCCESS)
            return -1;
        if (s->api.lt.Matmul(s->lt, g->desc, &alpha, b, g->la, a, g->lb, &g->beta, c, g->lc, c, g->lc, algo, ws,
                             wsb, st) != LTX_SUCCESS)
            return -1;
    }
    if (s->api.cu.EventRecord(t->ev[1], st) != CUX_SUCCESS || s->api.cu.EventSynchronize(t->ev[1]) != CUX_SUCCESS ||
        s->api.cu.EventElapsedTime(&ms, t->ev[0], t->ev[1]) != CUX_SUCCESS)
        return -1;
    return (double)ms * 1e3 / TUNE_REPS;
}

// g's algorithm among its candidates for operands aligned to `align`: the cache's, if
// cuBLASLt still offers it; else the fastest timed on a, b, c and ws. False when none runs
// (g keeps the heuristic's first).
static bool choose_timed(CudaState *s, Tuning *t, Gemm *g, uint64_t key, uint32_t align, const void *a,
                         const void *b, void *c, void *ws, size_t wsb) {
    LtHeuristic h[TUNE_CANDIDATES];
    int got;
    if (heuristics(s, g, align, TUNE_CANDIDATES, h, &got) != LTX_SUCCESS)
        return false;
    LtAlgo algo;
    float us;
    if (gemm_cache_get(&t->cache, key, &algo, &us))
        for (int k = 0; k < got; k++)
            if (h[k].state == LTX_SUCCESS && !memcmp(&h[k].algo, &algo, sizeof algo)) {
                g->algo = algo, g->align = align, g->how = 'C', g->pick = k, g->ncand = got;
                g->us = us, g->first_us = 0;
                return true;
            }
    int best = -1;
    double best_us = 0, first = 0;
    for (int k = 0; k < got; k++) {
        if (h[k].state != LTX_SUCCESS || h[k].workspace_bytes > g->ws)
            continue;
        double x = time_candidate(s, t, g, &h[k].algo, a, b, c, ws, wsb);
        if (k == 0)
            first = x;
        if (x >= 0 && (best < 0 || x < best_us))
            best = k, best_us = x;
    }
    if (best < 0)
        return false;
    g->algo = h[best].algo, g->align = align, g->how = 'T', g->pick = best, g->ncand = got;
    g->us = (float)best_us, g->first_us = (float)(first > 0 ? first : best_us);
    gemm_cache_put(&t->cache, key, &g->algo, g->us);
    return true;
}

// g's algorithm for operands a, b, c and workspace ws: as chosen for the same product met
// before in this plan, else choose_timed's.
static void tune_product(CudaState *s, Tuning *t, Gemm *g, const void *a, const void *b, void *c, void *ws,
                         size_t wsb) {
    uint32_t align = operands_align(a, b, c, c), was = g->align;
    g->align = align;   // (the key's)
    uint64_t key = product_key(g);
    g->align = was;
    int m = 0;
    while (m < t->nmet && t->key[m] != key)
        m++;
    if (m < t->nmet) {
        const Gemm *e = &t->met[m];
        g->algo = e->algo, g->align = e->align, g->how = e->how, g->pick = e->pick, g->ncand = e->ncand;
        g->us = e->us, g->first_us = e->first_us;
    } else {
        if (!choose_timed(s, t, g, key, align, a, b, c, ws, wsb))
            return;
        Gemm *met = realloc(t->met, (size_t)(m + 1) * sizeof *met);
        uint64_t *keys = met ? xrealloc(t->key, (size_t)(m + 1) * sizeof *keys) : NULL;
        if (met)
            t->met = met;
        if (keys) {
            t->key = keys;
            t->met[m] = *g, t->key[m] = key, t->nmet++;
            t->timed += g->how == 'T';
            t->cached += g->how == 'C';
            t->faster += g->how == 'T' && g->pick > 0;
        }
    }
    if (g->how == 'T')
        t->us += g->us, t->first_us += g->first_us;
}

static bool on_device(const Exec *x, int id) { return id < 0 || rt_buf_kind(x, id) == MEMK_DEVICE; }

void rt_cuda_tune_gemms(Backend *be, const Exec *x, char *note, size_t len) {
    note[0] = '\0';
    if (!is_cuda(be) || x->layout != LAYOUT_PLANNED)
        return;
    CudaState *s = be->state;
    const Plan *p = x->plan;
    Tuning t = {0};
    if (!s->gemm || s->api.cu.EventCreate(&t.ev[0], 0) != CUX_SUCCESS)
        return;
    if (s->api.cu.EventCreate(&t.ev[1], 0) != CUX_SUCCESS) {
        s->api.cu.EventDestroy(t.ev[0]);
        return;
    }
    gemm_cache_open(&t.cache, NULL, s->name, s->cc_major, s->cc_minor, s->api.lt.GetVersion());
    double start = now_s();
    char *base = x->arena[ARENA_DEVICE];
    int64_t room = p->arena_bytes[ARENA_DEVICE];
    for (int id = 0; id < s->ninstr; id++) {
        const PlanInstr *in = plan_instr(p, id);
        Gemm *g = &s->gemm[id];
        if (g->desc && on_device(x, g->a) && on_device(x, g->b) && on_device(x, g->c) && on_device(x, g->bias) &&
            on_device(x, in->ws)) {
            const void *bias = g->bias >= 0 ? x->ptr[g->bias] : NULL;
            if (!bias || s->api.lt.MatmulDescSetAttribute(g->desc, LTX_DESC_BIAS_POINTER, &bias, sizeof bias) ==
                             LTX_SUCCESS)
                tune_product(s, &t, g, x->ptr[g->a], x->ptr[g->b], x->ptr[g->c], in->ws >= 0 ? x->ptr[in->ws] : NULL,
                             in->ws >= 0 ? (size_t)p->buf[in->ws].bytes : 0);
        }
        // The fused loss's products move over their operands chunk by chunk: timed on
        // operands (and a workspace) of their size laid out from the device arena's start.
        for (int w = 0; w < LOSS_GEMMS && base; w++) {
            Gemm *l = &s->loss[id * LOSS_GEMMS + w];
            int64_t ab = (plan_dtype_bytes(l->da, l->M * l->K) + 255) & ~255ll;
            int64_t bb = (plan_dtype_bytes(l->db, l->K * l->N) + 255) & ~255ll;
            int64_t cb = (plan_dtype_bytes(l->dc, l->M * l->N) + 255) & ~255ll;
            if (l->desc && ab + bb + cb + (int64_t)l->ws <= room)
                tune_product(s, &t, l, base, base + ab, base + ab + bb, l->ws ? base + ab + bb + cb : NULL, l->ws);
        }
    }
    double took = now_s() - start;
    char why[600] = "", saved[4400] = "";
    if (gemm_cache_save(&t.cache, why, sizeof why) != 0)
        snprintf(saved, sizeof saved, "; not cached: %s", why);
    else if (t.timed && t.cache.path[0])
        snprintf(saved, sizeof saved, "; cached in %s", t.cache.path);
    if (t.timed)
        snprintf(note, len, "gemm: %d distinct products, %d timed (cuBLASLt's first %d candidates, %.2f s): "
                 "%d faster than its first choice, the timed products %.2fx the first choices' time%s%s",
                 t.nmet, t.timed, TUNE_CANDIDATES, took, t.faster, t.first_us > 0 ? t.us / t.first_us : 1.0,
                 t.cached ? ", the others from the cache" : "", saved);
    else if (t.cached)
        snprintf(note, len, "gemm: %d distinct products, each cuBLASLt's candidate timed fastest here before "
                 "(%s)", t.nmet, t.cache.path);
    gemm_cache_free(&t.cache);
    free(t.met);
    free(t.key);
    s->api.cu.EventDestroy(t.ev[0]);
    s->api.cu.EventDestroy(t.ev[1]);
}

static int nccl_type(PlanDType t, int64_t elems, size_t *count) {
    *count = (size_t)elems;
    switch (t) {
    case PDT_F32: return NCCLX_FLOAT32;
    case PDT_BF16: return NCCLX_BFLOAT16;
    case PDT_F16: return NCCLX_FLOAT16;
    default:   // moved as bytes (an all-gather of NF4 or integers)
        *count = (size_t)plan_dtype_bytes(t, elems);
        return NCCLX_UINT8;
    }
}

// A collective, or the bucket it begins, on the comm stream: one NCCL group. One rank alone:
// each is a copy, or nothing in place.
static int cuda_collective(Backend *be, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    CudaState *s = be->state;
    const Plan *p = x->plan;
    int n = in->group > 0 ? in->group : 1;
    CuStream st = s->stream[STREAM_COMM];
    if (!s->ncomm) {
        if (p->ranks != 1)
            return rt_fail(err, errlen, "a plan of %d ranks, and no communicator (NCCL) for them", p->ranks);
        for (int k = 0; k < n; k++) {
            const PlanInstr *m = plan_instr(p, in->id + k);
            const PlanBuffer *b = &p->buf[m->out[0]];
            if (x->ptr[m->out[0]] != x->ptr[m->in[0]] &&
                !call_ok(s, s->api.cu.MemcpyAsync(dptr(x->ptr[m->out[0]]), dptr(x->ptr[m->in[0]]),
                                                  (size_t)plan_dtype_bytes(b->dtype, plan_elems(b)), st),
                         "cuMemcpyAsync"))
                return rt_fail(err, errlen, "%s", s->failed);
        }
        return 0;
    }
    if (s->aborted)
        return rt_fail(err, errlen, "%s", s->failed[0] ? s->failed : "NCCL was aborted");
    int rc = n > 1 ? s->nccl.GroupStart() : NCCLX_SUCCESS;
    for (int k = 0; k < n && rc == NCCLX_SUCCESS; k++) {
        const PlanInstr *m = plan_instr(p, in->id + k);
        const PlanBuffer *a = &p->buf[m->in[0]], *o = &p->buf[m->out[0]];
        const void *src = x->ptr[m->in[0]];
        void *dst = x->ptr[m->out[0]];
        size_t count;
        int t;
        switch (m->op) {
        case OP_ALL_REDUCE:
            t = nccl_type(a->dtype, plan_elems(a), &count);
            rc = s->nccl.AllReduce(src, dst, count, t, NCCLX_SUM, s->ncomm, st);
            break;
        case OP_REDUCE_SCATTER:   // count: each rank's slice
            t = nccl_type(o->dtype, plan_elems(o), &count);
            rc = s->nccl.ReduceScatter(src, dst, count, t, NCCLX_SUM, s->ncomm, st);
            break;
        default:   // all-gather; count: each rank's part
            t = nccl_type(a->dtype, plan_elems(a), &count);
            rc = s->nccl.AllGather(src, dst, count, t, s->ncomm, st);
            break;
        }
    }
    int end = n > 1 ? s->nccl.GroupEnd() : NCCLX_SUCCESS;
    if (rc == NCCLX_SUCCESS)
        rc = end;
    if (rc != NCCLX_SUCCESS && rc != NCCLX_IN_PROGRESS)
        return rt_fail(err, errlen, "NCCL %s of %d tensor%s: %s", op_desc(in->op)->name, n,
                       n == 1 ? "" : "s", s->nccl.GetErrorString(rc));
    return 0;
}

int rt_cuda_set_comm(Backend *be, Comm *comm, const NcclApi *api, char *err, size_t errlen) {
    if (!is_cuda(be) || !comm || comm->ranks <= 1)
        return 0;
    CudaState *s = be->state;
    if (api)
        s->nccl = *api;
    else if (nccl_api_load(&s->nccl, err, errlen) != 0)
        return -1;
    // Rank 0's unique id to every rank; all present before the (blocking) initialisation.
    NcclUniqueId id;
    memset(&id, 0, sizeof id);
    int rc = comm->rank == 0 ? s->nccl.GetUniqueId(&id) : NCCLX_SUCCESS;
    double ok[1] = {rc != NCCLX_SUCCESS};
    if (rt_comm_sum(comm, ok, 1, err, errlen) != 0 ||
        rt_comm_bcast(comm, &id, sizeof id, 0, err, errlen) != 0)
        return -1;
    if (ok[0] != 0)
        return rt_fail(err, errlen, "ncclGetUniqueId failed on rank 0%s%s", rc ? ": " : "",
                       rc ? s->nccl.GetErrorString(rc) : "");
    call_ok(s, s->api.cu.CtxSetCurrent(s->ctx), "cuCtxSetCurrent");
    size_t before = 0, total_b = 0;
    if (s->api.cu.MemGetInfo(&before, &total_b) != CUX_SUCCESS)
        before = 0;
    rc = s->nccl.CommInitRank(&s->ncomm, comm->ranks, id, comm->rank);
    if (rc != NCCLX_SUCCESS) {
        s->ncomm = NULL;
        return rt_fail(err, errlen, "ncclCommInitRank (rank %d of %d): %s", comm->rank, comm->ranks,
                       s->nccl.GetErrorString(rc));
    }
    s->comm = comm;
    size_t after = 0, total = 0;   // what the communicator took, for the check before the arena
    if (s->api.cu.MemGetInfo(&after, &total) == CUX_SUCCESS && before >= after)
        s->nccl_bytes = (int64_t)(before - after);
    return 0;
}

static int launch(CudaState *s, Exec *x, const PlanInstr *in, char *err, size_t errlen);

// --sync-check: the instruction waited for on its stream; a fault (or any error the
// stream holds) named by its first kernel (the executor adds the instruction and its line).
static int cuda_launch(Backend *be, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    CudaState *s = be->state;
    int rc = launch(s, x, in, err, errlen);
    if (rc != 0 || !s->sync_check || in->stream == STREAM_HOST || in->by >= 0)
        return rc;
    CuResult r = s->api.cu.StreamSynchronize(s->stream[in->stream]);
    if (r == CUX_SUCCESS)
        return 0;
    char text[160];   // (the executor puts the instruction and its .ft line in front)
    return rt_fail(err, errlen, "%s%s failed on the GPU: %s", in->nlaunch ? "kernel " : "",
                   in->nlaunch ? in->launch[0].name : is_gemm(in) ? "cublasLtMatmul" : "its work",
                   cuda_result_text(&s->api, r, text, sizeof text));
}

void rt_cuda_sync_check(Backend *be, bool on) {
    if (is_cuda(be))
        ((CudaState *)be->state)->sync_check = on;
}

static int launch(CudaState *s, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    if (in->stream == STREAM_HOST) {   // the worker runs it on the host backend, in order
        HostItem it = {.kind = HOST_RUN, .x = x, .in = in};
        enqueue(s, &it);
        note_host_uses(s, x, in);
        return 0;
    }
    if (in->by >= 0)   // its group's launch did it
        return 0;
    if (is_gemm(in))
        return run_gemm(s, x, in, err, errlen);
    if (op_desc(in->op)->cls == OPC_LOSS_GEMM) {
        LossCtx lc = {s, &s->loss[in->id * LOSS_GEMMS]};
        LossOps ops = {loss_gemm, loss_launch, &lc};
        return rt_loss_run(x, in, &ops, err, errlen);
    }
    if (in->nlaunch == 0)   // a view: nothing moves
        return 0;
    KernelArgs a;
    KernelGroupArgs *ga = NULL;
    void *args = &a;
    if (in->group) {
        ga = xmalloc(sizeof *ga);
        rt_kernel_group_args(x, in, ga);
        args = ga;
    } else {
        rt_kernel_args(x, in, &a);
    }
    int rc = 0;
    for (int l = 0; l < in->nlaunch && rc == 0; l++) {
        CuResult r = launch_kernel(s, in, l, args);
        if (r != CUX_SUCCESS)
            rc = fail_cu(s, r, in->launch[l].name, err, errlen);
    }
    free(ga);   // the driver copied the arguments at the launch
    return rc;
}

//
// CUDA graphs: a phase's launches, copies and events captured once, then launched whole.
//

static void graph_free(CudaState *s, PhaseGraph *g) {
    if (g->exec)
        s->api.cu.GraphExecDestroy(g->exec);
    if (g->graph)
        s->api.cu.GraphDestroy(g->graph);
    for (int i = 0; i < g->nnode; i++)
        free(g->node[i].group);
    free(g->node);
    *g = (PhaseGraph){0};
}

// The device streams a phase may use besides compute, which a capture forks to and joins
// from (the collectives' stream is not: a phase with collectives is never captured).
static const Stream side[] = {STREAM_D2H, STREAM_H2D};

// Captures phase ph into g: the compute stream's capture forks to the copy streams (they
// wait for an event recorded on it first) and joins them back at the end (it waits for
// theirs), as a capture must; then the graph instantiated. 0, or -1 with why in s->cap_failed.
static int capture(CudaState *s, Exec *x, PlanPhase ph, PhaseGraph *g,
                   int (*issue)(Exec *x, PlanPhase ph, char *err, size_t errlen)) {
    CuStream main = s->stream[STREAM_COMPUTE];
    s->cap_failed[0] = '\0';
    s->taking = (PhaseGraph){0};
    CuResult r = s->api.cu.StreamBeginCapture(main, CUX_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUX_SUCCESS) {
        char text[160];
        snprintf(s->cap_failed, sizeof s->cap_failed, "cuStreamBeginCapture: %s",
                 cuda_result_text(&s->api, r, text, sizeof text));
        return -1;
    }
    s->capturing = true;
    s->cap_gen++;
    call_ok(s, s->api.cu.EventRecord(s->fork, main), "cuEventRecord");
    for (size_t k = 0; k < sizeof side / sizeof side[0]; k++)
        call_ok(s, s->api.cu.StreamWaitEvent(s->stream[side[k]], s->fork, 0), "cuStreamWaitEvent");
    char why[400] = "";
    if (issue(x, ph, why, sizeof why) != 0) {
        pthread_mutex_lock(&s->mu);
        if (!s->cap_failed[0])
            snprintf(s->cap_failed, sizeof s->cap_failed, "%s", why);
        pthread_mutex_unlock(&s->mu);
    }
    for (size_t k = 0; k < sizeof side / sizeof side[0]; k++) {
        call_ok(s, s->api.cu.EventRecord(s->join[side[k]], s->stream[side[k]]), "cuEventRecord");
        call_ok(s, s->api.cu.StreamWaitEvent(main, s->join[side[k]], 0), "cuStreamWaitEvent");
    }
    CuGraph graph = NULL;
    const char *what = "cuStreamEndCapture";
    r = s->api.cu.StreamEndCapture(main, &graph);
    s->capturing = false;
    if (r == CUX_SUCCESS && !s->cap_failed[0])
        what = "cuGraphInstantiate", r = s->api.cu.GraphInstantiateWithFlags(&g->exec, graph, 0);
    if (r != CUX_SUCCESS && !s->cap_failed[0]) {
        char text[160];
        snprintf(s->cap_failed, sizeof s->cap_failed, "%s: %s", what, cuda_result_text(&s->api, r, text, sizeof text));
    }
    g->graph = graph, g->node = s->taking.node, g->nnode = s->taking.nnode;
    s->taking = (PhaseGraph){0};
    if (s->cap_failed[0]) {
        graph_free(s, g);
        return -1;
    }
    return 0;
}

// Phase ph as a graph (Backend.run_phase). Declined under --sync-check (it waits between
// instructions) and with collectives; declined from then on when a capture fails, saying
// why once: the phases then run launch by launch, as they would without graphs.
static int cuda_run_phase(Backend *be, Exec *x, PlanPhase ph,
                          int (*issue)(Exec *x, PlanPhase ph, char *err, size_t errlen), char *err,
                          size_t errlen) {
    CudaState *s = be->state;
    if (s->graphs_off || s->sync_check || s->ncomm || !s->fork)
        return 0;
    PhaseGraph *g = &s->graph[ph][x->last];
    if (!g->exec && capture(s, x, ph, g, issue) != 0) {
        s->graphs_off = true;
        fprintf(stderr, "ftc: the %s phase could not be captured as a CUDA graph (%s); every phase "
                "runs launch by launch\n", plan_phase_name(ph), s->cap_failed);
        return 0;
    }
    KernelGroupArgs *ga = NULL;
    for (int i = 0; i < g->nnode; i++) {   // this micro-step's dropout streams, loss scale, step
        GraphNode *n = &g->node[i];
        KernelArgs a = n->args;
        void *now = &a, *was = &n->args;
        size_t bytes = sizeof a;
        if (n->group) {
            ga = ga ? ga : xmalloc(sizeof *ga);
            *ga = *n->group;
            rt_group_args_update(x, n->in, ga);
            now = ga, was = n->group, bytes = sizeof *ga;
        } else {
            rt_args_update(x, n->in, &a);
        }
        if (!memcmp(now, was, bytes))
            continue;
        void *params[1] = {now};
        CuKernelNodeParams kp = {n->fn, n->pl->grid[0], n->pl->grid[1], n->pl->grid[2], n->pl->block[0],
                                 n->pl->block[1], n->pl->block[2], n->pl->smem, params, NULL, NULL, NULL};
        CuResult r = s->api.cu.GraphExecKernelNodeSetParams(g->exec, n->node, &kp);
        if (r != CUX_SUCCESS) {
            free(ga);
            return fail_cu(s, r, "cuGraphExecKernelNodeSetParams", err, errlen);
        }
        memcpy(was, now, bytes);
    }
    free(ga);
    CuResult r = s->api.cu.GraphLaunch(g->exec, s->stream[STREAM_COMPUTE]);
    return r == CUX_SUCCESS ? 1 : fail_cu(s, r, "cuGraphLaunch", err, errlen);
}

//
// Before step one: the module, every kernel, every GEMM's algorithm, the events.
//

// Loads one image as the module; on refusal appends what and why to tried (a ", " list).
static bool try_image(CudaState *s, char *image, const char *what, char *tried, size_t len) {
    if (!image)
        return false;
    CuResult cr = s->api.cu.ModuleLoadData(&s->module, image);
    free(image);
    if (cr == CUX_SUCCESS) {
        snprintf(s->module_from, sizeof s->module_from, "%s", what);
        return true;
    }
    char text[160];
    size_t used = strlen(tried);
    snprintf(tried + used, len - used, "%s%s: %s", used ? "; " : "", what,
             cuda_result_text(&s->api, cr, text, sizeof text));
    return false;
}

// The kernels, from the first image the driver takes: the plan's CUBIN for this GPU's SM,
// or for an earlier minor of its major (a CUBIN runs on later minors: sm_80's on sm_86 and
// sm_89); else kernels.cu compiled by NVRTC for this SM; else as PTX for the highest virtual
// architecture NVRTC knows up to this GPU's, compiled by the driver as it loads it (a GPU
// newer than NVRTC, or a driver older than the toolkit that built the CUBINs refuses them).
static int load_module(CudaState *s, char *err, size_t errlen) {
    char path[4300], what[600], tried[4096] = "";
    int sm = s->cc_major * 10 + s->cc_minor;
    for (int minor = s->cc_minor; minor >= 0; minor--) {
        snprintf(path, sizeof path, "%s/kernels.sm_%d%d.cubin", s->dir, s->cc_major, minor);
        size_t len = 0;
        char *image = rt_read_whole(path, &len);
        snprintf(what, sizeof what, "the plan's kernels.sm_%d%d.cubin", s->cc_major, minor);
        if (image && try_image(s, image, what, tried, sizeof tried))
            return 0;
    }
    snprintf(path, sizeof path, "%s/kernels.cu", s->dir);
    size_t len = 0;
    char *src = rt_read_whole(path, &len);
    if (!src)
        return rt_fail(err, errlen, "%s: cannot read it (recompile the plan)%s%s", path,
                       tried[0] ? "; refused: " : "", tried);
    const char *opts[] = {"--fmad=false"};
    NvrtcResult r;
    char why[1024];
    if (rt_nvrtc_compile_cached(NULL, src, "kernels.cu", s->arch, opts, 1, &r, why, sizeof why) == 0) {
        char *image = (char *)r.cubin;
        r.cubin = NULL;
        rt_nvrtc_result_free(&r);
        snprintf(what, sizeof what, "kernels.cu compiled by NVRTC for %s", s->arch);
        if (try_image(s, image, what, tried, sizeof tried)) {
            free(src);
            return 0;
        }
    } else {
        rt_nvrtc_result_free(&r);   // (a failed compile keeps NVRTC's log)
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%sNVRTC for %s: %.300s", used ? "; " : "", s->arch, why);
    }
    static const int virt[] = {120, 100, 90, 89, 86, 80};
    for (size_t i = 0; i < sizeof virt / sizeof virt[0]; i++) {
        if (virt[i] > sm)
            continue;
        char *ptx = rt_nvrtc_ptx(src, "kernels.cu", virt[i], opts, 1, why, sizeof why);
        snprintf(what, sizeof what, "kernels.cu as PTX for compute_%d", virt[i]);
        if (ptx && try_image(s, ptx, what, tried, sizeof tried))
            break;
        if (!ptx) {
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%sNVRTC for compute_%d: %.200s", used ? "; " : "",
                     virt[i], why);
        }
    }
    free(src);
    if (!s->module_from[0]) {
        NvrtcInfo nv = {0};
        bool older = rt_nvrtc_available(&nv) && s->driver_version / 1000 < nv.major;
        char advice[900] = "";
        if (older)   // what it makes needs a driver of its own major or later
            snprintf(advice, sizeof advice, ". The driver is older than NVRTC %d.%d (%s): install a driver "
                     "for CUDA %d, or point FTC_NVRTC at CUDA %d's libnvrtc.so.%d", nv.major, nv.minor, nv.lib,
                     nv.major, s->driver_version / 1000, s->driver_version / 1000);
        return rt_fail(err, errlen, "no kernels the driver takes for this %s (%s, driver %d.%d): %s%s",
                       s->name, s->arch, s->driver_version / 1000, s->driver_version % 1000 / 10, tried, advice);
    }
    if (tried[0])   // loaded, but not the first choice: say what was refused
        fprintf(stderr, "ftc run: note: the kernels are %s (refused: %s)\n", s->module_from, tried);
    return 0;
}

// Before the arena is allocated, after everything else on the device (the context, the
// kernels, cuBLASLt, NCCL's communicator, which the planner's reserve was to hold): it fits
// what is free, or the error says who took what.
static int arena_fits(CudaState *s, const Plan *p, char *err, size_t errlen) {
    size_t free_b = 0, total_b = 0;
    if (p->arena_bytes[ARENA_DEVICE] == 0 || s->api.cu.MemGetInfo(&free_b, &total_b) != CUX_SUCCESS)
        return 0;   // (nothing to place; or the allocation itself will say)
    if ((int64_t)free_b >= p->arena_bytes[ARENA_DEVICE])
        return 0;
    char a[32], f[32], t[32], n[32], r[32], nccl[160] = "";
    if (s->ncomm && s->nccl_bytes >= 0)
        snprintf(nccl, sizeof nccl, "; NCCL's communicator took %s of it", fmt_bytes(n, sizeof n, s->nccl_bytes));
    return rt_fail(err, errlen, "the device arena needs %s, but after the context, the kernels, cuBLASLt and "
                   "NCCL %s (%s) has %s free of %s%s, more than the plan's reserve of %s held: re-plan with "
                   "--reserve larger by %lldM (or a smaller --budget)",
                   fmt_bytes(a, sizeof a, p->arena_bytes[ARENA_DEVICE]), s->name, s->arch,
                   fmt_bytes(f, sizeof f, (int64_t)free_b), fmt_bytes(t, sizeof t, (int64_t)total_b), nccl,
                   fmt_bytes(r, sizeof r, p->reserve_bytes),
                   (long long)((p->arena_bytes[ARENA_DEVICE] - (int64_t)free_b + (1 << 20) - 1) >> 20));
}

static int cuda_prepare(Backend *be, const Plan *p, int stream, char *err, size_t errlen) {
    CudaState *s = be->state;
    (void)stream;
    if (p != s->plan)
        return rt_fail(err, errlen, "the cuda backend was made for another plan");
    if (p->ranks > 1 && !s->ncomm)
        return rt_fail(err, errlen, "a plan of %d ranks needs NCCL and the job's communicator "
                       "(started by mpirun or srun)", p->ranks);
    if (s->module)
        return 0;
    if (load_module(s, err, errlen) != 0 || arena_fits(s, p, err, errlen) != 0)
        return -1;
    s->ninstr = plan_instr_count(p);
    s->fn = xcalloc((size_t)s->ninstr * PLAN_MAX_LAUNCHES + 1, sizeof *s->fn);
    s->gemm = xcalloc((size_t)s->ninstr + 1, sizeof *s->gemm);
    s->loss = xcalloc((size_t)s->ninstr * LOSS_GEMMS + 1, sizeof *s->loss);
    for (int id = 0; id < s->ninstr; id++) {
        const PlanInstr *in = plan_instr(p, id);
        if (in->stream == STREAM_HOST || op_desc(in->op)->cls == OPC_COPY || in->by >= 0 ||
            op_desc(in->op)->cls == OPC_COLLECTIVE)
            continue;
        if (is_gemm(in)) {
            if (gemm_setup(s, p, in, &s->gemm[id], err, errlen) != 0)
                return -1;
            continue;
        }
        if (op_desc(in->op)->cls == OPC_LOSS_GEMM &&
            loss_setup(s, p, in, &s->loss[id * LOSS_GEMMS], err, errlen) != 0)
            return -1;
        if (in->nlaunch == 0 && op_desc(in->op)->cls != OPC_MOVEMENT)
            return rt_fail(err, errlen, "instruction %d (%s) names no kernel: the plan predates "
                           "kernels.cu; recompile it", id, op_desc(in->op)->name);
        for (int l = 0; l < in->nlaunch; l++) {
            CuFunction *fn = &s->fn[id * PLAN_MAX_LAUNCHES + l];
            CuResult r = s->api.cu.ModuleGetFunction(fn, s->module, in->launch[l].name);
            // Past 48 KiB of dynamic shared memory a kernel must be let have it.
            if (r == CUX_SUCCESS && in->launch[l].smem > CUX_STATIC_SMEM_MAX)
                r = s->api.cu.FuncSetAttribute(*fn, CUX_FUNC_MAX_DYNAMIC_SMEM, (int)in->launch[l].smem);
            if (r != CUX_SUCCESS)
                return fail_cu(s, r, in->launch[l].name, err, errlen);
        }
    }
    s->nevents = p->events;
    s->event = xcalloc((size_t)s->nevents + 1, sizeof *s->event);
    s->on_host = xcalloc((size_t)s->nevents + 1, sizeof *s->on_host);
    s->recorded_in = xcalloc((size_t)s->nevents + 1, sizeof *s->recorded_in);
    s->expected = xcalloc((size_t)s->nevents + 1, sizeof *s->expected);
    s->done = xcalloc((size_t)s->nevents + 1, sizeof *s->done);
    for (int e = 0; e < s->nevents; e++) {
        CuResult r = s->api.cu.EventCreate(&s->event[e], CUX_EVENT_DISABLE_TIMING);
        if (r != CUX_SUCCESS)
            return fail_cu(s, r, "cuEventCreate", err, errlen);
    }
    for (int t = 0; t < STREAM_COUNT; t++) {
        CuResult r = t == STREAM_HOST ? CUX_SUCCESS : s->api.cu.EventCreate(&s->tail[t], CUX_EVENT_DISABLE_TIMING);
        if (r == CUX_SUCCESS && t != STREAM_HOST)
            r = s->api.cu.EventCreate(&s->join[t], CUX_EVENT_DISABLE_TIMING);
        if (r != CUX_SUCCESS)
            return fail_cu(s, r, "cuEventCreate", err, errlen);
    }
    CuResult r = s->api.cu.EventCreate(&s->fork, CUX_EVENT_DISABLE_TIMING);
    if (r != CUX_SUCCESS)
        return fail_cu(s, r, "cuEventCreate", err, errlen);
    return 0;
}

static void cuda_destroy(Backend *be) {
    CudaState *s = be->state;
    if (s->ncomm && !s->aborted) {   // the device done, then the communicator
        wait_device(s);
        if (!s->aborted)
            s->nccl.CommDestroy(s->ncomm);
    }
    if (s->worker_up) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_broadcast(&s->more);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->worker, NULL);
    }
    if (s->ctx)
        s->api.cu.CtxSynchronize();
    for (int i = 0; s->gemm && i < s->ninstr * (1 + LOSS_GEMMS); i++) {
        Gemm *g = i < s->ninstr ? &s->gemm[i] : &s->loss[i - s->ninstr];
        if (g->la)
            s->api.lt.MatrixLayoutDestroy(g->la);
        if (g->lb)
            s->api.lt.MatrixLayoutDestroy(g->lb);
        if (g->lc)
            s->api.lt.MatrixLayoutDestroy(g->lc);
        if (g->desc)
            s->api.lt.MatmulDescDestroy(g->desc);
    }
    for (int e = 0; e < s->nevents; e++)
        if (s->event[e])
            s->api.cu.EventDestroy(s->event[e]);
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int last = 0; last < 2; last++)
            graph_free(s, &s->graph[ph][last]);
    for (int t = 0; t < STREAM_COUNT; t++) {
        if (s->tail[t])
            s->api.cu.EventDestroy(s->tail[t]);
        if (s->join[t])
            s->api.cu.EventDestroy(s->join[t]);
    }
    if (s->fork)
        s->api.cu.EventDestroy(s->fork);
    for (int k = 0; k < s->ntiming; k++)
        if (s->timing[k])
            s->api.cu.EventDestroy(s->timing[k]);
    free(s->timing);
    for (int k = 0; k < STAGE_SLOTS; k++)
        if (s->staged[k])
            s->api.cu.EventDestroy(s->staged[k]);
    if (s->staging)
        s->api.cu.MemFreeHost(s->staging);
    if (s->module)
        s->api.cu.ModuleUnload(s->module);
    if (s->lt)
        s->api.lt.Destroy(s->lt);
    for (int k = 0; k < STREAM_COUNT; k++)
        if (s->stream[k])
            s->api.cu.StreamDestroy(s->stream[k]);
    if (s->ctx)
        s->api.cu.DevicePrimaryCtxRelease(s->dev);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->more);
    pthread_cond_destroy(&s->progress);
    free(s->fn), free(s->gemm), free(s->loss), free(s->event), free(s->on_host), free(s->expected), free(s->done);
    free(s->recorded_in);
    free(s->q);
    free(s->uses);
    free(s);
    free(be);
}

//
// Creation and preflight.
//

// The plan must fit what is free now, before anything of ours is allocated: its device
// arena, and room for the kernels' module and cuBLASLt (the rest of the plan's context
// reserve is already spent: the context exists). The host arena must fit the host's
// available memory.
static int preflight(CudaState *s, const Plan *p, char *err, size_t errlen) {
    // The most dynamic shared memory a launch declares against what a block may have here.
    unsigned smem = 0;
    const char *kernel = "";
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++)
            for (int l = 0; l < p->ins[ph][i].nlaunch; l++)
                if (p->ins[ph][i].launch[l].smem > smem)
                    smem = p->ins[ph][i].launch[l].smem, kernel = p->ins[ph][i].launch[l].name;
    int optin = 0;
    CuResult r = smem > CUX_STATIC_SMEM_MAX ? s->api.cu.DeviceGetAttribute(&optin, CUX_ATTR_SMEM_OPTIN, s->dev)
                                            : CUX_SUCCESS;
    if (r != CUX_SUCCESS)
        return fail_cu(s, r, "cuDeviceGetAttribute", err, errlen);
    if (smem > CUX_STATIC_SMEM_MAX && (unsigned)optin < smem)
        return rt_fail(err, errlen, "kernel %s needs %u bytes of shared memory a block, but %s (%s) "
                       "gives a block at most %d; compile the plan for this GPU's preset",
                       kernel, smem, s->name, s->arch, optin);
    size_t free_b = 0, total_b = 0;
    r = s->api.cu.MemGetInfo(&free_b, &total_b);
    if (r != CUX_SUCCESS)
        return fail_cu(s, r, "cuMemGetInfo", err, errlen);
    const int64_t margin = 64ll << 20;   // the module and cuBLASLt's handle
    int64_t need = p->arena_bytes[ARENA_DEVICE] + margin;
    char a[32], f[32], t[32], b[32];
    if ((int64_t)free_b < need) {
        // The budget that plans for what is free: the arena it allows, plus the reserve the
        // planner takes off for a context (already made here).
        int64_t budget = (int64_t)free_b - margin + p->reserve_bytes;
        char hint[128];
        if (budget > p->reserve_bytes)
            snprintf(hint, sizeof hint, "re-plan for what is free: ftc compile ... --budget %lldM",
                     (long long)(budget >> 20));
        else
            snprintf(hint, sizeof hint, "free memory on it first");
        return rt_fail(err, errlen,
                       "the plan needs %s of device memory (its arena) and 64 MiB more for the "
                       "kernels and cuBLASLt, but %s (%s) has %s free of %s; %s",
                       fmt_bytes(a, sizeof a, p->arena_bytes[ARENA_DEVICE]), s->name, s->arch,
                       fmt_bytes(f, sizeof f, (int64_t)free_b), fmt_bytes(t, sizeof t, (int64_t)total_b),
                       hint);
    }
    int64_t host = p->arena_bytes[ARENA_HOST], avail = rt_host_available();
    if (host > 0 && avail >= 0 && avail < host)
        return rt_fail(err, errlen,
                       "the plan needs %s of pinned host memory (its host arena) but this machine "
                       "has %s available; re-plan with ftc compile ... --host-mem %lldM",
                       fmt_bytes(a, sizeof a, host), fmt_bytes(b, sizeof b, avail),
                       (long long)(avail >> 20));
    return 0;
}

int rt_cuda_probe(char *why, size_t len) {
    CudaApi api;
    if (cuda_api_load(&api, why, len) != 0)
        return api.cu.Init ? -1 : 0;   // no cuBLASLt beside a driver, or no driver at all
    int count = 0;
    CuResult r = api.cu.Init(0);
    if (r == CUX_SUCCESS)
        r = api.cu.DeviceGetCount(&count);
    if (r != CUX_SUCCESS || count == 0) {
        char text[160];
        snprintf(why, len, "%s", r != CUX_SUCCESS ? cuda_result_text(&api, r, text, sizeof text)
                                                  : "the driver sees no device");
        return -1;
    }
    return 1;
}

// (one product and one algorithm: one line of the report)
static bool same_product(const Gemm *a, const Gemm *b) {
    return product_key(a) == product_key(b) && !memcmp(&a->algo, &b->algo, sizeof a->algo);
}

void rt_cuda_gemm_report(Backend *be, FILE *out) {
    if (!is_cuda(be))
        return;
    CudaState *s = be->state;
    int n = s->ninstr * (1 + LOSS_GEMMS);
    for (int i = 0; s->gemm && i < n; i++) {
        const Gemm *g = i < s->ninstr ? &s->gemm[i] : &s->loss[i - s->ninstr];
        bool seen = !g->desc;
        for (int j = 0; j < i && !seen; j++)
            seen = same_product(g, j < s->ninstr ? &s->gemm[j] : &s->loss[j - s->ninstr]);
        if (seen)
            continue;
        int32_t v[4] = {0};
        static const int attr[4] = {LTX_ALGO_ID, LTX_ALGO_TILE, LTX_ALGO_SPLITK, LTX_ALGO_STAGES};
        for (int k = 0; k < 4; k++)
            s->api.lt.MatmulAlgoConfigGetAttribute(&g->algo, attr[k], &v[k], sizeof v[k], NULL);
        char how[160] = "cuBLASLt's first choice, untimed";
        if (g->how == 'T')
            snprintf(how, sizeof how, "candidate %d of %d timed fastest, %.1f us (the first %.1f us)", g->pick + 1,
                     g->ncand, (double)g->us, (double)g->first_us);
        else if (g->how == 'C')
            snprintf(how, sizeof how, "candidate %d of %d, the cache's (%.1f us when timed)", g->pick + 1, g->ncand,
                     (double)g->us);
        fprintf(out, "gemm %lld x %lld x %lld%s%s (batch %lld), %s x %s -> %s: cuBLASLt algorithm %d, tile %d, "
                "split-k %d, stages %d; operands aligned to %u bytes, workspace %llu bytes; %s\n",
                (long long)g->M, (long long)g->N, (long long)g->K, g->ta ? ", A transposed" : "",
                g->tb ? ", B transposed" : "", (long long)g->batch, plan_dtype_name(g->da), plan_dtype_name(g->db),
                plan_dtype_name(g->dc), v[0], v[1], v[2], v[3], g->align, (unsigned long long)g->ws, how);
    }
}

bool rt_cuda_describe(Backend *be, char *buf, size_t len) {
    if (!is_cuda(be))
        return false;
    CudaState *s = be->state;
    snprintf(buf, len, "%s, compute capability %d.%d, driver %d.%d; kernels: %s", s->name, s->cc_major,
             s->cc_minor, s->driver_version / 1000, s->driver_version % 1000 / 10,
             s->module_from[0] ? s->module_from : "not loaded yet");
    return true;
}

// Backend.memory: what the GPU and the process hold.
static bool cuda_memory(Backend *be, int64_t *total, int64_t *free_bytes, char *name, size_t namelen) {
    if (!is_cuda(be))
        return false;
    CudaState *s = be->state;
    size_t f = 0, t = 0;
    drain(s);
    if (s->api.cu.MemGetInfo(&f, &t) != CUX_SUCCESS)
        return false;
    *total = (int64_t)t, *free_bytes = (int64_t)f;
    snprintf(name, namelen, "%s", s->name);
    return true;
}

// The backend's link_rate: x's pinned host arena to its device arena.
static double cuda_link_rate(Backend *be, const Exec *x) {
    if (x->layout != LAYOUT_PLANNED || !x->arena[ARENA_HOST] || !x->arena[ARENA_DEVICE])
        return 0;
    CudaState *s = be->state;
    int64_t n = x->plan->arena_bytes[ARENA_HOST];
    if (n > x->plan->arena_bytes[ARENA_DEVICE])
        n = x->plan->arena_bytes[ARENA_DEVICE];
    if (n > 64ll << 20)
        n = 64ll << 20;
    if (n < 1 << 20)   // too little to time
        return 0;
    drain(s);
    CuStream st = s->stream[STREAM_H2D];
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!call_ok(s, s->api.cu.MemcpyAsync(dptr(x->arena[ARENA_DEVICE]), dptr(x->arena[ARENA_HOST]),
                                              (size_t)n, st), "cuMemcpyAsync") ||
            !call_ok(s, s->api.cu.StreamSynchronize(st), "cuStreamSynchronize"))
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (sec > 0 && (double)n / sec > best)
            best = (double)n / sec;
    }
    return best;
}

// How this process's host threads wait for the GPU: asleep (blocking sync) when the plan
// runs work on the host (AdamW over offloaded state), whose threads want every core a
// spinning wait would take; the driver's default (spinning while cores are spare) otherwise.
// A context already active in the process keeps its flags.
static CuResult set_scheduling(CudaState *s, const Plan *p) {
    bool host_work = false;
    for (int ph = 0; ph < PHASE_COUNT && !host_work; ph++)
        for (int i = 0; i < p->nins[ph] && !host_work; i++)
            host_work = p->ins[ph][i].stream == STREAM_HOST;
    CuResult r = s->api.cu.DevicePrimaryCtxSetFlags(s->dev, host_work ? CUX_CTX_SCHED_BLOCKING_SYNC : 0);
    return r == 708 ? CUX_SUCCESS : r;   // CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
}

int rt_cuda_ordinal(int local_rank, int count, char *err, size_t errlen) {
    if (count == 1)
        return 0;   // a launcher bound this rank to its GPU (CUDA_VISIBLE_DEVICES, --gpu-bind)
    if (local_rank >= 0 && local_rank < count)
        return local_rank;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    rt_fail(err, errlen, "local rank %d, and this process sees %d GPUs (CUDA_VISIBLE_DEVICES %s%s%s): "
            "give each rank of a node one GPU, or let every rank see all of them", local_rank, count,
            visible ? "= \"" : "unset", visible ? visible : "", visible ? "\"" : "");
    return -1;
}

// The GPU of this rank (local_rank among those the process sees) opened, its context current;
// its name, architecture and driver noted, and an error where its kernels cannot run.
static int open_device(CudaState *s, const Plan *p, int local_rank, char *err, size_t errlen) {
    int count = 0, major = 0, minor = 0, device = -1;
    CuResult r = s->api.cu.Init(0);
    if (r == CUX_SUCCESS)
        r = s->api.cu.DeviceGetCount(&count);
    if (r != CUX_SUCCESS || count == 0) {
        char text[160];
        return rt_fail(err, errlen, "no GPU (%s)",
                       r != CUX_SUCCESS ? cuda_result_text(&s->api, r, text, sizeof text) : "the driver sees none");
    }
    if ((device = rt_cuda_ordinal(local_rank, count, err, errlen)) < 0)
        return -1;
    if ((r = s->api.cu.DeviceGet(&s->dev, device)) != CUX_SUCCESS ||
        (r = s->api.cu.DeviceGetName(s->name, sizeof s->name, s->dev)) != CUX_SUCCESS ||
        (r = s->api.cu.DeviceGetAttribute(&major, CUX_ATTR_CC_MAJOR, s->dev)) != CUX_SUCCESS ||
        (r = s->api.cu.DeviceGetAttribute(&minor, CUX_ATTR_CC_MINOR, s->dev)) != CUX_SUCCESS ||
        (r = set_scheduling(s, p)) != CUX_SUCCESS ||
        (r = s->api.cu.DevicePrimaryCtxRetain(&s->ctx, s->dev)) != CUX_SUCCESS ||
        (r = s->api.cu.CtxSetCurrent(s->ctx)) != CUX_SUCCESS) {
        fail_cu(s, r, "opening the GPU", err, errlen);
        return -1;
    }
    snprintf(s->arch, sizeof s->arch, "sm_%d%d", major, minor);
    s->cc_major = major, s->cc_minor = minor;
    if ((r = s->api.cu.DriverGetVersion(&s->driver_version)) != CUX_SUCCESS) {
        fail_cu(s, r, "cuDriverGetVersion", err, errlen);
        return -1;
    }
    rt_nvrtc_prefer(s->driver_version / 1000);   // (before NVRTC's first use: load_module)
    if (major < 8)   // bf16 tensor cores (mma.sync m16n8k16), cp.async: Ampere and later
        return rt_fail(err, errlen, "%s is compute capability %d.%d; ftc's kernels need 8.0 or later (A100, "
                       "A10, L4, RTX 30 and 40 series, H100, H200 and newer)", s->name, major, minor);
    return 0;
}

// A stream for each of the plan's device streams (the host's runs on a thread).
static int make_streams(CudaState *s, char *err, size_t errlen) {
    for (int k = 0; k < STREAM_COUNT; k++) {
        if (k == STREAM_HOST)
            continue;
        // The collectives' stream first in line: a step waits on its reductions, which share
        // the SMs with the backward's kernels they overlap.
        int least = 0, greatest = 0;
        if (k == STREAM_COMM && s->api.cu.CtxGetStreamPriorityRange(&least, &greatest) != CUX_SUCCESS)
            greatest = 0;
        CuResult r = s->api.cu.StreamCreateWithPriority(&s->stream[k], CUX_STREAM_NON_BLOCKING,
                                                        k == STREAM_COMM ? greatest : 0);
        if (r != CUX_SUCCESS) {
            fail_cu(s, r, stream_tag[k], err, errlen);
            return -1;
        }
    }
    return 0;
}

Backend *rt_cuda_backend(const char *plan_dir, const Plan *p, const CudaApi *api, int local_rank,
                         char *err, size_t errlen) {
    CudaState *s = xcalloc(1, sizeof *s);
    Backend *be = xcalloc(1, sizeof *be);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->more, NULL);
    pthread_cond_init(&s->progress, NULL);
    *be = (Backend){.name = "cuda", .prepare = cuda_prepare, .alloc = cuda_alloc, .free = cuda_free,
                    .set = cuda_set, .get = cuda_get, .fill = cuda_fill, .copy = cuda_copy,
                    .launch = cuda_launch, .collective = cuda_collective, .host_queue = true,
                    .event_record = cuda_event_record, .event_wait = cuda_event_wait,
                    .link_rate = cuda_link_rate, .sync = cuda_sync, .destroy = cuda_destroy,
                    .time_mark = cuda_time_mark, .time_between = cuda_time_between,
                    .run_phase = cuda_run_phase, .memory = cuda_memory, .state = s};
    s->plan = p;
    s->nccl_bytes = -1;
    snprintf(s->dir, sizeof s->dir, "%s", plan_dir);
    if (api)
        s->api = *api;
    else if (cuda_api_load(&s->api, err, errlen) != 0)
        goto fail;
    if (open_device(s, p, local_rank, err, errlen) != 0 || preflight(s, p, err, errlen) != 0 ||
        make_streams(s, err, errlen) != 0)
        goto fail;
    LtStatus st = s->api.lt.Create(&s->lt);
    if (st != LTX_SUCCESS) {
        rt_fail(err, errlen, "cublasLtCreate failed (status %d)", st);
        goto fail;
    }
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        rt_fail(err, errlen, "cannot start the host stream's thread");
        goto fail;
    }
    s->worker_up = true;
    return be;
fail:
    cuda_destroy(be);
    return NULL;
}
