// Batch normalization over (N, C, S) tensors (S = product of the spatial sizes, 1 for (N, C) input).
//
// Training mode normalizes with the batch statistics over N and S (biased variance, as ONNX); inference
// mode with the given running statistics. y = (x - mean) * invstd * scale + bias, invstd = 1/sqrt(var+eps).
#pragma once

#include "d5/tensor.h"

namespace d5 {
namespace kernels {

// Writes y (N*C*S) and, per channel, the batch mean, biased variance and invstd (for backward).
template <typename T>
void batch_norm_forward_training(const T* x, index_t n, index_t c, index_t s, const T* scale, const T* bias,
                                 double epsilon, T* y, T* mean, T* var, T* invstd);

template <typename T>
void batch_norm_forward_inference(const T* x, index_t n, index_t c, index_t s, const T* scale, const T* bias,
                                  const T* mean, const T* var, double epsilon, T* y);

// Gradients when the forward used batch statistics (mean/invstd as returned by forward_training).
template <typename T>
void batch_norm_backward_training(const T* dy, const T* x, index_t n, index_t c, index_t s, const T* scale,
                                  const T* mean, const T* invstd, T* dx, T* dscale, T* dbias);

// Gradients when the forward used fixed (running) statistics: mean and var are constants there.
template <typename T>
void batch_norm_backward_inference(const T* dy, const T* x, index_t n, index_t c, index_t s, const T* scale,
                                   const T* mean, const T* var, double epsilon, T* dx, T* dscale, T* dbias);

}  // namespace kernels
}  // namespace d5
