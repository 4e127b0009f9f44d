"""Constant nodes turned into initializers at load, so no Constant ever needs a kernel."""
from __future__ import annotations

import onnx
from onnx import helper

from opforge.runtime.errors import GraphError, node_label

# The value attributes of Constant (opset 1..), and the element type each list attribute holds.
_LISTS = {"value_floats": onnx.TensorProto.FLOAT, "value_ints": onnx.TensorProto.INT64,
          "value_strings": onnx.TensorProto.STRING}
_SCALARS = {"value_float": onnx.TensorProto.FLOAT, "value_int": onnx.TensorProto.INT64,
            "value_string": onnx.TensorProto.STRING}
_KINDS = {"value": onnx.AttributeProto.TENSOR, "sparse_value": onnx.AttributeProto.SPARSE_TENSOR,
          "value_float": onnx.AttributeProto.FLOAT, "value_floats": onnx.AttributeProto.FLOATS,
          "value_int": onnx.AttributeProto.INT, "value_ints": onnx.AttributeProto.INTS,
          "value_string": onnx.AttributeProto.STRING, "value_strings": onnx.AttributeProto.STRINGS}


def constants_to_initializers(graph: onnx.GraphProto) -> int:
    """Replace every Constant node of ``graph`` and of its subgraphs by an initializer (dense,
    or sparse for ``sparse_value``) of the graph it sits in, named as the node's output.

    Returns how many were replaced. A Constant whose value is an attribute reference (inside an
    unexpanded function body) is left alone. Raises GraphError naming the node when it holds
    no value attribute, or more than one.
    """
    replaced, kept = 0, []
    for node in graph.node:
        for attr in node.attribute:
            for sub in _subgraphs(attr):
                replaced += constants_to_initializers(sub)
        if _is_constant(node) and not any(a.ref_attr_name for a in node.attribute):
            _add_initializer(graph, node)
            replaced += 1
        else:
            kept.append(node)
    if replaced:
        del graph.node[:]
        graph.node.extend(kept)
    return replaced


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1


def _subgraphs(attr: onnx.AttributeProto):
    if attr.HasField("g"):
        yield attr.g
    yield from attr.graphs


def _add_initializer(graph: onnx.GraphProto, node: onnx.NodeProto) -> None:
    """Add ``node``'s value to ``graph`` as an initializer named as its output."""
    label = node_label(node.name, node.op_type, node.domain, node.output)
    values = [a for a in node.attribute if a.name.startswith(("value", "sparse_value"))]
    if len(values) != 1:
        found = [a.name for a in values] or "none"
        raise GraphError(f"{label} must hold exactly one value attribute (value, value_float(s), "
                         f"value_int(s), value_string(s) or sparse_value); it holds {found}")
    attr, name = values[0], node.output[0]
    if attr.name not in _KINDS:
        raise GraphError(f"{label} has attribute {attr.name!r}, which Constant does not define")
    if attr.type != _KINDS[attr.name]:
        kind = onnx.AttributeProto.AttributeType.Name(_KINDS[attr.name])
        raise GraphError(f"{label}: attribute {attr.name!r} must be of kind {kind}, "
                         f"not {onnx.AttributeProto.AttributeType.Name(attr.type)}")
    if attr.name == "sparse_value":
        sparse = graph.sparse_initializer.add()
        sparse.CopyFrom(attr.sparse_tensor)
        sparse.values.name = name
        return
    tensor = graph.initializer.add()
    if attr.name == "value":
        tensor.CopyFrom(attr.t)
    elif attr.name in _SCALARS:
        tensor.CopyFrom(helper.make_tensor(name, _SCALARS[attr.name], [],
                                           [helper.get_attribute_value(attr)]))
    elif attr.name in _LISTS:
        items = list(helper.get_attribute_value(attr))
        tensor.CopyFrom(helper.make_tensor(name, _LISTS[attr.name], [len(items)], items))
    tensor.name = name
