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
import functools
import inspect
import os
import pathlib
import types
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from d5.errors import D5Error, GraphError, ShapeError
from d5.network.executor import GraphExecutor, LiveNetwork
from d5.network.graph import Network
from d5.ops.operator import CustomOp

#: Module files every framework package has, under these names (``diff -r`` between two framework packages
#: then shows only what truly differs). ``operators/`` maps ONNX operators to the framework's own; ``tensors.py``
#: converts values between NumPy and the framework; ``runtime.py`` is what framework-neutral code (devices, the
#: operator benchmarks) asks of the framework, through ``d5.frameworks.runtime(name)``; ``distributed.py`` holds
#: ``GradientBuckets``, the framework's half of :class:`d5.distributed.DataParallel` (its gradients in flat buckets).
REQUIRED_MODULES = ("__init__.py", "executor.py", "custom_op.py", "optimizers.py", "tensors.py", "runtime.py",
                    "distributed.py", "operators/__init__.py")

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


#: The values of every framework's ``fallback=``: how far d5 goes for a node the framework has no native
#: operator for. ``"none"``: nowhere (UnsupportedOperatorError when the executor is built); ``"reference"`` (the
#: default): d5's reference operator, through the framework's custom-op bridge (trainable; on the reference
#: framework itself there is nothing further to go); ``"onnx"``: as ``"reference"``, and operators d5 does not
#: implement at all run on onnx.reference (inference only). Booleans are accepted: ``True`` is ``"onnx"`` and
#: ``False`` ``"none"``. Every fallback is announced by one :class:`FallbackWarning` naming the operators.
#: Every framework's ``from_model`` and ``from_onnx`` take it keyword-only with this default.
FALLBACKS = ("none", "reference", "onnx")
DEFAULT_FALLBACK = "reference"


class FallbackWarning(UserWarning):
    """Some operators of a network do not run on the framework's own operators: they run on the reference
    framework through the custom-op bridge, or on onnx.reference (inference only). The message names them."""


def resolve_fallback(fallback: Any) -> str:
    """``fallback=`` as one of :data:`FALLBACKS`.

    >>> resolve_fallback(True), resolve_fallback(False), resolve_fallback("reference")
    ('onnx', 'none', 'reference')
    """
    if fallback is True or fallback is False:
        return "onnx" if fallback else "none"
    if fallback not in FALLBACKS:
        raise D5Error(f"fallback={fallback!r}: choose one of {list(FALLBACKS)} (True means 'onnx', False 'none')")
    return fallback




@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a framework can do, so callers (recipes, comparisons, the contract suite) ask instead of guessing.
    Every framework takes the same ``fallback=`` (:data:`d5.frameworks.native_executor.FALLBACKS`), so it is no
    capability.

    >>> Capabilities(gpu=False).devices
    ('cpu',)
    """

    #: Runs on GPUs (``device=d5.GPUDevice()``); read by the executors' device check and ``d5.best_device``.
    gpu: bool
    #: ``inference_and_backprop`` computes gradients (False: inference only); executors refuse training
    #: otherwise, and the contract suite checks the training duties only where it is true.
    trainable: bool = True
    #: Kinds of d5 custom operators ``custom_op`` accepts: ``"python"`` (every framework) and ``"cpp"`` (compiled
    #: with d5.ops.compile_cpp_op); ``custom_op`` refuses the others, and the contract suite trains each declared one.
    custom_ops: tuple[str, ...] = ("python",)
    #: ``executor.network.fetch_tensors`` returns the live values without a copy (on the CPU); the contract
    #: suite checks it where it is promised.
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

    #: The framework's name (``d5.frameworks.<framework>``): native optimizers refuse another framework's executor.
    framework: str = ""

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
        if not self._trainable:
            raise D5Error(f"the {self.framework} framework runs inference only (CAPABILITIES.trainable is False); "
                          "train on a framework that computes gradients, e.g. d5.frameworks.reference")
        return self.run_training(self.check_inputs(inputs), y)

    @property
    def capabilities(self) -> Capabilities:
        """The ``CAPABILITIES`` of this executor's framework package."""
        import importlib

        return importlib.import_module(f"d5.frameworks.{self.framework}").CAPABILITIES

    @functools.cached_property
    def _trainable(self) -> bool:  # read by every training step
        return self.capabilities.trainable

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


def from_onnx_of(from_model: Callable[..., FrameworkExecutor]) -> Callable[..., FrameworkExecutor]:
    """A framework's ``from_onnx``: :func:`d5.load_onnx`, then its ``from_model`` with the same keywords (so every
    framework reads ONNX files alike and takes the same ``device`` and ``fallback``)."""

    def from_onnx(source: str | os.PathLike | bytes | Any, *, device: Any = None, fallback: Any = DEFAULT_FALLBACK,
                  external_data_dir: str | os.PathLike | None = None, **options: Any) -> FrameworkExecutor:
        from d5.network.onnx_import import load_onnx

        return from_model(load_onnx(source, external_data_dir), device=device, fallback=fallback, **options)

    from_onnx.__module__ = from_model.__module__
    from_onnx.__doc__ = (f"An executor of the {from_model.__module__.rsplit('.', 1)[-1]} framework for an ONNX model (a "
                         "path, the file's bytes or an ``onnx.ModelProto``; ``external_data_dir``: where its external "
                         "tensors lie, default the file's directory): ``d5.load_onnx``, then ``from_model`` with "
                         "``device``, ``fallback`` and the framework's other options.")
    return from_onnx


