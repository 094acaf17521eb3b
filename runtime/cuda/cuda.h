// cuda.h — the parts of the CUDA driver API and cuBLASLt the cuda backend calls, as
// tables of function pointers. ftc never links either library: loader.c fills the tables
// with dlopen (the driver through cuGetProcAddress at a fixed ABI version), so the binary
// starts where neither exists, and the tests fill them with a simulated driver that runs
// the generated kernels on the CPU (tests/fake_cuda.c). Types and constants are written
// out here rather than taken from the toolkit's headers, so the backend builds without
// the toolkit; tests/test_cuda_abi.c checks them against the headers where they exist.
#ifndef FTC_RUNTIME_CUDA_H
#define FTC_RUNTIME_CUDA_H

#include <stddef.h>
#include <stdint.h>

// The driver's types: handles are opaque pointers, device memory a 64-bit address (with
// unified addressing, a pinned host pointer is one too).
typedef int CuResult;
typedef int CuDevice;
typedef unsigned long long CuDevPtr;
typedef struct CuContextOpaque *CuContext;
typedef struct CuStreamOpaque *CuStream;
typedef struct CuEventOpaque *CuEvent;
typedef struct CuModuleOpaque *CuModule;
typedef struct CuFunctionOpaque *CuFunction;
typedef struct CuGraphOpaque *CuGraph;
typedef struct CuGraphExecOpaque *CuGraphExec;
typedef struct CuGraphNodeOpaque *CuGraphNode;

// A kernel node's launch, as cuGraphExecKernelNodeSetParams takes it (CUDA 12's
// CUDA_KERNEL_NODE_PARAMS_v2; `kern` and `ctx` NULL, which the first version's layout
// ignores: either entry point reads it right).
typedef struct CuKernelNodeParams {
    CuFunction func;
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z;
    unsigned shared_bytes;
    void **params;
    void **extra;
    void *kern;
    CuContext ctx;
} CuKernelNodeParams;

// The driver's constants we use (cuda.h's values).
enum {
    CUX_SUCCESS = 0,
    CUX_ERROR_OUT_OF_MEMORY = 2,
    CUX_ERROR_NO_DEVICE = 100,
    CUX_ERROR_NOT_READY = 600,       // cuEventQuery: recorded work not yet done
    CUX_ATTR_CC_MAJOR = 75,          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    CUX_ATTR_CC_MINOR = 76,
    CUX_ATTR_SMEM_OPTIN = 97,        // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    CUX_FUNC_MAX_DYNAMIC_SMEM = 8,   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    CUX_STATIC_SMEM_MAX = 49152,     // dynamic shared memory a launch may have unasked
    CUX_STREAM_NON_BLOCKING = 1,
    CUX_EVENT_DISABLE_TIMING = 2,
    CUX_MEMHOSTALLOC_PORTABLE = 1,
    CUX_CTX_SCHED_BLOCKING_SYNC = 4,     // a host thread waiting for the GPU sleeps, not spins
    CUX_DRIVER_ABI = 12000,          // the ABI version every entry point is looked up at
    CUX_CAPTURE_MODE_THREAD_LOCAL = 1,   // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    CUX_CAPTURE_STATUS_ACTIVE = 1,       // CU_STREAM_CAPTURE_STATUS_ACTIVE
    CUX_ERROR_CAPTURE_UNSUPPORTED = 900, // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    CUX_ERROR_CAPTURE_INVALIDATED = 901, // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    CUX_ERROR_CAPTURE_UNJOINED = 904,    // CUDA_ERROR_STREAM_CAPTURE_UNJOINED
    CUX_ERROR_CAPTURE_ISOLATION = 905,   // CUDA_ERROR_STREAM_CAPTURE_ISOLATION
};

