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

// Looks up OpenBLAS's thread-count functions in `library` and the libraries it depends on (pass the file of
// scipy.linalg.cython_blas, which links the BLAS that set_blas registered). Returns false when none is found:
// the BLAS is not OpenBLAS, and SerialBlas then does nothing.
bool find_blas_threading(const char* library);

// While alive, BLAS calls run single-threaded. d5's kernels run one GEMM per image on every OpenMP thread;
// a threaded OpenBLAS would wake its own pthread pool inside each of those calls and oversubscribe the
// cores (ResNet-44 inference on 2 cores: 0.41 s per batch of 64 with BLAS threads, 0.26 s without).
// Scopes may nest and may be opened from several threads; the last one to close restores the old count.
class SerialBlas {
public:
    explicit SerialBlas(bool active);
    ~SerialBlas();
    SerialBlas(const SerialBlas&) = delete;
    SerialBlas& operator=(const SerialBlas&) = delete;

private:
    bool active_;
};

// C(m, n) = alpha * op(A) op(B) + beta * C with row-major A, B, C and leading dimensions in elements.
// Throws std::runtime_error if set_blas was not called, std::overflow_error if a size exceeds int.
template <typename T>
void gemm_row_major(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a, index_t lda,
                    const T* b, index_t ldb, T beta, T* c, index_t ldc);

// The same product computed by d5's OpenMP threads, each running single-threaded BLAS on a tile of C. The
// tiling depends on (m, n) only, never on the thread count, and every element of C is summed over the whole
// k by one BLAS call, so the result is the same bits at any thread count. This is how d5's kernels use
// BLAS's cores: d5 owns the threads, BLAS's own pool stays asleep (see SerialBlas).
// C[i] = op(A[i]) op(B[i]) for i < batch (row-major, densely packed matrices; op = transpose if asked).
// One matrix is split by parallel_gemm; several run one per OpenMP thread, each a single-threaded BLAS
// call: which of the two depends on `batch` alone, so again the bits do not depend on the thread count.
template <typename T>
void batched_gemm(bool trans_a, bool trans_b, index_t batch, index_t m, index_t n, index_t k, const T* a,
                  const T* b, T* c);

template <typename T>
void parallel_gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a, index_t lda,
                   const T* b, index_t ldb, T beta, T* c, index_t ldc);

}  // namespace kernels
}  // namespace d5
