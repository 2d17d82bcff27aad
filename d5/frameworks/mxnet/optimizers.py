"""Native optimizers of the MXNet framework: the reference optimizers' update equations (``torch.optim``
semantics, :mod:`d5.training.optimizers`) written in MXNet NDArray operations, updating the parameters' NDArrays
where they live.

MXNet's own optimizers compute other equations than d5 promises: ``sgd_mom_update`` folds the learning rate into
the momentum buffer (``mom = momentum * mom - lr * grad``), so a changed rate rescales the history; its Adam keeps
epsilon outside the bias correction and has no AMSGrad; its AdaGrad no ``lr_decay``; ``Trainer.step(n)`` rescales
gradients by ``1/n``. So nothing here wraps them. Each optimizer holds (``optimizer.native``) its slots (Adam's
moments, the momentum buffer, ...) as one NDArray per parameter and slot, the hyper-parameters as Python floats
(MXNet's scalar operators take doubles: float64 networks compute in float64), and the flags of the slots the
reference creates lazily. The update is a few NDArray operations per parameter, in the reference's order, pushed to
MXNet's asynchronous engine: the step does not wait for them (the next pass reads the parameters after them).
Clipping by global norm reads the norm on the host (one wait), as ``torch.nn.utils.clip_grad_norm_`` does on the
CPU. Everything else (arguments and their checks, ``lr`` and its schedule, the divergence check before any update,
the state's d5 part) is :class:`d5.training.native_optimizer.NativeOptimizer`'s.

>>> import numpy as np, d5
>>> from d5.frameworks import mxnet as d5mx
>>> from d5.training.schedules import StepSchedule
>>> executor = d5mx.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
>>> sgd = MomentumOptimizer(executor, lr=StepSchedule(0.1, step_size=1, gamma=0.5), momentum=0.9)
>>> _ = sgd.step({"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])})
>>> sgd.lr, sgd.native.values["lr"]
(0.1, 0.1)
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

import mxnet as mx
import numpy as np

from d5.frameworks.mxnet.tensors import to_numpy
from d5.training import optimizers as d5_optimizers
from d5.training.native_optimizer import NativeOptimizer

#: ClipByGlobalNorm's (and torch.nn.utils.clip_grad_norm_'s) guard against a zero norm.
_NORM_EPSILON = 1e-6


class _State:
    """An MXNet optimizer's slots and values (``optimizer.native``)."""

    def __init__(self, params: list[mx.nd.NDArray], names: list[str], values: dict[str, Any],
                 slots: dict[str, list[mx.nd.NDArray]], flags: dict[str, bool]) -> None:
        #: The trainable parameters and their gradients' names (``trainable()`` order).
        self.params, self.names = params, names
        #: The hyper-parameters' values (Python), as pushed.
        self.values = values
        #: Per slot name, one NDArray per trainable parameter (``param_names`` order).
        self.slots = slots
        #: Whether a lazily created slot has started.
        self.flags = flags
        #: The parameters' positions by dtype, in chunks of at most _GROUP (MXNet's multi-tensor kernels).
        self.chunks = _chunks(tuple(np.dtype(param.dtype) for param in params))


