"""The structural mutations tests/fuzzing.py applies: each edits a Mutant in place and says what
it did, or returns None when the model offers nothing to mutate that way."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

# Sizes whose element count overflows int64, whose byte count does, or that fit no memory.
HUGE_SHAPES = ([2**31, 2**31], [3037000500, 3037000500], [2**32, 2**32], [2**20, 2**20, 64],
               [2**62, 2], [-1, 4], [0, 2**62])
EDGE_INTS = (-1, -2, 2, 3, 2**40, -(2**40), 2**62, -(2**63), 2**63 - 1, 0, 17, 1000)
EDGE_FLOATS = (math.nan, math.inf, -math.inf, -1.0, 0.0, 1e30, 1e-30)
EDGE_STRINGS = (b"fuzz", b"", b"CONSTANT", b"\xff\xfe", b"nearest ", b"SAME_UPPER")
HIGH_RANKS = (0, 17, 20, 32)
FEED_DTYPES = (np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.int8, object)


class Mutant:
    """A model being mutated, its feeds, and the rng every choice comes from.

    ``runs``, when a mutation sets it, lists the feeds of each run; otherwise the case runs the
    completed feeds twice. ``touched`` collects the op types a mutation changed, for reports.
    """

    def __init__(self, model: onnx.ModelProto, feeds: dict, rng: np.random.Generator):
        self.model, self.feeds, self.rng = model, feeds, rng
        self.runs: list = []
        self.touched: set = set()

    def choice(self, items):
        """One of ``items`` (a sequence), or None when it is empty."""
        items = list(items)
        return items[int(self.rng.integers(len(items)))] if items else None

    def nodes(self) -> list:
        """Every node, those of subgraphs included."""
        found = []
        stack = [self.model.graph]
        while stack:
            graph = stack.pop()
            for node in graph.node:
                found.append(node)
                for attr in node.attribute:
                    stack.extend([attr.g] if attr.HasField("g") else list(attr.graphs))
        return found

    def node(self, where=lambda n: True):
        """A random node satisfying ``where``, noted as touched; None if there is none."""
        node = self.choice([n for n in self.nodes() if where(n)])
        if node is not None:
            self.touched.add(node.op_type)
        return node

    def values(self) -> list:
        """Names of the values of the main graph: inputs, initializers, node outputs."""
        graph = self.model.graph
        names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
        names += [o for n in graph.node for o in n.output if o]
        return list(dict.fromkeys(names))

    def fed_input(self):
        """A graph input that has a tensor feed, or None."""
        graph = self.model.graph
        return self.choice([v for v in graph.input
                            if isinstance(self.feeds.get(v.name), np.ndarray)])

    def initializer(self, where=lambda t: True):
        """A random initializer satisfying ``where``; when there is none, a fed input that
        would satisfy it becomes one (node tests feed what real models keep as weights)."""
        graph = self.model.graph
        found = self.choice([t for t in graph.initializer if where(t)])
        if found is not None:
            return found
        fed = [v for v in graph.input if isinstance(self.feeds.get(v.name), np.ndarray)
               and self.feeds[v.name].dtype != object]
        info = self.choice([v for v in fed if where(numpy_helper.from_array(self.feeds[v.name], v.name))])
        if info is None:
            return None
        graph.initializer.append(numpy_helper.from_array(self.feeds.pop(info.name), info.name))
        graph.input.remove(info)
        return graph.initializer[len(graph.initializer) - 1]

    def complete_feeds(self) -> dict:
        """Feeds for every graph input that is not an initializer: the given one where its
        name is fed, else random values of the declared type."""
        graph = self.model.graph
        constants = {t.name for t in graph.initializer}
        return {v.name: self.feeds[v.name] if v.name in self.feeds else random_value(v, self.rng)
                for v in graph.input if v.name not in constants or v.name in self.feeds}


def random_value(info: onnx.ValueInfoProto, rng: np.random.Generator):
    """A random value of ``info``'s declared type (float32 [2, 3] when it declares none)."""
    kind = info.type.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        inner = getattr(info.type, kind).elem_type
        value = random_value(onnx.ValueInfoProto(name=info.name, type=inner), rng)
        return [value, value] if kind == "sequence_type" else value
    tensor = info.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor.elem_type else np.float32
    shape = [2, 3]
    if tensor.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
    return random_array(shape, np.dtype(dtype), rng)


