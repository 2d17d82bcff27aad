"""L1 — networks: the framework-neutral ONNX-compatible graph and the GraphExecutor interface.

Framework-neutral: nothing here imports a deep-learning framework (onnx is imported lazily for export
and shape inference).
"""
from d5.network.executor import GraphExecutor, check_inputs
from d5.network.graph import Network, Node, TensorInfo, gradient_name

__all__ = ["GraphExecutor", "Network", "Node", "TensorInfo", "check_inputs", "gradient_name"]
