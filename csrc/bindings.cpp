// The one PYBIND11_MODULE of d5: d5._C, the C++ reference kernels.
//
// Every kernel is bound twice (float32 and float64). pybind11 first tries overloads without conversion,
// so an array of exactly one of those dtypes reaches its own instantiation; the Python wrappers in
// d5/frameworks/reference/kernels.py pass contiguous arrays of the right dtype anyway. The GIL is
// released while a kernel runs, so Python threads (data loading) keep going.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "batchnorm.h"
#include "blas.h"
#include "conv2d.h"
#include "conv2d_packed.h"
#include "im2col.h"
#include "pooling.h"
#include "safety.h"

namespace py = pybind11;
using d5::index_t;

namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;
using Pair = std::array<index_t, 2>;
using Quad = std::array<index_t, 4>;

void require_ndim(const py::array& a, py::ssize_t ndim, const char* what) {
    if (a.ndim() != ndim)
        throw std::invalid_argument(std::string(what) + ": expected a " + std::to_string(ndim) + "-D array, got " +
                                    std::to_string(a.ndim()) + "-D");
}

void require_size(const py::array& a, py::ssize_t size, const char* what) {
    if (a.size() != size)
        throw std::invalid_argument(std::string(what) + ": expected " + std::to_string(size) + " elements, got " +
                                    std::to_string(a.size()));
}

// The element count of a caller-supplied shape, refusing negative dimensions and overflow (the kernels
// index the buffer of that shape with plain int64 arithmetic).
template <typename Shape>
index_t checked_shape_size(const Shape& shape, const char* what) {
    index_t size = 1;
    for (auto dim : shape) {
        if (dim < 0)
            throw std::invalid_argument(std::string(what) + ": dimensions must be non-negative, got " +
                                        std::to_string(dim));
        size = d5::kernels::checked_mul(size, static_cast<index_t>(dim), what);
    }
    return size;
}

d5::kernels::Conv2DGeometry conv_geometry(index_t channels, index_t height, index_t width, Pair kernel, Pair strides,
                                          Pair pads_begin, Pair dilations, Pair out) {
    d5::kernels::Conv2DGeometry g;
    g.channels = channels;
    g.height = height;
    g.width = width;
    g.kernel_h = kernel[0];
    g.kernel_w = kernel[1];
    g.stride_h = strides[0];
    g.stride_w = strides[1];
    g.pad_top = pads_begin[0];
    g.pad_left = pads_begin[1];
    g.dilation_h = dilations[0];
    g.dilation_w = dilations[1];
    g.out_h = out[0];
    g.out_w = out[1];
    d5::kernels::validate(g);
    return g;
}

d5::kernels::Pool2DGeometry pool_geometry(index_t height, index_t width, Pair kernel, Pair strides, Quad pads,
                                          Pair dilations, Pair out) {
    d5::kernels::Pool2DGeometry g;
    g.height = height;
    g.width = width;
    g.kernel_h = kernel[0];
    g.kernel_w = kernel[1];
    g.stride_h = strides[0];
    g.stride_w = strides[1];
    // ONNX order: [top, left, bottom, right].
    g.pad_top = pads[0];
    g.pad_left = pads[1];
    g.pad_bottom = pads[2];
    g.pad_right = pads[3];
    g.dilation_h = dilations[0];
    g.dilation_w = dilations[1];
    g.out_h = out[0];
    g.out_w = out[1];
    d5::kernels::validate(g);
    return g;
}

d5::kernels::ColumnLayout column_layout(bool batch_major) {
    return batch_major ? d5::kernels::ColumnLayout::BatchMajor : d5::kernels::ColumnLayout::RowMajor;
}

std::vector<py::ssize_t> column_shape(index_t n, const d5::kernels::Conv2DGeometry& g, bool batch_major) {
    if (batch_major) return {n, g.col_rows(), g.col_cols()};
    return {g.col_rows(), n * g.col_cols()};
}

template <typename T>
Array<T> im2col(Array<T> images, Pair kernel, Pair strides, Pair pads_begin, Pair dilations, Pair out,
                bool batch_major) {
    require_ndim(images, 4, "im2col images (N, C, H, W)");
    const index_t n = images.shape(0);
    auto g = conv_geometry(images.shape(1), images.shape(2), images.shape(3), kernel, strides, pads_begin,
                           dilations, out);
    Array<T> columns(column_shape(n, g, batch_major));
    const T* src = images.data();
    T* dst = columns.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::im2col(src, n, g, column_layout(batch_major), dst);
    }
    return columns;
}

