"""Structural mutations for the fuzz test: inputs and outputs dropped, added, renamed or left '',
graph names broken, opset imports removed or changed, nodes reordered, op types and domains
swapped, cycles. Each edits a Mutant and says what it did, or returns None when the model offers
nothing to mutate that way."""
from __future__ import annotations

import onnx

from tests.support.fuzz_mutant import Mutant, label


def drop_input(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0)
    if node is None:
        return None
    index = int(m.rng.integers(len(node.input))) if m.rng.random() < 0.3 else len(node.input) - 1
    del node.input[index]
    return f"{label(node)}: input #{index} removed ({len(node.input)} left)"


def empty_input(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0)
    if node is None:
        return None
    index = int(m.rng.integers(len(node.input)))
    node.input[index] = ""
    return f"{label(node)}: input #{index} is ''"


def extra_input(m: Mutant):
    node = m.node()
    if node is None:
        return None
    name = m.choice(list(node.input) + m.values()) or ""
    for _ in range(int(m.rng.integers(1, 3))):
        node.input.append(name if m.rng.random() < 0.8 else "")
    return f"{label(node)}: inputs now {list(node.input)}"


def rename_value(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0 or len(n.output) > 0)
    if node is None:
        return None
    names = node.input if node.input and m.rng.random() < 0.5 else node.output
    index = int(m.rng.integers(len(names))) if len(names) else None
    if index is None:
        return None
    names[index] = m.choice(["fuzz_missing", names[index] + "_x", m.choice(m.values())])
    return f"{label(node)}: a value renamed to {names[index]!r}"


def drop_output(m: Mutant):
    node = m.node(lambda n: len(n.output) > 0)
    if node is None:
        return None
    index = len(node.output) - 1 if m.rng.random() < 0.7 else 0
    del node.output[index]
    return f"{label(node)}: output #{index} removed"


def extra_outputs(m: Mutant):
    node = m.node(lambda n: len(n.output) > 0)
    if node is None:
        return None
    form = int(m.rng.integers(4))
    if form == 0:
        node.output.insert(0, "")                     # '' before the real output(s)
    elif form == 1:
        node.output.append("fuzz_extra")
        _expose(m, "fuzz_extra")
    elif form == 2:
        node.output[0] = ""
    else:
        node.output.append(node.output[0])            # the same value produced twice
    return f"{label(node)}: outputs now {list(node.output)}"


def _expose(m: Mutant, name: str) -> None:
    if m.rng.random() < 0.5:
        m.model.graph.output.append(onnx.ValueInfoProto(name=name))


def graph_names(m: Mutant):
    graph = m.model.graph
    values = list(graph.input) + list(graph.output)
    info = m.choice(values)
    if info is None:
        return None
    old = info.name
    info.name = m.choice(["", "fuzz_missing", old + " "])
    return f"graph value {old!r} renamed {info.name!r}"


def opset_import(m: Mutant):
    imports = m.model.opset_import
    if not imports:
        return None
    form = int(m.rng.integers(3))
    entry = m.choice(imports)
    if form == 0:
        imports.remove(entry)
        return f"opset import {entry.domain!r} removed"
    entry.version = m.choice([1, 6, onnx.defs.onnx_opset_version() + 1, 0, -1, 10**6])
    return f"opset import {entry.domain!r} set to {entry.version}"


def reorder(m: Mutant):
    nodes = list(m.model.graph.node)
    if len(nodes) < 2:
        return None
    order = m.rng.permutation(len(nodes)) if m.rng.random() < 0.7 else range(len(nodes) - 1, -1, -1)
    del m.model.graph.node[:]
    m.model.graph.node.extend(nodes[int(i)] for i in order)
    return "nodes reordered"


def op_type(m: Mutant):
    """A node becomes another op of the default domain, keeping its inputs and attributes."""
    node = m.node(lambda n: n.domain in ("", "ai.onnx"))
    if node is None:
        return None
    ops = ("Add", "Relu", "Squeeze", "Unsqueeze", "Split", "Slice", "Pad", "Concat", "Gather",
           "ReduceSum", "ReduceMean", "ArgMax", "TopK", "Softmax", "Transpose", "Reshape", "Expand",
           "Tile", "ConstantOfShape", "Range", "Flatten", "Conv", "MaxPool", "Gemm", "MatMul", "Cast",
           "Where", "Xor", "Sum", "Max", "LayerNormalization", "CumSum", "OneHot", "Resize")
    old = node.op_type
    node.op_type = m.choice(ops)
    m.touched.add(node.op_type)
    return f"{old} {node.name!r} became {node.op_type}"


def domain(m: Mutant):
    node = m.node()
    if node is None:
        return None
    node.domain = m.choice(["ai.onnx.ml", "com.fuzz", "ai.onnx.preview.training", "com.microsoft"])
    return f"{label(node)}: domain {node.domain!r}"


def cycle(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0 and len(n.output) > 0 and n.output[0])
    if node is None:
        return None
    node.input[0] = node.output[0]
    return f"{label(node)} reads its own output"


STRUCTURE = {f.__name__: f for f in (
    drop_input, empty_input, extra_input, rename_value, drop_output, extra_outputs, graph_names,
    opset_import, reorder, op_type, domain, cycle)}
"""Mutation name -> function(mutant) -> description or None."""
