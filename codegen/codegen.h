// codegen.h — from a planned IR to the plan directory the runtime executes.
#ifndef FTC_CODEGEN_H
#define FTC_CODEGEN_H

#include "../ir/ir.h"
#include "../runtime/plan.h"

// What the plan header says beyond the graph.
typedef struct PlanMeta {
    const char *model, *source, *gpu;
    int64_t budget_bytes;
    int64_t accum;              // micro-steps per optimizer step
    const char *precision;      // "bf16", "fp16", "fp32", "bf16_pure"
    const char *optimizer;      // "adamw", "sgd"
    double lr, beta1, beta2, eps, weight_decay;
    int64_t arena_bytes;        // the device arena the offsets were assigned in
    int64_t host_bytes;         // the host arena
    int64_t reserve_bytes;      // modeled CUDA context, outside the arena
    double flops_per_s, bytes_per_s;   // the GPU preset's peak rates, for trace.json
    double link_bytes_per_s;
    const char *report;         // report.txt: the planner's decision and candidates, or NULL
    // LoRA, for the adapter files the runtime writes (r = 0: none)
    int64_t lora_r;
    double lora_alpha, lora_dropout;
    const char *lora_targets;   // comma-separated module names
} PlanMeta;

//
// dumps.c — the memory schedule from a plan: memory.txt, .json, .html, trace.json.
//

enum { MV_CATS = 11 };   // the categories of plan.h, then "other"

typedef struct MemMeta {
    int64_t budget_bytes, reserve_bytes;
    double flops_per_s, bytes_per_s;    // the GPU preset's peak rates
    double link_bytes_per_s;            // host link, for copy slices
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
// plan_write.c
//

// Writes the plan of `g` to `f`: buffers at the offsets and lifetimes the liveness
// and alloc passes assigned. Returns 0.
int codegen_plan_write(FILE *f, const IrGraph *g, const PlanMeta *meta);

// Writes directory `dir` (plan and friends) atomically: everything goes to a fresh
// temporary directory that replaces `dir` only when complete. 0, or -1 with err.
int codegen_plan_dir(const char *dir, const IrGraph *g, const PlanMeta *meta, char *err,
                     size_t errlen);

#endif
