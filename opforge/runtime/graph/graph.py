"""The runtime's graph IR (nodes, values, subgraphs) built from ONNX protos, and its node order."""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from opforge.runtime.errors import GraphError, node_label
from opforge.runtime.graph import types


@dataclass(frozen=True)
class ValueInfo:
    """A named value with its declared ONNX type (``type_proto`` is None when undeclared)."""

    name: str
    type_proto: onnx.TypeProto | None = None

    @property
    def kind(self) -> str | None:
        """'tensor', 'sequence', 'optional', 'map', 'sparse_tensor', or None if undeclared."""
        return types.kind_of(self.type_proto)

    @property
    def tensor_type(self) -> types.TensorType | None:
        """The declared dtype and shape, for a tensor; None otherwise."""
        return types.tensor_type(self.type_proto)

    @property
    def type_string(self) -> str:
        """onnxruntime's spelling of the declared type, e.g. 'tensor(float)'."""
        return types.type_string(self.type_proto)

    def to_proto(self) -> onnx.ValueInfoProto:
        """This value as a ValueInfoProto."""
        proto = onnx.ValueInfoProto(name=self.name)
        if self.type_proto is not None:
            proto.type.CopyFrom(self.type_proto)
        return proto

    @staticmethod
    def from_proto(proto: onnx.ValueInfoProto) -> "ValueInfo":
        """A ValueInfo from its proto (an unset type reads as None)."""
        return ValueInfo(proto.name, proto.type if proto.HasField("type") else None)


@dataclass(eq=False)
class Node:
    """One operator call. ``inputs``/``outputs`` use "" for an absent optional value.

    ``attrs`` holds Python values (GRAPH attributes as ``Graph``); ``implicit_inputs`` are the
    outer-scope values its subgraphs read, which it depends on like ordinary inputs.
    """

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    implicit_inputs: list[str] = field(default_factory=list)
    attr_types: dict[str, int] = field(default_factory=dict)
    input_types: list = field(default_factory=list)
    """TensorType (or None) per input, filled from shape inference before kernels are bound."""
    output_types: list = field(default_factory=list)
    """TensorType (or None) per output, filled the same way (a kernel whose inputs do not say
    its output type, DictVectorizer's map say, reads it here)."""
    input_kinds: list = field(default_factory=list)
    """'tensor', 'sequence', 'optional', 'map' or None (unknown) per input, filled the same way:
    which kernel can take the node is decided from these when kernels are bound."""

    @property
    def label(self) -> str:
        """``node 'name' (OpType, domain 'ai.onnx')``, for error messages."""
        return node_label(self.name, self.op_type, self.domain, self.outputs)

    def subgraphs(self) -> list["Graph"]:
        """The graphs held in this node's attributes (If branches, Loop/Scan bodies...)."""
        found = []
        for value in self.attrs.values():
            if isinstance(value, Graph):
                found.append(value)
            elif isinstance(value, list):
                found.extend(v for v in value if isinstance(v, Graph))
        return found

    def to_proto(self) -> onnx.NodeProto:
        """This node as a NodeProto (subgraphs exported in their current node order)."""
        proto = onnx.helper.make_node(self.op_type, self.inputs, self.outputs, name=self.name,
                                      domain=self.domain)
        for key, value in self.attrs.items():
            if isinstance(value, Graph):
                value = value.to_proto()
            elif isinstance(value, list) and value and isinstance(value[0], Graph):
                value = [g.to_proto() for g in value]
            proto.attribute.append(
                onnx.helper.make_attribute(key, value, attr_type=self.attr_types.get(key)))
        return proto


@dataclass(eq=False)
class Graph:
    """A (sub)graph: nodes, constant initializers, typed inputs/outputs, and declared value types.

    ``outer_names`` are the values visible from enclosing graphs (empty for the main graph).
    """

    name: str
    nodes: list[Node]
    initializers: dict[str, np.ndarray]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    value_info: dict[str, ValueInfo] = field(default_factory=dict)
    outer_names: frozenset[str] = frozenset()

    def defined_names(self) -> set[str]:
        """Every value this graph itself defines: inputs, initializers and node outputs."""
        names = {v.name for v in self.inputs} | set(self.initializers)
        names.update(o for node in self.nodes for o in node.outputs if o)
        return names

    def outer_refs(self) -> list[str]:
        """The outer-scope values this graph and its nested subgraphs read, in first-use order."""
        defined = self.defined_names()
        used = itertools.chain(
            itertools.chain.from_iterable(n.inputs + n.implicit_inputs for n in self.nodes),
            (v.name for v in self.outputs))
        return list(dict.fromkeys(n for n in used if n and n not in defined))

    def to_proto(self) -> onnx.GraphProto:
        """This graph as a GraphProto."""
        return onnx.helper.make_graph(
            [node.to_proto() for node in self.nodes], self.name,
            [v.to_proto() for v in self.inputs], [v.to_proto() for v in self.outputs],
            initializer=[numpy_helper.from_array(a, n) for n, a in self.initializers.items()],
            value_info=[v.to_proto() for v in self.value_info.values()])


