"""RNN, GRU and LSTM on constant float32 weights become com.opforge PackedRNN, PackedGRU and
PackedLSTM: W^T packed once, at session creation, into the column panels opforge's GEMM tiles
stream, which the input projections of every step read (sequences not known to be shorter than
PACKED_ROWS rows). The kernel packed W at every call before
(4 MB a run for a bidirectional LSTM over 1024 features: 9% of a CRNN's time, as much as its
product); onnxruntime packs it once too. W stays for single steps, which take a GEMV."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.graph.types import TensorType
from opforge.runtime.passes.pack_matmul_weights import OPFORGE, PANEL, _aligned_empty, tiles_wanted
from opforge.runtime.passes.rewrite import Uses, can_bind, constant, new_initializer

_PACKED = {"RNN": ("PackedRNN", 6), "GRU": ("PackedGRU", 6), "LSTM": ("PackedLSTM", 8)}
"""op -> (its packed form, the index of the packed weights' input)"""
PACKED_ROWS = 8
"""Steps times batch rows from which the kernel reads the packed weights (rnn.cpp's kPackedRows):
a sequence known to be shorter (a streaming model's single step) keeps its op, and no copy of W."""


def pack_directions(w: np.ndarray) -> np.ndarray:
    """W (directions, G, input) as (directions, ceil(G / 32), input, 32): per direction the panels of
    W^T (gemm_packed.cpp's pack_rows): panel p, row k, lane j holds W[d, 32p + j, k], zero past G."""
    dirs, gates, inputs = w.shape
    panels = -(-gates // PANEL)
    padded = np.zeros((dirs, panels * PANEL, inputs), np.float32)
    padded[:, :gates] = w
    packed = _aligned_empty((dirs, panels, inputs, PANEL))
    packed[...] = padded.reshape(dirs, panels, PANEL, inputs).transpose(0, 1, 3, 2)
    return packed


def pack_rnn_weights(graph: Graph, context) -> int:
    """Rewrites each float32 RNN, GRU or LSTM whose W is a constant 3-D initializer into its
    packed form, where $OPFORGE_GEMM_ISA is not "blas" and, at "auto", the CPU has AVX-512F or AVX2
    with FMA (elsewhere the kernel takes OpenBLAS's GEMM, which packs for itself). Returns how many
    nodes were packed."""
    if not tiles_wanted():
        return 0
    uses = Uses(graph)
    packed = 0
    for node in [n for n in graph.nodes if n.domain == "" and n.op_type in _PACKED and len(n.inputs) >= 3]:
        x = context.types.get(node.inputs[0])
        w = constant(graph, node.inputs[1])
        if x is None or x.dtype != np.float32 or w is None or w.dtype != np.float32 or w.ndim != 3:
            continue
        if _rows(x.shape) < PACKED_ROWS:
            continue
        packed += _replace(graph, uses, context, node, w)
    return packed


def _rows(shape) -> float:
    """Steps times batch rows of X (either layout), or infinity where either is not known."""
    if shape is None or len(shape) != 3 or not all(isinstance(d, int) for d in shape[:2]):
        return float("inf")
    return shape[0] * shape[1]


def _replace(graph: Graph, uses: Uses, context, node: Node, w: np.ndarray) -> bool:
    """Puts the packed form in place of ``node``; False (graph unchanged) if it cannot bind."""
    op, at = _PACKED[node.op_type]
    weights = pack_directions(w)
    name = new_initializer(graph, f"{node.inputs[1]}_packed", weights)
    context.types.values[name] = TensorType(np.dtype(np.float32), weights.shape)
    inputs = list(node.inputs[:at]) + [""] * (at - len(node.inputs)) + [name]
    attrs = dict(node.attrs)
    types = dict(node.attr_types)
    if "layout" not in attrs:   # before opset 14 there is no layout: time-major
        attrs["layout"], types["layout"] = 0, AttributeProto.INT
    packed = Node(node.name, op, OPFORGE, inputs, list(node.outputs), attrs, attr_types=types)
    if not can_bind(context, packed):
        del graph.initializers[name]
        return False
    uses.replace([node], packed)
    return True
