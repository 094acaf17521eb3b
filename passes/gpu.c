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

// The attention kernels' efficiency (codegen/cuda/attention.cuh: FlashAttention-2's
// design on mma.sync, unmeasured until tests/gpu/run.sh runs) is priced below the published
// FlashAttention-2 figures for its class: on the A100, FlashAttention-2 reaches 50-73% of the
// bf16 peak forward and about 40-45% backward (Dao, "FlashAttention-2", arXiv 2307.08691,
// figs. 4-7, head dims 64 and 128); ftc's tiles are smaller (64 query rows, K and V one buffer
// each) and its backward orders the dq additions, so 0.50 and 0.35. On the H100 mma.sync
// kernels in that design reach about 30% of the peak forward (PyTorch's FlashAttention-2
// SDPA: ~290-300 TFLOPs/s at head dim 128, pytorch/benchmark PR 2296; Shah et al.,
// "FlashAttention-3", arXiv 2407.08608, fig. 5) and less backward: 0.30 and 0.22. Ada (sm_89)
// as Ampere.
static const GpuPreset presets[] = {
    {"a100-40g", MEMORY(40960, 40339), 312, 1555, 25, MiB(4), "sm_80", 108, 0.50, 0.35},
    {"a100-80g", MEMORY(81920, 81050), 312, 2039, 25, MiB(4), "sm_80", 108, 0.50, 0.35},
    {"h100-80g", MEMORY(81559, 81079), 989, 3350, 50, MiB(32), "sm_90", 132, 0.30, 0.22},
    {"h200", MEMORY(143771, 143155), 989, 4800, 50, MiB(32), "sm_90", 132, 0.30, 0.22},
    {"l4", MEMORY(23034, 22702), 121, 300, 25, MiB(4), "sm_89", 58, 0.50, 0.35},
    {"rtx4090", MEMORY(24564, 24218), 165, 1008, 25, MiB(4), "sm_89", 128, 0.50, 0.35},
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
