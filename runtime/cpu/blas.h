// blas.h — the BLAS under the cpu backend's GEMMs, loaded the first time one runs.
//
// ftc links no BLAS: OpenBLAS (with libgfortran, whose libquadmath registers printf
// extensions that send every printf in the process down glibc's slow path, and with
// threads that start spinning when it loads) is opened with dlopen by the first GEMM,
// so `ftc compile` and the GPU backends never load it.
#ifndef FTC_BLAS_H
#define FTC_BLAS_H

#include <cblas.h>
#include <stdbool.h>

// CBLAS's sgemm, row-major; exits with a message when no BLAS can be loaded.
void blas_sgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
// OpenBLAS's thread count (loading it if needed); false when the BLAS has no such call.
bool blas_set_threads(int n);

#endif
