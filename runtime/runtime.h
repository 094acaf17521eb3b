// runtime.h — executes plans: backends, the executor, weights, the training loop.
// Never includes anything of the compiler: plan.h is the whole contract.
#ifndef FTC_RUNTIME_H
#define FTC_RUNTIME_H

#include "plan.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct Exec Exec;

//
// backend.h equivalent: a backend is a table of function pointers. The cpu backend
// fills every entry; the cuda backend will fill the same table.
//

typedef struct Backend {
    const char *name;
    // Checks that every instruction of `p` has a kernel here; -1 with err if not.
    int (*prepare)(struct Backend *b, const Plan *p, char *err, size_t errlen);
    // Memory the arenas live in (device memory for a GPU backend).
    void *(*alloc)(struct Backend *b, int64_t bytes);
    void (*free)(struct Backend *b, void *p);
    // Copies between host memory and the backend's memory.
    void (*upload)(struct Backend *b, void *dst, const void *src, int64_t bytes);
    void (*download)(struct Backend *b, void *dst, const void *src, int64_t bytes);
    // Runs instruction `in` of the plan on the executor's buffers; -1 with err.
    int (*run)(struct Backend *b, Exec *x, const PlanInstr *in, char *err, size_t errlen);
    void (*sync)(struct Backend *b);                    // (optional)
    void (*destroy)(struct Backend *b);
    void *state;
} Backend;

// cpu/backend.c
Backend *rt_cpu_backend(void);

//
// exec.c — arenas, buffer addresses, phases.
//

typedef enum ExecLayout {
    LAYOUT_PLANNED,     // one allocation per arena, every buffer at its planned offset
    LAYOUT_UNPLANNED,   // every buffer its own allocation (the reference for equivalence)
} ExecLayout;

struct Exec {
    const Plan *plan;
    Backend *be;
    ExecLayout layout;
    void *arena[ARENA_COUNT];
    void **ptr;             // per buffer: its address (a view: its base's)
    int *root;              // per buffer: the buffer owning its bytes (plan_roots)
    uint64_t seed;          // dropout and initialisation
    int64_t step;           // optimizer steps taken (1-based inside the optimizer phase)
    int64_t micro;          // micro-step within the step
    bool poison;            // fill a buffer's bytes with NaN when its lifetime ends
};

// Allocates the buffers of `p` on `be` with `layout`; -1 with err.
int rt_exec_init(Exec *x, const Plan *p, Backend *be, ExecLayout layout, char *err, size_t errlen);
void rt_exec_free(Exec *x);
// Runs every instruction of phase `ph`; -1 with err naming the instruction.
int rt_exec_phase(Exec *x, PlanPhase ph, char *err, size_t errlen);
// Reads buffer `id` as fp32 values into dst (converting bf16/f16); n elements.
void rt_read_f32(const Exec *x, int id, float *dst);
// Writes fp32 values into buffer `id` (rounding to its dtype).
void rt_write_f32(Exec *x, int id, const float *src);

//
// weights.c — initialisation, checkpoint loading, saving.
//

// Initialises every parameter per the plan (normal, ones, zeros, kaiming_uniform)
// from `seed`, then the master copies and optimizer state; gradients are zeroed.
void rt_weights_init(Exec *x, uint64_t seed);
// Loads every parameter by its checkpoint name from a safetensors file or directory;
// -1 with err naming the file and the tensor.
int rt_weights_load(Exec *x, const char *path, char *err, size_t errlen);
// Saves the parameters (fp32 master copies where there are, else the weights) as
// safetensors at `path` (atomically); -1 with err.
int rt_weights_save(Exec *x, const char *path, bool trainable_only, char *err, size_t errlen);
// LoRA: writes DIR/adapter_model.safetensors (PEFT's names,
// base_model.model.<module>.lora_A.weight, fp32) and DIR/adapter_config.json; -1 with err.
int rt_adapters_save(Exec *x, const char *dir, const char *base_model, char *err, size_t errlen);
// Writes the base parameters with each adapter merged in (W + alpha/r · B A, fp32),
// under their checkpoint names: a plain model for transformers; -1 with err.
int rt_weights_save_merged(Exec *x, const char *path, char *err, size_t errlen);

//
// train.c — ftc run.
//

typedef struct RunOptions {
    const char *plan_dir, *data, *weights, *save;
    int64_t steps;
    int64_t save_every;     // also save after every this many steps (0: only at the end)
    uint64_t seed;
    bool poison;
    ExecLayout layout;
    bool merge;             // with LoRA: also save the merged weights
    FILE *out;              // progress lines
} RunOptions;

// Trains: returns 0, or 1 after printing an error.
int rt_train(const RunOptions *o);

#endif
