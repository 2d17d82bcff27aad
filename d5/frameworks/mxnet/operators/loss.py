"""Losses as native MXNet operations: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss (ONNX), and d5's
MeanSquaredError (domain ``ai.d5``), with the reference's semantics: reduction mean/sum/none, ignore_index,
per-class weights (``mean`` divides by the summed weights of the non-ignored labels; all ignored gives NaN)."""
from __future__ import annotations

import mxnet as mx
import numpy as np

from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import Symbol, as_symbol, dtype_of, reshape, shape_of, static
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import not_broadcastable
from d5.ops.tensor_checks import check_class_weights, check_labels, check_loss_inputs


@register("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(MXOp):
    """``-input[label]`` per sample, weighted and reduced; input (N, C, d1, ...) holds log-probabilities."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, log_prob, labels, weights=None):
        self._check(log_prob, labels, weights)
        return self._nll(log_prob, labels, weights)

    def _check(self, scores, labels, weights) -> None:
        """The reference's errors: shapes, integer labels, and (where the labels are known before running)
        labels outside [0, classes) other than ignore_index."""
        name = type(self).__name__
        shape = shape_of(scores)
        check_loss_inputs(name, shape, shape_of(labels), dtype_of(labels).kind in "iu", dtype_of(labels).name)
        check_class_weights(name, shape, None if weights is None else shape_of(weights))
        known = static(labels)
        if known is not None:
            check_labels(name, known, shape, self.ignore_index)

    #: The labels: fed to a composed graph, the executor checks them before each run (``pick`` would clip them).
    checked_inputs = (1,)

    def check_value(self, index, value, shapes) -> None:
        check_labels(type(self).__name__, np.asarray(value), shapes[0], self.ignore_index)

    def _nll(self, log_prob, labels, weights):
        dtype = dtype_of(log_prob)
        log_prob = as_symbol(log_prob)
        labels = as_symbol(labels, np.int64)  # int64 indices: a float16 label is inexact beyond 2048 classes
        valid = None
        if self.ignore_index is not None:
            kept = labels != int(self.ignore_index)
            valid = mx.sym.cast(kept, dtype.name)
            labels = labels * kept  # ignored labels pick class 0, weighted 0
        loss = -mx.sym.pick(log_prob, labels, axis=1, keepdims=False, mode="clip")
        sample_weights = None
        if weights is not None:
            sample_weights = mx.sym.take(as_symbol(weights, dtype), labels, axis=0, mode="clip")
        if valid is not None:
            sample_weights = valid if sample_weights is None else sample_weights * valid
        if sample_weights is not None:
            loss = loss * sample_weights
        if self.reduction == "none":
            return loss
        total = reshape(mx.sym.sum(loss), ())
        if self.reduction == "sum":
            return total
        if sample_weights is None:
            return total / float(max(int(np.prod(shape_of(labels))), 1)) if np.prod(shape_of(labels)) else total / 0.0
        return total / reshape(mx.sym.sum(sample_weights), ())


@register("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(NegativeLogLikelihoodLoss):
    """Cross entropy of ``softmax(scores)`` along axis 1; returns the loss, or ``(loss, log_prob)`` when the
    node names two outputs."""

    def __call__(self, scores, labels, weights=None):
        self._check(scores, labels, weights)
        log_prob = mx.sym.log_softmax(as_symbol(scores), axis=1)
        loss = self._nll(log_prob, labels, weights)
        if self.node_output_count is not None and self.node_output_count > 1:
            return loss, log_prob
        return loss


@register("MeanSquaredError")
class MeanSquaredError(MXOp):
    """``reduce((prediction - target) ** 2)``, reduction mean (default), sum or none; the target broadcasts and
    is cast to the prediction's float dtype (a float64 target must not turn a float32 loss into float64); integer
    operands (and bfloat16 ones) are computed in float64, as the reference's."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("MeanSquaredError", attributes))

    def __call__(self, prediction, target):
        try:
            np.broadcast_shapes(shape_of(prediction), shape_of(target))
        except ValueError:
            raise not_broadcastable("MeanSquaredError", shape_of(prediction), shape_of(target)) from None
        dtype = dtype_of(prediction)
        compute = dtype if dtype.kind == "f" else np.dtype(np.float64)  # bfloat16 too, as the reference's
        squared = mx.sym.square(mx.sym.broadcast_sub(as_symbol(prediction, compute), as_symbol(target, compute)))
        if self.reduction == "none":
            loss = squared
        else:
            loss = reshape(mx.sym.sum(squared), ())
            if self.reduction == "mean":
                count = int(np.prod(np.broadcast_shapes(shape_of(prediction), shape_of(target))))
                loss = loss / float(count) if count else loss / 0.0
        return loss
