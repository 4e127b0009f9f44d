"""A Relu or Clip right before a QuantizeLinear that clamps as much goes, as onnxruntime's level-1
ReluQuantFusion and ClipQuantFusion remove it: the integers are the same, and the op before it can
then join a QDQ group (fuse_qdq; constant folding keeps that group's weight DequantizeLinear)."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, constant

_EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def drop_redundant_clips(graph: Graph, context) -> int:
    """onnxruntime's ReluQuantFusion and ClipQuantFusion (relu_quantizelinear.cc,
    clip_quantizelinear.cc): a Relu or Clip whose one reader is a QuantizeLinear that clamps as
    much goes (a Relu when the zero point is the type's least value, a Clip whose range covers
    the quantized range); the same integers, and the op before it may then fuse. Returns how many."""
    uses = Uses(graph)
    dropped = 0
    for node in list(graph.nodes):
        if node.domain != "" or node.op_type not in ("Relu", "Clip") or not node.inputs:
            continue
        q = uses.only_reader(node.outputs[0])
        if (q is None or q.op_type != "QuantizeLinear" or q.domain != "" or len(q.inputs) != 3
                or not _clamped_by(graph, context, node, q)):
            continue
        uses.replace([node, q], Node(q.name, q.op_type, q.domain, [node.inputs[0], *q.inputs[1:]], list(q.outputs),
                                     dict(q.attrs)))
        dropped += 1
    return dropped


def _clamped_by(graph: Graph, context, clip: Node, q: Node) -> bool:
    """Whether QuantizeLinear ``q`` clamps at least as much as ``clip`` (a Relu or Clip)."""
    zero = constant(graph, q.inputs[2])
    if zero is None or zero.size != 1 or zero.dtype not in _EIGHT_BIT:
        return False
    low, high = np.iinfo(zero.dtype).min, np.iinfo(zero.dtype).max
    if clip.op_type == "Relu":
        return int(zero.reshape(-1)[0]) == low
    scale = constant(graph, q.inputs[1])
    if (scale is None or scale.ndim != 0 or scale.dtype != np.float32 or zero.ndim != 0
            or getattr(context.bind(q), "opset", 13) >= 19):
        return False
    bounds = _clip_bounds(graph, clip)
    if bounds is None:
        return False
    eps = np.finfo(np.float32).eps
    z = int(zero)
    return bool(bounds[0] - np.float32(scale * (low - z)) <= eps and np.float32(scale * (high - z)) - bounds[1] <= eps)


def _clip_bounds(graph: Graph, clip: Node) -> tuple[np.float32, np.float32] | None:
    """A Clip's constant min and max (attributes before opset 11, inputs since), or None."""
    if "min" in clip.attrs or "max" in clip.attrs or len(clip.inputs) == 1:
        return (np.float32(clip.attrs.get("min", np.finfo(np.float32).min)),
                np.float32(clip.attrs.get("max", np.finfo(np.float32).max)))
    bounds = []
    for i, default in ((1, np.finfo(np.float32).min), (2, np.finfo(np.float32).max)):
        name = clip.inputs[i] if len(clip.inputs) > i else ""
        value = constant(graph, name) if name else np.float32(default)
        if value is None or value.size != 1:
            return None
        bounds.append(np.float32(value.reshape(-1)[0]))
    return bounds[0], bounds[1]
