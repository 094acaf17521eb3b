// ftc_emu.h: the CUDA execution model on the CPU, for `ftc run --device emu`. With it a
// generated kernels.cu (prelude.cuh, then kernels in the common subset of CUDA C++ and C99)
// compiles with the host C compiler and runs on the CPU; the emu backend builds it as
//     cc -DFTC_EMU -I<this folder> -x c -O1 -fPIC -shared kernels.cu -o kernels.so
// and calls ftc_emu_launch (end of file) through dlsym. Results are the GPU's bit for bit where
// the arithmetic is the same (no fused multiply-adds, the same order of operations); it is a
// correctness tool, not a fast one. README.md in this folder has the rules for kernel authors.
//
// How a launch runs. Blocks run one after another on the calling OS thread, x fastest, then y,
// then z. Within a block every CUDA thread is a fiber with a stack of its own (64 KiB, or
// $FTC_EMU_STACK_KIB, with a guard page below it: an overflow faults instead of corrupting a
// neighbour), and fibers switch only at __syncthreads and warp operations, so the code between
// two such points runs as one uninterrupted piece of C. The fibers are kept for the next block
// and the next launch (FtcEmuPool). A kernel registered as not synchronising
// (FTC_EMU_ENTRY(k, 0)) takes the fast path: its threads are plain calls, one after another.
//
// Warps are 32 consecutive threads in linear order tid = x + y*bdx + z*bdx*bdy; the lanes past
// the end of the block in a partial last warp do not exist. A warp operation by one lane waits
// until every existing lane of its mask has arrived at a warp operation of the same kind with
// the same mask, then completes for all of them at once; a shuffle from a lane that is out of
// range, absent or outside the mask gives the caller's own value. Misuse that is undefined
// behaviour in CUDA (a barrier some threads never reach, a mask naming an exited lane or
// excluding the caller, lanes disagreeing on the mask) fails the launch with a message instead
// of hanging.
//
// Everything here is static or a macro, bar the exports FTC_EMU_TABLE defines: each kernels.so
// compiles its own private copy.
#ifndef FTC_EMU_H
#define FTC_EMU_H

// _FORTIFY_SOURCE would turn _longjmp into __longjmp_chk, which aborts on a jump to another
// stack: exactly what a fiber switch is.
#undef _FORTIFY_SOURCE
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

// a*b+c stays two roundings, as in the cpu backend, whatever the compiler's default.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define FTC_EMU_FN static __attribute__((unused))
#define FTC_EMU_EXPORT __attribute__((visibility("default")))

// ---------------------------------------------------------------------------------------------
// Qualifiers and types. Defined after the system headers, which some of these names would
// rewrite (kernels.cu includes nothing after the prelude).

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__ static const
// A block's shared memory: one copy per OS thread, which runs one block at a time; not cleared
// between blocks (neither is CUDA's). Statically sized arrays only: no `extern __shared__`
// (prelude.cuh's FTC_DYN_SMEM, CUDA's dynamic shared memory, is such an array here).
#define __shared__ static _Thread_local
// Kernels are private to kernels.so; FTC_EMU_TABLE makes them launchable by name.
#define FTC_KERNEL static

typedef struct uint3 {
    unsigned int x, y, z;
} uint3;
typedef struct dim3 {
    unsigned int x, y, z;
} dim3;

typedef struct __attribute__((aligned(8))) float2 {
    float x, y;
} float2;
typedef struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
} float4;
typedef struct __attribute__((aligned(8))) int2 {
    int x, y;
} int2;
typedef struct __attribute__((aligned(16))) int4 {
    int x, y, z, w;
} int4;
typedef struct __attribute__((aligned(8))) uint2 {
    unsigned int x, y;
} uint2;
typedef struct __attribute__((aligned(16))) uint4 {
    unsigned int x, y, z, w;
} uint4;

