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
from opforge.runtime.passes.pack_matmul_weights import OPFORGE, PANEL, _aligned_empty, pack_weights
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, attribute, can_bind, constant, new_initializer

# Which convs pack where the kernels have AVX-512: measured on every distinct single-group conv
# of the onnx wheel's light zoo (PackedConv against conv_gemm_f32, each conv alone, 1 and 2
# threads; the figures are in the commit that set these). Packing wins on nearly all of them.
# It loses where
# - the input has at most MAX_DIRECT_CHANNELS channels (a network's first conv), which
#   conv_gemm_f32 reads in place;
# - a 1x1 conv's M leaves much of its last 32-channel panel empty (up to about 1.15 panels'
#   worth breaks even), or its sum is short and M large;
# - any conv's M is a small part of its panels (M = 16 or 24); with longer sums a 3x3 or
#   5x5 of M = 48 still gains.
# With AVX2 tiles only, the alternative is OpenBLAS over im2col (conv_gemm_f32 has no AVX2
# tiles), which every one of these lost to, first convs and half-empty panels included: every
# conv packs whose M (per group) fills at least half of its last panel, grouped convs too
# (depthwise ones have kernels of their own).
MAX_DIRECT_CHANNELS = 4
MIN_K_POINTWISE, MAX_M_SHORT_POINTWISE = 128, 64
MAX_PANEL_WASTE_POINTWISE, MAX_PANEL_WASTE = 1.15, 1.34
MAX_PANEL_WASTE_AVX2 = 2.0
_COPIED = ("activation", "activation_params", "auto_pad", "dilations", "pads", "strides")
_ATTR_TYPES = {"M": AttributeProto.INT, "group": AttributeProto.INT, "kernel_shape": AttributeProto.INTS, "activation": AttributeProto.STRING,
               "activation_params": AttributeProto.FLOATS, "auto_pad": AttributeProto.STRING,
               "dilations": AttributeProto.INTS, "pads": AttributeProto.INTS, "strides": AttributeProto.INTS}


def pack_conv_weights(graph: Graph, context) -> int:
    """Rewrites each float32 2-D Conv or com.microsoft FusedConv (of one group; on AVX2 grouped ones
    too, depthwise ones aside) whose W is a constant initializer, and whose shape packing suits
    (see above), into PackedConv, where the built-in kernels were compiled with PackedConv's tiles (AVX-512F, or AVX2 with FMA) and
    $OPFORGE_GEMM_ISA is not "blas" or "portable". A HardSwish that alone reads the output of a
    conv without an activation becomes the PackedConv's activation (onnxruntime's FusedConv has
    none of its own, so only here). The unpacked weights are dropped when nothing else reads
    them. Returns how many nodes were packed."""
    tiles = _kernel_tiles()
    if config.gemm_isa() in ("blas", "portable") or tiles is None:
        return 0
    uses = Uses(graph)
    packed = 0
    for node in list(graph.nodes):
        w = _weights(graph, node, context, avx2=tiles == "avx2")
        if w is not None and _replace(graph, uses, context, node, w):
            packed += 1
    return packed


def _kernel_tiles() -> str | None:
    """The register tiles the built-in kernel library has for PackedConv, "avx512" or "avx2", or
    None: its instruction sets decide, not this CPU's (a -march=haswell build on an AVX-512
    machine has the AVX2 tiles, an x86-64-v2 build none)."""
    from opforge.runtime.providers.cpu import library

    isa = set(library.kernel_isa())
    return "avx512" if "avx512f" in isa else "avx2" if {"avx2", "fma"} <= isa else None


def _weights(graph: Graph, node: Node, context, avx2: bool) -> np.ndarray | None:
    """W (M, C / group, kh, kw) of a conv that packs, else None; ``avx2``: by the AVX2 rule (each
    conv packs, grouped ones too but depthwise, unless a group's M leaves most of its last
    panel empty)."""
    if (node.domain, node.op_type) not in (("", "Conv"), (MICROSOFT, "FusedConv")) or len(node.inputs) < 2:
        return None
    x, y = context.types.get(node.inputs[0]), context.types.get(node.outputs[0])
    w = constant(graph, node.inputs[1])
    if x is None or x.dtype != np.float32 or w is None or w.dtype != np.float32 or w.ndim != 4:
        return None
    group = attribute(node, "group", 1)
    if (group != 1 and (not avx2 or w.shape[1] == 1)) or y is None or y.shape is None or len(y.shape) != 4:
        return None
    if x.shape is None or len(x.shape) != 4 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        return None   # a conv that cannot run keeps its op, whose error then names it as written
    if list(attribute(node, "kernel_shape", w.shape[2:])) != list(w.shape[2:]):
        return None
    if any(isinstance(d, int) and d <= 0 for d in y.shape[2:]):
        return None   # an empty map (a symbolic height or width packs: the tiles take each run's shape)
    m, c = int(w.shape[0]), int(w.shape[1])
    k = int(np.prod(w.shape[1:]))
    waste = -(-(m // group) // PANEL) * PANEL / (m // group)
    if avx2:
        packs = waste <= MAX_PANEL_WASTE_AVX2
    elif c <= MAX_DIRECT_CHANNELS:
        packs = False
    elif w.shape[2] * w.shape[3] == 1:
        packs = waste <= MAX_PANEL_WASTE_POINTWISE and (k >= MIN_K_POINTWISE or m <= MAX_M_SHORT_POINTWISE)
    else:
        packs = waste <= MAX_PANEL_WASTE
    return w if packs else None


def _replace(graph: Graph, uses: Uses, context, node: Node, w: np.ndarray) -> bool:
    """Puts one PackedConv in place of ``node``; False (graph unchanged) if it cannot bind."""
    m, group = w.shape[0], attribute(node, "group", 1)
    parts = [pack_weights(np.ascontiguousarray(wg.reshape(m // group, -1).T)) for wg in np.split(w, group)]
    weights = parts[0] if group == 1 else _aligned_empty((sum(len(p) for p in parts),) + parts[0].shape[1:])
    if group != 1:
        weights[...] = np.concatenate(parts)
    name = new_initializer(graph, f"{node.inputs[1]}_packed", weights)
    context.types.values[name] = TensorType(np.dtype(np.float32), weights.shape)
    inputs = [node.inputs[0], name] + list(node.inputs[2:4])
    attrs = {"M": int(m), "kernel_shape": [int(k) for k in w.shape[2:]]}
    if group != 1:
        attrs["group"] = int(group)
    attrs.update({key: node.attrs[key] for key in _COPIED if key in node.attrs})
    replaced, outputs = [node], list(node.outputs)
    hard_swish = None if attrs.get("activation") else uses.only_reader(node.outputs[0])
    if hard_swish is not None and (hard_swish.domain, hard_swish.op_type) == ("", "HardSwish"):
        # PackedConv's own activation (FusedConv has no HardSwish): MobileNetV3's convs end in it
        attrs["activation"] = "HardSwish"
        replaced, outputs = [node, hard_swish], [hard_swish.outputs[0]] + outputs[1:]
    fused = Node(node.name, "PackedConv", OPFORGE, inputs, outputs, attrs,
                 attr_types={key: _ATTR_TYPES[key] for key in attrs})
    if not can_bind(context, fused):
        del graph.initializers[name]
        return False
    uses.replace(replaced, fused)
    if constant(graph, node.inputs[1]) is not None and uses.unread(node.inputs[1]):
        del graph.initializers[node.inputs[1]]
    return True
