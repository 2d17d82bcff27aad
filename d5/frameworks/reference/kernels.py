"""Python side of d5's C++ reference kernels: the lazy loader of ``d5._C`` and the 2-D window (resolved from
the neutral ONNX window geometry of :mod:`d5.ops.onnx_semantics`) that convolution and pooling share.

``d5._C`` is imported on first use, never at import of d5, so that the pure-Python parts of d5 work
(and say what to do) when the extension has not been built.

>>> native = load_native()
>>> import numpy as np
>>> native.im2col(np.ones((1, 1, 3, 3), np.float32), (2, 2), (1, 1), (0, 0), (1, 1), (2, 2)).shape
(1, 4, 4)
>>> window_geometry((28,), (5,), strides=(1,), dilations=(1,), pads=(2, 2), auto_pad="NOTSET")
WindowGeometry(out=(28,), pads_begin=(2,), pads_end=(2,))
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
from types import ModuleType
from typing import Iterator, Sequence

import numpy as np

from d5.errors import D5Error, ShapeError, UnsupportedOperatorError
# Window geometry is framework-neutral ONNX semantics; re-exported here for the reference operators.
from d5.ops.onnx_semantics import AUTO_PAD_MODES, WindowGeometry, window_geometry
from d5.ops.openmp import short_openmp_spin

_native: ModuleType | None = None


def load_native() -> ModuleType:
    """Return the compiled extension ``d5._C``, importing it on first call.

    Raises :class:`d5.errors.D5Error` with the build command when the extension is missing.

    >>> load_native().__name__
    'd5._C'
    """
    global _native
    if _native is None:
        try:
            # import_module (not `from d5 import _C`) so that a blocked or removed module is noticed even
            # when the package already has the attribute.
            with short_openmp_spin():
                module = importlib.import_module("d5._C")
        except ImportError as err:
            raise D5Error(
                "the compiled extension d5._C (C++ reference kernels for Conv, pooling and "
                f"BatchNormalization) could not be imported ({err}); build it by running "
                "`pip install --no-build-isolation -e .` in the d5 source tree (or `make test`)"
            ) from err
        _register_blas(module)
        _native = module
    return _native


def _register_blas(module: ModuleType) -> None:
    # The convolution GEMMs call scipy's BLAS through the function pointers scipy exports; without scipy
    # (or with an incompatible one) Conv falls back to NumPy matmul, slower but correct.
    try:
        from scipy.linalg import cython_blas

        module.set_blas(cython_blas.__pyx_capi__["sgemm"], cython_blas.__pyx_capi__["dgemm"])
        module.find_blas_threading(cython_blas.__file__)
    except (ImportError, KeyError, ValueError):
        pass


def set_num_threads(threads: int) -> int:
    """Set the reference framework's one thread budget; returns the previous one.

    The thread policy: d5's C++ kernels parallelize with their own OpenMP threads (over images, or inside
    one image over channels and tiles of the GEMM), and call BLAS single-threaded from those threads, so
    BLAS's thread pool never runs beside them. NumPy's BLAS (Gemm, MatMul and the like) keeps its own pool.
    This function gives both pools, and d5's OpenMP threads, the same size, so nothing oversubscribes the
    cores; idle OpenMP threads spin only briefly before sleeping (``GOMP_SPINCOUNT``, see
    :func:`load_native`). ``OMP_NUM_THREADS`` sets the same budget at start-up. Results do not depend on
    the thread count: the kernels reduce in an order fixed by the shapes alone.

    >>> previous = set_num_threads(1)
    >>> load_native().max_threads()
    1
    >>> _ = set_num_threads(previous)
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise D5Error(f"set_num_threads: expected a positive integer number of threads, got {threads!r}")
    from threadpoolctl import threadpool_limits

    native = load_native()
    previous = native.max_threads()
    native.set_num_threads(threads)
    # Every BLAS loaded in the process (NumPy's and SciPy's OpenBLAS) and the OpenMP runtime d5._C uses.
    threadpool_limits(limits=threads)
    return previous


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with NumPy's matmul semantics, run by d5._C on d5's threads when both operands are float32
    or both float64 and at least 2-D: the thread policy's matrix product (see :func:`set_num_threads`), which
    gives the same bits at any thread count (NumPy's BLAS does not: measured on LeNet-5's first Gemm, 1 and 4
    threads differ in the last bits). Other operands (1-D, integers, mixed or narrow floats) use NumPy,
    which the executor keeps single-threaded while a pass runs (:func:`serial_numpy_blas`).

    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> matmul(x, x.T)
    array([[ 5., 14.],
           [14., 50.]], dtype=float32)
    """
    if (a.dtype != b.dtype or a.dtype not in (np.float32, np.float64) or a.ndim < 2 or b.ndim < 2
            or a.shape[-1] != b.shape[-2] or not native_available()):
        return np.matmul(a, b)
    native = load_native()
    if b.ndim == 2:  # one weight for every row of a: a single GEMM over the flattened batch
        rows = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
        weights, trans_b = _gemm_operand(b)
        return native.matmul(rows, weights, False, trans_b).reshape(*a.shape[:-1], b.shape[-1])
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    stacked = [np.broadcast_to(x, batch + x.shape[-2:]).reshape(-1, *x.shape[-2:]) for x in (a, b)]
    (left, trans_a), (right, trans_b) = (_gemm_operand(x) for x in stacked)
    return native.matmul(left, right, trans_a, trans_b).reshape(*batch, a.shape[-2], b.shape[-1])


def gemm(a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """``op(a) @ op(b)`` for 2-D float32 or float64 matrices of one dtype (op: transpose when asked) on d5's
    threads, like :func:`matmul`; a transposed operand is read in place, never copied.

    >>> x = np.arange(6.0).reshape(2, 3)
    >>> gemm(x, x, trans_b=True)
    array([[ 5., 14.],
           [14., 50.]])
    """
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64) or not native_available():
        return np.matmul(a.T if trans_a else a, b.T if trans_b else b)
    (left, flip_a), (right, flip_b) = _gemm_operand(a), _gemm_operand(b)
    return load_native().matmul(left, right, trans_a != flip_a, trans_b != flip_b)


def _gemm_operand(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """``x`` as a C-contiguous array and whether that array holds it transposed (a ``.T`` or swapaxes view of
    a contiguous array is passed as that array, flagged, instead of being copied)."""
    if x.flags.c_contiguous:
        return x, False
    swapped = np.swapaxes(x, -1, -2)
    if swapped.flags.c_contiguous:
        return swapped, True
    return np.ascontiguousarray(x), False


_blas_controller = None


@contextlib.contextmanager
def serial_numpy_blas() -> Iterator[None]:
    """While open, every BLAS pool in the process (NumPy's, SciPy's) runs single-threaded: the executor
    holds it for a pass, so the few NumPy BLAS calls there give the same bits at any thread count, and
    BLAS threads never compete with d5's OpenMP threads."""
    global _blas_controller
    if _blas_controller is None:
        from threadpoolctl import ThreadpoolController

        native_available()  # loads SciPy's BLAS (d5._C's), so that the controller sees it too

        _blas_controller = ThreadpoolController().select(user_api="blas")
    with _blas_controller.limit(limits=1):
        yield


