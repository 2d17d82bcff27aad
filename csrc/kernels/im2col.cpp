#include "im2col.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "safety.h"

namespace d5 {
namespace kernels {

void validate(const Conv2DGeometry& g) {
    if (g.channels <= 0 || g.height <= 0 || g.width <= 0 || g.kernel_h <= 0 || g.kernel_w <= 0 ||
        g.out_h <= 0 || g.out_w <= 0 || g.stride_h <= 0 || g.stride_w <= 0 || g.dilation_h <= 0 ||
        g.dilation_w <= 0 || g.pad_top < 0 || g.pad_left < 0)
        throw std::invalid_argument(
            "invalid 2-D window geometry: sizes, kernel, strides and dilations must be positive and pads "
            "non-negative (got C=" + std::to_string(g.channels) + " H=" + std::to_string(g.height) +
            " W=" + std::to_string(g.width) + " kernel=" + std::to_string(g.kernel_h) + "x" +
            std::to_string(g.kernel_w) + " out=" + std::to_string(g.out_h) + "x" + std::to_string(g.out_w) + ")");
    // Every index the kernels form (oh * stride + kh * dilation - pad, c * H * W + ..., the column
    // matrix's rows x cols) must be computable without overflow: check the largest of each once here.
    window_reach(g.height, g.out_h, g.stride_h, g.kernel_h, g.dilation_h, g.pad_top, "2-D window rows");
    window_reach(g.width, g.out_w, g.stride_w, g.kernel_w, g.dilation_w, g.pad_left, "2-D window columns");
    checked_mul(checked_mul(g.channels, g.height, "image size"), g.width, "image size");
    checked_mul(g.col_rows_checked(), g.col_cols_checked(), "im2col column matrix");
}

index_t Conv2DGeometry::col_rows_checked() const {
    return checked_mul(checked_mul(channels, kernel_h, "im2col rows"), kernel_w, "im2col rows");
}

index_t Conv2DGeometry::col_cols_checked() const { return checked_mul(out_h, out_w, "im2col columns"); }

index_t window_reach(index_t size, index_t out, index_t stride, index_t kernel, index_t dilation, index_t pad,
                     const char* what) {
    const index_t last = checked_add(checked_mul(out - 1, stride, what), checked_mul(kernel - 1, dilation, what), what);
    checked_add(last, pad, what);  // the coordinate before subtracting the pad must not overflow either
    // The clipping of windows to the input (valid_range, tap_range) rounds -offset / step up, with
    // -offset <= pad, and measures size - 1 - offset: neither may overflow.
    checked_add(pad, std::max(stride, dilation), what);
    checked_add(size, pad, what);
    return last;
}

namespace {

// Distance between consecutive images and between consecutive column rows in the given layout.
inline void layout_strides(const Conv2DGeometry& g, index_t batch, ColumnLayout layout, index_t& image_stride,
                           index_t& row_stride) {
    if (layout == ColumnLayout::BatchMajor) {
        image_stride = g.col_rows() * g.col_cols();
        row_stride = g.col_cols();
    } else {
        image_stride = g.col_cols();
        row_stride = batch * g.col_cols();
    }
}

}  // namespace

template <typename T>
void im2col(const T* images, index_t batch, const Conv2DGeometry& g, ColumnLayout layout, T* columns) {
    const index_t plane = g.height * g.width;
    const index_t taps = g.kernel_h * g.kernel_w;
    index_t image_stride, row_stride;
    layout_strides(g, batch, layout, image_stride, row_stride);
    // One (image, channel) pair per iteration: each writes its own block of rows, so no races.
#pragma omp parallel for schedule(static)
    for (index_t nc = 0; nc < batch * g.channels; ++nc) {
        const index_t n = nc / g.channels, c = nc % g.channels;
        const T* src = images + nc * plane;
        T* dst_channel = columns + n * image_stride + c * taps * row_stride;
        for (index_t kh = 0; kh < g.kernel_h; ++kh) {
            for (index_t kw = 0; kw < g.kernel_w; ++kw) {
                T* dst = dst_channel + (kh * g.kernel_w + kw) * row_stride;
                const index_t w_offset = kw * g.dilation_w - g.pad_left;
                index_t lo, hi;
                valid_range(w_offset, g.stride_w, g.width, g.out_w, lo, hi);
                for (index_t oh = 0; oh < g.out_h; ++oh) {
                    T* row = dst + oh * g.out_w;
                    const index_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
                    if (ih < 0 || ih >= g.height) {
                        std::fill(row, row + g.out_w, T(0));
                        continue;
                    }
                    // Index from the row start (never form a pointer before it: w_offset may be negative).
                    const T* src_row = src + ih * g.width;
                    std::fill(row, row + lo, T(0));
                    if (g.stride_w == 1) {
                        if (hi > lo) std::copy(src_row + lo + w_offset, src_row + hi + w_offset, row + lo);
                    } else {
                        for (index_t ow = lo; ow < hi; ++ow) row[ow] = src_row[ow * g.stride_w + w_offset];
                    }
                    std::fill(row + hi, row + g.out_w, T(0));
                }
            }
        }
    }
}

template <typename T>
void col2im(const T* columns, index_t batch, const Conv2DGeometry& g, ColumnLayout layout, T* images) {
    const index_t plane = g.height * g.width;
    const index_t taps = g.kernel_h * g.kernel_w;
    index_t image_stride, row_stride;
    layout_strides(g, batch, layout, image_stride, row_stride);
    // Each iteration owns one output plane, so the scatter-add is race-free without atomics.
#pragma omp parallel for schedule(static)
    for (index_t nc = 0; nc < batch * g.channels; ++nc) {
        const index_t n = nc / g.channels, c = nc % g.channels;
        T* dst = images + nc * plane;
        std::fill(dst, dst + plane, T(0));
        const T* src_channel = columns + n * image_stride + c * taps * row_stride;
        for (index_t kh = 0; kh < g.kernel_h; ++kh) {
            for (index_t kw = 0; kw < g.kernel_w; ++kw) {
                const T* src = src_channel + (kh * g.kernel_w + kw) * row_stride;
                const index_t w_offset = kw * g.dilation_w - g.pad_left;
                index_t lo, hi;
                valid_range(w_offset, g.stride_w, g.width, g.out_w, lo, hi);
                for (index_t oh = 0; oh < g.out_h; ++oh) {
                    const index_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
                    if (ih < 0 || ih >= g.height) continue;
                    const T* row = src + oh * g.out_w;
                    T* dst_row = dst + ih * g.width;
                    for (index_t ow = lo; ow < hi; ++ow) dst_row[ow * g.stride_w + w_offset] += row[ow];
                }
            }
        }
    }
}

template void im2col<float>(const float*, index_t, const Conv2DGeometry&, ColumnLayout, float*);
template void im2col<double>(const double*, index_t, const Conv2DGeometry&, ColumnLayout, double*);
template void col2im<float>(const float*, index_t, const Conv2DGeometry&, ColumnLayout, float*);
template void col2im<double>(const double*, index_t, const Conv2DGeometry&, ColumnLayout, double*);

}  // namespace kernels
}  // namespace d5
