// nccl.c — NCCL found with dlopen and its entry points resolved into nccl.h's table.
#include "nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Entry {
    const char *name;
    size_t offset;
} Entry;

#define E(f) {"nccl" #f, offsetof(NcclApi, f)}
static const Entry entries[] = {
    E(GetVersion), E(GetUniqueId), E(CommInitRank), E(CommDestroy), E(CommAbort),
    E(CommGetAsyncError), E(GetErrorString), E(AllReduce), E(ReduceScatter), E(AllGather),
    E(GroupStart), E(GroupEnd),
};
#undef E

int nccl_api_load(NcclApi *api, char *err, size_t errlen) {
    memset(api, 0, sizeof *api);
    char paths[4][4200];
    int n = 0;
    const char *env = getenv("FTC_NCCL"), *home = getenv("CUDA_HOME");
    if (env && *env)
        snprintf(paths[n++], sizeof paths[0], "%s", env);
    snprintf(paths[n++], sizeof paths[0], "libnccl.so.2");
    if (home && *home)
        snprintf(paths[n++], sizeof paths[0], "%s/lib64/libnccl.so.2", home);
    snprintf(paths[n++], sizeof paths[0], "/usr/local/cuda/lib64/libnccl.so.2");
    void *h = NULL;
    const char *why = NULL;
    for (int i = 0; i < n && !h; i++)
        if (!(h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL)) && !why)
            why = dlerror();
    if (!h) {
        snprintf(err, errlen, "no NCCL, which a job of several ranks on GPUs needs (libnccl.so.2: %s)",
                 why ? why : "not found");
        return -1;
    }
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *f = dlsym(h, entries[i].name);
        if (!f) {
            snprintf(err, errlen, "NCCL lacks %s (NCCL 2.12 or later is needed)", entries[i].name);
            return -1;
        }
        // Function and object pointers share a representation on every POSIX system.
        memcpy((char *)api + entries[i].offset, &f, sizeof f);
    }
    return 0;
}
