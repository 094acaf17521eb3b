// kernel_args.h — the kernel ABI of codegen/cuda/prelude.cuh (FtcArgs, FtcGroupArgs) as
// the runtime fills it: a launch's buffers and runtime scalars, for every backend that
// runs the generated kernels (emu, cuda). The layouts must match the prelude's; the emu
// checks them against the sizes a compiled kernels.so exports.
#ifndef FTC_RUNTIME_KERNEL_ARGS_H
#define FTC_RUNTIME_KERNEL_ARGS_H

#include "runtime.h"

typedef struct KernelArgs {
    void *p[12];            // outputs, inputs, workspace, in plan order
    long long i[4];         // [0] the optimizer updates taken (this one included), [1] the micro-step, [2] the random stream
    float f[8];             // fp32, formed on the host: [0] the learning rate, [1] the loss scale;
                            // an update's scalars: AdamW's decay, step, sqrt(1 - beta2^t) in
                            // [2], [3], [4] (cpu_adamw_scalars), AdamW8bit's decay, step size,
                            // correction2 (cpu_adam8_scalars)
} KernelArgs;

typedef struct KernelGroupArgs {
    void *p[PLAN_GROUP_MAX][PLAN_GROUP_OPERANDS];   // member k's outputs, then inputs
    long long i[4];
    float f[8];
} KernelGroupArgs;

// The arguments of instruction `in`'s launches.
void rt_kernel_args(const Exec *x, const PlanInstr *in, KernelArgs *a);
// Whether a launch of `in` reads a runtime scalar that changes from one micro-step or step
// to the next (the op table's OPF_STEP_SCALARS): dropout its random stream (i[2]), the loss
// and grad_factor the loss scale (f[1]), the updates the learning rate and the updates
// taken (f[0], i[0] and their scalars: the updates run inside backward when the plan puts
// them there). No other kernel reads i[] or f[], so a graph's other kernel nodes keep the
// arguments they were captured with (rt_args_update).
bool rt_args_vary(const PlanInstr *in);
// The runtime scalars of a launch of `in` captured in *a made current (the buffers and the
// loss's chunk, i[3], kept).
void rt_args_update(const Exec *x, const PlanInstr *in, KernelArgs *a);
// The arguments of the grouped launch on `in` (the first of its group).
void rt_kernel_group_args(const Exec *x, const PlanInstr *in, KernelGroupArgs *a);
// rt_args_update for a grouped launch: its runtime scalars made current, the members'
// buffers kept.
void rt_group_args_update(const Exec *x, const PlanInstr *in, KernelGroupArgs *a);

#endif