def num_threads() -> int:
    """The reference framework's thread budget (see :func:`set_num_threads`).

    >>> num_threads() >= 1
    True
    """
    return load_native().max_threads()


def native_available() -> bool:
    """True when ``d5._C`` can be imported.

    >>> native_available()
    True
    """
    try:
        load_native()
    except D5Error:
        return False
    return True


def compute_dtype(op_name: str, *arrays: np.ndarray) -> np.dtype:
    """The dtype the kernels run in for these inputs: float64 if any input is float64, else float32.

    float16 (and other narrower floats) compute in float32; the operator casts the result back.

    >>> compute_dtype("Conv", np.zeros(1, np.float16), np.zeros(1, np.float32))
    dtype('float32')
    """
    for array in arrays:
        if not np.issubdtype(array.dtype, np.floating):
            raise ShapeError(f"{op_name}: expected floating-point inputs, got dtype {array.dtype}; "
                             "cast the input to float32 or float64")
    if any(array.dtype == np.float64 for array in arrays):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def as_kernel_array(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as a C-contiguous array of ``dtype`` (no copy when it already is one).

    >>> as_kernel_array(np.arange(4.0)[::2], np.dtype(np.float32)).flags.c_contiguous
    True
    """
    return np.ascontiguousarray(array, dtype=dtype)


@dataclasses.dataclass(frozen=True)
class Window2D:
    """A sliding window resolved for the 2-D kernels; 1-D inputs are run as height-1 images.

    ``pads`` is ``(top, left, bottom, right)`` as the kernels take it, never negative (d5._C rejects
    negative pads); ``crops``, in the same layout, counts the input's leading and trailing elements no
    window reaches (a negative SAME_* pad), which the operators drop before a kernel runs
    (:func:`d5.frameworks.reference.operators._windows.crop_input`). ``spatial_rank`` is the rank the
    operator was given (1 or 2), so the caller can reshape the result back.
    """

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]
    out: tuple[int, int]
    spatial_rank: int
    crops: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def pads_begin(self) -> tuple[int, int]:
        return self.pads[0], self.pads[1]


def resolve_window_2d(op_name: str, spatial: Sequence[int], kernel_shape: Sequence[int], *,
                      strides: Sequence[int] | None, dilations: Sequence[int] | None, pads: Sequence[int] | None,
                      auto_pad: str = "NOTSET", ceil_mode: bool = False, clamp_same_pads: bool = False) -> Window2D:
    """ONNX window attributes (``None`` = ONNX default) for 1 or 2 spatial axes -> :class:`Window2D`
    (``clamp_same_pads``: see :func:`d5.ops.onnx_semantics.window_geometry`).

    >>> resolve_window_2d("MaxPool", (10,), (3,), strides=(2,), dilations=None, pads=None)
    Window2D(kernel=(1, 3), strides=(1, 2), dilations=(1, 1), pads=(0, 0, 0, 0), out=(1, 4), spatial_rank=1, crops=(0, 0, 0, 0))
    >>> same = resolve_window_2d("MaxPool", (5,), (1,), strides=(3,), dilations=None, pads=None, auto_pad="SAME_UPPER")
    >>> same.out, same.pads, same.crops  # SAME pads (0, -1): the windows read x[0], x[3], never x[4]
    ((1, 2), (0, 0, 0, 0), (0, 0, 0, 1))
    """
    rank = len(spatial)
    if rank not in (1, 2):
        raise UnsupportedOperatorError(
            f"{op_name}: the reference framework implements 1-D and 2-D windows (3-D or 4-D inputs), got an input "
            f"with {rank} spatial axes; run this model on another framework (e.g. PyTorch) or reshape it to 2-D")
    strides = tuple(strides) if strides is not None else (1,) * rank
    dilations = tuple(dilations) if dilations is not None else (1,) * rank
    pads = tuple(pads) if pads is not None else (0,) * (2 * rank)
    geometry = window_geometry(spatial, kernel_shape, strides=strides, dilations=dilations, pads=pads,
                               auto_pad=auto_pad, ceil_mode=ceil_mode, clamp_same_pads=clamp_same_pads,
                               op_name=op_name)
    if rank == 1:
        (pad_begin, pad_end), (crop_begin, crop_end) = geometry.applied_pads, geometry.crops
        return Window2D((1, int(kernel_shape[0])), (1, int(strides[0])), (1, int(dilations[0])),
                        (0, pad_begin, 0, pad_end), (1, geometry.out[0]), 1, (0, crop_begin, 0, crop_end))
    return Window2D((int(kernel_shape[0]), int(kernel_shape[1])), (int(strides[0]), int(strides[1])),
                    (int(dilations[0]), int(dilations[1])), geometry.applied_pads, geometry.out, 2, geometry.crops)


__all__ = ["AUTO_PAD_MODES", "Window2D", "WindowGeometry", "as_kernel_array", "compute_dtype", "load_native",
           "gemm", "matmul", "native_available", "num_threads", "resolve_window_2d", "serial_numpy_blas",
           "set_num_threads", "window_geometry"]
