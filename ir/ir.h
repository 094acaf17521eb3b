// ir.h — the graph every stage of ftc speaks: tensors with concrete shapes and
// dtypes, nodes that apply an op from the op table, and the arena they live in.
//
// The op table (op.c) is the single place that knows an op: arity, shape rule,
// FLOPs, bytes moved, and what its backward needs. Passes see only this graph;
// nothing here knows "a transformer".
#ifndef FTC_IR_H
#define FTC_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../runtime/ops.h"   // the op vocabulary shared with plans (OpKind, OpAttr)

//
// arena.c — compile-time objects live in one arena per compilation, freed at once.
//

typedef struct Arena Arena;

Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t bytes);          // zeroed, 16-byte aligned
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// A growable array of T carved from the heap; freed with vec_free.
#define VEC(T) struct { T *at; int len, cap; }
#define vec_push(v, x)                                                          \
    do {                                                                        \
        if ((v)->len == (v)->cap) vec_grow_((void **)&(v)->at, &(v)->cap, sizeof *(v)->at); \
        (v)->at[(v)->len++] = (x);                                              \
    } while (0)
#define vec_free(v) (free((v)->at), (v)->at = NULL, (v)->len = (v)->cap = 0)
void vec_grow_(void **at, int *cap, size_t elem);

//
// A source location: every token, AST node and IR node carries one, so every
// error (including one found in backward) points at the line the user wrote.
//

typedef struct SrcLoc {
    const char *file;   // path as given by the user; NULL for generated code
    int line, col;      // 1-based
    int len;            // bytes underlined by the caret
} SrcLoc;

//
// Dtypes and memory categories.
//

// The IR's dtypes are the op contract's (runtime/ops.h: their names and sizes too).
typedef OpDType DType;
#define DT_F32 OPD_F32
#define DT_BF16 OPD_BF16
#define DT_F16 OPD_F16
#define DT_I32 OPD_I32
#define DT_U8 OPD_U8
#define DT_NF4 OPD_NF4
#define DT_COUNT OPD_COUNT

typedef enum MemCategory {
    MEM_WEIGHTS,      // parameters in their compute/storage dtype
    MEM_GRADS,        // parameter gradients
    MEM_OPTIMIZER,    // optimizer state (AdamW m, v)
    MEM_MASTER,       // fp32 master copies of trainable parameters
    MEM_ACTIVATIONS,  // forward tensors saved for backward
    MEM_RECOMPUTE,    // tensors rebuilt in backward
    MEM_TEMPORARIES,  // everything else with a short life
    MEM_WORKSPACE,    // GEMM workspace, kernel scratch
    MEM_IO,           // token batches
    MEM_KV_CACHE,     // the decode step's keys and values of the tokens so far
    MEM_REFERENCE,    // a preference loss's reference model: its frozen copy of the weights
    MEM_RESERVE,      // modeled CUDA context and library handles
    MEM_COUNT
} MemCategory;

// tensor.c (with ir_tensor_elems ... ir_same_shape below): dtypes, categories, a tensor's
// sizes and shape text, apart from any graph's nodes.
static inline const char *dtype_name(DType t) { return op_dtype_name(t); }
static inline bool dtype_parse(const char *s, DType *out) { return op_dtype_parse(s, out); }
static inline int64_t dtype_bytes(DType t, int64_t elems) { return op_dtype_bytes(t, elems); }
const char *mem_category_name(MemCategory c);

//
// Tensors and nodes.
//

enum { IR_MAX_DIMS = OP_MAX_DIMS, IR_MAX_INPUTS = 7, IR_MAX_OUTPUTS = 4, IR_MAX_WAITS = STREAM_COUNT - 1 };

