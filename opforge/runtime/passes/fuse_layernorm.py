"""Layer normalization written out as ReduceMean/Sub/Pow/Sqrt/Div nodes becomes one
LayerNormalization node."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, can_bind, constant, new_initializer, producer_map, scalar, static_shape


def fuse_layernorm(graph: Graph, context) -> int:
    """Matches (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* gamma] [+ beta] over the
    last axis (ReduceMean with axes [-1] as attribute or input, keepdims), gamma and beta
    constants of the last dim's size, and replaces it by LayerNormalization(axis=-1) where the
    session has a kernel for it (ONNX's, from opset 17). Returns how many were fused."""
    uses = Uses(graph)
    producers = producer_map(graph)
    fused_count = 0
    for sub in list(graph.nodes):
        match = _match(graph, context, uses, producers, sub)
        if match is None:
            continue
        x, nodes, gamma, beta, eps, output = match
        dim = static_shape(context, x)[-1]
        dtype = context.types.get(x).dtype
        scale = gamma if gamma else new_initializer(graph, f"{sub.name or x}_ln_scale", np.ones(dim, dtype))
        norm = Node(sub.name, "LayerNormalization", "", [x, scale] + ([beta] if beta else []), [output],
                    {"axis": -1, "epsilon": eps})
        if can_bind(context, norm):
            uses.replace(nodes, norm)
            fused_count += 1
        elif not gamma:
            del graph.initializers[scale]
    return fused_count


def _match(graph: Graph, context, uses: Uses, producers: dict, sub: Node):
    if sub.op_type != "Sub" or sub.domain != "" or len(sub.inputs) != 2:
        return None
    x, mean_name = sub.inputs
    mean = producers.get(mean_name)
    shape = static_shape(context, x)
    if not _last_axis_mean(graph, mean, x, shape) or uses.only_reader(mean_name) is not sub:
        return None
    readers = list({id(n): n for n in uses.readers.get(sub.outputs[0], [])}.values())
    square = next((n for n in readers if _is_square(graph, n, sub.outputs[0])), None)
    div = next((n for n in readers if n.op_type == "Div" and n.inputs[0] == sub.outputs[0]), None)
    if square is None or div is None or len(readers) != 2 or sub.outputs[0] in uses.outputs:
        return None
    var = uses.only_reader(square.outputs[0])
    if not _last_axis_mean(graph, var, square.outputs[0], shape):
        return None
    add = uses.only_reader(var.outputs[0])
    eps = _add_scalar(graph, add, var.outputs[0])
    sqrt = uses.only_reader(add.outputs[0]) if eps is not None else None
    if sqrt is None or sqrt.op_type != "Sqrt" or uses.only_reader(sqrt.outputs[0]) is not div or div.inputs[1] != sqrt.outputs[0]:
        return None
    nodes, out = [mean, sub, square, var, add, sqrt, div], div.outputs[0]
    gamma = beta = ""
    for op in ("Mul", "Add"):
        nxt = uses.only_reader(out)
        if nxt is None or nxt.op_type != op or nxt.domain != "":
            break
        other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
        value = constant(graph, other)
        if value is None or value.shape not in ((shape[-1],),):
            break
        if op == "Mul":
            gamma = other
        else:
            beta = other
        nodes.append(nxt)
        out = nxt.outputs[0]
    return x, nodes, gamma, beta, eps, out


def _last_axis_mean(graph: Graph, node: Node | None, source: str, shape) -> bool:
    if node is None or node.op_type != "ReduceMean" or node.domain != "" or node.inputs[0] != source or shape is None:
        return False
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        value = constant(graph, node.inputs[1])
        axes = None if value is None else value.reshape(-1).tolist()
    return (axes is not None and len(axes) == 1 and int(axes[0]) in (-1, len(shape) - 1)
            and node.attrs.get("keepdims", 1) == 1)


def _is_square(graph: Graph, node: Node, name: str) -> bool:
    if node.domain != "" or node.inputs[0] != name:
        return False
    if node.op_type == "Pow":
        return scalar(graph, node.inputs[1]) == 2.0
    return node.op_type == "Mul" and node.inputs == [name, name]


def _add_scalar(graph: Graph, node: Node | None, name: str) -> float | None:
    if node is None or node.op_type != "Add" or node.domain != "" or name not in node.inputs:
        return None
    other = node.inputs[1] if node.inputs[0] == name else node.inputs[0]
    return scalar(graph, other)