class NativeModelOp(CustomOp):
    """Marks a ``from_native`` node computed by a user's own model (or loss) written for framework ``framework``:
    that framework's executor calls ``module`` with the node's inputs, and its parameters are the live state;
    ``loss_of`` is, for a loss, the model whose output it takes (named when the two do not fit, see
    :func:`loss_mismatch`). Any other framework refuses it."""

    def __init__(self, module: Any, framework: str, loss_of: Any = None) -> None:
        super().__init__()
        self.module, self.framework, self.loss_of = module, framework, loss_of

    def forward(self, inputs):
        raise D5Error(f"{callable_name(self.module)} is a {self.framework} model: run this network on the "
                      f"{self.framework} framework")


def callable_name(model: Any) -> str:
    """A model's or a loss's name for messages: a function's name, else its class's.

    >>> callable_name(len), callable_name(3.0)
    ('len', 'float')
    """
    name = getattr(model, "__name__", None)
    return name if isinstance(name, str) else type(model).__name__


def loss_mismatch(model: Any, loss: Any, output: str, label: str, err: BaseException) -> ShapeError:
    """The d5 error for a ``from_native`` loss that raised ``err`` on the model's output (``output`` and ``label``
    describe the values): the framework's own message names neither the model nor the loss."""
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return ShapeError(f"from_native: the output of {callable_name(model)} ({output}) does not fit the loss "
                      f"{callable_name(loss)} with label {label}: {reason}. Make the model output what the loss takes "
                      "(e.g. (N, classes) logits and (N,) int64 class labels for a cross-entropy loss), or pick "
                      "another loss")


def native_network(model: Any, model_op: Any, inputs: Mapping[str, Any], input_dtype: Any,
                   params: Iterable[tuple[str, Any, bool]], loss: Any, native_loss: Any, label_dtype: Any,
                   accepts: str, *, params_are_inputs: bool) -> Network:
    """The graph every ``from_native`` builds around a user's model: ``inputs`` (name -> shape, None: unknown) of
    ``input_dtype``, ``params`` as (name, value, trainable), one node ``'model'`` running ``model_op`` (the
    framework's CustomOp for ``model``; ``params_are_inputs``: it reads the parameters after the inputs, else they
    are its own) to output ``'output'``, and the loss of :func:`add_native_loss`."""
    network = Network(f"native_{type(model).__name__}")
    for name, shape in inputs.items():
        network.add_input(name, shape, input_dtype)
    names = []
    for name, value, trainable in params:
        network.add_param(name, value, trainable=trainable)
        names.append(name)
    network.add_custom_node(model_op, [*inputs, *names] if params_are_inputs else list(inputs), ["output"],
                            name="model")
    network.add_output("output")
    if loss is not None:
        add_native_loss(network, loss, native_loss, input_dtype, label_dtype, accepts)
    return network


def _signature_problems(package: types.ModuleType, name: str, first: str, keywords: Mapping[str, Any]) -> list[str]:
    """What is wrong with the signature of ``package.<name>``: its first parameter must be ``first`` and
    ``keywords`` (name -> default) keyword-only parameters with those defaults."""
    function = getattr(package, name, None)
    if not callable(function):
        return []
    where = f"{package.__name__}.{name}"
    parameters = inspect.signature(function).parameters
    problems = []
    if not parameters or next(iter(parameters)) != first:
        problems.append(f"{where} must take {first!r} as its first parameter, got {list(parameters)[:1]}")
    for keyword, default in keywords.items():
        parameter = parameters.get(keyword)
        if parameter is None or parameter.kind is not inspect.Parameter.KEYWORD_ONLY or parameter.default != default:
            problems.append(f"{where} must take keyword-only {keyword}={default!r} (as every framework does; see "
                            f"d5.frameworks.base.FALLBACKS), got {parameter if parameter is not None else 'nothing'}")
    return problems


#: What a framework's ``operators`` package exports (the framework's native operators by ONNX op type).
OPERATOR_EXPORTS = ("REGISTRY", "create_operator", "supported_operators")


def contract_violations(package: types.ModuleType) -> list[str]:
    """What ``package`` (a framework package, e.g. ``d5.frameworks.reference``) lacks or gets wrong of the
    contract: missing public names or module files, operator modules outside :data:`OPERATOR_CATEGORIES` or an
    ``operators`` package without :data:`OPERATOR_EXPORTS`, a CAPABILITIES that is not a :class:`Capabilities`,
    ``from_model``/``from_onnx`` without the shared keyword-only ``device`` and ``fallback``. Empty when it
    complies."""
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
    device_and_fallback = {"device": None, "fallback": DEFAULT_FALLBACK}
    problems += _signature_problems(package, "from_model", "network", device_and_fallback)
    problems += _signature_problems(package, "from_onnx", "source", {**device_and_fallback, "external_data_dir": None})
    if (root / "operators" / "__init__.py").is_file():
        import importlib

        try:
            operators = importlib.import_module(f"{package.__name__}.operators")
        except ImportError as err:
            problems.append(f"{package.__name__}.operators does not import: {err}")
        else:
            problems += [f"{package.__name__}.operators does not export {name!r} (see "
                         "d5.frameworks.base.OPERATOR_EXPORTS)" for name in OPERATOR_EXPORTS if not hasattr(operators, name)]
    return problems


def check_framework(package: types.ModuleType) -> None:
    """Raise :class:`D5Error` listing every contract violation of ``package`` (see :func:`contract_violations`)."""
    problems = contract_violations(package)
    if problems:
        raise D5Error("framework package breaks the d5 framework contract:\n  " + "\n  ".join(problems))
