"""L2: the framework-neutral reference optimizers, written once in NumPy and composed from small pieces.

An optimizer here is a :class:`ChainOptimizer`: a chain of gradient transformations
(:mod:`d5.training.gradient_transforms`) run left to right on each parameter's gradient, the result added to the
parameter. The six classic ones follow their ``torch.optim`` namesakes' equations exactly (same defaults, same
order of operations, ``weight_decay`` an L2 term added to the gradient except in AdamW), so a d5 run and a
PyTorch run of the same model agree step by step; LARS, LAMB and AcceleGrad follow their papers.
``tests/training/test_optimizers.py`` checks all of this.

Every one takes ``lr`` as a float or a schedule (:mod:`d5.training.schedules`); ``optimizer.lr`` stays a float
that an event may set (which replaces the schedule). ``clip_value=``/``clip_norm=`` clip the gradients first,
like ``torch.nn.utils.clip_grad_value_``/``clip_grad_norm_`` before ``optimizer.step()``. Hyper-parameters are
attributes read at every step. ``state_dict()``/``load_state_dict()`` save and restore everything a resumed run
needs to continue bitwise identically.

They work on any executor, because they only use the ThreeStepOptimizer hooks. With ``executor=None`` they are
detached update rules:

>>> import numpy as np
>>> sgd = MomentumOptimizer(None, lr=0.1, momentum=0.9)
>>> sgd.new_input()
>>> sgd.update_rule(np.array([1.0]), np.array([0.0]), 'w')
array([-0.1])

A chain of one's own:

>>> from d5.training.gradient_transforms import ClipByValue, ScaleByAdam, ScaleByLearningRate
>>> clipped_adam = chain(None, ClipByValue(1.0), ScaleByAdam(), ScaleByLearningRate(0.1))
>>> clipped_adam.new_input()
>>> clipped_adam.update_rule(np.array([5.0]), np.array([1.0]), 'w').round(6)
array([0.9])
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from d5.errors import CheckpointError, D5Error
from d5.training.gradient_transforms import (AddDecayedWeights, ClipByGlobalNorm, ClipByValue, DecoupledWeightDecay,
                                             GradientTransform, Momentum, ScaleByAdaGrad, ScaleByAdam,
                                             ScaleByLAMBTrustRatio, ScaleByLARSTrustRatio, ScaleByLearningRate,
                                             ScaleByRMSProp)
from d5.training.optimizer import ThreeStepOptimizer, check_hyperparameter, check_state

#: A learning rate: a number, or a schedule ``step -> lr`` (d5.training.schedules).
LearningRate = Union[float, Callable[[int], float]]


def _copy_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A piece's per-parameter state with its arrays copied (a saved state must not change as training goes on)."""
    return {key: np.array(value, copy=True) if isinstance(value, np.ndarray) else value for key, value in state.items()}


def _check_shapes(owner: Any, saved: Mapping[str, Any], known: Mapping[str, tuple]) -> dict[str, tuple]:
    """Refuse a state whose parameters are not ``owner``'s: names the network lacks, or other shapes."""
    name = type(owner).__name__
    shapes = {param: tuple(int(n) for n in shape) for param, shape in dict(saved).items()}
    current = dict(known)
    network = getattr(owner, "network", None)
    if network is not None and shapes:
        trainable = set(network.get_params())
        missing = sorted(set(shapes) - trainable)
        if missing:
            raise CheckpointError(f"{name}.load_state_dict: the state has parameters this network lacks: {missing}; "
                                  "restore it into an optimizer of the network it was saved from")
        values = network.fetch_tensors(list(shapes))
        current.update({param: tuple(np.shape(value)) for param, value in zip(shapes, values)})
    for param, shape in shapes.items():
        if param in current and current[param] != shape:
            raise CheckpointError(f"{name}.load_state_dict: parameter {param!r} is {current[param]} here but "
                                  f"{shape} in the state; restore it into an optimizer of the network it was saved "
                                  "from")
    return shapes


