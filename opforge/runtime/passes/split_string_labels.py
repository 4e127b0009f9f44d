"""A classifier with string class labels becomes the classifier on labels 0..n-1 and a
CategoryMapper from those indices to the strings."""
from __future__ import annotations

import dataclasses
import itertools

import onnx

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import can_bind
from opforge.runtime.providers.cpu.python.ml_encoders import ML
from opforge.runtime.providers.cpu.python.ml_labels import INT_LABELS


def split_string_labels(graph: Graph, context) -> int:
    """Splits each TreeEnsembleClassifier, LinearClassifier and SVMClassifier with
    classlabels_strings into the same classifier with integer labels 0..n-1, which runs as a
    native step of the plan, and a CategoryMapper (cats_int64s 0..n-1 -> the strings, default
    '') for output Y. Without the split the node is one Python step that calls the native
    kernel through Python (8 us of a batch-1 pipeline's 29). onnxruntime writes '' for an index
    below 0, which a one-class ensemble can give; so does the mapper's default. Returns how
    many nodes were split."""
    taken = graph.defined_names() | graph.outer_names
    split = 0
    for node in list(graph.nodes):
        labels = node.attrs.get("classlabels_strings")
        if (node.domain != ML or node.op_type not in INT_LABELS or not labels or not node.outputs
                or not node.outputs[0]):
            continue
        index = _fresh(f"{node.outputs[0]}_index", taken)
        attrs = {k: v for k, v in node.attrs.items() if k != "classlabels_strings"}
        attrs[INT_LABELS[node.op_type]] = list(range(len(labels)))
        types = {k: v for k, v in node.attr_types.items() if k != "classlabels_strings"}
        types[INT_LABELS[node.op_type]] = onnx.AttributeProto.INTS
        numeric = dataclasses.replace(node, outputs=[index] + node.outputs[1:], attrs=attrs, attr_types=types)
        mapper = Node(f"{node.name}_labels" if node.name else "", "CategoryMapper", ML, [index], [node.outputs[0]],
                      {"cats_int64s": list(range(len(labels))), "cats_strings": list(labels), "default_string": b""},
                      attr_types={"cats_int64s": onnx.AttributeProto.INTS, "cats_strings": onnx.AttributeProto.STRINGS,
                                  "default_string": onnx.AttributeProto.STRING})
        if not (can_bind(context, numeric) and can_bind(context, mapper)):
            continue
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = [numeric, mapper]
        taken.add(index)
        split += 1
    return split


def _fresh(base: str, taken: set) -> str:
    return next(n for n in itertools.chain([base], (f"{base}_{i}" for i in itertools.count(1))) if n not in taken)
