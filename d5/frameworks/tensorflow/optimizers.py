"""Native optimizers of the TensorFlow framework: the reference optimizers' update equations (``torch.optim``
semantics, :mod:`d5.training.optimizers`) written in TensorFlow operations, updating the ``tf.Variable`` parameters
where they live.

Keras's optimizers compute several of the configurations d5 promises otherwise (their weight decay is decoupled,
epsilon sits outside Adam's bias correction, the learning rate is folded into the momentum buffer, no dampening,
AdaGrad has no ``lr_decay``), so nothing here wraps them. Each optimizer holds (``optimizer.native``):

- its hyper-parameters' VALUES as scalar float64 ``tf.Variable`` s, assigned when an attribute or the schedule
  changes one: a new value retraces nothing;
- its slots (Adam's moments, the momentum buffer, ...) as one ``tf.Variable`` per parameter and slot, and, in
  Python, the flags of the slots the reference creates lazily (the momentum buffer starts at the first direction,
  AdaGrad's sums at ``initial_accumulator_value`` as it is at the first update);
- one update function per STRUCTURE: what is known in Python when a step starts -- clipping on or off, nesterov,
  amsgrad, centered, which of weight_decay, momentum, dampening, lr_decay are zero, whether a lazy slot has
  started where that changes the equations. Each computes only what its structure needs (no global norm without
  clipping, no weight-decay multiply at 0, no ``tf.cond`` on a flag Python knows); a change of structure (rare)
  traces anew, a change of value does not.

A step is ONE traced function: the executor's ``train_and_update`` runs the pass and the structure's update
together (skipped on a non-finite loss, so a diverging step changes nothing). With a ``gradient_hook``
(:class:`d5.distributed.DataParallel`, which averages between the pass and the update) the update is a traced
function of its own, called after the hook.

Scalars are computed in float64 and cast to each parameter's dtype where they meet a tensor, as NumPy does with
the reference's Python floats; the operations come in the reference's order (TensorFlow's fused
``ResourceApplyGradientDescent``/``ResourceApplyMomentum`` kernels where they compute the same equations), so
float64 runs agree to rounding. Everything else (arguments and their checks, ``lr`` and its schedule, the state's
d5 part) is :class:`d5.training.native_optimizer.NativeOptimizer`'s.

>>> import numpy as np, d5
>>> from d5.frameworks import tensorflow as d5tf
>>> from d5.training.schedules import StepSchedule
>>> executor = d5tf.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
>>> sgd = MomentumOptimizer(executor, lr=StepSchedule(0.1, step_size=1, gamma=0.5), clip_norm=1.0)
>>> _ = sgd.step({"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])})
>>> sgd.lr, float(sgd.native.hyper["lr"].numpy())
(0.1, 0.1)
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import tensorflow as tf

from d5.training import optimizers as d5_optimizers
from d5.training.native_optimizer import NativeOptimizer

#: Hyper-parameters that are structure only (booleans): no variable holds them.
_BOOLEAN = frozenset({"nesterov", "amsgrad", "centered"})
#: ClipByGlobalNorm's (and torch.nn.utils.clip_grad_norm_'s) guard against a zero norm.
_NORM_EPSILON = 1e-6
#: Dtypes TensorFlow's fused ResourceApply* kernels take on every device.
_FUSED = frozenset({tf.float16, tf.float32, tf.float64})
#: What a hyper-parameter not pushed yet holds (no value equals it).
_UNSET = object()
#: Tells the optimizers' update plans apart in an executor they share.
_TOKENS = itertools.count()


class _Entry:
    """One structure's update: ``update(grads, *arguments)`` (traced by the executor inside its step), and the
    traced function of its own the unfused step calls (built at its first use)."""

    __slots__ = ("structure", "update", "plan_key", "needs_step", "starts", "function", "signature")

    def __init__(self, structure: dict[str, bool], update: Callable[..., None], plan_key: Any, needs_step: bool,
                 starts: tuple[str, ...], signature: list[Any]) -> None:
        self.structure, self.update, self.plan_key = structure, update, plan_key
        #: Whether the update takes the step number (a float64 scalar tensor) after the gradients.
        self.needs_step = needs_step
        #: The flags a completed update of this structure sets.
        self.starts = starts
        self.function: Any = None
        self.signature = signature + ([tf.TensorSpec((), tf.float64)] if needs_step else [])


class _State:
    """A TensorFlow optimizer's variables and its update functions (``optimizer.native``)."""

    def __init__(self, params: list[tf.Variable], names: list[str], hyper: dict[str, tf.Variable],
                 values: dict[str, Any], slots: dict[str, list[tf.Variable]], flags: dict[str, bool]) -> None:
        #: The trainable variables and their gradients' names (``trainable()`` order).
        self.params, self.names = params, names
        #: Hyper-parameter variables (float64) by d5 name; the booleans have none (they are structure).
        self.hyper = hyper
        #: The hyper-parameters' values as pushed (Python): what the structure is computed from.
        self.values = values
        #: Per slot name, one variable per trainable parameter (``param_names`` order).
        self.slots = slots
        #: Per-optimizer flags (Python bools): whether a lazily created slot has started.
        self.flags = flags
        #: The updates built, by structure key; and the current structure's (None: recompute it).
        self.entries: dict[tuple, _Entry] = {}
        self.current: _Entry | None = None
        self.token = next(_TOKENS)