typedef enum TensorKind {
    TK_PARAM,     // a parameter (trainable or frozen); hf_name is its checkpoint name
    TK_INPUT,     // a batch input (token ids, targets)
    TK_VALUE,     // produced by a node
    TK_GRAD,      // a parameter's gradient, accumulated over micro-batches; `of` the param
    TK_STATE,     // optimizer state or fp32 master copy of param `of`; cat says which
    TK_WORKSPACE, // scratch of one node (`producer`), live only while it runs
    TK_QUANT,     // quantisation data of NF4 param `of` (absmax, or its codes/scales/mean)
    TK_CACHE,     // a decode step's KV cache [B, L, Hkv, D]: lives through the decode phase,
                  // keeps its rows between the phase's runs (the runtime zeroes it to start)
} TensorKind;

// How the runtime initialises a parameter that no checkpoint provides.
typedef enum IrInit {
    INIT_NORMAL,          // normal(0, init_scale)
    INIT_ONES,            // norm weights
    INIT_ZEROS,           // biases, LoRA B
    INIT_KAIMING_UNIFORM, // uniform(-init_scale, init_scale): LoRA A, as PEFT does
} IrInit;

typedef struct IrTensor {
    int id;
    const char *name;       // unique, readable: "decoder.3.h", "model.norm.weight"
    const char *hf_name;    // TK_PARAM only: Hugging Face safetensors name
    TensorKind kind;
    DType dtype;
    int ndim;
    int64_t shape[IR_MAX_DIMS];
    MemCategory cat;
    int producer;           // node id, -1 for params and inputs
    int alias_of;           // a view shares its base's bytes: base tensor id, else -1
    int64_t alias_offset;   // a view: where its bytes start in its base's
    int layer;              // repeat index, -1 outside any repeated block
    bool trainable;         // TK_PARAM: gets a gradient and optimizer state
    int copy_of;            // TK_PARAM: the parameter it is a frozen copy of (a preference
                            // loss's reference = copy: loaded and initialised as that one,
                            // never saved), else -1
    const char *decl;       // TK_PARAM: the name in the .ft ("wq"); LoRA targets match it
    bool requires_grad;     // some trainable parameter flows into it
    bool virt;              // an intermediate of a fused kernel: never stored, no bytes
    IrInit init;            // TK_PARAM: how to initialise it without a checkpoint
    double init_scale;
    int of;                 // TK_GRAD, TK_STATE: the parameter; else -1
    int shard_of;           // this rank's slice (1/ranks of the elements, flat) of tensor
                            // shard_of, whose shape is the whole; with alias_of the same tensor
                            // its slice in place; else -1 (the shard pass)
    // Set by liveness and alloc (passes/); -1 before.
    int first, last;        // node indices of its first write and last use
    int reuse;              // shares the bytes of this tensor (in place), else -1
    int arena;              // 0 device, 1 host
    int64_t offset;         // in its arena
    SrcLoc loc;
} IrTensor;

typedef enum IrPhase {
    PHASE_FORWARD,          // the micro-step's forward and loss
    PHASE_BACKWARD,         // the micro-step's backward
    PHASE_OPTIMIZER,        // once per step, after the last micro-step
    PHASE_EVALUATION,       // forward only, on an evaluation batch, between steps: reads
                            // the parameters and the batch inputs, saves nothing
    PHASE_DECODING,         // one token of generation (passes/decode.c): the forward at one
                            // position over the KV cache, its logits; run apart from training
    PHASE_REFERENCE,        // a preference loss's reference model over a batch, before the
                            // first step (passes/reference.c): its log-probabilities
} IrPhase;