class ChainOptimizer(ThreeStepOptimizer):
    """An optimizer made of gradient transformations run left to right (Optax's ``chain``); the last direction
    is added to the parameter. Exactly one piece must be a :class:`ScaleByLearningRate` -- where ``lr`` acts.

    A piece that needs all parameters at once (:class:`ClipByGlobalNorm`) makes ``uses_all_gradients`` true, and
    ``step`` then shows it every gradient through :meth:`prepare_gradients` before the first update. The
    pieces belong to this optimizer (their hyper-parameters are its own); ``aliases`` exposes piece attributes
    as optimizer attributes (``optimizer.momentum`` for the Momentum piece's ``momentum``).

    >>> import numpy as np
    >>> from d5.training.gradient_transforms import Momentum, ScaleByLearningRate
    >>> heavy_ball = ChainOptimizer(None, [Momentum(0.5), ScaleByLearningRate(1.0)])
    >>> p = heavy_ball.update_rule(np.array([1.0]), np.array([0.0]), 'w')
    >>> heavy_ball.update_rule(np.array([1.0]), p, 'w')
    array([-2.5])
    """

    def __init__(self, executor: Any, pieces: Sequence[GradientTransform], loss: str = "loss",
                 check_divergence: bool = True, aliases: Mapping[str, tuple[GradientTransform, str]] | None = None
                 ) -> None:
        super().__init__(executor, loss, check_divergence)
        pieces = list(pieces)
        for piece in pieces:
            if not isinstance(piece, GradientTransform):
                raise D5Error(f"{type(self).__name__}: every piece must be a d5.training.gradient_transforms."
                              f"GradientTransform (ClipByGlobalNorm, Momentum, ScaleByAdam, ...), got {piece!r}")
        rates = [piece for piece in pieces if isinstance(piece, ScaleByLearningRate)]
        if len(rates) != 1:
            raise D5Error(f"{type(self).__name__} needs exactly one ScaleByLearningRate piece (where lr and its "
                          f"schedule act), got {len(rates)} in {pieces}; add ScaleByLearningRate(lr) to the chain")
        self.pieces = pieces
        self._rate = rates[0]
        self._stepped = [piece for piece in pieces if type(piece).begin_step is not GradientTransform.begin_step]
        self._scaling = [piece for piece in pieces
                         if type(piece).parameter_scale is not GradientTransform.parameter_scale]
        self.t = 0
        #: Per parameter name: one state per piece; and the shapes of the parameters seen.
        self.param_states: dict[str, list[dict]] = {}
        self.param_shapes: dict[str, tuple] = {}
        # Directions computed by prepare_gradients for pieces before the last global one (see there).
        self._staged: dict[str, np.ndarray] = {}
        self._resume_at = 0
        self._aliases = dict(aliases or {})

    # -- hyper-parameters: lr (a float or a schedule) and the pieces' attributes under the aliases' names
    @property
    def lr(self) -> float:
        """The learning rate of the coming step (a float; setting a float replaces a schedule, setting a
        schedule follows it from the next step on)."""
        return self._rate.lr

    @lr.setter
    def lr(self, value: Any) -> None:
        self._rate.set_lr(value, step=self.t)

    @property
    def lr_schedule(self) -> Callable[[int], float] | None:
        """The schedule ``lr`` follows, or None."""
        return self._rate.schedule

    def __getattr__(self, name: str) -> Any:  # only reached when normal lookup fails
        aliases = self.__dict__.get("_aliases") or {}
        if name in aliases:
            piece, attribute = aliases[name]
            return getattr(piece, attribute)
        raise AttributeError(f"{type(self).__name__!s} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        aliases = self.__dict__.get("_aliases") or {}
        if name in aliases:
            piece, attribute = aliases[name]
            setattr(piece, attribute, value)
        else:
            super().__setattr__(name, value)

    def hyperparameters(self) -> dict[str, Any]:
        """``lr`` and the aliased hyper-parameters by name."""
        aliased = {name: getattr(piece, attribute) for name, (piece, attribute) in self._aliases.items()}
        return {"lr": self.lr, **aliased}

    def __repr__(self) -> str:
        if self._aliases:
            return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.hyperparameters().items())})"
        return f"{type(self).__name__}({', '.join(repr(piece) for piece in self.pieces)})"

    # -- the ThreeStepOptimizer hooks
    def new_input(self) -> None:
        self.t += 1
        self._staged, self._resume_at = {}, 0
        for piece in self._stepped:
            piece.begin_step(self.t)

    @property
    def uses_all_gradients(self) -> bool:
        return any(piece.needs_all_gradients for piece in self.pieces)

    def prepare_gradients(self, gradients: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray]) -> None:
        """Show every global piece all parameters' directions as they reach it. Usually the global pieces come
        first (clipping), and they see the gradients themselves; a global piece further down the chain needs the
        pieces before it run for every parameter here, and ``update_rule`` continues from there."""
        current: Mapping[str, np.ndarray] = gradients
        start = 0
        for index, piece in enumerate(self.pieces):
            if not piece.needs_all_gradients:
                continue
            if index > start:
                current = {name: self._run(start, index, self._working_copy(direction, params[name])
                                           if start == 0 else direction, params[name], name)
                           for name, direction in current.items()}
            piece.observe(current, params, self.t)
            start = index
        self._staged = dict(current) if start else {}
        self._resume_at = start

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        staged = self._staged.pop(param_name, None) if self._resume_at else None
        if staged is not None:
            direction = self._run(self._resume_at, len(self.pieces), staged, old_param, param_name)
        else:
            direction = self._run(0, len(self.pieces), self._working_copy(grad, old_param), old_param, param_name)
        scale = 1.0
        for piece in self._scaling:
            scale *= piece.parameter_scale(self._rate.lr, self.t)
        if scale != 1.0:
            direction += old_param * scale
        else:
            direction += old_param  # the working buffer becomes the new parameter: one allocation per update
        return direction

    @staticmethod
    def _working_copy(grad: np.ndarray, param: np.ndarray) -> np.ndarray:
        # The pieces work in place on this copy: the executor's gradient and parameter stay untouched.
        return np.array(grad, dtype=param.dtype, copy=True)

    def _run(self, start: int, stop: int, direction: np.ndarray, param: np.ndarray, name: str) -> np.ndarray:
        states = self.param_states.get(name)
        if states is None:
            states = self.param_states[name] = [piece.init(param) for piece in self.pieces]
            self.param_shapes[name] = tuple(np.shape(param))
        step = self.t
        for index in range(start, stop):
            direction, states[index] = self.pieces[index].update(direction, states[index], param, step)
        return direction

    # -- the state protocol
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs: step counters, hyper-parameters and per-parameter state (copied)."""
        return {"optimizer": type(self).__name__, "t": self.t, "steps": self.steps,
                "lr_scheduled": self._rate.schedule is not None,
                "parameters": {name: list(shape) for name, shape in self.param_shapes.items()},
                "pieces": [{"piece": type(piece).__name__, "hyperparameters": piece.hyperparameters(),
                            "state": {name: _copy_state(states[index]) for name, states in self.param_states.items()}}
                           for index, piece in enumerate(self.pieces)]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; refuses (CheckpointError) the state of another optimizer,
        another chain, or other parameters, and a scheduled run's state into an optimizer without the schedule."""
        state = check_state(self, state, "optimizer")
        saved_pieces = list(state["pieces"])
        kinds = [entry["piece"] for entry in saved_pieces]
        if kinds != [type(piece).__name__ for piece in self.pieces]:
            raise CheckpointError(f"{type(self).__name__}.load_state_dict: the state is of the chain {kinds}, this "
                                  f"optimizer is {[type(piece).__name__ for piece in self.pieces]}; build the "
                                  "optimizer the same way as the one that was saved")
        if state["lr_scheduled"] and self._rate.schedule is None:
            raise CheckpointError(f"{type(self).__name__}.load_state_dict: the saved optimizer followed a learning-"
                                  "rate schedule but this one has a constant lr; construct it with the same schedule")
        shapes = _check_shapes(self, state["parameters"], self.param_shapes)
        for piece, entry in zip(self.pieces, saved_pieces):
            for name, value in entry["hyperparameters"].items():
                setattr(piece, name, value)
        if not state["lr_scheduled"]:
            self._rate.schedule = None  # the saved run had replaced its schedule by a constant
        self.param_states = {name: [_copy_state(entry["state"][name]) for entry in saved_pieces] for name in shapes}
        self.param_shapes = shapes
        self.t, self.steps = int(state["t"]), int(state["steps"])
        self._staged, self._resume_at = {}, 0


