// d5/custom_operator.h -- C++ custom operators for d5 (found by d5.ops.include_dir()).
//
// A custom operator is a class template over its element type T, in the shape of the seeds' `ipowop`:
//
//   template <typename T>
//   class scale2 : public d5::CustomOperator {
//       int m_len;
//   public:
//       scale2(int len) : m_len(len) {}                       // element count of input 0, or (const d5::OpContext&)
//       void forward(const T* x, T* y) {                       // const T* per input, then T* per output
//           for (int i = 0; i < m_len; ++i) y[i] = 2 * x[i];
//       }
//       void backward(const T* grad_y,                         // one gradient per output,
//                     const T* x, const T* y,                  // the forward's inputs, the forward's outputs,
//                     T* grad_x) {                             // one gradient per input (written)
//           for (int i = 0; i < m_len; ++i) grad_x[i] = 2 * grad_y[i];
//       }
//   };
//   D5_REGISTER_OP(scale2)
//
// and from Python: `op = d5.ops.compile_cpp_op(source_or_path, "scale2")`, a d5 CustomOp that runs in every
// framework (`d5.frameworks.<name>.custom_op(op)`).
//
// How d5 uses the class:
// - Arity comes from the signatures: forward's leading `const T*` parameters are the inputs, the `T*` that
//   follow are the outputs; backward must take (n_outputs + n_inputs + n_outputs) `const T*` then n_inputs `T*`.
//   An operator without backward is inference-only.
// - Construction: d5 builds one `classname<T>` per node, dtype and input shapes, and calls forward and the
//   matching backward on that same object (so forward may keep what backward needs). When the class is
//   constructible from `const d5::OpContext&`, it gets every input's and output's shape and the node's
//   attributes; otherwise it gets the element count of input 0 (the seeds' `ipowop(int len)` form).
// - Output shapes: a static member `static std::vector<d5::Shape> output_shapes(const d5::OpContext& ctx)`
//   (ctx holds the input shapes and attributes), or a Python function given to compile_cpp_op; by default
//   every output has input 0's shape. All buffers are contiguous, row-major, of exactly those shapes.
// - Types: float32 and float64 (and int32/int64 when compile_cpp_op is asked for them); every input and output
//   has the same element type T.
// - Errors: throw a std::exception (std::invalid_argument, std::runtime_error...) from forward, backward or the
//   constructor and d5 raises d5.errors.OperatorError with its message. Throw outside OpenMP parallel
//   regions: an exception escaping one terminates the process (OpenMP's rule, not d5's).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

// Element types d5 instantiates an operator for; compile_cpp_op(dtypes=...) sets these.
#ifndef D5_OP_FLOAT32
#define D5_OP_FLOAT32 1
#endif
#ifndef D5_OP_FLOAT64
#define D5_OP_FLOAT64 1
#endif
#ifndef D5_OP_INT32
#define D5_OP_INT32 0
#endif
#ifndef D5_OP_INT64
#define D5_OP_INT64 0
#endif

namespace d5 {

using index_t = std::int64_t;
using Shape = std::vector<index_t>;

// Base class of custom operators (optional: d5 needs only the member functions described above).
class CustomOperator {
public:
    virtual ~CustomOperator() = default;
};

inline index_t num_elements(const Shape& shape) {
    index_t n = 1;
    for (index_t d : shape) n *= d;
    return n;
}

// One node attribute, as ONNX allows them: an integer, a float, a string, or a list of integers or floats.
using AttributeValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>>;

// What a non-element-wise operator is constructed from: the node's shapes and attributes.
struct OpContext {
    std::vector<Shape> input_shapes;
    std::vector<Shape> output_shapes;  // empty while output_shapes() runs: it computes them
    std::map<std::string, AttributeValue> attributes;
    std::string dtype;  // "float32", "float64", "int32" or "int64"

    index_t num_inputs() const { return static_cast<index_t>(input_shapes.size()); }
    index_t num_outputs() const { return static_cast<index_t>(output_shapes.size()); }
    const Shape& input_shape(index_t i) const { return pick(input_shapes, i, "input"); }
    const Shape& output_shape(index_t i) const { return pick(output_shapes, i, "output"); }
    index_t input_size(index_t i) const { return num_elements(input_shape(i)); }
    index_t output_size(index_t i) const { return num_elements(output_shape(i)); }
    bool has_attribute(const std::string& name) const { return attributes.count(name) != 0; }

    // attribute<int>("axis"), attribute<std::vector<int64_t>>("pads"), attribute<double>("alpha", 0.5)...
    // Integers convert to any arithmetic type, floats to floating types; a missing attribute or another kind
    // throws std::invalid_argument naming it.
    template <typename V>
    V attribute(const std::string& name) const {
        auto found = attributes.find(name);
        if (found == attributes.end())
            throw std::invalid_argument("the operator needs attribute '" + name + "', which the node does not have");
        return convert<V>(name, found->second);
    }

