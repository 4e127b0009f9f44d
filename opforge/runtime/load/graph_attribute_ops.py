"""Expanding nodes whose graph attributes a kernel cannot take into onnx's function body for them.

The op ABI carries no graphs, so FlexAttention with a ``score_mod`` or ``prob_mod`` graph has no
native kernel. onnx defines the op as a function of its node and input types, with those graphs
inlined into the body; expanding such a node at load lets every step of it (the modifiers
included) run on the native kernels of standard ops. FlexAttention without graphs keeps its own
kernel.
"""
from __future__ import annotations

import logging

import onnx

from opforge.runtime.errors import node_label
from opforge.runtime.load.functions import _Inliner, _merge_opsets, _names_in_graph, _subgraphs

logger = logging.getLogger("opforge.runtime")

# (domain, op type) -> the graph attributes that make a node of it expand.
EXPANDED = {("ai.onnx.preview", "FlexAttention"): ("score_mod", "prob_mod")}


def expand_graph_attribute_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return ``model`` with every node in EXPANDED that carries one of its graph attributes
    replaced by onnx's function body for it (built for the node's input types), in subgraphs
    too. A node whose input types shape inference cannot tell stays as it is (the reference
    provider can still run it)."""
    if not any(_expands(node) for node in _all_nodes(model.graph)):
        return model
    try:
        types = _value_types(onnx.shape_inference.infer_shapes(model).graph)
    except (onnx.shape_inference.InferenceError, ValueError):  # an inconsistent or > 2 GB model
        types = _value_types(model.graph)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    expander = _Expander(_Inliner({}, _names_in_graph(result.graph)), types, opsets)
    expander.expand_graph(result.graph)
    _merge_opsets(result, expander.bodies)
    return result


class _Expander:
    """Replaces the nodes to expand, graph by graph, with their instantiated function bodies."""

    def __init__(self, inliner: _Inliner, types: dict, opsets: dict):
        self.inliner, self.types, self.opsets = inliner, types, opsets
        self.bodies: list[onnx.FunctionProto] = []

    def expand_graph(self, graph: onnx.GraphProto) -> None:
        nodes = []
        for node in graph.node:
            for attr in node.attribute:
                for sub in _subgraphs(attr):
                    if not _is_modifier(node, attr):
                        self.expand_graph(sub)
            body = self.function_for(node) if _expands(node) else None
            if body is None:
                nodes.append(node)
            else:
                self.bodies.append(body)
                nodes.extend(self.inliner.instantiate(body, node, 1))
        del graph.node[:]
        graph.node.extend(nodes)

    def function_for(self, node: onnx.NodeProto) -> onnx.FunctionProto | None:
        """onnx's function body for ``node``, its graph attributes inlined; None when an input's
        type is unknown or onnx defines no body at the model's opset."""
        label = node_label(node.name, node.op_type, node.domain, node.output)
        missing = [name for name in node.input if name and name not in self.types]
        version = self.opsets.get(node.domain, 1)
        try:
            schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        except onnx.defs.SchemaError:   # an opset before the op's: binding a kernel refuses it
            logger.info("%s is not defined at opset %d of its domain; not expanded", label, version)
            return None
        chosen = max((v for v in schema.context_dependent_function_opset_versions if v <= version), default=None)
        if missing or chosen is None:
            why = f"input {missing[0]!r} has no inferred type" if missing else f"no body at opset {version}"
            logger.info("%s keeps its graph attributes (%s); only the reference provider runs it", label, why)
            return None
        body = onnx.FunctionProto()
        body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            chosen, node.SerializeToString(), [self.types[name].SerializeToString() for name in node.input if name]))
        return body


def _expands(node: onnx.NodeProto) -> bool:
    graphs = EXPANDED.get((node.domain, node.op_type), ())
    return any(attr.name in graphs for attr in node.attribute)


def _is_modifier(node: onnx.NodeProto, attr: onnx.AttributeProto) -> bool:
    """A graph attribute that expansion inlines into the body (not a subgraph to walk)."""
    return attr.name in EXPANDED.get((node.domain, node.op_type), ())


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in _subgraphs(attr):
                yield from _all_nodes(sub)


def _value_types(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """Every typed value of ``graph`` and its subgraphs: inputs, outputs, value_info, initializers."""
    types = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = info.type
    for tensor in graph.initializer:
        types.setdefault(tensor.name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    for node in graph.node:
        for attr in node.attribute:
            for sub in _subgraphs(attr):
                types.update(_value_types(sub))
    return types
