"""Constant folding: run, once at load, the nodes whose inputs are all known constants."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.domains import is_standard_domain
from opforge.runtime.graph.graph import Graph, Node

# Ops whose result differs from run to run, or that the reference could not fold on purpose.
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli", "Dropout"}

# A DequantizeLinear read by an op that fuse_qdq can make quantized (one whose output goes to a
# QuantizeLinear) stays, as in onnxruntime, so that the fusion still sees the integer weights.
_QDQ_READERS = {"Conv", "MatMul", "Add", "Mul", "GlobalAveragePool", "Sigmoid", "Softmax", "Concat"}

# Ops that read only their input's shape, so a statically known shape is enough to fold them.
_SHAPE_ONLY = {"Shape", "Size"}


def fold_constants(graph: Graph, context) -> int:
    """Replace foldable nodes of the main graph by initializers; return how many were folded.

    A node folds when every input it reads is a constant (an initializer that is not also a
    graph input, or a folded result), or when it is a Shape/Size whose input shape inference
    fixed completely. It is computed with the very kernel the session would run it with
    (``context.bind``). Nodes with subgraphs, from custom domains, or random ones never fold,
    and a node whose kernel fails is left for run time, where its error names it.
    """
    overridable = {v.name for v in graph.inputs}
    constants = {n: a for n, a in graph.initializers.items() if n not in overridable}
    kept, folded = [], 0
    quantized_reads = _qdq_group_inputs(graph)
    for node in graph.nodes:
        kept_for_qdq = node.op_type == "DequantizeLinear" and node.outputs[0] in quantized_reads
        try:
            results = None if kept_for_qdq else _fold(node, constants, context)
        except Exception:   # folding is an optimisation: a node it cannot fold runs as it is
            results = None
        if results is None:
            kept.append(node)
            continue
        for name, value in zip(node.outputs, results):
            if name:
                constants[name] = value
                graph.initializers[name] = value
        folded += 1
    graph.nodes = kept
    return folded


def _qdq_group_inputs(graph: Graph) -> set[str]:
    """The inputs of ops of _QDQ_READERS whose output a QuantizeLinear reads."""
    quantized = {n.inputs[0] for n in graph.nodes if n.op_type == "QuantizeLinear" and n.inputs}
    return {name for node in graph.nodes if node.op_type in _QDQ_READERS and set(node.outputs) & quantized
            for name in node.inputs}


def _fold(node: Node, constants: dict[str, np.ndarray], context) -> list | None:
    if (node.op_type in _NONDETERMINISTIC or node.subgraphs() or node.implicit_inputs
            or not is_standard_domain(node.domain)):
        return None
    if node.op_type in _SHAPE_ONLY and node.inputs and node.inputs[0] not in constants:
        args = _shape_stand_in(node.inputs[0], context)
    elif all(name in constants for name in node.inputs if name):
        args = [constants[name] if name else None for name in node.inputs]
    else:
        return None
    if args is None:
        return None
    try:
        results = context.bind(node).run(args)
    except Exception:  # a kernel may fail any way it likes; the run will report it
        return None
    outputs = [r for name, r in zip(node.outputs, results) if name]
    if len(outputs) != len([n for n in node.outputs if n]):
        return None
    if not all(isinstance(r, np.ndarray) for r in outputs):
        return None
    return list(results)


def _shape_stand_in(name: str, context) -> list | None:
    """A zero-cost array of ``name``'s inferred shape, if that shape is fully static."""
    known = context.types.get(name)
    if known is None or known.shape is None or not all(isinstance(d, int) and d >= 0 for d in known.shape):
        return None   # an unknown or symbolic dim stays so: the Shape runs at run time
    return [np.broadcast_to(np.zeros((), dtype=known.dtype), known.shape)]
