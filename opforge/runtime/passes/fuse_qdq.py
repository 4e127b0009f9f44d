"""Operators in QDQ form (DequantizeLinear -> op -> QuantizeLinear, as quantize_static writes them by
default) become quantized operators where onnxruntime's CPU QDQ transformer makes them, and only
there: QLinearConv, QLinearMatMul and com.microsoft's QLinearAdd, QLinearMul,
QLinearGlobalAveragePool, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax and QLinearConcat. The
integers then are onnxruntime's, and products run on the int8 GEMM instead of dequantized floats.

onnxruntime's rules (core/optimizer/qdq_transformer/): on x86 its selectors
(selectors_actions/qdq_selectors.cc, qdq_selector_action_transformer.cc, QDQIsInt8Allowed() false)
refuse a Conv or MatMul whose first input is int8, and want the types of every input and the
output equal for Add, Mul, Concat and the unary ops. Before they look, QDQS8ToU8Transformer
(qdq_s8_to_u8.cc, s8_to_u8.h) makes uint8 of each int8 QuantizeLinear whose one consumer is one
DequantizeLinear (counted after EnsureUniqueDQForNodeUnit gave every consumer its own), while
constant weights stay int8. So with int8 activations only a Conv/MatMul reading a value that
nothing else reads is fused, and an Add of such a value and a constant is not."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, can_bind, constant, new_initializer, producer_map

# op type -> (quantized op type, its domain)
QLINEAR = {"Conv": ("QLinearConv", ""), "MatMul": ("QLinearMatMul", ""), "Add": ("QLinearAdd", MICROSOFT),
           "Mul": ("QLinearMul", MICROSOFT), "GlobalAveragePool": ("QLinearGlobalAveragePool", MICROSOFT),
           "Sigmoid": ("QLinearSigmoid", MICROSOFT), "Softmax": ("QLinearSoftmax", MICROSOFT),
           "Concat": ("QLinearConcat", MICROSOFT), "LeakyRelu": ("QLinearLeakyRelu", MICROSOFT)}
# ops that only move or pick values, run on the 8-bit values when the quantizers around them agree
# (onnxruntime's drop rule, less Reduce and Resize, which need more conditions)
DROPPABLE = {"Expand", "Flatten", "Gather", "GatherElements", "MaxPool", "Reshape", "Slice", "Squeeze", "Tile",
             "Transpose", "Unsqueeze"}
# ops that pick the largest value: on the 8-bit values only with a positive scale (a negative one
# would make the largest the smallest), as onnxruntime's allow_nonpositive_scale = false
ORDERED = {"MaxPool"}
# ops onnxruntime fuses only when their first input is not int8 (QDQIsInt8Allowed() on x86)
NO_INT8_INPUT = ("Conv", "MatMul")
EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


@dataclass
class QValue:
    """A quantized value as a QLinear op takes it: data, scale and zero point names, the data's
    dtype and the scale's values."""

    data: str
    scale: str
    zero_point: str
    dtype: np.dtype
    scales: np.ndarray

    @property
    def names(self) -> list[str]:
        return [self.data, self.scale, self.zero_point]


def fuse_qdq(graph: Graph, context) -> int:
    """Replaces each op of QLINEAR whose float inputs all come from DequantizeLinear and whose one
    output goes only to a QuantizeLinear (8-bit, constant scales and zero points, per tensor but
    for weights per output channel) by its quantized op, where onnxruntime's selectors would
    (the type rules of the module's doc); DequantizeLinear nodes left unread go. Returns how many
    ops were fused."""
    uses = Uses(graph)
    producers = producer_map(graph)
    unsigned = _unsigned_in_onnxruntime(graph, uses)
    fused_count = 0
    for node in list(graph.nodes):
        if node.domain != "" or node.op_type not in QLINEAR or len(node.outputs) != 1:
            continue
        q = uses.only_reader(node.outputs[0])
        out = _quantized_output(graph, context, q)
        dqs = [producers.get(name) for name in node.inputs]
        if out is None or not _onnxruntime_selects(context, node, dqs, q, unsigned):
            continue
        fused = _fused(graph, context, node, dqs, out, q)
        if fused is None or not can_bind(context, fused):
            continue
        uses.replace([node, q], fused)
        fused_count += 1
        for dq in {id(d): d for d in dqs if d is not None}.values():
            if uses.unread(dq.outputs[0]) and any(n is dq for n in graph.nodes):
                uses.remove(dq)
    return fused_count + _drop_pairs(graph, context, uses, producer_map(graph), unsigned)