def random_array(shape, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Small random values of ``dtype`` (short strings for the object dtype)."""
    if dtype == object:
        return np.array(rng.choice(["a", "bc", ""], size=shape), dtype=object)
    if dtype == bool:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 3, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _label(node) -> str:
    return f"{node.op_type} {node.name or (node.output[0] if node.output else '?')!r}"


def drop_input(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0)
    if node is None:
        return None
    index = int(m.rng.integers(len(node.input))) if m.rng.random() < 0.3 else len(node.input) - 1
    del node.input[index]
    return f"{_label(node)}: input #{index} removed ({len(node.input)} left)"


def empty_input(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0)
    if node is None:
        return None
    index = int(m.rng.integers(len(node.input)))
    node.input[index] = ""
    return f"{_label(node)}: input #{index} is ''"


def extra_input(m: Mutant):
    node = m.node()
    if node is None:
        return None
    name = m.choice(list(node.input) + m.values()) or ""
    for _ in range(int(m.rng.integers(1, 3))):
        node.input.append(name if m.rng.random() < 0.8 else "")
    return f"{_label(node)}: inputs now {list(node.input)}"


def rename_value(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0 or len(n.output) > 0)
    if node is None:
        return None
    names = node.input if node.input and m.rng.random() < 0.5 else node.output
    index = int(m.rng.integers(len(names))) if len(names) else None
    if index is None:
        return None
    names[index] = m.choice(["fuzz_missing", names[index] + "_x", m.choice(m.values())])
    return f"{_label(node)}: a value renamed to {names[index]!r}"


def drop_output(m: Mutant):
    node = m.node(lambda n: len(n.output) > 0)
    if node is None:
        return None
    index = len(node.output) - 1 if m.rng.random() < 0.7 else 0
    del node.output[index]
    return f"{_label(node)}: output #{index} removed"


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
    return f"{_label(node)}: outputs now {list(node.output)}"


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


def _edge_attribute(attr: AttributeProto, m: Mutant) -> None:
    if attr.type == AttributeProto.INT:
        attr.i = m.choice(EDGE_INTS)
    elif attr.type == AttributeProto.FLOAT:
        attr.f = m.choice(EDGE_FLOATS)
    elif attr.type == AttributeProto.STRING:
        attr.s = m.choice(EDGE_STRINGS)
    elif attr.type == AttributeProto.INTS:
        values = list(attr.ints) or [0]
        form = int(m.rng.integers(4))
        if form == 0:
            values[int(m.rng.integers(len(values)))] = m.choice(EDGE_INTS)
        elif form == 1:
            values = values + [m.choice(EDGE_INTS)]
        elif form == 2:
            values = []
        else:
            values = [m.choice(EDGE_INTS)] * int(m.rng.integers(1, 20))
        attr.ClearField("ints")
        attr.ints.extend(values)
    elif attr.type == AttributeProto.FLOATS:
        values = list(attr.floats) or [0.0]
        values[int(m.rng.integers(len(values)))] = m.choice(EDGE_FLOATS)
        attr.ClearField("floats")
        attr.floats.extend(values if m.rng.random() < 0.7 else values[:-1])
    elif attr.type == AttributeProto.TENSOR:
        attr.t.CopyFrom(_bad_tensor(attr.t, m))
    elif attr.type == AttributeProto.STRINGS:
        attr.strings.append(m.choice(EDGE_STRINGS))


def attribute_value(m: Mutant):
    node = m.node(lambda n: any(a.type != AttributeProto.GRAPH for a in n.attribute) or _schema(n))
    if node is None:
        return None
    attr = m.choice([a for a in node.attribute if a.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS)])
    if attr is None or m.rng.random() < 0.3:
        attr = _unset_schema_attribute(node, m)
        if attr is None:
            return None
    _edge_attribute(attr, m)
    return f"{_label(node)}: {helper.printable_attribute(attr)[:120]}"


def _schema(node):
    try:
        return onnx.defs.get_schema(node.op_type, node.domain)
    except Exception:  # unknown op: no schema
        return None


def _unset_schema_attribute(node, m: Mutant):
    schema = _schema(node)
    if schema is None:
        return None
    given = {a.name for a in node.attribute}
    options = [a for name, a in schema.attributes.items() if name not in given
               and int(a.type) in (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                                   AttributeProto.INTS, AttributeProto.FLOATS)]
    spec = m.choice(options)
    if spec is None:
        return None
    attr = node.attribute.add()
    attr.name, attr.type = spec.name, int(spec.type)
    return attr


def attribute_kind(m: Mutant):
    node = m.node(lambda n: len(n.attribute) > 0)
    if node is None:
        return None
    form = int(m.rng.integers(3))
    if form == 0:   # the same name with another kind of value
        attr = m.choice(node.attribute)
        name = attr.name
        node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute(name, m.choice([1.5, 7, "x", [1, 2], [0.5]])))
        return f"{_label(node)}: attribute {name!r} of another kind"
    if form == 1:
        attr = m.choice(node.attribute)
        node.attribute.remove(attr)
        return f"{_label(node)}: attribute {attr.name!r} removed"
    node.attribute.append(helper.make_attribute("fuzz_unknown", 1))
    return f"{_label(node)}: unknown attribute added"


def _bad_tensor(tensor: TensorProto, m: Mutant) -> TensorProto:
    bad = TensorProto()
    bad.CopyFrom(tensor)
    form = int(m.rng.integers(5))
    if form == 0:
        bad.dims.append(int(m.rng.integers(2, 5)))            # more elements than the data
    elif form == 1:
        del bad.dims[:]
        bad.dims.extend([m.choice([-1, 2**40, 0])])
    elif form == 2:
        bad.data_type = m.choice([TensorProto.INT64, TensorProto.DOUBLE, TensorProto.BOOL,
                                  TensorProto.STRING, TensorProto.FLOAT16, 1000])
    elif form == 3 and bad.raw_data:
        bad.raw_data = bad.raw_data[: len(bad.raw_data) // 2 + 1]
    else:
        del bad.dims[:]                                         # a scalar holding many values
    return bad


def initializer(m: Mutant):
    tensor = m.initializer()
    if tensor is None:
        return None
    tensor.CopyFrom(_bad_tensor(tensor, m))
    return f"initializer {tensor.name!r}: dims {list(tensor.dims)}, type {tensor.data_type}"


def int_values(m: Mutant):
    """An int64 initializer (shape, axes, indices, pads...) given edge values."""
    tensor = m.initializer(lambda t: t.data_type in (TensorProto.INT64, TensorProto.INT32))
    if tensor is None:
        return None
    values = numpy_helper.to_array(tensor).copy()
    flat = values.reshape(-1)
    if flat.size:
        flat[int(m.rng.integers(flat.size))] = np.clip(m.choice(EDGE_INTS), np.iinfo(values.dtype).min,
                                                       np.iinfo(values.dtype).max)
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    return f"initializer {tensor.name!r} now {flat[:8].tolist()}"


def feed_rank(m: Mutant):
    info = m.fed_input()
    if info is None:
        return None
    rank = m.choice(HIGH_RANKS + (1, 2))
    value = m.feeds[info.name]
    shape = [1] * rank
    for axis in range(min(rank, value.ndim)):
        shape[rank - 1 - axis] = value.shape[value.ndim - 1 - axis]
    m.feeds[info.name] = np.resize(value, shape)
    if m.rng.random() < 0.9:
        info.type.tensor_type.ClearField("shape")
    return f"input {info.name!r} fed with rank {rank} {shape[:6]}"


def feed_dtype(m: Mutant):
    info = m.fed_input()
    if info is None:
        return None
    dtype = np.dtype(m.choice(FEED_DTYPES))
    value = m.feeds[info.name]
    try:
        with np.errstate(all="ignore"):
            m.feeds[info.name] = value.astype(str).astype(object) if dtype == object else value.astype(dtype)
    except (TypeError, ValueError):   # strings to numbers, float8 to strings...
        m.feeds[info.name] = random_array(value.shape, dtype, m.rng)
    if m.rng.random() < 0.9:
        info.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(dtype) if dtype != object \
            else TensorProto.STRING
    return f"input {info.name!r} fed as {dtype}"


def feed_values(m: Mutant):
    """Edge values (huge, negative, NaN, empty) in a feed; the first two runs keep the original
    values, so the edge values reach the compiled plan of the same signature."""
    info = m.fed_input()
    if info is None:
        return None
    value = m.feeds[info.name]
    edge = value.copy()
    flat = edge.reshape(-1)
    if flat.size and edge.dtype.kind in "iu":
        info_i = np.iinfo(edge.dtype)
        for _ in range(int(m.rng.integers(1, 3))):
            flat[int(m.rng.integers(flat.size))] = np.clip(m.choice(EDGE_INTS), info_i.min, info_i.max)
    elif flat.size and edge.dtype.kind == "f":
        flat[int(m.rng.integers(flat.size))] = m.choice(EDGE_FLOATS)
    elif edge.ndim:
        shape = list(edge.shape)
        shape[int(m.rng.integers(edge.ndim))] = 0
        edge = np.zeros(shape, edge.dtype)
        info.type.tensor_type.ClearField("shape")
    base = m.complete_feeds()
    m.runs = [base, base, {**base, info.name: edge}]
    return f"input {info.name!r} run 3 gets {flat[:6].tolist() if flat.size else list(edge.shape)}"


def huge_shape(m: Mutant):
    """A ConstantOfShape, Expand or Tile whose output no memory holds, its shape (or repeats)
    constant or fed (a small shape first, then the huge one, same signature)."""
    graph = m.model.graph
    op = m.choice(["ConstantOfShape", "Expand", "Tile"])
    dims = list(m.choice(HUGE_SHAPES))
    shape_name, out = "fuzz_shape", "fuzz_huge"
    inputs = [shape_name] if op == "ConstantOfShape" else ["fuzz_x", shape_name]
    if op != "ConstantOfShape":
        graph.initializer.append(numpy_helper.from_array(np.ones([1] * len(dims), np.float32), "fuzz_x"))
    graph.node.append(helper.make_node(op, inputs, [out]))
    graph.output.append(onnx.ValueInfoProto(name=out))
    m.touched.add(op)
    huge = np.array(dims, np.int64)
    if m.rng.random() < 0.5:
        graph.initializer.append(numpy_helper.from_array(huge, shape_name))
        return f"{op} to {dims} (constant)"
    graph.input.append(helper.make_tensor_value_info(shape_name, TensorProto.INT64, [len(dims)]))
    base = m.complete_feeds()
    small = {**base, shape_name: np.full(len(dims), 2, np.int64)}
    m.runs = [small, small, {**base, shape_name: huge}]
    return f"{op} to {dims} (fed after two small runs)"


def high_rank_node(m: Mutant):
    """A Reshape or Unsqueeze inside the graph that makes a value of rank > 16."""
    value = m.choice([v for v in m.values() if v])
    if value is None:
        return None
    rank = m.choice((17, 20, 24))
    graph = m.model.graph
    if m.rng.random() < 0.5:
        graph.initializer.append(numpy_helper.from_array(np.array([1] * (rank - 1) + [-1], np.int64), "fuzz_rank"))
        graph.node.append(helper.make_node("Reshape", [value, "fuzz_rank"], ["fuzz_high"]))
    else:
        graph.initializer.append(numpy_helper.from_array(np.arange(rank - 1, dtype=np.int64), "fuzz_rank"))
        graph.node.append(helper.make_node("Unsqueeze", [value, "fuzz_rank"], ["fuzz_high"]))
    graph.node.append(helper.make_node("Relu" if m.rng.random() < 0.5 else "Identity", ["fuzz_high"], ["fuzz_high_out"]))
    graph.output.append(onnx.ValueInfoProto(name="fuzz_high_out"))
    m.touched.update({"Reshape", "Unsqueeze"})
    return f"{value!r} reshaped to rank {rank}"


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
    return f"{_label(node)}: domain {node.domain!r}"


def cycle(m: Mutant):
    node = m.node(lambda n: len(n.input) > 0 and len(n.output) > 0 and n.output[0])
    if node is None:
        return None
    node.input[0] = node.output[0]
    return f"{_label(node)} reads its own output"


MUTATIONS = {f.__name__: f for f in (
    drop_input, empty_input, extra_input, rename_value, drop_output, extra_outputs, graph_names,
    attribute_value, attribute_kind, initializer, int_values, feed_rank, feed_dtype, feed_values,
    huge_shape, high_rank_node, opset_import, reorder, op_type, domain, cycle)}
"""Mutation name -> function(mutant) -> description or None."""
