"""L2: gradient transformations -- the small pieces d5's optimizers are chained from (in the spirit of Optax).

A piece turns the incoming *direction* of one parameter (at first its gradient) into a new one, keeping its own
per-parameter state::

    state = piece.init(param)                                    # when the parameter is first seen
    direction, state = piece.update(direction, state, param, step)   # once per step

:class:`d5.training.optimizers.ChainOptimizer` runs its pieces left to right and adds the last direction to the
parameter (so the step size enters as :class:`ScaleByLearningRate`, which multiplies by ``-lr``). ``step`` is
the 1-based number of the optimizer step under way (the ``t`` of the papers' equations).

Rules for writing a piece (they keep a step cheap and a checkpoint exact):

- ``direction`` is the chain's own working buffer, in the parameter's dtype: a piece may change it in place and
  return it. It must not change ``param``, and must not return an array it keeps (its state).
- Its state is a dict of NumPy arrays (or numbers) it may change in place; it is what a checkpoint saves.
- Its hyper-parameters are plain attributes named in ``hyperparameter_names``; they are read at every step, so
  an event may change them between steps.
- A piece that needs all parameters at once (global-norm clipping) says so with ``needs_all_gradients``; the
  chain then calls ``observe(directions, params, step)`` with every parameter's incoming direction before it
  calls ``update`` for any of them.
- ``begin_step(step)`` is called once at the start of each step (a learning-rate schedule advances there).
- ``parameter_scale(lr, step)`` is the factor the parameter itself is multiplied by before the direction is
  added (1 but for :class:`DecoupledWeightDecay`).

The chains of d5's optimizers (coupled L2 decay goes before the moments, decoupled decay after them):

=================  ================================================================================
GradientDescent    AddDecayedWeights, ScaleByLearningRate
MomentumOptimizer  AddDecayedWeights, Momentum, ScaleByLearningRate
AdamOptimizer      AddDecayedWeights, ScaleByAdam, ScaleByLearningRate
AdamWOptimizer     ScaleByAdam, DecoupledWeightDecay, ScaleByLearningRate
AdaGradOptimizer   AddDecayedWeights, ScaleByAdaGrad, ScaleByLearningRate
RMSPropOptimizer   AddDecayedWeights, ScaleByRMSProp, Momentum, ScaleByLearningRate
LARSOptimizer      ScaleByLARSTrustRatio, ScaleByLearningRate, Momentum
LAMBOptimizer      ScaleByAdam, AddDecayedWeights, ScaleByLAMBTrustRatio, ScaleByLearningRate
=================  ================================================================================

each preceded by ClipByValue and ClipByGlobalNorm (off unless ``clip_value``/``clip_norm`` is given).

>>> import numpy as np
>>> piece = Momentum(momentum=0.5)
>>> state = piece.init(np.zeros(1))
>>> direction, state = piece.update(np.array([1.0]), state, np.zeros(1), step=1)
>>> direction, state = piece.update(np.array([1.0]), state, np.zeros(1), step=2)
>>> direction
array([1.5])
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from d5.errors import D5Error, InvalidHyperparameterError
from d5.training.optimizer import check_hyperparameter, is_schedule, learning_rate_at

State = dict  # a piece's per-parameter state: {name: ndarray | number | None}


class GradientTransform:
    """Base class of the pieces (see the module docs for the rules). The default ``update`` passes the
    direction through unchanged.

    >>> import numpy as np
    >>> class Sign(GradientTransform):
    ...     def update(self, direction, state, param, step):
    ...         return np.sign(direction, out=direction), state
    >>> Sign().update(np.array([-3.0, 2.0]), {}, np.zeros(2), step=1)[0]
    array([-1.,  1.])
    """

    #: The attributes that configure the piece (saved with an optimizer's state, shown by ``repr``).
    hyperparameter_names: tuple[str, ...] = ()

    def init(self, param: np.ndarray) -> State:
        """The state of a parameter seen for the first time (its value is ``param``)."""
        return {}

    def update(self, direction: np.ndarray, state: State, param: np.ndarray, step: int) -> tuple[np.ndarray, State]:
        """Return the new direction and state of one parameter at 1-based step ``step``."""
        return direction, state

    def begin_step(self, step: int) -> None:
        """Called once at the start of step ``step`` (1-based), before any parameter is updated."""

    @property
    def needs_all_gradients(self) -> bool:
        """True when :meth:`observe` must see every parameter's direction before any ``update`` of this step."""
        return False

    def observe(self, directions: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray], step: int) -> None:
        """See every parameter's incoming direction (by name) once per step, before the updates."""

    def parameter_scale(self, lr: float, step: int) -> float:
        """The factor the parameter is multiplied by before the chain's direction is added (1: unchanged)."""
        return 1.0

    def hyperparameters(self) -> dict[str, Any]:
        """The piece's hyper-parameters by name."""
        return {name: getattr(self, name) for name in self.hyperparameter_names}

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in self.hyperparameters().items())
        return f"{type(self).__name__}({fields})"


