"""Conv whose output is summed with another tensor of its shape becomes a FusedConv with Z."""
from __future__ import annotations

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.fuse_conv_activation import fused_conv
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, can_bind, static_shape


def fuse_conv_add(graph: Graph, context) -> int:
    """Fuses Add(conv, z) or Sum(conv, z), where the Conv's output has no other reader and z has
    exactly the Conv output's static shape and dtype, into FusedConv(X, W, B, Z=z): the residual
    is added in the convolution's epilogue (before any activation fused later). Returns how
    many were fused."""
    uses = Uses(graph)
    fused_count = 0
    for conv in list(graph.nodes):
        if not _plain_conv(conv):
            continue
        add = uses.only_reader(conv.outputs[0])
        if add is None or add.domain != "" or add.op_type not in ("Add", "Sum") or len(add.inputs) != 2:
            continue
        z = add.inputs[1] if add.inputs[0] == conv.outputs[0] else add.inputs[0]
        if not _same_type(context, conv.outputs[0], z):
            continue
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        fused = fused_conv(conv, [conv.inputs[0], conv.inputs[1], bias, z], add.outputs[0])
        if can_bind(context, fused):
            uses.replace([conv, add], fused)
            fused_count += 1
    return fused_count


def _plain_conv(node: Node) -> bool:
    if node.op_type == "Conv" and node.domain == "":
        return True
    return (node.op_type == "FusedConv" and node.domain == MICROSOFT and not node.attrs.get("activation")
            and not (len(node.inputs) > 3 and node.inputs[3]))


def _same_type(context, a: str, b: str) -> bool:
    shape = static_shape(context, a)
    ta, tb = context.types.get(a), context.types.get(b)
    return (shape is not None and static_shape(context, b) == shape and ta.dtype == tb.dtype
            and ta.dtype.kind == "f")
