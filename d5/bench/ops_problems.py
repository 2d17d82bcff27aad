"""What the operator benchmark (``d5 bench ops``, :mod:`d5.bench.ops`) measures: DeepBench-style GEMM, convolution
and element-wise problems, each with its inputs, its FLOP and byte counts and the ONNX operator that computes it
(:class:`NativeSpec`); the implementations of each problem on each framework (the framework's own kernel for that
operator and the seeds' custom operators, bound to the inputs by the framework's ``runtime.py``); and the oracle
every implementation is checked against (the :data:`ORACLE` framework's operator).

Sizes come from Baidu's DeepBench training sets (https://github.com/baidu-research/DeepBench,
``code/kernels/gemm_problems.h`` and ``conv_problems.h``), a subset chosen to run in minutes on 2 cores; each
problem's ``source`` names the DeepBench tuple it took and says where the batch was shrunk.

FLOP formulas (float32; backward = gradients with respect to every input given the output gradient):

- GEMM ``Y = op(A) @ op(B)``, op(A) M x K, op(B) K x N: forward ``2MNK``; backward ``4MNK`` (dA and dB, one
  GEMM each).
- Convolution ``N x C x H x W`` input, ``K x C x R x S`` weights, ``Ho x Wo`` output: forward
  ``2 N K C R S Ho Wo``; backward twice that (the input and the weight gradient).
- Element-wise on ``n`` elements: ``x ** 3`` forward ``2n`` (two multiplications), backward ``3n``
  (``g * 3 * x**2``); Relu forward ``n`` (a comparison), backward ``n`` (a selection).

Bytes moved are the least any implementation must move: every input read once and every output written once
(4 bytes per float32 element); they give the arithmetic intensity (FLOP/byte) of the roofline plot.

>>> gemm = GemmProblem("demo", m=2, n=3, k=4)
>>> gemm.flops("forward"), gemm.flops("backward"), gemm.bytes_moved("forward")
(48, 96, 104)
>>> conv = ConvProblem("demo", w=4, h=4, c=3, n=1, k=2, r=3, s=3, pad_h=1, pad_w=1)
>>> conv.output_hw, conv.flops("forward")
((4, 4), 1728)
"""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from d5.errors import D5Error

#: The two passes every problem is timed in.
PASSES = ("forward", "backward")
#: The framework whose operators are the oracle every implementation is checked against.
ORACLE = "reference"
_FLOAT32_BYTES = 4


@dataclasses.dataclass(frozen=True)
class NativeSpec:
    """The ONNX operator that computes a problem: ``op_type`` with ``attributes``, called on the problem's inputs
    followed by ``constants`` (inputs that take no gradient). Each framework's own kernel for it is the
    problem's ``native`` row (``runtime.bind_native``).

    >>> GemmProblem("g", 2, 2, 2, trans_a=True).native()
    NativeSpec(op_type='Gemm', attributes={'transA': 1, 'transB': 0}, constants=())
    """

    op_type: str
    attributes: dict[str, Any] = dataclasses.field(default_factory=dict)
    constants: tuple[Any, ...] = ()


def _check_pass(pass_name: str) -> str:
    if pass_name not in PASSES:
        raise D5Error(f"unknown pass {pass_name!r}; the operator benchmark times {list(PASSES)}")
    return pass_name


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """``Y (M x N) = op(A) @ op(B)`` in float32, DeepBench's (M, N, K, a_t, b_t): with ``trans_a`` A is stored
    K x M and read transposed (likewise B, stored N x K).

    >>> p = GemmProblem("g", m=4, n=2, k=3, trans_a=True)
    >>> [a.shape for a in p.make_inputs(np.random.default_rng(0))]
    [(3, 4), (3, 2)]
    """

    name: str
    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False
    source: str = ""
    kind = "gemm"

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """A and B, standard normal float32, in their stored (possibly transposed) layout."""
        a_shape = (self.k, self.m) if self.trans_a else (self.m, self.k)
        b_shape = (self.n, self.k) if self.trans_b else (self.k, self.n)
        return [rng.standard_normal(a_shape, dtype=np.float32), rng.standard_normal(b_shape, dtype=np.float32)]

    def flops(self, pass_name: str) -> int:
        """``2MNK`` forward, twice that backward (see the module docstring)."""
        forward = 2 * self.m * self.n * self.k
        return forward if _check_pass(pass_name) == "forward" else 2 * forward

    def bytes_moved(self, pass_name: str) -> int:
        """Forward reads A, B and writes Y; backward reads A, B, dY and writes dA, dB."""
        a, b, y = self.m * self.k, self.k * self.n, self.m * self.n
        elements = a + b + y if _check_pass(pass_name) == "forward" else 2 * (a + b) + y
        return _FLOAT32_BYTES * elements

    def native(self) -> NativeSpec:
        """ONNX Gemm with this problem's transposes."""
        return NativeSpec("Gemm", {"transA": int(self.trans_a), "transB": int(self.trans_b)})

    def describe(self) -> str:
        return (f"M={self.m} N={self.n} K={self.k} "
                f"{'T' if self.trans_a else 'N'}{'T' if self.trans_b else 'N'}")


