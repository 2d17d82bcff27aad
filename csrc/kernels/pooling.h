// 2-D max / average / global-average pooling on NCHW tensors, forward and backward.
//
// Output sizes are computed by the caller (it knows ceil_mode and auto_pad); the kernels only map each
// output position to its window: rows oh*stride_h - pad_top + kh*dilation_h for kh in [0, kernel_h).
#pragma once

#include "d5/tensor.h"

namespace d5 {
namespace kernels {

struct Pool2DGeometry {
    index_t height = 0, width = 0;            // input plane
    index_t kernel_h = 1, kernel_w = 1;
    index_t out_h = 0, out_w = 0;
    index_t stride_h = 1, stride_w = 1;
    index_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
    index_t dilation_h = 1, dilation_w = 1;
};

// Throws std::invalid_argument when the geometry is inconsistent.
void validate(const Pool2DGeometry& g);

// x: (planes, H, W) -> y: (planes, OH, OW); indices[i] is the flat index into x (over all planes, as
// ONNX MaxPool's Indices output) of the maximum, or -1 when the window holds no input element.
// NaN propagates (a window containing NaN yields NaN), like PyTorch.
template <typename T>
void max_pool2d_forward(const T* x, index_t planes, const Pool2DGeometry& g, T* y, std::int64_t* indices);

// dx = scatter-add of dy at indices (flat indices into dx). Overwrites dx (planes * H * W elements).
template <typename T>
void max_pool2d_backward(const T* dy, const std::int64_t* indices, index_t planes, const Pool2DGeometry& g, T* dx);

// Mean over each window. count_include_pad: the divisor counts window taps that fall in the declared
// padding (but never those beyond it, which only ceil_mode creates); otherwise only taps inside x.
template <typename T>
void avg_pool2d_forward(const T* x, index_t planes, const Pool2DGeometry& g, bool count_include_pad, T* y);

template <typename T>
void avg_pool2d_backward(const T* dy, index_t planes, const Pool2DGeometry& g, bool count_include_pad, T* dx);

// x: (planes, size) -> y: (planes,), the mean of each plane.
template <typename T>
void global_avg_pool_forward(const T* x, index_t planes, index_t size, T* y);

// dx[p, i] = dy[p] / size.
template <typename T>
void global_avg_pool_backward(const T* dy, index_t planes, index_t size, T* dx);

}  // namespace kernels
}  // namespace d5