template <typename T>
Array<T> col2im(Array<T> columns, Quad image_shape, Pair kernel, Pair strides, Pair pads_begin, Pair dilations,
                Pair out, bool batch_major) {
    auto g = conv_geometry(image_shape[1], image_shape[2], image_shape[3], kernel, strides, pads_begin, dilations, out);
    checked_shape_size(image_shape, "col2im image_shape");
    const index_t n = image_shape[0];
    const auto expected = column_shape(n, g, batch_major);
    bool ok = columns.ndim() == static_cast<py::ssize_t>(expected.size());
    for (size_t i = 0; ok && i < expected.size(); ++i) ok = columns.shape(i) == expected[i];
    if (!ok) {
        std::string want = "(";
        for (size_t i = 0; i < expected.size(); ++i) want += (i ? ", " : "") + std::to_string(expected[i]);
        throw std::invalid_argument("col2im: columns have the wrong shape; expected " + want + ")");
    }
    Array<T> images({image_shape[0], image_shape[1], image_shape[2], image_shape[3]});
    const T* src = columns.data();
    T* dst = images.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::col2im(src, n, g, column_layout(batch_major), dst);
    }
    return images;
}

void check_conv_weights(const py::array& x, const py::array& w, index_t groups, const d5::kernels::Conv2DGeometry& g) {
    if (groups < 1 || x.shape(1) % groups != 0 || w.shape(0) % groups != 0 || w.shape(1) * groups != x.shape(1) ||
        w.shape(2) != g.kernel_h || w.shape(3) != g.kernel_w)
        throw std::invalid_argument("conv2d: weights (M, C/groups, KH, KW) do not match the input and kernel");
}

template <typename T>
Array<T> conv2d_forward(Array<T> x, Array<T> w, std::optional<Array<T>> bias, Pair strides, Pair pads_begin,
                        Pair dilations, Pair out, index_t groups) {
    require_ndim(x, 4, "conv2d_forward x (N, C, H, W)");
    require_ndim(w, 4, "conv2d_forward w (M, C/groups, KH, KW)");
    auto g = conv_geometry(x.shape(1), x.shape(2), x.shape(3), Pair{w.shape(2), w.shape(3)}, strides, pads_begin,
                           dilations, out);
    check_conv_weights(x, w, groups, g);
    const index_t n = x.shape(0), m = w.shape(0);
    if (bias) require_size(*bias, m, "conv2d_forward bias");
    Array<T> y({n, m, out[0], out[1]});
    const T *px = x.data(), *pw = w.data(), *pb = bias ? bias->data() : nullptr;
    T* py_ = y.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::conv2d_forward(px, pw, pb, n, m, groups, g, py_);
    }
    return y;
}

template <typename T>
std::tuple<std::optional<Array<T>>, Array<T>, std::optional<Array<T>>> conv2d_backward(
        Array<T> dy, Array<T> x, Array<T> w, Pair strides, Pair pads_begin, Pair dilations, index_t groups,
        bool with_bias, bool with_dx) {
    require_ndim(dy, 4, "conv2d_backward dy (N, M, OH, OW)");
    require_ndim(x, 4, "conv2d_backward x (N, C, H, W)");
    require_ndim(w, 4, "conv2d_backward w (M, C/groups, KH, KW)");
    auto g = conv_geometry(x.shape(1), x.shape(2), x.shape(3), Pair{w.shape(2), w.shape(3)}, strides, pads_begin,
                           dilations, Pair{dy.shape(2), dy.shape(3)});
    check_conv_weights(x, w, groups, g);
    const index_t n = x.shape(0), m = w.shape(0);
    if (dy.shape(0) != n || dy.shape(1) != m) throw std::invalid_argument("conv2d_backward: dy must be (N, M, OH, OW)");
    std::optional<Array<T>> dx;
    if (with_dx) dx = Array<T>({x.shape(0), x.shape(1), x.shape(2), x.shape(3)});
    Array<T> dw({w.shape(0), w.shape(1), w.shape(2), w.shape(3)});
    std::optional<Array<T>> dbias;
    if (with_bias) dbias = Array<T>({m});
    const T *pdy = dy.data(), *px = x.data(), *pw = w.data();
    T *pdx = with_dx ? dx->mutable_data() : nullptr, *pdw = dw.mutable_data(), *pdb = with_bias ? dbias->mutable_data() : nullptr;
    {
        py::gil_scoped_release release;
        d5::kernels::conv2d_backward(pdy, px, pw, n, m, groups, g, pdx, pdw, pdb);
    }
    return {dx, dw, dbias};
}

