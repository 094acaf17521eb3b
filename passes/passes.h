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
// tile.c — sequence tiling: each block's per-token tail over S/T-token slices.
//

typedef struct TileStats {
    int64_t tiles;              // T, the most tiles of any block (0: nothing tiled)
    int64_t rows;               // S / T: a tile's tokens per sequence
    int blocks;                 // blocks whose tail was tiled
    int nodes;                  // a tail's nodes (each written as many times as its block's tiles)
} TileStats;

// Before autodiff: rewrites the tail of every repeated block that works on each token
// alone (after its last token-mixing node, attention or RoPE, and holding a GEMM) into
// T copies over [B, S/T, ...] slices of its inputs, the values it hands on joined along
// the sequence (concat). T is `tiles` for every block, or per_block[l] for block l where
// per_block is not NULL (ir_layers(g) counts); each divides g->seq; 1 (or 0) leaves a
// block as it is. Returns 0.
int tile_apply(IrGraph *g, int64_t tiles, const int64_t *per_block, TileStats *st);

// The planner searches tile counts (powers of two dividing the sequence) only while a tile
// keeps at least TILE_MIN_ROWS tokens: below that a block's working set is small anyway
// and the tiles' GEMMs lose efficiency (compile.c). --tile forces any divisor.
enum { TILE_MIN_ROWS = 4096 };

//
// autodiff.c — the training step: backward of the loss, then the optimizer.
//

// Appends to forward graph `g` the backward nodes (the loss gradient scaled by
// 1/accum_steps), a TK_GRAD per trainable parameter, optimizer state and master
// copies as g->step asks, and the optimizer phase. A weight gradient's GEMM accumulates
// into the gradient (β = 1) unless `gemm_temporaries`, when it writes a temporary that an
// acc adds in (the plan to compare with). Returns 0, or -1 after reporting to `d` each
// node whose op has no derivative rule but lies on a path from a trainable parameter to
// the loss.
int autodiff_apply(IrGraph *g, int accum_steps, bool gemm_temporaries, PassDiag *d);

//
// fuse_loss.c — the loss and the projection feeding it as one op.
//

// Where the logits are a bias-free linear of a parameter read by the cross entropy alone,
// replaces both by linear_cross_entropy (before autodiff: its backward is the fused op's
// own); the logits tensor goes (g->logits becomes -1). Returns 1 when it fused, else 0.
int fuse_loss_apply(IrGraph *g);

//
// chunk_loss.c — the loss's row chunks.
//

// Sets the row chunk of the fused loss and its backward: `chunk` rows (0: the most whose
// logits take at most `max_bytes`), made a divisor of the rows; and of an unfused
// cross-entropy backward, so that its fp32 working set stays within `max_bytes`. Returns
// the rows per chunk of the last one (0: all rows at once).
int64_t chunk_loss_apply(IrGraph *g, int64_t max_bytes, int64_t chunk);

//
// remat.c — keep or recompute, per block (repeat index).
//

// REMAT_TENSORS keeps the tensors of the block a keep mask names (one bit per candidate:
// remat_candidates' order), and recomputes the rest.
typedef enum RematPolicy { REMAT_KEEP, REMAT_SELECTIVE, REMAT_FULL, REMAT_SWAP, REMAT_TENSORS } RematPolicy;

typedef struct RematStats {
    int64_t recompute_flops;    // forward FLOPs run again in backward
    int recompute_nodes;
    int64_t swap_bytes;         // block inputs sent to the host and back (each way)
    int dropped_unused;         // tensors not kept that backward never needed
} RematStats;

const char *remat_policy_name(RematPolicy p);
// Applies policy[layer] to each of the `nlayers` blocks of the training-step graph `g`
// (after autodiff): backward reads recomputed copies of the tensors not kept. Block l, its
// policy REMAT_TENSORS, keeps candidate j when keep[l·nkeep + j] (a mask per block, nlayers
// of them; j < nkeep: the rest are kept).
int remat_apply(IrGraph *g, const RematPolicy *policy, int nlayers, const uint8_t *keep, int nkeep,
                RematStats *st);
// The tensors of block `layer` that a keep mask chooses among (the forward values the
// block makes, but its outputs), in order; their count. bytes[j] and cost[j] (if not
// NULL, `cap` entries) get each one's bytes and its producer's time proxy.
int remat_candidates(const IrGraph *g, int layer, int64_t *bytes, double *cost, int cap);
// The keep masks from everything kept to nothing kept, one candidate dropped a step: at
// each step the one whose bytes saved per recompute added (its producer re-run, and any
// dropped input's, once each) is the most. masks[k] (nmasks x ncand, malloc'd) is the
// k-th; returns nmasks (ncand + 1), or 0 when the block has no candidate.
int remat_keep_chain(const IrGraph *g, int layer, uint8_t **masks, int *ncand);

//
// offload.c — what lives in host memory.
//

typedef struct OffloadSpec {
    bool optimizer;         // AdamW moments and fp32 master weights on the host; CPU AdamW
    bool grads;             // gradients accumulate on the host, streamed as made
    bool weights;           // the weight matrices live on the host (with optimizer and grads):
                            // the frozen ones (LoRA's, QLoRA's bases), or all when none is
                            // frozen; each copied to the device a block ahead of its use
} OffloadSpec;