@dataclasses.dataclass(frozen=True)
class ConvProblem:
    """A 2-D convolution in DeepBench's terms (W, H, C, N, K, S, R, pad_w, pad_h, stride_w, stride_h): input
    N x C x H x W, K filters of C x R x S (R rows, S columns), no bias, no dilation, NCHW float32.

    >>> ConvProblem("c", w=8, h=6, c=2, n=1, k=4, r=3, s=3, stride_h=2, stride_w=2).output_hw
    (2, 3)
    """

    name: str
    w: int
    h: int
    c: int
    n: int
    k: int
    r: int
    s: int
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    source: str = ""
    kind = "conv"

    @property
    def output_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad_h - self.r) // self.stride_h + 1,
                (self.w + 2 * self.pad_w - self.s) // self.stride_w + 1)

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """X and W, standard normal float32 (W scaled by 1/sqrt(C R S) so outputs stay near unit size)."""
        x = rng.standard_normal((self.n, self.c, self.h, self.w), dtype=np.float32)
        w = rng.standard_normal((self.k, self.c, self.r, self.s), dtype=np.float32)
        w *= np.float32(1.0 / np.sqrt(self.c * self.r * self.s))
        return [x, w]

    def flops(self, pass_name: str) -> int:
        """``2 N K C R S Ho Wo`` forward, twice that backward (see the module docstring)."""
        ho, wo = self.output_hw
        forward = 2 * self.n * self.k * self.c * self.r * self.s * ho * wo
        return forward if _check_pass(pass_name) == "forward" else 2 * forward

    def bytes_moved(self, pass_name: str) -> int:
        """Forward reads X, W and writes Y; backward reads X, W, dY and writes dX, dW."""
        ho, wo = self.output_hw
        x, w, y = self.n * self.c * self.h * self.w, self.k * self.c * self.r * self.s, self.n * self.k * ho * wo
        elements = x + w + y if _check_pass(pass_name) == "forward" else 2 * (x + w) + y
        return _FLOAT32_BYTES * elements

    def native(self) -> NativeSpec:
        """ONNX Conv with this problem's padding and strides."""
        return NativeSpec("Conv", {"pads": [self.pad_h, self.pad_w, self.pad_h, self.pad_w],
                                   "strides": [self.stride_h, self.stride_w], "kernel_shape": [self.r, self.s]})

    def describe(self) -> str:
        return (f"W={self.w} H={self.h} C={self.c} N={self.n} K={self.k} {self.r}x{self.s} "
                f"pad={self.pad_h} stride={self.stride_h}")


#: Element-wise operations: ONNX-free name -> (forward FLOPs per element, backward FLOPs per element).
ELEMENTWISE_FLOPS = {"ipow3": (2, 3), "relu": (1, 1)}


@dataclasses.dataclass(frozen=True)
class ElementwiseProblem:
    """An element-wise operation on ``size`` float32 elements: ``"ipow3"`` (``x ** 3``, the seeds' ``ipowop``)
    or ``"relu"``.

    >>> ElementwiseProblem("e", "ipow3", 1000).bytes_moved("backward")
    12000
    """

    name: str
    operation: str
    size: int
    source: str = ""
    kind = "elementwise"

    def __post_init__(self) -> None:
        if self.operation not in ELEMENTWISE_FLOPS:
            raise D5Error(f"unknown element-wise operation {self.operation!r}; choose from {sorted(ELEMENTWISE_FLOPS)}")

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """X, standard normal float32."""
        return [rng.standard_normal(self.size, dtype=np.float32)]

    def flops(self, pass_name: str) -> int:
        """Per element: ``x**3`` 2 forward, 3 backward; Relu 1 and 1 (see the module docstring)."""
        forward, backward = ELEMENTWISE_FLOPS[self.operation]
        return self.size * (forward if _check_pass(pass_name) == "forward" else backward)

    def bytes_moved(self, pass_name: str) -> int:
        """Forward reads X and writes Y; backward reads dY and X and writes dX."""
        return _FLOAT32_BYTES * self.size * (2 if _check_pass(pass_name) == "forward" else 3)

    def native(self) -> NativeSpec:
        """ONNX Relu, or ``x ** 3`` as ONNX Pow with the constant integer exponent 3 (no exponent gradient)."""
        return NativeSpec("Relu") if self.operation == "relu" else NativeSpec("Pow", constants=(np.int64(3),))

    def describe(self) -> str:
        return f"{'x**3' if self.operation == 'ipow3' else 'Relu'} on {self.size:,} elements"


