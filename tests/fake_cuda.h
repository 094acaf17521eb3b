// fake_cuda.h — a simulated CUDA driver and cuBLASLt behind cuda.h's tables, for testing
// the cuda backend's host-side logic on a machine without a GPU.
//
// Memory is host memory. Kernels are the plan's own kernels.cu, compiled for the CPU (the
// emu's kernels.so) and launched by name. GEMMs are computed in fp32 from cuBLASLt's
// column-major descriptors. Nothing runs when it is issued: every stream is a queue, and
// work runs only when something on the host waits for it (an event, a stream, the
// context), and then only what that wait depends on through stream order and
// cuStreamWaitEvent, streams in reverse order, as late as a GPU might run it. A missing
// wait therefore reads stale data rather than passing by luck, and each operation, when
// it runs, is checked against every operation issued before it on another stream that
// has not run: one writing bytes the other touches is a race (a kernel reading a buffer
// before the copy that fills it has completed), recorded with both operations named.
// Adversarial where a real driver is: a synchronous cuMemcpyHtoD from pageable memory returns
// before its DMA lands, which it does only at the next synchronous copy or cuCtxSynchronize
// (a kernel reading the bytes first is a race); the process sees the devices
// CUDA_VISIBLE_DEVICES lists; a module loads from a CUBIN of the device's SM or an earlier
// minor of its major, or from PTX up to its SM, as the architecture and driver version say;
// cuBLASLt refuses operands less aligned than the algorithm was chosen for (256 bytes unless
// the preference says less).
#ifndef FTC_TEST_FAKE_CUDA_H
#define FTC_TEST_FAKE_CUDA_H

#include "../runtime/cuda/cuda.h"
#include "../runtime/runtime.h"

#include <stdbool.h>

typedef struct FakeOptions {
    const char *plan_dir;     // whose kernels.cu the "GPU" runs
    int cc_major, cc_minor;   // the architecture it reports
    int64_t total_bytes;      // device memory; free = total - context - allocations
    int64_t context_bytes;    // what the context takes before anything is allocated
    bool ignore_waits;        // drop cuStreamWaitEvent (to show the race check fails)
    int devices;              // GPUs the process sees without CUDA_VISIBLE_DEVICES (0: 1)
    const char *fault_kernel; // a kernel whose name holds this faults (an illegal address
                              // that every later wait, query and launch returns)
    int driver_version;       // cuDriverGetVersion's (0: 13000); below 13000 CUDA 13's
                              // CUBINs and PTX are refused
    bool refuse_capture;      // cuStreamBeginCapture fails (a driver that cannot capture)
} FakeOptions;

typedef struct FakeStats {
    int launches, group_launches, gemms, copies, memsets, waits, host_syncs, module_loads;
    int ctx_syncs;            // of the host syncs, those that drained the whole device
    int ctx_flags;            // the primary context's flags (cuDevicePrimaryCtxSetFlags)
    int top_priority, top_priority_stream;   // the most urgent stream made, and which
    int bad_handles;          // streams and events passed that the driver never made
    int races;                // operations that ran unordered with an earlier one
    char first_race[512];
    char *launch_log;         // kernel names in issue order, one per line (malloc'd); a
                              // graph's as it is launched
    int captures, graph_launches, node_updates;   // stream captures ended into a graph; graph
                                                  // launches; kernel nodes given new arguments
} FakeStats;

// A host operation issued on stream s (the simulated NCCL's collectives): fn(arg) runs
// when the stream reaches it and returns 0 when done, 1 when not yet (the stream waits there,
// and an event behind it queries as not ready); it reads [r0, r1) and writes [w0, w1), which
// the race check sees. arg is freed by fake_cuda_close. A cuda.h error code.
int fake_cuda_host_op(CuStream s, int (*fn)(void *arg), void *arg, const char *what, uintptr_t r0,
                      uintptr_t r1, uintptr_t w0, uintptr_t w1);

// Device memory taken by something other than an allocation (a library's own: NCCL's).
void fake_cuda_take(int64_t bytes);

// Fills `api` with the fake; 0, or -1 with err (the plan's kernels did not compile).
int fake_cuda_open(CudaApi *api, const FakeOptions *o, char *err, size_t errlen);
const FakeStats *fake_cuda_stats(void);
void fake_cuda_reset_log(void);
void fake_cuda_close(void);

#endif
