"""Op mappings: a foreign op type rewritten into another op, or into a subgraph of existing ops.

The idea comes from Ascend CANN's ONNX plugins: an op named ``domain::version::OpType`` is
translated when a model is loaded, either one-to-one (another op type, attributes renamed or
converted) or one-to-many (a function that returns the nodes replacing it).

    opforge.OpMapping("com.vendor::1::Swish", target="com.example::swish")
    opforge.OpMapping("com.vendor::1::ScaledAdd", subgraph=lambda n: [
        helper.make_node("Mul", [n.inputs[1], n.constant("alpha", n.attrs["alpha"])], [n.temp("t")]),
        helper.make_node("Add", [n.inputs[0], n.temp("t")], n.outputs)])
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


def parse_source(source: str) -> tuple:
    """"domain::version::OpType" -> (domain, version, op_type); "ai.onnx" is the default domain."""
    parts = source.split("::")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2]:
        raise ValueError(f"mapping source {source!r} must read 'domain::version::OpType', "
                         "e.g. 'ai.onnx::11::AddN' or 'com.vendor::1::Swish'")
    domain = "" if parts[0] in ("", "ai.onnx") else parts[0]
    return domain, int(parts[1]), parts[2]


@dataclass
class MappedNode:
    """What a subgraph function sees of the node it replaces."""

    name: str
    inputs: list
    outputs: list
    attrs: dict
    new_initializers: list = field(default_factory=list)
    _counter: Any = field(default_factory=itertools.count)

    def temp(self, hint: str) -> str:
        """A value name private to this replacement (same hint, same name)."""
        return f"{self.name}/{hint}"

    def constant(self, hint: str, value) -> str:
        """A new initializer holding `value`; returns its name."""
        name = f"{self.name}/{hint}#{next(self._counter)}"
        self.new_initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name


@dataclass
class OpMapping:
    """Rewrites nodes of `source` ("domain::version::OpType"), applying from that opset on.

    target: "OpType" or "domain::OpType" for a one-to-one rewrite; `attrs` then renames
    ({old: new}) or converts (a function attrs -> attrs) the attributes.
    subgraph: for one-to-many, a function MappedNode -> list of NodeProto producing the
    node's outputs.
    """

    source: str
    target: str | None = None
    attrs: dict | Callable | None = None
    subgraph: Callable | None = None

    def __post_init__(self):
        self.domain, self.version, self.op_type = parse_source(self.source)
        if (self.target is None) == (self.subgraph is None):
            raise ValueError(f"mapping {self.source!r}: give exactly one of target= or subgraph=")

    def matches(self, node: onnx.NodeProto, opsets: dict) -> bool:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        return (domain == self.domain and node.op_type == self.op_type
                and opsets.get(domain, 1) >= self.version)

    def rewrite(self, node: onnx.NodeProto) -> tuple:
        """(replacement nodes, new initializers)."""
        values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        values = {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}
        if self.subgraph is not None:
            mapped = MappedNode(node.name or f"{node.op_type}_{id(node)}", list(node.input),
                                list(node.output), values)
            return list(self.subgraph(mapped)), mapped.new_initializers
        domain, _, op_type = self.target.rpartition("::")
        new_attrs = self._translate(values)
        return [helper.make_node(op_type, node.input, node.output, name=node.name,
                                 domain="" if domain == "ai.onnx" else domain, **new_attrs)], []

    def _translate(self, values: dict) -> dict:
        if callable(self.attrs):
            return dict(self.attrs(dict(values)))
        renames = self.attrs or {}
        return {renames.get(k, k): v for k, v in values.items() if renames.get(k, k) is not None}


def apply_mappings(model: onnx.ModelProto, mappings: list, opsets: dict) -> int:
    """Rewrites matching nodes in place, subgraphs included; returns how many were rewritten."""
    if not mappings:
        return 0
    return _apply_graph(model.graph, mappings, opsets)


def _apply_graph(graph: onnx.GraphProto, mappings: list, opsets: dict) -> int:
    count, new_nodes = 0, []
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                count += _apply_graph(sub, mappings, opsets)
        mapping = next((m for m in mappings if m.matches(node, opsets)), None)
        if mapping is None:
            new_nodes.append(node)
            continue
        replacement, initializers = mapping.rewrite(node)
        new_nodes.extend(replacement)
        graph.initializer.extend(initializers)
        count += 1
    del graph.node[:]
    graph.node.extend(new_nodes)
    return count