static inline float2 make_float2(float x, float y) { return (float2){x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) {
    return (float4){x, y, z, w};
}
static inline int2 make_int2(int x, int y) { return (int2){x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return (int4){x, y, z, w}; }
static inline uint2 make_uint2(unsigned int x, unsigned int y) { return (uint2){x, y}; }
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
    return (uint4){x, y, z, w};
}

#define warpSize 32

// ---------------------------------------------------------------------------------------------
// The state of a launch, and of each emulated thread.

#define FTC_EMU_MAX_THREADS 1024
#define FTC_EMU_FULL_MASK 0xffffffffu

enum {
    FTC_EMU_READY,      // runnable: not started in this block, or released from a wait
    FTC_EMU_AT_BARRIER, // waits at __syncthreads
    FTC_EMU_AT_WARP,    // waits at a warp operation (kind, mask, op say which)
    FTC_EMU_EXITED,     // returned from the kernel in this block
};

enum {
    FTC_EMU_OP_SHFL = 1, // every shuffle: each lane names its own source lane
    FTC_EMU_OP_VOTE,     // ballot, any, all: each lane derives its answer from the ballot
    FTC_EMU_OP_SYNCWARP,
    FTC_EMU_OP_MMA,
    FTC_EMU_OP_LDMATRIX, // each lane brings a row's address, takes its words of the matrices
};

// cp.async copies a thread has issued and not yet waited for: each lands in shared memory at
// the cp.async.wait_group that retires its group, not before (its source is read at the issue),
// so a kernel that reads a tile before waiting for it reads what was there.
#define FTC_EMU_ASYNC_MAX 128
typedef struct FtcEmuCopy {
    void *dst;
    unsigned char bytes[16];
    int group; // the commit group: the count of commits before it was issued
} FtcEmuCopy;

typedef struct FtcEmuThread {
    uint3 idx;           // threadIdx
    int tid, lane, warp; // linear id in the block, tid % 32, tid / 32
    int state;           // FTC_EMU_READY ... FTC_EMU_EXITED
    int booted;          // its fiber has started (fibers run every block's thread tid)
    // The warp operation it is at: what it brought, and (once complete) what it takes away.
    int kind;
    unsigned int mask;
    const char *op;          // the CUDA name, for messages
    int src;                 // shuffle: the lane it reads, or -1 for its own value
    unsigned long long val;  // shuffle: its value's bits
    int pred;                // vote: its predicate
    unsigned long long out;  // shuffle: the value read; vote: ballot | participants << 32
    unsigned int mma_a[4], mma_b[2];
    float mma_c[4], mma_d[4];
    const unsigned char *ldm_row; // ldmatrix: the row address it brings
    int ldm_n, ldm_trans;         //   matrices (1, 2, 4), transposed
    unsigned int ldm_out[4];      //   the words it takes
    FtcEmuCopy async[FTC_EMU_ASYNC_MAX]; // cp.async in flight (nasync of them), in issue order
    int nasync, commits;
    char *stack; // lowest usable byte of its fiber stack (the guard page is just below)
    jmp_buf jb;  // where its fiber resumes
} FtcEmuThread;

typedef struct FtcEmuWarp {
    unsigned int exist;   // lanes that exist in the block
    unsigned int arrived; // lanes waiting at a warp operation that has not completed
    unsigned int exited;  // lanes that returned from the kernel in this block
} FtcEmuWarp;

typedef struct FtcArgs FtcArgs;           // prelude.cuh defines them
typedef struct FtcGroupArgs FtcGroupArgs;

typedef struct FtcEmuLaunch {
    const char *kernel;
    void (*fn)(FtcArgs);
    void (*call)(void (*)(FtcArgs), const void *); // calls fn with *args (FTC_EMU_TABLE's)
    const void *args;                               // the FtcArgs or FtcGroupArgs
    dim3 grid, block;
    uint3 bidx;   // blockIdx of the running block
    int nthreads; // per block
    int fibers;   // 0: the fast path
    FtcEmuThread *threads; // the pool's fibers, or `one` on the fast path
    FtcEmuThread one;
    FtcEmuWarp warps[FTC_EMU_MAX_THREADS / 32];
    int bar_arrived, bar_pred, bar_result; // __syncthreads: arrivals, their predicates, result
    int nexited;
    size_t stack_bytes;
    ucontext_t boot;
    jmp_buf sched; // the scheduler (or the fast path's guard), where fibers and failures return
    int failed;
    char *err;
    size_t errlen;
} FtcEmuLaunch;

static _Thread_local FtcEmuLaunch *ftc_emu_L; // the launch running on this OS thread
static _Thread_local FtcEmuThread *ftc_emu_T; // the emulated thread running now

#define threadIdx (((const FtcEmuThread *)ftc_emu_T)->idx)
#define blockIdx (((const FtcEmuLaunch *)ftc_emu_L)->bidx)
#define blockDim (((const FtcEmuLaunch *)ftc_emu_L)->block)
#define gridDim (((const FtcEmuLaunch *)ftc_emu_L)->grid)

// Saves the running context in `from` and resumes `to`; returns when something resumes `from`.
// Kept out of line so no caller's locals live across the setjmp.
static __attribute__((noinline, unused)) void ftc_emu_switch_(jmp_buf from, jmp_buf to) {
    if (!_setjmp(from))
        _longjmp(to, 1);
}

// Saves the running context in `from` and starts a fiber running entry() on the stack of
// `bytes` at `stack`, with `uc` as scratch. The one ucontext switch per fiber and launch; the
// rest are _setjmp/_longjmp, which skip the signal-mask system call. Out of line because
// getcontext, like setjmp, returns twice.
static __attribute__((noinline, unused)) void ftc_emu_boot_switch_(jmp_buf from, ucontext_t *uc,
                                                                   char *stack, size_t bytes,
                                                                   void (*entry)(void)) {
    ucontext_t here;
    getcontext(uc);
    uc->uc_stack.ss_sp = stack;
    uc->uc_stack.ss_size = bytes;
    uc->uc_link = NULL;
    makecontext(uc, entry, 0);
    if (!_setjmp(from))
        swapcontext(&here, uc);
}

// Writes "kernel 'K' <where>: <message>" into the launch's error buffer.
static __attribute__((unused, format(printf, 3, 4))) void
ftc_emu_error_(FtcEmuLaunch *L, const char *where, const char *fmt, ...) {
    if (!L->err || !L->errlen)
        return;
    int n = snprintf(L->err, L->errlen, "kernel '%s'%s: ", L->kernel, where);
    if (n < 0 || (size_t)n >= L->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err + n, L->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

// Fails the launch from inside a kernel: records the message with the running thread and block,
// and leaves the kernel for good (its fiber, or the fast path's loop, is abandoned).
static __attribute__((unused, noreturn, format(printf, 1, 2))) void
ftc_emu_fail_(const char *fmt, ...) {
    FtcEmuLaunch *L = ftc_emu_L;
    const FtcEmuThread *t = ftc_emu_T;
    if (L->err && L->errlen) {
        int n = snprintf(L->err, L->errlen, "kernel '%s' thread (%u,%u,%u) block (%u,%u,%u): ",
                         L->kernel, t->idx.x, t->idx.y, t->idx.z, L->bidx.x, L->bidx.y,
                         L->bidx.z);
        if (n >= 0 && (size_t)n < L->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(L->err + n, L->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    L->failed = 1;
    _longjmp(L->sched, 1);
}

// Suspends the running fiber until the scheduler resumes it.
static inline void ftc_emu_yield_(void) {
    ftc_emu_switch_(ftc_emu_T->jb, ftc_emu_L->sched);
}

// ---------------------------------------------------------------------------------------------
// __syncthreads

// Waits until every thread of the block has called it; returns how many passed a non-zero pred.
FTC_EMU_FN int ftc_emu_barrier_(int pred, const char *op) {
    FtcEmuLaunch *L = ftc_emu_L;
    FtcEmuThread *t = ftc_emu_T;
    if (!L->fibers)
        ftc_emu_fail_("%s in a kernel registered as not synchronising (FTC_EMU_ENTRY(%s, 0))",
                      op, L->kernel);
    __asm__ __volatile__("" ::: "memory"); // shared memory changes under the other fibers
    L->bar_pred += pred != 0;
    if (++L->bar_arrived == L->nthreads) {
        L->bar_result = L->bar_pred;
        L->bar_arrived = L->bar_pred = 0;
        for (int i = 0; i < L->nthreads; i++)
            if (L->threads[i].state == FTC_EMU_AT_BARRIER)
                L->threads[i].state = FTC_EMU_READY;
        return L->bar_result;
    }
    t->state = FTC_EMU_AT_BARRIER;
    t->op = op;
    ftc_emu_yield_();
    // Nobody can complete the next barrier before this thread reaches it, so bar_result holds.
    __asm__ __volatile__("" ::: "memory");
    return L->bar_result;
}

#define __syncthreads() ((void)ftc_emu_barrier_(1, "__syncthreads"))
#define __syncthreads_count(pred) ftc_emu_barrier_((pred) != 0, "__syncthreads_count")
#define __syncthreads_and(pred)                                                                 \
    (ftc_emu_barrier_((pred) != 0, "__syncthreads_and") == ftc_emu_L->nthreads)
#define __syncthreads_or(pred) (ftc_emu_barrier_((pred) != 0, "__syncthreads_or") != 0)

// ---------------------------------------------------------------------------------------------
// Warp operations

static inline int ftc_emu_bit_(unsigned int m) { return __builtin_ctz(m); }

// Computes D = A·B + C for the warp whose lanes are `lanes` (all 32 present), with the fragment
// layouts of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: with g = lane / 4 and
// q = lane % 4, a lane holds A[g][2q..2q+1] (a[0]), A[g+8][2q..] (a[1]), A[g][2q+8..] (a[2]),
// A[g+8][2q+8..] (a[3]), the lower element in the low half of each register; B[2q..2q+1][g]
// (b[0]) and B[2q+8..2q+9][g] (b[1]); C and D at [g][2q], [g][2q+1], [g+8][2q], [g+8][2q+1].
// Arithmetic: fp32, k ascending from C, each bf16 product exact (bar underflow), each sum
// rounded to nearest even. Tensor cores leave the order unspecified: compare with a tolerance.
FTC_EMU_FN void ftc_emu_mma_compute_(FtcEmuThread *lanes) {
    float A[16][16], B[16][8], D[16][8];
    for (int l = 0; l < 32; l++) {
        const FtcEmuThread *t = &lanes[l];
        int g = l >> 2, q = (l & 3) * 2;
        for (int r = 0; r < 4; r++) {
            int row = g + (r & 1) * 8, col = q + (r >> 1) * 8;
            unsigned int lo = t->mma_a[r] << 16, hi = t->mma_a[r] & 0xffff0000u;
            memcpy(&A[row][col], &lo, 4);
            memcpy(&A[row][col + 1], &hi, 4);
        }
        for (int r = 0; r < 2; r++) {
            unsigned int lo = t->mma_b[r] << 16, hi = t->mma_b[r] & 0xffff0000u;
            memcpy(&B[q + r * 8][g], &lo, 4);
            memcpy(&B[q + r * 8 + 1][g], &hi, 4);
        }
        D[g][q] = t->mma_c[0];
        D[g][q + 1] = t->mma_c[1];
        D[g + 8][q] = t->mma_c[2];
        D[g + 8][q + 1] = t->mma_c[3];
    }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float acc = D[m][n];
            for (int k = 0; k < 16; k++) {
                float p = A[m][k] * B[k][n];
                acc = acc + p;
            }
            D[m][n] = acc;
        }
    for (int l = 0; l < 32; l++) {
        FtcEmuThread *t = &lanes[l];
        int g = l >> 2, q = (l & 3) * 2;
        t->mma_d[0] = D[g][q];
        t->mma_d[1] = D[g][q + 1];
        t->mma_d[2] = D[g + 8][q];
        t->mma_d[3] = D[g + 8][q + 1];
    }
}

// ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16 for the warp whose lanes are `lanes`: lane
// 8j + r brings the address of row r of 8x8 matrix j (eight 16-bit elements, 16-byte aligned);
// lane 4r + w takes, of each matrix j, word w of row r (elements 2w and 2w + 1, the first in the
// low half), or with .trans elements (2w, r) and (2w + 1, r): the matrix transposed.
FTC_EMU_FN void ftc_emu_ldmatrix_compute_(FtcEmuThread *lanes) {
    for (int l = 0; l < 32; l++) {
        FtcEmuThread *t = &lanes[l];
        int r = l >> 2, w = l & 3;
        for (int j = 0; j < t->ldm_n; j++) {
            unsigned short lo, hi;
            if (t->ldm_trans) {
                memcpy(&lo, lanes[8 * j + 2 * w].ldm_row + 2 * r, 2);
                memcpy(&hi, lanes[8 * j + 2 * w + 1].ldm_row + 2 * r, 2);
            } else {
                memcpy(&lo, lanes[8 * j + r].ldm_row + 4 * w, 2);
                memcpy(&hi, lanes[8 * j + r].ldm_row + 4 * w + 2, 2);
            }
            t->ldm_out[j] = (unsigned int)lo | (unsigned int)hi << 16;
        }
    }
}

// Completes the warp operation `kind` for the lanes `part` of warp `w`, all of which have
// arrived: computes every lane's result.
FTC_EMU_FN void ftc_emu_warp_complete_(FtcEmuLaunch *L, int w, unsigned int part, int kind) {
    FtcEmuThread *lanes = &L->threads[w * 32];
    if (kind == FTC_EMU_OP_SHFL) {
        // A source lane that is out of range, absent or not taking part gives the caller's own
        // value back (CUDA does this for out-of-range lanes; the rest is undefined there).
        for (unsigned int m = part; m; m &= m - 1) {
            FtcEmuThread *t = &lanes[ftc_emu_bit_(m)];
            int s = t->src;
            t->out = s >= 0 && s < 32 && (part >> s & 1u) ? lanes[s].val : t->val;
        }
    } else if (kind == FTC_EMU_OP_VOTE) {
        unsigned int ballot = 0;
        for (unsigned int m = part; m; m &= m - 1)
            if (lanes[ftc_emu_bit_(m)].pred)
                ballot |= 1u << ftc_emu_bit_(m);
        for (unsigned int m = part; m; m &= m - 1)
            lanes[ftc_emu_bit_(m)].out = ballot | (unsigned long long)part << 32;
    } else if (kind == FTC_EMU_OP_MMA) {
        ftc_emu_mma_compute_(lanes);
    } else if (kind == FTC_EMU_OP_LDMATRIX) {
        ftc_emu_ldmatrix_compute_(lanes);
    }
}

// Arrives at a warp operation of `kind` with `mask` (the running thread's slots already hold
// what it brings); returns once the operation has completed, its result in the thread's slots.
FTC_EMU_FN void ftc_emu_warp_op_(int kind, unsigned int mask, const char *op) {
    FtcEmuLaunch *L = ftc_emu_L;
    FtcEmuThread *t = ftc_emu_T;
    if (!L->fibers)
        ftc_emu_fail_("%s in a kernel registered as not synchronising (FTC_EMU_ENTRY(%s, 0))",
                      op, L->kernel);
    __asm__ __volatile__("" ::: "memory");
    FtcEmuWarp *w = &L->warps[t->warp];
    FtcEmuThread *lanes = &L->threads[t->warp * 32];
    unsigned int me = 1u << t->lane, part = mask & w->exist;
    if (!(mask & me))
        ftc_emu_fail_("%s with mask 0x%08x, which excludes the calling lane %d", op, mask,
                      t->lane);
    if ((kind == FTC_EMU_OP_MMA || kind == FTC_EMU_OP_LDMATRIX) && w->exist != FTC_EMU_FULL_MASK)
        ftc_emu_fail_("%s needs all 32 lanes, but warp %d has only %d threads", op, t->warp,
                      __builtin_popcount(w->exist));
    if (part & w->exited)
        ftc_emu_fail_("%s with mask 0x%08x names lane %d, which has exited", op, mask,
                      ftc_emu_bit_(part & w->exited));
    for (unsigned int m = w->arrived; m; m &= m - 1) {
        const FtcEmuThread *o = &lanes[ftc_emu_bit_(m)];
        if (((part >> o->lane & 1u) || (o->mask & me)) && (o->kind != kind || o->mask != mask))
            ftc_emu_fail_("%s with mask 0x%08x while lane %d waits at %s with mask 0x%08x "
                          "(the lanes of a mask must meet at the same operation with the same "
                          "mask)",
                          op, mask, o->lane, o->op, o->mask);
    }
    t->kind = kind;
    t->mask = mask;
    t->op = op;
    w->arrived |= me;
    if ((w->arrived & part) == part) {
        ftc_emu_warp_complete_(L, t->warp, part, kind);
        w->arrived &= ~part;
        for (unsigned int m = part & ~me; m; m &= m - 1)
            lanes[ftc_emu_bit_(m)].state = FTC_EMU_READY;
        return;
    }
    t->state = FTC_EMU_AT_WARP;
    ftc_emu_yield_();
    __asm__ __volatile__("" ::: "memory");
}

enum { FTC_EMU_SHFL_IDX, FTC_EMU_SHFL_UP, FTC_EMU_SHFL_DOWN, FTC_EMU_SHFL_XOR };

// Exchanges the 64-bit pattern `bits` across the lanes of `mask`; the source lane is computed
// from `arg` (srcLane, delta or laneMask) as CUDA does for segments of `width` lanes.
FTC_EMU_FN unsigned long long ftc_emu_shfl_(unsigned int mask, unsigned long long bits, int mode,
                                            int arg, int width, const char *op) {
    FtcEmuThread *t = ftc_emu_T;
    if (width < 1 || width > 32 || (width & (width - 1)))
        ftc_emu_fail_("%s with width %d (a power of two up to 32)", op, width);
    int lane = t->lane, first = lane & ~(width - 1), src;
    unsigned int delta = (unsigned int)arg;
    switch (mode) {
    case FTC_EMU_SHFL_IDX: src = first + (arg & (width - 1)); break;
    case FTC_EMU_SHFL_UP: src = (unsigned int)(lane - first) < delta ? -1 : lane - arg; break;
    case FTC_EMU_SHFL_DOWN:
        src = delta >= (unsigned int)(first + width - lane) ? -1 : lane + arg;
        break;
    default: // a later segment gives the caller's own value; an earlier one is readable
        src = (unsigned int)(lane ^ arg) >= (unsigned int)(first + width) ? -1 : lane ^ arg;
        break;
    }
    t->src = src;
    t->val = bits;
    ftc_emu_warp_op_(FTC_EMU_OP_SHFL, mask, op);
    return t->out;
}

#define FTC_EMU_SHFL_TYPED_(name, T)                                                            \
    static inline T name(unsigned int mask, T v, int mode, int arg, int width, const char *op) { \
        unsigned long long bits = 0;                                                            \
        memcpy(&bits, &v, sizeof v);                                                            \
        bits = ftc_emu_shfl_(mask, bits, mode, arg, width, op);                                 \
        memcpy(&v, &bits, sizeof v);                                                            \
        return v;                                                                               \
    }
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_f_, float)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_d_, double)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_i_, int)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_u_, unsigned int)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_l_, long)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_ul_, unsigned long)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_ll_, long long)
FTC_EMU_SHFL_TYPED_(ftc_emu_shfl_ull_, unsigned long long)

