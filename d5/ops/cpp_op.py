"""A compiled C++ operator as a d5 CustomOp, with two faces:

- NumPy (``forward``/``backward``): what the reference framework and ``d5.ops.test_gradient`` call. Outputs are
  allocated here and the C++ code writes into them; inputs are passed without a copy when C-contiguous.
- Raw buffers (:meth:`CppOp.kernel` -> :class:`BoundKernel`): what a framework's ``custom_op`` bridge calls
  with its own tensors' addresses, so the operator reads and writes the framework's memory directly (zero-copy).
  The bridge allocates outputs and input gradients with :meth:`BoundKernel.padded_elements` elements: the
  extra bytes are a guard that :class:`BoundKernel` fills before the call and checks after it, so a kernel
  writing past the shape it was given (a gradient of the wrong size, a shape function that disagrees with the
  C++ code) raises :class:`d5.errors.ShapeError` instead of corrupting memory silently.

Built by :func:`d5.ops.compile_cpp_op`.
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from d5.errors import OperatorError, ShapeError
from d5.ops.operator import CustomOp, Gradient

#: Bytes after every buffer the C++ code writes, filled with :data:`GUARD_PATTERN` and checked after each call.
GUARD_BYTES = 64
GUARD_PATTERN = 0xA5
_GUARD = bytes([GUARD_PATTERN]) * GUARD_BYTES
_KERNELS_KEPT = 8  # operator instances kept per op (one per dtype and input shapes)

Shape = tuple[int, ...]


_NUMPY_NAMES = frozenset(np.dtype(t).name for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                                     np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


def dtype_name(dtype: Any) -> str:
    """The NumPy name of ``dtype``: anything ``np.dtype`` takes (a dtype, a type, a name), or a name NumPy lacks
    (``'bfloat16'``) as it is. Another object -- a framework's dtype that a bridge passed without converting it
    with its framework's ``runtime.dtype_name`` -- is read by the last dotted part of its ``str``, which is the
    NumPy name for the frameworks whose dtypes print as ``<module>.<name>``.

    >>> dtype_name(np.float32), dtype_name("int64"), dtype_name("bfloat16")
    ('float32', 'int64', 'bfloat16')
    """
    if isinstance(dtype, str) and dtype in _NUMPY_NAMES:  # what bridges pass: no np.dtype() call per operator call
        return dtype
    try:
        return np.dtype(dtype).name
    except TypeError:
        return dtype if isinstance(dtype, str) else str(dtype).rsplit(".", 1)[-1]


class CppOp(CustomOp):
    """A C++ operator compiled by :func:`d5.ops.compile_cpp_op` (see the module docstring).

    ``num_inputs``/``num_outputs`` come from the C++ ``forward``'s parameters; ``attributes`` reach a constructor
    taking ``const d5::OpContext&``; :meth:`with_attributes` makes another node's instance of the same
    compiled operator.
    """

    def __init__(self, library: Any, name: str, attributes: Mapping[str, Any] | None = None,
                 output_shapes: Callable[..., Sequence[Sequence[int]]] | None = None) -> None:
        super().__init__()
        signature = library.signature(name)
        self.library, self.signature = library, signature
        self.op_type = signature.name.rsplit("::", 1)[-1]
        self.num_inputs, self.num_outputs = signature.num_inputs, signature.num_outputs
        if not signature.has_backward:
            self.gradient = Gradient.NONE
            self.no_gradient_reason = f"the C++ class {self.op_type} defines no backward(); add one to train through it"
        if output_shapes is not None and not callable(output_shapes):
            raise ShapeError(f"{self.op_type}: output_shapes must be a function (input_shapes, attributes) -> "
                             f"[shape, ...], got {type(output_shapes).__name__}")
        self.attributes = dict(attributes or {})
        self._encoded_attributes = {k: _encode_attribute(self.op_type, k, v) for k, v in self.attributes.items()}
        self._shape_function = output_shapes
        self._kernels: OrderedDict[tuple, BoundKernel] = OrderedDict()

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Element types the operator was compiled for."""
        return self.signature.dtypes

    def with_attributes(self, **attributes: Any) -> "CppOp":
        """Another instance of this compiled operator (for another node), with these attributes added."""
        return CppOp(self.library, self.signature.name, {**self.attributes, **attributes}, self._shape_function)

    def output_shapes(self, input_shapes: Sequence[Sequence[int]], dtype: str = "float32") -> list[Shape]:
        """The outputs' shapes for these input shapes: the Python function given to compile_cpp_op, else the
        class's static ``output_shapes``, else input 0's shape for every output."""
        shapes = [tuple(int(d) for d in s) for s in input_shapes]
        if self._shape_function is not None:
            try:
                result = self._shape_function(shapes, dict(self.attributes))
            except Exception as err:  # the user's function: its failure is reported as the op's
                raise ShapeError(f"{self.op_type}: the output_shapes function failed on input shapes {shapes}: "
                                 f"{type(err).__name__}: {err}") from err
        elif self.signature.has_shape_function:
            result = self._call("output_shapes", self.library.module.output_shapes, self.signature.name, dtype,
                                [list(s) for s in shapes], self._encoded_attributes)
        else:
            result = [shapes[0]] * self.num_outputs
        return self._checked_shapes(result, shapes)

    def kernel(self, dtype: Any, input_shapes: Sequence[Sequence[int]]) -> "BoundKernel":
        """The C++ operator instance for ``dtype`` and these input shapes (made once, then reused, so a
        forward and the matching backward run on the same object)."""
        dtype = np.dtype(dtype).name
        shapes = tuple(tuple(int(d) for d in s) for s in input_shapes)
        key = (dtype, shapes)
        bound = self._kernels.get(key)
        if bound is not None:
            self._kernels.move_to_end(key)
            return bound
        if dtype not in self.signature.dtypes:
            raise OperatorError(f"{self.op_type} was compiled for {', '.join(self.signature.dtypes)}, not {dtype}: "
                                f"pass dtypes=[..., {dtype!r}] to compile_cpp_op, or cast the inputs")
        self._check_input_count(len(shapes))
        outputs = self.output_shapes(shapes, dtype)
        instance = self._call("constructor", self.library.module.create, self.signature.name, dtype,
                              [list(s) for s in shapes], [list(s) for s in outputs], self._encoded_attributes)
        bound = BoundKernel(self, instance, dtype, shapes, tuple(outputs))
        self._kernels[key] = bound
        if len(self._kernels) > _KERNELS_KEPT:
            self._kernels.popitem(last=False)
        return bound

    def forward(self, inputs: Sequence[Any]) -> Any:
        arrays = self._arrays(inputs)
        kernel = self.kernel(arrays[0].dtype, [a.shape for a in arrays])
        outputs = [_guarded_empty(kernel, shape) for shape in kernel.output_shapes]
        kernel.forward([_address(a) for a in arrays], [_address(o) for o in outputs])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def backward(self, grads: Sequence[Any], fwd_inputs: Sequence[Any], fwd_outputs: Sequence[Any]) -> Any:
        if self.gradient is Gradient.NONE:
            return super().backward(grads, fwd_inputs, fwd_outputs)
        arrays = self._arrays(fwd_inputs)
        kernel = self.kernel(arrays[0].dtype, [a.shape for a in arrays])
        outputs = self._matching(fwd_outputs, kernel.output_shapes, kernel.dtype, "forward output")
        grads = self._matching(grads, kernel.output_shapes, kernel.dtype, "output gradient", zeros_for_none=True)
        input_grads = [_guarded_empty(kernel, shape) for shape in kernel.input_shapes]
        kernel.backward([_address(g) for g in grads], [_address(a) for a in arrays],
                        [_address(o) for o in outputs], [_address(g) for g in input_grads])
        return input_grads[0] if len(input_grads) == 1 else tuple(input_grads)

    def element_type(self, input_dtypes: Sequence[Any]) -> str:
        """The element type T of a call with inputs of these dtypes -- NumPy dtypes or their names, as a bridge
        gets them from its framework's ``runtime.dtype_name`` (see :func:`dtype_name`): ShapeError for another
        number of inputs than forward takes, OperatorError for mixed dtypes. Bridges call it before
        :meth:`kernel`."""
        self._check_input_count(len(input_dtypes))
        names = [dtype_name(d) for d in input_dtypes]
        if len(set(names)) > 1:
            raise OperatorError(f"{self.op_type}: every input must have the same dtype (the C++ class has one "
                                f"element type T), got {names}")
        return names[0]

    def _arrays(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        self._check_input_count(len(inputs))
        arrays = [np.ascontiguousarray(x) for x in inputs]  # a copy only for non-contiguous inputs
        self.element_type([a.dtype for a in arrays])
        return arrays

    def _matching(self, values: Sequence[Any], shapes: Sequence[Shape], dtype: str, what: str,
                  zeros_for_none: bool = False) -> list[np.ndarray]:
        if len(values) != len(shapes):
            raise ShapeError(f"{self.op_type}.backward: expected {len(shapes)} {what}s, got {len(values)}")
        arrays = []
        for index, (value, shape) in enumerate(zip(values, shapes)):
            if value is None and zeros_for_none:
                value = np.zeros(shape, dtype)
            array = np.ascontiguousarray(value, dtype=dtype)
            if array.shape != shape:
                raise ShapeError(f"{self.op_type}.backward: {what} {index} has shape {array.shape}, but the "
                                 f"output shape is {shape}")
            arrays.append(array)
        return arrays

    def _checked_shapes(self, result: Any, input_shapes: list[Shape]) -> list[Shape]:
        try:
            shapes = [tuple(int(d) for d in shape) for shape in result]
        except (TypeError, ValueError):
            raise ShapeError(f"{self.op_type}: the shape function must return a list of shapes (lists of ints), "
                             f"got {result!r}") from None
        if len(shapes) != self.num_outputs:
            raise ShapeError(f"{self.op_type}: the shape function gave {len(shapes)} shapes for input shapes "
                             f"{input_shapes}, but forward has {self.num_outputs} output(s)")
        if any(d < 0 for shape in shapes for d in shape):
            raise ShapeError(f"{self.op_type}: the shape function gave a negative dimension: {shapes}")
        return shapes

    def _check_input_count(self, got: int) -> None:
        if got != self.num_inputs:
            raise ShapeError(f"{self.op_type} takes {self.num_inputs} input(s) -- its C++ forward has "
                             f"{self.num_inputs} `const T*` input and {self.num_outputs} `T*` output parameter(s) "
                             f"-- but got {got}")

    def _call(self, what: str, function: Callable, *args: Any) -> Any:
        try:
            return function(*args)
        except Exception as err:  # a std::exception from the user's C++ code, translated by pybind11
            raise OperatorError(f"C++ operator {self.op_type} ({what}) threw: {err}") from err


@dataclass
class BoundKernel:
    """One C++ operator instance for a dtype and input shapes, called with raw buffer addresses (see the module
    docstring). Every buffer must be C-contiguous, of ``dtype``, and those the C++ code writes (outputs, input
    gradients) must have :meth:`padded_elements` elements."""

    op: CppOp
    instance: Any
    dtype: str
    input_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]

    def __post_init__(self) -> None:
        self.itemsize = np.dtype(self.dtype).itemsize
        self._output_bytes = [_nbytes(s, self.itemsize) for s in self.output_shapes]
        self._input_bytes = [_nbytes(s, self.itemsize) for s in self.input_shapes]

    def padded_elements(self, shape: Sequence[int]) -> int:
        """Elements to allocate for a written buffer of ``shape``: the shape's own plus the guard."""
        return int(np.prod(shape, dtype=np.int64)) + -(-GUARD_BYTES // self.itemsize)

    def forward(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        """Run ``forward`` on buffers at these addresses (outputs written)."""
        self._check_count("output", outputs, len(self.output_shapes))
        _arm(outputs, self._output_bytes)
        self.op._call("forward", self.instance.forward, list(inputs), list(outputs))
        self._check_guards(outputs, self._output_bytes, "forward", "output", self.output_shapes)

    def backward(self, output_grads: Sequence[int], inputs: Sequence[int], outputs: Sequence[int],
                 input_grads: Sequence[int]) -> None:
        """Run ``backward`` on buffers at these addresses (input gradients written)."""
        self._check_count("input gradient", input_grads, len(self.input_shapes))
        _arm(input_grads, self._input_bytes)
        self.op._call("backward", self.instance.backward, list(output_grads), list(inputs), list(outputs),
                      list(input_grads))
        self._check_guards(input_grads, self._input_bytes, "backward", "gradient of input", self.input_shapes)

    def _check_count(self, what: str, addresses: Sequence[int], expected: int) -> None:
        if len(addresses) != expected:
            raise ShapeError(f"{self.op.op_type}: {expected} {what} buffer(s) expected, got {len(addresses)}")

    def _check_guards(self, addresses: Sequence[int], sizes: Sequence[int], call: str, what: str,
                      shapes: Sequence[Shape]) -> None:
        for index, (address, size) in enumerate(zip(addresses, sizes)):
            if ctypes.string_at(address + size, GUARD_BYTES) != _GUARD:
                raise ShapeError(
                    f"C++ operator {self.op.op_type}: {call}() wrote past the end of {what} {index}, whose shape is "
                    f"{shapes[index]} ({size // self.itemsize} elements of {self.dtype}). The C++ code and the "
                    f"shape function disagree on its size: fix the loop bounds or the output_shapes function")


def _nbytes(shape: Sequence[int], itemsize: int) -> int:
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def _arm(addresses: Sequence[int], sizes: Sequence[int]) -> None:
    for address, size in zip(addresses, sizes):
        ctypes.memset(address + size, GUARD_PATTERN, GUARD_BYTES)


def _guarded_empty(kernel: BoundKernel, shape: Shape) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.empty(kernel.padded_elements(shape), kernel.dtype)[:count].reshape(shape)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _encode_attribute(op: str, name: str, value: Any) -> tuple[str, Any]:
    """A node attribute as (kind, value) for OpContext: int, float, str, or a list of ints or floats."""
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return "int", int(value)
    if isinstance(value, (float, np.floating)):
        return "float", float(value)
    if isinstance(value, (str, bytes)):
        return "str", value.decode() if isinstance(value, bytes) else value
    if isinstance(value, (list, tuple, np.ndarray)):
        items = np.asarray(value)
        if items.ndim == 1 and items.dtype.kind in "biu":
            return "ints", [int(v) for v in items]
        if items.ndim == 1 and items.dtype.kind == "f":
            return "floats", [float(v) for v in items]
    raise OperatorError(f"{op}: attribute {name}={value!r} is not an int, float, str or list of ints or floats, "
                        "which is what d5::OpContext can carry")
