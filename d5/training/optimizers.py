"""L2: the framework-neutral reference optimizers, written once in NumPy.

Each follows the update equations of its ``torch.optim`` namesake exactly (same defaults, same order of
operations, weight decay added to the gradient as an L2 term), so a d5 run and a PyTorch run of the
same model can be compared step by step; ``tests/training/test_optimizers.py`` checks this.

All of them work on any executor, because they only use the ThreeStepOptimizer hooks. With
``executor=None`` they are detached update rules:

>>> import numpy as np
>>> sgd = MomentumOptimizer(None, lr=0.1, momentum=0.9)
>>> sgd.new_input()
>>> sgd.update_rule(np.array([1.0]), np.array([0.0]), 'w')
array([-0.1])
"""
from __future__ import annotations

from typing import Any

import numpy as np

from d5.training.optimizer import InvalidHyperparameterError, UpdateRuleOptimizer, check_hyperparameter

# Note on memory: update rules must not modify ``grad``/``old_param`` (they may be live executor
# buffers), so each rule allocates the new parameter once and updates its own state in place.


def _descend(old_param: np.ndarray, lr: float, direction: np.ndarray) -> np.ndarray:
    """``old_param - lr * direction`` with one allocation, keeping the parameter's dtype."""
    # out= keeps 0-d parameters as arrays (NumPy would otherwise return a scalar)
    new_param = np.multiply(direction, -lr, out=np.empty_like(old_param))
    new_param += old_param
    return new_param


def _with_weight_decay(grad: np.ndarray, old_param: np.ndarray, weight_decay: float) -> np.ndarray:
    """``grad + weight_decay * old_param`` (PyTorch's L2 weight decay); ``grad`` itself when it is 0."""
    if not weight_decay:
        return grad
    decayed = np.multiply(old_param, weight_decay, out=np.empty_like(old_param, dtype=np.result_type(grad, old_param)))
    decayed += grad
    return decayed


class _ReferenceOptimizer(UpdateRuleOptimizer):
    """Shared constructor: validates ``lr`` and ``weight_decay`` and stores them."""

    def __init__(self, executor: Any, lr: float, loss: str, weight_decay: float, check_divergence: bool) -> None:
        super().__init__(executor, loss, check_divergence)
        self.lr = check_hyperparameter("lr", lr)
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lr={self.lr!r}, weight_decay={self.weight_decay!r})"


class GradientDescent(_ReferenceOptimizer):
    """Plain (stochastic) gradient descent: ``p -= lr * (g + weight_decay * p)`` (``torch.optim.SGD``).

    >>> import numpy as np
    >>> GradientDescent(None, lr=0.5).update_rule(np.array([2.0]), np.array([1.0]), 'w')
    array([0.])
    """

    def __init__(self, executor: Any, lr: float = 0.01, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, loss, weight_decay, check_divergence)

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        return _descend(old_param, self.lr, _with_weight_decay(grad, old_param, self.weight_decay))


