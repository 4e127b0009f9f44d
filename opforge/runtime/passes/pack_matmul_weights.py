"""MatMul and Gemm on constant weights become com.opforge PackedMatMul: the weights packed once,
at session creation, into the column panels opforge's GEMM tiles stream, with the bias Add and a
Relu or Gelu that follow fused in."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import AttributeProto

from opforge import config
from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.graph.types import TensorType
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, attribute, can_bind, constant, new_initializer

OPFORGE = "com.opforge"
PANEL = 32   # columns per packed panel (gemm_packed.cpp's kPanel)
# Below 16 columns most of a panel's lanes would be padding: OpenBLAS is faster (N = 1: 2.5x, at
# 4: 1.3x, measured with M = 4096, K = 256 at 1 thread).
MIN_COLUMNS = 16
_ACTIVATIONS = {("", "Relu"), ("", "Gelu"), (MICROSOFT, "Gelu")}
_ATTR_TYPES = {"N": AttributeProto.INT, "activation": AttributeProto.STRING, "isa": AttributeProto.STRING}


def pack_weights(w: np.ndarray) -> np.ndarray:
    """W (K, N) as (ceil(N / 32), K, 32): panel p holds columns [32p, 32p + 32), zero past N."""
    k, n = w.shape
    panels = -(-n // PANEL)
    padded = np.zeros((k, panels * PANEL), np.float32)
    padded[:, :n] = w
    packed = _aligned_empty((panels, k, PANEL))
    packed[...] = padded.reshape(k, panels, PANEL).transpose(1, 0, 2)
    return packed


def _aligned_empty(shape: tuple) -> np.ndarray:
    """An uninitialised float32 array starting on a 64-byte boundary, so that no row of a packed
    panel (128 bytes) straddles a cache line (numpy aligns to 16 bytes only)."""
    size = int(np.prod(shape)) * 4
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size].view(np.float32).reshape(shape)


def pack_matmul_weights(graph: Graph, context) -> int:
    """Rewrites each float32 MatMul whose B is a constant 2-D initializer of at least 16 columns
    (A of any rank, but not known to be a single row: one-row products take the GEMV), and
    each Gemm with transA = 0 and a constant B (alpha folded into the packed weights), into
    PackedMatMul; a following Add of a constant bias that broadcasts along N only (or Gemm's C
    of shape (N), (1, N) or one value, times beta) and then a Relu or erf-Gelu reading only it
    join the node. Does nothing where $OPFORGE_GEMM_ISA is "blas" or, at "auto", where the CPU
    has neither AVX-512F nor AVX2 + FMA (OpenBLAS is faster than plain loops). The unpacked
    weights are dropped when nothing else reads them. Returns how many nodes were packed."""
    if not tiles_wanted():
        return 0
    isa = config.gemm_isa()
    uses = Uses(graph)
    packed = 0
    for node in list(graph.nodes):
        match = _weights(graph, node, context)
        if match is None:
            continue
        w, bias = match
        nodes, output = [node], node.outputs[0]
        if bias is None and node.op_type == "MatMul":
            add = uses.only_reader(output)
            bias = _bias_of_add(graph, add, output, w.shape[1], context)
            if bias is not None:
                nodes, output = nodes + [add], add.outputs[0]
        act = _activation(uses.only_reader(output))
        activation = ""
        if act is not None:
            nodes, output, activation = nodes + [act], act.outputs[0], act.op_type
        if _replace(graph, uses, context, nodes, output, w, bias, activation, isa):
            packed += 1
    return packed


def _activation(node: Node | None) -> Node | None:
    """``node`` if it is a Relu or an erf-form Gelu (ONNX's or com.microsoft's)."""
    if node is None or (node.domain, node.op_type) not in _ACTIVATIONS:
        return None
    return node if attribute(node, "approximate", "none") == "none" else None


def _replace(graph, uses, context, nodes, output, w, bias, activation, isa) -> bool:
    """Puts one PackedMatMul in place of ``nodes``; False (graph unchanged) if it cannot bind."""
    node = nodes[0]
    weights = pack_weights(w)
    names = [new_initializer(graph, f"{node.inputs[1]}_packed", weights)]
    context.types.values[names[0]] = TensorType(np.dtype(np.float32), weights.shape)
    if bias is not None:
        names.append(new_initializer(graph, f"{node.inputs[1]}_packed_bias", bias))
        context.types.values[names[1]] = TensorType(np.dtype(np.float32), bias.shape)
    attrs = {"N": int(w.shape[1]), "activation": activation, "isa": isa}
    fused = Node(node.name, "PackedMatMul", OPFORGE, [node.inputs[0]] + names, [output], attrs,
                 attr_types=dict(_ATTR_TYPES))
    if not can_bind(context, fused):
        for name in names:
            del graph.initializers[name]
        return False
    replaced = {name for n in nodes for name in n.inputs if name}
    uses.replace(nodes, fused)
    for name in replaced - {node.inputs[0]}:
        if name in graph.initializers and constant(graph, name) is not None and uses.unread(name):
            del graph.initializers[name]
    return True


def _weights(graph: Graph, node: Node, context):
    """(W as (K, N) float32, Gemm's bias or None) for a MatMul or Gemm that packs, else None."""
    if node.domain != "" or node.op_type not in ("MatMul", "Gemm") or len(node.inputs) < 2:
        return None
    a = context.types.get(node.inputs[0])
    b = constant(graph, node.inputs[1])
    if a is None or a.dtype != np.float32 or b is None or b.dtype != np.float32 or b.ndim != 2:
        return None
    transposed = 1 if node.op_type == "Gemm" and attribute(node, "transB", 0) else 0
    if b.shape[0 if transposed else 1] < MIN_COLUMNS:
        return None
    if a.shape is not None and (not a.shape or isinstance(a.shape[-1], int) and a.shape[-1] != b.shape[transposed]):
        return None   # a product that cannot run keeps its op, whose error then names it as written
    if a.shape is not None and all(isinstance(d, int) for d in a.shape[:-1]) and int(np.prod(a.shape[:-1])) == 1:
        return None   # one row: the GEMV on W as it lies beat the packed tile (a classifier head of
        #               576 -> 1024 -> 1000: 0.10-0.11 ms against 0.19-0.20, onnxruntime 0.17-0.18)
    if node.op_type == "MatMul":
        return b, None
    if attribute(node, "transA", 0) or a.shape is None or len(a.shape) != 2:
        return None
    w = (b.T if transposed else b) * np.float32(attribute(node, "alpha", 1.0))
    c_name = node.inputs[2] if len(node.inputs) > 2 else ""
    if not c_name:
        return w.astype(np.float32), None
    c = constant(graph, c_name)
    n = w.shape[1]
    if c is None or c.dtype != np.float32 or c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1) or c.size not in (1, n):
        return None
    beta = np.float32(attribute(node, "beta", 1.0))
    return w.astype(np.float32), np.broadcast_to(c.reshape(-1) * beta, (n,)).astype(np.float32)


