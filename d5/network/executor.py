"""L1: the GraphExecutor interface every framework implements, and the live state it keeps.

An executor runs a :class:`d5.Network` on one framework and device. ``inference`` computes the graph
outputs; ``inference_and_backprop`` does so in training mode (batch statistics, active dropout) and
leaves the gradient of ``y`` with respect to every trainable parameter in ``executor.network``: a
:class:`LiveNetwork`, the framework's parameters and the tensors of the last pass, kept in the framework's
own tensors. ``network.gradient(y)`` names the gradients and ``network.fetch_tensors`` reads them; the
graph (:class:`d5.Network`) stays a framework-neutral description, ``executor.graph``.

>>> import numpy as np, d5
>>> from d5.frameworks import reference
>>> net = d5.Network()
>>> _ = net.add_input("x", ("N", 2))
>>> _ = net.add_param("w", np.array([[1.0, 2.0]], np.float32))
>>> _ = net.add_node("Gemm", ["x", "w"], ["y"], transB=1)
>>> _ = net.add_input("t", ("N", 1))
>>> _ = net.add_node("MeanSquaredError", ["y", "t"], ["loss"])
>>> net.add_output("loss")
>>> ex = reference.from_model(net)
>>> batch = {"x": np.ones((3, 2), np.float32), "t": np.zeros((3, 1), np.float32)}
>>> float(ex.inference_and_backprop(batch, y="loss")["loss"])
9.0
>>> ex.network.gradient("loss")
[('w', 'w_grad')]
>>> ex.network.fetch_tensors(["w_grad"])[0]
array([[6., 6.]], dtype=float32)
"""
from __future__ import annotations

import abc
import collections.abc
from typing import Any, Iterable, Mapping

import numpy as np

from d5.errors import GraphError, ShapeError
from d5.network.graph import Network, Node, TensorInfo, require_name, suggest