typedef struct OffloadStats {
    int64_t host_bytes;     // tensors moved to the host arena (state, gradients, weights)
    int64_t d2h_bytes;      // per micro-step: gradients sent to the host
    int64_t h2d_bytes;      // per step: updated weights sent back
    int64_t stream_bytes;   // per micro-step: streamed weights copied to the device
    int streamed;           // weight tensors (with an NF4 one's scales) that stream
} OffloadStats;

// Moves optimizer state (and gradients, and weights) to the host arena, runs their nodes
// on the host stream and adds the copies (with host staging buffers) that carry bytes
// across; a streamed weight gets a device copy per run of uses (forward, backward and
// recompute of one block, or the runs outside the blocks between two blocks), made by an
// h2d copy placed at the start of the block before (the schedule keeps it there).

int offload_apply(IrGraph *g, const OffloadSpec *o, OffloadStats *st);

//
// eval.c — the eval phase: the forward and its loss again, forward only.
//

typedef struct EvalStats {
    int nodes;                  // nodes of the eval phase
} EvalStats;

// Appends to the training-step graph `g` (after remat, before shard and offload) a
// PHASE_EVALUATION copy of the forward's compute nodes, reading the same parameters and
// batch inputs, dropout as the identity, the fused loss without its gradient, its loss
// g->eval_loss. Returns 0.
int eval_apply(IrGraph *g, EvalStats *st);

//
// decode.c — the decode phase: one token of generation over a planned KV cache.
//

typedef struct DecodeStats {
    int nodes;                  // nodes of the decode phase (0: none)
    int64_t max_len;            // the tokens its caches hold (L)
    int64_t cache_bytes;        // its KV caches' bytes, every layer's k and v
    char why[160];              // with no phase where one was asked for: why not
    int line;                   // and the .ft line of the node it stopped at (0: none)
} DecodeStats;

// Appends to `g` (after eval, before shard and offload) a PHASE_DECODE copy of the
// forward for one token of one sequence: g->decode_token and g->decode_pos in, the
// logits g->decode_logits out, each attention reading and extending its layer's KV cache
// (TK_CACHE [1, max_len, Hkv, D]). A forward it cannot be derived from leaves g as it
// was and st->why saying so. Returns 0.
int decode_apply(IrGraph *g, int64_t max_len, DecodeStats *st);

//
// reference.c — a preference loss's reference precomputed: its forward a phase of its own,
// run over the data before training, its rows' sums read back as a batch input.
//
typedef struct ReferenceStats {
    int nodes;                  // nodes of the reference phase (0: none)
} ReferenceStats;

// With g->reference REF_PRECOMPUTED, moves the reference's nodes (marked by the elaborator)
// to PHASE_REFERENCE at the end of the node list, points the step's and the eval phase's
// preference loss at the input ref_logps, and drops the eval phase's copies of them (after
// eval and decode, before shard and offload). 0.
int reference_apply(IrGraph *g, ReferenceStats *st);

//
// shard.c — data parallelism: one rank's step, model states sharded (ZeRO stages 0-3).
//

typedef struct ShardSpec {
    int ranks;              // 1: nothing to do
    int zero;               // 0 replicated (gradients all-reduced), 1 optimizer state sharded,
                            // 2 and gradients, 3 and parameters
} ShardSpec;

typedef struct ShardStats {
    int sharded, whole;         // parameters sharded, and kept whole (elements the ranks do
                                // not divide, NF4)
    int64_t sharded_elems;
    int64_t reduce_bytes;       // per micro-step (stages 2, 3) or step: gradients reduced
    int64_t gather_bytes;       // per step: parameters gathered
    int collectives;
} ShardStats;

// Makes g one rank's step of a job of spec->ranks ranks (after remat: backward's readers
// of a parameter, recompute too, read what stage 3 gathers): the shards of what the stage
// shards (IrTensor.shard_of), the collectives on the comm stream next to what they need
// (the gradients' last contributions; the updates; stage 3's first readers per phase),
// stages 0 and 1 reducing on the last micro-step only. Returns 0.
int shard_apply(IrGraph *g, const ShardSpec *spec, ShardStats *st);

//
// buckets.c — the collectives placed for overlap and grouped into buckets.
//

// A bucket is one grouped instruction of the plan: at most plan.h's PLAN_GROUP_MAX members.
enum { BUCKET_MAX_COLLECTIVES = 64 };

typedef struct BucketStats {
    int buckets;                // calls on the comm stream
    int collectives;            // collectives in them
} BucketStats;

// After schedule: each phase's collectives (and what reads their outputs: a gradient
// shard's accumulation, its copy to the host) moved to where they can run soonest — a
// reduction right after the last of its bucket's gradients is made, gathers a bucket
// ahead of their first readers — and consecutive ones of one kind grouped into buckets
// of about bucket_bytes (IrNode.bucket; at most 64 collectives each). Returns 0.
int buckets_apply(IrGraph *g, int64_t bucket_bytes, BucketStats *st);

//
// fuse.c — elementwise chains into one kernel.
//

typedef struct FuseStats {
    int kernels;                // fused kernels made
    int steps;                  // nodes they hold
    int64_t virtual_bytes;      // intermediates that no longer take bytes
    int recomputed;             // forward values recomputed inside backward kernels ...
    int64_t unsaved_bytes;      // ... instead of being kept (counted per reader)
    int add_norms;              // residual adds taken into the RMSNorm after them
} FuseStats;

// Groups elementwise producers with their single consumer into OP_FUSED nodes (steps in
// g->fused), their intermediates virtual. After remat and offload. Returns 0.
int fuse_apply(IrGraph *g, FuseStats *st);