// (m, k) x (k, n) matrices, or stacks of them with one leading batch axis; trans_a / trans_b read an
// operand stored transposed ((k, m) or (n, k)), so a transposed NumPy view needs no copy.
template <typename T>
Array<T> matmul(Array<T> a, Array<T> b, bool trans_a, bool trans_b) {
    if (a.ndim() != b.ndim() || (a.ndim() != 2 && a.ndim() != 3))
        throw std::invalid_argument("matmul: a and b must both be 2-D matrices or 3-D stacks of them, got " +
                                    std::to_string(a.ndim()) + "-D and " + std::to_string(b.ndim()) + "-D");
    const py::ssize_t last = a.ndim() - 1;
    const index_t batch = a.ndim() == 3 ? a.shape(0) : 1;
    if (a.ndim() == 3 && b.shape(0) != batch)
        throw std::invalid_argument("matmul: a and b stack different numbers of matrices");
    const index_t m = trans_a ? a.shape(last) : a.shape(last - 1), k = trans_a ? a.shape(last - 1) : a.shape(last);
    const index_t kb = trans_b ? b.shape(last) : b.shape(last - 1), n = trans_b ? b.shape(last - 1) : b.shape(last);
    if (k != kb)
        throw std::invalid_argument("matmul: inner dimensions differ (" + std::to_string(k) + " and " +
                                    std::to_string(kb) + ")");
    Array<T> c(a.ndim() == 3 ? std::vector<py::ssize_t>{batch, m, n} : std::vector<py::ssize_t>{m, n});
    const T *pa = a.data(), *pb = b.data();
    T* pc = c.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::batched_gemm(trans_a, trans_b, batch, m, n, k, pa, pb, pc);
    }
    return c;
}

// scipy exports each BLAS routine as a PyCapsule named by its C signature; checking that name guards
// against a future scipy whose BLAS takes 64-bit integers, which would be silently corrupted otherwise.
template <typename T>
d5::kernels::FortranGemm<T> gemm_from_capsule(const py::capsule& capsule, const char* what) {
    const char* name = PyCapsule_GetName(capsule.ptr());
    const std::string signature = name ? name : "";
    if (signature.rfind("void (char *, char *, int *, int *, int *,", 0) != 0)
        throw std::invalid_argument(std::string("set_blas: ") + what + " capsule has an unexpected signature '" +
                                    signature + "'; pass scipy.linalg.cython_blas.__pyx_capi__['" + what + "']");
    void* pointer = PyCapsule_GetPointer(capsule.ptr(), name);
    if (pointer == nullptr) throw py::error_already_set();
    return reinterpret_cast<d5::kernels::FortranGemm<T>>(pointer);
}

template <typename T>
std::tuple<Array<T>, Array<std::int64_t>> max_pool2d_forward(Array<T> x, Pair kernel, Pair strides, Quad pads,
                                                             Pair dilations, Pair out) {
    require_ndim(x, 4, "max_pool2d_forward x (N, C, H, W)");
    auto g = pool_geometry(x.shape(2), x.shape(3), kernel, strides, pads, dilations, out);
    const index_t planes = x.shape(0) * x.shape(1);
    Array<T> y({x.shape(0), x.shape(1), out[0], out[1]});
    Array<std::int64_t> indices({x.shape(0), x.shape(1), out[0], out[1]});
    const T* src = x.data();
    T* dst = y.mutable_data();
    std::int64_t* idx = indices.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::max_pool2d_forward(src, planes, g, dst, idx);
    }
    return {y, indices};
}