// One CUDA name for every value type, as CUDA's overloads; narrower integers go through int.
#define FTC_EMU_SHFL_PICK_(v)                                                                   \
    _Generic((v), float: ftc_emu_shfl_f_, double: ftc_emu_shfl_d_,                               \
             unsigned int: ftc_emu_shfl_u_, long: ftc_emu_shfl_l_,                               \
             unsigned long: ftc_emu_shfl_ul_, long long: ftc_emu_shfl_ll_,                       \
             unsigned long long: ftc_emu_shfl_ull_, default: ftc_emu_shfl_i_)
#define FTC_EMU_ARG1_(a, ...) a
#define FTC_EMU_ARG2_(a, b, ...) b
// The optional last argument, width, defaults to warpSize as in CUDA.
#define FTC_EMU_SHFL_CALL_(mode, name, mask, v, ...)                                            \
    FTC_EMU_SHFL_PICK_(v)((mask), (v), (mode), (int)(FTC_EMU_ARG1_(__VA_ARGS__, 0)),             \
                          (int)(FTC_EMU_ARG2_(__VA_ARGS__, 32, 0)), name)
#define __shfl_sync(mask, v, ...)                                                               \
    FTC_EMU_SHFL_CALL_(FTC_EMU_SHFL_IDX, "__shfl_sync", mask, v, __VA_ARGS__)
