"""Reference BatchNormalization (ONNX semantics), with the per-channel loops in C++ (d5._C).

>>> import numpy as np
>>> x = np.array([[[1.0]], [[3.0]]])                    # (N=2, C=1, 1)
>>> ones, zeros = np.ones(1), np.zeros(1)
>>> op = BatchNormalization(epsilon=0.0, momentum=0.5)
>>> op.training = True
>>> y, running_mean, running_var = op.forward([x, ones, zeros, zeros, ones])
>>> y.ravel().tolist(), running_mean.tolist(), running_var.tolist()
([-1.0, 1.0], [1.0], [1.0])
>>> sorted(op.state_updates())
[3, 4]
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.kernels import as_kernel_array, compute_dtype, load_native
from d5.frameworks.reference.operators.registry import ReferenceOp, register

_INPUT_NAMES = ("X", "scale", "B", "input_mean", "input_var")


@register("BatchNormalization")
class BatchNormalization(ReferenceOp):
    """ONNX BatchNormalization over (N, C, ...) inputs.

    With batch statistics (``self.training`` set by the executor, or ``training_mode=1``): normalize by
    the batch mean and biased variance over every axis but C, return ``(Y, running_mean, running_var)``
    with ``running = momentum * input + (1 - momentum) * batch``, and offer the same running statistics
    as :meth:`state_updates` ``{3: mean, 4: var}`` so the executor writes them back. Otherwise normalize by
    ``input_mean``/``input_var`` and return ``Y`` only. ``backward`` returns gradients for X, scale and B
    (``None`` for the statistics inputs, which are not trained by gradient).

    >>> import numpy as np
    >>> x = np.zeros((2, 3, 4, 4), np.float32)
    >>> c = np.ones(3, np.float32)
    >>> BatchNormalization().forward([x, c, c, c * 0, c]).dtype
    dtype('float32')
    """

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0, spatial: int = 1) -> None:
        super().__init__()
        self.epsilon = float(epsilon)
        self.momentum = float(momentum)
        self.training_mode = bool(training_mode)
        if not self.epsilon >= 0:
            raise ShapeError(f"BatchNormalization: epsilon must be non-negative, got {epsilon}")
        if int(spatial) != 1:
            # spatial=0 (opset < 9: statistics per element, not per channel) is long deprecated.
            raise UnsupportedOperatorError("BatchNormalization: spatial=0 (per-element statistics, opset < 9) is not "
                                           "supported; re-export the model with opset >= 9")
        self._state: dict[int, np.ndarray] = {}
        # Statistics of the last batch-statistics forward, reused by backward for that same input array.
        self._saved: tuple | None = None

    @property
    def uses_batch_statistics(self) -> bool:
        """True when forward normalizes by the batch's own statistics."""
        return self.training or self.training_mode

    def forward(self, inputs):
        x, scale, bias, mean, var, shape = self._prepare(inputs)
        out_dtype = np.asarray(inputs[0]).dtype
        native = load_native()
        if not self.uses_batch_statistics:
            self._state = {}
            y = native.batch_norm_forward_inference(x, scale, bias, mean, var, self.epsilon)
            return y.reshape(shape).astype(out_dtype, copy=False)
        y, batch_mean, batch_var, invstd = native.batch_norm_forward_training(x, scale, bias, self.epsilon)
        self._saved = (inputs[0], batch_mean, invstd)
        stats_dtype = np.asarray(inputs[3]).dtype
        running_mean = (self.momentum * mean + (1.0 - self.momentum) * batch_mean).astype(stats_dtype, copy=False)
        running_var = (self.momentum * var + (1.0 - self.momentum) * batch_var).astype(stats_dtype, copy=False)
        self._state = {3: running_mean, 4: running_var}
        return y.reshape(shape).astype(out_dtype, copy=False), running_mean, running_var

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, scale, bias, mean, var, shape = self._prepare(fwd_inputs)
        native = load_native()
        dy = as_kernel_array(grads[0], x.dtype).reshape(x.shape)
        if not self.uses_batch_statistics:
            dx, dscale, dbias = native.batch_norm_backward_inference(dy, x, scale, mean, var, self.epsilon)
        else:
            if self._saved is not None and self._saved[0] is fwd_inputs[0]:
                batch_mean, invstd = self._saved[1], self._saved[2]
            else:  # backward of another input than the last forward: recompute its statistics
                _, batch_mean, _, invstd = native.batch_norm_forward_training(x, scale, bias, self.epsilon)
            dx, dscale, dbias = native.batch_norm_backward_training(dy, x, scale, batch_mean, invstd)
            dx = self._add_running_stat_grads(dx, grads, x, batch_mean)
        dtypes = [np.asarray(a).dtype for a in fwd_inputs[:3]]
        return (dx.reshape(shape).astype(dtypes[0], copy=False), dscale.astype(dtypes[1], copy=False),
                dbias.astype(dtypes[2], copy=False), None, None)

    def state_updates(self) -> dict[int, np.ndarray]:
        """``{3: new running mean, 4: new running var}`` after a batch-statistics forward, else ``{}``."""
        return dict(self._state)

    # -- helpers ----------------------------------------------------------------------------------------

    def _add_running_stat_grads(self, dx, grads, x, batch_mean):
        # The running-statistics outputs depend on X through the batch mean and variance; when a graph
        # consumes them, their gradients flow into dX too (d mean/dx = 1/M, d var/dx = 2 (x - mean) / M).
        count = x.shape[0] * x.shape[2]
        weight = (1.0 - self.momentum) / count
        for index in (1, 2):
            if len(grads) <= index or grads[index] is None:
                continue
            g = np.asarray(grads[index], dtype=x.dtype).reshape(1, -1, 1)
            if not g.any():
                continue
            dx = dx + weight * g if index == 1 else dx + 2.0 * weight * g * (x - batch_mean.reshape(1, -1, 1))
        return dx

    def _prepare(self, inputs):
        """Inputs as contiguous arrays of one compute dtype, X viewed as (N, C, S), plus X's shape."""
        if len(inputs) != 5 or any(a is None for a in inputs):
            raise ShapeError(f"BatchNormalization: expected 5 inputs ({', '.join(_INPUT_NAMES)}), got "
                             f"{len(inputs)}{' with some missing' if len(inputs) == 5 else ''}")
        arrays = [np.asarray(a) for a in inputs]
        x = arrays[0]
        if x.ndim < 2:
            raise ShapeError(f"BatchNormalization: X must be (N, C, ...), got shape {x.shape}")
        channels = x.shape[1]
        for name, array in zip(_INPUT_NAMES[1:], arrays[1:]):
            if array.shape != (channels,):
                raise ShapeError(f"BatchNormalization: input {name!r} must have shape ({channels},) (one value per "
                                 f"channel of X {x.shape}), got {array.shape}")
        if x.size == 0:
            raise ShapeError(f"BatchNormalization: X is empty (shape {x.shape}); there are no statistics to compute")
        dtype = compute_dtype("BatchNormalization", *arrays)
        x3 = as_kernel_array(x, dtype).reshape(x.shape[0], channels, -1)
        return (x3, *(as_kernel_array(a, dtype) for a in arrays[1:]), x.shape)


__all__ = ["BatchNormalization"]
