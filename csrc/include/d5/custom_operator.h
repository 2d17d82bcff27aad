// d5/custom_operator.h -- base class of C++ custom operators.
//
// A custom operator derives from d5::CustomOperator and defines, for its element type T,
//   void forward(const T* in..., T* out...);
//   void backward(const T* grad..., const T* fwd_in..., const T* fwd_out..., T* in_grad...);
// (the shape of the seeds' `ipowop`). Shapes are passed to the constructor at run time.
//
// Example:
//   template <typename T>
//   class scale_op : public d5::CustomOperator {
//       d5::index_t n_;
//   public:
//       explicit scale_op(d5::index_t n) : n_(n) {}
//       void forward(const T* x, T* y) { for (d5::index_t i = 0; i < n_; ++i) y[i] = 2 * x[i]; }
//       void backward(const T* gy, const T*, const T*, T* gx) { for (d5::index_t i = 0; i < n_; ++i) gx[i] = 2 * gy[i]; }
//   };
#pragma once

#include "d5/tensor.h"

namespace d5 {

class CustomOperator {
public:
    // Virtual so that operators created by a factory can be deleted through a base pointer.
    virtual ~CustomOperator() = default;
};

}  // namespace d5