template <typename T>
Array<T> max_pool2d_backward(Array<T> dy, Array<std::int64_t> indices, Quad input_shape) {
    require_ndim(dy, 4, "max_pool2d_backward dy (N, C, OH, OW)");
    if (indices.ndim() != 4 || indices.size() != dy.size())
        throw std::invalid_argument("max_pool2d_backward: indices must have the shape of dy");
    if (dy.shape(0) != input_shape[0] || dy.shape(1) != input_shape[1])
        throw std::invalid_argument("max_pool2d_backward: dy and input_shape disagree on (N, C)");
    d5::kernels::Pool2DGeometry g;
    g.height = input_shape[2];
    g.width = input_shape[3];
    g.out_h = dy.shape(2);
    g.out_w = dy.shape(3);
    checked_shape_size(input_shape, "max_pool2d_backward input_shape");
    const index_t planes = input_shape[0] * input_shape[1];
    const index_t total = planes * g.height * g.width;
    const std::int64_t* idx = indices.data();
    // Guard the scatter: an out-of-range index from a stale or foreign array would write out of bounds.
    for (py::ssize_t i = 0; i < indices.size(); ++i)
        if (idx[i] < -1 || idx[i] >= total)
            throw std::invalid_argument("max_pool2d_backward: index " + std::to_string(idx[i]) +
                                        " out of range for an input of " + std::to_string(total) + " elements");
    Array<T> dx({input_shape[0], input_shape[1], input_shape[2], input_shape[3]});
    const T* src = dy.data();
    T* dst = dx.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::max_pool2d_backward(src, idx, planes, g, dst);
    }
    return dx;
}

template <typename T>
Array<T> avg_pool2d_forward(Array<T> x, Pair kernel, Pair strides, Quad pads, Pair dilations, Pair out,
                            bool count_include_pad) {
    require_ndim(x, 4, "avg_pool2d_forward x (N, C, H, W)");
    auto g = pool_geometry(x.shape(2), x.shape(3), kernel, strides, pads, dilations, out);
    const index_t planes = x.shape(0) * x.shape(1);
    Array<T> y({x.shape(0), x.shape(1), out[0], out[1]});
    const T* src = x.data();
    T* dst = y.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::avg_pool2d_forward(src, planes, g, count_include_pad, dst);
    }
    return y;
}

template <typename T>
Array<T> avg_pool2d_backward(Array<T> dy, Quad input_shape, Pair kernel, Pair strides, Quad pads, Pair dilations,
                             bool count_include_pad) {
    require_ndim(dy, 4, "avg_pool2d_backward dy (N, C, OH, OW)");
    if (dy.shape(0) != input_shape[0] || dy.shape(1) != input_shape[1])
        throw std::invalid_argument("avg_pool2d_backward: dy and input_shape disagree on (N, C)");
    auto g = pool_geometry(input_shape[2], input_shape[3], kernel, strides, pads, dilations,
                           Pair{dy.shape(2), dy.shape(3)});
    checked_shape_size(input_shape, "avg_pool2d_backward input_shape");
    const index_t planes = input_shape[0] * input_shape[1];
    Array<T> dx({input_shape[0], input_shape[1], input_shape[2], input_shape[3]});
    const T* src = dy.data();
    T* dst = dx.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::avg_pool2d_backward(src, planes, g, count_include_pad, dst);
    }
    return dx;
}

template <typename T>
Array<T> global_avg_pool_forward(Array<T> x) {
    if (x.ndim() < 3) throw std::invalid_argument("global_avg_pool_forward: x must be (N, C, spatial...)");
    const index_t planes = x.shape(0) * x.shape(1);
    index_t size = 1;
    for (py::ssize_t axis = 2; axis < x.ndim(); ++axis) size *= x.shape(axis);
    if (size == 0) throw std::invalid_argument("global_avg_pool_forward: x has an empty spatial extent");
    std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
    for (size_t i = 2; i < shape.size(); ++i) shape[i] = 1;
    Array<T> y(shape);
    const T* src = x.data();
    T* dst = y.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::global_avg_pool_forward(src, planes, size, dst);
    }
    return y;
}

