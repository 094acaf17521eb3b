// plan.h — the contract between the compiler and the runtime: the plan file.
//
// A plan is line-oriented text, versioned, diffable, and complete: the runtime needs
// nothing else (not the .ft, not the compiler) to execute a training step.
//
//   ftc-plan 2
//   model tiny
//   seq 64
//   micro_batch 8
//   accum 1
//   vocab 256
//   packing 1                    (only with packing = true: the windows hold packed records,
//                                 the positions buffer restarts at each one)
//   pairs 1                      (only with a preference loss: the rows of a micro-batch are
//                                 pairs, 2j the chosen and 2j+1 the rejected completion of
//                                 one prompt, read from a paired token file; the target count
//                                 buffer is i32[2]: the step's pairs, and its chosen rows'
//                                 trained targets)
//   precision bf16
//   optimizer adamw lr=0.003 beta1=0.9 beta2=0.999 eps=1e-08 weight_decay=0
//   schedule cosine warmup=100 steps=1000 min_lr=0     (constant|linear|cosine: the
//                                      learning rate at each step, rt_lr_at; optional)
//   loss_scale init=65536 growth=2 backoff=0.5 interval=2000   (fp16: the dynamic loss
//                                      scale, rt_scale_update; optional)
//   estimate model_flops=N step_us=X (the cost model's FLOPs, without recompute, and
//                                      time of one optimizer step; optional)
//   lora r=8 alpha=16 dropout=0.05 targets=q_proj,v_proj [fan_in_fan_out=1]
//        (only with LoRA; fan_in_fan_out=1: the adapted weights are stored [in, out])
//   host cores=32 adamw_per_core=2e+08 link=2.5e+10 adamw_holds=LO,HI link_holds=LO,HI
//                                    (optional: the training host the cost model assumed:
//                                     CPU AdamW threads and parameters per second per core,
//                                     link bytes per second; the ranges of AdamW rate (all
//                                     cores) and link rate over which the planner's choice
//                                     stays the fastest, inf for no bound)
//   ranks N [zero=Z] [link=L]        (the ranks of a data-parallel job this plan is one
//                                      rank of, all of them; ZeRO stage and link for people)
//   arena device BYTES device        (the arena, its size, the memory it lives in:
//   arena host BYTES pinned           device memory, or page-locked host memory)
//   events N
//   buffers N
//   buffer ID NAME CATEGORY ARENA OFFSET BYTES DTYPE SHAPE FIRST LAST [key=value ...]
//   ...
//   phase forward N          (then N instruction lines; likewise backward, optimizer and,
//                             optionally, eval and decode)
//   ID OP out=A,B in=C,D,E [update=MASK] [ATTR=VALUE ...] [stream=S] [wait=E,F] [record=E]
//      [ws=ID] [launch=NAME:GRID:BLOCK[:SMEM] ...] [group=N | by=ID] [recompute=1] [flops=N]
//      [bytes=N] [us=T] [layer=L] [loc=LINE:COL]
//   end
//
// OP is a name from ops.def; ATTR=VALUE are the attributes its row declares (ops.h:
// op_attr_format), e.g. eps=1e-06, causal=1, perm=1,2, shape=8x64, chunk=128, seed=7.
// SHAPE is "8x64x64", or "-" for a scalar. FIRST and LAST are the indices (over all
// phases in order) of the first and last instruction touching the buffer; a buffer
// that lives for the whole step has FIRST 0 and LAST the final instruction.
// Buffer keys: kind=param|grad|state|input|value|workspace|quant|cache, hf=CHECKPOINT_NAME,
// init=normal|ones|zeros|kaiming_uniform, scale=X, train=0|1, of=PARAM_ID, view=BASE_ID
// (no bytes of its own: it reads its base's), at=BYTES (a view's start in its base's bytes,
// 0 when absent; its OFFSET is the base's plus that), reuse=ID (written in place over buffer ID,
// whose last use is this buffer's first write), layer=L, role=tokens|targets|positions|
// target_count|loss|eval_loss|logits|grad_stats|grad_factor|decode_token|decode_pos|
// decode_logits (a quant buffer: nf4_absmax, or
// nf4_absmax_codes|nf4_absmax_scales|nf4_absmax_mean for double quantisation, of=the NF4
// parameter), shard=DIMS (below).
// grad_stats and grad_factor, two f32 each, live the whole step: the optimizer phase
// starts with one grad_sumsq per gradient (their sum of squares and count of non-finite
// elements into grad_stats), then grad_factor (what every update multiplies its gradient
// by: the clip coefficient over the loss scale, and whether the step is skipped), which
// every adamw, adamw8bit and sgd reads as its second input; the runtime reads both after
// the step. A plan may instead update inside backward (plan_updates_in_backward): there
// grad_factor, reading no statistics (1 / loss scale, no skip), comes first, and each
// gradient's grad_sumsq and update follow its last contribution; the optimizer phase is
// empty, and the gradients are values (kind=value, category grads). An adamw8bit's state is its codes (u8 [2, n]: m's row, then v's) and absmaxes
// (f32 [2, ceil(n/256)]), or, for a tensor below the compiler's min_8bit_size, f32 m and v;
// the kernels tell them apart by the dtype.
// The eval phase reads the parameters and the batch inputs the runtime wrote for it, and
// only its own values otherwise; its loss (role=eval_loss) lives to its last instruction.
// The decode phase (passes/decode.c) reads the parameters, its token and position
// (decode_token, decode_pos: the runtime writes them before each run) and the KV caches
// (kind=cache [1, L, Hkv, D], L the longest sequence it can hold: each lives through the
// phase, and keeps its rows between runs, in which nothing else runs; the runtime zeroes
// them before a sequence), and its own values; its logits (decode_logits) live to its last
// instruction.
//
// Ranks: one plan serves every rank of a data-parallel job (`ranks N`); the rank itself
// comes from the launcher when the job starts. A buffer with shard=DIMS holds this rank's
// slice of a tensor of shape DIMS: of its flat elements, [rank·n, rank·n + n), n its own
// element count, so that DIMS has ranks·n elements. Alone, the slice has bytes of its own
// (sharded optimizer state, gradients, parameters); with view=B it is B's slice in place
// (B shaped DIMS, the view's bytes from byte rank·bytes(n) of B): what an optimizer
// updates, what a collective writes or reads of a whole tensor. Weights are initialised
// and loaded for the whole tensor and sliced; saved weights are gathered from every rank.
//
// Streams (ops.h): an instruction runs on `stream` (compute when absent): device
// kernels on compute and only on device buffers; `copy` instructions on d2h (device
// buffer to host buffer) or h2d (back); host instructions (CPU AdamW, host gradient
// sums) on host, only on host buffers. Within a stream instructions run in plan order;
// across streams an instruction starts only after the events in `wait` have been
// recorded, and `record=E` records event E when it is done. Each event is recorded by
// one instruction and waited for only later in the same phase; every phase ends with
// all streams drained. The verifier checks that every two instructions touching the
// same bytes, one of them writing, are ordered by stream order and events.
// A `fused` instruction (steps=N) is followed by N lines `step OP out=V in=A,B [ATTR=...]`,
// its elementwise ops in order: each reads the instruction's inputs or earlier steps'
// outputs, each output but the last's a virtual buffer (buffer key virtual=1: no bytes,
// live only inside that instruction), the last's the instruction's out[0]. A backend
// without the fused kernel runs the steps one by one, each result stored in its buffer's
// dtype.
// launch=NAME:GX,GY,GZ:BX,BY,BZ[:SMEM] (repeated, in order) names a kernel of the plan's
// kernels.cu the instruction runs on a GPU, with its grid and block, and the bytes of
// dynamic shared memory it declares (FTC_DYN_SMEM; absent: none); a buffer's operands
// reach it in plan order (outputs, inputs, workspace; codegen/cuda/prelude.cuh). us=T is
// the cost model's time for one run on the device (traces and kernels.txt show it).
// group=N on an instruction with one launch: that launch (a grouped kernel, e.g. AdamW
// over many tensors) does the work of it and of the N-1 instructions after it in its
// phase, each of which says by=ID (the first's id) and has no launch of its own. The
// members share the first's op and stream, wait for and record no event, and their
// operands are alive at the first (the verifier checks it all); a backend without the
// grouped kernel runs every member as an instruction of its own.
// Collectives (all_reduce, reduce_scatter, all_gather: ops.def) run on the comm stream,
// on device buffers; a group of them (group=N, by=ID) is one bucket, issued as one call
// once the first's waits are met. last=1: the instruction runs only on the last micro-step
// of each step (a gradient's reduction under accumulation, as DDP's no_sync leaves the
// others local); on the others it is skipped, its waits and record kept, and nothing of
// the micro-step reads what it writes.
// Other instruction keys: ws=ID (scratch), recompute=1 (a forward op re-run in
// backward), flops=N, bytes=N (estimates).
#ifndef FTC_RUNTIME_PLAN_H
#define FTC_RUNTIME_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ops.h"

