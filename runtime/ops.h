// ops.h — the vocabulary compiler and runtime share: op ids and their descriptions
// (expanded from ops.def), op attributes, memory kinds and streams. plan.h and the
// compiler's ir.h both include it; it includes nothing of either.
#ifndef FTC_RUNTIME_OPS_H
#define FTC_RUNTIME_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { OP_MAX_DIMS = 6 };

// What kind of kernel runs an op.
typedef enum OpClass {
    OPC_GEMM,           // a matrix product (cuBLASLt on a GPU)
    OPC_ATTENTION,      // fused attention, forward or backward
    OPC_ELEMENTWISE,    // one output element from the same element of each input
    OPC_REDUCTION,      // rows reduced (norms, softmax, the loss, sums)
    OPC_GATHER,         // indexed rows: an embedding lookup and its scatter-add
    OPC_MOVEMENT,       // the same elements rearranged (view, transpose)
    OPC_COPY,           // bytes moved between arenas on a copy stream
    OPC_OPTIMIZER,      // a parameter update
    OPC_COUNT
} OpClass;

enum {                  // OpDesc.flags
    OPF_USER = 1 << 0,          // may be written in .ft
    OPF_INPLACE = 1 << 1,       // out[0] may take the bytes of a same-sized input dying here
    OPF_ATTR_OPTIONAL = 1 << 2, // its .ft attribute may be left out
};

enum {                  // OpDesc.attrs: the fields of OpAttr an op reads
    ATTR_F = 1 << 0,        // f, named by OpDesc.f_key
    ATTR_CAUSAL = 1 << 1,   // causal
    ATTR_PERM = 1 << 2,     // perm (written "dims" in .ft)
    ATTR_SHAPE = 1 << 3,    // ndim, shape
    ATTR_CHUNK = 1 << 4,    // chunk_rows
    ATTR_SEED = 1 << 5,     // seed
};

typedef enum OpKind {
#define OP(id, name, cls, flags, min_in, max_in, attrs, f_key) OP_##id,
#include "ops.def"
#undef OP
    OP_COUNT
} OpKind;

typedef struct OpDesc {
    const char *name;
    OpClass cls;
    unsigned flags;
    int min_in, max_in;
    unsigned attrs;
    const char *f_key;
} OpDesc;

// An op's attributes; only the fields its row names are meaningful (zero otherwise).
typedef struct OpAttr {
    double f;                   // eps, theta, p, c, the loss's scale (OpDesc.f_key)
    bool causal;                // attention
    int perm[2];                // transpose: the two dims swapped
    int ndim;                   // view, sum_to, embed_bwd: the target shape
    int64_t shape[OP_MAX_DIMS];
    int64_t chunk_rows;         // cross_entropy_bwd: rows per chunk (0 = all at once)
    int64_t seed;               // dropout: its random stream (a recompute repeats it)
} OpAttr;

// grad_sumsq's blocks over a gradient of n elements: each sums 4096 of them (a thread
// block's 256 threads, 16 each) into a partial of the workspace, at most 1024 partials,
// which one block then adds in order. The compiler sizes the workspace and the launch
// with it, the runtime checks a plan against it.
static inline int64_t op_sumsq_blocks(int64_t n) {
    int64_t b = (n + 4095) / 4096;
    return b < 1 ? 1 : b > 1024 ? 1024 : b;
}

// ops.c
const OpDesc *op_desc(OpKind op);
// The op named `name`, or false.
bool op_find(const char *name, OpKind *out);
// Writes op's meaningful attributes as " key=value" pairs (plans and printouts):
// "eps=1e-06", "causal=1", "perm=1,2", "shape=8x64", "chunk=128", "seed=7"; `exact`
// writes f with all 17 digits (plans), else as %g (printouts). Returns the length
// written (snprintf's convention).
int op_attr_format(char *buf, size_t cap, OpKind op, const OpAttr *a, bool exact);
// Reads one "key=value" of op's attributes into *a: 1 read, 0 not an attribute key of
// op, -1 a bad value.
int op_attr_parse(OpKind op, const char *key, const char *value, OpAttr *a);

// A whole decimal integer (the text form of plans), or false.
bool ops_parse_i64(const char *s, int64_t *v);

// Where an arena lives.
typedef enum MemKind {
    MEMK_DEVICE,        // device memory (the GPU's; plain memory on the cpu backend)
    MEMK_PINNED,        // page-locked host memory the device copies to and from
    MEMK_COUNT
} MemKind;

// The streams of a step. Instructions on one stream run in plan order; across streams,
// only the plan's events order them. Every phase ends with all streams drained.
typedef enum Stream {
    STREAM_COMPUTE,     // device kernels
    STREAM_D2H,         // copies from device memory to the host arena
    STREAM_H2D,         // copies from the host arena to device memory
    STREAM_HOST,        // the CPU (host AdamW, host gradient sums), on host buffers only
    STREAM_COUNT
} Stream;

const char *stream_name(Stream s);
bool stream_find(const char *name, Stream *out);

#endif