#define __shfl_up_sync(mask, v, ...)                                                            \
    FTC_EMU_SHFL_CALL_(FTC_EMU_SHFL_UP, "__shfl_up_sync", mask, v, __VA_ARGS__)
#define __shfl_down_sync(mask, v, ...)                                                          \
    FTC_EMU_SHFL_CALL_(FTC_EMU_SHFL_DOWN, "__shfl_down_sync", mask, v, __VA_ARGS__)
#define __shfl_xor_sync(mask, v, ...)                                                           \
    FTC_EMU_SHFL_CALL_(FTC_EMU_SHFL_XOR, "__shfl_xor_sync", mask, v, __VA_ARGS__)

enum { FTC_EMU_BALLOT, FTC_EMU_ANY, FTC_EMU_ALL };

// The votes of the lanes of `mask` that exist: the ballot, or whether any or all of them is set.
FTC_EMU_FN unsigned int ftc_emu_vote_(unsigned int mask, int pred, int mode, const char *op) {
    FtcEmuThread *t = ftc_emu_T;
    t->pred = pred;
    ftc_emu_warp_op_(FTC_EMU_OP_VOTE, mask, op);
    unsigned int ballot = (unsigned int)t->out, part = (unsigned int)(t->out >> 32);
    return mode == FTC_EMU_BALLOT ? ballot : mode == FTC_EMU_ANY ? ballot != 0 : ballot == part;
}

#define __ballot_sync(mask, pred)                                                               \
    ftc_emu_vote_((mask), (pred) != 0, FTC_EMU_BALLOT, "__ballot_sync")
#define __any_sync(mask, pred) ((int)ftc_emu_vote_((mask), (pred) != 0, FTC_EMU_ANY, "__any_sync"))
#define __all_sync(mask, pred) ((int)ftc_emu_vote_((mask), (pred) != 0, FTC_EMU_ALL, "__all_sync"))