def chain(executor: Any, *pieces: GradientTransform, loss: str = "loss", check_divergence: bool = True
          ) -> ChainOptimizer:
    """An optimizer running ``pieces`` left to right (see :class:`ChainOptimizer`).

    >>> from d5.training.gradient_transforms import ClipByGlobalNorm, Momentum, ScaleByLearningRate
    >>> chain(None, ClipByGlobalNorm(1.0), Momentum(0.9), ScaleByLearningRate(0.1)).uses_all_gradients
    True
    """
    return ChainOptimizer(executor, pieces, loss=loss, check_divergence=check_divergence)


def _clipping(clip_value: float | None, clip_norm: float | None) -> tuple[list[GradientTransform], dict]:
    """The clipping pieces every named optimizer starts with (off when None), and their aliases."""
    by_value, by_norm = ClipByValue(clip_value), ClipByGlobalNorm(clip_norm)
    return [by_value, by_norm], {"clip_value": (by_value, "max_value"), "clip_norm": (by_norm, "max_norm")}


class _NamedChain(ChainOptimizer):
    """A named optimizer: clipping, the given pieces, with ``weight_decay`` and other pieces' attributes aliased."""

    def __init__(self, executor: Any, pieces: Sequence[GradientTransform], aliases: Mapping[str, tuple],
                 loss: str, check_divergence: bool, clip_value: float | None, clip_norm: float | None) -> None:
        clipping, clip_aliases = _clipping(clip_value, clip_norm)
        super().__init__(executor, [*clipping, *pieces], loss, check_divergence, {**aliases, **clip_aliases})


