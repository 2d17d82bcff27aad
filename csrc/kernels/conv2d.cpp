#include "conv2d.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "blas.h"
#include "conv2d_packed.h"

namespace d5 {
namespace kernels {

namespace {

// A 1x1 kernel with unit stride and no padding sees each pixel once: the image is its own column matrix.
bool is_pointwise(const Conv2DGeometry& g) {
    return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
           g.pad_left == 0 && g.out_h == g.height && g.out_w == g.width;
}

// The packed kernel rereads a group's whole weight matrix for every 32 output pixels, so it wins while
// that matrix stays in L2 (ResNet-CIFAR: <= 64 x 576 floats); beyond that BLAS's cache blocking wins.
constexpr index_t kPackedWeightLimit = 128 * 1024;  // floats (512 KB)

std::atomic<bool> g_packed_enabled{true};

bool use_packed(index_t out_channels, index_t groups, const Conv2DGeometry& g) {
    return g_packed_enabled.load(std::memory_order_relaxed) && packed_conv_available() &&
           (out_channels / groups) * (g.col_rows() / groups) <= kPackedWeightLimit;
}

}  // namespace

bool set_packed_conv_enabled(bool enabled) { return g_packed_enabled.exchange(enabled); }

template <typename T>
void conv2d_forward(const T* x, const T* w, const T* bias, index_t batch, index_t out_channels, index_t groups,
                    const Conv2DGeometry& g, T* y) {
    if constexpr (std::is_same_v<T, float>) {
        if (use_packed(out_channels, groups, g))
            return conv2d_forward_packed(x, w, bias, batch, out_channels, groups, g, y);
    }
    const index_t rows = g.col_rows(), cols = g.col_cols();
    const index_t group_rows = rows / groups, group_out = out_channels / groups;
    const index_t image = g.channels * g.height * g.width;
    const bool pointwise = is_pointwise(g);
    // Images are independent: each thread convolves whole images with its own column buffer, so the
    // small per-image GEMMs stay in cache and run single-threaded. A single image is left to BLAS's threads.
    const bool image_parallel = batch > 1;
    SerialBlas serial_blas(image_parallel);
#pragma omp parallel if (image_parallel)
    {
    std::vector<T> columns(pointwise ? 0 : rows * cols);
#pragma omp for schedule(static)
    for (index_t n = 0; n < batch; ++n) {
        const T* col = x + n * image;
        if (!pointwise) {
            im2col(x + n * image, 1, g, ColumnLayout::BatchMajor, columns.data());
            col = columns.data();
        }
        T* out = y + n * out_channels * cols;
        for (index_t grp = 0; grp < groups; ++grp)
            gemm_row_major<T>(false, false, group_out, cols, group_rows, T(1), w + grp * group_out * group_rows,
                              group_rows, col + grp * group_rows * cols, cols, T(0), out + grp * group_out * cols, cols);
        if (bias != nullptr)
            for (index_t m = 0; m < out_channels; ++m)
                for (index_t i = 0; i < cols; ++i) out[m * cols + i] += bias[m];
    }
    }
}

template <typename T>
void conv2d_backward(const T* dy, const T* x, const T* w, index_t batch, index_t out_channels, index_t groups,
                     const Conv2DGeometry& g, T* dx, T* dw, T* dbias) {
    const index_t rows = g.col_rows(), cols = g.col_cols();
    const index_t group_rows = rows / groups, group_out = out_channels / groups;
    const index_t image = g.channels * g.height * g.width;
    const bool pointwise = is_pointwise(g);
    const index_t weight_size = out_channels * group_rows;
    std::fill(dw, dw + weight_size, T(0));
    if (dbias != nullptr) std::fill(dbias, dbias + out_channels, T(0));
    // Parallel over images as in the forward pass; each thread sums its images' dW and dbias privately
    // and adds them to the result once, under a critical section.
    const bool image_parallel = batch > 1;
    SerialBlas serial_blas(image_parallel);
#pragma omp parallel if (image_parallel)
    {
    std::vector<T> columns(pointwise ? 0 : rows * cols), dcolumns(pointwise || dx == nullptr ? 0 : rows * cols);
    std::vector<T> dw_local(weight_size, T(0)), dbias_local(dbias != nullptr ? out_channels : 0, T(0));
#pragma omp for schedule(static)
    for (index_t n = 0; n < batch; ++n) {
        const T* col = x + n * image;
        T* dcol = dx == nullptr ? nullptr : dx + n * image;  // pointwise: the column gradient is the image gradient
        if (!pointwise) {
            im2col(x + n * image, 1, g, ColumnLayout::BatchMajor, columns.data());
            col = columns.data();
            dcol = dcolumns.data();
        }
        const T* grad = dy + n * out_channels * cols;
        for (index_t grp = 0; grp < groups; ++grp) {
            const T* grad_g = grad + grp * group_out * cols;
            const T* w_g = w + grp * group_out * group_rows;
            // dW_g += dY_g (Mg x L) * col_g^T (L x Kg)
            gemm_row_major<T>(false, true, group_out, group_rows, cols, T(1), grad_g, cols,
                              col + grp * group_rows * cols, cols, T(1), dw_local.data() + grp * group_out * group_rows,
                              group_rows);
            // dcol_g = W_g^T (Kg x Mg) * dY_g (Mg x L); skipped when nobody needs dx (the network's first layer).
            if (dx != nullptr)
                gemm_row_major<T>(true, false, group_rows, cols, group_out, T(1), w_g, group_rows, grad_g, cols, T(0),
                                  dcol + grp * group_rows * cols, cols);
        }
        if (!pointwise && dx != nullptr) col2im(dcolumns.data(), 1, g, ColumnLayout::BatchMajor, dx + n * image);
        if (dbias != nullptr)
            for (index_t m = 0; m < out_channels; ++m) {
                T sum = 0;
                for (index_t i = 0; i < cols; ++i) sum += grad[m * cols + i];
                dbias_local[m] += sum;
            }
    }
#pragma omp critical
    {
        for (index_t i = 0; i < weight_size; ++i) dw[i] += dw_local[i];
        for (index_t m = 0; m < static_cast<index_t>(dbias_local.size()); ++m) dbias[m] += dbias_local[m];
    }
    }
}

#define D5_INSTANTIATE_CONV2D(T)                                                                               \
    template void conv2d_forward<T>(const T*, const T*, const T*, index_t, index_t, index_t,                   \
                                    const Conv2DGeometry&, T*);                                                \
    template void conv2d_backward<T>(const T*, const T*, const T*, index_t, index_t, index_t,                  \
                                     const Conv2DGeometry&, T*, T*, T*);

D5_INSTANTIATE_CONV2D(float)
D5_INSTANTIATE_CONV2D(double)

}  // namespace kernels
}  // namespace d5