typedef struct IrNode {
    int id;
    OpKind op;
    int nin;
    int in[IR_MAX_INPUTS];  // tensor ids; -1 for an absent optional input
    int out[IR_MAX_OUTPUTS];// out[0] the result; forward ops keep a statistic for backward
                            // in out[1] (norm rstd, attention lse, dropout mask); -1 unused
    uint8_t update;         // bit k: out[k] already exists and is read-modify-written
                            // (+= into a gradient, an optimizer update in place)
    OpAttr attr;
    int layer;              // repeat index, -1 outside any repeated block
    IrPhase phase;
    int ws;                 // its TK_WORKSPACE tensor (set by liveness), else -1
    double est_us;          // the cost model's time for one run of it on the device (cost_stamp,
                            // before the plan is written); 0 unknown or not the device's
    bool recompute;         // a forward node re-run in backward (remat)
    bool reference;         // of a preference loss's reference model: no LoRA path, no gradient,
                            // no decode step
    uint8_t stream;         // the Stream it runs on: STREAM_HOST for the CPU (an offloaded
                            // optimizer, a host gradient sum), a copy stream for OP_COPY
    int8_t nwait;           // events it waits for before it starts (set by the streams pass)
    int wait[IR_MAX_WAITS];
    int record;             // the event it records when done, else -1
    int fused;              // OP_FUSED: its steps, g->fused.at[fused]; else -1
    bool last;              // runs only on a step's last micro-step (a collective that waits
                            // for the whole accumulation, as DDP's no_sync); else every one
    int bucket;             // collectives: consecutive nodes with the same bucket (>= 0) are one
                            // call on the comm stream; else -1
    SrcLoc loc;
} IrNode;

enum { IR_MAX_FUSED = 8 };

// The steps of a fused kernel, in order: each an elementwise node whose inputs are the
// fused node's inputs or earlier steps' outputs (virtual tensors); the last step writes
// the fused node's output.
typedef struct IrFused {
    int n;
    IrNode step[IR_MAX_FUSED];
} IrFused;

static inline int ir_node_nout(const IrNode *n) {
    int k = 0;
    while (k < IR_MAX_OUTPUTS && n->out[k] >= 0)
        k++;
    return k;
}

// How a preference loss has its reference model's log-probabilities (dpo, ipo).
typedef enum RefMode {
    REF_NONE,           // no reference: cross entropy, orpo, simpo
    REF_AUTO,           // the planner's choice among the others
    REF_COPY,           // a frozen copy of the initial weights, run in each micro-step
    REF_LORA_OFF,       // the policy's own frozen base, its LoRA paths left out
    REF_PRECOMPUTED,    // each row's sum, written by a pass over the data before training
    REF_COUNT
} RefMode;
const char *ref_mode_name(RefMode r);

// What a training step does with the parameters: the dtypes of each copy.
typedef struct IrStep {
    DType weight_dt;        // parameters as the forward reads them
    DType compute_dt;       // activations
    DType grad_dt;          // parameter gradients
    bool master;            // fp32 master copies of trainable parameters
    DType optim_dt;         // optimizer state elements
    int optim_states;       // state tensors per parameter: AdamW 2, SGD 0
    double weight_decay;    // AdamW's, on every trainable parameter when decay_all, else
    bool decay_all;         // not on norm weights and biases (ir_param_decays)
    double clip;            // the gradients' global L2 norm clipped to this, 0: never
    bool kahan;             // no master: each update Kahan-compensated through a buffer
                            // of the weight's dtype (bf16_pure), so small updates add up
    bool adam8;             // AdamW8bit (optim_states 2): a parameter of at least
    int64_t adam8_min_elems;// adam8_min_elems elements keeps its moments as 8-bit codes
                            // with an fp32 absmax per IR_ADAM8_BLOCK of them; the rest
                            // 32-bit (bitsandbytes' min_8bit_size)
} IrStep;

// AdamW8bit's blocks: each IR_ADAM8_BLOCK elements share one absmax per moment;
// bitsandbytes' default min_8bit_size.
enum { IR_ADAM8_BLOCK = 256, IR_ADAM8_MIN_ELEMS = 4096 };