//
// early_update.c — each optimizer update inside backward, as soon as its gradient is complete.
//

typedef struct EarlyUpdateStats {
    int moved;                  // updates moved into backward
    int zeroed;                 // gradients zeroed before a first contribution that only adds
    int64_t transient_bytes;    // gradient bytes that no longer live the whole step
} EarlyUpdateStats;

// For a step with one micro-step, no clipping, no loss scale, one rank and the optimizer on
// the device (the caller's to check): moves each gradient's sum of squares and update to
// right after the last node touching the gradient or what the update writes, the factor
// (formed from no statistics: 1 / loss scale, no skip) to backward's start; drops the
// zeroing; makes each gradient's first contribution assign it, and the gradients values
// (TK_VALUE). After fuse, before schedule. Returns 0.
int early_update_apply(IrGraph *g, EarlyUpdateStats *st);

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
    int64_t tried[4];           // arena under each order: size, area, start, life (repaired)
    bool cut;                   // alloc_within stopped at an order within its limit before
                                // trying the rest: a placement that fits, maybe not the smallest
} AllocStats;

int alloc_apply(IrGraph *g, AllocStats *st);
// alloc_apply, but content with any order whose arena is at most `device` (the device
// arena) or `host` (the host's): a placement that fits a budget, not the smallest.
int alloc_within(IrGraph *g, int64_t device, int64_t host, AllocStats *st);
// The liveness lower bounds of the device arena (bound[0]: the lower_bound alloc_apply
// reports; the node where it is reached in *at) and the host's (bound[1]), without
// placing anything.
void alloc_bounds(const IrGraph *g, int64_t bound[2], int *at);
// The device bytes live at each node as the bound counts them, into live[g->nodes.len].
void alloc_live(const IrGraph *g, int64_t *live);

//
// streams.c — events between streams, for a placed graph.
//

typedef struct StreamStats {
    int events;                 // events recorded
    int waits;                  // waits added
} StreamStats;

// Orders, with events, every two nodes on different streams that touch the same bytes
// (one writing) within a phase: on one tensor, and across tensors the allocator put on
// the same bytes. Waits only where stream order and earlier events do not already
// order them. Needs liveness and alloc. Returns 0.
int streams_apply(IrGraph *g, StreamStats *st);

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
    int64_t mem_bytes;          // device memory, nvidia-smi's total
    int64_t driver_bytes;       // the total the driver reports (cuMemGetInfo), less
    int64_t reserve_bytes;      // mem_bytes - driver_bytes + the context + our module and
                                // cuBLASLt handle, outside any arena (gpu.c derives it)
    double bf16_tflops;         // dense tensor-core peak
    double hbm_gbps;            // memory bandwidth, GB/s
    double link_gbps;           // achieved host link, GB/s
    int64_t workspace_bytes;    // cuBLASLt workspace
    const char *arch;           // the SM architecture its kernels are compiled for
    int sms;                    // streaming multiprocessors
    // The tiled attention kernels' share of the bf16 peak on long sequences, forward and
    // backward (gpu.c gives the sources); cost.c takes off what short ones and a last
    // partial wave of blocks cost.
    double attn_fwd_eff, attn_bwd_eff;
} GpuPreset;

const GpuPreset *gpu_preset(const char *name);   // NULL if unknown
const GpuPreset *gpu_presets(int *n);

// The machine that will train, as the cost model sees it (ftc compile --host-*).
typedef struct HostSpec {
    int cores;                  // threads the CPU AdamW runs on
    double adamw_per_core;      // fp32 AdamW parameters per second per core, all cores busy
    double link_gbps;           // achieved host link each way, GB/s (0: the GPU preset's)
} HostSpec;

// The documented defaults: a typical training server (gpu.c says which).
HostSpec host_default(void);
double host_adamw_rate(const HostSpec *h);          // parameters per second, all cores
double host_link_bytes_per_s(const HostSpec *h, const GpuPreset *gpu);
// The host's sum of squares (a norm over host gradients), elements per second on one thread.
double host_sumsq_rate(const HostSpec *h);

//
// link.c — links between ranks, for collectives' time.
//

typedef struct LinkPreset {
    const char *name;
    double gbps;                // bandwidth one way per GPU, GB/s, as modelled
    double latency_us;          // per call
    const char *what;
} LinkPreset;

const LinkPreset *link_preset(const char *name);   // NULL if unknown
const LinkPreset *link_presets(int *n);
// The time of collective `op` over `ranks` ranks on link l, `bytes` the whole tensor's (an
// all-gather's output, a reduction's input): latency plus the ring's bytes through a link.
double link_collective_us(const LinkPreset *l, OpKind op, int64_t bytes, int ranks);
// The device memory NCCL takes for itself on a job of `ranks` (0 for one rank), beside the
// context reserve.
int64_t link_reserve_bytes(int ranks);

//
// cost.c — the estimated step time on a GPU preset.
//

typedef struct CostModel {
    const GpuPreset *gpu;
    double host_adamw_per_s;    // CPU AdamW over offloaded state, parameters per second
    double host_sumsq_per_s;    // the CPU's sum of squares over host gradients (elements per
                                // second, on one thread: the sum runs in a fixed order)
    double link_bytes_per_s;    // the host link, each way (0: the GPU preset's)
    const LinkPreset *link;     // between the ranks of a data-parallel job (NULL: one rank)
} CostModel;

