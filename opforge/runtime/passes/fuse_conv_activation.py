"""Conv followed by an activation becomes one com.microsoft FusedConv (onnxruntime's contrib op)."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, attribute, can_bind, constant


def fuse_conv_activation(graph: Graph, context) -> int:
    """Fuses Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid or Clip (constant bounds) into the Conv
    (or activation-free FusedConv) whose output it alone reads. Returns how many were fused."""
    uses = Uses(graph)
    fused_count = 0
    for conv in list(graph.nodes):
        if not _fusable_conv(conv):
            continue
        act = uses.only_reader(conv.outputs[0])
        params = _activation(graph, act) if act is not None and act.domain == "" else None
        if params is None:
            continue
        fused = fused_conv(conv, conv.inputs, act.outputs[0], act.op_type, params)
        if can_bind(context, fused):
            uses.replace([conv, act], fused)
            fused_count += 1
    return fused_count


def _fusable_conv(node: Node) -> bool:
    if node.op_type == "Conv" and node.domain == "":
        return True
    return node.op_type == "FusedConv" and node.domain == MICROSOFT and not node.attrs.get("activation")


def _activation(graph: Graph, node: Node) -> list | None:
    """FusedConv's activation_params for ``node``, or None if it is no fusable activation."""
    op = node.op_type
    if op in ("Relu", "Tanh", "Sigmoid"):
        return []
    if op == "LeakyRelu":
        return [float(attribute(node, "alpha", 0.01))]
    if op == "HardSigmoid":
        return [float(attribute(node, "alpha", 0.2)), float(attribute(node, "beta", 0.5))]
    if op == "Clip":
        return _clip_bounds(graph, node)
    return None


def _clip_bounds(graph: Graph, node: Node) -> list | None:
    if "min" in node.attrs or "max" in node.attrs or len(node.inputs) == 1:  # opset < 11
        return [float(attribute(node, "min", -3.4028234663852886e38)),
                float(attribute(node, "max", 3.4028234663852886e38))]
    bounds = []
    for index, fill in ((1, -np.inf), (2, np.inf)):
        name = node.inputs[index] if len(node.inputs) > index else ""
        value = constant(graph, name) if name else np.array(fill)
        if value is None or value.size != 1 or value.dtype.kind != "f":
            return None
        bounds.append(float(np.clip(value.item(), -3.4028234663852886e38, 3.4028234663852886e38)))
    return bounds


def fused_conv(conv: Node, inputs: list, output: str, activation: str = "",
               params: list | None = None) -> Node:
    """A FusedConv node with ``conv``'s attributes reading ``inputs`` (X, W, B, Z)."""
    attrs = {k: v for k, v in conv.attrs.items() if k not in ("activation", "activation_params")}
    types = {k: conv.attr_types[k] for k in attrs if k in conv.attr_types}
    if activation:
        attrs["activation"] = activation
        types["activation"] = AttributeProto.STRING
    if params:
        attrs["activation_params"] = list(params)
        types["activation_params"] = AttributeProto.FLOATS
    return Node(conv.name, "FusedConv", MICROSOFT, list(inputs), [output], attrs, attr_types=types)
