// Row-major GEMM on top of the BLAS that scipy ships, reached through the function pointers scipy
// exports as PyCapsules (scipy.linalg.cython_blas.__pyx_capi__). Using scipy's BLAS means d5._C needs no
// BLAS at build time and runs on the same optimized library numpy/scipy users already have.
#pragma once

#include "d5/tensor.h"

namespace d5 {
namespace kernels {

// Fortran BLAS ?gemm signature as scipy's cython_blas exports it (LP64: 32-bit int).
template <typename T>
using FortranGemm = void (*)(char*, char*, int*, int*, int*, T*, T*, int*, T*, int*, T*, T*, int*);

// Registers the BLAS routines; call once before any gemm. Pointers must stay valid for the process.
void set_blas(FortranGemm<float> sgemm, FortranGemm<double> dgemm);
bool blas_ready();

// C(m, n) = alpha * op(A) op(B) + beta * C with row-major A, B, C and leading dimensions in elements.
// Throws std::runtime_error if set_blas was not called, std::overflow_error if a size exceeds int.
template <typename T>
void gemm_row_major(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a, index_t lda,
                    const T* b, index_t ldb, T beta, T* c, index_t ldc);

}  // namespace kernels
}  // namespace d5