Problem = GemmProblem | ConvProblem | ElementwiseProblem

_GEMM_FILE = "DeepBench gemm_problems.h training_set"
_CONV_FILE = "DeepBench conv_problems.h training_set"


def deepbench_subset() -> list[Problem]:
    """The full benchmark's problems: 4 GEMMs, 4 convolutions and 2 element-wise operations.

    GEMMs: the speech models' hidden-layer products at mini-batch 64 and 128 (plain and with A transposed, the
    backward-pass layout) and one wider N (700). Convolutions: ResNet's 3x3 and 1x1 layers, VGG's deepest
    3x3 layer and GoogLeNet's 5x5 Inception branch (its batch shrunk from 16 to 8 so that the whole benchmark
    runs in a few minutes on 2 cores).

    >>> [p.name for p in deepbench_subset()][:2]
    ['gemm_1760x128x1760_nn', 'gemm_2560x64x2560_nn']
    """
    return [
        GemmProblem("gemm_1760x128x1760_nn", 1760, 128, 1760, source=f"{_GEMM_FILE} (1760, 128, 1760, N, N)"),
        GemmProblem("gemm_2560x64x2560_nn", 2560, 64, 2560, source=f"{_GEMM_FILE} (2560, 64, 2560, N, N)"),
        GemmProblem("gemm_4096x128x4096_tn", 4096, 128, 4096, trans_a=True,
                    source=f"{_GEMM_FILE} (4096, 128, 4096, T, N)"),
        GemmProblem("gemm_1024x700x512_nn", 1024, 700, 512, source=f"{_GEMM_FILE} (1024, 700, 512, N, N)"),
        ConvProblem("conv_resnet_3x3_56x56x64", w=56, h=56, c=64, n=8, k=64, r=3, s=3, pad_h=1, pad_w=1,
                    source=f"{_CONV_FILE} (56, 56, 64, 8, 64, 3, 3, 1, 1, 1, 1), ResNet"),
        ConvProblem("conv_vgg_3x3_14x14x512", w=14, h=14, c=512, n=8, k=512, r=3, s=3, pad_h=1, pad_w=1,
                    source=f"{_CONV_FILE} (14, 14, 512, 8, 512, 3, 3, 1, 1, 1, 1), VGG"),
        ConvProblem("conv_resnet_1x1_28x28x512", w=28, h=28, c=512, n=8, k=128, r=1, s=1,
                    source=f"{_CONV_FILE} (28, 28, 512, 8, 128, 1, 1, 0, 0, 1, 1), ResNet bottleneck"),
        ConvProblem("conv_inception_5x5_28x28x192", w=28, h=28, c=192, n=8, k=32, r=5, s=5, pad_h=2, pad_w=2,
                    source=f"{_CONV_FILE} (28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1), GoogLeNet Inception; "
                           "batch shrunk from 16 to 8"),
        ElementwiseProblem("ipow3_1M", "ipow3", 1 << 20, source="the seeds' ipowop (x ** 3) on 1M float32"),
        ElementwiseProblem("relu_1M", "relu", 1 << 20, source="Relu on 1M float32"),
    ]


def quick_subset() -> list[Problem]:
    """Tiny problems of every kind (seconds in all), for smoke tests and ``d5 bench ops --quick``.

    >>> len(quick_subset())
    5
    """
    return [
        GemmProblem("gemm_96x32x80_nn", 96, 32, 80, source="tiny, shaped like DeepBench's speech GEMMs"),
        GemmProblem("gemm_64x16x48_tn", 64, 16, 48, trans_a=True, source="tiny, A transposed"),
        ConvProblem("conv_3x3_12x12x8", w=12, h=12, c=8, n=2, k=16, r=3, s=3, pad_h=1, pad_w=1,
                    source="tiny ResNet-like 3x3"),
        ElementwiseProblem("ipow3_4k", "ipow3", 4096, source="the seeds' ipowop (x ** 3), tiny"),
        ElementwiseProblem("relu_4k", "relu", 4096, source="Relu, tiny"),
    ]


# -- the implementations of each problem, and the oracle they are checked against ---------------------------

