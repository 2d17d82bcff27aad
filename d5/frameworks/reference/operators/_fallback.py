"""Inference-only fallback for ONNX operators the reference framework does not implement: the node runs
on ``onnx.reference.ReferenceEvaluator``. Executors use it only when asked (``fallback=True``), warn
naming the operators, and refuse to backpropagate through it.
"""
from __future__ import annotations

import numpy as np

from d5.errors import UnsupportedOperatorError
from d5.frameworks.reference.operators import ReferenceOp
from d5.ops.operator import Gradient


class OnnxReferenceFallbackOp(ReferenceOp):
    """Runs one ONNX node with onnx.reference (forward only)."""

    gradient = Gradient.NONE

    def __init__(self, node_proto, opset: int) -> None:
        super().__init__()
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        self.op_type = node_proto.op_type
        self.no_gradient_reason = (f"{self.op_type} runs on the onnx.reference fallback, which has no gradient; d5 "
                                   "cannot train through it. Replace the node or implement the operator in "
                                   "d5.frameworks.reference.operators")
        self._input_names = [name for name in node_proto.input]
        self._output_count = len(node_proto.output)
        graph = helper.make_graph([node_proto], "fallback", [], [helper.make_empty_tensor_value_info(o)
                                                                 for o in node_proto.output if o])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node_proto.domain or "", opset)])
        try:
            self._evaluator = ReferenceEvaluator(model)
        except Exception as err:  # onnx.reference raises bare exceptions for what it cannot run
            raise UnsupportedOperatorError(f"{self.op_type}: not implemented by d5 and onnx.reference cannot run "
                                           f"it either ({type(err).__name__}: {err})") from None

    def forward(self, inputs):
        feeds = {name: value for name, value in zip(self._input_names, inputs) if name and value is not None}
        try:
            results = self._evaluator.run(None, feeds)
        except Exception as err:  # same as above: surface a d5 error naming the operator
            raise UnsupportedOperatorError(f"{self.op_type} (onnx.reference fallback) failed: "
                                           f"{type(err).__name__}: {err}") from None
        # Sequences (lists) and empty optionals (None) pass through as they are.
        return tuple(r if r is None or isinstance(r, list) else np.asarray(r) for r in results)
