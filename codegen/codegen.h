// codegen.h — from a planned IR to the plan directory the runtime executes.
#ifndef FTC_CODEGEN_H
#define FTC_CODEGEN_H

#include "../ir/ir.h"
#include "../runtime/plan.h"

// What the plan header says beyond the graph.
typedef struct PlanMeta {
    const char *model, *source, *gpu;
    const char *arch;           // compile kernels.cu with NVRTC for this SM ("sm_80"), if
                                // NVRTC is found; NULL: write the source alone
    int64_t budget_bytes;
    int64_t accum;              // micro-steps per optimizer step
    const char *precision;      // "bf16", "fp16", "fp32", "bf16_pure"
    const char *optimizer;      // "adamw", "adamw8bit", "sgd"
    double lr, beta1, beta2, eps, weight_decay;
    // the learning rate's schedule (runtime/plan.h: the schedule line); NULL: constant
    const char *lr_schedule;
    int64_t warmup_steps, steps;
    double min_lr;
    // fp16's dynamic loss scale (the loss_scale line); init 0: none
    double scale_init, scale_growth, scale_backoff;
    int64_t scale_interval;
    int64_t arena_bytes;        // the device arena the offsets were assigned in
    int64_t host_bytes;         // the host arena
    int64_t reserve_bytes;      // modeled CUDA context, outside the arena
    double flops_per_s, bytes_per_s;   // the GPU preset's peak rates, for trace.json
    double link_bytes_per_s;
    // The cost model's estimate for the chosen plan: the FLOPs of one optimizer step
    // without recompute, and its time (0: none made)
    int64_t model_flops;
    double step_us;
    // The training host the cost model assumed (host_cores 0: none), and the AdamW and
    // link rates over which the planner's choice holds (plan.h's `host` line)
    int host_cores;
    double host_adamw_per_core, host_link;
    double adamw_lo, adamw_hi, link_lo, link_hi;
    const char *report;         // report.txt: the planner's decision and candidates, or NULL
    const char *hf_config;      // config.json: the model's Hugging Face config, which a save
                                // carries where its weights came with none; or NULL
    // LoRA, for the adapter files the runtime writes (r = 0: none)
    int64_t lora_r;
    double lora_alpha, lora_dropout;
    const char *lora_targets;   // comma-separated module names
    // Data parallelism (the graph's ranks): the ZeRO stage and link preset planned for
    int zero;                   // -1: none
    const char *link;           // or NULL
    double comm_bytes_per_s, comm_latency_us;   // the link's, for trace.json
} PlanMeta;

//
// dumps.c — the memory schedule from a plan: memory.txt, .json, .html, trace.json.
//

enum { MV_CATS = 13 };   // the categories of plan.h, then "other"

typedef struct MemMeta {
    int64_t budget_bytes, reserve_bytes;
    double flops_per_s, bytes_per_s;    // the GPU preset's peak rates
    double link_bytes_per_s;            // host link, for copy slices
    double comm_bytes_per_s;            // between ranks, for collectives' slices (0: none)
    double comm_latency_us;
} MemMeta;

typedef struct MemView {
    const Plan *p;
    int n;                          // instructions
    int64_t *live;                  // (n, MV_CATS) device bytes live per category
    int64_t *total;                 // (n)
    int64_t peak;                   // the most bytes live at one instruction
    int peak_at;
    int64_t phase_peak[PHASE_COUNT];
    int phase_peak_at[PHASE_COUNT];
    // The pinned host arena, its own view: offloaded state, swapped activations, streamed
    // weights, staging.
    int64_t *hlive;                 // (n, MV_CATS) host bytes live per category
    int64_t *htotal;                // (n)
    int64_t hpeak;
    int hpeak_at;
} MemView;

int mv_init(MemView *v, const Plan *p);
void mv_free(MemView *v);
int mv_category(const char *name);
const char *mv_category_name(int c);
void mv_write_txt(FILE *f, const MemView *v, const MemMeta *m);
void mv_write_json(FILE *f, const MemView *v, const MemMeta *m);
void mv_write_html(FILE *f, const MemView *v, const MemMeta *m);
void mv_write_trace(FILE *f, const MemView *v, const MemMeta *m);
// What is live at instruction `at`: by category, and the `top` largest buffers.
void mv_print_at(FILE *f, const MemView *v, int at, int top);
// One buffer: where it lives, when, and every instruction touching it; -1 if unknown.
int mv_print_buffer(FILE *f, const MemView *v, const char *name);
// Writes the four dumps into `dir`; -1 with err.
int codegen_dumps(const char *dir, const Plan *p, const MemMeta *m, char *err, size_t errlen);

//
// kernels.c, cuda_ops.c — the CUDA C of a plan: kernels.cu, one kernel per distinct
// specialisation, made from the op table's device code (elementwise ops) and the
// templates in codegen/cuda/ (the rest); GEMMs are library calls, views and copies
// need no kernel.
//

enum { KERNEL_MAX_LAUNCHES = 3 };

