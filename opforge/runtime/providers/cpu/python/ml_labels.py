"""Class labels of ai.onnx.ml classifiers: string labels, and ZipMap's maps from labels to scores.

A classifier with classlabels_strings (TreeEnsembleClassifier, LinearClassifier, SVMClassifier)
runs its native kernel with the labels 0..n-1, then maps each predicted index to its string, as
onnxruntime does: strings cannot cross the C ABI, the scores never need them.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from opforge.runtime.errors import KernelError, KernelNotFoundError
from opforge.runtime.providers.cpu.python.ml_encoders import ML, attr_array
from opforge.runtime.providers.registry import kernel

INT_LABELS = {"TreeEnsembleClassifier": "classlabels_int64s", "LinearClassifier": "classlabels_ints",
               "SVMClassifier": "classlabels_ints"}


class StringLabels:
    """A classifier node with classlabels_strings, on its native kernel bound to a copy of the
    node that has integer labels 0..n-1; output Y maps those back to the strings.

    Made by NativeFactory, which passes ``native`` (it binds a node to the op's native kernel);
    a node without string labels is declined, and goes to the native kernel itself."""

    provider = "CPUExecutionProvider"
    wraps_native = True

    def __init__(self, node, opset: int, native=None):
        labels = attr_array(node.attrs, "classlabels_strings")
        if labels is None or native is None:
            raise KernelNotFoundError(f"{node.label}: no string class labels to map, or no native kernel")
        self.node = node
        attrs = {k: v for k, v in node.attrs.items() if k != "classlabels_strings"}
        attrs[INT_LABELS[node.op_type]] = list(range(len(labels)))
        self.numeric = native(dataclasses.replace(node, attrs=attrs), opset)
        # onnxruntime writes '' for an index below 0, which a one-class ensemble can give
        self.labels = np.append(labels, "").astype(object)

    def run(self, inputs: list) -> list:
        outputs = self.numeric.run(inputs)
        outputs[0] = self.labels[outputs[0]]
        return outputs


for _op, _since in (("TreeEnsembleClassifier", 1), ("LinearClassifier", 1), ("SVMClassifier", 1)):
    kernel(_op, since=_since, domain=ML)(StringLabels)


@kernel("ZipMap", since=1, domain=ML)
class ZipMap:
    """Scores [N, C] (or [C]) -> a list of N dicts {class label: score}, keys in ascending order
    and a repeated label holding its last column's score, as onnxruntime's std::map gives them;
    scores as Python floats."""

    provider = "CPUExecutionProvider"

    def __init__(self, node, opset: int):
        self.node = node
        labels = attr_array(node.attrs, "classlabels_strings")
        if labels is None:
            labels = attr_array(node.attrs, "classlabels_int64s")
        if labels is None:
            raise KernelError(f"{node.label}: needs classlabels_strings or classlabels_int64s")
        self.classes = labels.size
        last = {label: column for column, label in enumerate(labels.tolist())}
        self.keys = sorted(last)
        self.columns = np.array([last[k] for k in self.keys], np.int64)
        if np.array_equal(self.columns, np.arange(self.classes)):
            self.columns = None   # labels sorted and distinct (skl2onnx's): the scores as they come
        # a compiled plan makes the maps of float32 scores in its core (Plan.add_core_step)
        self.core_step = ("zipmap", (list(self.keys), None if self.columns is None else self.columns.tolist()),
                          self.classes)

    def run(self, inputs: list) -> list:
        x = np.asarray(inputs[0])
        if x.ndim not in (1, 2) or x.dtype != np.float32:
            raise KernelError(f"{self.node.label}: input 'X' must be float [N, C] or [C], "
                              f"got {x.dtype}{list(x.shape)}")
        x = x.reshape(1, -1) if x.ndim == 1 else x
        if x.shape[1] != self.classes:
            raise KernelError(f"{self.node.label}: Input features_per_batch[{x.shape[1]}] != number of "
                              f"classlabels[{self.classes}]")
        keys = self.keys
        return [[dict(zip(keys, row)) for row in (x if self.columns is None else x[:, self.columns]).tolist()]]
