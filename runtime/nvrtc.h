// nvrtc.h — CUDA C to CUBIN at run time: NVRTC found and loaded with dlopen (never linked,
// so ftc builds and runs where no toolkit exists), one compile call that returns the
// CUBIN, NVRTC's log and a per-kernel resource report parsed from ptxas' verbose output,
// and an on-disk cache of compiled kernels keyed by everything that decides the CUBIN.
//
// It compiles only; loading a CUBIN into a context is the cuda backend's business.
#ifndef FTC_RUNTIME_NVRTC_H
#define FTC_RUNTIME_NVRTC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The NVRTC this process loaded: its version, the library's path as the loader resolved
// it, and the toolkit include directory passed as -I ("" when none holds cuda_bf16.h).
typedef struct NvrtcInfo {
    int major, minor;
    char lib[512], include[512];
} NvrtcInfo;

// What a kernel's PTX says of its speed (ptx.c): instructions by kind, as written in the
// text. Global loads and stores by width: [0] up to 4 bytes, [1] 8 (.v2), [2] 16 (.v4).
typedef struct PtxFacts {
    int instructions;
    int mma;                    // mma.sync / wgmma: tensor cores
    int ldmatrix, cp_async;     // shared memory fed by ldmatrix, filled by cp.async
    int load[3], store[3];      // global loads and stores by width
    int fp64;                   // double-precision arithmetic and conversions
} PtxFacts;

// The facts of kernel `entry` in `ptx`; 0, or -1 when the PTX has no such entry.
int rt_ptx_facts(const char *ptx, const char *entry, PtxFacts *f);
// Blocks of `threads` threads, `registers` each, with `smem` bytes of shared memory (static and
// dynamic) that one SM of `arch` ("sm_80") holds at once; 0 for an arch it does not know.
int rt_sm_blocks(const char *arch, int registers, int threads, int64_t smem);

// One kernel as ptxas reported it (`--ptxas-options=-v`). Fields ptxas does not print for
// an architecture stay 0 (ptxas 13 prints cmem for sm_80 but not for sm_90).
typedef struct NvrtcKernel {
    char *name;                 // as ptxas names it: extern "C" kernels by their own name,
                                // others mangled
    int registers;              // per thread
    int barriers;               // named barriers
    int64_t smem_bytes;         // static __shared__ memory
    int64_t const_bytes;        // constant banks it uses, summed (cmem[0]: its parameters)
    int64_t stack_bytes;        // local memory: its own stack frame
    int64_t stack_total_bytes;  // with the frames of the non-inlined functions it calls
    int64_t spill_store_bytes, spill_load_bytes;
    PtxFacts ptx;               // from the PTX NVRTC made of it
} NvrtcKernel;

// What a compile produced. Every pointer is malloc'd and owned by the result; free it with
// rt_nvrtc_result_free (safe on a zeroed or partly filled result).
typedef struct NvrtcResult {
    unsigned char *cubin;       // the ELF image (e_machine EM_CUDA) for the arch asked for
    size_t cubin_bytes;
    char *log;                  // NVRTC's whole program log, NUL-terminated ("" when empty)
    NvrtcKernel *kernels;       // (nkernels) entry functions in ptxas' order
    int nkernels;
    int64_t gmem_bytes;         // the module's __device__ globals
    int64_t cmem_bytes;         // the module's constant banks (its __constant__ data and the
                                // compiler's constants; ptxas 13 prints none for sm_90)
    uint64_t key;               // the cache key (rt_nvrtc_compile_cached; 0 otherwise)
    bool cache_hit;             // the CUBIN came from the cache, not from NVRTC
} NvrtcResult;

// True when NVRTC could be loaded and every function ftc uses resolved; then fills *info
// when info is non-NULL. False leaves *info alone; rt_nvrtc_load_error says why. The first
// call loads the library (thread-safe, once per process); later calls only read.
bool rt_nvrtc_available(NvrtcInfo *info);

// Asks for NVRTC of this major (the driver's: what a newer NVRTC makes, an older driver
// refuses) ahead of the others when the library is first loaded, $FTC_NVRTC aside; no effect
// once it is loaded.
void rt_nvrtc_prefer(int major);

// Why NVRTC is not available: every library path tried and the loader's answer for each
// ("" when it is available).
const char *rt_nvrtc_load_error(void);

// Compiles source (CUDA C++, named `name` in diagnostics; NULL: "kernels.cu") to a CUBIN for
// arch ("sm_80", "sm_89", "sm_90", ...) with -default-device, --std=c++17, -I<toolkit
// include> and ptxas' verbose report, then extra_opts[0..nextra) in order (e.g. "-lineinfo"),
// filling *out.
// Returns 0, or -1 with the reason in err (errlen bytes): for a compile error the source
// name, NVRTC's error string and the log's first lines; out->log then holds the whole log.
int rt_nvrtc_compile(const char *source, const char *name, const char *arch,
                     const char *const *extra_opts, int nextra, NvrtcResult *out, char *err,
                     size_t errlen);

// rt_nvrtc_compile through the cache in cache_dir (NULL: rt_nvrtc_cache_dir's default),
// created when missing. An entry is <key>.cubin and <key>.txt (report and log), the key a
// 64-bit FNV-1a hash of the source, name, every option in order and NVRTC's version; an
// entry that fails its size, hash or ELF checks is compiled again and replaced. Sets
// out->key and out->cache_hit. On success err is "" or a note that the entry could not be
// written (the compile itself succeeded); on -1 it says why, as rt_nvrtc_compile does.
int rt_nvrtc_compile_cached(const char *cache_dir, const char *source, const char *name,
                            const char *arch, const char *const *extra_opts, int nextra,
                            NvrtcResult *out, char *err, size_t errlen);

// Writes the default cache directory into buf (len bytes): $FTC_CACHE_DIR/nvrtc, else
// $XDG_CACHE_HOME/ftc/nvrtc, else $HOME/.cache/ftc/nvrtc (rt_cache_path). Returns 0, or -1 when none of
// them is set (or the path does not fit).
int rt_nvrtc_cache_dir(char *buf, size_t len);

// The SM version a CUBIN was built for (90 for sm_90 and sm_90a), read from its ELF header;
// -1 when the bytes are not a 64-bit little-endian EM_CUDA ELF file.
int rt_nvrtc_cubin_sm(const void *cubin, size_t bytes);

// PTX of source for the virtual architecture compute_<sm> (the driver compiles it for the
// GPU as it loads it: a GPU newer than this NVRTC, or a driver that refuses its CUBINs),
// with the options rt_nvrtc_compile passes but ptxas'; malloc'd text, or NULL with err.
char *rt_nvrtc_ptx(const char *source, const char *name, int sm, const char *const *extra_opts, int nextra,
                   char *err, size_t errlen);

// Frees everything out owns and zeroes it.
void rt_nvrtc_result_free(NvrtcResult *out);

#endif