typedef struct StepCost {
    double micro_us;        // one micro-step (forward + backward, gradient copies overlapped)
    double opt_us;          // the optimizer phase (on the device, or CPU AdamW + copies)
    double step_us;         // accum · micro + opt (+ the last micro-step's reductions)
    double recompute_us;    // of step_us, spent recomputing
    double device_us;       // the device's busy time per step (its streams' kernels, summed)
    double gemm_us;         // of it, the library GEMMs (and the fused loss's products)
    double copy_us;         // link time per step (overlapped where it can be)
    double comm_us;         // collectives' time per step on the comm stream (several ranks)
    double comm_exposed_us; // of step_us, the part of it compute does not hide
    int64_t model_flops;    // per step, without recompute
    double tokens_per_s, mfu;
    // What step_us is made of, so that it can be priced again for another host
    // (cost_step_at): per micro-step the device's time and the bytes over the link;
    // in the optimizer phase the device's time, the link's bytes and the parameters
    // the CPU updates.
    int64_t accum, tokens;
    double micro_device_us, micro_link_bytes;
    double micro_stall_us;  // the micro-step's simulated time less the larger of its device time
                            // and its link bytes at one rate (< 0: the two directions overlap)
    double opt_device_us, opt_link_bytes, host_params;
    double host_sumsq_elems;    // the gradients' norm on the host, before the updates
    double sumsq_per_adamw;     // the host's sum-of-squares rate over its AdamW rate
    double micro_last_extra_us; // several ranks: what the last micro-step's reductions add to it
} StepCost;

double cost_node_us(const IrGraph *g, const IrNode *n, const CostModel *cm);
// Stamps each device node of g with its estimated time (IrNode.est_us): the plan carries it.
void cost_stamp(IrGraph *g, const CostModel *cm);
StepCost cost_step(const IrGraph *g, const CostModel *cm, int64_t accum, int64_t tokens_per_step);
// The step time of `c` on a host whose CPU AdamW runs at `adamw_per_s` parameters per
// second and whose link moves `link_bytes_per_s` each way.
double cost_step_at(const StepCost *c, double adamw_per_s, double link_bytes_per_s);

//
// planner.c — the search for the fastest plan that fits.
//

typedef struct PlanChoice {
    int64_t micro;              // sequences per micro-step; accumulation = batch / (micro·ranks)
    RematPolicy policy;         // for the first n_policy blocks ...
    int n_policy;
    RematPolicy rest;           // ... and this for the others
    OffloadSpec offload;
    const RematPolicy *per_layer;   // if not NULL, each block's policy (overrides the above)
    int zero;                   // with several ranks: the ZeRO stage (shard.c)
    int64_t bucket_bytes;       // with several ranks: the buckets' size (0: BUCKET_DEFAULT_BYTES)
    const uint8_t *keep;        // REMAT_TENSORS: the keep mask (remat_candidates' order) ...
    int nkeep;                  // ... of this many candidates
    int chain_at;               // its place in the planner's keep chain (for reports)
    const uint8_t *keep_rest;   // if not NULL, the mask of the blocks after the first n_policy
    int chain_rest;             // (which then keep by `keep`): the later blocks, whose saved
                                // tensors wait less of backward, may keep more
    const uint8_t *keep_blocks; // if not NULL, every block's mask (nkeep a block, block by block):
                                // overrides keep and keep_rest
    int64_t loss_chunk;         // rows per chunk of the fused loss (0: the default cap's)
    bool early_update;          // each update inside backward (early_update.c): one micro-step,
                                // offload none, one rank, and a step PipelineSpec allows it for
    int64_t tile;               // sequence tiles of every block's per-token tail (tile.c; 0, 1: none) ...
    const int64_t *tile_blocks; // ... if not NULL, each block's (nlayers counts): overrides tile
} PlanChoice;

enum { BUCKET_DEFAULT_BYTES = 32 << 20 };

// What a build must settle, for a search that places only what could win: a candidate
// whose liveness bound exceeds a budget cannot fit, and one no faster than `bar_us`
// cannot be chosen, so neither is placed. NULL: place every candidate.
typedef struct BuildNeed {
    int64_t budget_bytes, host_budget_bytes;
    double bar_us;              // 0: no bar
    bool bound;                 // a bound, never placed: the collectives priced at nothing (a
                                // bound over bucket sizes), no eval phase (its time is not the
                                // step's, its values never the peak)
    struct RegionPeaks *peaks;  // with bound: filled if not NULL
} BuildNeed;

// The most device bytes live (as the liveness bound counts them, the reserve included) in
// each region of a step: what the per-block search (keep_masks.c) predicts a plan that
// keeps differently block by block from. Forward and backward are split at the blocks:
// `pre` before the first block's forward, `head` from after the last block's forward to
// before its backward (the loss), `tail` after the first block's backward (and the
// optimizer); each block's forward and backward apart.
typedef struct RegionPeaks {
    int64_t pre, head, tail;
    int64_t *fwd, *bwd;         // nlayers each (the caller's arrays)
} RegionPeaks;

