"""The erf form of GELU, written out as Div/Erf/Add/Mul nodes, becomes one Gelu node."""
from __future__ import annotations

import math

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, can_bind, producer_map, scalar


def fuse_gelu(graph: Graph, context) -> int:
    """Matches x * 0.5 * (1 + erf(x / sqrt(2))) in the orders exporters write it (x / sqrt2 or
    x * (1 / sqrt2); the 0.5 applied to x or to the product), every inner value read only
    inside the pattern, and replaces it by Gelu: ONNX's from opset 20, else com.microsoft's (as
    onnxruntime's fusion does). Returns how many were fused."""
    uses = Uses(graph)
    producers = producer_map(graph)
    fused_count = 0
    for erf in list(graph.nodes):
        if erf.op_type != "Erf" or erf.domain != "":
            continue
        match = _match(graph, uses, producers, erf)
        if match is None:
            continue
        x, nodes, output = match
        for domain in ("", MICROSOFT):
            gelu = Node(nodes[-1].name or erf.name, "Gelu", domain, [x], [output])
            if can_bind(context, gelu):
                uses.replace(nodes, gelu)
                fused_count += 1
                break
    return fused_count


def _match(graph: Graph, uses: Uses, producers: dict, erf: Node):
    """(x, the pattern's nodes in graph order, its output) or None."""
    scaled = producers.get(erf.inputs[0])
    if scaled is None or uses.only_reader(scaled.outputs[0]) is not erf:
        return None
    x = _scaled_input(graph, scaled)
    add = uses.only_reader(erf.outputs[0])
    if x is None or add is None or add.op_type != "Add" or _other_scalar(graph, add, erf.outputs[0]) != 1.0:
        return None
    outer = uses.only_reader(add.outputs[0])
    if outer is None or outer.op_type != "Mul":
        return None
    other = _other(outer, add.outputs[0])
    half = producers.get(other)
    if other == x:   # (x * (1 + erf)) * 0.5
        last = uses.only_reader(outer.outputs[0])
        if last is None or last.op_type != "Mul" or _other_scalar(graph, last, outer.outputs[0]) != 0.5:
            return None
        return x, [scaled, erf, add, outer, last], last.outputs[0]
    if (half is not None and half.op_type == "Mul" and uses.only_reader(other) is outer
            and x in half.inputs and _other_scalar(graph, half, x) == 0.5):   # (x * 0.5) * (1 + erf)
        return x, [scaled, half, erf, add, outer], outer.outputs[0]
    return None


def _scaled_input(graph: Graph, node: Node) -> str | None:
    """x, when ``node`` is x / sqrt(2) or x * (1 / sqrt(2))."""
    if node.domain != "" or len(node.inputs) != 2:
        return None
    if node.op_type == "Div" and _near(scalar(graph, node.inputs[1]), math.sqrt(2)):
        return node.inputs[0]
    if node.op_type == "Mul":
        for a, b in (node.inputs, node.inputs[::-1]):
            if _near(scalar(graph, b), 1 / math.sqrt(2)):
                return a
    return None


def _other(node: Node, name: str) -> str:
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _other_scalar(graph: Graph, node: Node, name: str) -> float | None:
    if node.domain != "" or len(node.inputs) != 2 or name not in node.inputs:
        return None
    return scalar(graph, _other(node, name))


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-4 * want
