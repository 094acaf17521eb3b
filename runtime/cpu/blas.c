// blas.c — the BLAS loaded with dlopen on first use (see blas.h): the library CMake
// found (FTC_BLAS_LIBRARY), else OpenBLAS's and the reference soname.
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef FTC_BLAS_LIBRARY
#define FTC_BLAS_LIBRARY "libopenblas.so.0"
#endif

typedef void (*SgemmFn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint,
                        blasint, float, const float *, blasint, const float *, blasint, float, float *,
                        blasint);
typedef void (*ThreadsFn)(int);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static SgemmFn sgemm;
static ThreadsFn set_threads;

static void load(void) {
    static const char *const names[] = {FTC_BLAS_LIBRARY, "libopenblas.so.0", "libblas.so.3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !sgemm; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        sgemm = (SgemmFn)dlsym(h, "cblas_sgemm");
        set_threads = (ThreadsFn)dlsym(h, "openblas_set_num_threads");
        if (!sgemm)
            dlclose(h);
    }
}

static SgemmFn loaded(void) {
    pthread_once(&once, load);
    if (!sgemm) {
        fprintf(stderr, "ftc: error: cannot load a BLAS with cblas_sgemm (tried %s, libopenblas.so.0, "
                        "libblas.so.3): install libopenblas0\n", FTC_BLAS_LIBRARY);
        exit(1);
    }
    return sgemm;
}

void blas_sgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    loaded()(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool blas_set_threads(int n) {
    loaded();
    if (set_threads)
        set_threads(n);
    return set_threads != NULL;
}
