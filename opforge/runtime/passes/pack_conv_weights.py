"""Conv and FusedConv on constant weights with long sums become com.opforge PackedConv: the
weights packed once, at session creation, into the panels of output channels its tiles stream
(conv_packed.cpp), which read the input where it lies and spend no vector lane past the end of
a 7x7 or 14x14 map."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from opforge import config
from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.graph.types import TensorType
from opforge.runtime.passes.pack_matmul_weights import OPFORGE, _cpu_flags, pack_weights
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, attribute, can_bind, constant, new_initializer

# Which convs pack, by K = input channels x taps (the sum per output) and output positions per
# image. Measured on resnet50's and squeezenet's convs at 1 thread (Zen 5, GFLOP/s, PackedConv
# against conv_gemm_f32): every 3x3 with K >= 432 gains (56x56 226 / 202, 13x13 187 / 167, 7x7
# 240 / 178, stride 2 215 / 172), K = 288 and 144 lose (188 / 199, 164 / 184); 1x1 convs gain
# with K >= 1024 (229 / 216 at 14x14, 228 / 183 at 7x7) or a 7x7 map (209 / 193 at K = 512) and
# lose below (K = 64..256: 122-191 / 182-227; K = 512 at 28x28: 221 / 240): a short sum spends
# more of its time storing the tile's rows and gathering them back.
MIN_K = 384
MIN_K_POINTWISE = 1024
MIN_K_POINTWISE_SMALL_MAP, SMALL_MAP = 512, 64
_COPIED = ("activation", "activation_params", "auto_pad", "dilations", "pads", "strides")
_ATTR_TYPES = {"M": AttributeProto.INT, "kernel_shape": AttributeProto.INTS, "activation": AttributeProto.STRING,
               "activation_params": AttributeProto.FLOATS, "auto_pad": AttributeProto.STRING,
               "dilations": AttributeProto.INTS, "pads": AttributeProto.INTS, "strides": AttributeProto.INTS}


def pack_conv_weights(graph: Graph, context) -> int:
    """Rewrites each float32 2-D Conv or com.microsoft FusedConv of one group whose W is a
    constant initializer, with a sum of at least MIN_K (1x1: MIN_K_POINTWISE, or
    MIN_K_POINTWISE_SMALL_MAP over at most SMALL_MAP output positions) into PackedConv, where the CPU has AVX-512F and $OPFORGE_GEMM_ISA is "auto" or "avx512". The
    unpacked weights are dropped when nothing else reads them. Returns how many nodes were
    packed."""
    if config.gemm_isa() not in ("auto", "avx512") or "avx512f" not in _cpu_flags():
        return 0
    uses = Uses(graph)
    packed = 0
    for node in list(graph.nodes):
        w = _weights(graph, node, context)
        if w is not None and _replace(graph, uses, context, node, w):
            packed += 1
    return packed


def _weights(graph: Graph, node: Node, context) -> np.ndarray | None:
    """W (M, C, kh, kw) of a conv that packs, else None."""
    if (node.domain, node.op_type) not in (("", "Conv"), (MICROSOFT, "FusedConv")) or len(node.inputs) < 2:
        return None
    x, y = context.types.get(node.inputs[0]), context.types.get(node.outputs[0])
    w = constant(graph, node.inputs[1])
    if x is None or x.dtype != np.float32 or w is None or w.dtype != np.float32 or w.ndim != 4:
        return None
    if attribute(node, "group", 1) != 1 or y is None or y.shape is None or len(y.shape) != 4:
        return None
    if x.shape is None or len(x.shape) != 4 or x.shape[1] != w.shape[1]:
        return None   # a conv that cannot run keeps its op, whose error then names it as written
    if list(attribute(node, "kernel_shape", w.shape[2:])) != list(w.shape[2:]):
        return None
    h, wd = y.shape[2:]
    if not (isinstance(h, int) and isinstance(wd, int) and h * wd > 0):
        return None
    k = int(np.prod(w.shape[1:]))
    if w.shape[2] * w.shape[3] == 1:
        packs = k >= MIN_K_POINTWISE or (k >= MIN_K_POINTWISE_SMALL_MAP and h * wd <= SMALL_MAP)
    else:
        packs = k >= MIN_K
    return w if packs else None


def _replace(graph: Graph, uses: Uses, context, node: Node, w: np.ndarray) -> bool:
    """Puts one PackedConv in place of ``node``; False (graph unchanged) if it cannot bind."""
    m = w.shape[0]
    weights = pack_weights(np.ascontiguousarray(w.reshape(m, -1).T))
    name = new_initializer(graph, f"{node.inputs[1]}_packed", weights)
    context.types.values[name] = TensorType(np.dtype(np.float32), weights.shape)
    inputs = [node.inputs[0], name] + list(node.inputs[2:4])
    attrs = {"M": int(m), "kernel_shape": [int(k) for k in w.shape[2:]]}
    attrs.update({key: node.attrs[key] for key in _COPIED if key in node.attrs})
    fused = Node(node.name, "PackedConv", OPFORGE, inputs, list(node.outputs), attrs,
                 attr_types={key: _ATTR_TYPES[key] for key in attrs})
    if not can_bind(context, fused):
        del graph.initializers[name]
        return False
    uses.replace([node], fused)
    if constant(graph, node.inputs[1]) is not None and uses.unread(node.inputs[1]):
        del graph.initializers[node.inputs[1]]
    return True
