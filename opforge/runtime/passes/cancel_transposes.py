"""Transpose cancellation: back-to-back Transposes merge into one, or vanish when they undo
each other; a Transpose that keeps every axis in place goes."""
from __future__ import annotations

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, producer_map


def cancel_transposes(graph: Graph, context) -> int:
    """For each Transpose reading another Transpose (both with explicit perms): the pair becomes
    one Transpose of the composed permutation, or nothing when that is the identity; the first
    goes too once nothing else reads it. Returns how many Transposes were removed."""
    uses = Uses(graph)
    producers = producer_map(graph)
    removed = 0
    for node in list(graph.nodes):
        perm = _perm(node)
        if perm is None:
            continue
        first = producers.get(node.inputs[0])
        inner = _perm(first)
        if inner is not None and len(inner) == len(perm):
            composed = [inner[axis] for axis in perm]
            source = first.inputs[0]
        elif perm == sorted(perm):
            composed, source, first = perm, node.inputs[0], None
        else:
            continue
        if composed == list(range(len(composed))):
            if not uses.rename(node.outputs[0], source):
                continue
            uses.remove(node)
            removed += 1
        else:
            merged = Node(node.name, "Transpose", "", [source], list(node.outputs), {"perm": composed},
                          attr_types=dict(node.attr_types))
            uses.replace([node], merged)
            producers[node.outputs[0]] = merged
        if first is not None and uses.unread(first.outputs[0]):
            uses.remove(first)
            removed += 1
    return removed


def _perm(node: Node | None) -> list | None:
    if node is None or node.op_type != "Transpose" or node.domain != "" or "perm" not in node.attrs:
        return None
    return [int(p) for p in node.attrs["perm"]]
