"""Graph passes, and the order they run in at each optimization level."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from opforge.runtime.graph import Graph
from opforge.runtime.options import GraphOptimizationLevel
from opforge.runtime.passes.constant_folding import fold_constants
from opforge.runtime.passes.dead_code import remove_dead_nodes
from opforge.runtime.shapes import InferredTypes


@dataclass
class PassContext:
    """What passes may use: ``bind`` gives a node its kernel, ``types`` the inferred types."""

    bind: Callable
    types: InferredTypes


GraphPass = Callable[[Graph, PassContext], int]
"""A pass rewrites the graph in place and returns how many nodes it changed."""

PASSES: dict[GraphOptimizationLevel, list[GraphPass]] = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: [],
    GraphOptimizationLevel.ORT_ENABLE_BASIC: [fold_constants, remove_dead_nodes],
    GraphOptimizationLevel.ORT_ENABLE_EXTENDED: [fold_constants, remove_dead_nodes],
    GraphOptimizationLevel.ORT_ENABLE_ALL: [fold_constants, remove_dead_nodes],
}


def passes_for(level: int) -> list[GraphPass]:
    """The passes of the highest level not above ``level``, in the order they run."""
    chosen = max((lvl for lvl in PASSES if lvl <= level),
                 default=GraphOptimizationLevel.ORT_DISABLE_ALL)
    return PASSES[chosen]


def run_passes(graph: Graph, level: int, context: PassContext) -> dict[str, int]:
    """Run the passes for ``level`` on ``graph`` in place; return nodes changed per pass."""
    return {graph_pass.__name__: graph_pass(graph, context) for graph_pass in passes_for(level)}
