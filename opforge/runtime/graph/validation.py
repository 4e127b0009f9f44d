"""Checks every node of a model against its op's ONNX schema when a session is created.

Input and output counts, required inputs and outputs given as '', unknown attributes, attributes
of the wrong kind or missing, and attribute values the spec does not allow (flags other than 0
or 1, unknown mode strings, sizes that must be positive). Done once, before shape inference
(onnx's own inference crashes on some nodes this refuses) and before kernels are bound, so no
kernel ever sees a node its op cannot take. Nodes of custom domains are checked against their
kernel's schema when bound (providers/native.py).
"""
from __future__ import annotations

import functools

import onnx
from onnx.defs import OpSchema

from opforge.runtime.errors import GraphError
from opforge.runtime.graph.domains import is_standard_domain
from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.graph.types import MAX_RANK, is_elem_type

_SINGLE = OpSchema.FormalParameterOption.Single
_VARIADIC = OpSchema.FormalParameterOption.Variadic

# Int attributes that are flags wherever the standard ops use them: 0 or 1.
FLAGS = frozenset((
    "keepdims", "noop_with_empty_axes", "transA", "transB", "ceil_mode", "count_include_pad",
    "select_last_index", "largest", "sorted", "exclusive", "reverse", "detect_negative",
    "detect_positive", "center_point_box", "training_mode", "allowzero", "saturate", "fmod",
    "upper", "linear_before_reset", "input_forget", "storage_order", "exclude_outside",
    "align_corners", "new_axis", "is_causal", "layout", "time_axis", "batch_axis"))

# String attributes with a fixed set of values: (op type or None for any op, name) -> values.
CHOICES = {
    (None, "auto_pad"): ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
    ("Pad", "mode"): ("constant", "reflect", "edge", "wrap"),
    ("Resize", "mode"): ("nearest", "linear", "cubic"),
    ("Upsample", "mode"): ("nearest", "linear", "bilinear"),
    ("Resize", "nearest_mode"): ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    ("Resize", "keep_aspect_ratio_policy"): ("stretch", "not_larger", "not_smaller"),
    ("Resize", "coordinate_transformation_mode"): (
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
        "tf_half_pixel_for_nn", "tf_crop_and_resize"),
    ("DepthToSpace", "mode"): ("DCR", "CRD"),
    ("GridSample", "mode"): ("bilinear", "nearest", "bicubic", "linear", "cubic"),
    ("GridSample", "padding_mode"): ("zeros", "border", "reflection"),
    ("ScatterElements", "reduction"): ("none", "add", "mul", "max", "min"),
    ("ScatterND", "reduction"): ("none", "add", "mul", "max", "min"),
    ("SoftmaxCrossEntropyLoss", "reduction"): ("none", "sum", "mean"),
    ("NegativeLogLikelihoodLoss", "reduction"): ("none", "sum", "mean"),
    ("RNN", "direction"): ("forward", "reverse", "bidirectional"),
    ("GRU", "direction"): ("forward", "reverse", "bidirectional"),
    ("LSTM", "direction"): ("forward", "reverse", "bidirectional"),
    ("RoiAlign", "mode"): ("avg", "max"),
    ("RoiAlign", "coordinate_transformation_mode"): ("half_pixel", "output_half_pixel"),
    ("Gelu", "approximate"): ("none", "tanh"),
    ("StringNormalizer", "case_change_action"): ("LOWER", "UPPER", "NONE"),
}

# Int attributes (or every element of an ints attribute) that must be positive, or >= 0.
POSITIVE = frozenset(("size", "blocksize", "group", "kernel_shape", "strides", "dilations",
                      "num_outputs", "hidden_size", "min_gram_length", "max_gram_length"))
NON_NEGATIVE = {("Conv", "pads"), ("ConvTranspose", "pads"), ("MaxPool", "pads"),
                ("AveragePool", "pads"), ("LpPool", "pads"), ("ConvTranspose", "output_padding"),
                ("TfIdfVectorizer", "max_skip_count")}

# Int attributes that name an element type (TensorProto.DataType); those of the second set may
# also be 0, "take it from an input".
ELEM_TYPES = frozenset(("to", "dtype", "stash_type"))
ELEM_TYPES_OR_0 = frozenset(("output_dtype", "precision"))

# Attributes naming axes, and the values any tensor opforge runs (at most MAX_RANK dimensions)
# allows; onnx's shape inference crashes on some values far outside (LayerNormalization's
# axis = 2**63 - 1), so they are refused before it runs.
AXES = {"axis": (-MAX_RANK, MAX_RANK), "axes": (-MAX_RANK, MAX_RANK), "perm": (0, MAX_RANK - 1),
        "batch_dims": (0, MAX_RANK)}


