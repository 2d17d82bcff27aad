"""Losses as native torch operations: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss (ONNX), and d5's
MeanSquaredError (domain ``ai.d5``), with the reference's semantics: reduction mean/sum/none, ignore_index,
per-class weights (``mean`` divides by the summed weights of the non-ignored labels; all ignored gives NaN)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import check_loss_scores


@register("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(TorchOp):
    """``-input[label]`` per sample, weighted and reduced; input (N, C, d1, ...) holds log-probabilities."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def forward(self, log_prob, labels, weights=None):
        return self._nll(log_prob, labels, weights)

    def _nll(self, log_prob, labels, weights):
        check_loss_scores(type(self).__name__, tuple(log_prob.shape))
        labels = labels.long()
        if weights is None or not weights.requires_grad:
            # torch's fused nll_loss (what nn.CrossEntropyLoss runs) has ONNX's semantics: per-class weights, the
            # ignored label, 'mean' dividing by the summed weights of the samples that count.
            try:
                return F.nll_loss(log_prob, labels, weight=None if weights is None else weights.to(log_prob.dtype),
                                  ignore_index=-100 if self.ignore_index is None else self.ignore_index,
                                  reduction=self.reduction)
            except (IndexError, RuntimeError):  # checked only on failure: a check every step would cost a sync
                self._check_labels(log_prob, labels)
                raise
        self._check_labels(log_prob, labels)
        return self._weighted_nll(log_prob, labels, weights)

    def _check_labels(self, log_prob, labels) -> None:
        """The reference's error for a label outside [0, classes) (other than ignore_index)."""
        classes = log_prob.shape[1]
        counted = labels if self.ignore_index is None else labels[labels != self.ignore_index]
        bad = counted[(counted < 0) | (counted >= classes)]
        if bad.numel():
            raise ShapeError(f"{type(self).__name__}: label {int(bad[0])} is out of range for scores of shape "
                             f"{tuple(log_prob.shape)} ({classes} classes); labels must be in [0, {classes})")

    def _weighted_nll(self, log_prob, labels, weights):
        """The same, explicitly: differentiable in trainable class weights, which the fused kernel is not."""
        valid = None if self.ignore_index is None else labels != self.ignore_index
        safe = labels if valid is None else torch.where(valid, labels, torch.zeros_like(labels))
        loss = -torch.gather(log_prob, 1, safe.unsqueeze(1)).squeeze(1)
        sample_weights = weights.to(loss.dtype)[safe]
        if valid is not None:
            sample_weights = torch.where(valid, sample_weights, torch.zeros_like(sample_weights))
        loss = loss * sample_weights
        if self.reduction == "none":
            return loss
        total = loss.sum()
        return total / sample_weights.sum() if self.reduction == "mean" else total


@register("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(NegativeLogLikelihoodLoss):
    """Cross entropy of ``softmax(scores)`` along axis 1; returns the loss, or ``(loss, log_prob)`` when the
    node names two outputs."""

    def forward(self, scores, labels, weights=None):
        if self.node_output_count is not None and self.node_output_count > 1:
            log_prob = torch.log_softmax(scores, dim=1)
            return self._nll(log_prob, labels, weights), log_prob
        if scores.dim() >= 2 and (weights is None or not weights.requires_grad):
            labels = labels.long()
            try:  # torch's cross_entropy (log_softmax and nll_loss in one call, as nn.CrossEntropyLoss)
                return F.cross_entropy(scores, labels, weight=None if weights is None else weights.to(scores.dtype),
                                       ignore_index=-100 if self.ignore_index is None else self.ignore_index,
                                       reduction=self.reduction)
            except (IndexError, RuntimeError):
                self._check_labels(scores, labels)
                raise
        return self._nll(torch.log_softmax(scores, dim=1), labels, weights)


@register("MeanSquaredError")
class MeanSquaredError(TorchOp):
    """``reduce((prediction - target) ** 2)``, reduction mean (default), sum or none; the target broadcasts and
    is cast to the prediction's float dtype (a float64 target must not turn a float32 loss into float64)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("MeanSquaredError", attributes))

    def forward(self, prediction, target):
        if prediction.is_floating_point():
            target = target.to(prediction.dtype)
        else:
            prediction, target = prediction.double(), target.double()
        squared = torch.square(prediction - target)
        if self.reduction == "none":
            return squared
        return squared.mean() if self.reduction == "mean" else squared.sum()
