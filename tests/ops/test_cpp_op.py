"""C++ custom operators (d5.ops.compile_cpp_op): the seeds' ipowop and operators with several inputs, outputs,
attributes and shape functions, checked against NumPy and finite differences, inside networks on every
framework; and every kind of bad input the issue names."""
from __future__ import annotations

import importlib
import pathlib

import numpy as np
import pytest

import d5
from d5.errors import CompileError, OperatorError, ShapeError, UnsupportedOperatorError
from d5.network.gradient_check import check_network_gradient
from d5.ops import compile_cpp_op, include_dir, test_gradient

ROOT = pathlib.Path(__file__).resolve().parents[2]
IPOWOP = ROOT / "examples" / "ipowop.cpp"
FRAMEWORKS = d5.frameworks.available()

# Two inputs and two outputs, a context constructor reading an attribute, a static shape function:
# y = alpha * x @ w (N x M) and the row sums of x (N x 1).
AFFINE = r"""
template <typename T>
class affine : public d5::CustomOperator {
    d5::index_t n, k, m;
    T alpha;
public:
    explicit affine(const d5::OpContext& ctx)
        : n(ctx.input_shape(0)[0]), k(ctx.input_shape(0)[1]), m(ctx.input_shape(1)[1]),
          alpha(ctx.attribute<T>("alpha", T(1))) {
        if (ctx.input_shape(1)[0] != k) throw std::invalid_argument("affine: x and w do not chain");
    }
    static std::vector<d5::Shape> output_shapes(const d5::OpContext& ctx) {
        return {{ctx.input_shape(0)[0], ctx.input_shape(1)[1]}, {ctx.input_shape(0)[0], 1}};
    }
    void forward(const T* x, const T* w, T* y, T* rowsum) {
        for (d5::index_t i = 0; i < n; ++i) {
            rowsum[i] = 0;
            for (d5::index_t p = 0; p < k; ++p) rowsum[i] += x[i * k + p];
            for (d5::index_t j = 0; j < m; ++j) {
                T acc = 0;
                for (d5::index_t p = 0; p < k; ++p) acc += x[i * k + p] * w[p * m + j];
                y[i * m + j] = alpha * acc;
            }
        }
    }
    void backward(const T* gy, const T* grow, const T* x, const T* w, const T*, const T*, T* gx, T* gw) {
        for (d5::index_t i = 0; i < n; ++i)
            for (d5::index_t p = 0; p < k; ++p) {
                T acc = grow[i];
                for (d5::index_t j = 0; j < m; ++j) acc += alpha * gy[i * m + j] * w[p * m + j];
                gx[i * k + p] = acc;
            }
        for (d5::index_t p = 0; p < k; ++p)
            for (d5::index_t j = 0; j < m; ++j) {
                T acc = 0;
                for (d5::index_t i = 0; i < n; ++i) acc += alpha * x[i * k + p] * gy[i * m + j];
                gw[p * m + j] = acc;
            }
    }
};
D5_REGISTER_OP(affine)
"""

# Element-wise, with failure modes chosen by defines.
FAULTY = r"""
#include <stdexcept>
template <typename T>
struct faulty {
    int n;
    faulty(int n) : n(n) {}
    void forward(const T* x, T* y) {
        if (THROW_IN_FORWARD && x[0] < 0) throw std::domain_error("faulty: negative input");
        for (int i = 0; i < n + OVERRUN; ++i) y[i] = x[i < n ? i : 0];
    }
    void backward(const T* gy, const T*, const T*, T* gx) {
        for (int i = 0; i < n + GRAD_OVERRUN; ++i) gx[i] = gy[i < n ? i : 0];
    }
};
D5_REGISTER_OP(faulty)
"""


def faulty(**defines):
    return compile_cpp_op(FAULTY, "faulty", defines={"THROW_IN_FORWARD": 0, "OVERRUN": 0, "GRAD_OVERRUN": 0, **defines})