    template <typename V>
    V attribute(const std::string& name, V fallback) const {
        return has_attribute(name) ? attribute<V>(name) : fallback;
    }

private:
    static const Shape& pick(const std::vector<Shape>& shapes, index_t i, const char* what) {
        if (i < 0 || i >= static_cast<index_t>(shapes.size()))
            throw std::out_of_range(std::string("no ") + what + " " + std::to_string(i) + ": the node has " +
                                    std::to_string(shapes.size()));
        return shapes[static_cast<size_t>(i)];
    }

    template <typename V>
    static V convert(const std::string& name, const AttributeValue& value) {
        if constexpr (std::is_same_v<V, std::string>) {
            if (auto s = std::get_if<std::string>(&value)) return *s;
        } else if constexpr (std::is_arithmetic_v<V>) {
            if (auto i = std::get_if<std::int64_t>(&value)) return static_cast<V>(*i);
            if constexpr (std::is_floating_point_v<V>)
                if (auto f = std::get_if<double>(&value)) return static_cast<V>(*f);
        } else {  // a std::vector of an arithmetic type
            using E = typename V::value_type;
            if (auto is = std::get_if<std::vector<std::int64_t>>(&value)) return V(is->begin(), is->end());
            if constexpr (std::is_floating_point_v<E>)
                if (auto fs = std::get_if<std::vector<double>>(&value)) return V(fs->begin(), fs->end());
        }
        throw std::invalid_argument("attribute '" + name + "' has another type than the operator asks for");
    }
};

namespace detail {

// A compiled operator instance behind one interface: raw buffer pointers in, d5 checked the shapes.
class Kernel {
public:
    virtual ~Kernel() = default;
    virtual void forward(const void* const* inputs, void* const* outputs) = 0;
    virtual void backward(const void* const* output_grads, const void* const* inputs, const void* const* outputs,
                          void* const* input_grads) = 0;
};

// What Python learns about a registered operator.
struct OpInfo {
    std::string name;
    std::size_t num_inputs = 0;
    std::size_t num_outputs = 0;
    bool has_backward = false;
    bool takes_context = false;
    bool has_shape_function = false;
    std::map<std::string, std::function<std::unique_ptr<Kernel>(const OpContext&)>> create;  // by dtype
    std::function<std::vector<Shape>(const OpContext&)> output_shapes;
};

// One registry per compiled library (-fvisibility=hidden keeps libraries apart).
inline std::vector<OpInfo>& registry() {
    static std::vector<OpInfo> operators;
    return operators;
}

template <typename F>
struct member_args;
template <typename C, typename R, typename... A>
struct member_args<R (C::*)(A...)> { using type = std::tuple<A...>; };
template <typename C, typename R, typename... A>
struct member_args<R (C::*)(A...) noexcept> { using type = std::tuple<A...>; };
template <typename C, typename R, typename... A>
struct member_args<R (C::*)(A...) const> { using type = std::tuple<A...>; };
template <typename C, typename R, typename... A>
struct member_args<R (C::*)(A...) const noexcept> { using type = std::tuple<A...>; };

// Counts a parameter list's leading `const T*` and checks that only `T*` follow.
template <typename T, typename Args>
struct pointer_params;
template <typename T, typename... A>
struct pointer_params<T, std::tuple<A...>> {
    static constexpr std::size_t count = sizeof...(A);
    static constexpr std::array<bool, sizeof...(A) + 1> is_const{std::is_same_v<A, const T*>..., false};
    static constexpr std::array<bool, sizeof...(A) + 1> is_mutable{std::is_same_v<A, T*>..., false};
    static constexpr std::size_t leading_const() {
        std::size_t n = 0;
        while (n < count && is_const[n]) ++n;
        return n;
    }
    static constexpr bool well_formed() {
        for (std::size_t i = leading_const(); i < count; ++i)
            if (!is_mutable[i]) return false;
        return true;
    }
};

template <typename Op, typename = void>
struct has_backward : std::false_type {};
template <typename Op>
struct has_backward<Op, std::void_t<decltype(&Op::backward)>> : std::true_type {};

template <typename Op, typename = void>
struct has_shape_function : std::false_type {};
template <typename Op>
struct has_shape_function<Op, std::void_t<decltype(Op::output_shapes(std::declval<const OpContext&>()))>>
    : std::true_type {};

template <typename Op>
constexpr bool takes_context = std::is_constructible_v<Op, const OpContext&>;

template <typename Op, typename T>
struct Signature {
    using forward_params = pointer_params<T, typename member_args<decltype(&Op::forward)>::type>;
    static constexpr std::size_t num_inputs = forward_params::leading_const();
    static constexpr std::size_t num_outputs = forward_params::count - num_inputs;
    static_assert(forward_params::well_formed(),
                  "d5: forward must take `const T*` for each input, then `T*` for each output (T: the element type)");
    static_assert(num_outputs >= 1, "d5: forward must have at least one output parameter `T*`");
};

template <typename Op, typename T>
class KernelOf final : public Kernel {
    using Sig = Signature<Op, T>;
    static constexpr std::size_t I = Sig::num_inputs, O = Sig::num_outputs;

public:
    explicit KernelOf(const OpContext& ctx) : op_(construct(ctx)) {}