typedef struct PlanOutcome {
    int64_t device_bytes;       // arena + context reserve (not placed: the bound + reserve)
    int64_t host_bytes;         // (not placed: the host arena's bound)
    bool placed;                // offsets computed: the bytes are exact
    bool smallest;              // placed as alloc_apply would (every order, or the bound)
    StepCost cost;
    RematStats remat;
    int64_t live[MEM_COUNT];    // device bytes at the peak, by category
    int64_t backward_start_bytes;   // priced only (BuildNeed.bound): the device bytes live as
                                // backward starts, reserve included: a floor of the peak,
                                // linear in the blocks' keep masks
    int64_t loss_chunk, loss_rows;  // the fused loss's rows per chunk, of how many (0: none)
    TileStats tile;             // the sequence tiles (tiles 0: none)
} PlanOutcome;

typedef struct Candidate {
    PlanChoice c;
    PlanOutcome o;
    bool fits;
    bool slower;                // not placed, no faster than a plan that fits: fit unknown
    bool declined;              // a larger loss chunk less than 1% faster: never chosen
} Candidate;

typedef struct PlannerInput {
    int64_t global_batch;
    int nlayers;
    int64_t budget_bytes, host_budget_bytes;
    int64_t weights_bytes, grads_bytes, states_bytes, reserve_bytes;
    int64_t micro;              // fixed by the user, else 0
    bool pairs;                 // micro-batches hold whole pairs: even ones alone
    int remat, offload;         // fixed by the user (a RematPolicy, an offload level 0..3), else -1
    int early;                  // each update inside backward (PlanChoice.early_update): 1 always,
                                // 0 never, -1 the planner's choice; only where the step allows it
                                // (one rank, no clipping, no loss scale: the caller's to check),
                                // at one micro-step and offload none
    int ranks;                  // data-parallel ranks (0, 1: one); the global batch splits over them
    int zero;                   // the ZeRO stage fixed by the user, else -1 (with ranks > 1)
    bool grads_whole;           // with ranks > 1, some gradients stay whole (AdamW8bit's 8-bit
                                // state is not sharded): all-reduced on the device, none
                                // can live on the host
    int64_t loss_chunk;         // the fused loss's rows per chunk fixed by the user, else 0
    int64_t tile;               // every choice's sequence tiles (PlanChoice.tile; 0: none) ...
    const int64_t *tile_blocks; // ... or each block's (PlanChoice.tile_blocks; NULL: tile's)
    // The keep masks of remat_keep_chain (nchain of nkeep bits), for plans that choose what
    // to keep tensor by tensor; none when nchain is 0.
    const uint8_t *chain;
    int nchain, nkeep;
    // remat REMAT_TENSORS (fixed by the user): each block's keep mask, block by block (NULL:
    // the planner's).
    const uint8_t *tensors_masks;
    // Builds choice c into a fresh graph and plans it, placing it unless `need` says it
    // cannot fit or win; 0, or -1 on failure. Called from several threads at once: it
    // must not touch shared mutable state.
    int (*build)(void *ctx, const PlanChoice *c, const BuildNeed *need, PlanOutcome *out);
    void *ctx;
    int threads;                // planning threads (0: one per CPU)
    bool exhaustive;            // no bars, no bounds: every candidate placed, no search skipped
} PlannerInput;

typedef struct PlannerResult {
    VEC(Candidate) tried;       // every choice built, in the order tried
    int best;                   // the fastest that fits, or -1
    int smallest;               // the smallest device footprint of all tried, or -1
    int pruned_levels;          // offload levels skipped: their model states alone do not fit
    int bound_pruned;           // levels and mixed searches skipped: their bound is no faster
                                // than a plan found before them ...
    VEC(StepCost) bounds;       // ... and those bounds (planner_holds' competitors)
    int host_pruned;            // ... of which on the host
    int64_t host_need;          // the least host memory a level skipped there needs
    VEC(uint8_t *) masks;       // the per-block masks its candidates point at (keep_blocks)
} PlannerResult;

//
// keep_masks.c — a keep mask per block: a DP over the blocks on peaks predicted from
// uniform plans (its header says how).
//
typedef struct KeepTable KeepTable;
// Prices every candidate mask (the chain's, and each with one tensor flipped), kept in
// every block of `base` (REMAT_TENSORS at its micro-batch and offload level).
KeepTable *keep_table_new(const PlannerInput *in, const PlanChoice *base);
// Adds each of the assignment's masks (nlayers x nkeep) with one candidate flipped.
void keep_table_extend(KeepTable *t, const PlannerInput *in, const PlanChoice *base, const uint8_t *masks);
int keep_table_size(const KeepTable *t);
// The assignment of the table's masks to the blocks predicted fastest whose predicted
// peaks fit `budget` (device bytes, the reserve included), into masks (nlayers x nkeep),
// its predicted step into *us; false if none is predicted to fit.
bool keep_table_assign(const KeepTable *t, int64_t budget, uint8_t *masks, double *us);
void keep_table_free(KeepTable *t);

// Searches micro-batch sizes, recompute policies (uniform, and mixed across blocks)
// and offload levels; returns 0.
int planner_search(const PlannerInput *in, PlannerResult *r);
void planner_result_free(PlannerResult *r);
// The optimum over every per-block policy assignment (3^nlayers, nlayers <= 10) at one
// micro-batch and offload level: the fastest that fits, into *best (per_layer points
// into `policies`, nlayers entries). Returns the number of assignments that fit, or -1.
int planner_exact(const PlannerInput *in, int64_t micro, int level, RematPolicy *policies,
                  Candidate *best);
