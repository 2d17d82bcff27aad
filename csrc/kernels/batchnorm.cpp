#include "batchnorm.h"

#include <cmath>

namespace d5 {
namespace kernels {

// All per-channel reductions accumulate in double: a float32 sum over N*H*W ~ 10^6 terms would
// otherwise drift by more than the tolerance the gradient checks use.

template <typename T>
void batch_norm_forward_training(const T* x, index_t n, index_t c, index_t s, const T* scale, const T* bias,
                                 double epsilon, T* y, T* mean, T* var, T* invstd) {
    const double count = static_cast<double>(n * s);
#pragma omp parallel for schedule(static)
    for (index_t ch = 0; ch < c; ++ch) {
        double sum = 0;
        for (index_t i = 0; i < n; ++i) {
            const T* src = x + (i * c + ch) * s;
            for (index_t k = 0; k < s; ++k) sum += src[k];
        }
        const double mu = sum / count;
        // Two passes (sum of squared deviations), not E[x^2]-E[x]^2, which cancels catastrophically.
        double sq = 0;
        for (index_t i = 0; i < n; ++i) {
            const T* src = x + (i * c + ch) * s;
            for (index_t k = 0; k < s; ++k) {
                const double d = src[k] - mu;
                sq += d * d;
            }
        }
        const double variance = sq / count;
        const double inv = 1.0 / std::sqrt(variance + epsilon);
        mean[ch] = static_cast<T>(mu);
        var[ch] = static_cast<T>(variance);
        invstd[ch] = static_cast<T>(inv);
        const T a = static_cast<T>(inv * scale[ch]);
        const T b = static_cast<T>(bias[ch] - mu * inv * scale[ch]);
        for (index_t i = 0; i < n; ++i) {
            const T* src = x + (i * c + ch) * s;
            T* dst = y + (i * c + ch) * s;
            for (index_t k = 0; k < s; ++k) dst[k] = src[k] * a + b;
        }
    }
}

template <typename T>
void batch_norm_forward_inference(const T* x, index_t n, index_t c, index_t s, const T* scale, const T* bias,
                                  const T* mean, const T* var, double epsilon, T* y) {
#pragma omp parallel for schedule(static)
    for (index_t nc = 0; nc < n * c; ++nc) {
        const index_t ch = nc % c;
        const double inv = 1.0 / std::sqrt(static_cast<double>(var[ch]) + epsilon);
        const T a = static_cast<T>(inv * scale[ch]);
        const T b = static_cast<T>(bias[ch] - mean[ch] * inv * scale[ch]);
        const T* src = x + nc * s;
        T* dst = y + nc * s;
        for (index_t k = 0; k < s; ++k) dst[k] = src[k] * a + b;
    }
}

namespace {

// Per-channel sums of dy and dy * (x - mean): the two reductions both backward modes need.
template <typename T>
void reduce_grad(const T* dy, const T* x, index_t n, index_t c, index_t s, index_t ch, double mu, double& sum_dy,
                 double& sum_dy_xc) {
    sum_dy = 0;
    sum_dy_xc = 0;
    for (index_t i = 0; i < n; ++i) {
        const T* g = dy + (i * c + ch) * s;
        const T* src = x + (i * c + ch) * s;
        for (index_t k = 0; k < s; ++k) {
            sum_dy += g[k];
            sum_dy_xc += g[k] * (src[k] - mu);
        }
    }
}

}  // namespace

template <typename T>
void batch_norm_backward_training(const T* dy, const T* x, index_t n, index_t c, index_t s, const T* scale,
                                  const T* mean, const T* invstd, T* dx, T* dscale, T* dbias) {
    const double count = static_cast<double>(n * s);
#pragma omp parallel for schedule(static)
    for (index_t ch = 0; ch < c; ++ch) {
        const double mu = mean[ch], inv = invstd[ch];
        double sum_dy, sum_dy_xc;
        reduce_grad(dy, x, n, c, s, ch, mu, sum_dy, sum_dy_xc);
        dbias[ch] = static_cast<T>(sum_dy);
        dscale[ch] = static_cast<T>(sum_dy_xc * inv);
        // dx = scale*invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), written as dy*k + x*m + q.
        const double k_dy = scale[ch] * inv;
        const double m_x = -k_dy * inv * inv * sum_dy_xc / count;
        const double q = -k_dy * sum_dy / count - m_x * mu;
        for (index_t i = 0; i < n; ++i) {
            const T* g = dy + (i * c + ch) * s;
            const T* src = x + (i * c + ch) * s;
            T* dst = dx + (i * c + ch) * s;
            for (index_t k = 0; k < s; ++k) dst[k] = static_cast<T>(g[k] * k_dy + src[k] * m_x + q);
        }
    }
}

template <typename T>
void batch_norm_backward_inference(const T* dy, const T* x, index_t n, index_t c, index_t s, const T* scale,
                                   const T* mean, const T* var, double epsilon, T* dx, T* dscale, T* dbias) {
#pragma omp parallel for schedule(static)
    for (index_t ch = 0; ch < c; ++ch) {
        const double mu = mean[ch];
        const double inv = 1.0 / std::sqrt(static_cast<double>(var[ch]) + epsilon);
        double sum_dy, sum_dy_xc;
        reduce_grad(dy, x, n, c, s, ch, mu, sum_dy, sum_dy_xc);
        dbias[ch] = static_cast<T>(sum_dy);
        dscale[ch] = static_cast<T>(sum_dy_xc * inv);
        const T k_dy = static_cast<T>(scale[ch] * inv);
        for (index_t i = 0; i < n; ++i) {
            const T* g = dy + (i * c + ch) * s;
            T* dst = dx + (i * c + ch) * s;
            for (index_t k = 0; k < s; ++k) dst[k] = g[k] * k_dy;
        }
    }
}

#define D5_INSTANTIATE_BATCHNORM(T)                                                                          \
    template void batch_norm_forward_training<T>(const T*, index_t, index_t, index_t, const T*, const T*,    \
                                                 double, T*, T*, T*, T*);                                    \
    template void batch_norm_forward_inference<T>(const T*, index_t, index_t, index_t, const T*, const T*,   \
                                                  const T*, const T*, double, T*);                           \
    template void batch_norm_backward_training<T>(const T*, const T*, index_t, index_t, index_t, const T*,   \
                                                  const T*, const T*, T*, T*, T*);                           \
    template void batch_norm_backward_inference<T>(const T*, const T*, index_t, index_t, index_t, const T*,  \
                                                   const T*, const T*, double, T*, T*, T*);

D5_INSTANTIATE_BATCHNORM(float)
D5_INSTANTIATE_BATCHNORM(double)

}  // namespace kernels
}  // namespace d5