enum { PLAN_VERSION = 2, PLAN_MAX_DIMS = OP_MAX_DIMS, PLAN_MAX_IN = 7, PLAN_MAX_OUT = 4,
       PLAN_MAX_WAITS = STREAM_COUNT - 1, PLAN_MAX_LAUNCHES = 3,
       PLAN_GROUP_MAX = 64, PLAN_GROUP_OPERANDS = 6 };   // prelude.cuh's FTC_GROUP_*

// A plan's dtypes are the op contract's (ops.h: their names and sizes too).
typedef OpDType PlanDType;
#define PDT_F32 OPD_F32
#define PDT_BF16 OPD_BF16
#define PDT_F16 OPD_F16
#define PDT_I32 OPD_I32
#define PDT_U8 OPD_U8
#define PDT_NF4 OPD_NF4
#define PDT_COUNT OPD_COUNT
typedef enum PlanArena { ARENA_DEVICE, ARENA_HOST, ARENA_COUNT } PlanArena;
typedef enum PlanKind { PK_PARAM, PK_GRAD, PK_STATE, PK_INPUT, PK_VALUE, PK_WORKSPACE, PK_QUANT, PK_CACHE } PlanKind;
typedef enum PlanInit { PINIT_NORMAL, PINIT_ONES, PINIT_ZEROS, PINIT_KAIMING_UNIFORM } PlanInit;
// PHASE_EVAL (optional in a plan): the forward and its loss on an evaluation batch,
// run between steps; it saves nothing for a backward and makes no gradient.
// PHASE_DECODE (optional): one token of generation, run apart from training: the forward
// at one position over the KV cache buffers (kind=cache), into its logits.
// PHASE_REF (optional): a preference loss's reference model over a batch, run over the
// data before the first step: its log-probabilities (role ref_out), whose rows' sums the
// step reads back (role ref_logps).
typedef enum PlanPhase { PHASE_FWD, PHASE_BWD, PHASE_OPT, PHASE_EVAL, PHASE_DECODE, PHASE_REF, PHASE_COUNT } PlanPhase;
typedef enum PlanSchedule { SCHED_CONSTANT, SCHED_LINEAR, SCHED_COSINE } PlanSchedule;

