// loader.c — the CUDA driver and cuBLASLt found with dlopen and their entry points
// resolved into the tables of cuda.h. Nothing here runs a GPU operation: it only says
// whether the libraries are there.
#include "cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Entry {
    const char *name;
    size_t offset;
} Entry;

#define DRV(f) {"cu" #f, offsetof(CudaApi, cu.f)}
static const Entry driver_entries[] = {
    DRV(Init), DRV(DriverGetVersion), DRV(DeviceGetCount), DRV(DeviceGet), DRV(DeviceGetName),
    DRV(DeviceGetAttribute), DRV(DevicePrimaryCtxRetain), DRV(DevicePrimaryCtxRelease),
    DRV(CtxSetCurrent), DRV(CtxSynchronize), DRV(MemGetInfo), DRV(MemAlloc), DRV(MemFree),
    DRV(MemHostAlloc), DRV(MemFreeHost), DRV(MemcpyHtoD), DRV(MemcpyDtoH), DRV(MemcpyAsync),
    DRV(MemsetD8Async), DRV(MemsetD16Async), DRV(MemsetD32Async), DRV(StreamCreate),
    DRV(StreamDestroy), DRV(StreamSynchronize), DRV(StreamWaitEvent), DRV(EventCreate),
    DRV(EventDestroy), DRV(EventRecord), DRV(EventSynchronize), DRV(ModuleLoadData),
    DRV(ModuleUnload), DRV(ModuleGetFunction), DRV(LaunchKernel), DRV(GetErrorString),
    DRV(EventQuery), DRV(FuncSetAttribute), DRV(EventElapsedTime), DRV(DevicePrimaryCtxSetFlags),
    DRV(CtxGetStreamPriorityRange), DRV(StreamCreateWithPriority), DRV(StreamBeginCapture),
    DRV(StreamEndCapture), DRV(StreamGetCaptureInfo), DRV(GraphInstantiateWithFlags),
    DRV(GraphLaunch), DRV(GraphExecKernelNodeSetParams), DRV(GraphExecDestroy), DRV(GraphDestroy),
};
#undef DRV

#define LT(f, sym) {sym, offsetof(CudaApi, lt.f)}
static const Entry lt_entries[] = {
    LT(Create, "cublasLtCreate"),
    LT(Destroy, "cublasLtDestroy"),
    LT(GetVersion, "cublasLtGetVersion"),
    LT(MatmulDescCreate, "cublasLtMatmulDescCreate"),
    LT(MatmulDescDestroy, "cublasLtMatmulDescDestroy"),
    LT(MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"),
    LT(MatrixLayoutCreate, "cublasLtMatrixLayoutCreate"),
    LT(MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"),
    LT(MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute"),
    LT(MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"),
    LT(MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"),
    LT(MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"),
    LT(MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"),
    LT(Matmul, "cublasLtMatmul"),
    LT(MatmulAlgoConfigGetAttribute, "cublasLtMatmulAlgoConfigGetAttribute"),
};
#undef LT

// Function and object pointers share a representation on every POSIX system; dlsym's
// own contract relies on it.
static void put(CudaApi *api, size_t offset, void *f) { memcpy((char *)api + offset, &f, sizeof f); }

typedef CuResult (*GetProcAddress)(const char *symbol, void **fn, int version, uint64_t flags,
                                   int *status);

static int load_driver(CudaApi *api, char *err, size_t errlen) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(err, errlen, "no CUDA driver (%s)", why ? why : "libcuda.so.1 not found");
        return -1;
    }
    GetProcAddress get = NULL;
    void *sym = dlsym(h, "cuGetProcAddress_v2");
    memcpy(&get, &sym, sizeof sym);
    if (!get) {
        snprintf(err, errlen, "libcuda.so.1 has no cuGetProcAddress_v2: a driver older than CUDA 12");
        return -1;
    }
    for (size_t i = 0; i < sizeof driver_entries / sizeof driver_entries[0]; i++) {
        void *f = NULL;
        int status = 0;
        CuResult r = get(driver_entries[i].name, &f, CUX_DRIVER_ABI, 0, &status);
        if (r != CUX_SUCCESS || !f) {
            snprintf(err, errlen, "the CUDA driver has no %s at ABI %d (error %d)",
                     driver_entries[i].name, CUX_DRIVER_ABI, r);
            return -1;
        }
        put(api, driver_entries[i].offset, f);
    }
    return 0;
}

static void *open_first(const char *const *paths, size_t n, char *tried, size_t len) {
    for (size_t i = 0; i < n; i++) {
        if (!*paths[i])
            continue;
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        size_t used = strlen(tried);
        snprintf(tried + used, len - used, "%s%s", used ? ", " : "", paths[i]);
    }
    return NULL;
}

// cuBLASLt of the driver's CUDA major first (a newer one needs a newer driver), then 13, 12.
static int load_cublaslt(CudaApi *api, char *err, size_t errlen) {
    const char *home = getenv("CUDA_HOME");
    char h13[PATH_MAX] = "", h12[PATH_MAX] = "", own[32] = "";
    if (home && *home) {
        snprintf(h13, sizeof h13, "%s/lib64/libcublasLt.so.13", home);
        snprintf(h12, sizeof h12, "%s/lib64/libcublasLt.so.12", home);
    }
    int version = 0;
    if (api->cu.DriverGetVersion(&version) == CUX_SUCCESS && version >= 1000 && version < 100000)
        snprintf(own, sizeof own, "libcublasLt.so.%d", version / 1000);
    const char *paths[] = {own, "libcublasLt.so.13", "libcublasLt.so.12", h13, h12,
                           "/usr/local/cuda/lib64/libcublasLt.so.13",
                           "/usr/local/cuda/lib64/libcublasLt.so.12"};
    char tried[2048] = "";
    void *h = open_first(paths, sizeof paths / sizeof paths[0], tried, sizeof tried);
    if (!h) {
        snprintf(err, errlen, "no cuBLASLt (tried %s)", tried);
        return -1;
    }
    for (size_t i = 0; i < sizeof lt_entries / sizeof lt_entries[0]; i++) {
        void *f = dlsym(h, lt_entries[i].name);
        if (!f) {
            snprintf(err, errlen, "cuBLASLt has no %s", lt_entries[i].name);
            return -1;
        }
        put(api, lt_entries[i].offset, f);
    }
    return 0;
}

int cuda_api_load(CudaApi *api, char *err, size_t errlen) {
    memset(api, 0, sizeof *api);
    return load_driver(api, err, errlen) != 0 || load_cublaslt(api, err, errlen) != 0 ? -1 : 0;
}

const char *cuda_result_text(const CudaApi *api, CuResult r, char *buf, size_t len) {
    const char *s = NULL;
    if (api && api->cu.GetErrorString)
        api->cu.GetErrorString(r, &s);
    snprintf(buf, len, "CUDA error %d (%s)", r, s ? s : "unknown");
    return buf;
}
