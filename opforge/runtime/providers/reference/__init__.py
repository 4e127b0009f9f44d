"""The last-resort provider: any node onnx.reference implements, run one node at a time."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from opforge.errors import OpError, OpMemoryError
from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.graph.graph import Node
from opforge.runtime.graph.types import value_type_string
from opforge.runtime.providers.registry import ANY_OP, REFERENCE, KernelRegistry, default_registry

# The domains whose operators onnx.reference implements.
DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")

# Ops that onnx.reference dropped, run as the op that replaced them: (op type, opset).
_REPLACED_BY = {("", "Scatter"): ("ScatterElements", 11)}

# Before opset 13 these flattened their input to 2-D at ``axis`` (default 1); onnx.reference
# implements only the opset-13 form (one axis, default -1) whatever the model's opset.
_FLATTENING_OPS = ("Softmax", "LogSoftmax", "Hardmax")


def _topk_k(node: Node, inputs: list) -> str | None:
    k = inputs[1] if len(inputs) > 1 else node.attrs.get("k")
    if k is not None and np.size(k) == 1 and int(np.asarray(k).reshape(-1)[0]) < 0:
        return f"k = {int(np.asarray(k).reshape(-1)[0])} is negative"
    return None


def _gather_elements_indices(node: Node, inputs: list) -> str | None:
    data, indices = inputs[0], inputs[1]
    if not isinstance(data, np.ndarray) or not isinstance(indices, np.ndarray) or not data.ndim \
            or not indices.size:
        return None
    axis = int(node.attrs.get("axis", 0))
    if not -data.ndim <= axis < data.ndim:
        return None   # onnx.reference refuses this itself
    size = data.shape[axis]
    if indices.min() < -size or indices.max() >= size:
        return f"an index of input 'indices' is outside [-{size}, {size - 1}] (axis {axis})"
    return None


def _tree_cycle(node: Node, inputs: list) -> str | None:
    """A branch that leads back to itself: onnx.reference's walk of such a tree never ends
    (onnxruntime refuses it)."""
    attrs = node.attrs
    true_ids, false_ids = list(attrs.get("nodes_truenodeids", [])), list(attrs.get("nodes_falsenodeids", []))
    if node.op_type == "TreeEnsemble":   # nodes by position; a child flagged in *_leafs is a leaf
        leafs = [list(attrs.get(f"nodes_{side}leafs", [])) for side in ("true", "false")]
        edges = {i: [ids[i] for ids, leaf in zip((true_ids, false_ids), leafs)
                     if i < len(ids) and not (i < len(leaf) and leaf[i])] for i in range(len(true_ids))}
        start = _first_cycle(edges)
        return None if start is None else f"node {start} of the ensemble leads back to itself"
    keys = list(zip(attrs.get("nodes_treeids", []), attrs.get("nodes_nodeids", [])))
    modes = [m.decode() if isinstance(m, bytes) else m for m in attrs.get("nodes_modes", [])]
    edges = {key: [(key[0], child[i]) for child in (true_ids, false_ids) if i < len(child)]
             for i, key in enumerate(keys) if i < len(modes) and modes[i] != "LEAF"}
    start = _first_cycle(edges)
    return None if start is None else f"node {start[1]} of tree {start[0]} leads back to itself"


def _first_cycle(edges: dict):
    """A node on a cycle of ``edges`` ({node: [child]}), or None when there is none."""
    state: dict = {}   # 1: on the current path, 2: done
    for start in edges:
        if state.get(start):
            continue
        stack = [(start, iter(edges[start]))]
        state[start] = 1
        while stack:
            here, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[here] = 2
                stack.pop()
            elif state.get(child) == 1:
                return child
            elif child in edges and not state.get(child):
                state[child] = 1
                stack.append((child, iter(edges[child])))
    return None


def _roi_align_samples(node: Node, inputs: list) -> str | None:
    """More samples per roi than the native kernel takes (2^24): onnx.reference's Python loops
    would run for hours (sampling_ratio = 2^40 never ends)."""
    ratio = int(node.attrs.get("sampling_ratio", 0))
    bins = int(node.attrs.get("output_height", 1)) * int(node.attrs.get("output_width", 1))
    if ratio > 0 and ratio * ratio * max(bins, 1) > 1 << 24:
        return f"sampling_ratio = {ratio} asks for {ratio}x{ratio} samples in each of {bins} bins, more than 2^24 per roi"
    return None


# Input values or attributes onnx.reference accepts, or takes unbounded time on, that the spec
# (and onnxruntime) refuse: (domain, op type) -> check giving the problem, or None.
_VALUE_CHECKS = {("", "TopK"): _topk_k, ("", "GatherElements"): _gather_elements_indices,
                 ("", "RoiAlign"): _roi_align_samples,
                 **{("ai.onnx.ml", op): _tree_cycle
                    for op in ("TreeEnsemble", "TreeEnsembleClassifier", "TreeEnsembleRegressor")}}


class InputTypes:
    """The types an ONNX op's inputs take, from its schema's type constraints: checked before
    onnx.reference sees a call, so a value of a type the op does not take (a string tensor, a
    sequence where a tensor belongs) is refused by name instead of failing inside it."""

    def __init__(self, node: Node, op_type: str, opset: int):
        self.label = node.label
        try:
            schema = onnx.defs.get_schema(op_type, opset, node.domain)
        except Exception:   # no schema (a domain onnx does not define): nothing to check
            self.params = []
            return
        allowed = {tc.type_param_str: set(tc.allowed_type_strs) for tc in schema.type_constraints}
        self.params = [(p.name, allowed.get(p.type_str, {p.type_str}),
                        p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic)
                       for p in schema.inputs]

    def check(self, inputs: list) -> None:
        """Raises OpError naming the first input whose type the op does not take."""
        if not self.params:
            return
        for index, value in enumerate(inputs):
            if index >= len(self.params) and not self.params[-1][2]:
                return
            name, allowed, _ = self.params[min(index, len(self.params) - 1)]
            if value is None or not allowed:
                continue
            kind = value_type_string(value)
            if kind in allowed or kind.endswith("(unknown)") or any(a.startswith("optional(") and kind in a
                                                                    for a in allowed):
                continue
            raise OpError(f"{self.label}: input #{index} '{name}' is {kind}; the op takes "
                          f"{', '.join(sorted(allowed))}")


class ReferenceKernel:
    """Runs one node through an onnx.reference evaluator built once, when the node is bound.

    The node becomes the body of a one-node FunctionProto whose inputs are the node's inputs
    followed by its implicit (outer-scope) inputs, so subgraphs that read enclosing values work.
    Inputs of types the op's schema does not take are refused before the evaluator sees them;
    what onnx.reference itself raises on inputs it cannot run is reported as an OpError naming
    the node (it is the last-resort implementation, not opforge's own code).
    """

    provider = REFERENCE

    def __init__(self, node: Node, opset: int):
        self.node = node
        self._output_names = [name for name in node.outputs if name]
        self._input_names = list(dict.fromkeys(n for n in node.inputs + node.implicit_inputs if n))
        self._positions = self._input_positions(node)
        proto = node.to_proto()
        op_type, opset = _REPLACED_BY.get((node.domain, node.op_type), (node.op_type, opset))
        proto.op_type = op_type
        self._types = InputTypes(node, op_type, opset)
        function = onnx.helper.make_function(
            "opforge.reference", f"node_{node.op_type}", self._input_names, self._output_names,
            [proto], _opset_imports(node, opset))
        # Untyped entries make onnx.reference expand context-dependent functions (Gelu,
        # GroupNormalization...) from the actual inputs at run time instead of refusing.
        function.value_info.extend(onnx.ValueInfoProto(name=name) for name in self._output_names)
        try:
            self._evaluator = ReferenceEvaluator(function)
        except Exception as exc:  # onnx.reference reports a missing op in several ways
            raise KernelNotFoundError(
                f"onnx.reference has no implementation for {node.label} at opset {opset}: "
                f"{type(exc).__name__}: {exc}") from exc

    def _input_positions(self, node: Node) -> list[int]:
        """For each evaluator input, its position in the ``run`` input list."""
        first: dict[str, int] = {}
        for position, name in enumerate(node.inputs + node.implicit_inputs):
            first.setdefault(name, position)
        return [first[name] for name in self._input_names]

    def run(self, inputs: list) -> list:
        """Evaluate the node; returns one value per node output ("" outputs get None)."""
        self._types.check(inputs)   # first: the value checks below assume the types the op takes
        check = _VALUE_CHECKS.get((self.node.domain, self.node.op_type))
        problem = check(self.node, inputs) if check is not None else None
        if problem:
            raise ValueError(f"{self.node.op_type}: {problem}")
        feeds = {name: inputs[p] for name, p in zip(self._input_names, self._positions)}
        try:
            results = self._evaluator.run(None, feeds, attributes={})
        except MemoryError:
            raise OpMemoryError(f"{self.node.label}: its outputs for these inputs do not fit in memory") from None
        except Exception as exc:   # onnx.reference's own refusals of values it cannot run
            if "too big" in str(exc):
                raise OpMemoryError(f"{self.node.label}: {exc}") from None
            raise OpError(f"{self.node.label}: the reference implementation (onnx.reference) cannot "
                          f"run these inputs: {type(exc).__name__}: {exc}") from None
        by_name = dict(zip(self._output_names, results))
        return [by_name.get(name) if name else None for name in self.node.outputs]


class FlatteningKernel:
    """Softmax, LogSoftmax or Hardmax before opset 13: run on the input flattened to 2-D."""

    provider = REFERENCE

    def __init__(self, node: Node, opset: int):
        self.node = node
        self.axis = int(node.attrs.get("axis", 1))
        attr_types = {**node.attr_types, "axis": onnx.AttributeProto.INT}
        inner = dataclasses.replace(node, attrs={**node.attrs, "axis": -1}, attr_types=attr_types)
        self._inner = ReferenceKernel(inner, 13)

    def run(self, inputs: list) -> list:
        """Flatten to 2-D at the axis, apply the op on the last axis, restore the shape."""
        x = inputs[0]
        axis = self.axis % max(x.ndim, 1)
        rows, cols = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
        result = self._inner.run([x.reshape(rows, cols)])[0]
        return [result.reshape(x.shape)]


class TfIdfKernel:
    """TfIdfVectorizer with max_skip_count cut to the length of the input's rows.

    onnx.reference tries every skip distance up to max_skip_count + 1, so a model saying 2**62
    never finishes. A distance as long as a row gathers no n-gram of two or more items, and
    unigrams are counted at distance 1 only, so the cut leaves every count as it was.
    """

    provider = REFERENCE

    def __init__(self, node: Node, opset: int):
        self.node, self.opset = node, opset
        self.max_skip = int(node.attrs.get("max_skip_count", 0))
        self._inner = ReferenceKernel(node, opset)
        self._cut: dict[int, ReferenceKernel] = {}   # by the cut value: one per row length seen

    def run(self, inputs: list) -> list:
        """Evaluate with max_skip_count at most the row length (the input's last dimension)."""
        x = inputs[0]
        row = int(x.shape[-1]) if isinstance(x, np.ndarray) and x.ndim else 0
        if self.max_skip <= row:
            return self._inner.run(inputs)
        kernel = self._cut.get(row)
        if kernel is None:
            attrs = {**self.node.attrs, "max_skip_count": row}
            attr_types = {**self.node.attr_types, "max_skip_count": onnx.AttributeProto.INT}
            kernel = ReferenceKernel(dataclasses.replace(self.node, attrs=attrs, attr_types=attr_types),
                                     self.opset)
            self._cut.setdefault(row, kernel)
        return kernel.run(inputs)


def reference_kernel(node: Node, opset: int):
    """The reference provider's factory: a ReferenceKernel, adapted where onnx.reference errs."""
    if node.domain == "" and node.op_type in _FLATTENING_OPS and opset < 13:
        return FlatteningKernel(node, opset)
    if node.domain == "" and node.op_type == "TfIdfVectorizer":
        return TfIdfKernel(node, opset)
    return ReferenceKernel(node, opset)


def _opset_imports(node: Node, opset: int) -> list[onnx.OperatorSetIdProto]:
    """The node's domain at ``opset``; other domains its subgraphs use at their newest version."""
    versions = {node.domain: opset}
    for domain in _subgraph_domains(node):
        versions.setdefault(domain, _newest_version(domain))
    return [onnx.helper.make_opsetid(d, v) for d, v in versions.items()]


def _subgraph_domains(node: Node) -> set[str]:
    domains: set[str] = set()
    for graph in node.subgraphs():
        for inner in graph.nodes:
            domains.add(inner.domain)
            domains |= _subgraph_domains(inner)
    return domains


def _newest_version(domain: str) -> int:
    if domain == "":
        return onnx.defs.onnx_opset_version()
    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.domain == domain]
    return max(versions, default=1)


def register(registry: KernelRegistry = default_registry) -> None:
    """Make ``reference_kernel`` the reference provider's factory for every op of ``DOMAINS``."""
    for domain in DOMAINS:
        registry.register(domain, ANY_OP, 1, REFERENCE, reference_kernel)


register()