// What the runtime and the backends look a buffer up by (role= in the plan, parsed once):
// the batch the runtime writes, the loss and logits it reads, the gradients' reduction, an
// NF4 parameter's quantisation buffers.
// The optimizer line's name, parsed once (PO_NONE: no such line yet).
typedef enum PlanOptimizer { PO_NONE, PO_ADAMW, PO_ADAMW8BIT, PO_SGD } PlanOptimizer;

typedef enum PlanRole {
    PR_NONE,
    PR_TOKENS, PR_TARGETS, PR_POSITIONS, PR_TARGET_COUNT,   // i32: written before a micro-step
    PR_LOSS, PR_EVAL_LOSS, PR_LOGITS,
    PR_GRAD_STATS, PR_GRAD_FACTOR,                          // f32 [2] each
    PR_DECODE_TOKEN, PR_DECODE_POS,                         // i32 [1, 1]: the decode phase's token
    PR_DECODE_LOGITS,                                       // and position; its logits [1, 1, V]
    PR_PREF_STATS,                                          // f32 [PREF_STATS]: a preference loss's
    PR_REF_LOGPS, PR_REF_OUT,                               // f32 [B], [B, S]: its precomputed reference
    PR_NF4_ABSMAX, PR_NF4_ABSMAX_CODES, PR_NF4_ABSMAX_SCALES, PR_NF4_ABSMAX_MEAN,
    PR_COUNT
} PlanRole;

