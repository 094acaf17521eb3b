// nccl.h — the part of NCCL's C API the cuda backend uses, declared here (no NCCL header is
// needed to build ftc) and found at run time with dlopen, as the driver is: a machine
// without NCCL runs jobs of one rank. Types and values are those of nccl.h (NCCL 2.x): a
// communicator is an opaque pointer, the unique id a 128-byte struct passed by value, data
// types and results plain ints.
#ifndef FTC_RUNTIME_CUDA_NCCL_H
#define FTC_RUNTIME_CUDA_NCCL_H

#include "cuda.h"

typedef struct NcclCommOpaque *NcclComm;
typedef struct NcclUniqueId {
    char internal[128];     // NCCL_UNIQUE_ID_BYTES
} NcclUniqueId;

enum {
    NCCLX_SUCCESS = 0,
    NCCLX_REMOTE_ERROR = 6,     // ncclRemoteError: a peer failed or the network did
    NCCLX_IN_PROGRESS = 7,      // ncclInProgress
    NCCLX_UINT8 = 1,            // ncclDataType_t
    NCCLX_FLOAT16 = 6,
    NCCLX_FLOAT32 = 7,
    NCCLX_BFLOAT16 = 9,
    NCCLX_SUM = 0,              // ncclRedOp_t
};

typedef struct NcclApi {
    int (*GetVersion)(int *version);
    int (*GetUniqueId)(NcclUniqueId *id);
    int (*CommInitRank)(NcclComm *comm, int nranks, NcclUniqueId id, int rank);
    int (*CommDestroy)(NcclComm comm);
    int (*CommAbort)(NcclComm comm);
    int (*CommGetAsyncError)(NcclComm comm, int *result);
    const char *(*GetErrorString)(int result);
    int (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, NcclComm comm,
                     CuStream stream);
    int (*ReduceScatter)(const void *send, void *recv, size_t recvcount, int dtype, int op,
                         NcclComm comm, CuStream stream);
    int (*AllGather)(const void *send, void *recv, size_t sendcount, int dtype, NcclComm comm,
                     CuStream stream);
    int (*GroupStart)(void);
    int (*GroupEnd)(void);
} NcclApi;

// nccl.c — fills `api` from libnccl.so.2 ($FTC_NCCL names another file; else the library
// path, $CUDA_HOME/lib64, /usr/local/cuda/lib64); 0, or -1 with err. It stays loaded.
int nccl_api_load(NcclApi *api, char *err, size_t errlen);

#endif
