"""A per-channel constant multiplied into or added to a Conv's output is folded into its
weights and bias."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, constant, new_initializer


def fold_conv_affine(graph: Graph, context=None) -> int:
    """Folds Mul(conv, c) and Add(conv, c), where the Conv's output has no other reader, its
    weights and bias are constant and c is a constant that broadcasts per output channel (one
    value, or shape (M, 1, ..., 1) up to leading 1s), into the Conv: Mul scales the weights and
    bias of each channel, Add adds to the bias; a chain of them folds one by one. Returns how
    many were folded."""
    folded = total = _fold_once(graph)
    while folded:
        folded = _fold_once(graph)
        total += folded
    return total


def _fold_once(graph: Graph) -> int:
    uses = Uses(graph)
    folded = 0
    for conv in list(graph.nodes):
        if conv.op_type != "Conv" or conv.domain != "" or len(conv.inputs) < 2:
            continue
        op = uses.only_reader(conv.outputs[0])
        if op is None or op.op_type not in ("Mul", "Add") or op.domain != "" or len(op.inputs) != 2:
            continue
        other = op.inputs[1] if op.inputs[0] == conv.outputs[0] else op.inputs[0]
        w = constant(graph, conv.inputs[1])
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        bias = constant(graph, conv.inputs[2]) if has_bias else None
        if w is None or w.dtype.kind != "f" or (has_bias and bias is None):
            continue
        v = _per_channel(constant(graph, other), w.shape[0], w.ndim)
        if v is None:
            continue
        b = bias.astype(np.float64) if bias is not None else np.zeros(w.shape[0])
        if op.op_type == "Mul":
            w = (w * v.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
            b = b * v
            weight = new_initializer(graph, f"{conv.inputs[1]}_scaled", w)
        else:
            b = b + v
            weight = conv.inputs[1]
        b_name = new_initializer(graph, f"{conv.inputs[1]}_bias_folded", b.astype(w.dtype))
        fused = Node(conv.name, "Conv", "", [conv.inputs[0], weight, b_name], [op.outputs[0]], dict(conv.attrs),
                     attr_types=dict(conv.attr_types))
        uses.replace([conv, op], fused)
        folded += 1
    return folded


def _per_channel(c: np.ndarray | None, channels: int, rank: int) -> np.ndarray | None:
    """c as one float64 value per output channel, if it broadcasts that way onto (N, M, ...)."""
    if c is None or c.dtype.kind != "f" or c.ndim > rank:
        return None
    if c.size == 1:
        return np.full(channels, float(c.reshape(-1)[0]))
    shape = (1,) * (rank - c.ndim) + c.shape
    if shape[0] != 1 or shape[1] != channels or any(d != 1 for d in shape[2:]):
        return None
    return c.reshape(-1).astype(np.float64)
