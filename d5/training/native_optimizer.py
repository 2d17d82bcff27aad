"""L2: the one base of every framework's native optimizers (``d5.frameworks.<fw>.MomentumOptimizer``, ...).

A native optimizer updates the parameters where the framework keeps them, with the framework's own optimizer,
under the name, signature, hyper-parameters and update equations of a reference optimizer
(:mod:`d5.training.optimizers`, ``torch.optim`` semantics). Everything but the update is written once, here:

- the constructor takes exactly the reference class's arguments and builds a *detached* reference optimizer
  from them, so every hyper-parameter check is the reference's own and cannot drift; that detached optimizer
  then holds the hyper-parameters (``optimizer.momentum`` reads and writes it) and ``lr`` with its schedule;
- a native optimizer refuses an executor of another framework (:class:`d5.errors.D5Error` naming both);
- ``step``: check the batch, advance the schedule, forward and backward pass, the divergence check (before any
  update), the ``gradient_hook`` if one is set (DataParallel's averaging), clipping, then the native update;
- ``state_dict``/``load_state_dict``: the d5 part (kind, steps, hyper-parameters, parameter shapes) and the
  checks that refuse another optimizer's or network's state; the framework adds its native state.

A framework writes only the hooks (see :class:`NativeOptimizer`) in one class of a few dozen lines, then one
two-line class per optimizer (``d5/frameworks/pytorch/optimizers.py``)::

    class MomentumOptimizer(_TorchOptimizer):
        reference, torch_class = d5.training.optimizers.MomentumOptimizer, torch.optim.SGD

The framework's optimizer must follow the reference's equations, whatever its library's own conventions (Keras
decouples weight decay and keeps epsilon outside the bias correction; Keras and MXNet fold the learning rate into
the momentum buffer): ``tests/frameworks/test_contract_optimizers.py`` compares every framework's native
optimizers with the reference ones step by step, with the learning rate changed at every step.
"""
from __future__ import annotations

import abc
import inspect
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from d5.errors import CheckpointError, D5Error
from d5.training.dataset import check_batch
from d5.training.gradient_transforms import ScaleByLearningRate
from d5.training.optimizer import Optimizer, check_hyperparameter, check_state
from d5.training.optimizers import ChainOptimizer


