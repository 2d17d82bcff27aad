#include "conv2d_packed.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "safety.h"

namespace d5 {
namespace kernels {

namespace {

constexpr index_t NR = 32;  // output pixels per panel: two 16-float AVX-512 registers
constexpr index_t MR = 8;   // output channels per micro-tile: 8 x 2 = 16 accumulators of the 32 registers

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<float[], FreeDeleter>;

// Cache-line aligned, so every panel row is one or two whole lines.
AlignedBuffer aligned_floats(index_t count, const char* what) {
    // count <= kMaxElements (checked by the caller), so the byte count cannot overflow.
    const std::size_t bytes = ((static_cast<std::size_t>(count) * sizeof(float) + 63) / 64) * 64;
    require_memory(static_cast<index_t>(bytes), what);
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw OutOfMemory(what, static_cast<index_t>(bytes));
    return AlignedBuffer(static_cast<float*>(p));
}

// Weights of one group (rows x K, row-major) as `blocks` tiles of (K, MR): tile b holds output channels
// [b*MR, b*MR + MR) interleaved per k, zero past the last channel, so the micro-kernel reads them in order.
void pack_weights(const float* w, index_t rows, index_t K, float* packed) {
    const index_t blocks = (rows + MR - 1) / MR;
    for (index_t b = 0; b < blocks; ++b)
        for (index_t k = 0; k < K; ++k)
            for (index_t i = 0; i < MR; ++i) {
                const index_t m = b * MR + i;
                packed[(b * K + k) * MR + i] = m < rows ? w[m * K + k] : 0.0f;
            }
}

// One image's input planes copied into a zero border wide enough for every tap: the panel packing
// then reads plain vectors with no bounds checks (masked loads whose masked-off lanes fall on the next
// page are very slow on some CPUs, and 32x32 float planes are exactly one page). The buffer belongs to
// the caller (allocated before the parallel region, see safety.h).
struct PaddedImage {
    index_t top = 0, left = 0, height = 0, width = 0;
    float* data = nullptr;

    PaddedImage(const Conv2DGeometry& g, float* buffer)
        : top(g.pad_top), left(g.pad_left), height(padded_height(g)), width(padded_width(g)), data(buffer) {}