@dataclasses.dataclass
class BoundPasses:
    """One implementation bound to one problem's inputs: callables for the two timed passes, and the results
    of a first run of each (for the check against the reference).

    >>> BoundPasses(forward=lambda: "y", backward=lambda: "dx", output=np.zeros(1), input_grads=[]).forward()
    'y'
    """

    forward: Callable[[], object]
    backward: Callable[[], object]
    output: np.ndarray
    input_grads: list[np.ndarray]


@dataclasses.dataclass(frozen=True)
class Implementation:
    """An implementation of a problem on a framework; ``bind(inputs, output_grad) -> BoundPasses``.

    >>> from d5.frameworks.reference import native_op
    >>> relu = Implementation("reference", "native", bind_custom_op(native_op("Relu")))
    >>> relu.bind([np.array([-1.0, 3.0])], np.ones(2)).output.tolist()
    [0.0, 3.0]
    """

    framework: str
    name: str
    bind: Callable[[list[np.ndarray], np.ndarray], BoundPasses]  # a Binder


#: Binds an implementation to a problem's inputs and output gradient.
Binder = Callable[[list[np.ndarray], np.ndarray], BoundPasses]


def bind_custom_op(op, constants: Sequence[Any] = ()) -> Binder:
    """Binder for a d5 CustomOp run as it is, on NumPy arrays: ``op.forward([inputs..., constants...])`` and
    ``op.backward([dY], [inputs..., constants...], [Y])``, of whose gradients those of the inputs are kept. Each
    framework binds its own operators in its ``runtime.py`` (``bind_native``, ``bind_custom_op``).

    >>> from d5.frameworks.reference import native_op
    >>> passes = bind_custom_op(native_op("Relu"))([np.array([-1.0, 2.0])], np.ones(2))
    >>> passes.output.tolist(), passes.input_grads[0].tolist()
    ([0.0, 2.0], [0.0, 1.0])
    """
    from d5.ops.operator import as_tuple

    def bind(inputs: list[np.ndarray], output_grad: np.ndarray) -> BoundPasses:
        arguments = [*inputs, *(np.asarray(c) for c in constants)]
        output = np.asarray(op.forward(arguments))
        grads = [output_grad]
        outputs = [output]

        def backward():
            return op.backward(grads, arguments, outputs)

        return BoundPasses(lambda: op.forward(arguments), backward, output,
                           [np.asarray(g) for g in as_tuple(backward())[:len(inputs)]])
    return bind


# -- the implementations of each problem ---------------------------------------------------------------------

def _repository_file(relative: str) -> Path:
    return Path(__file__).resolve().parents[2] / relative