class NativeOptimizer(Optimizer):
    """Base class of the framework optimizers. A subclass names ``reference`` (the class of
    :mod:`d5.training.optimizers` it mirrors: its constructor signature is taken from there) and ``framework``
    (the ``framework`` of the executors it accepts, e.g. ``"pytorch"``), and overrides the hooks:

    ==========================================  ===========================================================
    ``make_native(hyperparameters)``            build the framework's optimizer (stored as ``self.native``)
    ``push_hyperparameters(changed)``           pass hyper-parameters set since to the native optimizer
    ``clip_gradients(clip_value, clip_norm)``   clip the stored gradients (by value, then by global norm)
    ``apply_update()``                          update the parameters from the gradients of the pass
    ``native_state_dict()``                     the native optimizer's state as plain data (NumPy arrays)
    ``load_native_state_dict(state)``           restore it from what ``native_state_dict`` returned
    ==========================================  ===========================================================

    ``hyperparameters()`` are the reference's (``lr`` and e.g. ``momentum``, ``nesterov``, ``clip_norm``);
    ``param_names`` lists the network's trainable parameters in the order of ``get_params()``.
    """

    #: The reference optimizer this one mirrors (its signature, checks, hyper-parameters and equations).
    reference: ClassVar[type[ChainOptimizer]]
    #: The framework whose executors this optimizer accepts (``d5.frameworks.base.FrameworkExecutor.framework``).
    framework: ClassVar[str]
    #: Called with no arguments after the divergence check and before clipping, when set: where
    #: :class:`d5.distributed.DataParallel` averages the gradients over the ranks. A class attribute, so an
    #: unwrapped optimizer's step pays one attribute load (no ``__getattr__``) and a None test.
    gradient_hook: Callable[[], None] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        reference = cls.__dict__.get("reference")
        if reference is None or "__init__" in cls.__dict__:
            return  # an intermediate base, or a class that writes its own constructor
        if not (isinstance(reference, type) and issubclass(reference, ChainOptimizer)):
            raise TypeError(f"{cls.__name__}.reference must be an optimizer class of d5.training.optimizers (a "
                            f"ChainOptimizer), got {reference!r}")

        def __init__(self: NativeOptimizer, *args: Any, **kwargs: Any) -> None:
            NativeOptimizer.__init__(self, *args, **kwargs)

        # The reference's signature, so help(), inspect and IDEs show the real arguments and their defaults.
        __init__.__signature__ = inspect.signature(reference.__init__)  # type: ignore[attr-defined]
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        __init__.__doc__ = f"Takes the arguments of d5.training.optimizers.{reference.__name__}, which checks them."
        cls.__init__ = __init__  # type: ignore[method-assign]

    def __init__(self, executor: Any, *args: Any, **kwargs: Any) -> None:
        # Every check of the arguments is the reference's: the detached reference optimizer raises what it raises.
        spec = self.reference(None, *args, **kwargs)
        super().__init__(None, spec.loss, spec.check_divergence)
        self._spec = spec
        self._names = frozenset(spec.hyperparameters())
        self._rate = next(piece for piece in spec.pieces if isinstance(piece, ScaleByLearningRate))
        #: (piece, attribute) holding clip_value and clip_norm (read every step without the alias lookup).
        self._clipping = (spec._aliases["clip_value"], spec._aliases["clip_norm"])
        self._check_executor(executor)
        self.executor, self.network = executor, executor.network
        #: The trainable parameters, in the order the framework's optimizer holds them; and their shapes.
        self.param_names = list(self.network.get_params())
        self.param_shapes = {name: tuple(np.shape(value))
                             for name, value in zip(self.param_names, self.network.fetch_tensors(self.param_names))}
        self.native = self.make_native(self.hyperparameters())

    def _check_executor(self, executor: Any) -> None:
        other = getattr(executor, "framework", None)
        if other == self.framework and getattr(executor, "network", None) is not None:
            return
        got = "None" if executor is None else f"a {other or 'non-framework'} executor ({type(executor).__name__})"
        raise D5Error(f"{type(self).__name__} is the {self.framework} framework's native optimizer; it needs a "
                      f"{self.framework} executor (d5.frameworks.{self.framework}.from_model), got {got}. d5's "
                      f"framework-neutral optimizers (d5.{self.reference.__name__}, ...) work on any executor")

    # -- the hooks a framework writes
    @abc.abstractmethod
    def make_native(self, hyperparameters: Mapping[str, Any]) -> Any:
        """The framework's optimizer over ``self.network``'s parameters, with these hyper-parameters."""

    @abc.abstractmethod
    def push_hyperparameters(self, changed: Mapping[str, Any]) -> None:
        """Give the native optimizer the hyper-parameters in ``changed`` (set since the last push; ``lr`` at every
        step of a schedule). Called at once, so a step itself passes nothing; ``hyperparameters()`` has them all."""

    @abc.abstractmethod
    def clip_gradients(self, clip_value: float | None, clip_norm: float | None) -> None:
        """Clip the gradients of the pass: each entry to ``[-clip_value, clip_value]``, then all of them together to
        a global norm of at most ``clip_norm`` (``torch.nn.utils.clip_grad_norm_``'s factor); None is off."""

    @abc.abstractmethod
    def apply_update(self) -> None:
        """Update the parameters from the gradients of the pass, with the reference's equations."""

    @abc.abstractmethod
    def native_state_dict(self) -> dict[str, Any]:
        """The native optimizer's state as plain data (NumPy arrays, numbers, str, lists, dicts with str keys);
        merged into :meth:`state_dict`, so its keys must not be the d5 part's."""

    @abc.abstractmethod
    def load_native_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`native_state_dict` returned (``state`` is the whole :meth:`state_dict`)."""

    def saved_slots(self, state: Mapping[str, Any], slot_names: tuple[str, ...], flag_names: tuple[str, ...]
                    ) -> tuple[list[dict[str, Any]], dict[str, bool]]:
        """The per-parameter slots (one dict per parameter, ``param_names`` order, each with every slot of
        ``slot_names``) and the flags of a framework's slot state as its ``native_state_dict`` wrote it
        (``{"state": {param: {slot: array}}, "flags": {flag: bool}}``); a CheckpointError naming what is missing
        otherwise. Frameworks whose optimizers keep one array per parameter and slot (TensorFlow, MXNet) read
        their states with it."""
        name = type(self).__name__
        saved, flags = state.get("state"), state.get("flags")
        if not isinstance(saved, Mapping) or not isinstance(flags, Mapping) or set(flags) != set(flag_names):
            raise CheckpointError(f"{name}.load_state_dict: the state has no {self.framework} optimizer state of a "
                                  f"{name} (its 'state' and 'flags'); restore the state_dict() of the same optimizer")
        entries = []
        for param in self.param_names:
            entry = saved.get(param, {})
            missing = [slot for slot in slot_names if slot not in entry]
            if missing:
                raise CheckpointError(f"{name}.load_state_dict: the state of parameter {param!r} lacks {missing}; "
                                      "restore the state_dict() of the same optimizer")
            entries.append(entry)
        return entries, {flag: bool(value) for flag, value in flags.items()}

    # -- hyper-parameters: held by the detached reference optimizer
    @property
    def lr(self) -> float:  # type: ignore[override]
        """The learning rate of the coming step (setting a float replaces a schedule; setting a schedule follows it
        from the next step on)."""
        return self._spec.lr

    @property
    def lr_schedule(self) -> Any:
        """The schedule ``lr`` follows, or None."""
        return self._spec.lr_schedule

    def __getattr__(self, name: str) -> Any:  # only reached when normal lookup fails
        names = self.__dict__.get("_names") or ()
        if name in names:
            return getattr(self._spec, name)
        raise AttributeError(f"{type(self).__name__!s} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in (self.__dict__.get("_names") or ()):
            setattr(self._spec, name, value)  # through the reference (lr: checked, a schedule followed)
            if "native" in self.__dict__:
                self.push_hyperparameters({name: getattr(self._spec, name)})
        else:
            super().__setattr__(name, value)

    def hyperparameters(self) -> dict[str, Any]:
        """The hyper-parameters by name (what a schedule or an event may set): the reference optimizer's."""
        return self._spec.hyperparameters()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.hyperparameters().items())})"

    # -- the step
    def begin_step(self, inputs: Mapping[str, np.ndarray]) -> None:
        """What a step does before the pass: check the batch (a refused batch changes nothing), count the step and
        set this step's scheduled ``lr``. A framework that overrides :meth:`step` (to fuse the pass and the update)
        calls it first, then :meth:`finish_step` with the outputs."""
        check_batch(inputs, f"{type(self).__name__}.step")
        spec = self._spec
        if self._rate.schedule is None:
            # What new_input() does that matters here, the reference's step count, without its per-piece calls
            # and attribute hooks: Python between torch's kernels runs cold, and a LeNet-5 step showed it.
            vars(spec)["t"] += 1
        else:
            spec.new_input()  # the step count, and the schedule's lr for this step
            self.push_hyperparameters({"lr": spec.lr})

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.begin_step(inputs)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        self.finish_step(outputs)  # raises on a NaN loss before any parameter changes
        hook = self.gradient_hook
        if hook is not None:
            hook()
        (by_value, value_key), (by_norm, norm_key) = self._clipping
        clip_value, clip_norm = getattr(by_value, value_key), getattr(by_norm, norm_key)
        if clip_value is not None or clip_norm is not None:
            self.clip_gradients(clip_value, clip_norm)
        self.apply_update()
        return outputs

    # -- the state protocol
    def state_dict(self) -> dict[str, Any]:
        """The native state, the d5 hyper-parameters, the step counts and the parameters' shapes."""
        return {"optimizer": type(self).__name__, "steps": self.steps, "t": self._spec.t,
                "lr_scheduled": self.lr_schedule is not None, "hyperparameters": self.hyperparameters(),
                "parameters": {name: list(shape) for name, shape in self.param_shapes.items()},
                **self.native_state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, exactly; refuses (CheckpointError) another optimizer's state,
        another network's, and a scheduled run's state into an optimizer without the schedule."""
        name = type(self).__name__
        state = check_state(self, state, "optimizer")
        current = {param: list(shape) for param, shape in self.param_shapes.items()}
        saved = {param: [int(n) for n in shape] for param, shape in state["parameters"].items()}
        if saved != current:
            different = sorted(set(saved) ^ set(current)) or [n for n in saved if saved[n] != current[n]]
            raise CheckpointError(f"{name}.load_state_dict: the state is of other parameters (first differences: "
                                  f"{different[:3]}); restore it into an optimizer of the network it was saved from")
        if state["lr_scheduled"] and self.lr_schedule is None:
            raise CheckpointError(f"{name}.load_state_dict: the saved optimizer followed a learning-rate schedule but "
                                  "this one has a constant lr; construct it with the same schedule")
        hyperparameters = dict(state["hyperparameters"])
        unknown = sorted(set(hyperparameters) - self._names)
        if unknown:
            raise CheckpointError(f"{name}.load_state_dict: the state has hyper-parameters {unknown} that a {name} "
                                  "lacks; restore it into the optimizer it was saved from")
        steps = int(state["steps"])
        self._spec.t = int(state.get("t", steps))  # states saved before "t" existed: the same count
        if state["lr_scheduled"]:  # the schedule stays; lr is the rate of the saved run's latest step
            self._rate.lr = check_hyperparameter("lr", hyperparameters.pop("lr"))
        for key, value in hyperparameters.items():
            setattr(self._spec, key, value)  # a float lr replaces the schedule, as in the saved run
        self.load_native_state_dict(state)
        self.steps = steps
        self.push_hyperparameters(self.hyperparameters())


__all__ = ["NativeOptimizer"]