// The optimizer's hyperparameters, which the update kernels are specialised on.
typedef struct KernelHyper {
    double beta1, beta2, eps;   // (weight decay is each update's own: its attribute)
} KernelHyper;

typedef struct KernelLaunch {
    char name[64];
    unsigned grid[3], block[3];
    unsigned smem;              // dynamic shared memory (FTC_DYN_SMEM), bytes
} KernelLaunch;

// The launches of one node, in order; none for a GEMM, a view or a copy. A grouped
// launch (the optimizer over many tensors) sits on the first node of its group, whose
// `group` says how many consecutive nodes of the phase it covers; each of the others has
// no launch of its own and names that first node in `by`.
typedef struct NodeKernels {
    int n;
    KernelLaunch at[KERNEL_MAX_LAUNCHES];
    int main;                   // which launch does the node's work (CudaOp.main_launch)
    int group;                  // on a group's first node: its size; else 0
    int by;                     // on the rest: the first node; else -1
} NodeKernels;

// runtime/plan.h's PLAN_GROUP_MAX and PLAN_GROUP_OPERANDS (prelude.cuh's FTC_GROUP_*).
enum { KERNEL_GROUP_MAX = 64, KERNEL_GROUP_OPERANDS = 6 };

typedef struct KernelSet {
    char *source;               // kernels.cu (malloc'd)
    NodeKernels *node;          // per graph node
    int nnodes;
    int nkernels;               // distinct kernels in the source
    int nlaunch_nodes;          // nodes with at least one launch
} KernelSet;

// A CUDA source embedded at build time (codegen/cuda/*.cuh, ftc_emu.h); the list ends
// with a NULL name.
typedef struct CudaFile {
    const char *name, *text;
} CudaFile;
extern const CudaFile codegen_cuda_files[];
const char *codegen_cuda_file(const char *name);   // NULL if not embedded

// What the CUDA column's functions see.
typedef struct CudaCtx {
    const IrGraph *g;
    const IrNode *n;
    int launch;
    const KernelHyper *hyper;
} CudaCtx;

// One op's row of the CUDA column.
typedef struct CudaOp {
    const char *fn[KERNEL_MAX_LAUNCHES];    // template functions, one a launch
    int syncs[KERNEL_MAX_LAUNCHES];         // the launch uses barriers or warp operations
    void (*args)(FILE *f, const CudaCtx *x);   // the constants after `a` in the call
    void (*geometry)(const CudaCtx *x, unsigned *grid, unsigned *block);
    // Ops that update many tensors in one launch: the template (called as
    // `fn(FTC_GA, start, count, constants)`) and its constants, the same for every member
    // of a group (nodes whose constants print alike may share a launch).
    const char *group_fn;
    void (*group_args)(FILE *f, const CudaCtx *x);
    // File-scope text a launch's kernel needs before it (a table), "$K" for the kernel's
    // name; NULL for none.
    void (*prefix)(FILE *f, const CudaCtx *x);
    unsigned (*smem)(const CudaCtx *x);     // a launch's dynamic shared memory (optional)
    int (*per_thread)(const CudaCtx *x);    // elements a thread takes a step in a grouped
                                            // launch (optional; 1)
    int main_launch;                        // the launch doing the node's work (the others
                                            // prepare or finish it): its estimate goes there
} CudaOp;

// Whether tensor t's bytes start 16 bytes aligned (its base's arena offset and its view's
// offset in it): where a kernel may load it 16 bytes at a time.
bool codegen_aligned16(const IrGraph *g, int t);

// The op's row, or NULL when it has none (elementwise ops, GEMMs, views, copies).
const CudaOp *cuda_op(OpKind op);

// Generates the kernels of every node of `g` (after alloc); 0, or -1 with err naming a
// node whose op has no kernel.
int codegen_kernels(const IrGraph *g, const KernelHyper *h, KernelSet *ks, char *err, size_t errlen);
void codegen_kernels_free(KernelSet *ks);

//
// plan_write.c
//

// Writes the plan of `g` to `f`: buffers at the offsets and lifetimes the liveness
// and alloc passes assigned, each node's kernel launches from `ks` (if not NULL).
// Returns 0.
int codegen_plan_write(FILE *f, const IrGraph *g, const PlanMeta *meta, const KernelSet *ks);

// Whether a plan may be written to dir: a new path, an empty directory or a plan
// directory (whose files other than ftc's own are kept); -1 with err otherwise.
int codegen_plan_dir_check(const char *dir, char *err, size_t errlen);
// Writes directory `dir` (plan and friends) atomically: everything goes to a fresh
// temporary directory that replaces `dir` only when complete, taking along whatever
// else the user kept in it; what an ftc killed while writing `dir` left beside it
// (DIR.tmp.PID, DIR.old.PID of dead processes) is removed. 0, or -1 with err.
int codegen_plan_dir(const char *dir, const IrGraph *g, const PlanMeta *meta, char *err,
                     size_t errlen);

#endif