def check_graph(graph: Graph, opsets: dict[str, int], skip=frozenset()) -> None:
    """Check every node of ``graph`` and its subgraphs; raise GraphError naming the first node
    at fault, its op type and the input, output or attribute. ``skip``: (domain, op type) pairs
    served by custom ops, which are checked against their own schema instead."""
    for node in graph.nodes:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain in opsets and is_standard_domain(domain) and (domain, node.op_type) not in skip:
            schema = _schema(node.op_type, opsets[domain], domain)
            if schema is not None:
                check_node(node, schema, opsets[domain])
        for sub in node.subgraphs():
            check_graph(sub, opsets, skip)


@functools.lru_cache(maxsize=None)
def _schema(op_type: str, version: int, domain: str) -> OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:  # no such op at this opset: binding reports it
        return None


def check_node(node: Node, schema: OpSchema, opset: int) -> None:
    """Check one node against its op's schema; raise GraphError naming what is wrong."""
    where = f"{node.label} at opset {opset}"
    _check_values(where, node.inputs, schema.inputs, schema.min_input, schema.max_input, "input")
    _check_values(where, node.outputs, schema.outputs, schema.min_output, schema.max_output, "output")
    _check_attributes(node, schema, where)
    count = node.attrs.get("num_outputs")
    if node.op_type == "Split" and count is not None and count != len(node.outputs):
        raise GraphError(f"{where}: attribute 'num_outputs' = {count} but the node has "
                         f"{_count(len(node.outputs), 'output')}")


def _check_values(where: str, names: list, params, least: int, most: int, kind: str) -> None:
    if not least <= len(names) <= most:
        expect = str(least) if least == most else f"{least} to {most}" if most < 2**31 - 1 \
            else f"at least {least}"
        declared = ", ".join(repr(p.name) for p in params)
        raise GraphError(f"{where} has {_count(len(names), kind)}; the op takes {expect} "
                         f"({declared})")
    for index, name in enumerate(names):
        param = params[min(index, len(params) - 1)]
        if not name and param.option in (_SINGLE, _VARIADIC):
            raise GraphError(f"{where}: {kind} #{index} ({param.name!r}) is required but its "
                             "name is '' (only optional values may be left out)")


def _check_attributes(node: Node, schema: OpSchema, where: str) -> None:
    declared = schema.attributes
    for name, value in node.attrs.items():
        spec = declared.get(name)
        if spec is None:
            known = ", ".join(sorted(declared)) or "none"
            raise GraphError(f"{where} has attribute {name!r}, which the op does not take "
                             f"(its attributes: {known})")
        given = node.attr_types.get(name)
        if given is not None and given != int(spec.type):
            raise GraphError(f"{where}: attribute {name!r} is "
                             f"{onnx.AttributeProto.AttributeType.Name(given)}; the op takes "
                             f"{onnx.AttributeProto.AttributeType.Name(int(spec.type))}")
        problem = attribute_value_problem(node.op_type, name, value)
        if problem:
            raise GraphError(f"{where}: attribute {name!r} = {_show(value)} {problem}")
    for name, spec in declared.items():
        if spec.required and name not in node.attrs:
            raise GraphError(f"{where} lacks attribute {name!r}, which the op requires")


def attribute_value_problem(op_type: str, name: str, value) -> str | None:
    """Why ``value`` is not allowed for attribute ``name`` of ``op_type`` (None if it is)."""
    if name in FLAGS and isinstance(value, int) and value not in (0, 1):
        return "must be 0 or 1"
    if isinstance(value, int) and (name in ELEM_TYPES or name in ELEM_TYPES_OR_0 and value != 0) \
            and not is_elem_type(value):
        return "is not an element type ONNX defines"
    choices = CHOICES.get((op_type, name)) or CHOICES.get((None, name))
    if choices is not None and isinstance(value, bytes):
        if value.decode(errors="replace") not in choices:
            return f"is not one of {', '.join(choices)}"
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) for v in values):
        return None
    low, high = AXES.get(name, (None, None))
    if low is not None and any(not low <= v <= high for v in values):
        return f"is outside [{low}, {high}], the axes of any tensor opforge runs"
    if name in POSITIVE and any(v <= 0 for v in values):
        return "must be positive"
    if (op_type, name) in NON_NEGATIVE and any(v < 0 for v in values):
        return "must not be negative"
    return None


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _show(value) -> str:
    text = repr(value.decode(errors="replace")) if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
