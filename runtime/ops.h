// ops.h — the vocabulary compiler and runtime share: op ids and their descriptions
// (expanded from ops.def), op attributes, memory kinds and streams. plan.h and the
// compiler's ir.h both include it; it includes nothing of either.
#ifndef FTC_RUNTIME_OPS_H
#define FTC_RUNTIME_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "xalloc.h"   // the allocation helper every room uses (ftc_ops is the library all link)

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
    OPC_COLLECTIVE,     // a sum or exchange across ranks, on the comm stream
    OPC_LOSS_GEMM,      // the fused linear + loss: a GEMM per row chunk, the loss's kernels
                        // between them (GEMMs by the library, kernels generated)
    OPC_COUNT
} OpClass;

enum {                  // OpDesc.flags
    OPF_USER = 1 << 0,          // may be written in .ft
    OPF_INPLACE = 1 << 1,       // out[0] may take the bytes of a same-sized input dying here
    OPF_ATTR_OPTIONAL = 1 << 2, // its .ft attribute may be left out
    OPF_STEP_SCALARS = 1 << 3,  // its kernels read a runtime scalar that changes every
                                // micro-step (the random stream, the loss scale)
};

enum {                  // OpDesc.attrs: the fields of OpAttr an op reads
    ATTR_F = 1 << 0,        // f, named by OpDesc.f_key
    ATTR_CAUSAL = 1 << 1,   // causal
    ATTR_PERM = 1 << 2,     // perm (written "dims" in .ft)
    ATTR_SHAPE = 1 << 3,    // ndim, shape
    ATTR_CHUNK = 1 << 4,    // chunk_rows
    ATTR_SEED = 1 << 5,     // seed
    ATTR_WINDOW = 1 << 6,   // window (attention)
    ATTR_SOFTCAP = 1 << 7,  // softcap (attention)
    ATTR_SCALE = 1 << 8,    // scale (attention)
    ATTR_OFFSET = 1 << 9,   // offset (rmsnorm)
    ATTR_SLICE = 1 << 10,   // axis, start, size
    ATTR_AXIS = 1 << 11,    // axis alone (concat)
    ATTR_ROPE = 1 << 12,    // rope: its rotary dims and frequency scaling
    ATTR_PAD = 1 << 13,     // pad (embed)
    ATTR_PREF = 1 << 14,    // pref (preference)
};

// How rope's frequencies are scaled from the base 1 / theta^(2i/d) (Hugging Face's
// rope_type), d its rotary dims.
typedef enum RopeScaling {
    ROPE_PLAIN,         // no scaling ("default")
    ROPE_LINEAR,        // every frequency / factor
    ROPE_DYNAMIC,       // NTK: theta grown for a sequence of `length` beyond `original`
    ROPE_LLAMA3,        // low frequencies / factor, high ones kept, a ramp between (Llama 3.1)
    ROPE_YARN,          // interpolation ramped in by rotations (beta_fast, beta_slow); cos and
                        // sin scaled by attn_factor
    ROPE_SCALING_COUNT
} RopeScaling;

// rope's attributes besides theta (OpAttr.f).
typedef struct OpRope {
    int64_t rotary;         // the leading dims of each head that rotate (0: all); even
    int scaling;            // RopeScaling
    double factor;          // linear, dynamic, llama3, yarn
    double low, high;       // llama3: low_freq_factor, high_freq_factor; yarn: beta_fast, beta_slow
    int64_t original;       // llama3, yarn: original_max_position_embeddings; dynamic:
                            // max_position_embeddings
    int64_t length;         // dynamic: the sequence length its theta is computed for
    double attn_factor;     // yarn: the factor on cos and sin (0: from factor)
    bool no_truncate;       // yarn: the correction range left unrounded
} OpRope;

// A preference loss's form (preference, preference_bwd; beta is OpAttr.f): the published
// formulas, as TRL computes them. Over a pair's sequences' sums of trained log-probabilities
// c, r (and the reference's, c0, r0), or their means over the trained targets (ipo, orpo,
// simpo: a, b):
//   dpo    -(1 - e) logsig(beta z) - e logsig(-beta z),  z = (c - c0) - (r - r0)
//   ipo    (z - 1 / (2 beta))^2,                          z = (a - a0) - (b - b0)
//   simpo  -(1 - e) logsig(y) - e logsig(-y) + alpha nll,  y = beta (a - b) - gamma
//   orpo   nll - beta logsig(log(a/(1-a)) - log(b/(1-b)))  (odds of exp(a), exp(b))
// e the label smoothing; nll the chosen rows' mean negative log-likelihood per trained
// target of the step.
typedef enum PrefKind { PREF_DPO, PREF_IPO, PREF_ORPO, PREF_SIMPO, PREF_KIND_COUNT } PrefKind;
typedef struct OpPref {
    int kind;               // PrefKind
    double smoothing;       // dpo, simpo: label smoothing (0: none)
    double gamma;           // simpo: the target margin
    double alpha;           // simpo: the chosen rows' nll weight (0: none)
} OpPref;