typedef struct PlanBuffer {
    int id;
    char *name;
    char *category;         // weights, grads, optimizer, master, activations, ...
    PlanArena arena;
    int64_t offset, bytes;
    PlanDType dtype;
    int ndim;
    int64_t shape[PLAN_MAX_DIMS];
    int first, last;        // instruction indices, over all phases
    PlanKind kind;
    char *hf;               // PK_PARAM: checkpoint name
    PlanInit init;
    double init_scale;
    bool trainable;
    int of;                 // PK_GRAD, PK_STATE: the parameter's buffer id; else -1
    int copy_of;            // PK_PARAM: the parameter it is a frozen copy of (a preference
                            // loss's reference): initialised as that one, never saved; else -1
    int view;               // a view of buffer `view` (shares its bytes); else -1
    int64_t view_at;        // a view: where its bytes start in its base's
    int reuse;              // written in place over buffer `reuse`, which dies as this is
                            // born (same bytes, same offset); else -1
    int layer;              // repeat index of the block that made it, else -1
    PlanRole role;          // role=: what the runtime looks it up by (PR_NONE: nothing)
    bool virt;              // an intermediate of a fused instruction: no bytes, no place
    int shard_ndim;         // > 0: this rank's slice of a tensor of shape `shard` (with view:
    int64_t shard[PLAN_MAX_DIMS];   // of the base, in place)
} PlanBuffer;

// One step of a fused instruction: an elementwise op over buffers that are the fused
// instruction's operands or virtual intermediates of earlier steps.
typedef struct PlanStep {
    OpKind op;
    int nin;
    int in[PLAN_MAX_IN];
    int out;
    OpAttr attr;
} PlanStep;

// A generated kernel an instruction launches (kernels.cu), with its grid and block, and the
// dynamic shared memory it declares (FTC_DYN_SMEM; 0 for none).
typedef struct PlanLaunch {
    char name[64];
    unsigned grid[3], block[3];
    unsigned smem;
} PlanLaunch;

// The most dynamic shared memory a block can have on any GPU ftc plans for (sm_90's 227 KiB);
// a device's own limit is checked before step one.
enum { PLAN_MAX_SMEM = 232448 };

typedef struct PlanInstr {
    int id;                 // index over all phases
    OpKind op;              // from ops.def
    int nin, nout;
    int in[PLAN_MAX_IN];    // buffer ids; -1 for an absent optional input
    int out[PLAN_MAX_OUT];
    unsigned update;        // bit k: out[k] exists before it and is read-modify-written
    OpAttr attr;            // the fields op's row declares
    Stream stream;
    int nwait;              // events to wait for before starting
    int wait[PLAN_MAX_WAITS];
    int record;             // the event recorded when done, else -1
    int ws;                 // its workspace buffer, else -1
    int nlaunch;            // generated kernels it runs on a GPU, in order (none: a GEMM,
    PlanLaunch launch[PLAN_MAX_LAUNCHES];   // a view or a copy)
    int group;              // its launch covers it and the next group-1 of its phase; else 0
    int by;                 // the id of the instruction whose launch covers it; else -1
    int nstep;              // op fused: its steps, in order (malloc'd), the last writing out[0]
    PlanStep *step;
    bool recompute;         // a forward op re-run in backward
    bool last;              // runs only on a step's last micro-step (skipped on the others)
    int64_t flops, bytes;   // estimated work and traffic (for the cost model and traces)
    double est_us;          // the cost model's time for one run on the device (0: none given)
    int layer;
    int line, col;          // where in the .ft it came from
} PlanInstr;

typedef struct Plan {
    int version;
    char *model;
    char *gpu;              // the preset it was planned for, or NULL
    char *source;           // the .ft it was compiled from (for messages), or NULL
    int64_t budget_bytes, reserve_bytes;
    int64_t seq, micro_batch, accum, vocab;
    bool packing;           // records packed into windows: position ids restart per record
    bool pairs;             // rows 2j, 2j+1 the chosen and rejected of a pair (a preference loss)
    char *precision;
    PlanOptimizer optimizer;
    double lr, beta1, beta2, eps, weight_decay;
    PlanSchedule schedule;  // the learning rate over the run
    int64_t warmup_steps;   // of a linear rise from 0
    int64_t steps;          // the run's optimizer steps (0: not given; constant only)
    double min_lr;          // where linear and cosine end, at `steps`
    double scale_init;      // fp16's dynamic loss scale, torch.amp.GradScaler's: its start
    double scale_growth, scale_backoff; // (0: no loss scaling), its factors,
    int64_t scale_interval; // and the steps without an overflow before it grows
    int ranks;              // the data-parallel job's ranks (1: a single process)
    int zero;               // the ZeRO stage it was planned with (for people), -1 none
    char *link;             // the link preset it was planned for, or NULL
    int64_t model_flops;    // the compiler's estimate for one optimizer step: FLOPs
    double est_step_us;     // without recompute, and time (0: none in the plan)
    int host_cores;         // the host the cost model assumed (0: the plan does not say)
    double host_adamw_per_core, host_link;  // parameters/s a core, link bytes/s
    double adamw_lo, adamw_hi;  // AdamW rates (all cores) over which the choice holds
    double link_lo, link_hi;    // link rates over which the choice holds
    int64_t lora_r;         // 0 without LoRA
    double lora_alpha, lora_dropout;
    char *lora_targets;     // comma-separated module names
    bool lora_fan_in_fan_out;   // the adapted weights are stored [in, out] (PEFT's fan_in_fan_out)
    int64_t arena_bytes[ARENA_COUNT];
    MemKind arena_kind[ARENA_COUNT];
    int events;             // event ids are 0 .. events-1
    PlanBuffer *buf;
    int nbuf;
    PlanInstr *ins[PHASE_COUNT];
    int nins[PHASE_COUNT];
} Plan;

