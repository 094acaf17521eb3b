// link.c — the links between the ranks of a data-parallel job, for the cost model of
// collectives: bandwidth one way per GPU and a per-call latency.
//
//   nvlink  H100 SXM's NVLink 4: 900 GB/s per GPU both ways (NVIDIA H100 Tensor Core GPU
//           datasheet), so 450 GB/s each way; 360 GB/s modelled (80%)
//   pcie    PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b, 31.5 GB/s each way (PCI-SIG); 25 GB/s
//           modelled, what copies to the host achieve (REFERENCE.md §5)
//   ib      InfiniBand NDR: 400 Gb/s a port, 50 GB/s, one ConnectX-7 per GPU (NVIDIA DGX H100
//           user guide); 40 GB/s modelled (80%)
//
// NCCL's own device buffers are outside any arena: 4 MiB (NCCL_BUFFSIZE's default) per
// channel each way, up to 32 channels, 256 MiB in all, counted with the context reserve.
//
// Latencies are of the order of NCCL's time for a small message in nccl-tests runs (tens of
// microseconds per call, more across nodes). A ring all-reduce of B bytes over R ranks moves
// 2(R-1)/R·B through each link, a reduce-scatter or an all-gather (R-1)/R·B (the bus
// bandwidth factors of NVIDIA/nccl-tests' doc/PERFORMANCE.md).
#include "passes.h"

#include <string.h>

static const LinkPreset links[] = {
    {"nvlink", 360, 15, "NVLink 4 (H100 SXM, 450 GB/s each way)"},
    {"pcie", 25, 25, "PCIe 4.0 x16 (31.5 GB/s each way)"},
    {"ib", 40, 40, "InfiniBand NDR, 400 Gb/s a GPU"},
};

const LinkPreset *link_preset(const char *name) {
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        if (strcmp(links[i].name, name) == 0)
            return &links[i];
    return NULL;
}

const LinkPreset *link_presets(int *n) {
    *n = (int)(sizeof links / sizeof links[0]);
    return links;
}

double link_collective_us(const LinkPreset *l, OpKind op, int64_t bytes, int ranks) {
    if (ranks <= 1 || !l)
        return 0;
    double r = (double)ranks, factor = op == OP_ALL_REDUCE ? 2 * (r - 1) / r : (r - 1) / r;
    return l->latency_us + factor * (double)bytes / (l->gbps * 1e9) * 1e6;
}

int64_t link_reserve_bytes(int ranks) { return ranks > 1 ? (int64_t)256 << 20 : 0; }