void planner_choice_str(char *buf, size_t cap, const PlanChoice *c, int nlayers);
// A per-tensor choice as --remat tensors: takes it (K1[^I,...]xN1+...+K), block masks
// against the keep chain (nchain masks); false for another choice (or no room).
bool planner_tensors_spec(char *buf, size_t cap, const PlanChoice *c, int nlayers, const uint8_t *chain,
                          int nchain);
// Block l's keep mask under choice c (REMAT_TENSORS, with keep or keep_blocks set).
const uint8_t *plan_choice_mask(const PlanChoice *c, int l);
// Block l's sequence tiles under choice c (1: none).
int64_t plan_choice_tile(const PlanChoice *c, int l);
// Choice c's tiles as --tile takes them (T, or T1xN1+...+T for counts that differ
// block by block); false where no block is tiled (or no room).
bool planner_tile_spec(char *buf, size_t cap, const PlanChoice *c, int nlayers);

//
// tile_blocks.c — the sequence tiles chosen block by block.
//

// From the plans the tile search tried (r, at the uniform counts counts[0..ncounts)),
// a plan whose tile count differs block by block: for each seed (the fastest plan that
// fits, and the fastest ones faster than it that do not), each block takes the fewest
// tiles whose uniform plan's peaks in that block's forward and backward fit, built and
// checked. The fastest such plan that fits and beats r's best is appended to r and made
// its best, its counts allocated in `a`. Returns whether one was.
bool tile_blocks_search(const PlannerInput *in, PlannerResult *r, const int64_t *counts, int ncounts, Arena *a);

// Over which host rates the choice holds: the range of CPU AdamW rates (at the link
// `link`), and of link rates (at the AdamW rate `adamw`), around the assumed ones, in
// which r->best stays the fastest of the candidates tried that fit or may fit (and
// of the bounds of the searches skipped). A bound the choice
// never meets within 1/1000 to 1000 times the assumed rate is 0 (lower) or INFINITY.
typedef struct PlanHolds {
    double adamw_lo, adamw_hi;      // parameters per second
    double link_lo, link_hi;        // bytes per second
} PlanHolds;

PlanHolds planner_holds(const PlannerResult *r, double adamw, double link);

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

//
// pipeline.c — the compile pipeline: one ordered table of named passes, each with one
// signature, run for a planner choice; and the planner's build function over it.
//
//   elaborate (B, S) → lora → fuse_loss → autodiff → quantize → chunk_loss → remat → shard
//     → offload → fuse → schedule → buckets → liveness → alloc → streams
//

// What the train section asks of the step beyond the forward graph.
typedef struct PipelineSpec {
    int64_t global_batch;       // sequences per optimizer step
    int64_t seq;
    bool lora;                  // with lora_spec
    LoraSpec lora_spec;
    bool quantize, double_quant;
    bool fused_loss;            // the loss and its projection as one op (fuse_loss)
    int64_t loss_chunk_bytes;   // the loss's chunks take at most this (unless a choice says)
    bool no_fusion;             // leave every op its own kernel (ftc compile --no-fusion)
    bool grad_temporaries;      // weight gradients' GEMMs write temporaries an acc adds in,
                                // not the gradient (ftc compile --grad-temporaries)
    int64_t gemm_workspace_bytes;   // each GEMM's library workspace (the GPU preset's)
    int ranks;                  // data-parallel ranks the step is one of (0, 1: none)
    bool adamw8bit;             // AdamW's moments 8-bit (adamw8bit, bitsandbytes' default
                                // min_8bit_size) whatever the train section's AdamW says
                                // (the what-if analysis)
    bool no_kahan;              // bf16_pure's AdamW without its Kahan buffer (the what-if)
    int64_t decode_len;         // the decode phase's KV cache length (tokens), 0: no phase
    bool pairs;                 // a preference loss: micro-batches hold whole pairs (even)
} PipelineSpec;

// The smallest micro-batch a step under spec s may take: one row, or one pair of them.
static inline int64_t pipeline_min_micro(const PipelineSpec *s) { return s->pairs ? 2 : 1; }

// The frontend's part: the forward graph and loss for micro-batch `micro` and sequence
// length `seq`, in arena `a`; NULL after reporting errors. Called from several planner
// threads at once.
typedef IrGraph *(*ElaborateFn)(void *ctx, int64_t micro, int64_t seq, Arena *a);

enum { PIPELINE_MAX_STAGES = 20 };

// Nanoseconds spent in each stage (pipeline_stages order) and how many times it ran,
// summed over every build (planner threads add at once).
typedef struct PassTimes {
    _Atomic int64_t ns[PIPELINE_MAX_STAGES];
    _Atomic int64_t runs[PIPELINE_MAX_STAGES];
} PassTimes;

// Graphs through the stages that depend only on the micro-batch (elaborate … chunk_loss),
// kept for the builds of other choices at the same micro-batch. One cache serves one
// pipeline spec; the planner's threads share it.
typedef struct PipelineCache PipelineCache;

PipelineCache *pipeline_cache_new(void);
void pipeline_cache_free(PipelineCache *c);

typedef struct Pipeline {
    ElaborateFn elaborate;
    void *ctx;
    PipelineSpec spec;
    PassDiag *diag;             // user errors found by passes; NULL: counted, not shown
    bool verify;                // ir_verify after every pass (debug builds and tests)
    bool final;                 // also the passes only a written plan needs (streams)
    const char *dump_after;     // print the IR after this pass ("all": after each), or NULL
    FILE *dump_to;
    const char *stop_after;     // run the stages up to this one only, or NULL for all
    PassTimes *times;           // if not NULL, time spent per stage is added here
    PipelineCache *cache;       // if not NULL, the micro-batch's prefix comes from here (not
                                // with dumps, verification or errors to report)
} Pipeline;