def load_ipowop_python():
    """The seeds' Python ``IPowOp`` class from ``examples/ipowop.py`` (a source-tree file, not a module of d5).

    >>> load_ipowop_python()(3).forward([np.array([2.0])])
    array([8.])
    """
    path = _repository_file("examples/ipowop.py")
    if not path.is_file():
        raise D5Error(f"the seeds' Python IPowOp is not at {path}; run the benchmark from a d5 source tree")
    spec = importlib.util.spec_from_file_location("d5_examples_ipowop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.IPowOp


def load_ipowop_cpp():
    """The seeds' C++ ``ipowop`` compiled with ``DPOWER=3``: ``(op, None)``, or ``(None, reason)`` when
    ``compile_cpp_op`` is missing or fails (the benchmark then skips the C++ rows and says why).

    >>> op, why = load_ipowop_cpp()
    >>> op.forward([np.array([2.0])]).tolist() if op is not None else why.startswith(("compile_cpp_op", "examples"))
    [8.0]
    """
    try:
        try:
            from d5.ops import compile_cpp_op
        except ImportError:
            from d5.ops.cpp_build import compile_cpp_op
        path = _repository_file("examples/ipowop.cpp")
        if not path.is_file():
            return None, f"examples/ipowop.cpp is not at {path} (not a d5 source tree)"
        return compile_cpp_op(str(path), "ipowop", defines={"DPOWER": 3}), None
    except Exception as err:  # never fail the whole run for the C++ rows: record why they were skipped
        first_line = (str(err).strip().splitlines() or [""])[0]
        return None, f"compile_cpp_op unavailable or failed: {type(err).__name__}: {first_line}"


@dataclasses.dataclass
class Skipped:
    """An implementation that was not run, and why.

    >>> Skipped("reference", "ipowop (C++)", "no C++ compiler").reason
    'no C++ compiler'
    """

    framework: str
    name: str
    reason: str


class ImplementationCatalog:
    """Which implementations each problem has on the chosen frameworks, each bound by the framework's
    ``runtime.py``: on every framework, its own kernel for the problem's ONNX operator (``native``), and for
    ``x ** 3`` the seeds' Python ``IPowOp`` and C++ ``ipowop`` through its ``custom_op`` (skipped, with the
    reason, where the framework runs no custom operators of that kind or the C++ one cannot be compiled). The
    C++ ``ipowop`` is compiled on first need (once per run). Subclass it (override :meth:`for_problem`) to
    benchmark your own.

    >>> [i.name for i in ImplementationCatalog(("reference",)).for_problem(GemmProblem("g", 2, 2, 2))]
    ['native']
    """

    def __init__(self, frameworks: Sequence[str]):
        self.frameworks = tuple(frameworks)
        self._cpp: tuple[Any, str | None] | None = None

    def _cpp_op(self):
        if self._cpp is None:
            self._cpp = load_ipowop_cpp()
        return self._cpp

    def for_problem(self, problem: Problem) -> list[Implementation | Skipped]:
        import d5.frameworks

        found: list[Implementation | Skipped] = []
        native = problem.native()
        ipow = problem.kind == "elementwise" and problem.operation == "ipow3"
        for framework in self.frameworks:
            runtime = d5.frameworks.runtime(framework)
            found.append(Implementation(framework, "native",
                                        runtime.bind_native(native.op_type, native.attributes, native.constants)))
            if ipow:
                found.append(self._custom_implementation(framework, runtime, "python", "IPowOp (Python)",
                                                         lambda: (load_ipowop_python()(3), None)))
                found.append(self._custom_implementation(framework, runtime, "cpp", "ipowop (C++)", self._cpp_op))
        return found

    @staticmethod
    def _custom_implementation(framework: str, runtime, kind: str, name: str,
                               load: Callable[[], tuple[Any, str | None]]) -> Implementation | Skipped:
        import d5.frameworks

        capabilities = getattr(d5.frameworks.get(framework), "CAPABILITIES", None)
        if capabilities is not None and kind not in capabilities.custom_ops:
            return Skipped(framework, name, f"{framework} runs no {kind} custom operators")
        op, reason = load()
        if op is None:
            return Skipped(framework, name, reason)
        return Implementation(framework, name, runtime.bind_custom_op(op))


def oracle_op(problem: Problem):
    """The :data:`ORACLE` framework's operator for ``problem`` (:meth:`native`), with its constants: ``(op,
    constants)``.

    >>> op, constants = oracle_op(ElementwiseProblem("e", "relu", 2))
    >>> op.forward([np.array([-1.0, 2.0]), *constants]).tolist()
    [0.0, 2.0]
    """
    import d5.frameworks

    spec = problem.native()
    return d5.frameworks.get(ORACLE).native_op(spec.op_type, **spec.attributes), spec.constants


def expected_results(problem: Problem, inputs: list[np.ndarray], rng: np.random.Generator):
    """The :data:`ORACLE` framework's output, an output gradient (standard normal) and its input gradients.
    ``x ** 3`` is checked against NumPy's ``x ** 3`` and ``3 x**2 dY`` instead, written from the definition.

    >>> rng = np.random.default_rng(0)
    >>> problem = GemmProblem("g", m=2, n=3, k=4)
    >>> output, output_grad, grads = expected_results(problem, problem.make_inputs(rng), rng)
    >>> output.shape, output_grad.shape, [g.shape for g in grads]
    ((2, 3), (2, 3), [(2, 4), (4, 3)])
    """
    if problem.kind == "elementwise" and problem.operation == "ipow3":
        x = inputs[0]
        output = x ** 3
        output_grad = rng.standard_normal(output.shape, dtype=np.float32)
        return output, output_grad, [np.float32(3) * x * x * output_grad]
    op, constants = oracle_op(problem)
    arguments = [*inputs, *(np.asarray(c) for c in constants)]
    output = np.asarray(op.forward(arguments))
    output_grad = rng.standard_normal(output.shape, dtype=np.float32)
    from d5.ops.operator import as_tuple

    grads = as_tuple(op.backward([output_grad], arguments, [output]))[:len(inputs)]
    return output, output_grad, [np.asarray(g) for g in grads]


__all__ = ["ORACLE", "PASSES", "BoundPasses", "ConvProblem", "ElementwiseProblem", "GemmProblem", "Implementation",
           "ImplementationCatalog", "NativeSpec", "Problem", "Skipped", "bind_custom_op", "deepbench_subset",
           "expected_results", "load_ipowop_cpp", "load_ipowop_python", "oracle_op", "quick_subset"]
