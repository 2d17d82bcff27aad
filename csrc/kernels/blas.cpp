#include "blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "safety.h"

namespace d5 {
namespace kernels {

namespace {

FortranGemm<float> g_sgemm = nullptr;
FortranGemm<double> g_dgemm = nullptr;

using SetThreads = void (*)(int);
using GetThreads = int (*)();
SetThreads g_set_threads = nullptr;
GetThreads g_get_threads = nullptr;
std::mutex g_serial_mutex;
int g_serial_depth = 0;     // open SerialBlas scopes
int g_saved_threads = 0;    // the BLAS thread count before the outermost scope

int to_blas_int(index_t value) {
    if (value < 0 || value > INT_MAX)
        throw std::overflow_error("GEMM dimension " + std::to_string(value) + " does not fit the 32-bit BLAS interface");
    return static_cast<int>(value);
}

template <typename T>
FortranGemm<T> routine();
template <>
FortranGemm<float> routine<float>() { return g_sgemm; }
template <>
FortranGemm<double> routine<double>() { return g_dgemm; }

}  // namespace

void set_blas(FortranGemm<float> sgemm, FortranGemm<double> dgemm) {
    g_sgemm = sgemm;
    g_dgemm = dgemm;
}

bool blas_ready() { return g_sgemm != nullptr && g_dgemm != nullptr; }

bool find_blas_threading(const char* library) {
    // RTLD_NOLOAD: the library is already loaded (scipy imported it); dlsym on its handle also searches
    // its dependencies, where OpenBLAS lives. scipy's own OpenBLAS build prefixes its symbols.
    void* handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) return false;
    for (const char* prefix : {"scipy_openblas_", "openblas_"}) {
        void* set = dlsym(handle, (std::string(prefix) + "set_num_threads").c_str());
        void* get = dlsym(handle, (std::string(prefix) + "get_num_threads").c_str());
        if (set != nullptr && get != nullptr) {
            g_set_threads = reinterpret_cast<SetThreads>(set);
            g_get_threads = reinterpret_cast<GetThreads>(get);
            break;
        }
    }
    dlclose(handle);  // drops only the reference taken above; the library stays loaded by scipy
    return g_set_threads != nullptr;
}

SerialBlas::SerialBlas(bool active) : active_(active && g_set_threads != nullptr) {
    if (!active_) return;
    std::lock_guard<std::mutex> lock(g_serial_mutex);
    if (g_serial_depth++ == 0) {
        g_saved_threads = g_get_threads();
        if (g_saved_threads != 1) g_set_threads(1);
    }
}

SerialBlas::~SerialBlas() {
    if (!active_) return;
    std::lock_guard<std::mutex> lock(g_serial_mutex);
    if (--g_serial_depth == 0 && g_saved_threads != 1) g_set_threads(g_saved_threads);
}

template <typename T>
void gemm_row_major(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a, index_t lda,
                    const T* b, index_t ldb, T beta, T* c, index_t ldc) {
    FortranGemm<T> gemm = routine<T>();
    if (gemm == nullptr) throw std::runtime_error("d5._C: BLAS not registered (call d5._C.set_blas first)");
    // A row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: swap the operands.
    char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
    int mm = to_blas_int(n), nn = to_blas_int(m), kk = to_blas_int(k);
    int lda_ = to_blas_int(ldb), ldb_ = to_blas_int(lda), ldc_ = to_blas_int(ldc);
    gemm(&ta, &tb, &mm, &nn, &kk, &alpha, const_cast<T*>(b), &lda_, const_cast<T*>(a), &ldb_, &beta, c, &ldc_);
}

template <typename T>
void parallel_gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a, index_t lda,
                   const T* b, index_t ldb, T beta, T* c, index_t ldc) {
    // Columns of C in tiles of at least 64, else rows in tiles of at least 32; at most 16 tiles.
    const index_t tiles_n = std::clamp<index_t>(n / 64, 1, 16);
    const index_t tiles_m = tiles_n > 1 ? 1 : std::clamp<index_t>(m / 32, 1, 16);
    const index_t tiles = tiles_n * tiles_m;
    SerialBlas serial_blas(true);
    if (tiles == 1) return gemm_row_major<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    ExceptionTrap trap;
#pragma omp parallel for schedule(static)
    for (index_t tile = 0; tile < tiles; ++tile) trap.run([&] {
        const index_t i = tile / tiles_n, j = tile % tiles_n;
        const index_t m0 = i * m / tiles_m, m1 = (i + 1) * m / tiles_m;
        const index_t n0 = j * n / tiles_n, n1 = (j + 1) * n / tiles_n;
        // Rows m0.. of op(A): rows of A, or columns of A when it is stored transposed; likewise for B.
        const T* a_tile = trans_a ? a + m0 : a + m0 * lda;
        const T* b_tile = trans_b ? b + n0 * ldb : b + n0;
        gemm_row_major<T>(trans_a, trans_b, m1 - m0, n1 - n0, k, alpha, a_tile, lda, b_tile, ldb, beta,
                          c + m0 * ldc + n0, ldc);
    });
    trap.rethrow();
}

template <typename T>
void batched_gemm(bool trans_a, bool trans_b, index_t batch, index_t m, index_t n, index_t k, const T* a,
                  const T* b, T* c) {
    if (batch == 0 || m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum; BLAS would also refuse the zero leading dimensions
        std::fill(c, c + batch * m * n, T(0));
        return;
    }
    const index_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
    if (batch == 1) return parallel_gemm<T>(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(0), c, n);
    SerialBlas serial_blas(true);
    ExceptionTrap trap;
#pragma omp parallel for schedule(static)
    for (index_t i = 0; i < batch; ++i) trap.run([&] {
        gemm_row_major<T>(trans_a, trans_b, m, n, k, T(1), a + i * m * k, lda, b + i * k * n, ldb, T(0), c + i * m * n, n);
    });
    trap.rethrow();
}

template void batched_gemm<float>(bool, bool, index_t, index_t, index_t, index_t, const float*, const float*, float*);
template void batched_gemm<double>(bool, bool, index_t, index_t, index_t, index_t, const double*, const double*,
                                   double*);

template void parallel_gemm<float>(bool, bool, index_t, index_t, index_t, float, const float*, index_t, const float*,
                                   index_t, float, float*, index_t);
template void parallel_gemm<double>(bool, bool, index_t, index_t, index_t, double, const double*, index_t,
                                    const double*, index_t, double, double*, index_t);

template void gemm_row_major<float>(bool, bool, index_t, index_t, index_t, float, const float*, index_t, const float*,
                                    index_t, float, float*, index_t);
template void gemm_row_major<double>(bool, bool, index_t, index_t, index_t, double, const double*, index_t,
                                     const double*, index_t, double, double*, index_t);

}  // namespace kernels
}  // namespace d5