class MomentumOptimizer(_ReferenceOptimizer):
    """SGD with (Nesterov) momentum, with ``torch.optim.SGD`` semantics.

    ``v = momentum * v + (1 - dampening) * g`` (``v = g`` on the first step); the step direction is
    ``v``, or ``g + momentum * v`` with ``nesterov=True``; then ``p -= lr * direction``.

    >>> import numpy as np
    >>> opt = MomentumOptimizer(None, lr=1.0, momentum=0.5)
    >>> p = opt.update_rule(np.array([1.0]), np.array([0.0]), 'w')   # v = 1
    >>> opt.update_rule(np.array([1.0]), p, 'w')                      # v = 1.5
    array([-2.5])
    """

    def __init__(self, executor: Any, lr: float = 0.01, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", weight_decay: float = 0.0, dampening: float = 0.0,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, loss, weight_decay, check_divergence)
        self.momentum = check_hyperparameter("momentum", momentum)
        self.dampening = check_hyperparameter("dampening", dampening, high=1.0)
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise InvalidHyperparameterError(
                f"Nesterov momentum needs momentum > 0 and dampening == 0 (got momentum={momentum}, "
                f"dampening={dampening}); set them, or pass nesterov=False")
        self.velocity: dict[str, np.ndarray] = {}

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        grad = _with_weight_decay(grad, old_param, self.weight_decay)
        if not self.momentum:
            return _descend(old_param, self.lr, grad)
        velocity = self.velocity.get(param_name)
        if velocity is None:
            # PyTorch starts the buffer at g itself (undampened), not at (1 - dampening) * g
            velocity = self.velocity[param_name] = np.array(grad, dtype=old_param.dtype, copy=True)
        else:
            velocity *= self.momentum
            if self.dampening:
                velocity += (1.0 - self.dampening) * grad
            else:
                velocity += grad
        if self.nesterov:
            direction = np.multiply(velocity, self.momentum, out=np.empty_like(old_param))
            direction += grad
            return _descend(old_param, self.lr, direction)
        return _descend(old_param, self.lr, velocity)


class AdamOptimizer(_ReferenceOptimizer):
    """Adam (Kingma & Ba) with ``torch.optim.Adam`` semantics (L2 weight decay, bias correction).

    The step counter ``t`` advances in ``new_input()``, once per step for all parameters.

    >>> import numpy as np
    >>> adam = AdamOptimizer(None, lr=0.1)
    >>> adam.new_input()
    >>> adam.update_rule(np.array([3.0]), np.array([1.0]), 'w').round(6)   # first step moves by ~lr
    array([0.9])
    """

    def __init__(self, executor: Any, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, loss, weight_decay, check_divergence)
        self.beta1 = check_hyperparameter("beta1", beta1, high=1.0, high_inclusive=False)
        self.beta2 = check_hyperparameter("beta2", beta2, high=1.0, high_inclusive=False)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.t = 0
        self.first_moment: dict[str, np.ndarray] = {}
        self.second_moment: dict[str, np.ndarray] = {}

    def new_input(self) -> None:
        self.t += 1

    def _decay_param(self, old_param: np.ndarray) -> tuple[np.ndarray, float]:
        """Hook for decoupled weight decay (AdamW); Adam folds decay into the gradient instead."""
        return old_param, self.weight_decay

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        if self.t == 0:
            raise InvalidHyperparameterError(
                f"{type(self).__name__}.update_rule() was called before new_input(); call new_input() once "
                f"per step (ThreeStepOptimizer.step does) so the bias correction uses the right step")
        base_param, l2_decay = self._decay_param(old_param)
        grad = _with_weight_decay(grad, old_param, l2_decay)
        m = self.first_moment.get(param_name)
        if m is None:
            m = self.first_moment[param_name] = np.zeros_like(old_param)
            v = self.second_moment[param_name] = np.zeros_like(old_param)
        else:
            v = self.second_moment[param_name]
        m *= self.beta1
        m += (1.0 - self.beta1) * grad
        v *= self.beta2
        v += (1.0 - self.beta2) * np.square(grad)
        bias_correction1 = 1.0 - self.beta1 ** self.t
        bias_correction2_sqrt = (1.0 - self.beta2 ** self.t) ** 0.5
        denominator = np.sqrt(v, out=np.empty_like(v))
        denominator /= bias_correction2_sqrt
        denominator += self.epsilon
        np.divide(m, denominator, out=denominator)
        return _descend(base_param, self.lr / bias_correction1, denominator)


class AdamWOptimizer(AdamOptimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``:
    ``p *= 1 - lr * weight_decay`` before the Adam step, instead of adding ``weight_decay * p`` to ``g``.

    >>> AdamWOptimizer(None).weight_decay
    0.01
    """

    def __init__(self, executor: Any, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.01,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, beta1, beta2, epsilon, loss, weight_decay, check_divergence)

    def _decay_param(self, old_param: np.ndarray) -> tuple[np.ndarray, float]:
        if not self.weight_decay:
            return old_param, 0.0
        return old_param * (1.0 - self.lr * self.weight_decay), 0.0


class AdaGradOptimizer(_ReferenceOptimizer):
    """AdaGrad (Duchi et al.) with ``torch.optim.Adagrad`` semantics:
    ``s += g**2``; ``p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + epsilon)``.

    >>> import numpy as np
    >>> opt = AdaGradOptimizer(None, lr=1.0)
    >>> opt.new_input()
    >>> opt.update_rule(np.array([4.0]), np.array([0.0]), 'w').round(6)
    array([-1.])
    """

    def __init__(self, executor: Any, lr: float = 0.01, lr_decay: float = 0.0, epsilon: float = 1e-10,
                 initial_accumulator_value: float = 0.0, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, loss, weight_decay, check_divergence)
        self.lr_decay = check_hyperparameter("lr_decay", lr_decay)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.initial_accumulator_value = check_hyperparameter("initial_accumulator_value",
                                                              initial_accumulator_value)
        self.t = 0
        self.sum_of_squares: dict[str, np.ndarray] = {}

    def new_input(self) -> None:
        self.t += 1

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        grad = _with_weight_decay(grad, old_param, self.weight_decay)
        accumulator = self.sum_of_squares.get(param_name)
        if accumulator is None:
            accumulator = self.sum_of_squares[param_name] = np.full_like(old_param,
                                                                         self.initial_accumulator_value)
        accumulator += np.square(grad)
        step_lr = self.lr / (1.0 + (max(self.t, 1) - 1) * self.lr_decay)
        scaled = np.sqrt(accumulator, out=np.empty_like(accumulator))
        scaled += self.epsilon
        np.divide(grad, scaled, out=scaled)
        return _descend(old_param, step_lr, scaled)


class RMSPropOptimizer(_ReferenceOptimizer):
    """RMSProp (Hinton) with ``torch.optim.RMSprop`` semantics, including ``momentum`` and ``centered``.

    ``s = alpha * s + (1 - alpha) * g**2``; ``d = g / (sqrt(s [- mean(g)**2]) + epsilon)``; with momentum
    ``b = momentum * b + d`` and ``p -= lr * b``, else ``p -= lr * d``.

    >>> import numpy as np
    >>> opt = RMSPropOptimizer(None, lr=0.1, alpha=0.0)
    >>> opt.update_rule(np.array([2.0]), np.array([1.0]), 'w').round(6)
    array([0.9])
    """

    def __init__(self, executor: Any, lr: float = 0.01, alpha: float = 0.99, epsilon: float = 1e-8,
                 momentum: float = 0.0, centered: bool = False, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, loss, weight_decay, check_divergence)
        self.alpha = check_hyperparameter("alpha", alpha, high=1.0)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.momentum = check_hyperparameter("momentum", momentum)
        self.centered = bool(centered)
        self.square_average: dict[str, np.ndarray] = {}
        self.gradient_average: dict[str, np.ndarray] = {}
        self.momentum_buffer: dict[str, np.ndarray] = {}

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        grad = _with_weight_decay(grad, old_param, self.weight_decay)
        square_average = self.square_average.get(param_name)
        if square_average is None:
            square_average = self.square_average[param_name] = np.zeros_like(old_param)
        square_average *= self.alpha
        square_average += (1.0 - self.alpha) * np.square(grad)
        if self.centered:
            grad_average = self.gradient_average.get(param_name)
            if grad_average is None:
                grad_average = self.gradient_average[param_name] = np.zeros_like(old_param)
            grad_average *= self.alpha
            grad_average += (1.0 - self.alpha) * grad
            denominator = np.subtract(square_average, np.square(grad_average), out=np.empty_like(old_param))
            np.sqrt(denominator, out=denominator)
        else:
            denominator = np.sqrt(square_average, out=np.empty_like(square_average))
        denominator += self.epsilon
        np.divide(grad, denominator, out=denominator)
        if not self.momentum:
            return _descend(old_param, self.lr, denominator)
        buffer = self.momentum_buffer.get(param_name)
        if buffer is None:
            buffer = self.momentum_buffer[param_name] = np.zeros_like(old_param)
        buffer *= self.momentum
        buffer += denominator
        return _descend(old_param, self.lr, buffer)


__all__ = ["GradientDescent", "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer", "AdaGradOptimizer",
           "RMSPropOptimizer"]
