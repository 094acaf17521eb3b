// gpu.c — GPU presets (REFERENCE.md §5) and the host the cost model assumes.
//
// A preset's memory is what the card reports as its total (nvidia-smi's figure, in
// MiB): an RTX 4090 reports 24564 MiB, less than 24 GiB, so a budget of "24G" on it is
// the card's 24564 MiB. What a process can allocate is less, and the preset's reserve is
// that difference, derived (not guessed) from three figures:
//   - the driver's total: cuMemGetInfo (and cuDeviceTotalMem, deviceQuery's "Total amount
//     of global memory", PyTorch's "total capacity") reports less than nvidia-smi, the
//     difference being memory the driver keeps for itself. Figures as published by users of
//     each card: A100-SXM4-40GB 40339 MiB (deviceQuery, driver 12.2), A100 80GB 79.15 GiB
//     (PyTorch), H100 80GB HBM3 81079 MiB (deviceQuery, driver 13.0; 81106 under 12.7: the
//     lower is taken), H200 139.80 GiB (PyTorch), L4 22.17 GiB, RTX 4090 23.65 GiB
//     (PyTorch). tests/gpu/run.sh prints the figure a real card gives.
//   - the context: a CUDA 12/13 context with lazily loaded modules, and the driver's use
//     inside it, CONTEXT_MIB (a modeled figure; `ftc run` on a GPU prints what it measured).
//   - the plan's kernels and cuBLASLt's handle, MODULE_MIB: the margin the cuda backend's
//     start-up check keeps free beside the arena (runtime/cuda/backend.c, preflight).
// So a plan that fills its budget on the preset's card starts there: arena + reserve <=
// nominal means arena + MODULE_MIB <= driver total - context. `ftc compile --reserve` sets
// another reserve.
#include "passes.h"

#include <string.h>

#define MiB(x) ((int64_t)(x) << 20)
#define CONTEXT_MIB 512
#define MODULE_MIB 64
// A preset's nominal memory, the driver's total and the reserve between them, in MiB.
#define MEMORY(nominal, driver) MiB(nominal), MiB(driver), MiB((nominal) - (driver) + CONTEXT_MIB + MODULE_MIB)

// The attention kernels' efficiency (codegen/cuda/attention.cuh: FlashAttention-2's design
// on mma.sync), measured on an H200 (tests/gpu/quick.sh, ftc run --profile against this model's
// estimate): Qwen2-7B's shapes (head dim 128, 28 heads, 4 KV heads, 2048 tokens) 0.165 of the
// bf16 peak forward and 0.059 backward, Qwen2-0.5B's (head dim 64, 14 heads, micro-batch 8)
// 0.152 and 0.048; taken as 0.16 and 0.053 for the H100 and H200 (torch's flash SDPA there:
// 0.17-0.19 forward, 0.14-0.16 backward). The backward is held back by its ordered dq additions (a
// key tile hands the query tile's accumulator on after a fence), not by its products. The
// other cards are unmeasured: their earlier figures (0.50 and 0.35, below FlashAttention-2's
// published 50-73% forward and 40-45% backward on an A100) scaled by what the H200 measured
// against its own earlier ones (0.30 and 0.22), 0.27 and 0.084.
static const GpuPreset presets[] = {
    {"a100-40g", MEMORY(40960, 40339), 312, 1555, 25, MiB(4), "sm_80", 108, 0.27, 0.084},
    {"a100-80g", MEMORY(81920, 81050), 312, 2039, 25, MiB(4), "sm_80", 108, 0.27, 0.084},
    {"h100-80g", MEMORY(81559, 81079), 989, 3350, 50, MiB(32), "sm_90", 132, 0.16, 0.053},
    {"h200", MEMORY(143771, 143155), 989, 4800, 50, MiB(32), "sm_90", 132, 0.16, 0.053},
    {"l4", MEMORY(23034, 22702), 121, 300, 25, MiB(4), "sm_89", 58, 0.27, 0.084},
    {"rtx4090", MEMORY(24564, 24218), 165, 1008, 25, MiB(4), "sm_89", 128, 0.27, 0.084},
};

const GpuPreset *gpu_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

const GpuPreset *gpu_presets(int *n) {
    *n = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}

// A typical training server: 32 cores for the CPU AdamW, each updating 200 M fp32
// parameters a second with every core busy (AdamW moves ~30 bytes a parameter, so 32
// cores take ~190 GB/s of memory bandwidth, what two sockets of DDR4/DDR5 give), and
// the GPU preset's link.
HostSpec host_default(void) { return (HostSpec){.cores = 32, .adamw_per_core = 2e8, .link_gbps = 0}; }

double host_adamw_rate(const HostSpec *h) { return (double)h->cores * h->adamw_per_core; }

double host_link_bytes_per_s(const HostSpec *h, const GpuPreset *gpu) {
    return (h->link_gbps > 0 ? h->link_gbps : gpu->link_gbps) * 1e9;
}

// A sum of squares in double, in order, on one core: a fifth of the time of an AdamW
// update per element (one load, a multiply-add on a dependent chain).
double host_sumsq_rate(const HostSpec *h) { return 5.0 * h->adamw_per_core; }
