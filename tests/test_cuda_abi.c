// test_cuda_abi.c — runtime/cuda/cuda.h writes out the driver's and cuBLASLt's types and
// constants so the cuda backend builds without the toolkit, and runtime/cuda/nccl.h NCCL's;
// where the toolkit's headers exist, this checks every value and layout against them (at
// compile time: a mismatch is a build error naming it). Where NCCL itself is installed, it
// is opened as the backend opens it and every entry point resolved (no GPU needed).
#include "check.h"
#include "../runtime/cuda/cuda.h"
#include "../runtime/cuda/nccl.h"

#include <cublasLt.h>
#include <cuda.h>
#include <stddef.h>

#define SAME(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #ours " != " #theirs)

SAME(CUX_SUCCESS, CUDA_SUCCESS);
SAME(CUX_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME(CUX_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(CUX_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(CUX_ATTR_CC_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME(CUX_ATTR_CC_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME(CUX_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(CUX_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(CUX_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE);
SAME(CUX_CTX_SCHED_BLOCKING_SYNC, CU_CTX_SCHED_BLOCKING_SYNC);
SAME(sizeof(CuDevPtr), sizeof(CUdeviceptr));
SAME(sizeof(CuDevice), sizeof(CUdevice));
SAME(sizeof(CuResult), sizeof(CUresult));
SAME(CUX_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
SAME(CUX_CAPTURE_STATUS_ACTIVE, CU_STREAM_CAPTURE_STATUS_ACTIVE);
SAME(CUX_ERROR_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
SAME(CUX_ERROR_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
SAME(CUX_ERROR_CAPTURE_UNJOINED, CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
SAME(CUX_ERROR_CAPTURE_ISOLATION, CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
SAME(sizeof(CuKernelNodeParams), sizeof(CUDA_KERNEL_NODE_PARAMS_v2));
SAME(offsetof(CuKernelNodeParams, grid_x), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimX));
SAME(offsetof(CuKernelNodeParams, block_z), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimZ));
SAME(offsetof(CuKernelNodeParams, shared_bytes), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, sharedMemBytes));
SAME(offsetof(CuKernelNodeParams, params), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kernelParams));
SAME(offsetof(CuKernelNodeParams, extra), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, extra));
SAME(offsetof(CuKernelNodeParams, kern), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kern));
SAME(offsetof(CuKernelNodeParams, ctx), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, ctx));
// The first version's fields are the second's first ones, at the same places.
SAME(offsetof(CUDA_KERNEL_NODE_PARAMS_v1, extra), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, extra));

SAME(LTX_SUCCESS, CUBLAS_STATUS_SUCCESS);
SAME(LTX_OP_N, CUBLAS_OP_N);
SAME(LTX_OP_T, CUBLAS_OP_T);
SAME(LTX_COMPUTE_32F, CUBLAS_COMPUTE_32F);
SAME(LTX_R_32F, CUDA_R_32F);
SAME(LTX_R_16F, CUDA_R_16F);
SAME(LTX_R_16BF, CUDA_R_16BF);
SAME(LTX_PREF_MIN_ALIGNMENT_A, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
SAME(LTX_PREF_MIN_ALIGNMENT_A + 3, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
SAME(LTX_ALGO_ID, CUBLASLT_ALGO_CONFIG_ID);
SAME(LTX_ALGO_TILE, CUBLASLT_ALGO_CONFIG_TILE_ID);
SAME(LTX_ALGO_SPLITK, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
SAME(LTX_ALGO_STAGES, CUBLASLT_ALGO_CONFIG_STAGES_ID);
SAME(LTX_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSA);
SAME(LTX_DESC_TRANSB, CUBLASLT_MATMUL_DESC_TRANSB);
SAME(LTX_DESC_EPILOGUE, CUBLASLT_MATMUL_DESC_EPILOGUE);
SAME(LTX_DESC_BIAS_POINTER, CUBLASLT_MATMUL_DESC_BIAS_POINTER);
SAME(LTX_DESC_BIAS_DATA_TYPE, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
SAME(LTX_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DEFAULT);
SAME(LTX_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BIAS);
SAME(LTX_LAYOUT_BATCH_COUNT, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
SAME(LTX_LAYOUT_STRIDED_BATCH_OFFSET, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
SAME(LTX_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
SAME(sizeof(LtStatus), sizeof(cublasStatus_t));
SAME(sizeof(LtAlgo), sizeof(cublasLtMatmulAlgo_t));
SAME(sizeof(LtHeuristic), sizeof(cublasLtMatmulHeuristicResult_t));
SAME(offsetof(LtHeuristic, workspace_bytes), offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
SAME(offsetof(LtHeuristic, state), offsetof(cublasLtMatmulHeuristicResult_t, state));
SAME(offsetof(LtHeuristic, waves), offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));

#if __has_include(<nccl.h>)
#include <nccl.h>
#define HAVE_NCCL_H 1
SAME(sizeof(NcclUniqueId), sizeof(ncclUniqueId));
SAME(NCCLX_SUCCESS, ncclSuccess);
SAME(NCCLX_REMOTE_ERROR, ncclRemoteError);
SAME(NCCLX_IN_PROGRESS, ncclInProgress);
SAME(NCCLX_UINT8, ncclUint8);
SAME(NCCLX_FLOAT16, ncclFloat16);
SAME(NCCLX_FLOAT32, ncclFloat32);
SAME(NCCLX_BFLOAT16, ncclBfloat16);
SAME(NCCLX_SUM, ncclSum);
SAME(sizeof(NcclComm), sizeof(ncclComm_t));
#endif

// The entry points the loader looks up by their base names are declared under them (cuda.h
// maps each to the versioned symbol cuGetProcAddress resolves); cuBLASLt's likewise.
#define DECLARED(f) _Static_assert(sizeof(&f) == sizeof(void (*)(void)), #f)
DECLARED(cuInit);
DECLARED(cuMemAlloc);
DECLARED(cuMemGetInfo);
DECLARED(cuMemcpyHtoD);
DECLARED(cuMemcpyAsync);
DECLARED(cuMemsetD8Async);
DECLARED(cuMemHostAlloc);
DECLARED(cuStreamWaitEvent);
DECLARED(cuEventRecord);
DECLARED(cuLaunchKernel);
DECLARED(cuModuleLoadData);
DECLARED(cuDevicePrimaryCtxRetain);
DECLARED(cuStreamBeginCapture);
DECLARED(cuStreamEndCapture);
DECLARED(cuGraphInstantiateWithFlags);
DECLARED(cuGraphLaunch);
DECLARED(cuGraphExecKernelNodeSetParams);
DECLARED(cublasLtMatmul);
DECLARED(cublasLtMatmulAlgoGetHeuristic);

// Everything above is checked when this file compiles.
static void test_abi(void) { CHECK(CUX_DRIVER_ABI >= 12000); }

// libnccl.so.2 opened with dlopen and every entry point the backend calls found; its version
// the header's (the library is the toolkit's own, beside the header).
static void test_nccl_loads(void) {
#ifdef HAVE_NCCL_H
    NcclApi api;
    char err[512] = "";
    if (nccl_api_load(&api, err, sizeof err) != 0) {
        printf("  (no NCCL library here: %s)\n", err);
        return;
    }
    int v = 0;
    CHECK(api.GetVersion(&v) == NCCLX_SUCCESS);
    CHECKF(v == NCCL_VERSION_CODE, "libnccl.so.2 is %d, nccl.h %d", v, NCCL_VERSION_CODE);
    const char *why = api.GetErrorString(NCCLX_REMOTE_ERROR);
    CHECK(why && *why);
    printf("  NCCL %d loaded with dlopen, %s\n", v, why ? why : "");
#endif
}

int main(void) {
    RUN(test_abi);
    RUN(test_nccl_loads);
    return CHECK_DONE();
}
