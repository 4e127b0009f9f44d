"""Expanding a model's local functions (FunctionProto) into plain nodes at load time."""
from __future__ import annotations

import itertools

import onnx

from opforge.runtime.errors import ModelLoadError, node_label

FunctionKey = tuple  # (domain, name, overload)

# A function calling itself, directly or not, would expand forever.
_MAX_DEPTH = 64


def inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return ``model`` with every call to a model-local function replaced by its body.

    Calls inside function bodies and inside subgraphs are expanded too. Attribute references
    (``ref_attr_name``) take the caller's value, else the function's default, else are dropped;
    every value a body defines gets a fresh name so repeated calls do not collide. The
    function's opset imports are merged into the model's. Raises ModelLoadError on recursion.
    """
    if not model.functions:
        return model
    functions = {_key(f.domain, f.name, f.overload): f for f in model.functions}
    inliner = _Inliner(functions, _names_in_graph(model.graph))
    result = onnx.ModelProto()
    result.CopyFrom(model)
    inliner.expand_graph(result.graph)
    del result.functions[:]
    _merge_opsets(result, [f for f in model.functions if inliner.used(f)])
    return result


def _key(domain: str, name: str, overload: str = "") -> FunctionKey:
    return ("" if domain == "ai.onnx" else domain, name, overload)


class _Inliner:
    """Expands calls, keeping a counter so every instantiated name is unique in the model."""

    def __init__(self, functions: dict, taken: set[str]):
        self.functions = functions
        self.taken = taken
        self.counter = itertools.count()
        self.expanded: set[FunctionKey] = set()

    def used(self, function: onnx.FunctionProto) -> bool:
        """Whether ``function`` was expanded at least once."""
        return _key(function.domain, function.name, function.overload) in self.expanded

    def expand_graph(self, graph: onnx.GraphProto, depth: int = 0) -> None:
        """Replace the calls in ``graph`` (and in its subgraphs) by function bodies, in place."""
        nodes = self.expand_nodes(list(graph.node), depth)
        del graph.node[:]
        graph.node.extend(nodes)

    def expand_nodes(self, nodes: list[onnx.NodeProto], depth: int) -> list[onnx.NodeProto]:
        """``nodes`` with every call replaced by its expanded body."""
        result = []
        for node in nodes:
            for attr in node.attribute:
                for sub in _subgraphs(attr):
                    self.expand_graph(sub, depth)
            key = _key(node.domain, node.op_type, node.overload)
            if key in self.functions:
                result.extend(self.instantiate(self.functions[key], node, depth + 1))
            else:
                result.append(node)
        return result

    def instantiate(self, function: onnx.FunctionProto, call: onnx.NodeProto, depth: int):
        """The nodes of ``function``'s body for one ``call``: renamed, attributes bound."""
        if depth > _MAX_DEPTH:
            label = node_label(call.name, call.op_type, call.domain, call.output)
            raise ModelLoadError(f"local function {function.domain}::{function.name} calls itself "
                                 f"(expanding {label} went {_MAX_DEPTH} levels deep)")
        self.expanded.add(_key(function.domain, function.name, function.overload))
        renames = self.renaming(function, call)
        values = {a.name: a for a in function.attribute_proto}
        values.update({a.name: a for a in call.attribute})
        body = []
        for template in function.node:
            node = onnx.NodeProto()
            node.CopyFrom(template)
            node.name = f"{call.name or function.name}/{template.name or template.op_type}"
            _rename_node(node, renames)
            _bind_attributes(node, values)
            body.append(node)
        return self.expand_nodes(body, depth)

    def renaming(self, function: onnx.FunctionProto, call: onnx.NodeProto) -> dict[str, str]:
        """Formal inputs/outputs map to the call's actual names, every other name to a fresh one."""
        renames = {}
        for formal, actual in itertools.zip_longest(function.input, call.input):
            if formal:
                renames[formal] = actual or ""
        for formal, actual in itertools.zip_longest(function.output, call.output):
            if formal and actual:
                renames[formal] = actual
        for name in _names_in_function(function):
            if name and name not in renames:
                renames[name] = self.fresh(name)
        return renames

    def fresh(self, name: str) -> str:
        """A new name based on ``name`` that nothing in the model uses yet."""
        while True:
            candidate = f"{name}__{next(self.counter)}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate


def _subgraphs(attr: onnx.AttributeProto):
    if attr.HasField("g"):
        yield attr.g
    yield from attr.graphs


def _rename_node(node: onnx.NodeProto, renames: dict[str, str]) -> None:
    node.input[:] = [renames.get(n, n) for n in node.input]
    node.output[:] = [renames.get(n, n) for n in node.output]
    for attr in node.attribute:
        for sub in _subgraphs(attr):
            _rename_graph(sub, renames)


def _rename_graph(graph: onnx.GraphProto, renames: dict[str, str]) -> None:
    for info in itertools.chain(graph.input, graph.output, graph.value_info):
        info.name = renames.get(info.name, info.name)
    for tensor in graph.initializer:
        tensor.name = renames.get(tensor.name, tensor.name)
    for node in graph.node:
        _rename_node(node, renames)


def _bind_attributes(node: onnx.NodeProto, values: dict[str, onnx.AttributeProto]) -> None:
    """Replace attribute references by the caller's values (or drop them), in subgraphs too."""
    bound = []
    for attr in node.attribute:
        if attr.ref_attr_name:
            source = values.get(attr.ref_attr_name)
            if source is None:
                continue
            attr = _copy_attribute(source, attr.name)
        for sub in _subgraphs(attr):
            for inner in sub.node:
                _bind_attributes(inner, values)
        bound.append(attr)
    del node.attribute[:]
    node.attribute.extend(bound)


def _copy_attribute(source: onnx.AttributeProto, name: str) -> onnx.AttributeProto:
    attr = onnx.AttributeProto()
    attr.CopyFrom(source)
    attr.name = name
    return attr


def _names_in_graph(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in itertools.chain(graph.input, graph.output, graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in graph.node:
        names.update(_names_in_node(node))
    return names


def _names_in_node(node: onnx.NodeProto) -> set[str]:
    names = set(node.input) | set(node.output)
    for attr in node.attribute:
        for sub in _subgraphs(attr):
            names |= _names_in_graph(sub)
    return names


def _names_in_function(function: onnx.FunctionProto) -> list[str]:
    names: set[str] = set()
    for node in function.node:
        names |= _names_in_node(node)
    return sorted(names)


def _merge_opsets(model: onnx.ModelProto, functions: list[onnx.FunctionProto]) -> None:
    """Add the operator sets that inlined bodies use and the model does not yet import."""
    present = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    for function in functions:
        for entry in function.opset_import:
            domain = "" if entry.domain == "ai.onnx" else entry.domain
            if domain not in present:
                model.opset_import.append(onnx.helper.make_opsetid(domain, entry.version))
                present[domain] = entry.version
