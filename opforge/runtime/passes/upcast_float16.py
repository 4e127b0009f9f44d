"""float16 nodes without a float16 kernel computed in float32, as onnxruntime's
InsertCastTransformer does on the CPU.

A node that reads float16 tensors and that no kernel of the session takes in float16 (so it would
go to the reference provider, or fail with the fallback off) but that a native kernel takes in
float32 is rewritten to read float32 copies of its float16 inputs, and its float16 outputs are
cast back. Storage stays float16 where the model has it; the arithmetic is float32. A node that
reads the float32 result of such a node and gives a float16 result computes in float32 too (Casts
excepted), even if it has a float16 kernel (a Relu after a Conv, the Concat of an inception block): onnxruntime's CPU
provider has float16 kernels for none of them, so it keeps the whole chain float32; rounding to
float16 between its nodes would lose the precision onnxruntime keeps (in a float16 inception_v1,
0.03 of its softmax output instead of 6e-5).

- A float16 initializer gets a float32 twin once, here, instead of a Cast on every run.
- Where one upcast node feeds another, the second reads the first's float32 result directly:
  the value is not rounded to float16 in between (onnxruntime removes the same Cast pairs), so
  chains of such nodes, a float16 CNN say, run in float32 from end to end.
- A cast back to float16 is written only for outputs something else reads (another node, the
  graph's outputs, a subgraph).

It runs at every optimization level (a model must not fall to the reference provider because
the level is low). Nodes of subgraphs (If branches, Loop and Scan bodies) are rewritten the same
way, each body in its own scope, from the element types onnx's inference gives their values.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.graph.graph import Graph, Node, topological_order
from opforge.runtime.graph.types import TensorType
from opforge.runtime.passes.rewrite import Uses, can_bind, constant
from opforge.runtime.providers.registry import REFERENCE

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
# Casts of a float16 value round what float16 holds: they read it as float16. And ops whose
# output type an attribute sets (a Cast's "to", EyeLike's "dtype") would give float16 from
# float32 inputs too, not the float32 this pass renames their outputs for.
ROUNDING = {"Cast", "CastLike"}
TYPE_ATTRIBUTES = {"to", "dtype", "output_dtype"}


def upcast_float16(graph: Graph, context) -> int:
    """Rewrites the float16 nodes only float32 kernels take (see the module docstring), in
    ``graph`` and in every subgraph of it; returns how many nodes now compute in float32."""
    if context.bind is None or context.types is None:
        return 0
    return _upcast_scope(graph, context, _Names(graph))


def _upcast_scope(graph: Graph, context, names: "_Names") -> int:
    """upcast_float16 on one graph, then on the subgraphs of its nodes, each rewritten in its own
    scope: a float32 twin of a constant goes where the constant is (the session has made the
    outer constants a body reads the body's own), a Cast next to its reader."""
    changed = _upcast_nodes(graph, context, names)
    for node in graph.nodes:
        for body in node.subgraphs():
            changed += _upcast_scope(body, context, names)
    return changed


def _upcast_nodes(graph: Graph, context, names: "_Names") -> int:
    """The rewrite of the nodes of ``graph`` itself; names come from ``names``."""
    uses = Uses(graph)
    chosen, made_wide = [], set()
    for node in topological_order(graph):
        if _needs_float32(node, context, made_wide, uses):
            chosen.append(node)
            made_wide.update(name for name in node.outputs if _is_f16(context, name))
    if not chosen:
        return 0
    upcast = set(map(id, chosen))
    wide: dict[str, str] = {}   # float16 value -> the name of its float32 version
    before: dict[int, list] = {}   # id(node) -> the casts to float32 it reads, to go before it
    after: dict[int, list] = {}    # id(node) -> the casts back to float16 of its outputs
    for node in chosen:
        node.inputs = [_float32_name(graph, context, names, name, node, wide, before)
                       if _is_f16(context, name) else name for name in node.inputs]
        for index, name in enumerate(node.outputs):
            if not _is_f16(context, name):
                continue
            wide_name = names.fresh(f"{name}_float32")
            node.outputs[index] = wide_name
            _set_type(context, wide_name, F32, context.types.get(name).shape)
            wide[name] = wide_name
            readers = [r for r in uses.readers.get(name, []) if id(r) not in upcast]
            if readers or name in uses.outputs or name in uses.implicit:
                after.setdefault(id(node), []).append(_cast(wide_name, name, onnx.TensorProto.FLOAT16, node))
        node.input_types, node.output_types = [], []   # bound again from the types, now float32
    graph.nodes = [n for node in graph.nodes
                   for n in (*before.get(id(node), ()), node, *after.get(id(node), ()))]
    return len(chosen)


def _needs_float32(node: Node, context, made_wide: set, uses: Uses) -> bool:
    """Whether ``node`` reads float16, has a known type for each output read (a Dropout's unread
    mask may have none), and a native kernel
    takes it in float32; and either no kernel but the reference takes it as it is, or it reads
    the float32 result of an upcast node and gives a float16 result (so the chain stays
    float32), unless it is a Cast, whose rounding must see the float16 value."""
    if (node.domain not in ("", "ai.onnx", "com.microsoft") or node.subgraphs()
            or TYPE_ATTRIBUTES & set(node.attrs)):
        return False
    types = [context.types.get(name) if name else None for name in node.inputs]
    if not any(t is not None and t.dtype == F16 for t in types):
        return False
    outputs = [context.types.get(name) for name in node.outputs if name and not uses.unread(name)]
    if any(t is None for t in outputs):
        return False
    continues = (any(name in made_wide for name in node.inputs) and node.op_type not in ROUNDING
                 and any(t.dtype == F16 for t in outputs))
    if not continues and can_bind(context, node):
        return False
    wide = [TensorType(F32, t.shape) if t is not None and t.dtype == F16 else t for t in types]
    probe = dataclasses.replace(node, inputs=list(node.inputs), outputs=list(node.outputs),
                                input_types=wide)
    try:
        return context.bind(probe).provider != REFERENCE
    except KernelNotFoundError:
        return False


def _float32_name(graph: Graph, context, names: "_Names", name: str, reader: Node, wide: dict,
                  before: dict) -> str:
    """The name of a float32 version of float16 value ``name``: an upcast node's own result, a
    float32 twin of a constant, or the output of a Cast inserted before ``reader``."""
    if name in wide:
        return wide[name]
    target = names.fresh(f"{name}_float32")
    value = constant(graph, name)
    if value is not None:
        graph.initializers[target] = value.astype(np.float32)
    else:
        before.setdefault(id(reader), []).append(_cast(name, target, onnx.TensorProto.FLOAT, reader))
    _set_type(context, target, F32, context.types.get(name).shape)
    wide[name] = target
    return target


def _cast(source: str, target: str, to: int, near: Node) -> Node:
    kind = "float32" if to == onnx.TensorProto.FLOAT else "float16"
    return Node(f"{near.name}_{kind}_{target}", "Cast", "", [source], [target], attrs={"to": to},
                attr_types={"to": onnx.AttributeProto.INT})


def _is_f16(context, name: str) -> bool:
    known = context.types.get(name) if name else None
    return known is not None and known.dtype == F16


def _set_type(context, name: str, dtype: np.dtype, shape) -> None:
    context.types.values[name] = TensorType(dtype, shape)


class _Names:
    """The names a graph and its subgraphs hold, read once, and fresh ones made from a base as
    the pass adds them (a fresh name never shadows a name of any scope)."""

    def __init__(self, graph: Graph):
        self.taken = set(graph.outer_names)
        scopes = [graph]
        while scopes:
            scope = scopes.pop()
            self.taken |= scope.defined_names()
            scopes.extend(body for node in scope.nodes for body in node.subgraphs())

    def fresh(self, base: str) -> str:
        name, index = base, 0
        while name in self.taken:
            index += 1
            name = f"{base}_{index}"
        self.taken.add(name)
        return name
