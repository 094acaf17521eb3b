// gemm_cache.h — the cuBLASLt algorithms timed fastest, kept on disk per GPU and library
// version, so that a product is timed once per machine, and a rerun, a resumed run or
// another plan with the same product takes the same algorithm (and computes the same bits).
//
// One text file per (GPU name, compute capability, cuBLASLt version) in the cache
// directory (rt_cache_path("gemm")), a line per product:
//
//     ftc-gemm-cache 1
//     KEY ALGO US
//
// KEY is the product's 16-hex-digit key (gemm_cache_key's caller folds in everything that
// decides the candidates: shape, transposes, dtypes, epilogue, beta, workspace, alignment),
// ALGO the opaque cublasLtMatmulAlgo_t as 128 hex digits, US its time in microseconds. A
// line that does not read so is ignored; a save merges with what another process saved
// meanwhile and replaces the file whole (a temporary renamed over it).
#ifndef FTC_RUNTIME_CUDA_GEMM_CACHE_H
#define FTC_RUNTIME_CUDA_GEMM_CACHE_H

#include "cuda.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct GemmCacheEntry {
    uint64_t key;
    LtAlgo algo;
    float us;
} GemmCacheEntry;

typedef struct GemmCache {
    char path[4200];          // "" when there is no cache directory
    GemmCacheEntry *at;
    int n, cap;
    int dirty;                // entries put since the file was read
} GemmCache;

// Opens (reads, if it exists) the cache of the GPU `device` with compute capability
// cc_major.cc_minor under cuBLASLt `lt_version`, in dir (NULL: rt_cache_path's "gemm").
// A missing or unreadable file is an empty cache.
void gemm_cache_open(GemmCache *c, const char *dir, const char *device, int cc_major, int cc_minor,
                     size_t lt_version);
// The algorithm cached for key: true with *algo (and *us when not NULL).
bool gemm_cache_get(const GemmCache *c, uint64_t key, LtAlgo *algo, float *us);
void gemm_cache_put(GemmCache *c, uint64_t key, const LtAlgo *algo, float us);
// Writes the entries put since opening, merged over the file as it is now: 0, or -1 with
// err (a cache that cannot be written costs time, never correctness).
int gemm_cache_save(GemmCache *c, char *err, size_t errlen);
void gemm_cache_free(GemmCache *c);

#endif
