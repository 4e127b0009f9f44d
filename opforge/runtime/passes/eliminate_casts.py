"""Cast elimination: casts that leave the value as it was are dropped."""
from __future__ import annotations

import numpy as np
import onnx

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, producer_map


def eliminate_casts(graph: Graph, context) -> int:
    """Drops each Cast to the type its input already has, and each round trip x:T -> Cast(U) ->
    Cast(T) through a type U that holds every value of T exactly (float32 -> float64, int32 ->
    int64, float16 -> float32 ...), whose middle value nothing else reads. The readers of the
    dropped cast's output read the original value instead. Returns how many casts went."""
    uses = Uses(graph)
    producers = producer_map(graph)
    removed = 0
    for node in list(graph.nodes):
        if not _is_cast(node) or not node.inputs or not node.inputs[0]:
            continue
        source = node.inputs[0]
        to = _target(node)
        first = producers.get(source)
        if _dtype(context, source) == to:
            original = source
        elif (_is_cast(first) and uses.only_reader(source) is node and first.inputs[0]
              and _dtype(context, first.inputs[0]) == to and _widens(to, _target(first))):
            original = first.inputs[0]
        else:
            continue
        if to is None or not uses.rename(node.outputs[0], original):
            continue
        uses.remove(node)
        removed += 1
        if first is not None and _is_cast(first) and original != source and uses.unread(source):
            uses.remove(first)
            removed += 1
    return removed


def _is_cast(node: Node | None) -> bool:
    return node is not None and node.op_type == "Cast" and node.domain == "" and len(node.outputs) == 1


def _target(node: Node) -> np.dtype | None:
    to = node.attrs.get("to")
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to)) if to else None
    except (KeyError, TypeError, ValueError):
        return None


def _dtype(context, name: str) -> np.dtype | None:
    known = context.types.get(name)
    return None if known is None else np.dtype(known.dtype)


def _widens(narrow: np.dtype | None, wide: np.dtype | None) -> bool:
    """Whether every value of ``narrow`` survives a trip through ``wide``."""
    if narrow is None or wide is None or narrow.kind not in "fiu" or wide.kind not in "fiu":
        return False
    if narrow.kind == "f":  # float8_e5m2 reads as kind "f" too; a saturating cast back clips its inf
        return (wide.kind == "f" and wide.itemsize >= narrow.itemsize and narrow.itemsize > 1
                and narrow.name != "bfloat16")
    if wide.kind == "f":
        return np.finfo(wide).nmant + 1 >= 8 * narrow.itemsize - (narrow.kind == "i")
    return np.can_cast(narrow, wide, casting="safe")