typedef struct IrGraph {
    Arena *arena;
    VEC(IrTensor) tensors;
    VEC(IrNode) nodes;      // in a valid execution order (every input made earlier)
    int loss;               // the scalar loss tensor, -1 while there is none
    int logits;             // the tensor fed to the loss, -1 while there is none
    int pref_stats;         // a preference loss's stats (its out[1]), else -1
    int ref_out;            // reference = precomputed: the reference phase's log-probabilities
    int ref_logps;          // [B, S] and the batch input [B] of their rows' sums; else -1
    int eval_loss;          // the eval phase's loss (passes/eval.c), -1 while there is none
    int decode_token;       // the decode phase's (passes/decode.c) inputs, i32 [1, 1]: the
    int decode_pos;         // token and its position; its logits [1, 1, V]; -1 while there
    int decode_logits;      // is no decode phase
    int64_t batch, seq;     // B and S the graph was elaborated for
    IrStep step;
    int grad_stats;         // f32[2]: the gradients' sum of squares and non-finite count,
    int grad_factor;        // f32[2]: what the updates scale them by, and whether to skip
                            // (autodiff makes both; the runtime reads them after a step)
    int events;             // events the streams pass made
    VEC(IrFused) fused;     // the steps of OP_FUSED nodes (the fuse pass)
    int64_t gemm_workspace_bytes;   // scratch a GEMM's library call gets (cuBLASLt), 0: none
    bool lora_fan_in_fan_out;       // the LoRA targets' weights are stored [in, out] (the lora pass)
    bool packing;           // windows hold packed records: the position ids restart at each
                            // record and attention masks the others (the runtime fills them)
    int ranks;              // the data-parallel ranks one rank's graph is planned for (1: none)
    bool pairs;             // a preference loss: rows 2j, 2j+1 a pair's chosen and rejected
    RefMode reference;      // how its reference is had (REF_NONE: it has none)
} IrGraph;

// graph.c
IrGraph *ir_graph_new(Arena *a);
void ir_graph_free(IrGraph *g);   // frees the vectors; the arena belongs to the caller
// A copy of `g` whose new objects go to arena `a`; its strings stay in g's arena, which
// must outlive the copy.
IrGraph *ir_graph_clone(const IrGraph *g, Arena *a);
int ir_tensor_add(IrGraph *g, const char *name, TensorKind kind, DType dt, int ndim,
                  const int64_t *shape, SrcLoc loc);
IrTensor *ir_tensor(IrGraph *g, int id);
// Removes the values no node reads or writes (what a pass that replaced nodes left
// behind), renumbering every tensor id the graph holds; returns how many went.
int ir_drop_unused(IrGraph *g);
// Recomputes requires_grad of every value from the trainable flags of the params.
void ir_mark_requires_grad(IrGraph *g);
// The number of repeated-block instances (the largest layer index + 1).
int ir_layers(const IrGraph *g);
// Sets each parameter's initialisation from the op-table role it plays (norm weights
// ones, biases zeros); the rest stay normal(0, 0.02).
void ir_set_param_init(IrGraph *g);
// Per tensor id, whether weight decay applies to it: everywhere with step.decay_all,
// else not on a parameter of one dimension (a bias or a norm weight, however it is read:
// `matmul(x, W) + b` adds its bias with an add) nor where some node reads a tensor in a
// norm weight's or a bias's place (the inputs the op table initialises to ones or zeros),
// as Hugging Face's Trainer leaves out biases and norm weights. `decays` holds
// g->tensors.len entries.
void ir_param_decays(const IrGraph *g, bool *decays);

// tensor.c
int64_t ir_tensor_elems(const IrTensor *t);
int64_t ir_tensor_bytes(const IrTensor *t);     // 0 for a view: its base owns the bytes
int ir_tensor_base(const IrGraph *g, int id);   // follows alias_of to the owner
int ir_shape_str(char *buf, size_t cap, const IrTensor *t);  // "[2, 2048, 3584] bf16"
bool ir_same_shape(const IrTensor *a, const IrTensor *b);   // the same dims, in order
int ir_dim_index(int d, int ndim);   // d counted from the end when negative: 0..ndim-1, or -1