class LiveNetwork(abc.ABC):
    """``executor.network``: the live state of one executor, over the framework's own tensors.

    Training and distributed code (optimizers, the seeds' ``ConsistentNeighbors``) use four methods:

    - :meth:`get_params` -- names of the trainable parameters;
    - :meth:`gradient` -- ``[(param_name, gradient_name)]`` pairs for a loss ``y``;
    - :meth:`fetch_tensors` -- current values as NumPy arrays;
    - :meth:`feed_tensor` -- write a parameter (or a new tensor).

    What ``fetch_tensors`` returns and ``feed_tensor`` accepts, per framework:

    ============  ==========================================================  =================================
    framework     ``fetch_tensors`` returns                                   ``feed_tensor`` accepts
    ============  ==========================================================  =================================
    reference     the live NumPy arrays themselves (no copy; do not write      NumPy arrays or anything
                  into them: feed a new array instead)                        ``np.asarray`` takes; stored
                                                                              without a copy when the dtype
                                                                              already matches
    pytorch       zero-copy NumPy views of CPU tensors; host copies of GPU    NumPy arrays or torch tensors
                  tensors
    ============  ==========================================================  =================================

    A framework that can update parameters without leaving its own tensors does so in its native
    optimizers; the NumPy route here is what framework-neutral update rules use.

    The graph's read-only description is available here too (``inputs``, ``outputs``, ``nodes``, ``opset``,
    ``name``, ``params``), so code written against a :class:`d5.Network` reads an executor's network alike;
    :attr:`graph` is the description itself, and :meth:`to_network` a copy with the current parameter values.
    """

    def __init__(self, graph: Network) -> None:
        #: The framework-neutral description this state belongs to (parameters there are initial values).
        self.graph = graph
        #: Current parameter values by name, in the framework's tensors (subclasses fill it); executors read
        #: them at the start of every pass.
        self.param_values: dict[str, Any] = {}
        self._pass: dict[str, Any] = {}  # the last pass's other tensors (gradients, outputs), by name

    # ------------------------------------------------------------------ the protocol
    def get_params(self) -> list[str]:
        """Names of the trainable parameters, in the graph's order."""
        return self.graph.get_params()

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        """``[(param_name, gradient_name)]`` for every trainable parameter; after
        ``executor.inference_and_backprop(inputs, y)`` each gradient can be fetched by its name."""
        return self.graph.gradient(y)

    def fetch_tensors(self, names: Iterable[str]) -> list[np.ndarray]:
        """Current values of parameters, gradients or other tensors of the last pass, as NumPy arrays (see the
        class docstring for copies). One name (a str) counts as one name. Unknown names raise GraphError."""
        if isinstance(names, str):  # one name, not its characters
            names = [names]
        out = []
        for name in names:
            require_name(name, "tensor name")
            value = self.param_values.get(name)
            if value is None:
                value = self._pass.get(name)
                if value is None:
                    raise GraphError(f"no value for tensor {name!r}: it is neither a parameter nor produced by the last "
                                     f"pass{suggest(name, list(self.param_values) + list(self._pass))}")
            out.append(self.as_numpy(value))
        return out

    def as_numpy(self, value: Any) -> np.ndarray:
        """A framework tensor as a NumPy array, without a copy where the framework allows (override)."""
        return value

    def set_pass_tensors(self, tensors: dict[str, Any]) -> None:
        """Replace the tensors of the last pass (executors store gradients under their gradient names here)."""
        self._pass = tensors

    @abc.abstractmethod
    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        """Write ``value`` into tensor ``name``. A parameter keeps its shape and dtype (ShapeError otherwise;
        values are cast to its dtype); ``is_param=True`` with a new name adds a trainable parameter, and a
        new name otherwise sets a tensor later fetches read."""

    # ------------------------------------------------------------------ conveniences
    def fetch_tensor(self, name: str) -> np.ndarray:
        return self.fetch_tensors([name])[0]

    @property
    def params(self) -> dict[str, np.ndarray]:
        """Current values of all parameters (trainable or not), by name, as :meth:`fetch_tensors` returns them."""
        names = list(self.graph.params)
        return dict(zip(names, self.fetch_tensors(names)))

    def to_network(self) -> Network:
        """A copy of the graph holding the current parameter values (to export, checkpoint or rebuild)."""
        network = self.graph.copy()
        for name, value in self.params.items():
            network.feed_tensor(name, value)
        return network

    def to_onnx(self):
        """The graph with the current parameter values as an ``onnx.ModelProto``."""
        return self.to_network().to_onnx()

    # The graph's description, read-only, so code reads an executor's network like a d5.Network.
    @property
    def inputs(self) -> dict[str, TensorInfo]:
        return self.graph.inputs

    @property
    def outputs(self) -> list[str]:
        return self.graph.outputs

    @property
    def nodes(self) -> list[Node]:
        return self.graph.nodes

    @property
    def opset(self) -> int:
        return self.graph.opset

    @property
    def name(self) -> str:
        return self.graph.name

    def is_trainable(self, name: str) -> bool:
        return self.graph.is_trainable(name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.graph!r})"