template <typename T>
Array<T> global_avg_pool_backward(Array<T> dy, std::vector<py::ssize_t> input_shape) {
    if (input_shape.size() < 3)
        throw std::invalid_argument("global_avg_pool_backward: input_shape must be (N, C, ...)");
    checked_shape_size(input_shape, "global_avg_pool_backward input_shape");
    const index_t planes = input_shape[0] * input_shape[1];
    index_t size = 1;
    for (size_t i = 2; i < input_shape.size(); ++i) size *= input_shape[i];
    require_size(dy, planes, "global_avg_pool_backward dy");
    Array<T> dx(input_shape);
    const T* src = dy.data();
    T* dst = dx.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::global_avg_pool_backward(src, planes, size, dst);
    }
    return dx;
}

// Batch norm works on x viewed as (N, C, S); the Python side reshapes any (N, C, ...) input.
template <typename T>
std::tuple<Array<T>, Array<T>, Array<T>, Array<T>> batch_norm_forward_training(Array<T> x, Array<T> scale,
                                                                                Array<T> bias, double epsilon) {
    require_ndim(x, 3, "batch_norm_forward_training x (N, C, S)");
    const index_t n = x.shape(0), c = x.shape(1), s = x.shape(2);
    require_size(scale, c, "batch_norm_forward_training scale");
    require_size(bias, c, "batch_norm_forward_training bias");
    Array<T> y({n, c, s}), mean({c}), var({c}), invstd({c});
    const T *px = x.data(), *ps = scale.data(), *pb = bias.data();
    T *py_ = y.mutable_data(), *pm = mean.mutable_data(), *pv = var.mutable_data(), *pi = invstd.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::batch_norm_forward_training(px, n, c, s, ps, pb, epsilon, py_, pm, pv, pi);
    }
    return {y, mean, var, invstd};
}

template <typename T>
Array<T> batch_norm_forward_inference(Array<T> x, Array<T> scale, Array<T> bias, Array<T> mean, Array<T> var,
                                      double epsilon) {
    require_ndim(x, 3, "batch_norm_forward_inference x (N, C, S)");
    const index_t n = x.shape(0), c = x.shape(1), s = x.shape(2);
    require_size(scale, c, "batch_norm_forward_inference scale");
    require_size(bias, c, "batch_norm_forward_inference bias");
    require_size(mean, c, "batch_norm_forward_inference mean");
    require_size(var, c, "batch_norm_forward_inference var");
    Array<T> y({n, c, s});
    const T *px = x.data(), *ps = scale.data(), *pb = bias.data(), *pm = mean.data(), *pv = var.data();
    T* py_ = y.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::batch_norm_forward_inference(px, n, c, s, ps, pb, pm, pv, epsilon, py_);
    }
    return y;
}

template <typename T>
std::tuple<Array<T>, Array<T>, Array<T>> batch_norm_backward_training(Array<T> dy, Array<T> x, Array<T> scale,
                                                                      Array<T> mean, Array<T> invstd) {
    require_ndim(x, 3, "batch_norm_backward_training x (N, C, S)");
    require_size(dy, x.size(), "batch_norm_backward_training dy");
    const index_t n = x.shape(0), c = x.shape(1), s = x.shape(2);
    require_size(scale, c, "batch_norm_backward_training scale");
    require_size(mean, c, "batch_norm_backward_training mean");
    require_size(invstd, c, "batch_norm_backward_training invstd");
    Array<T> dx({n, c, s}), dscale({c}), dbias({c});
    const T *pdy = dy.data(), *px = x.data(), *ps = scale.data(), *pm = mean.data(), *pi = invstd.data();
    T *pdx = dx.mutable_data(), *pds = dscale.mutable_data(), *pdb = dbias.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::batch_norm_backward_training(pdy, px, n, c, s, ps, pm, pi, pdx, pds, pdb);
    }
    return {dx, dscale, dbias};
}

