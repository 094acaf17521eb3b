// fake_nccl.c — the simulated NCCL of fake_nccl.h.
#include "fake_nccl.h"
#include "fake_cuda.h"
#include "../runtime/cpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct FakeComm {
    int rank, ranks;
    int async;                  // the asynchronous error (ncclCommGetAsyncError)
    bool aborted;
} FakeComm;

typedef struct Op {
    FakeComm *comm;
    OpKind kind;
    const unsigned char *src;
    unsigned char *dst;
    size_t count;               // elements: of the sum, a rank's slice, a rank's part
    int dtype;
    int serial;                 // this rank's count of collectives
} Op;

static struct {
    Comm *c;
    FakeNcclFault fault;
    int fault_at, serial;
    FakeNcclStats st;
    int64_t memory;         // device memory a communicator takes (fake_nccl_memory)
} fn;

static int esize(int t) { return t == NCCLX_FLOAT32 ? 4 : t == NCCLX_UINT8 ? 1 : 2; }

static float get(int t, const unsigned char *p) {
    if (t == NCCLX_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return t == NCCLX_BFLOAT16 ? cpu_bf16_to_f32(h) : cpu_f16_to_f32(h);
}

static void put(int t, unsigned char *p, float v) {
    if (t == NCCLX_FLOAT32) {
        memcpy(p, &v, 4);
        return;
    }
    uint16_t h = t == NCCLX_BFLOAT16 ? cpu_f32_to_bf16(v) : cpu_f32_to_f16(v);
    memcpy(p, &h, 2);
}

float fake_nccl_ring_sum(int dtype, const float *v, int R, int j) {
    unsigned char cell[4];
    for (int h = 1; h <= R; h++) {
        float x = v[(j + h) % R];
        put(dtype, cell, h == 1 ? x : get(dtype, cell) + x);
    }
    return get(dtype, cell);
}

// A collective when its stream reaches it: 0 done, 1 not yet (a hang). Every rank's input
// gathered, then this rank's output from them.
static int run(void *arg) {
    Op *o = arg;
    FakeComm *c = o->comm;
    if (c->aborted || c->async != NCCLX_SUCCESS)
        return 0;   // an aborted or failed communicator's kernels return, exchanging nothing
    if (fn.fault == FAKE_NCCL_HANG && o->serial >= fn.fault_at)
        return 1;
    if (fn.fault == FAKE_NCCL_ERROR && o->serial == fn.fault_at) {
        c->async = NCCLX_REMOTE_ERROR;
        return 0;
    }
    int R = c->ranks, es = esize(o->dtype);
    size_t in_elems = o->kind == OP_ALL_GATHER ? o->count : o->kind == OP_REDUCE_SCATTER ? o->count * (size_t)R
                                                                                    : o->count;
    size_t bytes = in_elems * (size_t)es;
    unsigned char *all = malloc(bytes * (size_t)R + 1);
    char err[512];
    if (!all || rt_comm_allgather(fn.c, o->src, all, (int64_t)bytes, err, sizeof err) != 0) {
        c->async = NCCLX_REMOTE_ERROR;   // the exchange failed: a peer is gone
        free(all);
        return 0;
    }
    if (o->kind == OP_ALL_GATHER) {
        memcpy(o->dst, all, bytes * (size_t)R);
    } else {
        // As a ring does: chunk j of the elements (a rank's slice, or an all-reduce's j-th
        // of R parts) starts at rank j + 1 and passes along the ring to rank j, each hop
        // adding its own value to what arrived and storing the sum in the dtype (bf16 rounded
        // at every hop, not once).
        size_t lo = o->kind == OP_REDUCE_SCATTER ? (size_t)c->rank * o->count : 0;
        size_t part = (o->count + (size_t)R - 1) / (size_t)R;
        for (size_t e = 0; e < o->count; e++) {
            int j = o->kind == OP_REDUCE_SCATTER ? c->rank : (int)(e / (part ? part : 1));
            float v[64];
            for (int q = 0; q < R && q < 64; q++)
                v[q] = get(o->dtype, all + (size_t)q * bytes + (lo + e) * (size_t)es);
            put(o->dtype, o->dst + e * (size_t)es, fake_nccl_ring_sum(o->dtype, v, R < 64 ? R : 64, j));
        }
    }
    free(all);
    fn.st.exchanged++;
    return 0;
}

static int issue(OpKind kind, const void *src, void *dst, size_t count, int dtype, NcclComm comm,
                 CuStream s) {
    FakeComm *c = (FakeComm *)comm;
    Op *o = calloc(1, sizeof *o);
    *o = (Op){c, kind, src, dst, count, dtype, ++fn.serial};
    int es = esize(dtype);
    size_t in = kind == OP_REDUCE_SCATTER ? count * (size_t)c->ranks : count;
    size_t out = kind == OP_ALL_GATHER ? count * (size_t)c->ranks : count;
    fn.st.calls++;
    const char *what = kind == OP_ALL_REDUCE ? "ncclAllReduce" : kind == OP_REDUCE_SCATTER ? "ncclReduceScatter"
                                                                                     : "ncclAllGather";
    return fake_cuda_host_op(s, run, o, what, (uintptr_t)src, (uintptr_t)src + in * (size_t)es,
                             (uintptr_t)dst, (uintptr_t)dst + out * (size_t)es) == CUX_SUCCESS ? NCCLX_SUCCESS : 1;
}

static int n_version(int *v) { *v = 21803; return NCCLX_SUCCESS; }
static int n_unique(NcclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fake-nccl");
    return NCCLX_SUCCESS;
}
static int n_init(NcclComm *comm, int nranks, NcclUniqueId id, int rank) {
    if (strcmp(id.internal, "fake-nccl") != 0 || !fn.c || nranks != fn.c->ranks || rank != fn.c->rank)
        return 4;   // ncclInvalidArgument
    FakeComm *c = calloc(1, sizeof *c);
    c->rank = rank, c->ranks = nranks;
    *comm = (NcclComm)c;
    fake_cuda_take(fn.memory);   // its buffers, channels and (NVLS) multicast memory
    return NCCLX_SUCCESS;
}
static int n_destroy(NcclComm comm) { free(comm); return NCCLX_SUCCESS; }
static int n_abort(NcclComm comm) {
    ((FakeComm *)comm)->aborted = true;
    fn.st.aborted++;
    return NCCLX_SUCCESS;
}
static int n_async(NcclComm comm, int *r) { *r = ((FakeComm *)comm)->async; return NCCLX_SUCCESS; }
static const char *n_error(int r) {
    return r == NCCLX_SUCCESS ? "no error" : r == NCCLX_REMOTE_ERROR ? "remote process exited or there was a network error"
                                                                      : "simulated NCCL error";
}
static int n_allreduce(const void *s, void *d, size_t n, int t, int op, NcclComm c, CuStream st) {
    return op == NCCLX_SUM ? issue(OP_ALL_REDUCE, s, d, n, t, c, st) : 4;
}
static int n_reduce_scatter(const void *s, void *d, size_t n, int t, int op, NcclComm c, CuStream st) {
    return op == NCCLX_SUM ? issue(OP_REDUCE_SCATTER, s, d, n, t, c, st) : 4;
}
static int n_allgather(const void *s, void *d, size_t n, int t, NcclComm c, CuStream st) {
    return issue(OP_ALL_GATHER, s, d, n, t, c, st);
}
static int n_group_start(void) { fn.st.groups++; return NCCLX_SUCCESS; }
static int n_group_end(void) { return NCCLX_SUCCESS; }

void fake_nccl_open(NcclApi *api, Comm *c) {
    memset(&fn, 0, sizeof fn);
    fn.c = c;
    *api = (NcclApi){n_version, n_unique, n_init, n_destroy, n_abort, n_async, n_error, n_allreduce,
                     n_reduce_scatter, n_allgather, n_group_start, n_group_end};
}

void fake_nccl_memory(int64_t bytes) { fn.memory = bytes; }

void fake_nccl_fault(FakeNcclFault fault, int n) {
    fn.fault = fault;
    fn.fault_at = n;
}

const FakeNcclStats *fake_nccl_stats(void) { return &fn.st; }