typedef struct CuDriver {
    CuResult (*Init)(unsigned flags);
    CuResult (*DriverGetVersion)(int *version);
    CuResult (*DeviceGetCount)(int *count);
    CuResult (*DeviceGet)(CuDevice *dev, int ordinal);
    CuResult (*DeviceGetName)(char *name, int len, CuDevice dev);
    CuResult (*DeviceGetAttribute)(int *value, int attribute, CuDevice dev);
    CuResult (*DevicePrimaryCtxRetain)(CuContext *ctx, CuDevice dev);
    CuResult (*DevicePrimaryCtxRelease)(CuDevice dev);
    CuResult (*CtxSetCurrent)(CuContext ctx);
    CuResult (*CtxSynchronize)(void);
    CuResult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);
    CuResult (*MemAlloc)(CuDevPtr *p, size_t bytes);
    CuResult (*MemFree)(CuDevPtr p);
    CuResult (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
    CuResult (*MemFreeHost)(void *p);
    CuResult (*MemcpyHtoD)(CuDevPtr dst, const void *src, size_t bytes);
    CuResult (*MemcpyDtoH)(void *dst, CuDevPtr src, size_t bytes);
    CuResult (*MemcpyAsync)(CuDevPtr dst, CuDevPtr src, size_t bytes, CuStream s);
    CuResult (*MemsetD8Async)(CuDevPtr dst, unsigned char v, size_t n, CuStream s);
    CuResult (*MemsetD16Async)(CuDevPtr dst, unsigned short v, size_t n, CuStream s);
    CuResult (*MemsetD32Async)(CuDevPtr dst, unsigned int v, size_t n, CuStream s);
    CuResult (*StreamCreate)(CuStream *s, unsigned flags);
    CuResult (*StreamDestroy)(CuStream s);
    CuResult (*StreamSynchronize)(CuStream s);
    CuResult (*StreamWaitEvent)(CuStream s, CuEvent e, unsigned flags);
    CuResult (*EventCreate)(CuEvent *e, unsigned flags);
    CuResult (*EventDestroy)(CuEvent e);
    CuResult (*EventRecord)(CuEvent e, CuStream s);
    CuResult (*EventSynchronize)(CuEvent e);
    CuResult (*ModuleLoadData)(CuModule *m, const void *image);
    CuResult (*ModuleUnload)(CuModule m);
    CuResult (*ModuleGetFunction)(CuFunction *f, CuModule m, const char *name);
    CuResult (*LaunchKernel)(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared_bytes, CuStream s,
                             void **params, void **extra);
    CuResult (*GetErrorString)(CuResult r, const char **text);
    CuResult (*EventQuery)(CuEvent e);
    CuResult (*FuncSetAttribute)(CuFunction f, int attribute, int value);
    CuResult (*EventElapsedTime)(float *ms, CuEvent start, CuEvent end);
    CuResult (*DevicePrimaryCtxSetFlags)(CuDevice dev, unsigned flags);
    CuResult (*CtxGetStreamPriorityRange)(int *least, int *greatest);
    CuResult (*StreamCreateWithPriority)(CuStream *s, unsigned flags, int priority);
    // CUDA Graphs: a phase's work captured from its streams once, then launched whole.
    CuResult (*StreamBeginCapture)(CuStream s, int mode);
    CuResult (*StreamEndCapture)(CuStream s, CuGraph *g);
    CuResult (*StreamGetCaptureInfo)(CuStream s, int *status, unsigned long long *id, CuGraph *g,
                                     const CuGraphNode **deps, size_t *ndeps);
    CuResult (*GraphInstantiateWithFlags)(CuGraphExec *e, CuGraph g, unsigned long long flags);
    CuResult (*GraphLaunch)(CuGraphExec e, CuStream s);
    CuResult (*GraphExecKernelNodeSetParams)(CuGraphExec e, CuGraphNode n, const CuKernelNodeParams *p);
    CuResult (*GraphExecDestroy)(CuGraphExec e);
    CuResult (*GraphDestroy)(CuGraph g);
} CuDriver;

// cuBLASLt: handles and descriptors are opaque pointers; an algorithm and a heuristic
// result are plain structs of the library's layout.
typedef int LtStatus;
typedef struct LtHandleOpaque *LtHandle;
typedef struct LtDescOpaque *LtDesc;
typedef struct LtLayoutOpaque *LtLayout;
typedef struct LtPrefOpaque *LtPref;
typedef struct LtAlgo {
    uint64_t data[8];
} LtAlgo;
typedef struct LtHeuristic {
    LtAlgo algo;
    size_t workspace_bytes;
    LtStatus state;
    float waves;
    int reserved[4];
} LtHeuristic;

