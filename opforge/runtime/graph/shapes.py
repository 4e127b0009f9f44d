"""Dtype and shape inference over a whole graph: onnx's inference plus custom ops' own infer."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from opforge.runtime.errors import GraphError
from opforge.runtime.graph.domains import is_standard_domain
from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.graph.types import (MAX_RANK, TensorType, dtype_elem, elem_dtype, is_elem_type, kind_of,
                                         tensor_type)

TypeList = Sequence[Optional[TensorType]]
CustomInfer = Callable[[Node, TypeList], Optional[TypeList]]
"""``custom_infer(node, input_types) -> output_types or None`` for ops onnx does not know."""

# Initializers above this size go to inference as typed inputs: their values never decide a shape.
_INLINE_INITIALIZER_BYTES = 1 << 16


@dataclass
class InferredTypes:
    """``values``: value name -> TensorType for every tensor whose type is known; and warnings."""

    values: dict[str, TensorType] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)   # values known not to be tensors: 'sequence' ...

    def get(self, name: str) -> TensorType | None:
        """The type of ``name``, or None if nobody could infer it."""
        return self.values.get(name)

    def kind(self, name: str) -> str | None:
        """'tensor', 'sequence', 'optional' or 'map' where known, else None."""
        return "tensor" if name in self.values else self.kinds.get(name)


def infer_types(graph: Graph, opsets: dict[str, int],
                custom_infer: CustomInfer | None = None) -> InferredTypes:
    """Infer the dtype and shape of every value of ``graph`` (nodes in topological order).

    onnx's shape inference (not strict, with data propagation) types the standard ops; nodes of
    other domains get their types from ``custom_infer``, and onnx then carries those through
    the ops downstream. Values nobody can type are left out (the executor sizes them at run
    time). Where a declared type conflicts with the inferred one, the inferred type wins and a
    warning says so. Never raises for a model onnx cannot infer; it warns and keeps declarations.
    Raises GraphError for a value of more than MAX_RANK dimensions, naming the node making it.
    """
    result = InferredTypes()
    custom_nodes = [n for n in graph.nodes if not is_standard_domain(n.domain)]
    known: dict[str, TensorType] = {}
    for _ in range(len(custom_nodes) + 1):
        result.values = _run_onnx_inference(graph, opsets, known, result.warnings, result.kinds)
        added = _infer_custom(custom_nodes, result.values, known, custom_infer)
        if not added:
            break
    _check_ranks(graph, result.values)
    _reconcile_declared(graph, result)
    for name, value in known.items():
        result.values.setdefault(name, value)
    return result


def _check_ranks(graph: Graph, values: dict[str, TensorType]) -> None:
    for name, value in values.items():
        if value.shape is not None and len(value.shape) > MAX_RANK:
            producer = next((n.label for n in graph.nodes if name in n.outputs), "the graph's inputs")
            raise GraphError(f"value {name!r} (made by {producer}) has {len(value.shape)} "
                             f"dimensions; opforge takes tensors of at most {MAX_RANK}")


def _run_onnx_inference(graph: Graph, opsets: dict[str, int], extra: dict[str, TensorType],
                        warnings: list[str], kinds: dict[str, str]) -> dict[str, TensorType]:
    model = _inference_model(graph, opsets, extra)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                                  data_prop=True)
    except Exception as exc:  # onnx raises several unrelated types; none must stop a load
        warnings.append(f"onnx shape inference failed, using declared types only: {exc}")
    found: dict[str, TensorType] = {}
    infos = list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output)
    for info in infos:
        value = tensor_type(info.type) if info.HasField("type") else None
        if value is not None:
            found[info.name] = value
        elif info.HasField("type") and kind_of(info.type) not in (None, "tensor"):
            kinds[info.name] = kind_of(info.type)
    for name, array in graph.initializers.items():
        found[name] = TensorType(array.dtype, array.shape)
    for name, dtype in _subgraph_dtypes(model.graph).items():
        found.setdefault(name, TensorType(dtype, None))
    return found


def _subgraph_dtypes(graph: onnx.GraphProto) -> dict[str, np.dtype]:
    """The element type of each tensor value defined inside ``graph``'s subgraphs (If branches,
    Loop and Scan bodies), as onnx's inference wrote it there. Only the element type: a shape
    inferred for a loop-carried value holds for the first iteration at best. A name that two
    subgraphs give different types (sibling scopes may reuse names) is left out."""
    found: dict[str, np.dtype] = {}
    ambiguous: set[str] = set()

    def visit(proto: onnx.GraphProto, nested: bool) -> None:
        if nested:
            typed = [(i.name, tensor_type(i.type) if i.HasField("type") else None)
                     for i in [*proto.input, *proto.value_info, *proto.output]]
            typed += [(t.name, TensorType(elem_dtype(t.data_type), None))
                      for t in proto.initializer if is_elem_type(t.data_type)]
            for name, value in typed:
                if value is None or name in ambiguous:
                    continue
                if found.setdefault(name, value.dtype) != value.dtype:
                    ambiguous.add(name)
                    del found[name]
        for node in proto.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    visit(sub, True)

    visit(graph, False)
    return found


def _inference_model(graph: Graph, opsets: dict[str, int],
                     extra: dict[str, TensorType]) -> onnx.ModelProto:
    """The graph as a model for onnx's inference; declared non-input types are left out."""
    inputs = [v.to_proto() for v in graph.inputs]
    initializers = []
    for name, array in graph.initializers.items():
        if array.nbytes <= _INLINE_INITIALIZER_BYTES or array.dtype == object:
            initializers.append(numpy_helper.from_array(array, name))
        elif name not in {v.name for v in graph.inputs}:
            inputs.append(_value_info(name, TensorType(array.dtype, array.shape)))
    proto = onnx.helper.make_graph(
        [node.to_proto() for node in graph.nodes], graph.name or "graph", inputs,
        [onnx.ValueInfoProto(name=v.name) for v in graph.outputs], initializer=initializers,
        value_info=[_value_info(name, value) for name, value in extra.items()])
    imports = [onnx.helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    return onnx.helper.make_model(proto, opset_imports=imports)


def _value_info(name: str, value: TensorType) -> onnx.ValueInfoProto:
    shape = None if value.shape is None else list(value.shape)
    return onnx.helper.make_tensor_value_info(name, dtype_elem(value.dtype), shape)


def _infer_custom(nodes: list[Node], values: dict[str, TensorType],
                  known: dict[str, TensorType], custom_infer: CustomInfer | None) -> bool:
    """Ask ``custom_infer`` for custom nodes' outputs; True if it told us anything new."""
    if custom_infer is None:
        return False
    added = False
    for node in nodes:
        inputs = [values.get(name) if name else None for name in node.inputs]
        outputs = custom_infer(node, inputs) or []
        for name, value in zip(node.outputs, outputs):
            if not name or value is None:
                continue
            typed = TensorType(np.dtype(value[0]), _shape(value[1]))
            if known.get(name) != typed:
                known[name] = typed
                added = True
    return added


def _shape(shape) -> tuple | None:
    return None if shape is None else tuple(shape)


def _reconcile_declared(graph: Graph, result: InferredTypes) -> None:
    """Fill gaps from declared types; where declared and inferred disagree, warn, keep inferred."""
    declared = {v.name: v for v in graph.outputs}
    declared.update(graph.value_info)
    for name, info in declared.items():
        claimed = info.tensor_type
        if claimed is None:
            continue
        inferred = result.values.get(name)
        if inferred is None:
            result.values[name] = claimed
        elif conflict := _conflict(claimed, inferred):
            result.warnings.append(f"value {name!r} is declared {_show(claimed)} but infers as "
                                   f"{_show(inferred)} ({conflict}); using the inferred type")


def _conflict(claimed: TensorType, inferred: TensorType) -> str | None:
    if claimed.dtype != inferred.dtype:
        return "element types differ"
    if claimed.shape is None or inferred.shape is None:
        return None
    if len(claimed.shape) != len(inferred.shape):
        return "ranks differ"
    for axis, (a, b) in enumerate(zip(claimed.shape, inferred.shape)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return f"dimension {axis} differs"
    return None


def _show(value: TensorType) -> str:
    shape = "?" if value.shape is None else list(value.shape)
    return f"{value.dtype}{shape}"