def _drop_pairs(graph: Graph, context, uses: Uses, producers: dict, unsigned: set[str]) -> int:
    """onnxruntime's "drop" rule: an op of DROPPABLE between a DequantizeLinear and a
    QuantizeLinear of one type and the same constant scale and zero point moves the 8-bit values
    themselves (the same numbers, two passes over the data fewer). Returns how many were dropped."""
    dropped = 0
    for node in list(graph.nodes):
        if node.domain != "" or node.op_type not in DROPPABLE or len(node.outputs) != 1 or not node.inputs:
            continue
        dq, q = producers.get(node.inputs[0]), uses.only_reader(node.outputs[0])
        if (dq is None or dq.op_type != "DequantizeLinear" or q is None or q.op_type != "QuantizeLinear"
                or any(producers.get(name) is not None and producers[name].op_type == "DequantizeLinear"
                       for name in node.inputs[1:])
                or _seen_type(context, dq.inputs[0], unsigned) != _seen_type(context, q.outputs[0], unsigned)
                or not _same_scalar_parameters(graph, dq, q, positive=node.op_type in ORDERED)):
            continue
        moved = Node(node.name, node.op_type, node.domain, [dq.inputs[0], *node.inputs[1:]], [q.outputs[0]],
                     dict(node.attrs))
        if not can_bind(context, moved):
            continue
        uses.replace([node, q], moved)
        dropped += 1
        if uses.unread(dq.outputs[0]) and any(n is dq for n in graph.nodes):
            uses.remove(dq)
    return dropped


