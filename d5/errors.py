"""The d5 error hierarchy.

Every error d5 raises on bad input derives from :class:`D5Error` and says what was wrong and what to do.

>>> import d5
>>> try:
...     raise d5.errors.ShapeError("input 'x': expected shape (N, 3), got (2, 4)")
... except d5.errors.D5Error as err:
...     print(type(err).__name__)
ShapeError
"""


class D5Error(Exception):
    """Base class of every error d5 raises deliberately."""


class GraphError(D5Error):
    """A network graph is malformed: a cycle, a dangling input, a duplicate or unknown tensor name."""


class ShapeError(D5Error, ValueError):
    """A tensor has the wrong shape or dtype."""


class UnsupportedOperatorError(D5Error):
    """An operator type is unknown, or a framework does not implement it."""


class SchemaError(GraphError):
    """A node does not match its operator's ONNX schema at the node's opset: wrong number of inputs or
    outputs, an attribute of the wrong type, or an input element type the operator does not accept."""


class OperatorError(D5Error):
    """An operator failed while running a graph node in a way it did not anticipate. The executor's
    backstop: the message names the node and operator, the original exception is the ``__cause__``."""


class InsufficientMemoryError(D5Error, MemoryError):
    """A tensor (or a batch's working set) would not fit in the memory available; the message names it
    and, where d5 can tell, the batch size that would fit."""


class OnnxImportError(D5Error):
    """An ONNX model could not be imported."""


class DatasetError(D5Error):
    """A dataset is missing, truncated or corrupt."""


class CompileError(D5Error):
    """A C++ operator failed to compile."""


class DivergenceError(D5Error, FloatingPointError):
    """Training produced a NaN or infinite loss."""


class DistributedError(D5Error):
    """A distributed (MPI) operation failed or was misconfigured."""


class RecipeError(D5Error, ValueError):
    """A recipe's components are inconsistent (overlapping, missing or of the wrong type)."""


class InvalidHyperparameterError(D5Error, ValueError):
    """An optimizer or schedule was given a hyper-parameter outside its valid range."""


class FrameworkNotInstalledError(D5Error, ImportError):
    """A framework d5 was asked to use is not installed."""


class FrameworkImportError(D5Error, ImportError):
    """A framework's package is installed but fails to import (a NumPy ABI clash, a protobuf clash, a missing
    shared library): the message carries the framework's own error and what to do."""


class CheckpointError(D5Error):
    """A checkpoint is corrupt, incomplete, from another network or from an incompatible d5 version."""


class OutputPathError(D5Error, OSError):
    """A result, report or data file cannot be written where it was asked to go: a directory that cannot be
    created, a read-only or full file system. The message names the path and what to do; an OSError too, so
    code that handles a failed write (and says what is left intact) keeps handling it."""


__all__ = [
    "D5Error", "GraphError", "SchemaError", "ShapeError", "UnsupportedOperatorError", "OperatorError",
    "InsufficientMemoryError", "OnnxImportError",
    "DatasetError", "CompileError", "DivergenceError", "DistributedError", "RecipeError",
    "FrameworkNotInstalledError", "FrameworkImportError", "InvalidHyperparameterError", "CheckpointError", "OutputPathError",
]