template <typename T>
std::tuple<Array<T>, Array<T>, Array<T>> batch_norm_backward_inference(Array<T> dy, Array<T> x, Array<T> scale,
                                                                       Array<T> mean, Array<T> var, double epsilon) {
    require_ndim(x, 3, "batch_norm_backward_inference x (N, C, S)");
    require_size(dy, x.size(), "batch_norm_backward_inference dy");
    const index_t n = x.shape(0), c = x.shape(1), s = x.shape(2);
    require_size(scale, c, "batch_norm_backward_inference scale");
    require_size(mean, c, "batch_norm_backward_inference mean");
    require_size(var, c, "batch_norm_backward_inference var");
    Array<T> dx({n, c, s}), dscale({c}), dbias({c});
    const T *pdy = dy.data(), *px = x.data(), *ps = scale.data(), *pm = mean.data(), *pv = var.data();
    T *pdx = dx.mutable_data(), *pds = dscale.mutable_data(), *pdb = dbias.mutable_data();
    {
        py::gil_scoped_release release;
        d5::kernels::batch_norm_backward_inference(pdy, px, n, c, s, ps, pm, pv, epsilon, pdx, pds, pdb);
    }
    return {dx, dscale, dbias};
}

template <typename T>
void bind_all(py::module_& m) {
    using namespace pybind11::literals;
    m.def("im2col", &im2col<T>, "images"_a, "kernel"_a, "strides"_a, "pads_begin"_a, "dilations"_a, "out"_a,
          "batch_major"_a = true,
          "(N, C, H, W) -> convolution columns, (N, C*KH*KW, OH*OW) if batch_major else (C*KH*KW, N*OH*OW).");
    m.def("col2im", &col2im<T>, "columns"_a, "image_shape"_a, "kernel"_a, "strides"_a, "pads_begin"_a,
          "dilations"_a, "out"_a, "batch_major"_a = true,
          "Adjoint of im2col: columns (either layout) -> (N, C, H, W), summing overlapping taps.");
    m.def("matmul", &matmul<T>, "a"_a, "b"_a, "trans_a"_a = false, "trans_b"_a = false,
          "op(a) @ op(b) for 2-D matrices or 3-D stacks, on d5's OpenMP threads with single-threaded BLAS "
          "(the same bits at any thread count).");
    m.def("conv2d_forward", &conv2d_forward<T>, "x"_a, "w"_a, "bias"_a, "strides"_a, "pads_begin"_a, "dilations"_a,
          "out"_a, "groups"_a, "2-D convolution (im2col + BLAS GEMM per image); bias may be None.");
    m.def("conv2d_backward", &conv2d_backward<T>, "dy"_a, "x"_a, "w"_a, "strides"_a, "pads_begin"_a,
          "dilations"_a, "groups"_a, "with_bias"_a, "with_dx"_a = true,
          "-> (dx or None, dw, dbias or None); with_dx=False skips the input gradient.");
    m.def("max_pool2d_forward", &max_pool2d_forward<T>, "x"_a, "kernel"_a, "strides"_a, "pads"_a, "dilations"_a,
          "out"_a, "2-D max pooling; returns (y, flat int64 argmax indices into x).");
    m.def("max_pool2d_backward", &max_pool2d_backward<T>, "dy"_a, "indices"_a, "input_shape"_a,
          "Scatter dy to the argmax positions.");
    m.def("avg_pool2d_forward", &avg_pool2d_forward<T>, "x"_a, "kernel"_a, "strides"_a, "pads"_a, "dilations"_a,
          "out"_a, "count_include_pad"_a, "2-D average pooling.");
    m.def("avg_pool2d_backward", &avg_pool2d_backward<T>, "dy"_a, "input_shape"_a, "kernel"_a, "strides"_a,
          "pads"_a, "dilations"_a, "count_include_pad"_a, "Gradient of 2-D average pooling.");
    m.def("global_avg_pool_forward", &global_avg_pool_forward<T>, "x"_a, "Mean over all spatial axes (kept as 1s).");
    m.def("global_avg_pool_backward", &global_avg_pool_backward<T>, "dy"_a, "input_shape"_a,
          "Gradient of global average pooling.");
    m.def("batch_norm_forward_training", &batch_norm_forward_training<T>, "x"_a, "scale"_a, "bias"_a, "epsilon"_a,
          "x (N, C, S) -> (y, batch mean, biased batch var, invstd).");
    m.def("batch_norm_forward_inference", &batch_norm_forward_inference<T>, "x"_a, "scale"_a, "bias"_a, "mean"_a,
          "var"_a, "epsilon"_a, "x (N, C, S) normalized with the given statistics.");
    m.def("batch_norm_backward_training", &batch_norm_backward_training<T>, "dy"_a, "x"_a, "scale"_a, "mean"_a,
          "invstd"_a, "-> (dx, dscale, dbias) for batch statistics.");
    m.def("batch_norm_backward_inference", &batch_norm_backward_inference<T>, "dy"_a, "x"_a, "scale"_a, "mean"_a,
          "var"_a, "epsilon"_a, "-> (dx, dscale, dbias) for fixed statistics.");
}

