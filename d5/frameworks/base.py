"""The framework contract, written as code: what every ``d5.frameworks.<name>`` package must provide.

A framework is one predictable unit. Its package has the module files of :data:`REQUIRED_MODULES`, its
operator mappings are filed under the names of :data:`OPERATOR_CATEGORIES`, it exports the names of
:data:`REQUIRED_NAMES` (the optimizer classes under the reference framework's names), it declares what it
can do in a :class:`Capabilities` record, and its executor derives from :class:`FrameworkExecutor`, whose
docstrings list the duties. :func:`contract_violations` checks a package against all of this;
``tests/frameworks/test_contract.py`` runs it, and the behavioural contract suite, on every installed
framework.

>>> from d5.frameworks import base, reference
>>> base.contract_violations(reference)
[]
>>> reference.CAPABILITIES.gpu
False
"""
from __future__ import annotations

import abc
import dataclasses
import pathlib
import types
from typing import Any, Mapping

import numpy as np

from d5.errors import D5Error, GraphError
from d5.network.executor import GraphExecutor, LiveNetwork
from d5.network.graph import Network

#: Module files every framework package has, under these names (``diff -r`` between two framework packages
#: then shows only what truly differs). ``operators/`` maps ONNX operators to the framework's own.
REQUIRED_MODULES = ("__init__.py", "executor.py", "custom_op.py", "optimizers.py", "operators/__init__.py")

#: The file names (without ``.py``) of ``operators/``: one per ONNX operator category. Support code there is
#: private (a leading underscore).
OPERATOR_CATEGORIES = ("activation", "elementwise", "reduction", "shape", "indexing", "generator", "normalization",
                       "pooling", "convolution", "linear", "recurrent", "attention", "image", "signal",
                       "quantization", "sequence", "string", "control_flow", "loss")

#: Optimizer classes every framework exports, under the reference framework's names (its native optimizers
#: with these names' semantics; see d5.training.optimizers).
OPTIMIZER_NAMES = ("GradientDescent", "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer", "AdaGradOptimizer",
                   "RMSPropOptimizer")