def _bias_of_add(graph: Graph, add: Node | None, product: str, n: int, context) -> np.ndarray | None:
    """The (N,) bias of ``add`` = Add(product, bias), when bias is a float32 constant that
    broadcasts along N only and leaves the product's shape as it is."""
    if add is None or add.op_type != "Add" or add.domain != "":
        return None
    other = add.inputs[1] if add.inputs[0] == product else add.inputs[0]
    bias = constant(graph, other)
    out = context.types.get(product)
    if bias is None or bias.dtype != np.float32 or bias.size not in (1, n) or bias.shape[-1:] not in ((), (bias.size,)):
        return None
    if bias.ndim > 1 and (out is None or out.shape is None or bias.ndim > len(out.shape)):
        return None
    return np.broadcast_to(bias.reshape(-1), (n,)).astype(np.float32)


def tiles_wanted() -> bool:
    """Whether products on packed weights run here: $OPFORGE_GEMM_ISA is not "blas" and, at
    "auto", the CPU has AVX-512F or AVX2 with FMA (else OpenBLAS beats the plain loops)."""
    isa = config.gemm_isa()
    return isa != "blas" and (isa != "auto" or _cpu_has_simd())


def _cpu_flags() -> set:
    """This CPU's feature flags (Linux's /proc/cpuinfo; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


def _cpu_has_simd() -> bool:
    """Whether this CPU has AVX-512F or AVX2 with FMA."""
    flags = _cpu_flags()
    return "avx512f" in flags or {"avx2", "fma"} <= flags
