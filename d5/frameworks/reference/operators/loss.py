"""Reference losses: SoftmaxCrossEntropyLoss (ONNX opset 13), NegativeLogLikelihoodLoss and d5's
MeanSquaredError (domain ``ai.d5``).

Losses return 0-d arrays in the float dtype of the scores/prediction (never a Python or numpy scalar),
so a float32 network stays float32 end to end.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> loss, log_prob = create_operator("SoftmaxCrossEntropyLoss", {}).forward(
...     [np.zeros((2, 4), np.float32), np.array([0, 3])])
>>> round(float(loss), 4), loss.dtype, loss.shape      # log(4)
(1.3863, dtype('float32'), ())
"""
from __future__ import annotations

import numpy as np

from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators.activation import log_softmax
from d5.frameworks.reference.operators.elementwise import broadcast_error, ensure_array, unbroadcast
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import check_class_weights, check_labels, check_loss_inputs


@register("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(ReferenceOp):
    """Cross entropy of ``softmax(scores)`` along axis 1 against integer ``labels``.

    Inputs: ``scores`` (N, C) or (N, C, d1, ...), ``labels`` (N) or (N, d1, ...) with values in [0, C)
    (or ``ignore_index``), optional ``weights`` (C,) per class. Outputs: the loss (0-d for ``mean`` and
    ``sum``, (N, d1, ...) for ``none``) and ``log_prob`` (the log-softmax, shaped like scores); both are
    always returned and executors bind the ones the node names. ``mean`` divides by the summed weights
    of the non-ignored labels, as ONNX does. Labels get no gradient; weights get theirs.
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def forward(self, inputs):
        scores, labels = inputs[0], inputs[1]
        weights = inputs[2] if len(inputs) > 2 else None
        self._check(scores, labels, weights)
        log_prob = log_softmax(scores, axis=1)
        return self._nll(log_prob, labels, weights), log_prob

    def _nll(self, log_prob, labels, weights):
        """The reduced negative log-likelihood of ``labels`` under ``log_prob`` (shared with NLLLoss)."""
        labels, valid = self._safe_labels(labels)
        # -log p[label] per sample, times the label's weight (0 for ignored samples).
        loss = -np.take_along_axis(log_prob, labels[:, np.newaxis], axis=1)[:, 0]
        sample_weights = self._sample_weights(labels, valid, weights, log_prob.dtype)
        if sample_weights is not None:
            loss *= sample_weights
        if self.reduction == "none":
            return loss
        total = loss.sum(dtype=log_prob.dtype)
        if self.reduction == "mean":
            with np.errstate(divide="ignore", invalid="ignore"):  # all ignored: NaN, as in ONNX
                total = total / (loss.size if sample_weights is None else sample_weights.sum(dtype=log_prob.dtype))
        return np.asarray(total, dtype=log_prob.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        scores, labels = fwd_inputs[0], fwd_inputs[1]
        weights = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        g_loss, log_prob = grads[0], fwd_outputs[1]
        labels, valid = self._safe_labels(labels)
        # d loss_i / d scores_i = w_i * (softmax_i - onehot(label_i)), scaled by the incoming gradient.
        coefficient, denominator = self._label_coefficients(g_loss, labels, valid, weights, scores.dtype)
        grad = np.exp(log_prob)
        grad *= coefficient[:, np.newaxis]
        at_label = np.take_along_axis(grad, labels[:, np.newaxis], axis=1)
        at_label -= coefficient[:, np.newaxis]
        np.put_along_axis(grad, labels[:, np.newaxis], at_label, axis=1)
        g_log_prob = grads[1] if len(grads) > 1 else None
        if g_log_prob is not None and np.any(g_log_prob):
            # Through the log_prob output: the LogSoftmax gradient g - softmax * sum(g).
            grad += g_log_prob
            grad -= np.exp(log_prob) * g_log_prob.sum(axis=1, keepdims=True)
        result = [grad, None]
        if len(fwd_inputs) > 2:
            result.append(None if weights is None else
                          self._weights_gradient(g_loss, log_prob, labels, valid, weights, denominator, fwd_outputs[0]))
        return tuple(result)

    def _label_coefficients(self, g_loss, labels, valid, weights, dtype):
        """d loss / d (-log p[label]) per sample, and the mean's denominator (None unless mean)."""
        sample_weights = self._sample_weights(labels, valid, weights, dtype)
        coefficient = np.broadcast_to(np.asarray(g_loss, dtype=dtype), labels.shape)
        if sample_weights is not None:
            coefficient = coefficient * sample_weights
        denominator = None
        if self.reduction == "mean":
            denominator = labels.size if sample_weights is None else sample_weights.sum(dtype=dtype)
            coefficient = coefficient / denominator
        return np.asarray(coefficient, dtype=dtype), denominator

    def _weights_gradient(self, g_loss, log_prob, labels, valid, weights, denominator, loss):
        # loss_i = w[l_i] * nll_i; mean divides by W = sum_i w[l_i], so d mean / d w_c adds -mean / W per sample of c.
        nll = -np.take_along_axis(log_prob, labels[:, np.newaxis], axis=1)[:, 0]
        per_sample = np.broadcast_to(np.asarray(g_loss, dtype=np.float64), labels.shape) * nll
        if self.reduction == "mean":
            per_sample = (per_sample - float(g_loss) * float(loss)) / denominator
        if valid is not None:
            per_sample = np.where(valid, per_sample, 0.0)
        grad = np.bincount(labels.ravel(), weights=per_sample.ravel(), minlength=weights.shape[0])
        return grad.astype(weights.dtype, copy=False)

    def _check(self, scores, labels, weights) -> None:
        name = type(self).__name__
        check_loss_inputs(name, scores.shape, labels.shape, np.issubdtype(labels.dtype, np.integer), labels.dtype)
        check_labels(name, labels, scores.shape, self.ignore_index)
        check_class_weights(name, scores.shape, None if weights is None else weights.shape)

    def _safe_labels(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Labels with ignored entries replaced by class 0 (so they can index), and the valid mask (None: all valid)."""
        if self.ignore_index is None:
            return labels, None
        valid = labels != self.ignore_index
        return np.where(valid, labels, 0), valid

    @staticmethod
    def _sample_weights(labels, valid, weights, dtype) -> np.ndarray | None:
        """Each sample's weight: the weight of its class, 0 where ignored; None when all are 1."""
        if weights is None and valid is None:
            return None
        sample = np.ones(labels.shape, dtype=dtype) if weights is None else weights.astype(dtype, copy=False)[labels]
        if valid is not None:
            sample = np.where(valid, sample, 0).astype(dtype, copy=False)
        return sample


@register("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(SoftmaxCrossEntropyLoss):
    """ONNX NegativeLogLikelihoodLoss: like SoftmaxCrossEntropyLoss, but its input already holds
    log-probabilities (N, C, d1, ...), so it only picks, weights and reduces ``-input[label]``.

    >>> import numpy as np
    >>> float(NegativeLogLikelihoodLoss().forward([np.log(np.full((2, 4), 0.25)), np.array([0, 3])]))
    1.3862943611198906
    """

    def forward(self, inputs):
        log_prob, labels = inputs[0], inputs[1]
        weights = inputs[2] if len(inputs) > 2 else None
        self._check(log_prob, labels, weights)
        return self._nll(log_prob, labels, weights)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        log_prob, labels = fwd_inputs[0], fwd_inputs[1]
        weights = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        labels, valid = self._safe_labels(labels)
        coefficient, denominator = self._label_coefficients(grads[0], labels, valid, weights, log_prob.dtype)
        grad = np.zeros_like(log_prob)
        np.put_along_axis(grad, labels[:, np.newaxis], -coefficient[:, np.newaxis], axis=1)
        result = [grad, None]
        if len(fwd_inputs) > 2:
            result.append(None if weights is None else
                          self._weights_gradient(grads[0], log_prob, labels, valid, weights, denominator, fwd_outputs[0]))
        return tuple(result)


@register("MeanSquaredError")
class MeanSquaredError(ReferenceOp):
    """``reduce((prediction - target) ** 2)`` with ``reduction`` mean (default), sum or none; the target may
    broadcast against the prediction. A d5 operator (domain ``ai.d5``)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("MeanSquaredError", attributes))

    def forward(self, inputs):
        squared = self._difference(inputs[0], inputs[1])
        np.square(squared, out=squared)
        if self.reduction == "none":
            return squared
        total = squared.mean() if self.reduction == "mean" else squared.sum()
        return np.asarray(total, dtype=squared.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        prediction, target = fwd_inputs[0], fwd_inputs[1]
        # Recomputed rather than cached: one subtraction is cheaper than holding a batch-sized buffer.
        grad = self._difference(prediction, target)
        scale = 2.0 / grad.size if self.reduction == "mean" else 2.0
        if self.reduction == "none":
            grad *= grads[0]
            grad *= scale
        else:
            grad *= scale * float(grads[0])
        grad_target = None
        if np.issubdtype(target.dtype, np.floating):
            grad_target = np.negative(unbroadcast(grad, target.shape))
        return unbroadcast(grad, prediction.shape), grad_target

    @staticmethod
    def _difference(prediction: np.ndarray, target: np.ndarray) -> np.ndarray:
        try:
            difference = ensure_array(np.subtract(prediction, target))
        except ValueError:
            raise broadcast_error("MeanSquaredError", prediction, target) from None
        if np.issubdtype(prediction.dtype, np.floating):
            # A float64 target must not silently turn a float32 network's loss into float64.
            difference = difference.astype(prediction.dtype, copy=False)
        elif not np.issubdtype(difference.dtype, np.floating):
            difference = difference.astype(np.float64)
        return difference