// The shape rule of `op` checks the inputs and fills the output; on a mismatch it
// returns false and writes a message naming both shapes into `err`.
typedef struct IrShapeErr { char msg[256]; int arg; } IrShapeErr;

// Appends a node; runs the op's shape rule and, on success, creates its output
// tensors named `name` (a statistic gets a suffix). Returns the node id, or -1 with
// `err` filled.
int ir_node_add(IrGraph *g, OpKind op, int nin, const int *in, OpAttr attr,
                const char *name, int layer, SrcLoc loc, IrShapeErr *err);
// Appends a node doing what `src` does (its op, attributes, block and source location)
// on `in` (src->nin inputs) in `phase`, its outputs named from `name`: a recomputed value,
// the eval phase's forward. What it makes feeds no gradient (requires_grad cleared). Node id.
int ir_node_redo(IrGraph *g, const IrNode *src, const int *in, const char *name, IrPhase phase);
// Appends a copy of tensor `from` into a new tensor `name`, on `stream` in `phase`, at
// node `at`'s block and source location. The new tensor's id.
int ir_copy_add(IrGraph *g, int from, const char *name, const IrNode *at, IrPhase phase,
                Stream stream);
// Appends a node that read-modify-writes existing tensors `outs` (gradients, optimizer
// state); their element counts must match what the shape rule computes. Node id.
int ir_node_add_update(IrGraph *g, OpKind op, int nin, const int *in, OpAttr attr,
                       int nout, const int *outs, int layer, SrcLoc loc);

// Rebuilding the node list in one walk (a pass that inserts nodes around existing
// ones): begin moves the nodes aside and leaves the list empty; next hands out each old
// node in order (a copy the pass may change); nodes the pass adds with ir_node_add land
// in the new list where they are added; keep appends the (changed) old node,
// renumbering it and making it the producer of the outputs it assigns.
//
//   IrRewrite rw;
//   ir_rewrite_begin(&rw, g);
//   for (IrNode n; ir_rewrite_next(&rw, &n);) {
//       ... nodes added here run before n ...
//       ir_rewrite_keep(&rw, &n);
//       ... and here after it
//   }
//   ir_rewrite_end(&rw);
typedef struct IrRewrite {
    IrGraph *g;
    IrNode *old;
    int nold, at;           // old nodes, and the index of the next one
} IrRewrite;

void ir_rewrite_begin(IrRewrite *rw, IrGraph *g);
bool ir_rewrite_next(IrRewrite *rw, IrNode *n);
int ir_rewrite_keep(IrRewrite *rw, IrNode *n);   // the node's new id
// Points the producer of every tensor node n makes (a fused node's intermediates too) at n.
void ir_claim_outputs(IrGraph *g, const IrNode *n);
void ir_rewrite_end(IrRewrite *rw);
// A rewrite that only drops nodes (and edits the rest where they stand) runs in place: the
// nodes not marked in drop[] (by index) keep their order, take their new indices as ids
// and claim their outputs.
void ir_nodes_drop(IrGraph *g, const bool *drop);

//
// op.c — the compiler's columns of the op table. An op's name, class, arity and
// attribute schema are its row in runtime/ops.def (op_desc); these are what only the
// compiler needs: shape rule, FLOPs, bytes, what backward reads (the derivative rule is
// derive.c's column).
//

enum {                      // bits of OpInfo.grad_needs: what a backward reads
    NEED_IN0 = 1 << 0, NEED_IN1 = 1 << 1, NEED_IN2 = 1 << 2, NEED_IN3 = 1 << 3,
    NEED_OUT = 1 << 4, NEED_AUX = 1 << 5,   // out[0], out[1]
};

typedef struct Autodiff Autodiff;   // passes/autodiff.c

