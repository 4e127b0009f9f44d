"""Dead-node removal: drop nodes and initializers that no graph output depends on."""
from __future__ import annotations

from opforge.runtime.graph.graph import Graph, topological_order


def remove_dead_nodes(graph: Graph, context=None) -> int:
    """Remove the nodes none of whose outputs reach a graph output; return how many went.

    Initializers nothing reads any more go too, unless they are also graph inputs. Values that
    a node's subgraphs read from the outer scope count as read by that node.
    """
    live = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(topological_order(graph)):
        if any(name in live for name in node.outputs if name):
            kept.append(node)
            live.update(node.inputs)
            live.update(node.implicit_inputs)
    removed = len(graph.nodes) - len(kept)
    kept_set = set(map(id, kept))
    graph.nodes = [node for node in graph.nodes if id(node) in kept_set]
    inputs = {v.name for v in graph.inputs}
    for name in [n for n in graph.initializers if n not in live and n not in inputs]:
        del graph.initializers[name]
    return removed
