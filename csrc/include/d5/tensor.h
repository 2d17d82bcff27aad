// d5/tensor.h -- the minimal tensor description shared by d5's C++ kernels and custom operators.
//
// Kernels receive raw contiguous (C-order) buffers plus the shape, exactly as numpy hands them over,
// so there is no ownership here: a TensorView never allocates or frees.
//
// Example:
//   float data[6] = {0, 1, 2, 3, 4, 5};
//   d5::TensorView<float> t(data, {2, 3});
//   // t.numel() == 6, t.dim(1) == 3
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace d5 {

using index_t = std::int64_t;

// Non-owning view of a contiguous row-major tensor.
template <typename T>
struct TensorView {
    T* data = nullptr;
    std::vector<index_t> shape;

    TensorView() = default;
    TensorView(T* ptr, std::vector<index_t> dims) : data(ptr), shape(std::move(dims)) {}
    TensorView(T* ptr, std::initializer_list<index_t> dims) : data(ptr), shape(dims) {}

    index_t ndim() const { return static_cast<index_t>(shape.size()); }

    index_t dim(index_t axis) const {
        if (axis < 0) axis += ndim();
        if (axis < 0 || axis >= ndim())
            throw std::out_of_range("d5::TensorView::dim: axis " + std::to_string(axis) + " out of range");
        return shape[static_cast<size_t>(axis)];
    }

    index_t numel() const {
        index_t n = 1;
        for (index_t d : shape) n *= d;
        return n;
    }
};

}  // namespace d5
