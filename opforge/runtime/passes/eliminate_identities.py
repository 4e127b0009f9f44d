"""Identity elimination: Identity nodes, and Dropout where inference makes it one, are dropped."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, constant


def eliminate_identities(graph: Graph, context) -> int:
    """Drops each Identity, and each Dropout that passes its input through: no training_mode input
    or a constant false one, and a mask output nothing reads. Their readers read the input instead, as onnxruntime's EliminateIdentity
    and EliminateDropout do. A node whose output is a graph output, or is read by a subgraph,
    stays, unless its input's producer can write that output itself. Returns how many nodes went."""
    uses = Uses(graph)
    removed = 0
    for node in list(graph.nodes):
        if not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
            continue
        if not (_is_identity(node) or _is_inference_dropout(graph, node, uses)):
            continue
        if not (uses.rename(node.outputs[0], node.inputs[0]) or _write_through(graph, node, uses)):
            continue
        uses.remove(node)
        removed += 1
    return removed


def _write_through(graph: Graph, node: Node, uses: Uses) -> bool:
    """An identity whose output the graph (or a subgraph) needs, of a value only it reads:
    the value's producer writes the identity's output instead (skl2onnx ends a classifier's
    label in such an Identity, a Python step of its own when the labels are strings)."""
    value, output = node.inputs[0], node.outputs[0]
    if uses.only_reader(value) is not node:
        return False
    producer = next((n for n in graph.nodes if value in n.outputs), None)
    if producer is None or producer.subgraphs():
        return False
    producer.outputs = [output if name == value else name for name in producer.outputs]
    return True


def _is_identity(node: Node) -> bool:
    return node.op_type == "Identity" and node.domain == "" and len(node.outputs) == 1


def _is_inference_dropout(graph: Graph, node: Node, uses: Uses) -> bool:
    if node.op_type != "Dropout" or node.domain != "":
        return False
    if len(node.outputs) > 1 and node.outputs[1] and not uses.unread(node.outputs[1]):
        return False   # the mask is read
    if len(node.inputs) < 3 or not node.inputs[2]:
        return True    # training_mode (opset 12 on) defaults to false; opsets before 12 run
                       # Dropout as inference here (is_test of opsets 1-6 included, as the kernel)
    training = constant(graph, node.inputs[2])
    return training is not None and training.size == 1 and not bool(np.asarray(training).reshape(-1)[0])