class _Hyper:
    """The scalars of one trace: each hyper-parameter variable read once (float64, only if used), scalars derived
    from them defined once, and each cast to a parameter's dtype made once per dtype."""

    def __init__(self, variables: Mapping[str, tf.Variable]) -> None:
        self.variables = variables
        self.values: dict[str, tf.Tensor] = {}
        self.casts: dict[tuple[str, Any], tf.Tensor] = {}

    def __getitem__(self, name: str) -> tf.Tensor:
        value = self.values.get(name)
        if value is None:
            value = self.values[name] = self.variables[name].read_value()
        return value

    def define(self, name: str, value: tf.Tensor) -> None:
        self.values[name] = value

    def at(self, name: str, dtype: tf.DType) -> tf.Tensor:
        """The scalar ``name`` in ``dtype`` (NumPy casts the reference's Python floats so)."""
        cast = self.casts.get((name, dtype))
        if cast is None:
            cast = self.casts[name, dtype] = tf.cast(self[name], dtype)
        return cast


class _TFOptimizer(NativeOptimizer):
    """The TensorFlow half of every native optimizer; a subclass names its ``reference`` and ``slot_names``, and
    writes :meth:`structure` and :meth:`apply` (and :meth:`starts`, :meth:`needs_step` where it has lazy slots or
    reads the step)."""

    framework = "tensorflow"
    #: Per-parameter slots (one tf.Variable each, zeros at first).
    slot_names: ClassVar[tuple[str, ...]] = ()
    #: Per-optimizer flags (False at first): each names the slot it says has started.
    flag_names: ClassVar[tuple[str, ...]] = ()

    # -- the hooks of NativeOptimizer
    def make_native(self, hyperparameters: Mapping[str, Any]) -> _State:
        network = self.network
        names, params = network.trainable()
        with tf.device(network.device):
            hyper = {name: tf.Variable(0.0 if value is None else float(value), dtype=tf.float64, trainable=False)
                     for name, value in hyperparameters.items() if name not in _BOOLEAN}
            slots = {slot: [tf.Variable(tf.zeros(param.shape, param.dtype), trainable=False) for param in params]
                     for slot in self.slot_names}
        return _State(list(params), list(names), hyper, dict(hyperparameters), slots,
                      {flag: False for flag in self.flag_names})

    def push_hyperparameters(self, changed: Mapping[str, Any]) -> None:
        native = self.native
        values, hyper = native.values, native.hyper
        for name, value in changed.items():
            old = values.get(name, _UNSET)
            if old == value and (old is None) == (value is None) and type(old) is type(value):
                continue  # a schedule's unchanged rate: no assignment
            values[name] = value
            if name != "lr":
                native.current = None  # the structure may have changed
            variable = hyper.get(name)
            if variable is not None and value is not None:
                variable.assign(float(value))

    def clip_gradients(self, clip_value: float | None, clip_norm: float | None) -> None:
        """Nothing here: clipping is the first part of the update function (in its structure), so a step runs one
        function."""

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The pass and the update in one traced function (the executor's ``train_and_update``); with a
        ``gradient_hook``, NativeOptimizer's step (pass, hook, update)."""
        if self.gradient_hook is not None:
            return super().step(inputs)
        self.begin_step(inputs)
        entry = self.native.current or self._entry()
        arguments = (tf.constant(float(self._spec.t), tf.float64),) if entry.needs_step else ()
        outputs = self.executor.train_and_update(inputs, self.loss, entry.update, entry.plan_key, arguments)
        self.finish_step(outputs)  # a non-finite loss raises here: the executor skipped the update
        if not (self.check_divergence and self.loss in outputs) and not _finite(self.network._pass[self.loss]):
            # a non-finite loss let through (check_divergence=False): the update the executor skipped runs, as the
            # reference's step would run it
            self._run(entry, arguments)
        self._started(entry)
        return outputs

    def apply_update(self) -> None:
        entry = self.native.current or self._entry()
        self._run(entry, (tf.constant(float(self._spec.t), tf.float64),) if entry.needs_step else ())
        self._started(entry)

    def native_state_dict(self) -> dict[str, Any]:
        """The slots as NumPy copies keyed by parameter name, and the flags."""
        native = self.native
        return {"state": {name: {slot: native.slots[slot][index].numpy() for slot in self.slot_names}
                          for index, name in enumerate(self.param_names)},
                "flags": dict(native.flags)}

    def load_native_state_dict(self, state: Mapping[str, Any]) -> None:
        native = self.native
        entries, flags = self.saved_slots(state, self.slot_names, self.flag_names)
        for index, entry in enumerate(entries):
            for slot in self.slot_names:
                variable = native.slots[slot][index]
                started = flags.get(slot, True)
                # a slot not started is zeros (the fused kernels start the momentum buffer from there)
                value = entry[slot] if started else np.zeros(variable.shape)
                variable.assign(np.asarray(value, dtype=variable.dtype.as_numpy_dtype))
        native.flags = flags
        native.current = None

    # -- the structures
    def _entry(self) -> _Entry:
        """The current structure's update, built at its first use."""
        native = self.native
        structure = self.structure(native.values, native.flags)
        key = tuple(structure.items())
        entry = native.entries.get(key)
        if entry is None:
            params = native.params

            def update(grads: list[tf.Tensor], *arguments: tf.Tensor) -> None:
                h = _Hyper(native.hyper)
                grads = _clip(structure, h, [tf.cast(grad, param.dtype) for grad, param in zip(grads, params)])
                self.apply(structure, h, arguments[0] if arguments else None, params, grads)

            entry = native.entries[key] = _Entry(
                structure, update, (native.token, key), self.needs_step(structure), self.starts(structure),
                [[tf.TensorSpec(param.shape, param.dtype) for param in params]])
        native.current = entry
        return entry

    def _run(self, entry: _Entry, arguments: tuple[tf.Tensor, ...]) -> None:
        """The update alone, from the gradients of the pass (or what DataParallel fed back)."""
        if entry.function is None:
            update = entry.update
            entry.function = tf.function(lambda grads, *arguments: update(grads, *arguments),
                                         input_signature=entry.signature, autograph=False, reduce_retracing=False)
        native, passed = self.native, self.network._pass
        with tf.device(self.network.device):
            entry.function([passed[name] for name in native.names], *arguments)

    def _started(self, entry: _Entry) -> None:
        flags = self.native.flags
        for flag in entry.starts:
            if not flags[flag]:
                flags[flag] = True
                self.native.current = None

    # -- what a subclass writes
    def structure(self, v: Mapping[str, Any], flags: Mapping[str, bool]) -> dict[str, bool]:
        """What the update computes, from the hyper-parameters' values ``v`` and the slots' ``flags``."""
        return {"clip_value": v["clip_value"] is not None, "clip_norm": v["clip_norm"] is not None,
                "weight_decay": v["weight_decay"] != 0}

    def needs_step(self, s: Mapping[str, bool]) -> bool:
        """Whether structure ``s``'s update reads the step number."""
        return False

    def starts(self, s: Mapping[str, bool]) -> tuple[str, ...]:
        """The flags an update of structure ``s`` sets."""
        return ()

    def apply(self, s: Mapping[str, bool], h: _Hyper, step: tf.Tensor | None, params: list[tf.Variable],
              grads: list[tf.Tensor]) -> None:
        """Assign the parameters and slots from the (clipped) gradients, for structure ``s`` (``h``: the
        hyper-parameters; ``step``: the 1-based step, float64, where :meth:`needs_step`)."""
        for param, grad in zip(params, grads):
            _descend(param, h.at("lr", param.dtype), _decayed(s, h, param, grad))


# ---------------------------------------------------------------- the pieces, as d5.training.gradient_transforms
def _finite(loss: Any) -> bool:
    return bool(np.isfinite(np.asarray(loss)).all())


def _clip(s: Mapping[str, bool], h: _Hyper, grads: list[tf.Tensor]) -> list[tf.Tensor]:
    """ClipByValue, then ClipByGlobalNorm (each where the structure has it)."""
    if s["clip_value"]:
        grads = [tf.clip_by_value(grad, -h.at("clip_value", grad.dtype), h.at("clip_value", grad.dtype))
                 for grad in grads]
    if s["clip_norm"] and grads:
        # torch's norm of the per-tensor norms (each in the gradient's dtype, then as float64), clamped factor
        norms = [tf.cast(tf.sqrt(tf.reduce_sum(tf.square(grad))), tf.float64) for grad in grads]
        total = tf.sqrt(tf.add_n([tf.square(norm) for norm in norms]))
        h.define("clip_factor", tf.minimum(h["clip_norm"] / (total + _NORM_EPSILON), 1.0))
        grads = [grad * h.at("clip_factor", grad.dtype) for grad in grads]
    return grads


def _decayed(s: Mapping[str, bool], h: _Hyper, param: tf.Variable, direction: tf.Tensor) -> tf.Tensor:
    """AddDecayedWeights: the L2 term added to the direction (where weight_decay is not 0)."""
    if not s["weight_decay"]:
        return direction
    return direction + h.at("weight_decay", param.dtype) * param.read_value()


def _descend(param: tf.Variable, lr: tf.Tensor, direction: tf.Tensor) -> None:
    """ScaleByLearningRate, then the chain adds the parameter: ``p + d * -lr`` (``p - lr * d``, the same float)."""
    if param.dtype in _FUSED:
        tf.raw_ops.ResourceApplyGradientDescent(var=param.handle, alpha=lr, delta=direction)
    else:
        param.assign_add(direction * -lr)


def _momentum(s: Mapping[str, bool], h: _Hyper, param: tf.Variable, buffer: tf.Variable, direction: tf.Tensor,
              dampening: bool = False, started: bool = True) -> None:
    """The Momentum piece (torch.optim.SGD's buffer, started at the first direction), then the descent. Without
    dampening a buffer not started is zeros, so ``v * momentum + d`` is ``d`` there: TensorFlow's fused kernel
    (``accum = accum * momentum + grad``, ``var -= lr * accum``; Nesterov ``var -= grad * lr + accum * momentum
    * lr``) computes the equations of every step."""
    dtype = param.dtype
    nesterov = s.get("nesterov", False)
    if not dampening and dtype in _FUSED:
        tf.raw_ops.ResourceApplyMomentum(var=param.handle, accum=buffer.handle, lr=h.at("lr", dtype), grad=direction,
                                         momentum=h.at("momentum", dtype), use_nesterov=nesterov)
        return
    momentum = h.at("momentum", dtype)
    if not started:
        velocity = direction  # torch starts the buffer at the direction itself, undampened
    elif dampening:
        velocity = buffer.read_value() * momentum + h.at("kept", dtype) * direction
    else:
        velocity = buffer.read_value() * momentum + direction
    buffer.assign(velocity)
    _descend(param, h.at("lr", dtype), direction + velocity * momentum if nesterov else velocity)


class GradientDescent(_TFOptimizer):
    """``p -= lr * (g + weight_decay * p)``."""

    reference = d5_optimizers.GradientDescent


class MomentumOptimizer(_TFOptimizer):
    """SGD with (Nesterov) momentum and dampening, ``torch.optim.SGD``'s equations."""

    reference = d5_optimizers.MomentumOptimizer
    slot_names, flag_names = ("velocity",), ("velocity",)

    def structure(self, v, flags):
        on = v["momentum"] != 0
        dampening = on and v["dampening"] != 0
        return {**super().structure(v, flags), "momentum": on, "nesterov": on and bool(v["nesterov"]),
                "dampening": dampening, "started": dampening and flags["velocity"]}

    def starts(self, s):
        return ("velocity",) if s["momentum"] else ()

    def apply(self, s, h, step, params, grads):
        if not s["momentum"]:  # momentum 0 passes the direction through
            super().apply(s, h, step, params, grads)
            return
        if s["dampening"]:
            h.define("kept", 1.0 - h["dampening"])
        for param, grad, buffer in zip(params, grads, self.native.slots["velocity"]):
            _momentum(s, h, param, buffer, _decayed(s, h, param, grad), s["dampening"],
                      started=s["started"] or not s["dampening"])


class AdamOptimizer(_TFOptimizer):
    """Adam with ``torch.optim.Adam``'s equations (L2 weight decay, epsilon inside the bias correction,
    optional AMSGrad)."""

    reference = d5_optimizers.AdamOptimizer
    slot_names = ("first_moment", "second_moment", "max_second_moment")

    def structure(self, v, flags):
        return {**super().structure(v, flags), "amsgrad": bool(v["amsgrad"])}

    def needs_step(self, s):
        return True

    def apply(self, s, h, step, params, grads):
        beta1, beta2 = h["beta1"], h["beta2"]
        h.define("1-beta1", 1.0 - beta1)
        h.define("1-beta2", 1.0 - beta2)
        h.define("bias_correction1", 1.0 - tf.pow(beta1, step))
        h.define("bias_correction2_sqrt", tf.sqrt(1.0 - tf.pow(beta2, step)))
        decoupled = self.reference.decoupled_weight_decay and s["weight_decay"]
        if decoupled:
            h.define("scale", 1.0 - h["lr"] * h["weight_decay"])  # AdamW: p * (1 - lr * weight_decay) + the step
        slots = self.native.slots
        for index, (param, grad) in enumerate(zip(params, grads)):
            dtype = param.dtype
            direction = grad if self.reference.decoupled_weight_decay else _decayed(s, h, param, grad)
            first, second, largest = (slots[name][index] for name in self.slot_names)
            m = first.read_value() * h.at("beta1", dtype) + h.at("1-beta1", dtype) * direction
            v = second.read_value() * h.at("beta2", dtype) + h.at("1-beta2", dtype) * tf.square(direction)
            first.assign(m)
            second.assign(v)
            if s["amsgrad"]:
                v = tf.maximum(largest.read_value(), v)
                largest.assign(v)
            denominator = tf.sqrt(v) / h.at("bias_correction2_sqrt", dtype) + h.at("epsilon", dtype)
            direction = m / denominator / h.at("bias_correction1", dtype)
            if decoupled:
                param.assign(direction * -h.at("lr", dtype) + param.read_value() * h.at("scale", dtype))
            else:
                _descend(param, h.at("lr", dtype), direction)


class AdamWOptimizer(AdamOptimizer):
    """Adam with decoupled weight decay, ``torch.optim.AdamW``'s equations."""

    reference = d5_optimizers.AdamWOptimizer


class AdaGradOptimizer(_TFOptimizer):
    """AdaGrad with ``torch.optim.Adagrad``'s equations (``lr_decay``, ``initial_accumulator_value``)."""

    reference = d5_optimizers.AdaGradOptimizer
    slot_names, flag_names = ("sum_of_squares",), ("sum_of_squares",)

    def structure(self, v, flags):
        # the sums start at initial_accumulator_value as it is at the first update (the reference's init); at 0
        # that is the zeros they hold
        return {**super().structure(v, flags), "lr_decay": v["lr_decay"] != 0,
                "fill": not flags["sum_of_squares"] and v["initial_accumulator_value"] != 0}

    def needs_step(self, s):
        return s["lr_decay"]

    def starts(self, s):
        return ("sum_of_squares",)

    def apply(self, s, h, step, params, grads):
        if s["lr_decay"]:
            h.define("decay", 1.0 + (tf.maximum(step, 1.0) - 1.0) * h["lr_decay"])
        for param, grad, accumulator in zip(params, grads, self.native.slots["sum_of_squares"]):
            dtype = param.dtype
            direction = _decayed(s, h, param, grad)
            if s["fill"]:
                total = tf.fill(tf.shape(param), h.at("initial_accumulator_value", dtype)) + tf.square(direction)
            else:
                total = accumulator.read_value() + tf.square(direction)
            accumulator.assign(total)
            direction = direction / (tf.sqrt(total) + h.at("epsilon", dtype))
            if s["lr_decay"]:
                direction = direction / h.at("decay", dtype)
            _descend(param, h.at("lr", dtype), direction)


class RMSPropOptimizer(_TFOptimizer):
    """RMSProp with ``torch.optim.RMSprop``'s equations (``centered``, ``momentum``)."""

    reference = d5_optimizers.RMSPropOptimizer
    slot_names, flag_names = ("square_average", "gradient_average", "velocity"), ("velocity",)

    def structure(self, v, flags):
        return {**super().structure(v, flags), "centered": bool(v["centered"]), "momentum": v["momentum"] != 0}

    def starts(self, s):
        return ("velocity",) if s["momentum"] else ()

    def apply(self, s, h, step, params, grads):
        h.define("1-alpha", 1.0 - h["alpha"])
        slots = self.native.slots
        for index, (param, grad) in enumerate(zip(params, grads)):
            dtype = param.dtype
            alpha, rest = h.at("alpha", dtype), h.at("1-alpha", dtype)
            direction = _decayed(s, h, param, grad)
            square = slots["square_average"][index]
            mean_square = square.read_value() * alpha + rest * tf.square(direction)
            square.assign(mean_square)
            if s["centered"]:
                mean = slots["gradient_average"][index]
                average = mean.read_value() * alpha + rest * direction
                mean.assign(average)
                mean_square = mean_square - tf.square(average)
            direction = direction / (tf.sqrt(mean_square) + h.at("epsilon", dtype))
            if s["momentum"]:
                _momentum(s, h, param, slots["velocity"][index], direction)
            else:
                _descend(param, h.at("lr", dtype), direction)


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