typedef struct BuildStats {
    TileStats tile;
    QuantStats quant;
    RematStats remat;
    ShardStats shard;
    BucketStats buckets;
    OffloadStats offload;
    EvalStats eval;
    DecodeStats decode;
    ReferenceStats reference;
    FuseStats fuse;
    EarlyUpdateStats early;
    ScheduleStats schedule;
    AllocStats alloc;
    StreamStats streams;
    int64_t loss_chunk_rows;
    bool fused_loss;            // the loss is linear_cross_entropy
    int64_t loss_rows;          // its rows (micro-batch x seq)
} BuildStats;

// The stage names, in order ("elaborate", then each pass), for --dump-after.
const char *const *pipeline_stages(int *n);
// Builds choice `c` through every pass into a graph in arena `a`; NULL after errors.
IrGraph *pipeline_build(const Pipeline *p, const PlanChoice *c, Arena *a, BuildStats *bs);

// What the planner's build function measures a choice with.
typedef struct PlanCtx {
    const Pipeline *pipeline;
    const GpuPreset *gpu;
    CostModel cm;
} PlanCtx;

// PlannerInput.build over pipeline_build: device bytes (context reserve included),
// host bytes, cost, recompute, the peak's breakdown. `ctx` is a PlanCtx. The offsets
// are placed only where `need` (if not NULL) says the outcome could matter.
int pipeline_plan_choice(void *ctx, const PlanChoice *c, const BuildNeed *need, PlanOutcome *out);

//
// whatif.c — when nothing fits: what each user-side change would need (AdamW8bit's
// 8-bit moments among them).
//

// The most frugal plan under one change: its device and host arenas (device -1: not
// tried, or it did not build), and whether both fit their budgets.
typedef struct WhatIfPlan {
    int64_t device, host;
    bool fits;
} WhatIfPlan;

typedef struct WhatIf {
    bool weights_too_big;       // kept on the device, the bf16 weights alone exceed the budget
    const char *q_target, *v_target;    // the .ft names of the attention's q and v
                                        // projections, NULL when there are none
    WhatIfPlan stream;          // the weights streamed
    WhatIfPlan lora;            // lora(r = 8) on the q and v projections
    WhatIfPlan qlora;           // ... and quantize(nf4, double_quant = true)
    int64_t seq;                // the longest shorter sequence that fits both budgets, 0 none
    WhatIfPlan seq_plan;        // its plan
} WhatIf;

// Plans the most frugal choice (micro-batch 1, swap, everything offloadable on the host:
// the weights streamed, unless `offload` fixes a level that keeps them) under each change
// alone: the weights streamed (when the level kept them); LoRA on the projections feeding
// attention's q and v, found in the graph; that and NF4 storage; halved sequence lengths
// (a shorter sequence shrinks no model state: where the host cannot hold them, none is
// offered). Returns 0.
int whatif_search(const PlanCtx *x, int64_t budget_bytes, int64_t host_budget_bytes, int64_t weights_bytes,
                  int offload, WhatIf *w);

// A change of the optimizer's state: optimizer = adamw8bit in place of a plain AdamW (full
// fine-tuning, so no LoRA), or bf16_pure's AdamW with kahan = false; the planner's whole
// search again, over in's choices and budgets.
typedef enum WhatIfOptimChange { WHATIF_ADAMW8BIT, WHATIF_NO_KAHAN } WhatIfOptimChange;
typedef struct WhatIfOptim {
    bool tried;                 // the change applies to this step
    int64_t optimizer_bytes[2]; // the naive step's optimizer state: before, after
    bool fits;                  // a plan fits the device and host budgets
    Candidate plan;             // the fastest that fits, else the smallest tried
    bool planned;               // plan holds a candidate
    int64_t host_need;          // nothing tried: the least host memory a level needs
} WhatIfOptim;
int whatif_optimizer(const PlannerInput *in, WhatIfOptimChange change, WhatIfOptim *w);

//
// compile.c — ftc compile's whole computation, once: the options checked against the
// program, the naive step, the planner's search (or, when nothing fits, what would), the
// chosen plan built through every pass and every figure the plan's header states. The
// command line formats the result; nothing here prints but the IR dumps asked for.
//

// A program as the passes see it: its elaboration (the frontend's) and what its train
// section asks of the pipeline.
typedef struct CompileProgram {
    ElaborateFn elaborate;
    void *ctx;
    PipelineSpec spec;
} CompileProgram;

// What the train section says that planning reads beyond the pipeline's spec.
typedef struct CompileTrain {
    int64_t batch, seq;
    double clip;                // > 0: clipping by the norm of every gradient
    bool fp16;                  // fp16's loss scale (a step may be skipped)
    bool adamw8bit;             // 8-bit moments: those tensors stay whole on every rank
} CompileTrain;

// --remat tensors:K1xN1+K2xN2+...+K: the first N1 blocks keep K1 tensors each (the first
// K1 of the keep chain), the next N2 K2, ..., the blocks left the last K. A group's K may
// be followed by ^I,J,...: candidates (remat_candidates' order) whose keeping is flipped
// from the chain's mask (what the report prints for a plan keeping off the chain).
enum { TENSOR_GROUPS = 64, TENSOR_FLIPS = 16 };
typedef struct TensorsSpec {
    int n;                      // groups (0: none given)
    int kept[TENSOR_GROUPS];
    int blocks[TENSOR_GROUPS];  // the last group's: -1 (the blocks left)
    int nflip[TENSOR_GROUPS];
    int flip[TENSOR_GROUPS][TENSOR_FLIPS];
} TensorsSpec;