class _MXOptimizer(NativeOptimizer):
    """The MXNet half of every native optimizer; a subclass names its ``reference`` and ``slot_names`` and writes
    :meth:`apply`."""

    framework = "mxnet"
    #: Per-parameter slots (one NDArray each, zeros at first).
    slot_names: ClassVar[tuple[str, ...]] = ()
    #: Per-optimizer flags (False at first): each names the slot it says has started.
    flag_names: ClassVar[tuple[str, ...]] = ()

    def make_native(self, hyperparameters: Mapping[str, Any]) -> _State:
        names, params = self.network.trainable()
        slots = {slot: [mx.nd.zeros(param.shape, ctx=param.context, dtype=param.dtype) for param in params]
                 for slot in self.slot_names}
        return _State(list(params), list(names), dict(hyperparameters), slots,
                      {flag: False for flag in self.flag_names})

    def push_hyperparameters(self, changed: Mapping[str, Any]) -> None:
        self.native.values.update(changed)

    def _gradients(self) -> list[mx.nd.NDArray]:
        passed = self.network._pass
        return [passed[name] for name in self.native.names]

    def clip_gradients(self, clip_value: float | None, clip_norm: float | None) -> None:
        """ClipByValue, then ClipByGlobalNorm, in place on the pass's gradients (as torch clips ``.grad``)."""
        with mx.util.np_shape(True):
            self._clip(self._gradients(), clip_value, clip_norm)

    @staticmethod
    def _clip(grads: list[mx.nd.NDArray], clip_value: float | None, clip_norm: float | None) -> None:
        if clip_value is not None:
            for grad in grads:
                mx.nd.clip(grad, -clip_value, clip_value, out=grad)
        if clip_norm is not None and grads:
            # torch's norm of the per-tensor norms (each in the gradient's dtype, then as float64), clamped factor
            norms = [float(to_numpy(mx.nd.sqrt(mx.nd.sum(mx.nd.square(grad))))) for grad in grads]
            total = math.sqrt(sum(norm * norm for norm in norms))
            factor = min(clip_norm / (total + _NORM_EPSILON), 1.0)
            for grad in grads:
                grad *= factor

    def apply_update(self) -> None:
        native = self.native
        with mx.util.np_shape(True):  # 0-d parameters are 0-d
            self.apply(native.values, self._spec.t, native.params, self._gradients())

    def native_state_dict(self) -> dict[str, Any]:
        """The slots as NumPy copies keyed by parameter name, and the flags."""
        native = self.native
        return {"state": {name: {slot: to_numpy(native.slots[slot][index]) for slot in self.slot_names}
                          for index, name in enumerate(self.param_names)},
                "flags": dict(native.flags)}

    def load_native_state_dict(self, state: Mapping[str, Any]) -> None:
        native = self.native
        entries, native.flags = self.saved_slots(state, self.slot_names, self.flag_names)
        for index, entry in enumerate(entries):
            for slot in self.slot_names:
                array = native.slots[slot][index]
                array._sync_copyfrom(np.ascontiguousarray(entry[slot], dtype=array.dtype))

    # -- what a subclass writes
    def apply(self, v: Mapping[str, Any], step: int, params: list[mx.nd.NDArray], grads: list[mx.nd.NDArray]) -> None:
        """Update the parameters and slots from the (clipped) gradients (``v``: the hyper-parameters; ``step``: the
        1-based step)."""
        for param, grad in zip(params, grads):
            _descend(param, v["lr"], _decayed(v, param, grad))


# ---------------------------------------------------------------- the pieces, as d5.training.gradient_transforms
def _decayed(v: Mapping[str, Any], param: mx.nd.NDArray, direction: mx.nd.NDArray) -> mx.nd.NDArray:
    """AddDecayedWeights: the L2 term added to the direction (where weight_decay is not 0)."""
    decay = v.get("weight_decay") or 0.0
    return direction if decay == 0 else direction + param * decay


def _descend(param: mx.nd.NDArray, lr: float, direction: mx.nd.NDArray) -> None:
    """ScaleByLearningRate, then the chain adds the parameter: ``p + d * -lr``."""
    param += direction * -lr


def _momentum(v: Mapping[str, Any], param: mx.nd.NDArray, buffer: mx.nd.NDArray, direction: mx.nd.NDArray,
              dampening: float = 0.0, started: bool = True, nesterov: bool = False) -> None:
    """The Momentum piece (torch.optim.SGD's buffer, started at the first direction; without dampening a buffer
    not started is zeros, so ``v * momentum + d`` is ``d`` there), then the descent."""
    momentum = v["momentum"]
    if not started:
        buffer[:] = direction  # torch starts the buffer at the direction itself, undampened
    elif dampening:
        buffer[:] = buffer * momentum + direction * (1.0 - dampening)
    else:
        buffer *= momentum
        buffer += direction
    _descend(param, v["lr"], direction + buffer * momentum if nesterov else buffer)


#: Weights per call of MXNet's multi-tensor SGD kernels (their parameter structs hold a fixed number).
_GROUP = 45


def _groups(chunks: list[list[int]], params: list[mx.nd.NDArray], *others: list[mx.nd.NDArray]):
    """(params, *others) in the ``chunks`` of :func:`_chunks` (one multi-tensor kernel call each)."""
    for chunk in chunks:
        yield [params[i] for i in chunk], *[[other[i] for i in chunk] for other in others]