// What a preference loss reports (its stats output, each the step's mean over pairs):
// rewards as TRL names them (rewards/chosen = beta (c - c0), or beta a without a
// reference), whether the chosen one's is higher, and the policy's log-probabilities.
enum {
    PREF_REWARD_CHOSEN, PREF_REWARD_REJECTED, PREF_ACCURACY, PREF_LOGPS_CHOSEN, PREF_LOGPS_REJECTED,
    PREF_NLL, PREF_STATS
};
const char *pref_kind_name(int kind);
bool pref_kind_find(const char *name, int *out);
// Whether kind compares the policy against a reference's log-probabilities.
static inline bool pref_needs_reference(int kind) { return kind == PREF_DPO || kind == PREF_IPO; }

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
    int64_t chunk_rows;         // the loss (and its backward): rows per chunk (0 = all at once)
    int64_t seed;               // dropout: its random stream (a recompute repeats it)
    int64_t window;             // attention: a query sees the `window` keys ending at itself (0: all)
    double softcap;             // attention: scores capped to softcap·tanh(s / softcap) (0: not)
    double scale;               // attention: the scores' scale (0: 1 / sqrt(head_dim))
    double offset;              // rmsnorm: y = x·rstd·(w + offset)
    int axis;                   // slice, slice_bwd, concat: the dimension
    int64_t start, size;        // slice, slice_bwd: the range [start, start + size) along axis
    OpRope rope;                // rope, rope_bwd
    int64_t pad;                // embed, embed_bwd: 1 + the id whose rows take no gradient
                                // (torch's padding_idx); 0: none
    OpPref pref;                // preference, preference_bwd
} OpAttr;

// grad_sumsq's blocks over a gradient of n elements: each sums 4096 of them (a thread
// block's 256 threads, 16 each) into a partial of the workspace, at most 1024 partials,
// which one block then adds in order. The compiler sizes the workspace and the launch
// with it, the runtime checks a plan against it.
static inline int64_t op_sumsq_blocks(int64_t n) {
    int64_t b = (n + 4095) / 4096;
    return b < 1 ? 1 : b > 1024 ? 1024 : b;
}

// Attention on tensor cores, tiled as FlashAttention-2 (codegen/cuda/attention.cuh): bf16
// throughout and a head dim its tiles divide, D % 16 == 0 up to 128 and D % 32 == 0 up to 256
// (else a warp a row). Its tiles: 64 query rows and keys up to 128 columns, 32 past them.
static inline bool op_attention_tiled(int64_t D) {
    return D > 0 && D % 16 == 0 && (D <= 128 || (D <= 256 && D % 32 == 0));
}
static inline int64_t op_attention_tile(int64_t D) { return D <= 128 ? 64 : 32; }

// The attention backward's workspace for q [B, S, H, D] and k, v [B, S, Hkv, D]: at off[0]
// Di = dy.o per query row (f32 [B, H, S]); tiled, also the dq accumulator (f32 [B, S, H, D])
// at off[1], the counters that order its additions (i32 [B, H, S / tile]) at off[2], and with
// GQA (Hkv < H) dK's and dV's per-query-head partials (f32 [B, S, H, D]) at off[3] and off[4]
// (0 where absent); each part 256-byte aligned. Returns the bytes.
static inline int64_t op_attention_bwd_layout(int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D,
                                              bool tiled, int64_t off[5]) {
#define OP_ALIGN256(x) (((x) + 255) / 256 * 256)
    int64_t at = OP_ALIGN256(4 * B * H * S), rows = B * S * H * D, tile = op_attention_tile(D);
    off[0] = 0, off[1] = off[2] = off[3] = off[4] = 0;
    if (!tiled)
        return at;
    off[1] = at, at += OP_ALIGN256(4 * rows);
    off[2] = at, at += OP_ALIGN256(4 * B * H * ((S + tile - 1) / tile));
    if (Hkv < H) {
        off[3] = at, at += OP_ALIGN256(4 * rows);
        off[4] = at, at += OP_ALIGN256(4 * rows);
    }
    return at;
#undef OP_ALIGN256
}