#: Public names every framework package exports.
REQUIRED_NAMES = ("NAME", "CAPABILITIES", "from_model", "from_onnx", "from_native", "custom_op",
                  "native_op") + OPTIMIZER_NAMES


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a framework can do, so callers (recipes, comparisons, tests) ask instead of guessing.

    >>> Capabilities(gpu=False, native_operators=False, fallback=True).devices
    ('cpu',)
    """

    #: Runs on GPUs (``device=d5.GPUDevice()``).
    gpu: bool
    #: Maps ONNX operators to the framework's own operators (False: d5's NumPy/C++ operators run them).
    native_operators: bool
    #: ``fallback=True`` runs ONNX operators it does not map on onnx.reference (inference only).
    fallback: bool
    #: ``inference_and_backprop`` computes gradients (False: inference only).
    trainable: bool = True
    #: Kinds of d5 custom operators ``custom_op`` accepts.
    custom_ops: tuple[str, ...] = ("python",)
    #: ``executor.network.fetch_tensors`` returns the live values without a copy (on the CPU).
    zero_copy_fetch: bool = False

    @property
    def devices(self) -> tuple[str, ...]:
        return ("cpu", "gpu") if self.gpu else ("cpu",)


class FrameworkExecutor(GraphExecutor):
    """Base class of every framework's executor. Override :meth:`make_live_network`, :meth:`run_inference`
    and :meth:`run_training`; this class checks the arguments (inputs against the graph's declared inputs,
    the loss name) and keeps the graph and the live state.

    Construction: ``executor.graph`` is a validated private copy of the network (the user's network is never
    changed), and ``executor.network`` the :class:`LiveNetwork` made by :meth:`make_live_network` from it.

    The duties of a training pass (:meth:`run_training`), which the contract test checks on every framework:

    1. **Read parameters at the start of every pass** from the live state: optimizers write them between
       passes with ``network.feed_tensor`` (and may replace the array or tensor, not only its contents).
    2. **Store gradients under the names** ``network.gradient(y)`` returns, one per trainable parameter, with
       the parameter's shape and dtype; zeros for a parameter ``y`` does not depend on.
    3. **Write back running statistics**: an operator's state updates (BatchNormalization's running mean and
       variance, see :meth:`d5.ops.CustomOp.state_updates`) go into the non-trainable parameters, so the next
       inference uses them.
    4. **Keep the other tensors of the pass** fetchable by name (the graph outputs at least).
    5. **Return the graph outputs** the inputs determine, as NumPy arrays.

    An inference pass (:meth:`run_inference`) reads parameters like a training pass and changes no state.
    """

    def __init__(self, network: Network, device: Any = None) -> None:
        if not isinstance(network, Network):
            raise GraphError(f"{type(self).__name__} runs a d5.Network, got {type(network).__name__}; import a model "
                             "with d5.load_onnx or wrap a native one with from_native")
        network.validate()
        graph = network.copy()
        super().__init__(graph, self.make_live_network(graph), device)

    @abc.abstractmethod
    def make_live_network(self, graph: Network) -> LiveNetwork:
        """The live state over the framework's tensors, initialized from ``graph``'s parameter values."""

    @abc.abstractmethod
    def run_inference(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Inference on checked inputs (arrays of the declared dtypes); see the class docstring."""

    @abc.abstractmethod
    def run_training(self, feeds: dict[str, Any], y: str) -> dict[str, np.ndarray]:
        """A training pass differentiating ``y``, with the duties listed in the class docstring."""

    def inference(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return self.run_inference(self.check_inputs(inputs))

    def inference_and_backprop(self, inputs: Mapping[str, Any], y: str = "loss") -> dict[str, np.ndarray]:
        y = self.check_loss_name(y)
        return self.run_training(self.check_inputs(inputs), y)

    # ------------------------------------------------------------------ random streams (checkpoints)
    def operators(self) -> dict[str, Any]:
        """The executor's operator object of each node, by node name (override: where the framework keeps them)."""
        return {}

    def random_state(self) -> dict[str, Any]:
        """The state of every random stream the executor draws from (Dropout masks...), as plain values and NumPy
        arrays, so a checkpoint restores them and a resumed run draws what an uninterrupted one would. By default
        the ``random_state()`` of each operator that has one, by node name.

        >>> from d5.frameworks import reference
        >>> import d5
        >>> reference.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2)).random_state()
        {'operators': {}}
        """
        return {"operators": {name: op.random_state() for name, op in self.operators().items()
                              if callable(getattr(op, "random_state", None))}}

    def set_random_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`random_state` returned (on an executor of the same network)."""
        operators = self.operators()
        saved = state.get("operators", {}) if isinstance(state, Mapping) else None
        if saved is None or set(saved) - set(operators):
            raise D5Error(f"random state for operators {sorted(set(saved or {}) - set(operators))} that this "
                          f"{type(self).__name__} does not have: it was saved from another network")
        for name, value in saved.items():
            setter = getattr(operators[name], "set_random_state", None)
            if setter is None:
                raise D5Error(f"node {name!r}: its operator keeps no random state here, but the saved state has one "
                              "(saved from another framework?)")
            setter(value)


#: Loss operators a framework's ``from_native`` accepts by name, with the dtype of the labels they take (None:
#: the model input's).
NATIVE_LOSSES = {"SoftmaxCrossEntropyLoss": "int64", "NegativeLogLikelihoodLoss": "int64", "MeanSquaredError": None}


def add_native_loss(network: Network, loss: Any, native_loss: Any, input_dtype: Any, label_dtype: Any,
                    accepts: str) -> None:
    """Give a ``from_native`` network input ``'label'`` and output ``'loss'`` computed from ``'output'``: ``loss``
    names a loss operator (:data:`NATIVE_LOSSES`), or ``native_loss`` (the framework's wrapping of ``loss`` as a
    d5 CustomOp, None when the framework cannot wrap it) computes it. ``accepts`` says, for the error, what the
    framework takes besides a name."""
    if isinstance(loss, str):
        if loss not in NATIVE_LOSSES:
            raise GraphError(f"from_native: unknown loss {loss!r}; name one of {sorted(NATIVE_LOSSES)} or pass "
                             f"{accepts}")
        network.add_input("label", None, NATIVE_LOSSES[loss] or input_dtype)
        network.add_node(loss, ["output", "label"], ["loss"], name="loss")
    elif native_loss is not None:
        network.add_input("label", None, label_dtype)
        network.add_custom_node(native_loss, ["output", "label"], ["loss"], name="loss")
    else:
        raise GraphError(f"from_native: loss must be a loss operator's name or {accepts}, got {type(loss).__name__}")
    network.add_output("loss")


def contract_violations(package: types.ModuleType) -> list[str]:
    """What ``package`` (a framework package, e.g. ``d5.frameworks.reference``) lacks or gets wrong of the
    contract: missing public names or module files, operator modules outside :data:`OPERATOR_CATEGORIES`, a
    CAPABILITIES that is not a :class:`Capabilities`. Empty when it complies."""
    problems = [f"{package.__name__} does not export {name!r} (every framework package must; see "
                f"d5.frameworks.base.REQUIRED_NAMES)" for name in REQUIRED_NAMES if not hasattr(package, name)]
    if hasattr(package, "CAPABILITIES") and not isinstance(package.CAPABILITIES, Capabilities):
        problems.append(f"{package.__name__}.CAPABILITIES is a {type(package.CAPABILITIES).__name__}, "
                        "not a d5.frameworks.base.Capabilities")
    root = pathlib.Path(package.__file__).parent
    problems += [f"{package.__name__} has no module file {name} (every framework package has the files of "
                 "d5.frameworks.base.REQUIRED_MODULES)" for name in REQUIRED_MODULES if not (root / name).is_file()]
    operators = root / "operators"
    if operators.is_dir():
        allowed = {f"{name}.py" for name in OPERATOR_CATEGORIES} | {"__init__.py"}
        problems += [f"{package.__name__}.operators has a module {path.name} that is not an operator category; use "
                     "one of d5.frameworks.base.OPERATOR_CATEGORIES, or a private name (_helpers.py) for support code"
                     for path in sorted(operators.glob("*.py")) if path.name not in allowed and not path.name.startswith("_")]
    for name in OPTIMIZER_NAMES:
        optimizer = getattr(package, name, None)
        if optimizer is not None and not isinstance(optimizer, type):
            problems.append(f"{package.__name__}.{name} must be an optimizer class, got {type(optimizer).__name__}")
    return problems


def check_framework(package: types.ModuleType) -> None:
    """Raise :class:`D5Error` listing every contract violation of ``package`` (see :func:`contract_violations`)."""
    problems = contract_violations(package)
    if problems:
        raise D5Error("framework package breaks the d5 framework contract:\n  " + "\n  ".join(problems))