def build_graph(proto: onnx.GraphProto, outer_names: Iterable[str] = ()) -> Graph:
    """Build the IR for ``proto``; ``outer_names`` are values enclosing graphs make visible."""
    where = f"graph {proto.name!r}"
    initializers = {t.name: tensor_array(t, f"initializer {t.name!r} of {where}")
                    for t in proto.initializer}
    for sparse in proto.sparse_initializer:
        initializers[sparse.values.name] = sparse_to_dense(sparse, where)
    graph = Graph(
        name=proto.name, nodes=[], initializers=initializers,
        inputs=[ValueInfo.from_proto(v) for v in proto.input],
        outputs=[ValueInfo.from_proto(v) for v in proto.output],
        value_info={v.name: ValueInfo.from_proto(v) for v in proto.value_info},
        outer_names=frozenset(outer_names))
    visible = graph.outer_names | {v.name for v in graph.inputs} | set(initializers)
    visible |= {o for node in proto.node for o in node.output if o}
    graph.nodes = [build_node(node, visible) for node in proto.node]
    return graph


def build_node(proto: onnx.NodeProto, visible: frozenset[str]) -> Node:
    """Build one Node; its subgraphs may read any name in ``visible``."""
    node = Node(proto.name, proto.op_type, "" if proto.domain == "ai.onnx" else proto.domain,
                list(proto.input), list(proto.output))
    for attr in proto.attribute:
        if attr.ref_attr_name:
            raise GraphError(f"{node.label} has attribute {attr.name!r} referring to "
                             f"{attr.ref_attr_name!r} outside of a function body")
        value = _attribute_value(node, attr)
        if attr.type == onnx.AttributeProto.GRAPH:
            value = build_graph(value, visible)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            value = [build_graph(g, visible) for g in value]
        node.attrs[attr.name] = value
        node.attr_types[attr.name] = attr.type
    refs = itertools.chain.from_iterable(g.outer_refs() for g in node.subgraphs())
    node.implicit_inputs = list(dict.fromkeys(refs))
    return node


def _attribute_value(node: Node, attr: onnx.AttributeProto):
    """The attribute's value; tensors are checked to hold the data their dims and type say."""
    where = f"{node.label}: attribute {attr.name!r}"
    try:
        value = onnx.helper.get_attribute_value(attr)
    except Exception as exc:  # an unset or unknown attribute type
        raise GraphError(f"{where} cannot be read: {exc}") from None
    if attr.type == onnx.AttributeProto.TENSOR:
        tensor_array(value, where)
    elif attr.type == onnx.AttributeProto.TENSORS:
        for tensor in value:
            tensor_array(tensor, where)
    return value


def tensor_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    """``tensor`` as an array; GraphError naming ``where`` if its data does not match its dims
    and element type."""
    try:
        if any(d < 0 for d in tensor.dims):
            raise ValueError(f"negative dims {list(tensor.dims)}")
        return aligned(numpy_helper.to_array(tensor))
    except Exception as exc:  # numpy and onnx report malformed data in several ways
        raise GraphError(f"{where} cannot be read as a tensor of dims {list(tensor.dims)} and "
                         f"element type {tensor.data_type}: {exc}") from None


ALIGNMENT = 64   # bytes: a cache line, and one AVX-512 load
MIN_ALIGNED_BYTES = 4096
MAX_ALIGNED_BYTES = 16 << 20