// --tile T1xN1+T2xN2+...+T: the first N1 blocks T1 sequence tiles each, the next N2 T2,
// ..., the blocks left the last T (1: untiled); --tile T alone: every block T.
enum { TILE_GROUPS = 64 };
typedef struct TileSpec {
    int n;                      // groups (0: the planner's choice)
    int64_t tiles[TILE_GROUPS];
    int blocks[TILE_GROUPS];    // the last group's: -1 (the blocks left)
    char text[64];              // as given (for what the refusals quote)
} TileSpec;

// ftc compile's options; -1 (or 0 for sizes and counts, NULL for names) leaves a choice
// to the planner or the default.
typedef struct CompileOptions {
    CompileProgram program;
    CompileTrain train;
    // Each precision regime's program, for the model states per parameter (through lora,
    // or quantize where the train section quantizes); none when nmodes is 0.
    const CompileProgram *modes;
    int nmodes;
    const char *gpu;            // the preset's name (NULL: a100-40g)
    const char *link;           // the link preset between ranks (NULL: by the rank count)
    int64_t budget;             // device bytes (0: the train section's, else the card's)
    int64_t host;               // host bytes (0: the train section's, else this machine's RAM)
    int64_t reserve;            // the card's reserve (-1: the preset's)
    HostSpec hs;
    int64_t micro;              // 0: the train section's, else the planner's
    int64_t ranks;              // 1: one process
    int zero, remat, offload;   // -1: the planner's
    TensorsSpec tensors;        // --remat tensors:...
    int update;                 // -1: the planner's, 0 after the step, 1 inside backward
    int64_t loss_chunk;
    TileSpec tile;              // --tile: the sequence tiles (n 0: the planner's)
    int64_t max_len;            // the decode phase's KV cache, tokens: > 0 that many, < 0 the
                                // train section's seq, 0 no decode phase
    bool no_fusion, unfused_loss, grad_temporaries, exhaustive, time_passes;
    bool verify;                // ir_verify between the chosen plan's passes
    bool emit_graph;            // also the training graph before remat and offload
    const char *dump_after;     // the IR after this pass of the chosen plan, or "all"
    FILE *dump_to;
    PassDiag *diag;             // the program's user errors, at its lines
} CompileOptions;

// The states one precision regime's model holds (CompileOptions.modes): bytes by category
// of the naive step, and its parameters.
typedef struct ModeStates {
    bool built;
    int64_t weights, grads, optimizer, master;
    int64_t params;
} ModeStates;

typedef enum CompileStatus {
    COMPILE_OK,
    COMPILE_USAGE,              // the options contradict each other (bad, why)
    COMPILE_REFUSED,            // the program cannot take them (bad, why), or its errors
                                // were reported through diag
    COMPILE_NOFIT,              // nothing fits: the search and the what-ifs say why
} CompileStatus;

typedef struct CompileResult {
    const char *bad;            // the option at fault ("--ranks"; "FILE": the program's
                                // request), or NULL
    char why[512];              // what is wrong ("": the program's errors, reported)
    GpuPreset gpu;              // the preset, with the reserve asked for
    const LinkPreset *link;     // between ranks, NULL with one
    int64_t asked, budget;      // the budget asked for, and planned for (at most the card's)
    int64_t host, reserve;      // host bytes; the device's bytes outside any arena
    // The step with no technique applied.
    ParamCount params;
    MemBreakdown naive;         // its memory, the card's reserve included
    int64_t naive_micro, naive_seq;
    int nlayers;
    ModeStates *modes;          // CompileOptions.nmodes of them
    // The search.
    PlanCtx pc;
    PlannerInput pin;
    PlannerResult search;
    double search_ms;
    PlanHolds holds;
    WhatIf whatif;              // nothing fits: each change alone ...
    WhatIfOptim optim[2];       // ... and the optimizer's (WhatIfOptimChange order)
    int64_t rank_weights;       // the weights a rank holds at the least
    // The chosen plan.
    PlanChoice best;
    int64_t accum;              // micro-steps a step
    IrGraph *graph;             // through every pass, verified, its instructions costed
    IrGraph *plain;             // with emit_graph: before remat and offload
    BuildStats stats;
    StepCost cost;
    int eval_nodes;             // the eval phase's instructions, and its device peak
    int64_t eval_peak;
    int decode_nodes;           // the decode phase's instructions, and its device peak
    int64_t decode_peak;
    char adapters[1024];        // the modules LoRA's adapters attach to ("q_proj,v_proj")
    PassTimes times;
    // (owned)
    uint8_t *chain;
    uint8_t *tensors_masks;     // --remat tensors: each block's mask
    int64_t *tile_blocks;       // --tile TxN+...: each block's tiles
    Arena *arena;
    Pipeline pipe;
} CompileResult;

// Plans the program of `o` into *r (which must stay where it is until compile_result_free:
// it points into itself). Returns a CompileStatus.
CompileStatus compile_plan(const CompileOptions *o, CompileResult *r);
void compile_result_free(CompileResult *r);

#endif