class GradientDescent(_NamedChain):
    """Plain (stochastic) gradient descent: ``p -= lr * (g + weight_decay * p)`` (``torch.optim.SGD``).

    >>> import numpy as np
    >>> GradientDescent(None, lr=0.5).update_rule(np.array([2.0]), np.array([1.0]), 'w')
    array([0.])
    """

    def __init__(self, executor: Any, lr: LearningRate = 0.01, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        rate, decay = ScaleByLearningRate(lr), AddDecayedWeights(weight_decay)
        super().__init__(executor, [decay, rate], {"weight_decay": (decay, "weight_decay")}, loss, check_divergence,
                         clip_value, clip_norm)


class MomentumOptimizer(_NamedChain):
    """SGD with (Nesterov) momentum, with ``torch.optim.SGD`` semantics.

    ``v = momentum * v + (1 - dampening) * g`` (``v = g`` on the first step); the step direction is
    ``v``, or ``g + momentum * v`` with ``nesterov=True``; then ``p -= lr * direction``.

    >>> import numpy as np
    >>> opt = MomentumOptimizer(None, lr=1.0, momentum=0.5)
    >>> p = opt.update_rule(np.array([1.0]), np.array([0.0]), 'w')   # v = 1
    >>> opt.update_rule(np.array([1.0]), p, 'w')                      # v = 1.5
    array([-2.5])
    """

    def __init__(self, executor: Any, lr: LearningRate = 0.01, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", weight_decay: float = 0.0, dampening: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        rate, decay = ScaleByLearningRate(lr), AddDecayedWeights(weight_decay)
        heavy_ball = Momentum(momentum, dampening, nesterov)
        super().__init__(executor, [decay, heavy_ball, rate],
                         {"weight_decay": (decay, "weight_decay"), "momentum": (heavy_ball, "momentum"),
                          "dampening": (heavy_ball, "dampening"), "nesterov": (heavy_ball, "nesterov")},
                         loss, check_divergence, clip_value, clip_norm)


def _adam_aliases(adam: ScaleByAdam) -> dict[str, tuple]:
    return {name: (adam, name) for name in ("beta1", "beta2", "epsilon", "amsgrad")}


class AdamOptimizer(_NamedChain):
    """Adam (Kingma & Ba 2015) with ``torch.optim.Adam`` semantics (L2 weight decay added to the gradient,
    bias correction, optional AMSGrad). The step counter ``t`` advances in ``new_input()``, once per step.

    >>> import numpy as np
    >>> adam = AdamOptimizer(None, lr=0.1)
    >>> adam.new_input()
    >>> adam.update_rule(np.array([3.0]), np.array([1.0]), 'w').round(6)   # first step moves by ~lr
    array([0.9])
    """

    decoupled_weight_decay = False

    def __init__(self, executor: Any, lr: LearningRate = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, amsgrad: bool = False, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        rate, adam = ScaleByLearningRate(lr), ScaleByAdam(beta1, beta2, epsilon, amsgrad)
        if self.decoupled_weight_decay:
            decay: GradientTransform = DecoupledWeightDecay(weight_decay)
            pieces = [adam, decay, rate]
        else:
            decay = AddDecayedWeights(weight_decay)
            pieces = [decay, adam, rate]
        super().__init__(executor, pieces, {"weight_decay": (decay, "weight_decay"), **_adam_aliases(adam)},
                         loss, check_divergence, clip_value, clip_norm)


class AdamWOptimizer(AdamOptimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019), as ``torch.optim.AdamW``:
    ``p -= lr * weight_decay * p`` besides the Adam step, instead of adding ``weight_decay * p`` to ``g``.

    >>> AdamWOptimizer(None).weight_decay
    0.01
    """

    decoupled_weight_decay = True

    def __init__(self, executor: Any, lr: LearningRate = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.01,
                 check_divergence: bool = True, *, amsgrad: bool = False, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        super().__init__(executor, lr, beta1, beta2, epsilon, loss, weight_decay, check_divergence, amsgrad=amsgrad,
                         clip_norm=clip_norm, clip_value=clip_value)


class AdaGradOptimizer(_NamedChain):
    """AdaGrad (Duchi, Hazan & Singer 2011) with ``torch.optim.Adagrad`` semantics:
    ``s += g**2``; ``p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + epsilon)``.

    >>> import numpy as np
    >>> opt = AdaGradOptimizer(None, lr=1.0)
    >>> opt.new_input()
    >>> opt.update_rule(np.array([4.0]), np.array([0.0]), 'w').round(6)
    array([-1.])
    """

    def __init__(self, executor: Any, lr: LearningRate = 0.01, lr_decay: float = 0.0, epsilon: float = 1e-10,
                 initial_accumulator_value: float = 0.0, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        rate, decay = ScaleByLearningRate(lr), AddDecayedWeights(weight_decay)
        adagrad = ScaleByAdaGrad(epsilon, initial_accumulator_value, lr_decay)
        super().__init__(executor, [decay, adagrad, rate],
                         {"weight_decay": (decay, "weight_decay"),
                          **{name: (adagrad, name) for name in ScaleByAdaGrad.hyperparameter_names}},
                         loss, check_divergence, clip_value, clip_norm)


class RMSPropOptimizer(_NamedChain):
    """RMSProp (Hinton) with ``torch.optim.RMSprop`` semantics, including ``momentum`` and ``centered``.

    ``s = alpha * s + (1 - alpha) * g**2``; ``d = g / (sqrt(s [- mean(g)**2]) + epsilon)``; with momentum
    ``b = momentum * b + d`` and ``p -= lr * b``, else ``p -= lr * d``.

    >>> import numpy as np
    >>> opt = RMSPropOptimizer(None, lr=0.1, alpha=0.0)
    >>> opt.update_rule(np.array([2.0]), np.array([1.0]), 'w').round(6)
    array([0.9])
    """

    def __init__(self, executor: Any, lr: LearningRate = 0.01, alpha: float = 0.99, epsilon: float = 1e-8,
                 momentum: float = 0.0, centered: bool = False, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        rate, decay = ScaleByLearningRate(lr), AddDecayedWeights(weight_decay)
        rmsprop, heavy_ball = ScaleByRMSProp(alpha, epsilon, centered), Momentum(momentum)
        super().__init__(executor, [decay, rmsprop, heavy_ball, rate],
                         {"weight_decay": (decay, "weight_decay"), "momentum": (heavy_ball, "momentum"),
                          **{name: (rmsprop, name) for name in ScaleByRMSProp.hyperparameter_names}},
                         loss, check_divergence, clip_value, clip_norm)


class LARSOptimizer(_NamedChain):
    """LARS, layer-wise adaptive rate scaling for large batches (You, Gitman & Ginsburg 2017, "Large Batch
    Training of Convolutional Networks", Algorithm 1). Per parameter tensor ``w`` with gradient ``g``::

        local_lr = trust_coefficient * |w| / (|g| + weight_decay * |w|)
        v = momentum * v + lr * local_lr * (g + weight_decay * w)
        w = w - v

    (``local_lr = 1`` where ``|w|`` or ``|g|`` is 0.) The paper's defaults: ``trust_coefficient=0.001``,
    ``momentum=0.9``, ``weight_decay=0.0005``; ``lr`` is the global rate, usually with a polynomial decay.

    >>> import numpy as np
    >>> lars = LARSOptimizer(None, lr=1.0, trust_coefficient=0.1, momentum=0.0, weight_decay=0.0)
    >>> lars.update_rule(np.array([0.0, 2.0]), np.array([3.0, 4.0]), 'w')    # local_lr = 0.1 * 5 / 2
    array([3. , 3.5])
    """

    def __init__(self, executor: Any, lr: LearningRate = 1.0, momentum: float = 0.9, weight_decay: float = 0.0005,
                 trust_coefficient: float = 0.001, nesterov: bool = False, loss: str = "loss",
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        trust = ScaleByLARSTrustRatio(trust_coefficient, weight_decay)
        rate, heavy_ball = ScaleByLearningRate(lr), Momentum(momentum, nesterov=nesterov)
        # The paper's order: the global rate enters the momentum buffer (it may change between steps).
        super().__init__(executor, [trust, rate, heavy_ball],
                         {"weight_decay": (trust, "weight_decay"), "trust_coefficient": (trust, "trust_coefficient"),
                          "momentum": (heavy_ball, "momentum"), "nesterov": (heavy_ball, "nesterov")},
                         loss, check_divergence, clip_value, clip_norm)


class LAMBOptimizer(_NamedChain):
    """LAMB, layer-wise adaptive moments for large batches (You et al. 2020, "Large Batch Optimization for Deep
    Learning: Training BERT in 76 minutes", Algorithm 2, phi the identity). Per parameter tensor ``w``::

        m, v = Adam's moments of g (bias-corrected);  r = m_hat / (sqrt(v_hat) + epsilon)
        u = r + weight_decay * w
        w = w - lr * |w| / |u| * u

    (the ratio is 1 where ``|w|`` or ``|u|`` is 0).

    >>> import numpy as np
    >>> lamb = LAMBOptimizer(None, lr=0.1, weight_decay=0.0)
    >>> lamb.new_input()
    >>> lamb.update_rule(np.array([1.0, 1.0]), np.array([3.0, 4.0]), 'w').round(4)
    array([2.6464, 3.6464])
    """

    def __init__(self, executor: Any, lr: LearningRate = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-6, weight_decay: float = 0.01, loss: str = "loss", check_divergence: bool = True,
                 *, clip_norm: float | None = None, clip_value: float | None = None) -> None:
        adam, decay = ScaleByAdam(beta1, beta2, epsilon), AddDecayedWeights(weight_decay)
        super().__init__(executor, [adam, decay, ScaleByLAMBTrustRatio(), ScaleByLearningRate(lr)],
                         {"weight_decay": (decay, "weight_decay"),
                          **{name: (adam, name) for name in ("beta1", "beta2", "epsilon")}},
                         loss, check_divergence, clip_value, clip_norm)


class AcceleGradOptimizer(ThreeStepOptimizer):
    """AcceleGrad (Levy, Yurtsever & Cevher 2018, "Online Adaptive Methods, Universality and Acceleration",
    NeurIPS, Algorithm 1, unconstrained): an accelerated method whose step size adapts to the gradients seen.
    At 0-based step ``k``, with ``alpha = 1`` for ``k <= 2`` and ``(k + 1) / 4`` after, ``tau = 1 / alpha``::

        x = tau * z + (1 - tau) * y            # prepare_param: the gradient is taken at x
        eta = lr * 2 * diameter / (sqrt(gradient_bound**2 + sum_k alpha_k**2 * |g_k|**2) + epsilon)
        z = z - alpha * eta * g
        y = x - eta * g                        # what the network holds between steps

    ``|g|`` is the norm over all parameters together (``prepare_gradients``); ``lr`` (1 in the paper) scales
    the step and may follow a schedule. ``y`` starts at the network's parameters, ``z`` with them.

    >>> import numpy as np
    >>> opt = AcceleGradOptimizer(None, diameter=1.0)
    >>> opt.new_input()
    >>> opt.prepare_gradients({'w': np.array([3.0, 4.0])}, {'w': np.zeros(2)})
    >>> opt.update_rule(np.array([3.0, 4.0]), np.zeros(2), 'w').round(6)   # eta = 2 / 5
    array([-1.2, -1.6])
    """

    def __init__(self, executor: Any, lr: LearningRate = 1.0, diameter: float = 1.0, gradient_bound: float = 0.0,
                 epsilon: float = 1e-8, loss: str = "loss", check_divergence: bool = True) -> None:
        super().__init__(executor, loss, check_divergence)
        self._rate = ScaleByLearningRate(lr)  # holds lr and its schedule, as in a chain
        self.diameter = check_hyperparameter("diameter", diameter)
        self.gradient_bound = check_hyperparameter("gradient_bound", gradient_bound)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.t = 0
        self.squared_gradient_sum = 0.0
        self.z: dict[str, np.ndarray] = {}
        self.param_shapes: dict[str, tuple] = {}
        self._alpha = 1.0
        self._eta = 0.0
        self._prepared_step: int | None = None

    lr = ChainOptimizer.lr
    lr_schedule = ChainOptimizer.lr_schedule
    uses_all_gradients = True

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(lr={self.lr!r}, diameter={self.diameter!r}, "
                f"gradient_bound={self.gradient_bound!r}, epsilon={self.epsilon!r})")

    def new_input(self) -> None:
        self.t += 1
        self._rate.begin_step(self.t)
        k = self.t - 1
        self._alpha = 1.0 if k <= 2 else (k + 1) / 4.0

    def lookahead(self, y: np.ndarray, param_name: str) -> np.ndarray:
        """The point ``x = tau * z + (1 - tau) * y`` where this step's gradient is taken (a new array)."""
        z = self.z.get(param_name)
        if z is None:
            z = self.z[param_name] = np.array(y, copy=True)
            self.param_shapes[param_name] = tuple(np.shape(y))
        tau = 1.0 / self._alpha
        if tau == 1.0:
            return np.array(z, copy=True)
        x = np.multiply(z, tau)
        x += (1.0 - tau) * y
        return x.astype(y.dtype, copy=False)

    def prepare_param(self, param_name: str) -> None:
        (y,) = self.network.fetch_tensors([param_name])
        self.network.feed_tensor(param_name, self.lookahead(y, param_name), is_param=True)

    def prepare_gradients(self, gradients: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray]) -> None:
        squared_norm = sum(float(np.vdot(g.reshape(-1), g.reshape(-1))) for g in gradients.values())
        self.squared_gradient_sum += self._alpha ** 2 * squared_norm
        self._eta = self.lr * 2.0 * self.diameter / (
            (self.gradient_bound ** 2 + self.squared_gradient_sum) ** 0.5 + self.epsilon)
        self._prepared_step = self.t

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        if self._prepared_step != self.t or self.t == 0:
            raise D5Error("AcceleGradOptimizer needs the gradient norm over all parameters: call new_input(), then "
                          "prepare_gradients(gradients, params) once per step before update_rule() "
                          "(ThreeStepOptimizer.step does this)")
        z = self.z.get(param_name)
        if z is None:  # detached use without prepare_param: the first point is the parameter itself
            self.lookahead(old_param, param_name)
            z = self.z[param_name]
        z -= (self._alpha * self._eta) * grad
        y = np.multiply(grad, -self._eta, out=np.empty_like(old_param))
        y += old_param
        return y

    def state_dict(self) -> dict[str, Any]:
        """Step counters, hyper-parameters, the running gradient sum and ``z`` per parameter (``y`` is the network)."""
        return {"optimizer": type(self).__name__, "t": self.t, "steps": self.steps, "lr": self.lr,
                "lr_scheduled": self.lr_schedule is not None, "diameter": self.diameter,
                "gradient_bound": self.gradient_bound, "epsilon": self.epsilon,
                "squared_gradient_sum": self.squared_gradient_sum,
                "parameters": {name: list(shape) for name, shape in self.param_shapes.items()},
                "z": {name: np.array(z, copy=True) for name, z in self.z.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (refusing another optimizer's or network's state)."""
        state = check_state(self, state, "optimizer")
        if state["lr_scheduled"] and self.lr_schedule is None:
            raise CheckpointError("AcceleGradOptimizer.load_state_dict: the saved optimizer followed a learning-rate "
                                  "schedule but this one has a constant lr; construct it with the same schedule")
        shapes = _check_shapes(self, state["parameters"], self.param_shapes)
        if not state["lr_scheduled"]:
            self._rate.schedule = None
        self._rate.lr = float(state["lr"])
        self.diameter, self.gradient_bound = float(state["diameter"]), float(state["gradient_bound"])
        self.epsilon, self.squared_gradient_sum = float(state["epsilon"]), float(state["squared_gradient_sum"])
        self.z = {name: np.array(state["z"][name], copy=True) for name in shapes}
        self.param_shapes = shapes
        self.t, self.steps = int(state["t"]), int(state["steps"])
        k = self.t - 1
        self._alpha = 1.0 if k <= 2 else (k + 1) / 4.0
        self._prepared_step = None


#: The optimizers by short name, for configuration files and recipes (:func:`optimizer_by_name`).
OPTIMIZERS: dict[str, type[ThreeStepOptimizer]] = {
    "sgd": GradientDescent, "momentum": MomentumOptimizer, "adam": AdamOptimizer, "adamw": AdamWOptimizer,
    "adagrad": AdaGradOptimizer, "rmsprop": RMSPropOptimizer, "lars": LARSOptimizer, "lamb": LAMBOptimizer,
    "accelegrad": AcceleGradOptimizer,
}


def optimizer_by_name(name: str) -> type[ThreeStepOptimizer]:
    """The optimizer class called ``name``: a short name of :data:`OPTIMIZERS` or a class name, any case.

    >>> optimizer_by_name("adamw").__name__, optimizer_by_name("LARSOptimizer").__name__
    ('AdamWOptimizer', 'LARSOptimizer')
    """
    key = str(name).lower().replace("-", "").replace("_", "")
    for short, cls in OPTIMIZERS.items():
        if key in (short, cls.__name__.lower(), cls.__name__.lower().removesuffix("optimizer")):
            return cls
    raise D5Error(f"unknown optimizer {name!r}; the valid ones are {', '.join(OPTIMIZERS)} (or their class names: "
                  f"{', '.join(cls.__name__ for cls in OPTIMIZERS.values())})")


__all__ = ["AcceleGradOptimizer", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "ChainOptimizer",
           "GradientDescent", "LAMBOptimizer", "LARSOptimizer", "MomentumOptimizer", "OPTIMIZERS", "RMSPropOptimizer",
           "chain", "optimizer_by_name"]