def _norm(array: np.ndarray) -> float:
    """The Euclidean norm of all of ``array``'s entries, as a Python float."""
    return float(np.linalg.norm(array.reshape(-1)))


class ClipByValue(GradientTransform):
    """Clip every entry to ``[-max_value, max_value]`` (``torch.nn.utils.clip_grad_value_``); ``None`` is off.

    >>> import numpy as np
    >>> ClipByValue(1.0).update(np.array([-3.0, 0.5, 2.0]), {}, np.zeros(3), step=1)[0]
    array([-1. ,  0.5,  1. ])
    """

    hyperparameter_names = ("max_value",)

    def __init__(self, max_value: float | None) -> None:
        self.max_value = None if max_value is None else check_hyperparameter("clip_value", max_value)

    def update(self, direction, state, param, step):
        if self.max_value is not None:
            np.clip(direction, -self.max_value, self.max_value, out=direction)
        return direction, state


class ClipByGlobalNorm(GradientTransform):
    """Scale all directions together so that their joint Euclidean norm is at most ``max_norm``, exactly as
    ``torch.nn.utils.clip_grad_norm_`` does over all parameters: factor ``min(1, max_norm / (norm + 1e-6))``.
    ``None`` is off. ``last_norm`` is the joint norm seen at the latest step (before clipping).

    >>> import numpy as np
    >>> clip = ClipByGlobalNorm(1.0)
    >>> directions = {'a': np.array([3.0]), 'b': np.array([4.0])}
    >>> clip.observe(directions, {'a': np.zeros(1), 'b': np.zeros(1)}, step=1)
    >>> clip.last_norm, clip.update(directions['a'], {}, np.zeros(1), step=1)[0].round(6)
    (5.0, array([0.6]))
    """

    hyperparameter_names = ("max_norm",)

    def __init__(self, max_norm: float | None) -> None:
        self.max_norm = None if max_norm is None else check_hyperparameter("clip_norm", max_norm)
        self.last_norm: float | None = None
        self._factor = 1.0
        self._observed_step: int | None = None

    @property
    def needs_all_gradients(self) -> bool:
        return self.max_norm is not None

    def observe(self, directions, params, step):
        # torch: the norm of the per-tensor norms, and a clamped coefficient that multiplies every gradient
        total = math.sqrt(sum(_norm(direction) ** 2 for direction in directions.values()))
        self.last_norm = total
        self._factor = min(self.max_norm / (total + 1e-6), 1.0) if self.max_norm is not None else 1.0
        self._observed_step = step

    def update(self, direction, state, param, step):
        if self.max_norm is None:
            return direction, state
        if self._observed_step != step:
            raise D5Error("ClipByGlobalNorm needs the norm over all parameters, but this step's gradients were not "
                          "shown to it: call optimizer.prepare_gradients(gradients, params) once per step, after "
                          "new_input() and before update_rule() (ThreeStepOptimizer.step does this)")
        if self._factor != 1.0:
            direction *= self._factor
        return direction, state