FTC_EMU_FN void ftc_emu_syncwarp_(unsigned int mask) {
    ftc_emu_warp_op_(FTC_EMU_OP_SYNCWARP, mask, "__syncwarp");
}
// __syncwarp() means __syncwarp(0xffffffff), as in CUDA (an empty argument stringizes to "",
// which works in every language mode, unlike `, ##__VA_ARGS__`).
#define __syncwarp(...)                                                                         \
    ftc_emu_syncwarp_(sizeof(#__VA_ARGS__) == 1 ? FTC_EMU_FULL_MASK                             \
                                                : (unsigned int)(__VA_ARGS__ + 0))

// The lanes of the caller's warp that exist and have not exited. Nothing here tracks
// divergence, so use it only where the warp is converged.
FTC_EMU_FN unsigned int ftc_emu_activemask_(void) {
    const FtcEmuWarp *w = &ftc_emu_L->warps[ftc_emu_T->warp];
    return w->exist & ~w->exited;
}
#define __activemask() ftc_emu_activemask_()

// One m16n8k16 bf16 tile product per warp, D = A·B + C: prelude.cuh's FTC_MMA_16816 under
// FTC_EMU. a0..a3 and b0, b1 hold two bf16 each; the layouts are ftc_emu_mma_compute_'s.
FTC_EMU_FN void ftc_emu_mma_16816(float *d0, float *d1, float *d2, float *d3, unsigned int a0,
                                  unsigned int a1, unsigned int a2, unsigned int a3,
                                  unsigned int b0, unsigned int b1, float c0, float c1, float c2,
                                  float c3) {
    FtcEmuThread *t = ftc_emu_T;
    t->mma_a[0] = a0, t->mma_a[1] = a1, t->mma_a[2] = a2, t->mma_a[3] = a3;
    t->mma_b[0] = b0, t->mma_b[1] = b1;
    t->mma_c[0] = c0, t->mma_c[1] = c1, t->mma_c[2] = c2, t->mma_c[3] = c3;
    ftc_emu_warp_op_(FTC_EMU_OP_MMA, FTC_EMU_FULL_MASK, "mma.sync.m16n8k16");
    *d0 = t->mma_d[0], *d1 = t->mma_d[1], *d2 = t->mma_d[2], *d3 = t->mma_d[3];
}

// ldmatrix.sync.aligned.m8n8.x`n`[.trans].shared.b16 (prelude.cuh's FTC_LDMATRIX_*): `row` is the
// address this lane brings (read only where lane < 8n); out[0..n) the words it takes.
FTC_EMU_FN void ftc_emu_ldmatrix(unsigned int *out, const void *row, int n, int trans) {
    FtcEmuThread *t = ftc_emu_T;
    if (t->lane < 8 * n && ((uintptr_t)row & 15u))
        ftc_emu_fail_("ldmatrix: lane %d's row address %p is not 16-byte aligned", t->lane, row);
    t->ldm_row = (const unsigned char *)row;
    t->ldm_n = n;
    t->ldm_trans = trans;
    ftc_emu_warp_op_(FTC_EMU_OP_LDMATRIX, FTC_EMU_FULL_MASK,
                     trans ? "ldmatrix.sync.aligned.m8n8.trans" : "ldmatrix.sync.aligned.m8n8");
    for (int j = 0; j < n; j++)
        out[j] = t->ldm_out[j];
}

// Dynamic shared memory (prelude.cuh's FTC_DYN_SMEM): what the running launch gave
// (ftc_emu_dynamic_smem, before it), which a kernel's declaration must not exceed.
#define FTC_EMU_DSMEM_MAX 232448
static _Thread_local unsigned int ftc_emu_dsmem_;
FTC_EMU_FN void ftc_emu_dsmem_check_(unsigned int bytes) {
    if (bytes > ftc_emu_dsmem_ || bytes > FTC_EMU_DSMEM_MAX)
        ftc_emu_fail_("it declares %u bytes of dynamic shared memory, but the launch gave %u", bytes,
                      ftc_emu_dsmem_);
}

// cp.async.cg.shared.global [dst], [src], 16: the 16 bytes at src, read now, land at dst when a
// cp.async.wait_group retires their group (both addresses 16-byte aligned).
FTC_EMU_FN void ftc_emu_cp_async_16(void *dst, const void *src) {
    FtcEmuThread *t = ftc_emu_T;
    if (((uintptr_t)dst | (uintptr_t)src) & 15u)
        ftc_emu_fail_("cp.async of 16 bytes from %p to %p: both must be 16-byte aligned", src, dst);
    if (t->nasync == FTC_EMU_ASYNC_MAX)
        ftc_emu_fail_("more than %d cp.async in flight in one thread (no cp.async.wait_group)",
                      FTC_EMU_ASYNC_MAX);
    FtcEmuCopy *c = &t->async[t->nasync++];
    c->dst = dst;
    memcpy(c->bytes, src, 16);
    c->group = t->commits;
}
FTC_EMU_FN void ftc_emu_cp_async_commit(void) { ftc_emu_T->commits++; }
// cp.async.wait_group n: every committed group but the newest n has landed.
FTC_EMU_FN void ftc_emu_cp_async_wait(int n) {
    FtcEmuThread *t = ftc_emu_T;
    int kept = 0;
    for (int i = 0; i < t->nasync; i++) {
        FtcEmuCopy *c = &t->async[i];
        if (c->group < t->commits - n)
            memcpy(c->dst, c->bytes, 16);
        else
            t->async[kept++] = *c;
    }
    t->nasync = kept;
}

// ---------------------------------------------------------------------------------------------
// Atomics. Blocks run one at a time and fibers switch only at synchronisation points, so a
// plain read-modify-write would do; the __atomic builtins keep them atomic even when two OS
// threads launch kernels on the same memory.

#define FTC_EMU_ATOMIC_INT_(T, sfx)                                                             \
    static inline T ftc_emu_atomic_add_##sfx(T *p, T v) {                                       \
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline T ftc_emu_atomic_sub_##sfx(T *p, T v) {                                       \
        return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline T ftc_emu_atomic_and_##sfx(T *p, T v) {                                       \
        return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline T ftc_emu_atomic_or_##sfx(T *p, T v) {                                        \
        return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);                                       \
    }                                                                                           \
    static inline T ftc_emu_atomic_xor_##sfx(T *p, T v) {                                       \
        return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline T ftc_emu_atomic_exch_##sfx(T *p, T v) {                                      \
        return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                     \
    }                                                                                           \
    static inline T ftc_emu_atomic_cas_##sfx(T *p, T cmp, T v) {                                \
        __atomic_compare_exchange_n(p, &cmp, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);         \
        return cmp;                                                                             \
    }                                                                                           \
    static inline T ftc_emu_atomic_max_##sfx(T *p, T v) {                                       \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                           \
        while (old < v &&                                                                       \
               !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                   \
        return old;                                                                             \
    }                                                                                           \
    static inline T ftc_emu_atomic_min_##sfx(T *p, T v) {                                       \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                           \
        while (old > v &&                                                                       \
               !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                   \
        return old;                                                                             \
    }
FTC_EMU_ATOMIC_INT_(int, i_)
FTC_EMU_ATOMIC_INT_(unsigned int, u_)
FTC_EMU_ATOMIC_INT_(long long, ll_)
FTC_EMU_ATOMIC_INT_(unsigned long long, ull_)

// Floating-point add as a compare-and-swap loop on the bits (the generic builtins compare bytes,
// so NaN values do not spin).
#define FTC_EMU_ATOMIC_FLOAT_(T, sfx)                                                           \
    static inline T ftc_emu_atomic_add_##sfx(T *p, T v) {                                       \
        T old, sum;                                                                             \
        __atomic_load(p, &old, __ATOMIC_RELAXED);                                               \
        do                                                                                      \
            sum = old + v;                                                                      \
        while (!__atomic_compare_exchange(p, &old, &sum, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); \
        return old;                                                                             \
    }                                                                                           \
    static inline T ftc_emu_atomic_exch_##sfx(T *p, T v) {                                      \
        T old;                                                                                  \
        __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED);                                       \
        return old;                                                                             \
    }
FTC_EMU_ATOMIC_FLOAT_(float, f_)
FTC_EMU_ATOMIC_FLOAT_(double, d_)

