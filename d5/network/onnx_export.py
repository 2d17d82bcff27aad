"""Conversion of a :class:`d5.Network` to an ONNX ModelProto, and shape inference through ONNX.

ONNX's own shape inference is the well-kept implementation of every operator's shape rules, so d5
infers shapes by exporting and asking ``onnx.shape_inference`` rather than duplicating those rules.
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.network.graph import Network, TensorInfo
from d5.network.op_types import CUSTOM_DOMAIN, D5_DOMAIN


def _value_info(name: str, dtype: np.dtype, shape):
    from onnx import helper

    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dims = None if shape is None else [d if isinstance(d, (int, str)) else None for d in shape]
    return helper.make_tensor_value_info(name, elem_type, dims)


def network_to_onnx(network: Network, infer_output_types: bool = True):
    """Build an ``onnx.ModelProto`` of ``network`` (nodes in topological order)."""
    import onnx
    from onnx import helper, numpy_helper

    order = network.topological_order()
    nodes = []
    for node in order:
        attrs = {k: v for k, v in node.attrs.items() if v is not None}
        nodes.append(helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name,
                                      domain=node.domain or None, **attrs))
    inputs = [_value_info(i.name, i.dtype, i.shape) for i in network.inputs.values()]
    initializers = [numpy_helper.from_array(np.ascontiguousarray(v), name) for name, v in network.params.items()]
    outputs = [helper.make_empty_tensor_value_info(name) for name in network.outputs]
    graph = helper.make_graph(nodes, network.name, inputs, outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", network.opset)]
    domains = {n.domain for n in order} - {""}
    opsets += [helper.make_opsetid(d, 1) for d in sorted(domains)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="d5")
    # The oldest IR version that can carry these opsets, so older runtimes (onnxruntime) accept the file.
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    if infer_output_types:
        inferred = _infer(model)
        for out in model.graph.output:
            info = inferred.get(out.name)
            if info is not None:
                out.CopyFrom(_value_info(out.name, info.dtype, info.shape))
        if not domains & {CUSTOM_DOMAIN, D5_DOMAIN}:  # the checker rejects domains it has no schemas for
            onnx.checker.check_model(model)
    return model


def _infer(model) -> dict[str, TensorInfo]:
    import onnx
    from onnx import helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except onnx.shape_inference.InferenceError as err:
        raise ShapeError(f"shape inference failed: {err}") from None
    result = {}
    graph = inferred.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        ttype = vi.type.tensor_type
        if not ttype.elem_type:
            continue
        shape = None
        if ttype.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in ttype.shape.dim)
        result[vi.name] = TensorInfo(vi.name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(ttype.elem_type)))
    for init in graph.initializer:
        result[init.name] = TensorInfo(init.name, tuple(init.dims), np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)))
    return result


def infer_shapes(network: Network) -> dict[str, TensorInfo]:
    """Shapes and dtypes of all tensors of ``network`` that ONNX shape inference can determine."""
    return _infer(network_to_onnx(network, infer_output_types=False))
