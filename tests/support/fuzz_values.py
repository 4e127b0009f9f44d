"""Value mutations for the fuzz test: attribute values and kinds outside the spec, initializers of
the wrong size or type, edge int values, feeds of another rank or dtype or with edge values (the
first runs keep the original, so the edge values reach the compiled plan), sizes no memory holds,
values of rank > 16. Each edits a Mutant and says what it did, or None when it cannot apply."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from tests.support.fuzz_mutant import Mutant, label, random_array

# Sizes whose element count overflows int64, whose byte count does, or that fit no memory.
HUGE_SHAPES = ([2**31, 2**31], [3037000500, 3037000500], [2**32, 2**32], [2**20, 2**20, 64],
               [2**62, 2], [-1, 4], [0, 2**62])


EDGE_INTS = (-1, -2, 2, 3, 2**40, -(2**40), 2**62, -(2**63), 2**63 - 1, 0, 17, 1000)


EDGE_FLOATS = (math.nan, math.inf, -math.inf, -1.0, 0.0, 1e30, 1e-30)


EDGE_STRINGS = (b"fuzz", b"", b"CONSTANT", b"\xff\xfe", b"nearest ", b"SAME_UPPER")


HIGH_RANKS = (0, 17, 20, 32)


FEED_DTYPES = (np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.int8, object)


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
    return f"{label(node)}: {helper.printable_attribute(attr)[:120]}"


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
        return f"{label(node)}: attribute {name!r} of another kind"
    if form == 1:
        attr = m.choice(node.attribute)
        node.attribute.remove(attr)
        return f"{label(node)}: attribute {attr.name!r} removed"
    node.attribute.append(helper.make_attribute("fuzz_unknown", 1))
    return f"{label(node)}: unknown attribute added"


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


VALUES = {f.__name__: f for f in (
    attribute_value, attribute_kind, initializer, int_values, feed_rank, feed_dtype, feed_values,
    huge_shape, high_rank_node)}
"""Mutation name -> function(mutant) -> description or None."""