def _chunks(dtypes: tuple[np.dtype, ...]) -> list[list[int]]:
    """The positions of the parameters of ``dtypes`` by dtype, in chunks of at most _GROUP."""
    by_dtype: dict[Any, list[int]] = {}
    for index, dtype in enumerate(dtypes):
        by_dtype.setdefault(dtype, []).append(index)
    return [indices[start:start + _GROUP] for indices in by_dtype.values()
            for start in range(0, len(indices), _GROUP)]


def _fusable(params: list[mx.nd.NDArray]) -> bool:
    """Whether MXNet's SGD kernels compute the reference's numbers for these parameters: they take the learning rate
    and weight decay as float32, which float32/16 parameters round them to anyway, but float64 ones would not."""
    return all(np.dtype(param.dtype) != np.float64 for param in params)


class GradientDescent(_MXOptimizer):
    """``p -= lr * (g + weight_decay * p)``: MXNet's ``multi_sgd_update`` (``w -= lr * (g + wd * w)``, the same
    equation), one kernel call for many parameters (float64 parameters: NDArray operations)."""

    reference = d5_optimizers.GradientDescent

    def apply(self, v, step, params, grads):
        if not _fusable(params):
            super().apply(v, step, params, grads)
            return
        lr, decay = v["lr"], v["weight_decay"] or 0.0
        for weights, gradients in _groups(self.native.chunks, params, grads):
            count = len(weights)
            mx.nd.multi_sgd_update(*[a for pair in zip(weights, gradients) for a in pair], lrs=(lr,) * count,
                                   wds=(decay,) * count, num_weights=count, out=weights)


class MomentumOptimizer(_MXOptimizer):
    """SGD with (Nesterov) momentum and dampening, ``torch.optim.SGD``'s equations (not MXNet's
    ``sgd_mom_update``, whose buffer holds the learning rate)."""

    reference = d5_optimizers.MomentumOptimizer
    slot_names, flag_names = ("velocity",), ("velocity",)

    def apply(self, v, step, params, grads):
        if v["momentum"] == 0:  # momentum 0 passes the direction through
            GradientDescent.apply(self, v, step, params, grads)
            return
        if not v["nesterov"] and not v["dampening"] and _fusable(params):
            self._fused(v, params, grads)
            return
        self._unfold()
        dampening = v["dampening"] or 0.0
        started = self.native.flags["velocity"] or not dampening
        for param, grad, buffer in zip(params, grads, self.native.slots["velocity"]):
            _momentum(v, param, buffer, _decayed(v, param, grad), dampening, started, bool(v["nesterov"]))
        self.native.flags["velocity"] = True


    def _fused(self, v, params, grads) -> None:
        """torch's equations on MXNet's ``multi_sgd_mom_update`` (``mom = momentum * mom - lr * (g + wd * w);
        w += mom``): its buffer is torch's velocity times ``-lr``, so where the rate changed since the buffer was
        last scaled the buffer is first rescaled to the new rate (one multiply); then the kernel computes
        ``-lr * (momentum * velocity + g + wd * w)`` and adds it to the weight, torch's step. A buffer not
        started is zeros, as torch's first step needs."""
        native, lr = self.native, v["lr"]
        buffers = native.slots["velocity"]
        scale = native.__dict__.get("scale")
        if scale is None:  # the buffers hold torch's velocity (a fresh or loaded state): to MXNet's form
            for buffer in buffers:
                buffer *= -lr
        elif scale != lr:
            for buffer in buffers:
                buffer *= lr / scale
        native.scale = lr
        momentum, decay = v["momentum"], v["weight_decay"] or 0.0
        for weights, gradients, moms in _groups(native.chunks, params, grads, buffers):
            count = len(weights)
            mx.nd.multi_sgd_mom_update(*[a for triple in zip(weights, gradients, moms) for a in triple],
                                       lrs=(lr,) * count, wds=(decay,) * count, momentum=momentum,
                                       num_weights=count, out=weights)
        native.flags["velocity"] = True

    def _unfold(self) -> None:
        """The buffers back in torch's form (the velocity) where the fused kernel left them in MXNet's."""
        scale = self.native.__dict__.pop("scale", None)
        if scale is not None:
            for buffer in self.native.slots["velocity"]:
                buffer /= -scale

    def native_state_dict(self) -> dict[str, Any]:
        self._unfold()
        return super().native_state_dict()

    def load_native_state_dict(self, state: Mapping[str, Any]) -> None:
        self.native.__dict__.pop("scale", None)
        super().load_native_state_dict(state)


