"""Graph passes, and the order they run in at each optimization level."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from opforge.runtime.graph.graph import Graph
from opforge.runtime.graph.shapes import InferredTypes
from opforge.runtime.options import GraphOptimizationLevel
from opforge.runtime.passes.cancel_transposes import cancel_transposes
from opforge.runtime.passes.constant_folding import fold_constants
from opforge.runtime.passes.dead_code import remove_dead_nodes
from opforge.runtime.passes.drop_redundant_clips import drop_redundant_clips
from opforge.runtime.passes.eliminate_casts import eliminate_casts
from opforge.runtime.passes.eliminate_identities import eliminate_identities
from opforge.runtime.passes.fold_batchnorm import fold_batchnorm
from opforge.runtime.passes.fold_conv_affine import fold_conv_affine
from opforge.runtime.passes.fuse_conv_activation import fuse_conv_activation
from opforge.runtime.passes.fuse_conv_add import fuse_conv_add
from opforge.runtime.passes.fuse_dynamic_quant import fuse_dynamic_quant
from opforge.runtime.passes.fuse_gelu import fuse_gelu
from opforge.runtime.passes.fuse_layernorm import fuse_layernorm
from opforge.runtime.passes.fuse_matmul_add import fuse_matmul_add
from opforge.runtime.passes.fuse_qdq import fuse_qdq
from opforge.runtime.passes.merge_reshapes import merge_reshapes
from opforge.runtime.passes.pack_conv_weights import pack_conv_weights
from opforge.runtime.passes.pack_matmul_weights import pack_matmul_weights
from opforge.runtime.passes.pack_rnn_weights import pack_rnn_weights
from opforge.runtime.passes.split_string_labels import split_string_labels
from opforge.runtime.passes.upcast_float16 import upcast_float16


@dataclass
class PassContext:
    """What passes may use: ``bind`` gives a node its kernel, ``types`` the inferred types."""

    bind: Callable
    types: InferredTypes
    on_device: bool = False   # some nodes will run on a device provider (CUDA)


GraphPass = Callable[[Graph, PassContext], int]
"""A pass rewrites the graph in place and returns how many nodes it changed."""

# As onnxruntime: rewrites into standard ops are basic; fusions into contrib (com.microsoft)
# ops are extended. Conv+Add runs before Conv+activation, so Conv+Add+Relu ends in one node.
BASIC = [drop_redundant_clips, fold_constants, remove_dead_nodes, eliminate_identities, eliminate_casts,
         cancel_transposes, merge_reshapes, fold_batchnorm, fold_conv_affine, fuse_matmul_add, split_string_labels]
EXTENDED = BASIC + [fuse_qdq, fuse_dynamic_quant, fuse_gelu, fuse_layernorm, fuse_conv_add, fuse_conv_activation]

PASSES: dict[GraphOptimizationLevel, list[GraphPass]] = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: [],
    GraphOptimizationLevel.ORT_ENABLE_BASIC: BASIC,
    GraphOptimizationLevel.ORT_ENABLE_EXTENDED: EXTENDED,
    GraphOptimizationLevel.ORT_ENABLE_ALL: EXTENDED,
}


def passes_for(level: int) -> list[GraphPass]:
    """The passes of the highest level not above ``level``, in the order they run."""
    chosen = max((lvl for lvl in PASSES if lvl <= level),
                 default=GraphOptimizationLevel.ORT_DISABLE_ALL)
    return PASSES[chosen]


# Fusions into ops only the CPU provider runs: a session that puts nodes on CUDA keeps the
# unfused nodes, which the CUDA provider covers (onnxruntime, too, fuses per execution provider).
CPU_ONLY = (fuse_qdq, fuse_dynamic_quant, fuse_gelu, fuse_conv_add, fuse_conv_activation)


# Passes every level runs, first: without them a model would leave the native kernels. As
# onnxruntime's InsertCastTransformer, upcast_float16 is not an optimization but how float16
# nodes reach float32 kernels; a session with nodes on CUDA leaves float16 to that provider.
REQUIRED = [upcast_float16]


def run_passes(graph: Graph, level: int, context: PassContext) -> dict[str, int]:
    """Run the required passes, then those for ``level``, on ``graph`` in place; return nodes
    changed per pass."""
    chosen = [p for p in REQUIRED if not context.on_device]
    chosen += [p for p in passes_for(level) if not (context.on_device and p in CPU_ONLY)]
    return {graph_pass.__name__: graph_pass(graph, context) for graph_pass in chosen}


# Rewrites into opforge's own packed layouts run after the optimized model is saved (so a saved
# model stays one other runtimes load), at the extended level and up, for the CPU only.
LAYOUT = [pack_matmul_weights, pack_conv_weights, pack_rnn_weights]


def run_layout_passes(graph: Graph, level: int, context: PassContext) -> dict[str, int]:
    """Run the layout passes on ``graph`` in place where ``level`` asks for them; return nodes
    changed per pass."""
    if level < GraphOptimizationLevel.ORT_ENABLE_EXTENDED or context.on_device:
        return {}
    return {graph_pass.__name__: graph_pass(graph, context) for graph_pass in LAYOUT}