// Sets the Python error to d5.errors.<name>(message). d5.errors is pure Python and always importable
// where d5._C is (it lives in the same package).
void set_d5_error(const char* name, const std::string& message) {
    py::object error_class = py::module_::import("d5.errors").attr(name);
    PyErr_SetString(error_class.ptr(), message.c_str());
}

// C++ exceptions from the kernels become d5 errors: bad geometry or sizes (std::invalid_argument,
// std::length_error from the overflow checks, std::overflow_error from the 32-bit BLAS interface) a
// ShapeError (a ValueError), a failed allocation an InsufficientMemoryError (a MemoryError). The Python
// wrappers validate first, so these fire on direct misuse of d5._C or on memory exhaustion.
void translate_kernel_exception(std::exception_ptr error) {
    try {
        if (error) std::rethrow_exception(error);
    } catch (const d5::kernels::OutOfMemory& e) {
        set_d5_error("InsufficientMemoryError", std::string("d5._C: ") + e.what());
    } catch (const std::bad_alloc&) {
        set_d5_error("InsufficientMemoryError",
                     "d5._C: a kernel could not allocate its working memory; use a smaller batch or input");
    } catch (const std::logic_error& e) {
        set_d5_error("ShapeError", std::string("d5._C: ") + e.what());
    } catch (const std::overflow_error& e) {
        set_d5_error("ShapeError", std::string("d5._C: ") + e.what());
    }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    using namespace pybind11::literals;
    m.doc() = "d5's C++ reference kernels (float32 and float64, OpenMP): im2col/col2im, pooling, batch norm.";
    // Local: a global translator would also turn the std::logic_errors of every other pybind11 module in the
    // process (torch's, compiled custom operators') into "d5._C: ..." ShapeErrors.
    py::register_local_exception_translator(&translate_kernel_exception);
    bind_all<float>(m);
    bind_all<double>(m);
    m.def("set_blas", [](py::capsule sgemm, py::capsule dgemm) {
        d5::kernels::set_blas(gemm_from_capsule<float>(sgemm, "sgemm"), gemm_from_capsule<double>(dgemm, "dgemm"));
    }, "sgemm"_a, "dgemm"_a,
       "Register BLAS ?gemm (scipy.linalg.cython_blas.__pyx_capi__ capsules) for conv2d_forward/backward.");
    m.def("blas_ready", &d5::kernels::blas_ready, "True once set_blas has been called.");
    m.def("packed_conv_available", &d5::kernels::packed_conv_available,
          "True when float32 conv2d_forward can use d5's packed AVX-512 kernel on this CPU.");
    m.def("set_packed_conv", &d5::kernels::set_packed_conv_enabled, "enabled"_a,
          "Allow (True, the default) or forbid float32 conv2d_forward's packed AVX-512 kernel; returns the "
          "previous setting. Forbidden, it uses im2col + BLAS like float64.");
    m.def("find_blas_threading", [](const std::string& library) { return d5::kernels::find_blas_threading(library.c_str()); },
          "library"_a,
          "Find OpenBLAS's thread-count functions in a loaded library or its dependencies (pass "
          "scipy.linalg.cython_blas.__file__), so that the kernels run BLAS single-threaded inside their "
          "OpenMP loops. False when the BLAS is not OpenBLAS.");
#ifdef _OPENMP
    m.attr("openmp") = true;
#else
    m.attr("openmp") = false;
#endif
    m.def("max_threads", []() {
#ifdef _OPENMP
        return omp_get_max_threads();
#else
        return 1;
#endif
    }, "Number of OpenMP threads the kernels use (OMP_NUM_THREADS).");
    m.def("set_num_threads", [](int threads) {
        if (threads < 1)
            throw std::invalid_argument("set_num_threads: need at least 1 thread, got " + std::to_string(threads));
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
    }, "threads"_a, "Set the number of OpenMP threads the kernels use (for thread-scaling benchmarks).");
}