typedef struct OpInfo {
    // Output shapes and dtypes from the inputs into out[0..]: an output the op does
    // not make keeps ndim = -1. False with err filled on a mismatch.
    bool (*shape)(const IrGraph *g, const IrNode *n, IrTensor *out, IrShapeErr *err);
    int64_t (*flops)(const IrGraph *g, const IrNode *n);
    int64_t (*bytes_read)(const IrGraph *g, const IrNode *n);   // NULL: all inputs once
    // OPC_GEMM ops: the product's dimensions (M x K times K x N; batched products count
    // their batch in M). NULL for the other classes.
    void (*gemm)(const IrGraph *g, const IrNode *n, int64_t *m, int64_t *nn, int64_t *k);
    // OPC_LOSS_GEMM ops: the products of one row chunk (dims[i] = M, N, K; recompute[i]
    // when product i forms again what the forward formed); returns how many. The op runs
    // them for every chunk (attr.chunk_rows rows of its first input).
    int (*gemm_loss)(const IrGraph *g, const IrNode *n, int64_t dims[][3], bool *recompute);
    // grad_needs[i]: what computing the gradient of input i reads (NEED_* bits).
    // An input with requires_grad set makes its row's tensors saved for backward.
    uint8_t grad_needs[IR_MAX_INPUTS];
    int64_t (*scratch_bytes)(const IrGraph *g, const IrNode *n); // NULL: none
    uint8_t init[IR_MAX_INPUTS];    // how a parameter in input k is initialised (IrInit)
    int8_t inplace_in;              // OPF_INPLACE ops: the only input whose bytes the output
                                    // may take, plus 1 (0: any same-sized input)
    int8_t acc_in;                  // an optional last input the result is added into (a
                                    // backward sum's terms so far), plus 1; 0: none
    const char *aux;                // the name suffix of out[1] ("stats", "lse", "mask")
    // Elementwise ops: the device code of one element, C statements that set `y` from
    // the inputs x0, x1, ... (fp32; an input of fewer elements is broadcast), the
    // attribute `c` and, for an update, y's old value; the CUDA emitter makes the kernel
    // around it. Its arithmetic is the cpu backend's kernel's, operation for operation.
    const char *device;
} OpInfo;

const OpInfo *op_info(OpKind op);
// The op a .ft call names: a user op (OPF_USER) called `name`, or false.
bool op_lookup_user(const char *name, OpKind *out);
// An attribute an op takes in .ft after its tensor arguments.
typedef enum OpKwKind {
    KW_NUMBER,      // a number
    KW_COUNT,       // an integer >= 0
    KW_INT,         // an integer (a dimension may count from the end: -1 the last)
    KW_BOOL,        // true or false; `causal` alone means causal = true
    KW_SHAPE,       // a list of dimensions, [B, S, dim]
    KW_PAIR,        // two dimension indices, [1, 2]
    KW_WORD,        // a name (rope's scaling: default, linear, dynamic, llama3, yarn)
} OpKwKind;

typedef enum OpKwField {    // the OpAttr field a keyword sets
    KF_F, KF_CAUSAL, KF_AXIS, KF_START, KF_SIZE, KF_SHAPE, KF_PERM, KF_WINDOW, KF_SOFTCAP,
    KF_SCALE, KF_OFFSET, KF_ROTARY, KF_SCALING, KF_FACTOR, KF_LOW, KF_HIGH, KF_ORIGINAL,
    KF_LENGTH, KF_ATTN_FACTOR, KF_TRUNCATE, KF_PAD, KF_COUNT
} OpKwField;

typedef struct OpKeyword {
    const char *word;       // "eps", "causal", "window", ...
    OpKwKind kind;
    bool positional;        // may follow the tensors without its name, in this order
    OpKwField field;
    bool required;          // positional, and the op's attributes are not optional
} OpKeyword;

enum { OP_MAX_KEYWORDS = 16 };

