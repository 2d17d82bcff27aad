"""Scopes of ONNX control flow on the protobuf level: which outer-scope tensors a subgraph (the body of
If, Loop, Scan, SequenceMap) reads by name. The importer needs them before it builds d5 Networks: a
control-flow node depends on the producers of the tensors its bodies capture, so sorting and the
dangling-name check count those as the node's inputs.
"""
from __future__ import annotations


def graph_free_names(graph) -> set[str]:
    """Names a GraphProto reads without defining them: the outer-scope tensors it (or a nested body) captures."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer} | {""}
    defined |= {s.values.name for s in graph.sparse_initializer}
    read = {out.name for out in graph.output}
    for node in graph.node:
        defined.update(node.output)
        read.update(node_reads(node))
    return read - defined


def node_reads(node) -> list[str]:
    """A NodeProto's inputs followed by the outer-scope tensors its subgraphs capture."""
    reads = list(node.input)
    for attribute in node.attribute:
        bodies = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
        for body in bodies:
            reads.extend(sorted(graph_free_names(body) - set(reads)))
    return reads


def all_nodes(graph, label_of, prefix: str = ""):
    """``(label, NodeProto)`` of every node of ``graph`` and, depth first, of its control-flow bodies;
    ``label_of(node, index)`` names a node."""
    for index, node in enumerate(graph.node):
        label = prefix + label_of(node, index)
        yield label, node
        for attribute in node.attribute:
            bodies = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
            for body in bodies:
                yield from all_nodes(body, label_of, f"{label}, subgraph {attribute.name!r}: ")