@pytest.fixture(autouse=True)
def _examples_on_path(monkeypatch):
    """examples/ipowop.py (the seeds' Python operator and a network for it), importable as a user would."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))


@pytest.fixture(scope="module")
def ipowop():
    return compile_cpp_op(IPOWOP, "ipowop", defines={"DPOWER": 3})


@pytest.fixture(params=FRAMEWORKS)
def framework(request):
    return importlib.import_module(f"d5.frameworks.{request.param}")


# ---------------------------------------------------------------- the seeds' ipowop
def test_the_header_is_installed_with_the_package():
    assert (pathlib.Path(include_dir()) / "d5" / "custom_operator.h").is_file()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ipowop_computes_x_cubed_and_its_gradient(ipowop, dtype):
    x = np.random.default_rng(0).uniform(-2, 2, (3, 7)).astype(dtype)
    y = ipowop.forward([x])
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, x.astype(np.float64) ** 3, rtol=1e-6)
    grad = ipowop.backward([np.ones_like(x)], [x], [y])
    np.testing.assert_allclose(grad, 3 * x.astype(np.float64) ** 2, rtol=1e-6)
    assert (ipowop.num_inputs, ipowop.num_outputs, ipowop.op_type) == (1, 1, "ipowop")


def test_ipowop_passes_the_gradient_check(ipowop):
    assert test_gradient(ipowop, [np.random.default_rng(1).uniform(0.5, 1.5, (4, 5))])


def test_loading_an_operator_keeps_subnormal_numbers(ipowop):
    # -funsafe-math-optimizations at link time would load crtfastmath.o, flushing subnormals process-wide.
    ipowop.forward([np.ones(2, np.float32)])
    assert np.multiply(np.float32(1e-38), np.float32(1e-3)) > 0
    assert np.finfo(np.float32).smallest_subnormal > 0


def test_the_define_is_the_power(ipowop):
    square = compile_cpp_op(IPOWOP, "ipowop", defines={"DPOWER": 2})
    x = np.arange(4.0)
    np.testing.assert_array_equal(square.forward([x]), x ** 2)
    np.testing.assert_array_equal(ipowop.forward([x]), x ** 3)


def call_bridge(framework, op, *arrays):
    """``framework.custom_op(op)`` called as that framework's own code calls it: on its tensors (NumPy for the
    reference, whose custom_op is the operator itself)."""
    bridge = framework.custom_op(op)
    if framework.NAME == "pytorch":
        import torch

        return bridge(*[torch.from_numpy(a) for a in arrays])
    if framework.NAME == "tensorflow":
        import tensorflow as tf

        return bridge(*[tf.constant(a) for a in arrays])
    if framework.NAME == "mxnet":
        from d5.frameworks.mxnet.tensors import as_mx_value

        outputs = bridge.eager([as_mx_value(a) for a in arrays])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    return bridge.forward(list(arrays))


def test_ipowop_runs_in_every_framework_with_autograd(ipowop, framework):
    x = np.random.default_rng(2).uniform(-1, 1, (5, 3)).astype(np.float32)
    if framework.NAME == "pytorch":
        import torch

        module = framework.custom_op(ipowop)
        t = torch.from_numpy(x.copy()).requires_grad_(True)
        y = module(t)
        (y * 2).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), x ** 3, rtol=1e-6)
        np.testing.assert_allclose(t.grad.numpy(), 6 * x ** 2, rtol=1e-6)
        assert torch.autograd.gradcheck(module, (torch.rand(6, dtype=torch.float64, requires_grad=True),))
    elif framework.NAME == "tensorflow":
        import tensorflow as tf

        t = tf.Variable(x)
        with tf.GradientTape() as tape:
            y = framework.custom_op(ipowop)(t)
            total = tf.reduce_sum(y * 2)
        np.testing.assert_allclose(y.numpy(), x ** 3, rtol=1e-6)
        np.testing.assert_allclose(tape.gradient(total, t).numpy(), 6 * x ** 2, rtol=1e-6)
    elif framework.NAME == "mxnet":
        import mxnet as mx

        from d5.frameworks.mxnet.tensors import as_mx_value

        t = as_mx_value(x)
        t.attach_grad()
        with mx.autograd.record():
            (y,) = framework.custom_op(ipowop).eager([t])
            total = (y * 2).sum()
        total.backward()
        np.testing.assert_allclose(y.asnumpy(), x ** 3, rtol=1e-6)
        np.testing.assert_allclose(t.grad.asnumpy(), 6 * x ** 2, rtol=1e-6)
    else:
        assert framework.custom_op(ipowop) is ipowop
    assert "cpp" in framework.CAPABILITIES.custom_ops


def test_the_torch_bridge_hands_cpp_the_tensors_memory(ipowop):
    torch = pytest.importorskip("torch")
    from d5.frameworks.pytorch.custom_op import _CppOpFunction

    x = torch.rand(1000)
    seen = {}
    kernel = ipowop.kernel("float32", [(1000,)])
    original = kernel.forward

    def spy(inputs, outputs):
        seen["inputs"] = list(inputs)
        return original(inputs, outputs)

    kernel.forward = spy
    try:
        y = _CppOpFunction.apply(ipowop, x)[0]
    finally:
        del kernel.forward
    assert seen["inputs"] == [x.data_ptr()]  # the input tensor itself, no copy
    torch.testing.assert_close(y, x ** 3)


@pytest.mark.parametrize("kind", ["cpp", "python"])
def test_ipowop_in_a_network_trains_alike_on_every_framework(ipowop, kind):
    from ipowop import IPowOp, cubic_regression

    losses, weights = {}, {}
    for name in FRAMEWORKS:
        framework = d5.frameworks.get(name)
        op = ipowop.with_attributes() if kind == "cpp" else IPowOp(3)
        net, batch = cubic_regression(op)
        executor = framework.from_model(net)
        optimizer = d5.GradientDescent(executor, 0.05)
        losses[name] = [float(optimizer.step(batch)["loss"]) for _ in range(30)]
        weights[name] = executor.network.fetch_tensors(["w"])[0]
        assert losses[name][-1] < 0.5 * losses[name][0], (name, losses[name])
    for name in FRAMEWORKS:
        np.testing.assert_allclose(losses[name], losses["reference"], rtol=2e-4)
        np.testing.assert_allclose(weights[name], weights["reference"], rtol=2e-4, atol=1e-6)


def test_ipowop_network_gradient_matches_finite_differences(ipowop, framework):
    from ipowop import cubic_regression

    net, batch = cubic_regression(ipowop.with_attributes())
    assert check_network_gradient(net, batch, from_model=framework.from_model)


# ---------------------------------------------------------------- several inputs and outputs, attributes
def test_a_context_operator_with_two_inputs_two_outputs_and_an_attribute():
    op = compile_cpp_op(AFFINE, "affine", attributes={"alpha": 0.5})
    assert (op.num_inputs, op.num_outputs) == (2, 2)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    y, rowsum = op.forward([x, w])
    np.testing.assert_allclose(y, 0.5 * x @ w)
    np.testing.assert_allclose(rowsum, x.sum(axis=1, keepdims=True))
    assert test_gradient(op, [x, w])
    np.testing.assert_allclose(op.with_attributes(alpha=2.0).forward([x, w])[0], 2 * x @ w)


def test_a_multi_output_operator_in_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    from d5.frameworks.pytorch import custom_op

    op = compile_cpp_op(AFFINE, "affine", attributes={"alpha": 1.5})
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(custom_op(op), (x, w))
    y, rowsum = custom_op(op)(x, w)
    torch.testing.assert_close(y, 1.5 * x @ w)
    torch.testing.assert_close(rowsum, x.sum(1, keepdim=True))


def test_a_python_shape_function_overrides_the_default():
    source = r"""
    template <typename T> struct firsts {
        d5::index_t rows, cols;
        firsts(const d5::OpContext& c) : rows(c.input_shape(0)[0]), cols(c.input_shape(0)[1]) {}
        void forward(const T* x, T* y) { for (d5::index_t i = 0; i < rows; ++i) y[i] = x[i * cols]; }
    };
    D5_REGISTER_OP(firsts)
    """
    op = compile_cpp_op(source, "firsts", output_shapes=lambda shapes, attrs: [(shapes[0][0],)])
    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(op.forward([x]), x[:, 0])
    with pytest.raises(UnsupportedOperatorError, match="defines no backward"):
        op.backward([np.ones(4)], [x], [x[:, 0]])


# ---------------------------------------------------------------- bad input
def test_a_syntax_error_shows_the_compiler_message_and_the_numbered_line():
    source = "template <typename T> struct broken {\n    broken(int) {}\n    void forward(const T* x, T* y) { y[0] = x[0] }\n};\nD5_REGISTER_OP(broken)\n"
    with pytest.raises(CompileError) as caught:
        compile_cpp_op(source, "broken")
    message = str(caught.value)
    assert "<string>:3" in message and "expected ';'" in message
    assert ">   3 |     void forward(const T* x, T* y) { y[0] = x[0] }" in message
    assert caught.value.compiler_output and "error" in caught.value.compiler_output


def test_a_syntax_error_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "bad_op.cpp"
    path.write_text("template <typename T> struct bad { bad(int) {} void forward(const T* x, T* y) { undeclared(); } };\n"
                    "D5_REGISTER_OP(bad)\n")
    with pytest.raises(CompileError, match=r"bad_op.cpp:1.*undeclared"):
        compile_cpp_op(path, "bad")


def test_a_missing_registration_macro_is_named():
    with pytest.raises(CompileError, match=r"D5_REGISTER_OP\(classname\)"):
        compile_cpp_op("template <typename T> struct lone { lone(int) {} void forward(const T*, T*) {} };", "lone")


def test_an_unregistered_name_lists_the_registered_ones(ipowop):
    with pytest.raises(CompileError, match="registers no operator 'ipow'.*ipowop"):
        compile_cpp_op(IPOWOP, "ipow", defines={"DPOWER": 3})


def test_a_wrong_signature_fails_at_compile_time_with_d5s_explanation():
    source = "template <typename T> struct odd { odd(int) {} void forward(T* y, const T* x) {} };\nD5_REGISTER_OP(odd)\n"
    with pytest.raises(CompileError, match="forward must take `const T\\*` for each input"):
        compile_cpp_op(source, "odd")


def test_a_node_with_the_wrong_number_of_inputs_or_outputs_is_refused(ipowop):
    net = d5.Network("arity")
    net.add_input("a", (2,))
    net.add_input("b", (2,))
    with pytest.raises(ShapeError, match="takes 1 input"):
        net.add_custom_node(ipowop, ["a", "b"], ["y"])
    with pytest.raises(ShapeError, match="takes 1 output"):
        net.add_custom_node(ipowop, ["a"], ["y", "z"])
    with pytest.raises(ShapeError, match="takes 1 input"):
        ipowop.forward([np.ones(2), np.ones(2)])


def test_a_backward_writing_a_wrong_sized_gradient_is_caught():
    op = faulty(GRAD_OVERRUN=3)
    x = np.ones(5, np.float32)
    y = op.forward([x])
    with pytest.raises(ShapeError, match=r"backward\(\) wrote past the end of gradient of input 0.*\(5,\)"):
        op.backward([np.ones(5, np.float32)], [x], [y])


def test_a_shape_function_disagreeing_with_the_code_is_caught(framework):
    op = compile_cpp_op(FAULTY, "faulty", defines={"THROW_IN_FORWARD": 0, "OVERRUN": 0, "GRAD_OVERRUN": 0},
                        output_shapes=lambda shapes, attrs: [(shapes[0][0] - 2,)])
    x = np.ones(6, np.float32)
    with pytest.raises(ShapeError, match=r"forward\(\) wrote past the end of output 0"):
        call_bridge(framework, op, x)


def test_a_cpp_exception_becomes_a_d5_error_in_every_framework(framework):
    op = faulty(THROW_IN_FORWARD=1)
    x = -np.ones(3, np.float32)
    with pytest.raises(OperatorError, match="faulty .*threw: faulty: negative input"):
        call_bridge(framework, op, x)
    np.testing.assert_array_equal(op.forward([-x]), -x)  # the process and the operator are fine


def test_a_constructor_exception_becomes_a_d5_error():
    op = compile_cpp_op(AFFINE, "affine")
    with pytest.raises(OperatorError, match="constructor.*do not chain"):
        op.forward([np.ones((2, 3)), np.ones((4, 2))])


def test_an_uncompiled_dtype_is_refused_with_the_fix(ipowop):
    with pytest.raises(OperatorError, match="compiled for float32, float64, not int32: pass dtypes"):
        ipowop.forward([np.ones(3, np.int32)])
    integer = compile_cpp_op(IPOWOP, "ipowop", defines={"DPOWER": 3}, dtypes=["int32", "int64"])
    np.testing.assert_array_equal(integer.forward([np.arange(4, dtype=np.int32)]), [0, 1, 8, 27])


def test_a_missing_compiler_is_explained(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-d5")
    with pytest.raises(CompileError, match="no C\\+\\+ compiler found.*apt install g\\+\\+"):
        compile_cpp_op(IPOWOP, "ipowop", defines={"DPOWER": 3})


@pytest.mark.parametrize("source, defines, match", [
    (IPOWOP, {"2BAD": 1}, "not a C identifier"),
    (IPOWOP, {"DPOWER": [3]}, "must be a number"),
    (ROOT / "examples" / "missing.cpp", None, "does not exist"),
    (42, None, "expects a path or C\\+\\+ source code"),
])
def test_bad_arguments_are_compile_errors(source, defines, match):
    with pytest.raises(CompileError, match=match):
        compile_cpp_op(source, "ipowop", defines=defines)


def test_the_example_script_validates_and_trains_both_operators():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(ROOT / "examples" / "ipowop.py")], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("gradient check PASSED") == 2
    assert result.stdout.count("in 30 steps") == 2 * len(FRAMEWORKS)


def test_mixed_input_dtypes_are_refused_alike_in_every_framework(framework):
    op = compile_cpp_op(AFFINE, "affine")
    x, w = np.ones((2, 3), np.float32), np.ones((3, 2), np.float64)
    with pytest.raises(OperatorError, match="same dtype.*float32.*float64"):
        call_bridge(framework, op, x, w)
