"""Reshape merging: a Reshape of a Reshape reads the original value, and a Reshape to the shape
its input already has goes."""
from __future__ import annotations

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, constant, producer_map, static_shape


def merge_reshapes(graph: Graph, context) -> int:
    """Reshape(Reshape(x, s1), s2) becomes Reshape(x, s2) when s2 is a constant without 0 (which
    would copy a dim of the middle value), the first Reshape going once nothing else reads it;
    a Reshape whose input and output have the same static shape is dropped. Returns how many
    Reshapes were removed."""
    uses = Uses(graph)
    producers = producer_map(graph)
    removed = 0
    for node in list(graph.nodes):
        if not _is_reshape(node):
            continue
        shape_in, shape_out = static_shape(context, node.inputs[0]), static_shape(context, node.outputs[0])
        if shape_in is not None and shape_in == shape_out:
            if uses.rename(node.outputs[0], node.inputs[0]):
                uses.remove(node)
                removed += 1
            continue
        first = producers.get(node.inputs[0])
        target = constant(graph, node.inputs[1])
        if not _is_reshape(first) or target is None or (target == 0).any():
            continue
        merged = Node(node.name, "Reshape", "", [first.inputs[0], node.inputs[1]], list(node.outputs),
                      dict(node.attrs), attr_types=dict(node.attr_types))
        uses.replace([node], merged)
        producers[node.outputs[0]] = merged
        if uses.unread(first.outputs[0]):
            uses.remove(first)
            removed += 1
    return removed


def _is_reshape(node: Node | None) -> bool:
    return (node is not None and node.op_type == "Reshape" and node.domain == "" and len(node.inputs) == 2
            and bool(node.inputs[1]))
