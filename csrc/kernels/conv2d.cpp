#include "conv2d.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "blas.h"
#include "conv2d_packed.h"
#include "safety.h"

namespace d5 {
namespace kernels {

namespace {

// A 1x1 kernel with unit stride and no padding sees each pixel once: the image is its own column matrix.
bool is_pointwise(const Conv2DGeometry& g) {
    return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
           g.pad_left == 0 && g.out_h == g.height && g.out_w == g.width;
}

// The packed kernel rereads a group's whole weight matrix for every 32 output pixels, so it wins while
// that matrix stays in L2 (1 MB here); beyond that BLAS's cache blocking wins. Measured on 8-image batches
// (benchmarks/ops.py and by hand), packed / im2col+BLAS in GFLOP/s: 64x576 weights (ResNet 3x3, 56x56) 178/122,
// 64x2304 (14x14) 146/128, 128x1152 (28x28) 192/163, 32x4800 (Inception 5x5, 28x28) 139/72. The last is why
// the limit is 640 KB rather than 512 KB: im2col's 25x expansion of that image does not fit in the caches.
constexpr index_t kPackedWeightLimit = 160 * 1024;  // floats (640 KB)

std::atomic<bool> g_packed_enabled{true};

bool use_packed(index_t out_channels, index_t groups, const Conv2DGeometry& g) {
    return g_packed_enabled.load(std::memory_order_relaxed) && packed_conv_available() &&
           (out_channels / groups) * (g.col_rows() / groups) <= kPackedWeightLimit && packed_conv_fits(groups, g);
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
    if (batch == 0) return;  // nothing to compute: allocate no scratch for the geometry
    const index_t rows = g.col_rows(), cols = g.col_cols();
    const index_t group_rows = rows / groups, group_out = out_channels / groups;
    const index_t image = g.channels * g.height * g.width;
    const bool pointwise = is_pointwise(g);
    // Images are independent: each thread convolves whole images with its own column buffer, so the
    // small per-image GEMMs stay in cache and run single-threaded. A single image is split inside instead:
    // im2col over channels, the GEMM over tiles of the output (parallel_gemm). Either way d5's OpenMP
    // threads do all the work and BLAS runs single-threaded (the thread policy in blas.h).
    const bool image_parallel = batch > 1;
    const auto gemm = image_parallel ? &gemm_row_major<T> : &parallel_gemm<T>;
    const int threads = region_threads(image_parallel);
    ThreadScratch<T> columns(threads, pointwise ? 0 : checked_mul(rows, cols, "conv2d columns"), "conv2d columns");
    ExceptionTrap trap;
    SerialBlas serial_blas(true);
#pragma omp parallel num_threads(threads) if (image_parallel)
    {
    T* column_buffer = columns.get(thread_index());
#pragma omp for schedule(static)
    for (index_t n = 0; n < batch; ++n) trap.run([&] {
        const T* col = x + n * image;
        if (!pointwise) {
            im2col(x + n * image, 1, g, ColumnLayout::BatchMajor, column_buffer);
            col = column_buffer;
        }
        T* out = y + n * out_channels * cols;
        for (index_t grp = 0; grp < groups; ++grp)
            gemm(false, false, group_out, cols, group_rows, T(1), w + grp * group_out * group_rows, group_rows,
                 col + grp * group_rows * cols, cols, T(0), out + grp * group_out * cols, cols);
        if (bias != nullptr)
            for (index_t m = 0; m < out_channels; ++m)
                for (index_t i = 0; i < cols; ++i) out[m * cols + i] += bias[m];
    });
    }
    trap.rethrow();
}

namespace {

// The weight gradient sums dY_n col_n^T over the images n, in one of two ways chosen by dW's size alone, so
// that the bits never depend on the thread count:
// - small dW (at most kTiledWeightGradientBytes, most layers): images in parallel. The images are cut into a
//   number of chunks that depends only on the shapes; each chunk sums its images in order into its own
//   partial (at most 16 chunks and kPartialBudget bytes), and the partials are added in chunk order.
// - large dW: image after image, each product split into tiles of dW by parallel_gemm (tiles depend on dW's
//   shape alone). Images in parallel would run two full-size products at once, each thread into its own
//   weight-sized partial, and thrash the caches: VGG's 14x14x512 layer (9.4 MB of dW) ran at 80 GFLOP/s that
//   way and runs at ~185 this way; Inception's 5x5 layer (600 KB) runs alike either way (96 and 92).
constexpr index_t kTiledWeightGradientBytes = index_t(512) << 10;
constexpr index_t kMaxReductionChunks = 16;
constexpr index_t kPartialBudget = index_t(128) << 20;

template <typename T>
index_t reduction_chunks(index_t batch, index_t partial_size) {
    const index_t affordable = std::max<index_t>(1, kPartialBudget / std::max<index_t>(1, partial_size * index_t(sizeof(T))));
    return std::max<index_t>(1, std::min({batch, kMaxReductionChunks, affordable}));
}

template <typename T>
void weight_gradient_by_images(const T* dy, const T* x, index_t batch, index_t out_channels, index_t groups,
                               const Conv2DGeometry& g, T* dw, T* dbias) {
    const index_t rows = g.col_rows(), cols = g.col_cols();
    const index_t group_rows = rows / groups, group_out = out_channels / groups;
    const index_t image = g.channels * g.height * g.width, weight_size = out_channels * group_rows;
    const bool pointwise = is_pointwise(g);
    // One partial per chunk: the weight gradient followed by the bias gradient.
    const index_t partial_size = checked_add(weight_size, dbias != nullptr ? out_channels : 0, "conv2d dW partial");
    const index_t chunks = reduction_chunks<T>(batch, partial_size);
    ThreadScratch<T> partials(static_cast<int>(chunks), partial_size, "conv2d weight-gradient partials");
    const bool image_parallel = batch > 1;  // a single image is split inside (parallel_gemm)
    const auto gemm = image_parallel ? &gemm_row_major<T> : &parallel_gemm<T>;
    const int threads = region_threads(image_parallel);
    ThreadScratch<T> columns(threads, pointwise ? 0 : checked_mul(rows, cols, "conv2d columns"), "conv2d columns");
    ExceptionTrap trap;
#pragma omp parallel num_threads(threads) if (image_parallel)
    {
    T* column_buffer = columns.get(thread_index());
#pragma omp for schedule(static)
    for (index_t chunk = 0; chunk < chunks; ++chunk) trap.run([&] {
        T* dw_partial = partials.get(static_cast<int>(chunk));
        T* dbias_partial = dw_partial + weight_size;
        for (index_t n = chunk * batch / chunks; n < (chunk + 1) * batch / chunks; ++n) {
            const T* col = x + n * image;  // pointwise: the image is its own column matrix
            if (!pointwise) {
                im2col(x + n * image, 1, g, ColumnLayout::BatchMajor, column_buffer);
                col = column_buffer;
            }
            const T* grad = dy + n * out_channels * cols;
            for (index_t grp = 0; grp < groups; ++grp)  // dW_g += dY_g (Mg x L) * col_g^T (L x Kg)
                gemm(false, true, group_out, group_rows, cols, T(1), grad + grp * group_out * cols, cols,
                     col + grp * group_rows * cols, cols, T(1), dw_partial + grp * group_out * group_rows, group_rows);
            if (dbias != nullptr)
                for (index_t m = 0; m < out_channels; ++m) {
                    T sum = 0;
                    for (index_t i = 0; i < cols; ++i) sum += grad[m * cols + i];
                    dbias_partial[m] += sum;
                }
        }
    });
    }
    trap.rethrow();
    // Partials in chunk order; each element is summed by one thread, so no cross-thread reduction.
#pragma omp parallel for schedule(static) if (partial_size * chunks > 65536)
    for (index_t i = 0; i < partial_size; ++i) {
        T sum = partials.get(0)[i];
        for (index_t chunk = 1; chunk < chunks; ++chunk) sum += partials.get(static_cast<int>(chunk))[i];
        if (i < weight_size)
            dw[i] = sum;
        else
            dbias[i - weight_size] = sum;
    }
}

template <typename T>
void weight_gradient_tiled(const T* dy, const T* x, index_t batch, index_t out_channels, index_t groups,
                           const Conv2DGeometry& g, T* dw, T* dbias) {
    const index_t rows = g.col_rows(), cols = g.col_cols();
    const index_t group_rows = rows / groups, group_out = out_channels / groups;
    const index_t image = g.channels * g.height * g.width;
    const bool pointwise = is_pointwise(g);
    ThreadScratch<T> columns(1, pointwise ? 0 : checked_mul(rows, cols, "conv2d columns"), "conv2d columns");
    for (index_t n = 0; n < batch; ++n) {
        const T* col = x + n * image;
        if (!pointwise) {
            im2col(x + n * image, 1, g, ColumnLayout::BatchMajor, columns.get(0));
            col = columns.get(0);
        }
        const T* grad = dy + n * out_channels * cols;
        for (index_t grp = 0; grp < groups; ++grp)  // dW_g (+)= dY_g (Mg x L) * col_g^T (L x Kg)
            parallel_gemm<T>(false, true, group_out, group_rows, cols, T(1), grad + grp * group_out * cols, cols,
                             col + grp * group_rows * cols, cols, n == 0 ? T(0) : T(1),
                             dw + grp * group_out * group_rows, group_rows);
        if (dbias != nullptr)
            for (index_t m = 0; m < out_channels; ++m) {
                T sum = 0;
                for (index_t i = 0; i < cols; ++i) sum += grad[m * cols + i];
                dbias[m] = n == 0 ? sum : dbias[m] + sum;
            }
    }
}

// For stride 1 and dilation 1, the input gradient is itself a convolution: of dY with the weights transposed
// (C x K) and flipped, leading pads kernel - 1 - pad. Run by the packed kernel it skips the column gradient
// matrix (C*R*S x Ho*Wo per image) and col2im: Inception's 5x5 layer (28x28x192, 32 filters) writes 15 MB of
// columns per image through a 32-deep GEMM otherwise. Returns false where that does not apply, and for fewer
// than 16 input channels (the transposed convolution's outputs), which fill the kernel's 8-channel micro-tiles
// poorly. Backward with dX, ms, packed / columns: LeNet-5's 6->16 5x5 at batch 64 4.7 / 1.0, a 3->64 7x7
// stem 41 / 21; 16->16 3x3 on 32x32 8.6 / 10.4, 64->64 3x3 on 8x8 4.8 / 5.6, Inception 28.6 / 36.2.
constexpr index_t kTransposedMinChannels = 16;

bool transposed_geometry(index_t out_channels, index_t groups, const Conv2DGeometry& g, Conv2DGeometry& t) {
    if (groups != 1 || g.channels < kTransposedMinChannels || is_pointwise(g) || g.stride_h != 1 || g.stride_w != 1 || g.dilation_h != 1 ||
        g.dilation_w != 1 || g.pad_top < 0 || g.pad_left < 0 || g.pad_top > g.kernel_h - 1 ||
        g.pad_left > g.kernel_w - 1)
        return false;
    t = Conv2DGeometry{};
    t.channels = out_channels;
    t.height = g.out_h;
    t.width = g.out_w;
    t.kernel_h = g.kernel_h;
    t.kernel_w = g.kernel_w;
    t.out_h = g.height;
    t.out_w = g.width;
    t.pad_top = g.kernel_h - 1 - g.pad_top;
    t.pad_left = g.kernel_w - 1 - g.pad_left;
    return use_packed(g.channels, 1, t);
}

// W (K x C x R x S) -> W' (C x K x R x S) with both kernel axes reversed.
std::vector<float> transposed_flipped_weights(const float* w, index_t out_channels, const Conv2DGeometry& g) {
    const index_t taps = g.kernel_h * g.kernel_w;
    std::vector<float> flipped(static_cast<size_t>(out_channels * g.channels * taps));
    for (index_t k = 0; k < out_channels; ++k)
        for (index_t c = 0; c < g.channels; ++c)
            for (index_t tap = 0; tap < taps; ++tap)
                flipped[static_cast<size_t>((c * out_channels + k) * taps + (taps - 1 - tap))] =
                    w[(k * g.channels + c) * taps + tap];
    return flipped;
}

}  // namespace

template <typename T>
void conv2d_backward(const T* dy, const T* x, const T* w, index_t batch, index_t out_channels, index_t groups,
                     const Conv2DGeometry& g, T* dx, T* dw, T* dbias) {
    const index_t rows = g.col_rows(), cols = g.col_cols();
    const index_t group_rows = rows / groups, group_out = out_channels / groups;
    const index_t image = g.channels * g.height * g.width;
    const bool pointwise = is_pointwise(g);
    const index_t weight_size = out_channels * group_rows;
    if (batch == 0) {  // empty sums: allocate no scratch for the geometry
        std::fill(dw, dw + weight_size, T(0));
        if (dbias != nullptr) std::fill(dbias, dbias + out_channels, T(0));
        return;
    }
    SerialBlas serial_blas(true);

    if (weight_size * index_t(sizeof(T)) > kTiledWeightGradientBytes)
        weight_gradient_tiled(dy, x, batch, out_channels, groups, g, dw, dbias);
    else
        weight_gradient_by_images(dy, x, batch, out_channels, groups, g, dw, dbias);
    if (dx == nullptr) return;  // nobody needs it (the network's first layer)

    // dX: for stride 1 and dilation 1 in float32 a convolution by the packed kernel (see transposed_geometry);
    // otherwise per image, dcol = W^T dY then col2im, images in parallel (one image: split inside).
    if constexpr (std::is_same_v<T, float>) {
        Conv2DGeometry transposed;
        if (transposed_geometry(out_channels, groups, g, transposed)) {
            const std::vector<float> flipped = transposed_flipped_weights(w, out_channels, g);
            return conv2d_forward_packed(dy, flipped.data(), nullptr, batch, g.channels, 1, transposed, dx);
        }
    }
    const bool image_parallel = batch > 1;
    const auto gemm = image_parallel ? &gemm_row_major<T> : &parallel_gemm<T>;
    const int threads = region_threads(image_parallel);
    ThreadScratch<T> dcolumns(threads, pointwise ? 0 : checked_mul(rows, cols, "conv2d columns"), "conv2d column gradients");
    ExceptionTrap trap;
#pragma omp parallel num_threads(threads) if (image_parallel)
    {
    T* dcolumn_buffer = dcolumns.get(thread_index());
#pragma omp for schedule(static)
    for (index_t n = 0; n < batch; ++n) trap.run([&] {
        // pointwise: the column gradient is the image gradient
        T* dcol = pointwise ? dx + n * image : dcolumn_buffer;
        const T* grad = dy + n * out_channels * cols;
        for (index_t grp = 0; grp < groups; ++grp)  // dcol_g = W_g^T (Kg x Mg) * dY_g (Mg x L)
            gemm(true, false, group_rows, cols, group_out, T(1), w + grp * group_out * group_rows, group_rows,
                 grad + grp * group_out * cols, cols, T(0), dcol + grp * group_rows * cols, cols);
        if (!pointwise) col2im(dcolumn_buffer, 1, g, ColumnLayout::BatchMajor, dx + n * image);
    });
    }
    trap.rethrow();
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