enum {
    LTX_SUCCESS = 0,
    LTX_OP_N = 0,
    LTX_OP_T = 1,
    LTX_COMPUTE_32F = 68,            // CUBLAS_COMPUTE_32F
    LTX_R_32F = 0,                   // cudaDataType: CUDA_R_32F
    LTX_R_16F = 2,
    LTX_R_16BF = 14,
    LTX_DESC_TRANSA = 3,             // cublasLtMatmulDescAttributes_t
    LTX_DESC_TRANSB = 4,
    LTX_DESC_EPILOGUE = 7,
    LTX_DESC_BIAS_POINTER = 8,
    LTX_DESC_BIAS_DATA_TYPE = 26,
    LTX_EPILOGUE_DEFAULT = 1,
    LTX_EPILOGUE_BIAS = 4,
    LTX_LAYOUT_BATCH_COUNT = 5,      // cublasLtMatrixLayoutAttribute_t
    LTX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
    LTX_PREF_MAX_WORKSPACE_BYTES = 1,
    LTX_PREF_MIN_ALIGNMENT_A = 5,        // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; B, C, D follow
    LTX_ALGO_ID = 0,                     // CUBLASLT_ALGO_CONFIG_ID
    LTX_ALGO_TILE = 1,                   // CUBLASLT_ALGO_CONFIG_TILE_ID
    LTX_ALGO_SPLITK = 2,                 // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
    LTX_ALGO_STAGES = 6,                 // CUBLASLT_ALGO_CONFIG_STAGES_ID
};

typedef struct CuBlasLt {
    LtStatus (*Create)(LtHandle *h);
    LtStatus (*Destroy)(LtHandle h);
    size_t (*GetVersion)(void);
    LtStatus (*MatmulDescCreate)(LtDesc *d, int compute_type, int scale_type);
    LtStatus (*MatmulDescDestroy)(LtDesc d);
    LtStatus (*MatmulDescSetAttribute)(LtDesc d, int attr, const void *buf, size_t bytes);
    LtStatus (*MatrixLayoutCreate)(LtLayout *l, int type, uint64_t rows, uint64_t cols, int64_t ld);
    LtStatus (*MatrixLayoutDestroy)(LtLayout l);
    LtStatus (*MatrixLayoutSetAttribute)(LtLayout l, int attr, const void *buf, size_t bytes);
    LtStatus (*MatmulPreferenceCreate)(LtPref *p);
    LtStatus (*MatmulPreferenceDestroy)(LtPref p);
    LtStatus (*MatmulPreferenceSetAttribute)(LtPref p, int attr, const void *buf, size_t bytes);
    LtStatus (*MatmulAlgoGetHeuristic)(LtHandle h, LtDesc d, LtLayout a, LtLayout b, LtLayout c,
                                       LtLayout dl, LtPref p, int requested, LtHeuristic *results,
                                       int *returned);
    LtStatus (*Matmul)(LtHandle h, LtDesc d, const void *alpha, const void *a, LtLayout al,
                       const void *b, LtLayout bl, const void *beta, const void *c, LtLayout cl,
                       void *dst, LtLayout dl, const LtAlgo *algo, void *workspace,
                       size_t workspace_bytes, CuStream s);
    LtStatus (*MatmulAlgoConfigGetAttribute)(const LtAlgo *algo, int attr, void *buf, size_t bytes,
                                             size_t *written);
} CuBlasLt;

// The two libraries, as the cuda backend uses them.
typedef struct CudaApi {
    CuDriver cu;
    CuBlasLt lt;
} CudaApi;

// loader.c — fills `api` from libcuda.so.1 (cuGetProcAddress_v2, every entry point at
// CUX_DRIVER_ABI) and libcublasLt.so.13 (or .12; $CUDA_HOME/lib64, /usr/local/cuda/lib64
// too); 0, or -1 with err saying what is missing. The libraries stay loaded.
int cuda_api_load(CudaApi *api, char *err, size_t errlen);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" and the like, for messages.
const char *cuda_result_text(const CudaApi *api, CuResult r, char *buf, size_t len);

#endif