class AddDecayedWeights(GradientTransform):
    """Add ``weight_decay * param`` to the direction. Placed before the moments it is the L2 penalty of
    ``torch.optim.SGD``/``Adam`` (``weight_decay=``); placed after them it is a decoupled decay (LAMB's ``u = r +
    weight_decay * w``; for AdamW's exact arithmetic use :class:`DecoupledWeightDecay`).

    >>> import numpy as np
    >>> AddDecayedWeights(0.1).update(np.array([1.0]), {}, np.array([2.0]), step=1)[0]
    array([1.2])
    """

    hyperparameter_names = ("weight_decay",)

    def __init__(self, weight_decay: float = 0.0) -> None:
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)

    def update(self, direction, state, param, step):
        if self.weight_decay:
            direction += self.weight_decay * param
        return direction, state


class DecoupledWeightDecay(GradientTransform):
    """Decoupled weight decay (Loshchilov & Hutter 2019, AdamW): the parameter is multiplied by
    ``1 - lr * weight_decay`` before the chain's direction is added, in ``torch.optim.AdamW``'s order, whatever
    the other pieces do to the gradient. Its place in the chain does not matter; the direction passes through.

    >>> DecoupledWeightDecay(0.1).parameter_scale(lr=0.5, step=1)
    0.95
    """

    hyperparameter_names = ("weight_decay",)

    def __init__(self, weight_decay: float = 0.01) -> None:
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)

    def parameter_scale(self, lr: float, step: int) -> float:
        return 1.0 - lr * self.weight_decay


class Momentum(GradientTransform):
    """Heavy-ball or Nesterov momentum with ``torch.optim.SGD`` semantics: ``v = momentum * v + (1 - dampening)
    * d`` (``v = d`` at the first step); the new direction is ``v``, or ``d + momentum * v`` with
    ``nesterov=True``. ``momentum=0`` passes the direction through.

    >>> import numpy as np
    >>> Momentum(0.9, nesterov=True).update(np.array([1.0]), {}, np.zeros(1), step=1)[0]
    array([1.9])
    """

    hyperparameter_names = ("momentum", "dampening", "nesterov")

    def __init__(self, momentum: float = 0.9, dampening: float = 0.0, nesterov: bool = False) -> None:
        self.momentum = check_hyperparameter("momentum", momentum)
        self.dampening = check_hyperparameter("dampening", dampening, high=1.0)
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise InvalidHyperparameterError(
                f"Nesterov momentum needs momentum > 0 and dampening == 0 (got momentum={momentum}, "
                f"dampening={dampening}); set them, or pass nesterov=False")

    def update(self, direction, state, param, step):
        if not self.momentum:
            return direction, state
        velocity = state.get("velocity")
        if velocity is None:
            # torch starts the buffer at the direction itself (undampened), not at (1 - dampening) * direction
            velocity = state["velocity"] = direction.copy()
        else:
            velocity *= self.momentum
            if self.dampening:
                velocity += (1.0 - self.dampening) * direction
            else:
                velocity += direction
        if self.nesterov:
            direction += velocity * self.momentum
        else:
            np.copyto(direction, velocity)  # never hand out the state itself: later pieces scale in place
        return direction, state


class ScaleByAdam(GradientTransform):
    """Adam's moments (Kingma & Ba) with ``torch.optim.Adam`` semantics: ``m`` and ``v`` are exponential
    averages of ``d`` and ``d**2``, and the direction becomes ``m_hat / (sqrt(v_hat) + epsilon)`` with the bias
    corrections ``1 - beta**step``; ``amsgrad=True`` uses the running maximum of ``v`` (Reddi et al. 2018).

    >>> import numpy as np
    >>> adam = ScaleByAdam()
    >>> adam.update(np.array([3.0]), adam.init(np.zeros(1)), np.zeros(1), step=1)[0].round(6)
    array([1.])
    """

    hyperparameter_names = ("beta1", "beta2", "epsilon", "amsgrad")

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, amsgrad: bool = False) -> None:
        self.beta1 = check_hyperparameter("beta1", beta1, high=1.0, high_inclusive=False)
        self.beta2 = check_hyperparameter("beta2", beta2, high=1.0, high_inclusive=False)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.amsgrad = bool(amsgrad)

    def init(self, param):
        return {"first_moment": np.zeros_like(param), "second_moment": np.zeros_like(param)}

    def update(self, direction, state, param, step):
        if step < 1:
            raise InvalidHyperparameterError(
                "Adam's moments were updated before new_input(); call new_input() once per step (ThreeStepOptimizer"
                ".step does) so the bias correction uses the right step")
        m, v = state["first_moment"], state["second_moment"]
        m *= self.beta1
        m += (1.0 - self.beta1) * direction
        v *= self.beta2
        v += (1.0 - self.beta2) * np.square(direction)
        if self.amsgrad:
            v_max = state.get("max_second_moment")
            if v_max is None:
                v_max = state["max_second_moment"] = np.zeros_like(v)
            np.maximum(v_max, v, out=v_max)
            v = v_max
        bias_correction1 = 1.0 - self.beta1 ** step
        bias_correction2_sqrt = (1.0 - self.beta2 ** step) ** 0.5
        denominator = np.sqrt(v, out=direction)  # the gradient is spent: its buffer holds the result
        denominator /= bias_correction2_sqrt
        denominator += self.epsilon
        np.divide(m, denominator, out=direction)
        direction /= bias_correction1
        return direction, state


