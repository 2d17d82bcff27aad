"""Losses as native TensorFlow operations: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss (ONNX), and d5's
MeanSquaredError (domain ``ai.d5``), with the reference's semantics: reduction mean/sum/none, ignore_index,
per-class weights (``mean`` divides by the summed weights of the non-ignored labels; all ignored gives NaN)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import check_class_weights, check_labels, check_loss_inputs


def _class_last(x: tf.Tensor) -> tf.Tensor:
    """(N, C, d1, ...) as (N, d1, ..., C): TensorFlow's cross-entropy and gathers take the class axis last."""
    rank = x.shape.rank
    return x if rank == 2 else tf.transpose(x, [0, *range(2, rank), 1])


@register("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(TFOp):
    """``-input[label]`` per sample, weighted and reduced; input (N, C, d1, ...) holds log-probabilities."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, log_prob, labels, weights=None):
        self._check(log_prob, labels, weights)
        return self._nll(log_prob, labels, weights)

    def _check(self, scores, labels, weights) -> None:
        """The reference's errors: shapes, integer labels, and (where the labels are known while tracing: eagerly)
        labels outside [0, classes) other than ignore_index."""
        name = type(self).__name__
        shape = tuple(scores.shape.as_list())
        check_loss_inputs(name, shape, tuple(labels.shape.as_list()), labels.dtype.is_integer, labels.dtype.name)
        check_class_weights(name, shape, None if weights is None else tuple(weights.shape.as_list()))
        known = static(labels)
        if known is not None:
            check_labels(name, known, shape, self.ignore_index)

    def _nll(self, log_prob, labels, weights):
        labels = tf.cast(labels, tf.int64)
        valid = None if self.ignore_index is None else tf.not_equal(labels, self.ignore_index)
        safe = labels if valid is None else tf.where(valid, labels, tf.zeros_like(labels))
        rank = log_prob.shape.rank
        picked = tf.gather(_class_last(log_prob), safe[..., tf.newaxis], axis=rank - 1, batch_dims=rank - 1)
        loss = -tf.squeeze(picked, -1)
        sample_weights = None
        if weights is not None:
            sample_weights = tf.gather(tf.cast(weights, loss.dtype), safe)
        if valid is not None:
            mask = tf.cast(valid, loss.dtype)
            sample_weights = mask if sample_weights is None else sample_weights * mask
        if sample_weights is not None:
            loss = loss * sample_weights
        if self.reduction == "none":
            return loss
        total = tf.reduce_sum(loss)
        if self.reduction == "sum":
            return total
        if sample_weights is None:
            return total / tf.cast(tf.size(loss), loss.dtype)
        return total / tf.reduce_sum(sample_weights)  # all ignored: 0 / 0 = NaN, as ONNX


@register("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(NegativeLogLikelihoodLoss):
    """Cross entropy of ``softmax(scores)`` along axis 1; returns the loss, or ``(loss, log_prob)`` when the
    node names two outputs."""

    def __call__(self, scores, labels, weights=None):
        self._check(scores, labels, weights)
        if self.node_output_count is not None and self.node_output_count > 1:
            log_prob = tf.nn.log_softmax(scores, axis=1)
            return self._nll(log_prob, labels, weights), log_prob
        if weights is None and self.ignore_index is None:
            # TensorFlow's fused kernel (log-softmax and the pick in one, its gradient softmax - onehot)
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int64),
                                                                  logits=_class_last(scores))
            if self.reduction == "none":
                return loss
            return tf.reduce_mean(loss) if self.reduction == "mean" else tf.reduce_sum(loss)
        return self._nll(tf.nn.log_softmax(scores, axis=1), labels, weights)


@register("MeanSquaredError")
class MeanSquaredError(TFOp):
    """``reduce((prediction - target) ** 2)``, reduction mean (default), sum or none; the target broadcasts and
    is cast to the prediction's float dtype (a float64 target must not turn a float32 loss into float64)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("MeanSquaredError", attributes))

    def __call__(self, prediction, target):
        try:
            if prediction.shape.is_fully_defined() and target.shape.is_fully_defined():
                np.broadcast_shapes(tuple(prediction.shape.as_list()), tuple(target.shape.as_list()))
        except ValueError:
            raise ShapeError(f"MeanSquaredError: shapes {tuple(prediction.shape)} and {tuple(target.shape)} do not "
                             "broadcast (NumPy rules)") from None
        if prediction.dtype.is_floating:
            target = tf.cast(target, prediction.dtype)
        else:
            prediction, target = tf.cast(prediction, tf.float64), tf.cast(target, tf.float64)
        squared = tf.square(prediction - target)
        if self.reduction == "none":
            return squared
        return tf.reduce_mean(squared) if self.reduction == "mean" else tf.reduce_sum(squared)
