// passes.h — graph-to-graph passes and the analyses the planner runs on them.
// Passes see only the IR; they never print user errors themselves but hand them
// to a PassDiag so the driver can show the source line.
#ifndef FTC_PASSES_H
#define FTC_PASSES_H

#include "../ir/ir.h"

typedef struct PassDiag {
    void (*error)(void *ctx, SrcLoc loc, const char *msg);
    void *ctx;
    int errors;
} PassDiag;

void pass_error(PassDiag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

//
// lora.c — y = x Wᵀ (+ b) becomes y + (alpha/r) · dropout(x) Aᵀ Bᵀ for each targeted W.
//

typedef struct LoraSpec {
    int64_t r;
    double alpha, dropout;
    int n_targets;
    const char **targets;   // a param's .ft name (wq) or its module name (q_proj)
    const SrcLoc *target_locs;
} LoraSpec;

// Rewrites `g` in place: adapters added, every original parameter frozen.
// Returns 0, or -1 after reporting unknown or unusable targets to `d`.
int lora_apply(IrGraph *g, const LoraSpec *spec, PassDiag *d);

//
// autodiff.c — the training step: backward of the loss, then the optimizer.
//

// Appends to forward graph `g` the backward nodes (the loss gradient scaled by
// 1/accum_steps), a TK_GRAD per trainable parameter, optimizer state and master
// copies as g->step asks, and the optimizer phase. Returns 0.
int autodiff_apply(IrGraph *g, int accum_steps);

//
// remat.c — keep or recompute, per block (repeat index).
//

typedef enum RematPolicy { REMAT_KEEP, REMAT_SELECTIVE, REMAT_FULL, REMAT_SWAP } RematPolicy;

typedef struct RematStats {
    int64_t recompute_flops;    // forward FLOPs run again in backward
    int recompute_nodes;
    int64_t swap_bytes;         // block inputs sent to the host and back (each way)
    int dropped_unused;         // tensors not kept that backward never needed
} RematStats;

const char *remat_policy_name(RematPolicy p);
// Applies policy[layer] to each of the `nlayers` blocks of the training-step graph `g`
// (after autodiff): backward reads recomputed copies of the tensors not kept.
int remat_apply(IrGraph *g, const RematPolicy *policy, int nlayers, RematStats *st);

//
// offload.c — what lives in host memory.
//

typedef struct OffloadSpec {
    bool optimizer;         // AdamW moments and fp32 master weights on the host; CPU AdamW
    bool grads;             // gradients accumulate on the host, streamed as made
} OffloadSpec;

typedef struct OffloadStats {
    int64_t host_bytes;     // tensors moved to the host arena
    int64_t d2h_bytes;      // per micro-step: gradients sent to the host
    int64_t h2d_bytes;      // per step: updated weights sent back
} OffloadStats;

int offload_apply(IrGraph *g, const OffloadSpec *o, OffloadStats *st);

//
// schedule.c — a memory-aware execution order within each phase.
//

typedef struct ScheduleStats {
    int64_t peak_emitted, peak_greedy;  // transient bytes at the peak of each order
    bool greedy;                        // the greedy order was kept
} ScheduleStats;

int schedule_apply(IrGraph *g, ScheduleStats *st);

//
// liveness.c — lifetimes, categories, workspace tensors, in-place reuse.
//

// Sets first/last of every tensor in the current order, categories from lifetimes,
// a TK_WORKSPACE tensor for each node that needs scratch, and (when `in_place`) reuse
// links for elementwise outputs that can take over a dying input's bytes. Returns 0.
int liveness_apply(IrGraph *g, bool in_place);
// The tensor whose bytes `t` occupies (through views and reuse links).
int liveness_root(const IrGraph *g, int t);

//
// alloc.c — static offsets in the device arena.
//

typedef struct AllocStats {
    int64_t arena_bytes;        // the device arena
    int64_t host_bytes;         // the host arena
    int64_t lower_bound;        // the most bytes live at any node (256-byte aligned sizes)
    int lower_bound_at;         // that node
    int64_t fixed_bytes;        // of which live for the whole step
    const char *strategy;       // the order that won
    int64_t tried[3];           // arena under each order: size, area, start
} AllocStats;

int alloc_apply(IrGraph *g, AllocStats *st);

//
// quantize.c — NF4 storage for the frozen linear weights of the blocks (QLoRA).
//

typedef struct QuantStats {
    int64_t weights;            // parameters stored as NF4
    int64_t bf16_bytes;         // what they took before
    int64_t nf4_bytes;          // packed nibbles and their scales
} QuantStats;

// After autodiff: every frozen 2-D weight read by a linear inside a block is stored as
// NF4 (blocks of 64, absmax per block; with double_quant the absmaxes as 8-bit codes in
// blocks of 256 with an fp32 scale each, and their mean), and each node that reads it
// reads a bf16 copy made by a dequant node just before. Returns 0.
int quantize_apply(IrGraph *g, bool double_quant, QuantStats *st);

//
// gpu.c — GPU presets for budgets and the cost model (REFERENCE.md §5).
//

typedef struct GpuPreset {
    const char *name;
    int64_t mem_bytes;          // device memory
    double bf16_tflops;         // dense tensor-core peak
    double hbm_gbps;            // memory bandwidth, GB/s
    double link_gbps;           // achieved host link, GB/s
    int64_t reserve_bytes;      // CUDA context + library handles, outside any arena
    int64_t workspace_bytes;    // cuBLASLt workspace
} GpuPreset;

const GpuPreset *gpu_preset(const char *name);   // NULL if unknown
const GpuPreset *gpu_presets(int *n);

//
// cost.c — the estimated step time on a GPU preset.
//

typedef struct CostModel {
    const GpuPreset *gpu;
    double host_adam_params_per_s;  // CPU AdamW rate, measured on this machine
} CostModel;

typedef struct StepCost {
    double micro_us;        // one micro-step (forward + backward, gradient copies overlapped)
    double opt_us;          // the optimizer phase (on the device, or CPU AdamW + copies)
    double step_us;         // accum · micro + opt
    double recompute_us;    // of step_us, spent recomputing
    double copy_us;         // link time per step (overlapped where it can be)
    int64_t model_flops;    // per step, without recompute
    double tokens_per_s, mfu;
} StepCost;

double cost_node_us(const IrGraph *g, const IrNode *n, const CostModel *cm);
StepCost cost_step(const IrGraph *g, const CostModel *cm, int64_t accum, int64_t tokens_per_step);

//
// planner.c — the search for the fastest plan that fits.
//

typedef struct PlanChoice {
    int64_t micro;              // sequences per micro-step; accumulation = batch / micro
    RematPolicy policy;         // for the first n_policy blocks ...
    int n_policy;
    RematPolicy rest;           // ... and this for the others
    OffloadSpec offload;
    const RematPolicy *per_layer;   // if not NULL, each block's policy (overrides the above)
} PlanChoice;

typedef struct PlanOutcome {
    int64_t device_bytes;       // arena + context reserve
    int64_t host_bytes;
    StepCost cost;
    RematStats remat;
    int64_t live[MEM_COUNT];    // device bytes at the peak, by category
} PlanOutcome;

typedef struct Candidate {
    PlanChoice c;
    PlanOutcome o;
    bool fits;
} Candidate;

typedef struct PlannerInput {
    int64_t global_batch;
    int nlayers;
    int64_t budget_bytes, host_budget_bytes;
    int64_t weights_bytes, grads_bytes, states_bytes, reserve_bytes;
    int64_t micro;              // fixed by the user, else 0
    int remat, offload;         // fixed by the user (a RematPolicy, an offload level 0..2), else -1
    // Builds choice c into a fresh graph and plans it; 0, or -1 on failure.
    int (*build)(void *ctx, const PlanChoice *c, PlanOutcome *out);
    void *ctx;
} PlannerInput;

typedef struct PlannerResult {
    VEC(Candidate) tried;       // every choice built, in the order tried
    int best;                   // the fastest that fits, or -1
    int smallest;               // the smallest device footprint of all tried, or -1
    int pruned_levels;          // offload levels skipped: their model states alone do not fit
} PlannerResult;

// Searches micro-batch sizes, recompute policies (uniform, and mixed across blocks)
// and offload levels; returns 0.
int planner_search(const PlannerInput *in, PlannerResult *r);
// The optimum over every per-block policy assignment (3^nlayers, nlayers <= 10) at one
// micro-batch and offload level: the fastest that fits, into *best (per_layer points
// into `policies`, nlayers entries). Returns the number of assignments that fit, or -1.
int planner_exact(const PlannerInput *in, int64_t micro, int level, RematPolicy *policies,
                  Candidate *best);
void planner_choice_str(char *buf, size_t cap, const PlanChoice *c, int nlayers);

//
// count.c — parameter counts and the memory a step needs with no technique applied.
//

typedef struct ParamCount {
    int64_t total, trainable;
    int64_t tensors;
} ParamCount;

ParamCount count_params(const IrGraph *g);

typedef struct MemBreakdown {
    int64_t bytes[MEM_COUNT];   // per category; activations exclude the logits
    int64_t logits_bytes;       // the logits and the loss's fp32 gradient of them
    int64_t total;              // all categories plus logits_bytes
} MemBreakdown;

// The naive step: all weights, gradients, optimizer state and master copies on the
// device, every tensor the backward reads kept from the forward, the logits and the
// loss's working set, the batch, and `reserve_bytes` of context.
MemBreakdown count_naive_memory(const IrGraph *g, int64_t reserve_bytes);

#endif