class ScaleByAdaGrad(GradientTransform):
    """AdaGrad (Duchi et al. 2011) with ``torch.optim.Adagrad`` semantics: ``s += d**2``, direction
    ``d / (sqrt(s) + epsilon) / (1 + (step - 1) * lr_decay)``.

    >>> import numpy as np
    >>> adagrad = ScaleByAdaGrad()
    >>> adagrad.update(np.array([4.0]), adagrad.init(np.zeros(1)), np.zeros(1), step=1)[0].round(6)
    array([1.])
    """

    hyperparameter_names = ("epsilon", "initial_accumulator_value", "lr_decay")

    def __init__(self, epsilon: float = 1e-10, initial_accumulator_value: float = 0.0, lr_decay: float = 0.0) -> None:
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.initial_accumulator_value = check_hyperparameter("initial_accumulator_value", initial_accumulator_value)
        self.lr_decay = check_hyperparameter("lr_decay", lr_decay)

    def init(self, param):
        return {"sum_of_squares": np.full_like(param, self.initial_accumulator_value)}

    def update(self, direction, state, param, step):
        accumulator = state["sum_of_squares"]
        accumulator += np.square(direction)
        scale = np.sqrt(accumulator)
        scale += self.epsilon
        np.divide(direction, scale, out=direction)
        if self.lr_decay:
            direction /= 1.0 + (max(step, 1) - 1) * self.lr_decay
        return direction, state


class ScaleByRMSProp(GradientTransform):
    """RMSProp (Hinton) with ``torch.optim.RMSprop`` semantics: ``s = alpha * s + (1 - alpha) * d**2`` and the
    direction ``d / (sqrt(s) + epsilon)``; ``centered=True`` subtracts the squared running mean of ``d`` from
    ``s`` first. (torch's RMSprop momentum is a :class:`Momentum` piece after this one.)

    >>> import numpy as np
    >>> rmsprop = ScaleByRMSProp(alpha=0.0)
    >>> rmsprop.update(np.array([2.0]), rmsprop.init(np.zeros(1)), np.zeros(1), step=1)[0].round(6)
    array([1.])
    """

    hyperparameter_names = ("alpha", "epsilon", "centered")

    def __init__(self, alpha: float = 0.99, epsilon: float = 1e-8, centered: bool = False) -> None:
        self.alpha = check_hyperparameter("alpha", alpha, high=1.0)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.centered = bool(centered)

    def init(self, param):
        return {"square_average": np.zeros_like(param)}

    def update(self, direction, state, param, step):
        square_average = state["square_average"]
        square_average *= self.alpha
        square_average += (1.0 - self.alpha) * np.square(direction)
        if self.centered:
            gradient_average = state.get("gradient_average")
            if gradient_average is None:  # created when first needed: `centered` may be switched on later
                gradient_average = state["gradient_average"] = np.zeros_like(param)
            gradient_average *= self.alpha
            gradient_average += (1.0 - self.alpha) * direction
            denominator = np.subtract(square_average, np.square(gradient_average), out=np.empty_like(param))
            np.sqrt(denominator, out=denominator)
        else:
            denominator = np.sqrt(square_average)
        denominator += self.epsilon
        np.divide(direction, denominator, out=direction)
        return direction, state