    void forward(const void* const* in, void* const* out) override {
        call_forward(in, out, std::make_index_sequence<I>{}, std::make_index_sequence<O>{});
    }

    void backward(const void* const* gy, const void* const* x, const void* const* y, void* const* gx) override {
        if constexpr (has_backward<Op>::value) {
            using params = pointer_params<T, typename member_args<decltype(&Op::backward)>::type>;
            static_assert(params::well_formed() && params::count == 2 * (I + O) && params::leading_const() == 2 * O + I,
                          "d5: backward must take `const T*` for each output gradient, each forward input and each "
                          "forward output, then `T*` for each input gradient");
            call_backward(gy, x, y, gx, std::make_index_sequence<O>{}, std::make_index_sequence<I>{});
        } else {
            throw std::logic_error("the operator defines no backward(): it is inference-only");
        }
    }

private:
    static std::unique_ptr<Op> construct(const OpContext& ctx) {
        if constexpr (takes_context<Op>) {
            return std::make_unique<Op>(ctx);
        } else {
            static_assert(std::is_constructible_v<Op, index_t>,
                          "d5: the operator needs a constructor taking the element count of input 0 (int) or a "
                          "`const d5::OpContext&`");
            return std::make_unique<Op>(static_cast<index_t>(ctx.input_size(0)));
        }
    }

    template <std::size_t... In, std::size_t... Out>
    void call_forward(const void* const* in, void* const* out, std::index_sequence<In...>, std::index_sequence<Out...>) {
        op_->forward(static_cast<const T*>(in[In])..., static_cast<T*>(out[Out])...);
    }

    template <std::size_t... Out, std::size_t... In>
    void call_backward(const void* const* gy, const void* const* x, const void* const* y, void* const* gx,
                       std::index_sequence<Out...>, std::index_sequence<In...>) {
        op_->backward(static_cast<const T*>(gy[Out])..., static_cast<const T*>(x[In])...,
                      static_cast<const T*>(y[Out])..., static_cast<T*>(gx[In])...);
    }

    std::unique_ptr<Op> op_;
};

template <template <typename> class Op>
struct Registrar {
    explicit Registrar(const char* name) {
        OpInfo info;
        info.name = name;
        info.num_inputs = Signature<Op<float>, float>::num_inputs;
        info.num_outputs = Signature<Op<float>, float>::num_outputs;
        info.has_backward = has_backward<Op<float>>::value;
        info.takes_context = takes_context<Op<float>>;
        info.has_shape_function = has_shape_function<Op<float>>::value;
        if constexpr (has_shape_function<Op<float>>::value)
            info.output_shapes = [](const OpContext& ctx) { return Op<float>::output_shapes(ctx); };
#if D5_OP_FLOAT32
        add<float>(info, "float32");
#endif
#if D5_OP_FLOAT64
        add<double>(info, "float64");
#endif
#if D5_OP_INT32
        add<std::int32_t>(info, "int32");
#endif
#if D5_OP_INT64
        add<std::int64_t>(info, "int64");
#endif
        registry().push_back(std::move(info));
    }

    template <typename T>
    static void add(OpInfo& info, const char* dtype) {
        static_assert(Signature<Op<T>, T>::num_inputs == Signature<Op<float>, float>::num_inputs &&
                          Signature<Op<T>, T>::num_outputs == Signature<Op<float>, float>::num_outputs,
                      "d5: the operator must have the same inputs and outputs for every element type");
        info.create[dtype] = [](const OpContext& ctx) -> std::unique_ptr<Kernel> {
            return std::make_unique<KernelOf<Op<T>, T>>(ctx);
        };
    }
};

}  // namespace detail
}  // namespace d5

#define D5_CONCAT_INNER(a, b) a##b
#define D5_CONCAT(a, b) D5_CONCAT_INNER(a, b)

// Registers the class template `classname` (one line after its definition, at namespace scope).
#define D5_REGISTER_OP(classname) \
    static const ::d5::detail::Registrar<classname> D5_CONCAT(d5_registered_op_, __LINE__)(#classname);
