// im2col / col2im for 2-D convolution (NCHW).
//
// The column matrix of one image has shape (C * KH * KW, OH * OW): row (c, kh, kw) holds the input pixel
// each output position sees through kernel tap (kh, kw) of channel c (zero where the tap falls in padding).
// Rows are channel-major, so the rows of convolution group g are the contiguous block
// [g * C/G * KH * KW, (g+1) * C/G * KH * KW): groups need no special handling here, the caller slices.
#pragma once

#include "d5/tensor.h"

namespace d5 {
namespace kernels {

struct Conv2DGeometry {
    index_t channels = 0, height = 0, width = 0;   // input plane
    index_t kernel_h = 1, kernel_w = 1;
    index_t out_h = 0, out_w = 0;                  // computed by the caller (knows pads_end / auto_pad)
    index_t stride_h = 1, stride_w = 1;
    index_t pad_top = 0, pad_left = 0;             // only the leading pads matter for the index mapping
    index_t dilation_h = 1, dilation_w = 1;

    index_t col_rows() const { return channels * kernel_h * kernel_w; }
    index_t col_cols() const { return out_h * out_w; }
    // The same, overflow-checked (throw std::length_error); validate() calls them once, after which the
    // unchecked versions are safe.
    index_t col_rows_checked() const;
    index_t col_cols_checked() const;
};

// Throws std::invalid_argument when the geometry is inconsistent (non-positive sizes or strides), and
// std::length_error when an index or size it implies would overflow.
void validate(const Conv2DGeometry& g);

// (out - 1) * stride + (kernel - 1) * dilation, the farthest tap of the last window from the first window's
// start, checked for overflow together with every other coordinate the window clipping forms on an axis of
// `size` elements with leading pad `pad`; throws std::length_error naming `what`.
index_t window_reach(index_t size, index_t out, index_t stride, index_t kernel, index_t dilation, index_t pad,
                     const char* what);

// Output columns [lo, hi) whose input coordinate ow*stride + offset lies inside [0, size).
// Computed once per kernel tap so the inner loops have no bounds checks.
inline void valid_range(index_t offset, index_t stride, index_t size, index_t out, index_t& lo, index_t& hi) {
    lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    const index_t last = size - 1 - offset;  // largest ow*stride allowed
    hi = last < 0 ? 0 : last / stride + 1;
    lo = lo < out ? lo : out;
    hi = hi < out ? hi : out;
    hi = hi > lo ? hi : lo;
}

// How the columns of a batch are laid out.
//   BatchMajor: (batch, C*KH*KW, OH*OW) -- one column matrix per image.
//   RowMajor:   (C*KH*KW, batch * OH*OW) -- one wide matrix for the whole batch, so a convolution layer
//               is ONE large GEMM instead of `batch` skinny ones (measured ~1.5-2x faster for LeNet).
enum class ColumnLayout { BatchMajor, RowMajor };

// images: (batch, C, H, W) -> columns (layout as above). Overwrites `columns`.
template <typename T>
void im2col(const T* images, index_t batch, const Conv2DGeometry& g, ColumnLayout layout, T* columns);

// columns (layout as above) -> images: (batch, C, H, W); overlapping taps are summed.
// Overwrites `images` (the adjoint of im2col).
template <typename T>
void col2im(const T* columns, index_t batch, const Conv2DGeometry& g, ColumnLayout layout, T* images);

}  // namespace kernels
}  // namespace d5