def _same_scalar_parameters(graph: Graph, dq: Node, q: Node, positive: bool = False) -> bool:
    """Whether ``dq`` and ``q`` have equal constant one-value scales and zero points
    (onnxruntime's IsQDQPairSupported), the scale above zero if ``positive``."""
    def parameters(node: Node):
        scale = constant(graph, node.inputs[1])
        zero = constant(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if scale is None or scale.size != 1 or (len(node.inputs) > 2 and node.inputs[2] and zero is None):
            return None
        return float(scale.reshape(-1)[0]), int(zero.reshape(-1)[0]) if zero is not None else 0

    first = parameters(dq)
    return first is not None and first == parameters(q) and (first[0] > 0 or not positive)


def _unsigned_in_onnxruntime(graph: Graph, uses: Uses) -> set[str]:
    """The int8 values that onnxruntime's QDQS8ToU8Transformer makes uint8 before its selectors
    look: the output of a QuantizeLinear read only by one DequantizeLinear that one input slot
    reads, with equal constant int8 zero points on both. (Its conversion of constant int8 weights
    runs only in AVX2 precision mode, off by default.)"""
    unsigned = set()
    for q in graph.nodes:
        if q.op_type != "QuantizeLinear" or q.domain not in ("", MICROSOFT):
            continue
        dq = uses.only_reader(q.outputs[0])
        zero = _int8_zero_point(graph, q)
        if (dq is not None and dq.op_type == "DequantizeLinear" and _copies_of(uses, dq.outputs[0]) <= 1
                and zero is not None and zero == _int8_zero_point(graph, dq)):
            unsigned.add(q.outputs[0])
    return unsigned


def _copies_of(uses: Uses, name: str) -> int:
    """How many DequantizeLinear nodes EnsureUniqueDQForNodeUnit leaves of the one making ``name``:
    one per input slot reading it, plus the original when the graph or a subgraph needs it too."""
    slots = sum(reader.inputs.count(name) for reader in uses.readers.get(name, []))
    return slots + (name in uses.outputs or name in uses.implicit) if slots else 1


def _int8_zero_point(graph: Graph, node: Node) -> int | None:
    """A QuantizeLinear's or DequantizeLinear's zero point when it is a constant int8 scalar."""
    zero = constant(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    return int(zero.reshape(-1)[0]) if zero is not None and zero.dtype == np.int8 and zero.size == 1 else None


def _onnxruntime_selects(context, node: Node, dqs: list, q: Node, unsigned: set[str]) -> bool:
    """Whether onnxruntime's selector for ``node``'s op takes this group, by the types it sees
    (those of ``unsigned`` made uint8): Conv and MatMul want a first input that is not int8 and
    an output of its type; the others want every input's type to be the output's."""
    def seen(name: str):
        return _seen_type(context, name, unsigned)

    if any(dq is None or dq.op_type != "DequantizeLinear" for dq in dqs):
        return False
    out = seen(q.outputs[0])
    if node.op_type in NO_INT8_INPUT:
        return seen(dqs[0].inputs[0]) == out and out != np.int8
    return all(seen(dq.inputs[0]) == out for dq in dqs)


def _seen_type(context, name: str, unsigned: set[str]):
    """``name``'s dtype as onnxruntime's selectors see it: uint8 for those of ``unsigned``."""
    known = context.types.get(name)
    return np.dtype(np.uint8) if name in unsigned else (known.dtype if known is not None else None)


def _zero_point(graph: Graph, name: str, dtype: np.dtype, shape) -> tuple[str, np.ndarray] | None:
    """The zero point's name and value; an absent one becomes a zero initializer."""
    if not name:
        value = np.zeros(shape, dtype)
        return new_initializer(graph, "qdq_zero_point", value), value
    value = constant(graph, name)
    return (name, value) if value is not None and value.dtype == dtype else None


def _quantized_output(graph: Graph, context, q: Node | None) -> QValue | None:
    """The output of QuantizeLinear ``q`` when it is per tensor and 8-bit."""
    if q is None or q.op_type != "QuantizeLinear" or q.domain != "" or q.attrs.get("block_size", 0):
        return None
    scale = constant(graph, q.inputs[1])
    known = context.types.get(q.outputs[0])
    if scale is None or scale.dtype != np.float32 or scale.size != 1 or known is None or known.dtype not in EIGHT_BIT:
        return None
    zero = _zero_point(graph, q.inputs[2] if len(q.inputs) > 2 else "", known.dtype, scale.shape)
    return None if zero is None else QValue(q.outputs[0], q.inputs[1], zero[0], known.dtype, scale)


def _dequantized(graph: Graph, context, dq: Node | None, per_channel_axis=None) -> QValue | None:
    """The input of DequantizeLinear ``dq`` when it is 8-bit with a float32 scale, per tensor or
    (for a constant weight) per index along ``per_channel_axis``."""
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain != "" or dq.attrs.get("block_size", 0):
        return None
    scale = constant(graph, dq.inputs[1])
    known = context.types.get(dq.inputs[0])
    if scale is None or scale.dtype != np.float32 or known is None or known.dtype not in EIGHT_BIT:
        return None
    if scale.size != 1 and not _per_channel(constant(graph, dq.inputs[0]), scale, dq.attrs.get("axis", 1),
                                            per_channel_axis or ()):
        return None
    zero = _zero_point(graph, dq.inputs[2] if len(dq.inputs) > 2 else "", known.dtype, scale.shape)
    return None if zero is None else QValue(dq.inputs[0], dq.inputs[1], zero[0], known.dtype, scale)


def _per_channel(data: np.ndarray | None, scale: np.ndarray, axis: int, axes) -> bool:
    """Whether a constant weight's 1-D scale runs along one of ``axes`` (negative counts from the end)."""
    if data is None or scale.ndim != 1 or not -data.ndim <= axis < data.ndim:
        return False
    axis %= data.ndim
    return axis in [a % data.ndim for a in axes] and scale.size == data.shape[axis]


def _bias(graph: Graph, dq: Node | None, x: QValue, w: QValue) -> str | None:
    """Conv's bias as QLinearConv takes it: int32 from DequantizeLinear with zero point 0 and
    scale x_scale * w_scale (what the quantizer writes)."""
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain != "":
        return None
    data, scale = constant(graph, dq.inputs[0]), constant(graph, dq.inputs[1])
    zero = constant(graph, dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else np.zeros(1, np.int32)
    if data is None or data.dtype != np.int32 or scale is None or zero is None or np.any(zero != 0):
        return None
    expected = (x.scales.reshape(-1)[0] * w.scales.reshape(-1)).astype(np.float32)
    ok = np.allclose(np.broadcast_to(scale.reshape(-1), expected.shape), expected, rtol=1e-6, atol=0)
    return dq.inputs[0] if ok else None


def _fused(graph: Graph, context, node: Node, dqs: list, out: QValue, q: Node) -> Node | None:
    op_type, domain = QLINEAR[node.op_type]
    output = [q.outputs[0]]
    if node.op_type in ("Conv", "MatMul"):
        x = _dequantized(graph, context, dqs[0])
        w = _dequantized(graph, context, dqs[1], (0,) if node.op_type == "Conv" else (1, -1))
        if x is None or w is None or len(node.inputs) > 3:
            return None
        inputs = x.names + w.names + [out.scale, out.zero_point]
        if len(node.inputs) == 3 and node.inputs[2]:
            bias = _bias(graph, dqs[2], x, w)
            if bias is None:
                return None
            inputs.append(bias)
        return Node(node.name, op_type, domain, inputs, output, dict(node.attrs) if node.op_type == "Conv" else {})
    values = [_dequantized(graph, context, dq) for dq in dqs]
    if not values or any(v is None or v.dtype != out.dtype for v in values):
        return None
    if node.op_type == "Concat":
        inputs = [out.scale, out.zero_point] + [name for v in values for name in v.names]
        return Node(node.name, op_type, domain, inputs, output, {"axis": node.attrs["axis"]})
    if node.op_type in ("Add", "Mul"):
        return Node(node.name, op_type, domain, values[0].names + values[1].names + [out.scale, out.zero_point],
                    output)
    attrs = {}
    if node.op_type == "Softmax":
        opset = getattr(context.bind(node), "opset", 13)
        attrs = {"axis": node.attrs.get("axis", -1 if opset >= 13 else 1), "opset": opset}
    elif node.op_type == "LeakyRelu":
        attrs = {"alpha": float(node.attrs.get("alpha", 0.01))}
    return Node(node.name, op_type, domain, values[0].names + [out.scale, out.zero_point], output, attrs)
