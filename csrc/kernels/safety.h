// Memory safety for d5's kernels: overflow-checked sizes, and OpenMP regions that never let an
// exception escape.
//
// Two rules every kernel follows (issue: a crafted ONNX file overflowed a 64-bit buffer size and
// corrupted the heap; a std::bad_alloc inside an OpenMP region called std::terminate):
//   1. Every size or extent derived from caller-supplied geometry is computed with checked_mul /
//      checked_add, which throw std::length_error instead of wrapping around.
//   2. Scratch memory is allocated before the parallel region (ThreadScratch), and anything else thrown
//      inside the region is caught there by ExceptionTrap and rethrown on the calling thread after it:
//      an exception leaving an OpenMP structured block is undefined behaviour (libgomp terminates).
#pragma once

#include <cstddef>
#include <cstdio>
#include <new>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "d5/tensor.h"

namespace d5 {
namespace kernels {

// Largest element count a kernel accepts for one buffer: far beyond any real tensor (2^50 floats is
// 4 PiB), and small enough that byte counts and sums of a few such counts cannot overflow int64.
constexpr index_t kMaxElements = index_t(1) << 50;

inline index_t checked_mul(index_t a, index_t b, const char* what) {
    index_t result;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &result) || result > kMaxElements)
        throw std::length_error(std::string(what) + ": size " + std::to_string(a) + " x " + std::to_string(b) +
                                " is negative or too large");
    return result;
}

inline index_t checked_add(index_t a, index_t b, const char* what) {
    index_t result;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &result) || result > kMaxElements)
        throw std::length_error(std::string(what) + ": size " + std::to_string(a) + " + " + std::to_string(b) +
                                " is negative or too large");
    return result;
}

// A failed (or refused) allocation, naming the buffer. Derives from std::bad_alloc, which the bindings
// turn into d5.errors.InsufficientMemoryError with this message.
class OutOfMemory : public std::bad_alloc {
public:
    OutOfMemory(const char* what, index_t bytes)
        : message_(std::string(what) + ": " + std::to_string(bytes >> 20) + " MiB of working memory " +
                   "exceed what this machine has available; use a smaller batch or input") {}
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

// Bytes of memory the kernel may still take (Linux MemAvailable), or -1 when unknown.
inline index_t available_memory_bytes() {
    std::FILE* meminfo = std::fopen("/proc/meminfo", "r");
    if (meminfo == nullptr) return -1;
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof line, meminfo) != nullptr)
        if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    std::fclose(meminfo);
    return kib < 0 ? -1 : static_cast<index_t>(kib) * 1024;
}

// Refuses a large allocation that could not fit: with Linux's overcommit the allocation itself might
// succeed and the process be OOM-killed later, when the pages are touched. Small ones are not checked
// (reading /proc/meminfo costs microseconds, and they cannot matter).
inline void require_memory(index_t bytes, const char* what) {
    constexpr index_t kCheckAbove = index_t(64) << 20;
    if (bytes < kCheckAbove) return;
    const index_t available = available_memory_bytes();
    if (available >= 0 && bytes > available) throw OutOfMemory(what, bytes);
}

// Threads the next `#pragma omp parallel` region may have (1 without OpenMP or when `parallel` is false).
inline int region_threads(bool parallel = true) {
#ifdef _OPENMP
    return parallel ? omp_get_max_threads() : 1;
#else
    (void)parallel;
    return 1;
#endif
}

inline int thread_index() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// One scratch buffer of `size` elements per thread of the coming parallel region, allocated (and
// zero-initialized) up front so that a failed allocation throws on the calling thread.
template <typename T>
class ThreadScratch {
public:
    ThreadScratch(int threads, index_t size, const char* what) : size_(size) {
        const index_t total = checked_mul(threads, size, what);
        require_memory(checked_mul(total, index_t(sizeof(T)), what), what);
        try {
            data_.resize(static_cast<std::size_t>(total));
        } catch (const std::bad_alloc&) {
            throw OutOfMemory(what, total * index_t(sizeof(T)));
        }
    }
    T* get(int thread) { return data_.data() + thread * size_; }

private:
    index_t size_;
    std::vector<T> data_;
};

// Catches whatever a parallel region's body throws (keeping the first exception) so the region ends
// normally; rethrow() then raises it on the calling thread, where pybind11 turns it into a Python error.
class ExceptionTrap {
public:
    template <typename Body>
    void run(Body&& body) noexcept {
        try {
            body();
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
    }
    void rethrow() const {
        if (error_) std::rethrow_exception(error_);
    }

private:
    std::mutex mutex_;
    std::exception_ptr error_;
};

}  // namespace kernels
}  // namespace d5
