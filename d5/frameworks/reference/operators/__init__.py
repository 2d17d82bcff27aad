"""Built-in reference operators (NumPy, and C++ kernels from d5._C for conv, pooling, batch norm)."""
from d5.frameworks.reference.operators.registry import ReferenceOp, create_operator, register, supported_operators

__all__ = ["ReferenceOp", "create_operator", "register", "supported_operators"]