class AdamOptimizer(_MXOptimizer):
    """Adam with ``torch.optim.Adam``'s equations (L2 weight decay, epsilon inside the bias correction, optional
    AMSGrad)."""

    reference = d5_optimizers.AdamOptimizer
    slot_names = ("first_moment", "second_moment", "max_second_moment")

    def apply(self, v, step, params, grads):
        beta1, beta2, lr, epsilon = v["beta1"], v["beta2"], v["lr"], v["epsilon"]
        correction1 = 1.0 - beta1 ** step
        correction2_sqrt = math.sqrt(1.0 - beta2 ** step)
        decoupled = self.reference.decoupled_weight_decay
        decay = v["weight_decay"] or 0.0
        slots = self.native.slots
        for index, (param, grad) in enumerate(zip(params, grads)):
            direction = grad if decoupled else _decayed(v, param, grad)
            first, second, largest = (slots[name][index] for name in self.slot_names)
            first[:] = first * beta1 + direction * (1.0 - beta1)
            second[:] = second * beta2 + mx.nd.square(direction) * (1.0 - beta2)
            average = second
            if v["amsgrad"]:
                mx.nd.broadcast_maximum(largest, second, out=largest)
                average = largest
            step_direction = first / (mx.nd.sqrt(average) / correction2_sqrt + epsilon) / correction1
            if decoupled and decay:
                param[:] = step_direction * -lr + param * (1.0 - lr * decay)
            else:
                _descend(param, lr, step_direction)


class AdamWOptimizer(AdamOptimizer):
    """Adam with decoupled weight decay, ``torch.optim.AdamW``'s equations."""

    reference = d5_optimizers.AdamWOptimizer


class AdaGradOptimizer(_MXOptimizer):
    """AdaGrad with ``torch.optim.Adagrad``'s equations (``lr_decay``, ``initial_accumulator_value``)."""

    reference = d5_optimizers.AdaGradOptimizer
    slot_names, flag_names = ("sum_of_squares",), ("sum_of_squares",)

    def apply(self, v, step, params, grads):
        decay = 1.0 + (max(step, 1) - 1) * v["lr_decay"]
        fill = not self.native.flags["sum_of_squares"]
        for param, grad, total in zip(params, grads, self.native.slots["sum_of_squares"]):
            direction = _decayed(v, param, grad)
            if fill:  # the sums start at initial_accumulator_value as it is at the first update
                total[:] = v["initial_accumulator_value"]
            total += mx.nd.square(direction)
            direction = direction / (mx.nd.sqrt(total) + v["epsilon"])
            if v["lr_decay"]:
                direction = direction / decay
            _descend(param, v["lr"], direction)
        self.native.flags["sum_of_squares"] = True


class RMSPropOptimizer(_MXOptimizer):
    """RMSProp with ``torch.optim.RMSprop``'s equations (``centered``, ``momentum``)."""

    reference = d5_optimizers.RMSPropOptimizer
    slot_names, flag_names = ("square_average", "gradient_average", "velocity"), ("velocity",)

    def apply(self, v, step, params, grads):
        alpha = v["alpha"]
        slots = self.native.slots
        for index, (param, grad) in enumerate(zip(params, grads)):
            direction = _decayed(v, param, grad)
            square = slots["square_average"][index]
            square[:] = square * alpha + mx.nd.square(direction) * (1.0 - alpha)
            mean_square = square
            if v["centered"]:
                mean = slots["gradient_average"][index]
                mean[:] = mean * alpha + direction * (1.0 - alpha)
                mean_square = square - mx.nd.square(mean)
            direction = direction / (mx.nd.sqrt(mean_square) + v["epsilon"])
            if v["momentum"]:
                _momentum(v, param, slots["velocity"][index], direction)
            else:
                _descend(param, v["lr"], direction)
        if v["momentum"]:
            self.native.flags["velocity"] = True


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