static inline const char *plan_dtype_name(PlanDType t) { return op_dtype_name(t); }
static inline int64_t plan_dtype_bytes(PlanDType t, int64_t elems) { return op_dtype_bytes(t, elems); }
int64_t plan_elems(const PlanBuffer *b);
const char *plan_phase_name(PlanPhase p);
// The phase instruction `id` belongs to.
PlanPhase plan_instr_phase(const Plan *p, int id);
// Formats a byte count for people: "15.23 GiB", "512.0 MiB", "16.0 KiB", "12 B".
const char *fmt_bytes(char *buf, size_t cap, int64_t bytes);

// Reads the plan at `path`; 0, or -1 with "path:line: message" in err.
int plan_load(Plan **out, const char *path, char *err, size_t errlen);
void plan_free(Plan *p);
// The buffer with role `role`, or NULL.
const PlanBuffer *plan_role(const Plan *p, PlanRole role);
// A role's name in the plan ("tokens"), and back: false for a name that is none.
const char *plan_role_name(PlanRole role);
bool plan_role_parse(const char *name, PlanRole *role);
// Whether the plan updates parameters inside backward (each as soon as its gradient is
// complete: ftc compile --update backward), not in an optimizer phase after it.
bool plan_updates_in_backward(const Plan *p);
// The buffer whose bytes `id` uses (through view and reuse links).
int plan_root(const Plan *p, int id);
// plan_root of every buffer at once (malloc'd; each link followed once).
int *plan_roots(const Plan *p);
// Byte offset of buffer `id` from its root's bytes on rank `rank`: a shard view's slice.
int64_t plan_shard_offset(const Plan *p, int id, int rank);
// The instruction with index `id` over all phases, or NULL.
const PlanInstr *plan_instr(const Plan *p, int id);
int plan_instr_count(const Plan *p);

//
// verify.c — the plan verifier, independent of the allocator that made the plan.
//

// Checks that the device arena plus the context reserve fits the plan's budget, that
// buffers whose lifetimes overlap share no bytes (but for a declared
// in-place reuse), every buffer lies inside its arena, every instruction's operands
// exist, every read follows a write, and every touch lies inside the buffer's lifetime.
// Returns the number of problems; each is written to `out` (if not NULL) naming the
// buffers and instructions.
int plan_verify(const Plan *p, FILE *out);
// Whether an instruction's operands are what its op's kernels take (op_check: dtype kinds,
// shapes that agree, the outputs it writes); -1 with err saying what is not.
int plan_check_instr(const Plan *p, const PlanInstr *in, char *err, size_t errlen);
// Buffer `id` of p as the op contract sees it (ops.h; id < 0: absent).
OpOperand plan_operand(const Plan *p, int id);

// The fused loss (linear_cross_entropy and its _grad) over x [rows, k], W [vocab, k]:
// `chunk` rows at a time (a divisor of rows), the chunk's logits in x's dtype at the start
// of its workspace, the rows' fp32 loss terms at `terms`, the count of valid targets (an
// i32) at `count` (each 256-byte aligned); `bytes` the workspace it needs. What the
// workspace holds past `bytes` (256-aligned), `lib_bytes` of it, is the GEMM library's, for
// the chunk's products.
typedef struct PlanLoss {
    int64_t rows, chunk, vocab, k;
    int64_t terms, count, bytes, lib_bytes;
} PlanLoss;

// The layout of fused-loss instruction `in` (its operands as plan_check_instr accepts them).
PlanLoss plan_loss(const Plan *p, const PlanInstr *in);

#endif