def aligned(array: np.ndarray) -> np.ndarray:
    """``array``, or a read-only copy of it starting on a 64-byte boundary when it is a numeric
    array of 4 KB to 16 MB that does not. numpy and onnx's to_array give 16-byte alignment, so
    every 64-byte load of a weight row may span two cache lines: a 100-step LSTM's recurrent
    products took 2.5 us per step on an R at offset 32, 2.2 on an aligned copy (onnxruntime 2.2).
    to_array reads a fresh copy of the tensor's bytes, so the copy made here replaces it, with one
    tensor at a time held twice while loading: larger weights are left as they are (they stream
    from memory, where split loads cost little), so that VGG19's 411 MB fc6 does not raise the
    peak by its size. Copying VGG19's weights up to that size took 0.03 s."""
    if (array.dtype.kind not in "biufc" or not MIN_ALIGNED_BYTES <= array.nbytes <= MAX_ALIGNED_BYTES
            or array.ctypes.data % ALIGNMENT == 0):
        return array
    raw = np.empty(array.nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    copy.flags.writeable = array.flags.writeable
    return copy


def sparse_to_dense(sparse: onnx.SparseTensorProto, where: str = "the graph") -> np.ndarray:
    """A SparseTensorProto as a dense array (indices linear [NNZ] or coordinates [NNZ, rank])."""
    name = f"sparse initializer {sparse.values.name!r} of {where}"
    values = tensor_array(sparse.values, name)
    indices = tensor_array(sparse.indices, name).astype(np.int64)
    try:
        dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
        if indices.ndim == 2:
            dense[tuple(indices.T)] = values
        else:
            dense.reshape(-1)[indices] = values
    except (ValueError, IndexError, MemoryError) as exc:
        raise GraphError(f"{name} does not fit its dims {list(sparse.dims)}: {exc}") from None
    return dense


def topological_order(graph: Graph) -> list[Node]:
    """``graph.nodes`` ordered so every value is produced before it is read (Kahn's algorithm).

    Ready nodes keep their original relative order. Raises GraphError naming the nodes of a
    cycle, the node reading a value that nothing produces, or the two producers of one value.
    """
    producer = _producers(graph)
    available = {v.name for v in graph.inputs} | set(graph.initializers) | graph.outer_names
    needs: list[set[int]] = []
    for node in graph.nodes:
        deps = set()
        for name in itertools.chain(node.inputs, node.implicit_inputs):
            if name in producer:
                deps.add(producer[name])
            elif name and name not in available:
                raise GraphError(f"{node.label} reads value {name!r}, which no node, initializer, "
                                 "graph input or enclosing graph produces")
        needs.append(deps)
    _check_outputs(graph, producer, available)
    return [graph.nodes[i] for i in _kahn(graph, needs)]


def _producers(graph: Graph) -> dict[str, int]:
    producer: dict[str, int] = {}
    inputs = {v.name for v in graph.inputs} | set(graph.initializers)
    for index, node in enumerate(graph.nodes):
        for name in node.outputs:
            if not name:
                continue
            if name in producer:
                first = graph.nodes[producer[name]]
                raise GraphError(f"value {name!r} is produced twice: by {first.label} "
                                 f"and by {node.label}")
            if name in inputs:
                raise GraphError(f"value {name!r} is produced by {node.label} but is also a "
                                 "graph input or initializer")
            producer[name] = index
    return producer


def _check_outputs(graph: Graph, producer: dict[str, int], available: set[str]) -> None:
    for value in graph.outputs:
        if value.name not in producer and value.name not in available:
            raise GraphError(f"graph {graph.name!r} output {value.name!r} is produced by no node, "
                             "initializer or input")


def _kahn(graph: Graph, needs: list[set[int]]) -> list[int]:
    consumers: list[list[int]] = [[] for _ in needs]
    pending = [len(deps) for deps in needs]
    for index, deps in enumerate(needs):
        for dep in deps:
            consumers[dep].append(index)
    ready = [i for i, count in enumerate(pending) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for consumer in consumers[index]:
            pending[consumer] -= 1
            if pending[consumer] == 0:
                heapq.heappush(ready, consumer)
    if len(order) < len(needs):
        cycle = _find_cycle(needs, set(range(len(needs))) - set(order))
        path = " -> ".join(graph.nodes[i].label for i in cycle + cycle[:1])
        raise GraphError(f"graph {graph.name!r} has a cycle: {path}")
    return order


def _find_cycle(needs: list[set[int]], stuck: set[int]) -> list[int]:
    """One cycle among ``stuck`` nodes, listed in data-flow order."""
    walk = [min(stuck)]
    seen = {walk[0]: 0}
    while True:
        nxt = min(d for d in needs[walk[-1]] if d in stuck)
        if nxt in seen:
            return list(reversed(walk[seen[nxt]:]))
        seen[nxt] = len(walk)
        walk.append(nxt)


def sort_graph(graph: Graph) -> None:
    """Put ``graph``'s nodes, and those of every nested subgraph, in topological order."""
    graph.nodes = topological_order(graph)
    for node in graph.nodes:
        for sub in node.subgraphs():
            sort_graph(sub)
