// 2-D convolution (NCHW, groups) as im2col + GEMM, one image at a time.
//
// Why per image: the column matrix of one image (C*KH*KW x OH*OW, e.g. 78 KB for LeNet-5's first layer)
// stays in cache between im2col and the GEMM, while a whole batch's columns (5 MB) do not. Measured on
// LeNet-5 shapes this is ~1.7x faster than building the batch's columns and multiplying in NumPy.
#pragma once

#include "d5/tensor.h"
#include "im2col.h"

namespace d5 {
namespace kernels {

// x: (batch, C, H, W), w: (M, C/groups, KH, KW), bias: (M,) or nullptr -> y: (batch, M, OH, OW).
template <typename T>
void conv2d_forward(const T* x, const T* w, const T* bias, index_t batch, index_t out_channels, index_t groups,
                    const Conv2DGeometry& g, T* y);

// Whether float32 conv2d_forward may use the packed AVX-512 kernel (conv2d_packed.h) where it applies
// (default: yes); returns the previous setting. For tests and benchmarks comparing the two paths.
bool set_packed_conv_enabled(bool enabled);

// dy: (batch, M, OH, OW) -> dx (like x), dw (like w), dbias (M,) unless nullptr. Overwrites all three.
template <typename T>
void conv2d_backward(const T* dy, const T* x, const T* w, index_t batch, index_t out_channels, index_t groups,
                     const Conv2DGeometry& g, T* dx, T* dw, T* dbias);

}  // namespace kernels
}  // namespace d5