    static index_t padded_height(const Conv2DGeometry& g) {
        return std::max(g.height + g.pad_top, (g.out_h - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1);
    }
    static index_t padded_width(const Conv2DGeometry& g) {
        return std::max(g.width + g.pad_left, (g.out_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1);
    }
    // Floats the buffer needs: 16 of slack, so a chunk narrower than 16 lanes still loads a whole vector.
    static index_t buffer_size(index_t channels, const Conv2DGeometry& g) {
        return checked_add(checked_mul(channels, checked_mul(padded_height(g), padded_width(g), "padded image"),
                                       "padded image"),
                           16, "padded image");
    }

    // Zeroes the border and copies the interior.
    void load(const float* image, index_t channels, const Conv2DGeometry& g) {
        std::fill(data, data + channels * height * width + 16, 0.0f);
        for (index_t c = 0; c < channels; ++c)
            for (index_t h = 0; h < g.height; ++h)
                std::copy(image + (c * g.height + h) * g.width, image + (c * g.height + h + 1) * g.width,
                          data + (c * height + h + top) * width + left);
    }
};

// The receptive fields of output pixels [n0, n0 + NR) as a (K, NR) panel: row k = (c, kh, kw) holds, for
// each pixel, the input value under that tap (0 in the padding and past the last pixel). The pixels are
// walked in chunks of at most 16 along one output row: one vector load per chunk and tap at stride 1,
// a gather otherwise.
__attribute__((target("avx512f"))) void pack_panel(const PaddedImage& image, index_t channels,
                                                  const Conv2DGeometry& g, index_t n0, float* panel) {
    const index_t count = std::min(NR, g.out_h * g.out_w - n0);
    struct Chunk {
        index_t j, oh, ow;  // panel column, output row, first output column
        __mmask16 lanes;
    };
    Chunk chunks[NR];
    index_t chunk_count = 0;
    for (index_t j = 0; j < count;) {
        const index_t oh = (n0 + j) / g.out_w, ow = (n0 + j) % g.out_w;
        const index_t lanes = std::min({g.out_w - ow, count - j, index_t(16)});
        chunks[chunk_count++] = {j, oh, ow, __mmask16((1u << lanes) - 1)};
        j += lanes;
    }
    const __m512i lane_step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 _mm512_set1_epi32(static_cast<int>(g.stride_w)));
    const index_t plane = image.height * image.width;
    float* dst = panel;
    for (index_t c = 0; c < channels; ++c)
        for (index_t kh = 0; kh < g.kernel_h; ++kh)
            for (index_t kw = 0; kw < g.kernel_w; ++kw, dst += NR) {
                if (count < NR) {  // pixels past the image's last one
                    _mm512_storeu_ps(dst + count - count % 16, _mm512_setzero_ps());
                    if (count < 16) _mm512_storeu_ps(dst + 16, _mm512_setzero_ps());
                }
                for (index_t r = 0; r < chunk_count; ++r) {
                    const Chunk& chunk = chunks[r];
                    const float* row = image.data + c * plane + (chunk.oh * g.stride_h + kh * g.dilation_h) * image.width;
                    const index_t first = chunk.ow * g.stride_w + kw * g.dilation_w;
                    const __m512 values =
                        g.stride_w == 1
                            ? _mm512_loadu_ps(row + first)
                            : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), chunk.lanes,
                                                       _mm512_add_epi32(lane_step, _mm512_set1_epi32(static_cast<int>(first))),
                                                       row, 4);
                    _mm512_mask_storeu_ps(dst + chunk.j, chunk.lanes, values);
                }
            }
}

// y[i, j] = bias[i] + sum_k weights[k, i] * panel[k, j] for i < rows, j < cols (ldy: y's row stride).
__attribute__((target("avx512f"))) void multiply_panel(index_t K, const float* weights, const float* panel,
                                                      index_t rows, index_t cols, const float* bias, float* y,
                                                      index_t ldy) {
    __m512 acc[MR][2];
    for (index_t i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (index_t k = 0; k < K; ++k) {
        const __m512 left = _mm512_load_ps(panel + k * NR), right = _mm512_load_ps(panel + k * NR + 16);
        const float* a = weights + k * MR;
#pragma GCC unroll 8
        for (index_t i = 0; i < MR; ++i) {
            const __m512 broadcast = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(broadcast, left, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(broadcast, right, acc[i][1]);
        }
    }
    const __mmask16 left_mask = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
    const __mmask16 right_mask =
        cols >= 32 ? __mmask16(0xFFFF) : cols <= 16 ? __mmask16(0) : __mmask16((1u << (cols - 16)) - 1);
    for (index_t i = 0; i < rows; ++i) {
        const __m512 b = bias != nullptr ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(y + i * ldy, left_mask, _mm512_add_ps(acc[i][0], b));
        _mm512_mask_storeu_ps(y + i * ldy + 16, right_mask, _mm512_add_ps(acc[i][1], b));
    }
}

}  // namespace

bool packed_conv_available() {
    static const bool available = __builtin_cpu_supports("avx512f");
    return available;
}

bool packed_conv_fits(index_t groups, const Conv2DGeometry& g) {
    // The panel packing forms 32-bit gather offsets within a padded row, and each thread keeps one padded
    // copy of a group's input planes: both must stay small. Geometry with huge pads or strides (legal in
    // ONNX, useless in practice) takes the im2col path, which never materializes the padding.
    constexpr index_t kMaxPaddedFloats = index_t(1) << 26;  // 256 MB per thread
    const index_t height = PaddedImage::padded_height(g), width = PaddedImage::padded_width(g);
    if (width > (index_t(1) << 30) || height > (index_t(1) << 30)) return false;
    index_t padded;
    if (__builtin_mul_overflow(g.channels / groups, height * width, &padded)) return false;
    // The input image itself is at most kMaxElements (validate), so 4x it cannot overflow.
    return padded <= kMaxPaddedFloats || padded <= 4 * (g.channels / groups) * g.height * g.width;
}

void conv2d_forward_packed(const float* x, const float* w, const float* bias, index_t batch, index_t out_channels,
                           index_t groups, const Conv2DGeometry& g, float* y) {
    const index_t group_channels = g.channels / groups, group_out = out_channels / groups;
    const index_t K = group_channels * g.kernel_h * g.kernel_w;
    const index_t pixels = g.out_h * g.out_w, plane = g.height * g.width;
    const index_t blocks = (group_out + MR - 1) / MR, panels = (pixels + NR - 1) / NR;
    AlignedBuffer packed_weights = aligned_floats(checked_mul(checked_mul(groups * blocks, K, "packed weights"), MR,
                                                              "packed weights"), "packed conv weights");
    for (index_t grp = 0; grp < groups; ++grp)
        pack_weights(w + grp * group_out * K, group_out, K, packed_weights.get() + grp * blocks * K * MR);
    // One work item = one panel of one group of one image, so a single large image still uses every thread.
    const index_t items = checked_mul(batch * groups, panels, "packed conv work items");
    if (items == 0) return;
    const int threads = region_threads();
    // Per-thread scratch, allocated here: an allocation failing inside the region would terminate.
    const index_t panel_size = checked_mul(K, NR, "packed conv panel");
    const index_t padded_size = PaddedImage::buffer_size(group_channels, g);
    AlignedBuffer panels_buffer = aligned_floats(checked_mul(threads, panel_size, "packed conv panels"), "packed conv panels");
    AlignedBuffer padded_buffer = aligned_floats(checked_mul(threads, padded_size, "padded images"), "packed conv padded images");
    ExceptionTrap trap;
#pragma omp parallel num_threads(threads)
    {
        const int thread = thread_index();
        // panel_size is a multiple of NR = 32 floats, so every thread's panel stays 64-byte aligned.
        float* panel = panels_buffer.get() + thread * panel_size;
        PaddedImage padded(g, padded_buffer.get() + thread * padded_size);
        index_t padded_plane = -1;  // which (image, group) `padded` holds; items come in (image, group) order
#pragma omp for schedule(static)
        for (index_t item = 0; item < items; ++item) trap.run([&] {
            const index_t n = item / (groups * panels), grp = item / panels % groups, p = item % panels;
            if (item / panels != padded_plane) {
                padded.load(x + (n * g.channels + grp * group_channels) * plane, group_channels, g);
                padded_plane = item / panels;
            }
            pack_panel(padded, group_channels, g, p * NR, panel);
            float* out = y + (n * out_channels + grp * group_out) * pixels + p * NR;
            const index_t cols = std::min(NR, pixels - p * NR);
            for (index_t b = 0; b < blocks; ++b) {
                const index_t first = grp * group_out + b * MR;
                multiply_panel(K, packed_weights.get() + (grp * blocks + b) * K * MR, panel,
                               std::min(MR, group_out - b * MR), cols, bias != nullptr ? bias + first : nullptr,
                               out + b * MR * pixels, pixels);
            }
        });
    }
    trap.rethrow();
}

}  // namespace kernels
}  // namespace d5
