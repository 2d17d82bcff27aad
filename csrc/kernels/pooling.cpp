#include "pooling.h"

// GCC's -O3 versions loops on a runtime stride (here the dilation) and, for pooling's 2-4 tap inner loops,
// the versioned code ran 2.5x slower than plain -O2 (LeNet-5 2x2 max pooling: 1.3 ms vs 0.5 ms).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-version-loops-for-strides")
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "im2col.h"
#include "safety.h"

namespace d5 {
namespace kernels {

void validate(const Pool2DGeometry& g) {
    if (g.height <= 0 || g.width <= 0 || g.kernel_h <= 0 || g.kernel_w <= 0 || g.out_h <= 0 || g.out_w <= 0 ||
        g.stride_h <= 0 || g.stride_w <= 0 || g.dilation_h <= 0 || g.dilation_w <= 0 || g.pad_top < 0 ||
        g.pad_left < 0 || g.pad_bottom < 0 || g.pad_right < 0)
        throw std::invalid_argument(
            "invalid 2-D pooling geometry: sizes, kernel, strides and dilations must be positive and pads "
            "non-negative (got H=" + std::to_string(g.height) + " W=" + std::to_string(g.width) + " kernel=" +
            std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) + " out=" + std::to_string(g.out_h) +
            "x" + std::to_string(g.out_w) + ")");
    // Window coordinates (and the divisor's count_include_pad bounds) must not overflow: see im2col's validate.
    window_reach(g.height, g.out_h, g.stride_h, g.kernel_h, g.dilation_h, g.pad_top, "2-D pooling rows");
    window_reach(g.width, g.out_w, g.stride_w, g.kernel_w, g.dilation_w, g.pad_left, "2-D pooling columns");
    checked_add(checked_add(g.height, g.pad_top, "2-D pooling rows"), g.pad_bottom, "2-D pooling rows");
    checked_add(checked_add(g.width, g.pad_left, "2-D pooling columns"), g.pad_right, "2-D pooling columns");
    checked_mul(g.height, g.width, "2-D pooling plane");
    checked_mul(g.out_h, g.out_w, "2-D pooling output plane");
}

namespace {

// Kernel taps [lo, hi) whose coordinate start + tap * dilation lies inside [0, size). Computed once per
// output row/column so the inner loops carry no bounds checks (3x faster than checking every tap).
inline void tap_range(index_t start, index_t dilation, index_t size, index_t taps, index_t& lo, index_t& hi) {
    lo = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    hi = start >= size ? 0 : std::min(taps, (size - 1 - start) / dilation + 1);
    hi = std::max(hi, lo);
}

// Tap ranges of every output row and column, computed once per call: tap_range divides, and a division
// per output costs more than the pooling itself (measured ~3x on LeNet-5's 2x2 pooling).
struct TapRanges {
    std::vector<index_t> h_lo, h_hi, w_lo, w_hi;
    explicit TapRanges(const Pool2DGeometry& g)
        : h_lo(g.out_h), h_hi(g.out_h), w_lo(g.out_w), w_hi(g.out_w) {
        for (index_t oh = 0; oh < g.out_h; ++oh)
            tap_range(oh * g.stride_h - g.pad_top, g.dilation_h, g.height, g.kernel_h, h_lo[oh], h_hi[oh]);
        for (index_t ow = 0; ow < g.out_w; ++ow)
            tap_range(ow * g.stride_w - g.pad_left, g.dilation_w, g.width, g.kernel_w, w_lo[ow], w_hi[ow]);
    }
};

}  // namespace

namespace {

// Max pooling of one plane. NaN handling is a template switch because a per-tap NaN test makes the
// loop ~6x slower (it defeats the branch-free select); planes without NaN (all of them, normally) take
// the fast path and planes with one get PyTorch's semantics: the NaN wins.
template <typename T, bool CheckNaN>
void max_pool_plane(const T* src, const Pool2DGeometry& g, const TapRanges& taps, index_t plane_offset, T* dst,
                    std::int64_t* dst_index) {
    // Geometry in local scalars: the int64 `dst_index` stores could alias the int64 fields of `g`.
    const index_t width = g.width, out_h = g.out_h, out_w = g.out_w;
    const index_t stride_h = g.stride_h, stride_w = g.stride_w, pad_top = g.pad_top, pad_left = g.pad_left;
    const index_t dilation_h = g.dilation_h, dilation_w = g.dilation_w;
    const index_t *h_lo = taps.h_lo.data(), *h_hi = taps.h_hi.data();
    const index_t *w_lo = taps.w_lo.data(), *w_hi = taps.w_hi.data();
    for (index_t oh = 0; oh < out_h; ++oh) {
        const index_t h0 = oh * stride_h - pad_top;
        const index_t kh_lo = h_lo[oh], kh_hi = h_hi[oh];
        for (index_t ow = 0; ow < out_w; ++ow) {
            const index_t w0 = ow * stride_w - pad_left;
            const index_t kw_lo = w_lo[ow], kw_hi = w_hi[ow];
            T best = -std::numeric_limits<T>::infinity();
            index_t best_offset = -1;
            if (kh_lo < kh_hi && kw_lo < kw_hi) {
                best_offset = (h0 + kh_lo * dilation_h) * width + w0 + kw_lo * dilation_w;
                best = src[best_offset];
                for (index_t kh = kh_lo; kh < kh_hi; ++kh) {
                    const index_t row = (h0 + kh * dilation_h) * width + w0;
                    for (index_t kw = kw_lo; kw < kw_hi; ++kw) {
                        const index_t offset = row + kw * dilation_w;
                        const T v = src[offset];
                        // Strict '>' keeps the first maximum, as PyTorch. Written as a select, not a
                        // branch: on real data the comparison is unpredictable.
                        bool take = v > best;
                        if (CheckNaN) take = take || (v != v && best == best);
                        best = take ? v : best;
                        best_offset = take ? offset : best_offset;
                    }
                }
            }
            dst[oh * out_w + ow] = best;
            dst_index[oh * out_w + ow] = best_offset < 0 ? -1 : plane_offset + best_offset;
        }
    }
}

template <typename T>
bool contains_nan(const T* data, index_t size) {
    bool found = false;
    for (index_t i = 0; i < size; ++i) found |= data[i] != data[i];  // vectorizes; no early exit on purpose
    return found;
}

}  // namespace

template <typename T>
void max_pool2d_forward(const T* x, index_t planes, const Pool2DGeometry& g, T* y, std::int64_t* indices) {
    const index_t in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
    const TapRanges taps(g);
#pragma omp parallel for schedule(static)
    for (index_t p = 0; p < planes; ++p) {
        const T* src = x + p * in_plane;
        if (contains_nan(src, in_plane))
            max_pool_plane<T, true>(src, g, taps, p * in_plane, y + p * out_plane, indices + p * out_plane);
        else
            max_pool_plane<T, false>(src, g, taps, p * in_plane, y + p * out_plane, indices + p * out_plane);
    }
}

template <typename T>
void max_pool2d_backward(const T* dy, const std::int64_t* indices, index_t planes, const Pool2DGeometry& g, T* dx) {
    const index_t in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
    // The indices of plane p all point into plane p of dx, so planes can be scattered in parallel.
#pragma omp parallel for schedule(static)
    for (index_t p = 0; p < planes; ++p) {
        T* dst = dx + p * in_plane;
        std::fill(dst, dst + in_plane, T(0));
        for (index_t o = p * out_plane; o < (p + 1) * out_plane; ++o)
            if (indices[o] >= 0) dx[indices[o]] += dy[o];
    }
}

namespace {

// Number of window taps that count toward the average at output (oh, ow): taps inside the input, or with
// count_include_pad inside the declared padding too. Counted arithmetically (tap_range on the shifted
// interval), not tap by tap: a kernel may be as long as the padded input, however large that is.
inline index_t window_count(const Pool2DGeometry& g, index_t oh, index_t ow, bool count_include_pad) {
    const index_t top = count_include_pad ? g.pad_top : 0, left = count_include_pad ? g.pad_left : 0;
    const index_t rows = count_include_pad ? g.height + g.pad_top + g.pad_bottom : g.height;
    const index_t cols = count_include_pad ? g.width + g.pad_left + g.pad_right : g.width;
    index_t h_lo, h_hi, w_lo, w_hi;
    tap_range(oh * g.stride_h - g.pad_top + top, g.dilation_h, rows, g.kernel_h, h_lo, h_hi);
    tap_range(ow * g.stride_w - g.pad_left + left, g.dilation_w, cols, g.kernel_w, w_lo, w_hi);
    return (h_hi - h_lo) * (w_hi - w_lo);
}

// The divisor of every output position, computed once per call (shared by all planes).
std::vector<index_t> window_counts(const Pool2DGeometry& g, bool count_include_pad) {
    std::vector<index_t> counts(g.out_h * g.out_w);
    for (index_t oh = 0; oh < g.out_h; ++oh)
        for (index_t ow = 0; ow < g.out_w; ++ow) counts[oh * g.out_w + ow] = window_count(g, oh, ow, count_include_pad);
    return counts;
}

}  // namespace

template <typename T>
void avg_pool2d_forward(const T* x, index_t planes, const Pool2DGeometry& g, bool count_include_pad, T* y) {
    const index_t in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
    const TapRanges taps(g);
    const std::vector<index_t> counts = window_counts(g, count_include_pad);
#pragma omp parallel for schedule(static)
    for (index_t p = 0; p < planes; ++p) {
        const T* src = x + p * in_plane;
        for (index_t oh = 0; oh < g.out_h; ++oh) {
            const index_t h0 = oh * g.stride_h - g.pad_top;
            const index_t kh_lo = taps.h_lo[oh], kh_hi = taps.h_hi[oh];
            for (index_t ow = 0; ow < g.out_w; ++ow) {
                const index_t w0 = ow * g.stride_w - g.pad_left;
                const index_t kw_lo = taps.w_lo[ow], kw_hi = taps.w_hi[ow];
                T sum = 0;
                for (index_t kh = kh_lo; kh < kh_hi; ++kh) {
                    // Integer offsets, not pointers: w0 may be negative and a pointer before the buffer is UB.
                    const index_t row = (h0 + kh * g.dilation_h) * g.width + w0;
                    for (index_t kw = kw_lo; kw < kw_hi; ++kw) sum += src[row + kw * g.dilation_w];
                }
                const index_t count = counts[oh * g.out_w + ow];
                // An empty window (possible only with ceil_mode overhang) averages to 0, not NaN.
                y[p * out_plane + oh * g.out_w + ow] = count > 0 ? sum / static_cast<T>(count) : T(0);
            }
        }
    }
}

template <typename T>
void avg_pool2d_backward(const T* dy, index_t planes, const Pool2DGeometry& g, bool count_include_pad, T* dx) {
    const index_t in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
    const TapRanges taps(g);
    const std::vector<index_t> counts = window_counts(g, count_include_pad);
#pragma omp parallel for schedule(static)
    for (index_t p = 0; p < planes; ++p) {
        T* dst = dx + p * in_plane;
        std::fill(dst, dst + in_plane, T(0));
        for (index_t oh = 0; oh < g.out_h; ++oh) {
            for (index_t ow = 0; ow < g.out_w; ++ow) {
                const index_t count = counts[oh * g.out_w + ow];
                if (count == 0) continue;
                const T share = dy[p * out_plane + oh * g.out_w + ow] / static_cast<T>(count);
                const index_t h0 = oh * g.stride_h - g.pad_top, w0 = ow * g.stride_w - g.pad_left;
                const index_t kh_lo = taps.h_lo[oh], kh_hi = taps.h_hi[oh];
                const index_t kw_lo = taps.w_lo[ow], kw_hi = taps.w_hi[ow];
                for (index_t kh = kh_lo; kh < kh_hi; ++kh) {
                    const index_t row = (h0 + kh * g.dilation_h) * g.width + w0;
                    for (index_t kw = kw_lo; kw < kw_hi; ++kw) dst[row + kw * g.dilation_w] += share;
                }
            }
        }
    }
}

template <typename T>
void global_avg_pool_forward(const T* x, index_t planes, index_t size, T* y) {
#pragma omp parallel for schedule(static)
    for (index_t p = 0; p < planes; ++p) {
        // Accumulate in double: a float32 plane of 10^5 elements would otherwise lose digits.
        double sum = 0;
        const T* src = x + p * size;
        for (index_t i = 0; i < size; ++i) sum += src[i];
        y[p] = static_cast<T>(sum / static_cast<double>(size));
    }
}

template <typename T>
void global_avg_pool_backward(const T* dy, index_t planes, index_t size, T* dx) {
#pragma omp parallel for schedule(static)
    for (index_t p = 0; p < planes; ++p) {
        const T share = dy[p] / static_cast<T>(size);
        std::fill(dx + p * size, dx + (p + 1) * size, share);
    }
}

#define D5_INSTANTIATE_POOLING(T)                                                                          \
    template void max_pool2d_forward<T>(const T*, index_t, const Pool2DGeometry&, T*, std::int64_t*);      \
    template void max_pool2d_backward<T>(const T*, const std::int64_t*, index_t, const Pool2DGeometry&, T*); \
    template void avg_pool2d_forward<T>(const T*, index_t, const Pool2DGeometry&, bool, T*);               \
    template void avg_pool2d_backward<T>(const T*, index_t, const Pool2DGeometry&, bool, T*);              \
    template void global_avg_pool_forward<T>(const T*, index_t, index_t, T*);                              \
    template void global_avg_pool_backward<T>(const T*, index_t, index_t, T*);

D5_INSTANTIATE_POOLING(float)
D5_INSTANTIATE_POOLING(double)

}  // namespace kernels
}  // namespace d5
