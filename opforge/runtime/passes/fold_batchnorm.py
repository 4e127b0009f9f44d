"""BatchNormalization folded into the weights and bias of the Conv or Gemm that feeds it."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, attribute, constant, new_initializer


def fold_batchnorm(graph: Graph, context=None) -> int:
    """Folds each inference-mode BatchNormalization whose input is the only use of a Conv's or
    Gemm's output, all their weights constant, into that node: scale s = gamma / sqrt(var + eps)
    multiplies the output channel's weights, and the bias becomes (bias - mean) * s + beta.
    New initializers are made (a weight may be shared). Returns how many were folded."""
    uses = Uses(graph)
    folded = 0
    for producer in list(graph.nodes):
        if producer.op_type not in ("Conv", "Gemm") or producer.domain != "":
            continue
        norm = uses.only_reader(producer.outputs[0])
        if norm is None or norm.op_type != "BatchNormalization" or norm.domain != "":
            continue
        stats = _statistics(graph, norm, uses)
        if stats is None:
            continue
        fold = _fold_conv if producer.op_type == "Conv" else _fold_gemm
        inputs = fold(graph, producer, *stats)
        if inputs is None:
            continue
        fused = Node(producer.name, producer.op_type, producer.domain, inputs, [norm.outputs[0]],
                     dict(producer.attrs), attr_types=dict(producer.attr_types))
        if producer.op_type == "Gemm":
            fused.attrs["beta"] = 1.0
        uses.replace([producer, norm], fused)
        folded += 1
    return folded


def _statistics(graph: Graph, norm: Node, uses: Uses):
    """(s, shift) with BN(y) = y * s + shift per channel, when ``norm`` folds; else None."""
    if norm.input_types and norm.input_types[0] is not None and norm.input_types[0].dtype.kind != "f":
        return None
    if attribute(norm, "training_mode", 0) or not attribute(norm, "spatial", 1):
        return None
    if any(name and (uses.readers.get(name) or name in uses.outputs) for name in norm.outputs[1:]):
        return None
    params = [constant(graph, name) for name in norm.inputs[1:5]]
    if len(params) != 4 or any(p is None or p.ndim != 1 or p.size != params[0].size for p in params):
        return None   # left for the kernel to run or refuse
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
    s = gamma / np.sqrt(var + float(attribute(norm, "epsilon", 1e-5)))
    return s, beta - mean * s


def _fold_conv(graph: Graph, conv: Node, s, shift) -> list | None:
    w = constant(graph, conv.inputs[1])
    bias = constant(graph, conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
    has_bias = len(conv.inputs) > 2 and conv.inputs[2]
    if w is None or w.dtype.kind != "f" or w.ndim < 3 or w.shape[0] != s.size or \
            (has_bias and (bias is None or bias.shape != s.shape)):
        return None
    b = bias.astype(np.float64) if bias is not None else np.zeros(s.size)
    w2 = (w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b2 = (b * s + shift).astype(w.dtype)
    return [conv.inputs[0], new_initializer(graph, f"{conv.inputs[1]}_bn", w2),
            new_initializer(graph, f"{conv.inputs[1]}_bn_bias", b2)]


def _fold_gemm(graph: Graph, gemm: Node, s, shift) -> list | None:
    """Gemm's output (M, N) normalised over N: column n of B' and C scale by s[n]."""
    b = constant(graph, gemm.inputs[1])
    has_c = len(gemm.inputs) > 2 and gemm.inputs[2]
    c = constant(graph, gemm.inputs[2]) if has_c else None
    if b is None or b.dtype.kind != "f" or b.ndim != 2 or (has_c and (c is None or c.ndim > 2)):
        return None
    trans_b = attribute(gemm, "transB", 0)
    if b.shape[0 if trans_b else 1] != s.size:
        return None
    b2 = b * (s[:, None] if trans_b else s[None, :])
    c64 = np.zeros(s.size) if c is None else c.astype(np.float64) * float(attribute(gemm, "beta", 1.0))
    if c64.ndim and c64.shape[-1] not in (1, s.size):
        return None
    c2 = c64 * s + shift
    return [gemm.inputs[0], new_initializer(graph, f"{gemm.inputs[1]}_bn", b2.astype(b.dtype)),
            new_initializer(graph, f"{gemm.inputs[1]}_bn_bias", c2.astype(b.dtype))]
