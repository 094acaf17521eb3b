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
} PlanMeta;

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
