// Float32 2-D convolution forward with d5's own AVX-512 micro-kernel (implicit GEMM on packed panels).
//
// Why not BLAS here: the GEMMs of small-channel CNNs (ResNet-20..110 on CIFAR: 16-64 output channels,
// K = 144..576) are too skinny for OpenBLAS to reach its speed, and the OpenBLAS that scipy ships runs its
// AVX2 kernels on CPUs it does not recognise (AMD Zen 5 here). The kernel below packs NR = 32 output pixels'
// receptive fields at a time straight from the image (no full column matrix) and multiplies them by
// MR = 8 output channels in 16 AVX-512 accumulators. Measured on ResNet-44's layers (2 cores): ~2-3x the
// throughput of per-image im2col + OpenBLAS sgemm.
#pragma once

#include "d5/tensor.h"
#include "im2col.h"

namespace d5 {
namespace kernels {

// True when this CPU (and build) can run conv2d_forward_packed.
bool packed_conv_available();

// True when the geometry suits the packed kernel: its per-thread padded copy of the input stays small and
// its 32-bit gather offsets cannot overflow. Call after validate(g).
bool packed_conv_fits(index_t groups, const Conv2DGeometry& g);

// Same contract as conv2d_forward<float> (x: (batch, C, H, W), w: (M, C/groups, KH, KW), bias (M,) or
// nullptr -> y: (batch, M, OH, OW)). Call only when packed_conv_available().
void conv2d_forward_packed(const float* x, const float* w, const float* bias, index_t batch, index_t out_channels,
                           index_t groups, const Conv2DGeometry& g, float* y);

}  // namespace kernels
}  // namespace d5