#define FTC_EMU_ATOMIC_PICK_(op, p)                                                             \
    _Generic((p), int *: ftc_emu_atomic_##op##_i_, unsigned int *: ftc_emu_atomic_##op##_u_,     \
             long long *: ftc_emu_atomic_##op##_ll_,                                             \
             unsigned long long *: ftc_emu_atomic_##op##_ull_)
#define atomicAdd(p, v)                                                                         \
    _Generic((p), float *: ftc_emu_atomic_add_f_, double *: ftc_emu_atomic_add_d_,               \
             int *: ftc_emu_atomic_add_i_, unsigned int *: ftc_emu_atomic_add_u_,                \
             long long *: ftc_emu_atomic_add_ll_,                                                \
             unsigned long long *: ftc_emu_atomic_add_ull_)((p), (v))
#define atomicExch(p, v)                                                                        \
    _Generic((p), float *: ftc_emu_atomic_exch_f_, double *: ftc_emu_atomic_exch_d_,             \
             int *: ftc_emu_atomic_exch_i_, unsigned int *: ftc_emu_atomic_exch_u_,              \
             long long *: ftc_emu_atomic_exch_ll_,                                               \
             unsigned long long *: ftc_emu_atomic_exch_ull_)((p), (v))
#define atomicSub(p, v) FTC_EMU_ATOMIC_PICK_(sub, p)((p), (v))
#define atomicAnd(p, v) FTC_EMU_ATOMIC_PICK_(and, p)((p), (v))
#define atomicOr(p, v) FTC_EMU_ATOMIC_PICK_(or, p)((p), (v))
#define atomicXor(p, v) FTC_EMU_ATOMIC_PICK_(xor, p)((p), (v))
#define atomicMax(p, v) FTC_EMU_ATOMIC_PICK_(max, p)((p), (v))
#define atomicMin(p, v) FTC_EMU_ATOMIC_PICK_(min, p)((p), (v))
#define atomicCAS(p, cmp, v) FTC_EMU_ATOMIC_PICK_(cas, p)((p), (cmp), (v))

#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_system() __atomic_thread_fence(__ATOMIC_SEQ_CST)

// ---------------------------------------------------------------------------------------------
// Bit casts, intrinsics and math. Macros, not functions under CUDA's names: glibc's <math.h>
// declares some of those names (__expf, __logf) itself. expf, logf, sqrtf, tanhf, fmaxf, fminf,
// fabsf, floorf, powf, sinf, cosf, exp2f, log2f, erff, fmaf ... are <math.h>'s own.

static inline float ftc_emu_uint_as_float_(unsigned int u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline unsigned int ftc_emu_float_as_uint_(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline double ftc_emu_ll_as_double_(long long u) {
    double f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline long long ftc_emu_double_as_ll_(double f) {
    long long u;
    memcpy(&u, &f, sizeof u);
    return u;
}
#define __uint_as_float(u) ftc_emu_uint_as_float_((unsigned int)(u))
#define __int_as_float(i) ftc_emu_uint_as_float_((unsigned int)(i))
#define __float_as_uint(f) ftc_emu_float_as_uint_(f)
#define __float_as_int(f) ((int)ftc_emu_float_as_uint_(f))
#define __longlong_as_double(u) ftc_emu_ll_as_double_(u)
#define __double_as_longlong(f) ftc_emu_double_as_ll_(f)

static inline float ftc_emu_saturatef_(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
static inline float ftc_emu_rsqrtf_(float x) { return 1.0f / sqrtf(x); }
static inline float ftc_emu_div_(float a, float b) { return a / b; }
static inline float ftc_emu_add_(float a, float b) { return a + b; }
static inline float ftc_emu_sub_(float a, float b) { return a - b; }
static inline float ftc_emu_mul_(float a, float b) { return a * b; }
// CUDA's float-to-int conversions saturate, and NaN converts to 0.
static inline int ftc_emu_f2i_(float r) {
    if (r != r)
        return 0;
    if (r >= 2147483648.0f)
        return INT_MAX;
    if (r < -2147483648.0f)
        return INT_MIN;
    return (int)r;
}
static inline unsigned int ftc_emu_f2u_(float r) {
    if (r != r || r <= 0.0f)
        return 0;
    if (r >= 4294967296.0f)
        return UINT_MAX;
    return (unsigned int)r;
}

#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __exp10f(x) exp10f(x)
#define __powf(x, y) powf(x, y)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define rsqrtf(x) ftc_emu_rsqrtf_(x)
#define __frsqrt_rn(x) ftc_emu_rsqrtf_(x)
#define __fsqrt_rn(x) sqrtf(x)
#define __frcp_rn(x) ftc_emu_div_(1.0f, (x))
#define __fdividef(a, b) ftc_emu_div_((a), (b))
#define __fdiv_rn(a, b) ftc_emu_div_((a), (b))
#define __fadd_rn(a, b) ftc_emu_add_((a), (b))
#define __fsub_rn(a, b) ftc_emu_sub_((a), (b))
#define __fmul_rn(a, b) ftc_emu_mul_((a), (b))
#define __fmaf_rn(a, b, c) fmaf((a), (b), (c))
#define __saturatef(x) ftc_emu_saturatef_(x)
#define __float2int_rn(x) ftc_emu_f2i_(nearbyintf(x))
#define __float2int_rz(x) ftc_emu_f2i_(truncf(x))
#define __float2int_rd(x) ftc_emu_f2i_(floorf(x))
#define __float2int_ru(x) ftc_emu_f2i_(ceilf(x))
#define __float2uint_rn(x) ftc_emu_f2u_(nearbyintf(x))
#define __float2uint_rz(x) ftc_emu_f2u_(truncf(x))
#define __int2float_rn(i) ((float)(int)(i))
#define __uint2float_rn(u) ((float)(unsigned int)(u))

static inline int ftc_emu_clz_(unsigned int x) { return x ? __builtin_clz(x) : 32; }
static inline int ftc_emu_clzll_(unsigned long long x) { return x ? __builtin_clzll(x) : 64; }
static inline unsigned int ftc_emu_brev_(unsigned int x) {
    unsigned int r = 0;
    for (int i = 0; i < 32; i++, x >>= 1)
        r = (r << 1) | (x & 1u);
    return r;
}
#define __popc(x) __builtin_popcount((unsigned int)(x))
#define __popcll(x) __builtin_popcountll((unsigned long long)(x))
#define __clz(x) ftc_emu_clz_((unsigned int)(x))
#define __clzll(x) ftc_emu_clzll_((unsigned long long)(x))
#define __ffs(x) __builtin_ffs((int)(x))
#define __ffsll(x) __builtin_ffsll((long long)(x))
#define __brev(x) ftc_emu_brev_((unsigned int)(x))

#define __ldg(p) (*(p))

// CUDA's min and max: one name for every arithmetic type (fminf/fmaxf for floating point, so
// NaN handling is CUDA's), picked like its overloads by the usual arithmetic conversions.
#define FTC_EMU_MINMAX_(T, sfx)                                                                 \
    static inline T ftc_emu_min_##sfx(T a, T b) { return a < b ? a : b; }                       \
    static inline T ftc_emu_max_##sfx(T a, T b) { return a > b ? a : b; }
FTC_EMU_MINMAX_(int, i_)
FTC_EMU_MINMAX_(unsigned int, u_)
FTC_EMU_MINMAX_(long, l_)
FTC_EMU_MINMAX_(unsigned long, ul_)
FTC_EMU_MINMAX_(long long, ll_)
FTC_EMU_MINMAX_(unsigned long long, ull_)
#define FTC_EMU_MINMAX_PICK_(op, fop, a, b)                                                     \
    _Generic((a) + (b), float: fop##f, double: fop, unsigned int: ftc_emu_##op##_u_,             \
             long: ftc_emu_##op##_l_, unsigned long: ftc_emu_##op##_ul_,                         \
             long long: ftc_emu_##op##_ll_, unsigned long long: ftc_emu_##op##_ull_,             \
             default: ftc_emu_##op##_i_)((a), (b))
#define min(a, b) FTC_EMU_MINMAX_PICK_(min, fmin, a, b)
#define max(a, b) FTC_EMU_MINMAX_PICK_(max, fmax, a, b)

// Fails the launch (CUDA aborts the context).
#define __trap() ftc_emu_fail_("__trap()")

// ---------------------------------------------------------------------------------------------
// The launcher

// A kernels.cu ends with its table of kernels, for instance
//     FTC_EMU_TABLE(FTC_EMU_ENTRY(k_add_3, 0) FTC_EMU_ENTRY(k_rmsnorm_5, 1))
// where the flag says whether the kernel synchronises (__syncthreads, warp operations, mma):
// 0 runs it on the fast path, where any of those fails the launch. A grouped kernel
// (FTC_GROUP_KERNEL) is listed with FTC_EMU_GROUP_ENTRY(k, syncs).
typedef struct FtcEmuKernel {
    const char *name;
    void (*fn)(FtcArgs);  // a grouped kernel's is its void (*)(const FtcGroupArgs *), cast
    int syncs;
    int group;            // 1: launched with FtcGroupArgs (ftc_emu_launch_group)
} FtcEmuKernel;

// The exports of a kernels.so (FTC_EMU_TABLE defines them): its kernels, NULL-name terminated,
// their number, and sizeof(FtcArgs) and sizeof(FtcGroupArgs), for a caller to check its mirror
// of the kernel ABI.
FTC_EMU_EXPORT extern const FtcEmuKernel ftc_emu_kernels[];
FTC_EMU_EXPORT extern const int ftc_emu_nkernels;
FTC_EMU_EXPORT extern const size_t ftc_emu_args_bytes, ftc_emu_group_args_bytes;
// Runs kernel `name` over `grid` blocks of `block` threads with `args`, to completion; returns 0,
// or -1 with a message in err (errlen bytes): an unknown kernel, a bad geometry, a deadlock or
// another synchronisation fault, __trap, or no memory for the fiber stacks.
FTC_EMU_EXPORT int ftc_emu_launch(const char *name, dim3 grid, dim3 block, FtcArgs args,
                                  char *err, size_t errlen);
// The same for a grouped kernel; each of its threads reads *args (not a copy).
FTC_EMU_EXPORT int ftc_emu_launch_group(const char *name, dim3 grid, dim3 block,
                                        const FtcGroupArgs *args, char *err, size_t errlen);
// The dynamic shared memory of this OS thread's launches from now on (0 at first).
FTC_EMU_EXPORT void ftc_emu_dynamic_smem(unsigned int bytes);
// Unmaps the calling OS thread's fibers (kept between launches; see FtcEmuPool). Optional:
// unloading kernels.so does it for the thread that unloads it.
FTC_EMU_EXPORT void ftc_emu_release(void);

// The body of every fiber: runs the kernel as its thread, once per block, parking in between.
FTC_EMU_FN void ftc_emu_fiber_main_(void) {
    FtcEmuThread *t = ftc_emu_T;
    for (;;) {
        FtcEmuLaunch *L = ftc_emu_L;
        t->nasync = t->commits = 0;
        L->call(L->fn, L->args);
        t->state = FTC_EMU_EXITED;
        L->warps[t->warp].exited |= 1u << t->lane;
        L->nexited++;
        ftc_emu_switch_(t->jb, L->sched);
    }
}

// Writes "deadlock: ..." for the block of L, where no thread can run and not all have exited.
FTC_EMU_FN void ftc_emu_deadlock_(FtcEmuLaunch *L) {
    const FtcEmuThread *bar = NULL, *warp = NULL, *exited = NULL;
    int nbar = 0, nwarp = 0;
    for (int i = 0; i < L->nthreads; i++) {
        const FtcEmuThread *t = &L->threads[i];
        if (t->state == FTC_EMU_AT_BARRIER)
            nbar++, bar = bar ? bar : t;
        else if (t->state == FTC_EMU_AT_WARP)
            nwarp++, warp = warp ? warp : t;
        else if (t->state == FTC_EMU_EXITED)
            exited = exited ? exited : t;
    }
    char where[64];
    snprintf(where, sizeof where, " block (%u,%u,%u)", L->bidx.x, L->bidx.y, L->bidx.z);
    const char *ub = "undefined behaviour in CUDA";
    if (warp) {
        // Name the first lane it waits for, and what keeps that lane away.
        const FtcEmuWarp *w = &L->warps[warp->warp];
        unsigned int missing = warp->mask & w->exist & ~w->arrived;
        int l = missing ? ftc_emu_bit_(missing) : warp->lane;
        const FtcEmuThread *o = &L->threads[warp->warp * 32 + l];
        const char *why = o->state == FTC_EMU_EXITED ? "has exited"
                          : o->state == FTC_EMU_AT_BARRIER ? "waits at __syncthreads"
                                                            : "waits at another warp operation";
        ftc_emu_error_(L, where,
                       "deadlock: %d thread(s) wait at warp operations; thread (%u,%u,%u) waits "
                       "at %s with mask 0x%08x for lane %d, which %s (%s)",
                       nwarp, warp->idx.x, warp->idx.y, warp->idx.z, warp->op, warp->mask, l, why,
                       ub);
    } else if (bar && exited) {
        ftc_emu_error_(L, where,
                       "deadlock: %d of %d threads wait at %s (first: thread (%u,%u,%u)), %d "
                       "exited without reaching it (first: thread (%u,%u,%u)); every thread of a "
                       "block must reach every barrier (%s)",
                       nbar, L->nthreads, bar->op, bar->idx.x, bar->idx.y, bar->idx.z, L->nexited,
                       exited->idx.x, exited->idx.y, exited->idx.z, ub);
    } else {
        ftc_emu_error_(L, where, "deadlock (%d of %d threads exited)", L->nexited, L->nthreads);
    }
}

// Runs the block L->bidx on the fibers; 0, or -1 with the error written.
FTC_EMU_FN int ftc_emu_run_block_(FtcEmuLaunch *L) {
    L->bar_arrived = L->bar_pred = 0;
    L->nexited = 0;
    for (int w = 0; w < (L->nthreads + 31) / 32; w++)
        L->warps[w].arrived = L->warps[w].exited = 0;
    for (int i = 0; i < L->nthreads; i++)
        L->threads[i].state = FTC_EMU_READY;
    for (;;) {
        int ran = 0;
        for (int i = 0; i < L->nthreads; i++) {
            FtcEmuThread *t = &L->threads[i];
            if (t->state != FTC_EMU_READY)
                continue;
            ran = 1;
            ftc_emu_T = t;
            if (t->booted) {
                ftc_emu_switch_(L->sched, t->jb);
            } else {
                t->booted = 1;
                ftc_emu_boot_switch_(L->sched, &L->boot, t->stack, L->stack_bytes,
                                     ftc_emu_fiber_main_);
            }
            if (L->failed)
                return -1;
        }
        if (L->nexited == L->nthreads)
            return 0;
        if (!ran) {
            ftc_emu_deadlock_(L);
            return -1;
        }
    }
}

// Runs every block of the launch; 0, or -1 with the error written. Out of line: its locals
// must not share a frame with ftc_emu_guarded_'s setjmp.
static __attribute__((unused, noinline)) int ftc_emu_run_blocks_(FtcEmuLaunch *L) {
    dim3 g = L->grid, b = L->block;
    for (unsigned int bz = 0; bz < g.z; bz++)
        for (unsigned int by = 0; by < g.y; by++)
            for (unsigned int bx = 0; bx < g.x; bx++) {
                L->bidx = (uint3){bx, by, bz};
                if (L->fibers) {
                    if (ftc_emu_run_block_(L))
                        return -1;
                    continue;
                }
                // The fast path: the threads one after another, on this stack.
                FtcEmuThread *t = L->threads;
                ftc_emu_T = t;
                for (unsigned int z = 0; z < b.z; z++)
                    for (unsigned int y = 0; y < b.y; y++)
                        for (unsigned int x = 0; x < b.x; x++) {
                            t->idx = (uint3){x, y, z};
                            t->tid = (int)(x + y * b.x + z * b.x * b.y);
                            t->lane = t->tid & 31;
                            t->warp = t->tid >> 5;
                            t->nasync = t->commits = 0;
                            L->call(L->fn, L->args);
                        }
            }
    return 0;
}

// Runs the blocks with L->sched as the place a failing kernel on the fast path jumps back to.
FTC_EMU_FN int ftc_emu_guarded_(FtcEmuLaunch *L) {
    if (_setjmp(L->sched))
        return -1;
    return ftc_emu_run_blocks_(L);
}

// The fibers of this OS thread, kept from launch to launch: mapping stacks, touching their first
// pages and starting fibers costs system calls and page faults (about 7 us a thread), which a
// kernel's own work rarely outweighs. One mapping (no malloc, so leak checkers do not count it):
// the thread records, then per fiber a guard page and its stack. Unmapped by ftc_emu_release
// and when kernels.so is unloaded, on the thread doing either; another thread's stays mapped
// until the process ends.
typedef struct FtcEmuPool {
    char *map;
    size_t map_bytes, stack_bytes;
    int capacity;
    FtcEmuThread *threads; // (capacity), at the start of map
} FtcEmuPool;

static _Thread_local FtcEmuPool ftc_emu_pool_;

// Unmaps this OS thread's fibers, unless a launch is running on them.
FTC_EMU_FN void ftc_emu_pool_free_(void) {
    FtcEmuPool *P = &ftc_emu_pool_;
    if (ftc_emu_L || !P->map)
        return;
    munmap(P->map, P->map_bytes);
    memset(P, 0, sizeof *P);
}

static __attribute__((destructor, unused)) void ftc_emu_unload_(void) { ftc_emu_pool_free_(); }

// Makes the pool hold at least n fibers with stacks of $FTC_EMU_STACK_KIB (64 KiB when unset),
// each above a guard page; 0, or -1 with the error written.
FTC_EMU_FN int ftc_emu_pool_get_(FtcEmuLaunch *L, int n) {
    FtcEmuPool *P = &ftc_emu_pool_;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), kib = 64;
    const char *env = getenv("FTC_EMU_STACK_KIB");
    if (env && atol(env) > 0)
        kib = (size_t)atol(env);
    size_t stack_bytes = (kib * 1024 + page - 1) / page * page;
    if (P->map && P->capacity >= n && P->stack_bytes == stack_bytes)
        return 0;
    int cap = n > P->capacity ? n : P->capacity;
    ftc_emu_pool_free_();
    size_t head = (cap * sizeof(FtcEmuThread) + page - 1) / page * page;
    size_t bytes = head + (stack_bytes + page) * (size_t)cap;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        ftc_emu_error_(L, "", "cannot map %d fiber stacks of %zu KiB", cap, kib);
        return -1;
    }
    *P = (FtcEmuPool){.map = m, .map_bytes = bytes, .stack_bytes = stack_bytes,
                      .capacity = cap, .threads = m};
    for (int i = 0; i < cap; i++) {
        char *guard = P->map + head + (size_t)i * (stack_bytes + page);
        mprotect(guard, page, PROT_NONE);
        P->threads[i].stack = guard + page;
    }
    return 0;
}

// ftc_emu_launch, given the kernel table and FTC_EMU_TABLE's way to call a kernel.
FTC_EMU_FN int ftc_emu_run_(const FtcEmuKernel *table, const char *name, dim3 grid, dim3 block,
                            const void *args, void (*call)(void (*)(FtcArgs), const void *),
                            int group, char *err, size_t errlen) {
    FtcEmuLaunch *L = calloc(1, sizeof *L);
    if (!L || ftc_emu_L) {
        if (err && errlen)
            snprintf(err, errlen, "kernel '%s': %s", name ? name : "(null)",
                     L ? "launched from inside a kernel" : "out of memory");
        free(L);
        return -1;
    }
    L->kernel = name ? name : "(null)";
    L->err = err;
    L->errlen = errlen;
    const FtcEmuKernel *k = table;
    while (k->name && (!name || strcmp(k->name, name) != 0))
        k++;
    int rc = -1;
    unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
    if (!k->name) {
        ftc_emu_error_(L, "", "no such kernel in this kernels.so");
    } else if (k->group != group) {
        ftc_emu_error_(L, "", "a %s kernel, launched as a %s one", k->group ? "grouped" : "plain",
                       group ? "grouped" : "plain");
    } else if (!grid.x || !grid.y || !grid.z || grid.x > INT_MAX || grid.y > 65535 ||
               grid.z > 65535 || !nthreads || block.x > 1024 || block.y > 1024 || block.z > 64 ||
               nthreads > FTC_EMU_MAX_THREADS) {
        ftc_emu_error_(L, "",
                       "bad launch geometry: grid (%u,%u,%u), block (%u,%u,%u) (CUDA's limits: "
                       "grid up to (2^31-1, 65535, 65535), block up to (1024, 1024, 64) and "
                       "1024 threads, no dimension 0)",
                       grid.x, grid.y, grid.z, block.x, block.y, block.z);
    } else {
        L->fn = k->fn;
        L->call = call;
        L->args = args;
        L->grid = grid;
        L->block = block;
        L->nthreads = (int)nthreads;
        L->fibers = k->syncs != 0;
        for (int w = 0; w < (L->nthreads + 31) / 32; w++) {
            int n = L->nthreads - w * 32;
            L->warps[w].exist = n >= 32 ? FTC_EMU_FULL_MASK : (1u << n) - 1u;
        }
        L->threads = &L->one;
        if (!L->fibers || ftc_emu_pool_get_(L, L->nthreads) == 0) {
            FtcEmuPool *P = &ftc_emu_pool_;
            if (L->fibers) {
                L->threads = P->threads;
                L->stack_bytes = P->stack_bytes;
            }
            for (int i = 0; L->fibers && i < L->nthreads; i++) {
                FtcEmuThread *t = &L->threads[i];
                t->idx = (uint3){i % block.x, i / block.x % block.y, i / (block.x * block.y)};
                t->tid = i, t->lane = i & 31, t->warp = i >> 5;
            }
            ftc_emu_L = L;
            rc = ftc_emu_guarded_(L);
            ftc_emu_L = NULL;
            ftc_emu_T = NULL;
            // A failure abandons fibers in the middle of the kernel: start them afresh.
            for (int i = 0; rc != 0 && L->fibers && i < P->capacity; i++)
                P->threads[i].booted = 0;
        }
    }
    free(L);
    return rc;
}

#define FTC_EMU_ENTRY(kernel, syncs) {#kernel, kernel, (syncs), 0},
#define FTC_EMU_GROUP_ENTRY(kernel, syncs) {#kernel, (void (*)(FtcArgs))(void (*)(void))(kernel), (syncs), 1},
// Defines the exports of a kernels.so; see FtcEmuKernel. The launcher reads a private copy of
// the table, so kernels.so files loaded side by side never see each other's.
#define FTC_EMU_TABLE(entries)                                                                  \
    static const FtcEmuKernel ftc_emu_table_[] = {entries{0, 0, 0, 0}};                         \
    FTC_EMU_EXPORT const FtcEmuKernel ftc_emu_kernels[] = {entries{0, 0, 0, 0}};                \
    FTC_EMU_EXPORT const int ftc_emu_nkernels =                                                 \
        (int)(sizeof ftc_emu_table_ / sizeof ftc_emu_table_[0]) - 1;                            \
    FTC_EMU_EXPORT const size_t ftc_emu_args_bytes = sizeof(FtcArgs);                           \
    FTC_EMU_EXPORT const size_t ftc_emu_group_args_bytes = sizeof(FtcGroupArgs);                \
    static void ftc_emu_call_(void (*fn)(FtcArgs), const void *args) {                          \
        fn(*(const FtcArgs *)args);                                                             \
    }                                                                                           \
    static void ftc_emu_call_group_(void (*fn)(FtcArgs), const void *args) {                    \
        ((void (*)(const FtcGroupArgs *))(void (*)(void))fn)((const FtcGroupArgs *)args);       \
    }                                                                                           \
    FTC_EMU_EXPORT int ftc_emu_launch(const char *name, dim3 grid, dim3 block, FtcArgs args,    \
                                      char *err, size_t errlen) {                               \
        return ftc_emu_run_(ftc_emu_table_, name, grid, block, &args, ftc_emu_call_, 0, err,    \
                            errlen);                                                            \
    }                                                                                           \
    FTC_EMU_EXPORT int ftc_emu_launch_group(const char *name, dim3 grid, dim3 block,            \
                                            const FtcGroupArgs *args, char *err,                \
                                            size_t errlen) {                                    \
        return ftc_emu_run_(ftc_emu_table_, name, grid, block, args, ftc_emu_call_group_, 1,    \
                            err, errlen);                                                       \
    }                                                                                           \
    FTC_EMU_EXPORT void ftc_emu_dynamic_smem(unsigned int bytes) { ftc_emu_dsmem_ = bytes; }      \
    FTC_EMU_EXPORT void ftc_emu_release(void) { ftc_emu_pool_free_(); }

#endif