class GraphExecutor(abc.ABC):
    """Runs a network on one framework. Frameworks derive from :class:`d5.frameworks.base.FrameworkExecutor`,
    which spells out their duties; this is the interface training code sees."""

    #: The framework-neutral graph the executor runs (its own copy).
    graph: Network
    #: The live state: parameters and the tensors of the last pass (see :class:`LiveNetwork`).
    network: LiveNetwork

    def __init__(self, graph: Network, network: LiveNetwork, device: Any = None) -> None:
        self.graph = graph
        self.network = network
        self.device = device

    @abc.abstractmethod
    def inference(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Compute the graph outputs that the given inputs determine (inference mode)."""

    @abc.abstractmethod
    def inference_and_backprop(self, inputs: Mapping[str, Any], y: str = "loss") -> dict[str, np.ndarray]:
        """Compute the outputs in training mode and the gradients of ``y`` w.r.t. the trainable parameters."""

    #: (graph version, signature) of the last batch :meth:`check_inputs` passed unchanged.
    _accepted_inputs: tuple[int, list[Any]] | None = None

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``inputs`` against the network's declared inputs (see :func:`check_inputs`).

        A batch like the last one that passed unchanged (the same names, NumPy arrays of the same dtypes and
        shapes, the graph not edited since) passes again without the full check: training feeds thousands of
        such batches, and on a small network the check was a measurable part of a step."""
        signature = _signature(inputs)
        accepted = self._accepted_inputs
        if signature is not None and accepted is not None and accepted[1] == signature \
                and accepted[0] == self.network.graph.version:
            return dict(inputs)
        checked = check_inputs(self.network.inputs, inputs)
        if signature is not None and all(checked[name] is value for name, value in inputs.items()):
            self._accepted_inputs = (self.network.graph.version, signature)
        return checked

    @staticmethod
    def check_loss_name(y: Any) -> str:
        """``y`` of ``inference_and_backprop``: the name of the tensor to differentiate."""
        if not isinstance(y, str) or not y:
            raise GraphError(f"y must name the tensor to differentiate (a str such as 'loss'), got {y!r}")
        return y


def check_inputs(declared: Mapping[str, TensorInfo], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``inputs`` as arrays of the declared dtypes, or raise a d5 error naming the bad tensor.

    Arrays of the same kind (a float64 array for a float32 input, int32 labels for int64) are cast; a
    different kind (floats for an integer input), a wrong rank or a wrong fixed dimension raise
    :class:`ShapeError` with the expected and actual shapes. Symbolic dimensions (``'N'``) match any size
    but must agree across inputs.

    Integer values are cast to the declared integer dtype only when they fit it: ``2**63`` for an int64
    input, or ``-1`` for a uint8 one, raises ShapeError instead of wrapping around. Floats narrow freely
    (float64 to float32 rounds, as every framework does).

    A sequence input takes a list (or tuple) of arrays and becomes a new list of checked arrays (the
    elements may differ in their symbolic or unknown dimensions); an optional input also takes ``None``
    (empty). A list of arrays for a tensor input, or an array for a sequence input, raises ShapeError, and
    so does ``inputs`` itself when it is not a mapping from input names to values.

    >>> from d5.network.graph import TensorInfo
    >>> declared = {"x": TensorInfo("x", ("N",), np.dtype("int64"))}
    >>> check_inputs(declared, {"x": np.array([1, 2], np.int32)})["x"].dtype
    dtype('int64')
    >>> try:
    ...     check_inputs(declared, [np.zeros(2)])
    ... except ShapeError as err:
    ...     print(str(err)[:55])
    inputs must be a dict mapping input names to arrays, go
    """
    if not isinstance(inputs, collections.abc.Mapping):
        raise ShapeError(f"inputs must be a dict mapping input names to arrays, got {_describe(inputs)}; "
                         f"pass e.g. {{{', '.join(f'{name!r}: array' for name in declared)}}}")
    checked: dict[str, Any] = {}
    bindings: dict[str, tuple[int, str]] = {}
    for name, value in inputs.items():
        info = declared.get(name)
        if info is None:
            raise GraphError(f"unknown input {name!r}; the network's inputs are {sorted(declared)}")
        if value is None:
            if not info.is_optional:
                raise ShapeError(f"input {name!r}: got None, but it is a {info.describe_type()}, not an optional; "
                                 "feed a value (None means an empty optional)")
            checked[name] = None
        elif info.is_sequence:
            if not isinstance(value, (list, tuple)):
                raise ShapeError(f"input {name!r} is a {info.describe_type()}: feed a list of arrays, got "
                                 f"{type(value).__name__}" + (f" of shape {value.shape}; wrap it as [array] or split it "
                                                               "with list(array)" if isinstance(value, np.ndarray) else ""))
            checked[name] = [_check_tensor(info, item, None, f"element {i} of ") for i, item in enumerate(value)]
        else:
            if isinstance(value, (list, tuple)) and any(isinstance(item, (np.ndarray, list, tuple)) and
                                                        not _is_nested_numbers(item) for item in value):
                raise ShapeError(f"input {name!r} is a {info.describe_type()}, but got a {type(value).__name__} of "
                                 "arrays (a sequence); stack it into one array with np.stack, or declare the input "
                                 "with kind='sequence'")
            checked[name] = _check_tensor(info, value, bindings)
    return checked


def _signature(inputs: Any) -> list[Any] | None:
    """``[(name, dtype, shape)]`` of a dict of NumPy arrays (None for anything else: it gets the full check)."""
    if type(inputs) is not dict:
        return None
    signature = []
    for name, value in inputs.items():
        if type(value) is not np.ndarray:
            return None
        signature.append((name, value.dtype, value.shape))
    return signature


def _describe(value: Any) -> str:
    """``'None'``, ``'list'``, ``'ndarray of shape (2, 3)'``: what the user passed, for messages."""
    if value is None:
        return "None"
    shape = f" of shape {value.shape}" if isinstance(value, np.ndarray) else ""
    return f"{type(value).__name__}{shape}"


def _is_nested_numbers(value: Any) -> bool:
    """True for nested lists of numbers (a tensor written as Python lists), False if arrays are inside."""
    if isinstance(value, np.ndarray):
        return False
    if isinstance(value, (list, tuple)):
        return all(_is_nested_numbers(item) for item in value)
    return True


def _check_tensor(info: TensorInfo, value: Any, bindings: dict[str, tuple[int, str]] | None,
                  where: str = "") -> np.ndarray:
    name = info.name
    try:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
    except ValueError as err:  # ragged nested lists
        raise ShapeError(f"{where}input {name!r}: cannot convert the {type(value).__name__} to an array ({err}); "
                         f"feed a {info.describe_type()}") from None
    if array.dtype != info.dtype:
        if array.dtype.kind != info.dtype.kind and not (array.dtype.kind in "iu" and info.dtype.kind in "iu"):
            raise ShapeError(f"{where}input {name!r}: expected dtype {info.dtype}, got {array.dtype}; "
                             f"convert it with .astype({str(info.dtype)!r})")
        if array.dtype.kind in "iu" and not np.can_cast(array.dtype, info.dtype):
            _check_integer_range(array, info, where)
        array = array.astype(info.dtype)
    if info.shape is not None:
        _check_shape(info, array.shape, bindings if bindings is not None else {}, where)
    return array


def _check_integer_range(array: np.ndarray, info: TensorInfo, where: str) -> None:
    """Raise ShapeError if an integer array holds values the declared integer dtype cannot represent.
    Only called when the cast could overflow, so safe casts (int32 to int64) cost no scan."""
    if array.size == 0:
        return
    limits = np.iinfo(info.dtype)
    low, high = int(array.min()), int(array.max())  # Python ints: exact for every (u)int64 value
    bad = low if low < limits.min else high if high > limits.max else None
    if bad is not None:
        raise ShapeError(f"{where}input {info.name!r}: value {bad} ({array.dtype}) does not fit the declared dtype "
                         f"{info.dtype} (range {limits.min}..{limits.max}) and would wrap around; feed values in "
                         f"range, or declare the input as {array.dtype}")


def _check_shape(info: TensorInfo, shape: tuple[int, ...], bindings: dict[str, tuple[int, str]], where: str = "") -> None:
    expected = info.describe_shape()
    if len(shape) != len(info.shape):
        raise ShapeError(f"{where}input {info.name!r}: expected shape {expected} (rank {len(info.shape)}), "
                         f"got {tuple(shape)} (rank {len(shape)})")
    for axis, (want, got) in enumerate(zip(info.shape, shape)):
        if isinstance(want, int) and want != got:
            raise ShapeError(f"{where}input {info.name!r}: expected shape {expected}, got {tuple(shape)} (axis {axis})")
        if isinstance(want, str):
            seen = bindings.setdefault(want, (got, info.name))
            if seen[0] != got:
                raise ShapeError(f"{where}input {info.name!r}: dimension {want!r} is {got} but input {seen[1]!r} has it as "
                                 f"{seen[0]} (shape {tuple(shape)}, expected {expected})")