class ScaleByLearningRate(GradientTransform):
    """Multiply by ``-lr``: the step size, and the one place a chain's learning rate acts. ``lr`` is a float or
    a schedule (``lr(step - 1)`` is used at 1-based step ``step``; see :mod:`d5.training.schedules`).

    >>> import numpy as np
    >>> from d5.training.schedules import StepSchedule
    >>> scale = ScaleByLearningRate(StepSchedule(1.0, step_size=1, gamma=0.5))
    >>> scale.begin_step(2)
    >>> scale.lr, scale.update(np.array([1.0]), {}, np.zeros(1), step=2)[0]
    (0.5, array([-0.5]))
    """

    hyperparameter_names = ("lr",)

    def __init__(self, lr: float | Callable[[int], float]) -> None:
        self.schedule: Callable[[int], float] | None = None
        self.set_lr(lr)

    def set_lr(self, lr: float | Callable[[int], float], step: int = 0) -> None:
        """Set a constant rate (dropping any schedule), or follow a schedule from 0-based step ``step`` on."""
        # Checked before anything changes: a refused value leaves the rate and its schedule as they were.
        if is_schedule(lr):
            self.lr, self.schedule = learning_rate_at(lr, step), lr
        else:
            self.lr, self.schedule = check_hyperparameter("lr", lr), None

    def begin_step(self, step: int) -> None:
        if self.schedule is not None:
            self.lr = learning_rate_at(self.schedule, step - 1)

    def update(self, direction, state, param, step):
        np.multiply(direction, -self.lr, out=direction)
        return direction, state


class ScaleByLARSTrustRatio(GradientTransform):
    """LARS's layer-wise rate (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks",
    Algorithm 1): the direction becomes ``trust * (d + weight_decay * w)`` with the local rate
    ``trust = trust_coefficient * |w| / (|d| + weight_decay * |w|)`` per parameter tensor (1 where ``|w|`` or
    ``|d|`` is 0, e.g. a bias initialised to zero).

    >>> import numpy as np
    >>> lars = ScaleByLARSTrustRatio(trust_coefficient=0.1)
    >>> lars.update(np.array([0.0, 2.0]), {}, np.array([3.0, 4.0]), step=1)[0]    # trust = 0.1 * 5 / 2
    array([0. , 0.5])
    """

    hyperparameter_names = ("trust_coefficient", "weight_decay")

    def __init__(self, trust_coefficient: float = 0.001, weight_decay: float = 0.0) -> None:
        self.trust_coefficient = check_hyperparameter("trust_coefficient", trust_coefficient)
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)

    def update(self, direction, state, param, step):
        param_norm, direction_norm = _norm(param), _norm(direction)
        trust = 1.0
        if param_norm > 0 and direction_norm > 0:
            trust = self.trust_coefficient * param_norm / (direction_norm + self.weight_decay * param_norm)
        if self.weight_decay:
            direction += self.weight_decay * param
        direction *= trust
        return direction, state


class ScaleByLAMBTrustRatio(GradientTransform):
    """LAMB's layer-wise trust ratio (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT
    in 76 minutes", Algorithm 2, with phi the identity): the direction ``u`` becomes ``|w| / |u| * u`` per
    parameter tensor (1 where ``|w|`` or ``|u|`` is 0).

    >>> import numpy as np
    >>> ScaleByLAMBTrustRatio().update(np.array([3.0, 4.0]), {}, np.array([0.0, 10.0]), step=1)[0]
    array([6., 8.])
    """

    def update(self, direction, state, param, step):
        param_norm, direction_norm = _norm(param), _norm(direction)
        if param_norm > 0 and direction_norm > 0:
            direction *= param_norm / direction_norm
        return direction, state


__all__ = ["AddDecayedWeights", "ClipByGlobalNorm", "ClipByValue", "DecoupledWeightDecay", "GradientTransform",
           "Momentum", "ScaleByAdaGrad",
           "ScaleByAdam", "ScaleByLAMBTrustRatio", "ScaleByLARSTrustRatio", "ScaleByLearningRate", "ScaleByRMSProp"]
