"""Which nodes of a network a native framework must leave to the reference framework: those that read or write
values the framework cannot hold -- sequences, optionals, strings, 4-bit integers, or any tensor dtype the
framework's predicate refuses -- as far as ONNX type inference can tell.

Every native framework (PyTorch today, TensorFlow and MXNet next) decides this the same way, with its own
``holds(dtype)``; the nodes found run on the reference through the framework's custom-op bridge, which passes
such values through untouched.

>>> import numpy as np, d5
>>> net = d5.Network("strings")
>>> _ = net.add_input("x", (2,), np.float32)
>>> _ = net.add_node("Cast", ["x"], ["s"], to=8)          # to STRING
>>> _ = net.add_node("Cast", ["s"], ["y"], to=1)          # back to FLOAT
>>> _ = net.add_node("Relu", ["y"], ["z"])
>>> net.add_output("z")
>>> sorted(nodes_on_reference(net, holds=lambda dtype: dtype.kind in "biuf"))
['Cast_0', 'Cast_1']
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from d5.errors import D5Error
from d5.network.graph import Network, TensorInfo, node_captures


def foreign_values(graph: Network, holds: Callable[[np.dtype], bool]) -> dict[str, str]:
    """Tensor name -> its type (as text) for every value of ``graph`` the framework cannot hold. Types come from
    the graph's inputs and parameters and ONNX type inference; a value of unknown type counts as holdable."""
    from d5.network.onnx_export import infer_shapes

    def foreign(info: TensorInfo) -> bool:
        return not info.is_tensor or not holds(np.dtype(info.dtype))

    try:
        infos = dict(infer_shapes(graph, validated=True))
    except D5Error:  # inference gives up on some graphs; the runtime types then decide (and errors say so)
        infos = {}
    infos.update(graph.inputs)
    result = {name: info.describe_type() for name, info in infos.items() if foreign(info)}
    result.update({name: f"tensor({value.dtype})" for name, value in graph.params.items()
                   if not holds(np.asarray(value).dtype)})
    return result


def nodes_on_reference(graph: Network, holds: Callable[[np.dtype], bool]) -> dict[str, str]:
    """Node name -> the reason (the foreign value it touches) for each node that must run on the reference."""
    values = foreign_values(graph, holds)
    placed = {}
    for node in graph.nodes:
        touched = [t for t in [*node.inputs, *node_captures(node), *node.outputs] if t and t in values]
        if touched:
            placed[node.name] = f"{touched[0]!r} is a {values[touched[0]]}"
    return placed