// The .ft attributes of `op` into out[], in order; their count (0 for none).
int op_user_keywords(OpKind op, OpKeyword out[OP_MAX_KEYWORDS]);
int64_t op_flops(const IrGraph *g, const IrNode *n);
// Whether attention node n (forward or backward) runs the tiled tensor-core kernels: its
// operands and results bf16 and its head dim one runtime/ops.h's op_attention_tiled takes.
bool ir_attention_tiled(const IrGraph *g, const IrNode *n);
int64_t op_bytes_read(const IrGraph *g, const IrNode *n);
int64_t op_bytes_written(const IrGraph *g, const IrNode *n);

//
// grad.c — what a derivative rule (derive.c) may call. The autodiff
// pass (passes/autodiff.c) owns the walk; a rule only reads the gradient of its
// node's outputs and contributes gradients to its inputs.
//

struct Autodiff {
    IrGraph *g;
    int *grad;          // per tensor id: its gradient so far, -1 if none; params: TK_GRAD
    int cap;            // entries in `grad`
    double loss_scale;  // d(loss)/d(micro-batch loss): 1 / accumulation steps
    bool gemm_temporaries;  // a weight gradient's GEMM writes a temporary an acc adds in
                            // (the plan without β = 1, for comparison), not the gradient
};

// Whether tensor `t` needs a gradient (some trainable parameter flows into it).
bool ad_needs(const Autodiff *ad, int t);
// The gradient of forward node `n`'s output k, or -1 when none reaches it.
int ad_dy(Autodiff *ad, const IrNode *n, int k);
// Appends op `op` for forward node `n` (same layer, location) and returns its node id.
int ad_node(Autodiff *ad, const IrNode *n, OpKind op, int nin, const int *in, OpAttr attr,
            const char *what);
// Appends op `op` and returns its out[0].
int ad_op(Autodiff *ad, const IrNode *n, OpKind op, int nin, const int *in, OpAttr attr,
          const char *what);
// Points output k of node `node` at trainable parameter t's TK_GRAD, which it then adds
// into (+=).
void ad_acc_output(Autodiff *ad, int node, int k, int t);
// For a forward node whose own pass can also form a gradient: makes forward node n op
// `op` with `attr`, and gives it out[1], a fresh tensor shaped like `like` (the gradient
// it forms); returns that tensor.
int ad_fold_output(Autodiff *ad, const IrNode *n, OpKind op, OpAttr attr, int like, const char *what);
// Adds `contribution` to the gradient of `t` (a parameter: += into its TK_GRAD).
void ad_add(Autodiff *ad, const IrNode *n, int t, int contribution);
// For ops whose kernels accumulate (linear and matmul dW: GEMMs with β = 1; embedding,
// norm weights, sums): writes straight into `t`'s TK_GRAD when `t` is a trainable
// parameter, else contributes.
void ad_acc(Autodiff *ad, const IrNode *n, int t, OpKind op, int nin, const int *in, OpAttr attr);

//
// derive.c — the derivative rules, one an op: the autodiff's column of the op table.
//

// Appends the gradient nodes of forward node `n` through the ad_* builders above.
typedef void (*AdRule)(Autodiff *ad, const IrNode *n);
// Op `op`'s rule; NULL for ops that are not differentiated (backward and optimizer ops).
AdRule ad_rule(OpKind op);

//
// print.c, verify.c
//

void ir_print(FILE *f, const IrGraph *g);
// The graph as JSON for external tools: tensors (bytes, category), nodes (op, phase,
// layer, FLOPs, output bytes, inputs, outputs) and edges [producer, consumer, tensor].
void ir_write_json(FILE *f, const IrGraph *g);
// Writes `s` as a JSON string, quoted and escaped.
void ir_json_str(FILE *f, const char *s);
// Checks structural invariants; prints each violation to `f` and returns how many.
int ir_verify(const IrGraph *g, FILE *f);

// Internal errors: print where, dump nothing more, abort. Never for user errors.
#define IR_ASSERT(c)                                                            \
    do {                                                                        \
        if (!(c)) ir_fatal_(__FILE__, __LINE__, #c);                            \
    } while (0)
_Noreturn void ir_fatal_(const char *file, int line, const char *what);

#endif
