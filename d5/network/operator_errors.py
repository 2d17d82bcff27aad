"""The executor's backstop: any exception escaping an operator becomes a d5 error naming the node.

Operators check what they can and raise d5 errors themselves; validation checks every node against its
ONNX schema before anything runs. What still escapes (a NumPy error on an input nobody anticipated, a
bug) must not reach the user as a bare ``IndexError`` from deep inside NumPy: it becomes a d5 error that
names the node, its op type and the inputs it was given, with the original exception as ``__cause__``.

>>> from d5.network.graph import Node
>>> node = Node("relu", "Relu", ["x"], ["y"])
>>> err = operator_failure(IndexError("list index out of range"), node, [[1.0, 2.0]], opset=17)
>>> type(err).__name__
'OperatorError'
>>> print(str(err).split(". ")[0])
node 'relu' (Relu): input 0 ('x') is a sequence (a list of 2 values), but Relu takes a tensor there
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from d5.errors import D5Error, InsufficientMemoryError, OperatorError
from d5.network.graph import Node
from d5.network.node_schema import allowed_input_types


def operator_failure(err: BaseException, node: Node, inputs: Sequence[Any], opset: int | None = None,
                     phase: str = "") -> D5Error:
    """The d5 error to raise (``raise operator_failure(...) from err``) for ``err``, which escaped the
    operator of ``node`` given ``inputs`` (``phase`` is ``'backward'`` for a gradient). A d5 error keeps its
    class and gets the node's name; a MemoryError becomes InsufficientMemoryError; anything else becomes
    OperatorError describing the inputs."""
    where = f"node {node.name!r} ({node.op_type}){' ' + phase if phase else ''}"
    if isinstance(err, D5Error):
        try:
            return type(err)(f"{where}: {err}")
        except TypeError:  # a user's D5Error subclass with another constructor: keep the message, lose the class
            return OperatorError(f"{where}: {type(err).__name__}: {err}")
    if isinstance(err, MemoryError) or (isinstance(err, ValueError) and _TOO_BIG.search(str(err))):
        return InsufficientMemoryError(f"{where}: out of memory ({_describe_inputs(inputs)}); run a smaller batch "
                                       "or free memory")
    mismatch = _container_mismatch(node, inputs, opset)
    if mismatch:
        return OperatorError(f"{where}: {mismatch}. Feed a tensor there (np.stack the list, or take one element "
                             f"with SequenceAt / OptionalGetElement)")
    detail = f"{type(err).__name__}: {err}".strip()
    return OperatorError(f"{where}: the operator failed ({detail[:300]}) on {_describe_inputs(inputs)}. Check that "
                         f"these inputs are what {node.op_type} expects (see the ONNX operator documentation); if "
                         "they are, this is a bug in d5: please report it with this message")


# NumPy's ValueErrors for an array larger than the address space: an allocation no memory could hold.
_TOO_BIG = re.compile(r"array is too big|Maximum allowed (size|dimension) exceeded")


def _container_mismatch(node: Node, inputs: Sequence[Any], opset: int | None) -> str | None:
    """Why an input is a list (sequence) or None (empty optional) where the operator takes a tensor, if so."""
    for index, value in enumerate(inputs):
        if not isinstance(value, list) and value is not None:
            continue
        allowed = allowed_input_types(node.op_type, opset, index, node.domain) if opset else None
        if not allowed or any(not t.startswith("tensor(") for t in allowed):
            continue  # unknown, or the operator takes sequences or optionals there
        name = node.inputs[index] if index < len(node.inputs) else ""
        if value is None and name:
            return f"input {index} ({name!r}) is an empty optional (None), but {node.op_type} takes a tensor there"
        if isinstance(value, list):
            return (f"input {index} ({name!r}) is a sequence (a list of {len(value)} values), but {node.op_type} "
                    f"takes a tensor there")
    return None


def _describe_inputs(inputs: Sequence[Any]) -> str:
    return "inputs [" + ", ".join(_describe(value) for value in inputs) + "]"


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, (np.ndarray, np.generic)):
        return f"{value.dtype} {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


__all__ = ["operator_failure"]