const char *rope_scaling_name(int scaling);     // "linear", ...; "default" for ROPE_PLAIN
bool rope_scaling_find(const char *name, int *out);

// ops.c
const OpDesc *op_desc(OpKind op);
// The op named `name`, or false.
bool op_find(const char *name, OpKind *out);
// Writes op's meaningful attributes as " key=value" pairs (plans and printouts):
// "eps=1e-06", "causal=1", "perm=1,2", "shape=8x64", "chunk=128", "seed=7", "window=4096",
// "softcap=50", "scale=0.0625", "offset=1", "axis=2 start=0 size=64", "rotary=32",
// "scaling=llama3 factor=8 low=1 high=4 original=8192", "padding=0" (the id); a field at its
// default (0) is
// left out. `exact`
// writes f with all 17 digits (plans), else as %g (printouts). Returns the length
// written (snprintf's convention).
int op_attr_format(char *buf, size_t cap, OpKind op, const OpAttr *a, bool exact);
// The attributes op reads are the same in a and b (as op_attr_format writes them exactly).
bool op_attr_equal(OpKind op, const OpAttr *a, const OpAttr *b);
// Reads one "key=value" of op's attributes into *a: 1 read, 0 not an attribute key of
// op, -1 a bad value.
int op_attr_parse(OpKind op, const char *key, const char *value, OpAttr *a);

// A whole decimal integer (the text form of plans), or false.
bool ops_parse_i64(const char *s, int64_t *v);

// The element types operands come in: the IR's DType and a plan's PlanDType are these.
typedef enum OpDType {
    OPD_F32, OPD_BF16, OPD_F16, OPD_I32, OPD_U8,
    OPD_NF4,     // 4-bit NormalFloat, two per byte; scales are separate tensors
    OPD_COUNT
} OpDType;

const char *op_dtype_name(OpDType t);                // "bf16"; "?" for none
bool op_dtype_parse(const char *s, OpDType *out);
int64_t op_dtype_bytes(OpDType t, int64_t elems);   // storage bytes, NF4 packed two per byte

//
// op_check.c — the contract's shape check over plain operand views.
//


// An operand as the contract sees it; an absent one has no name.
typedef struct OpOperand {
    const char *name;
    OpDType dtype;
    const char *dtype_name;
    int ndim;
    const int64_t *shape;
    int64_t elems, bytes;       // bytes: its storage (NF4 two elements a byte)
} OpOperand;

// Whether op `op` with `attr` takes these operands, as every backend's kernel assumes:
// dtypes of the right kind, shapes that agree (vocab: the fused loss's logits rows;
// ranks: the collectives'). 0, or -1 with what is wrong in err.
int op_check(OpKind op, const OpAttr *attr, const OpOperand *in, int nin, const OpOperand *out, int nout,
             int64_t vocab, int64_t ranks, char *err, size_t errlen);

//
// op_gemm.c — the contract's GEMM dimensions.
//

// A GEMM op's product: C[M,N] (+)= op(A) op(B), `batch` times, A stored [K,M] when ta
// (else [M,K]) and B stored [N,K] when tb (else [K,N]); A is the op's first input, B its
// second. A 2-D weight shared by a batched operand folds the batch into M (K for db).
typedef struct OpGemm {
    bool ta, tb;
    int64_t M, N, K, batch;
} OpGemm;

// The product of GEMM op `op` over its first two inputs and its output (checked as
// op_check checks them); false for an op of another class.
bool op_gemm(OpKind op, const OpOperand *a, const OpOperand *b, const OpOperand *out, OpGemm *g);

//
// op_roots.c — the owners of bytes.
//

// root[i] for each of n holders: follows next[] (the holder it is a view of, else the one
// whose bytes it takes; -1: none) to the holder that owns the bytes.
void op_roots(int n, const int *next, int *root);

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
    STREAM_COMM,        // collectives across ranks (NCCL on a GPU, MPI on the cpu backend),
                        // on device buffers
    STREAM_COUNT
} Stream;

const char *stream_name(Stream s);
bool stream_find(const char *name, Stream *out);

#endif
