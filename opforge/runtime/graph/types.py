"""ONNX value types as the runtime sees them: numpy dtype, shape, and onnxruntime's type strings."""
from __future__ import annotations

from typing import NamedTuple, Union

import numpy as np
import onnx

Dim = Union[int, str, None]
"""A dimension: a fixed size, a symbolic name, or None when nothing is known."""

MAX_RANK = 16
"""The most dimensions a tensor may have anywhere in a session: feeds, inferred types, every
kernel's results (the C ABI's OPF_MAX_DIMS, which every native kernel and compiled plan uses)."""


class TensorType(NamedTuple):
    """A tensor's element type and shape; ``shape`` is None when even the rank is unknown."""

    dtype: np.dtype
    shape: tuple[Dim, ...] | None


_ELEM_TYPES = frozenset(onnx.helper.get_all_tensor_dtypes())


def is_elem_type(elem_type: int) -> bool:
    """Whether ``elem_type`` is an element type ONNX defines (UNDEFINED is not)."""
    return elem_type in _ELEM_TYPES


def elem_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype for a TensorProto element type (strings are ``object``)."""
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def elem_name(elem_type: int) -> str:
    """onnxruntime's name of an element type: FLOAT -> 'float', BFLOAT16 -> 'bfloat16'."""
    if not is_elem_type(elem_type):
        return f"unknown element type {elem_type}"
    return onnx.TensorProto.DataType.Name(elem_type).lower()


def dtype_elem(dtype: np.dtype) -> int:
    """The TensorProto element type of a numpy dtype; unicode and bytes strings read as STRING."""
    dtype = np.dtype(dtype)
    if dtype.kind in "USO":
        return onnx.TensorProto.STRING
    return onnx.helper.np_dtype_to_tensor_dtype(dtype)


def dims_of(shape: onnx.TensorShapeProto) -> tuple[Dim, ...]:
    """A TensorShapeProto's dims as ints, symbolic names, or None. A negative dim_value (some
    exporters, PaddlePaddle's among them, write -1 for "any size") is unknown, as None."""
    dims: list[Dim] = []
    for dim in shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value if dim.dim_value >= 0 else None)
        else:
            dims.append(dim.dim_param or None)
    return tuple(dims)


def kind_of(type_proto: onnx.TypeProto | None) -> str | None:
    """'tensor', 'sequence', 'optional', 'map' or 'sparse_tensor'; None if not set."""
    if type_proto is None:
        return None
    kind = type_proto.WhichOneof("value")
    return {"tensor_type": "tensor", "sequence_type": "sequence", "optional_type": "optional",
            "map_type": "map", "sparse_tensor_type": "sparse_tensor"}.get(kind)


def tensor_type(type_proto: onnx.TypeProto | None) -> TensorType | None:
    """The dtype and shape of a tensor TypeProto, or None for another kind or an unset (or
    unknown) element type."""
    if kind_of(type_proto) != "tensor" or not is_elem_type(type_proto.tensor_type.elem_type):
        return None
    tensor = type_proto.tensor_type
    shape = dims_of(tensor.shape) if tensor.HasField("shape") else None
    return TensorType(elem_dtype(tensor.elem_type), shape)


def type_string(type_proto: onnx.TypeProto | None) -> str:
    """onnxruntime's spelling of a type: 'tensor(float)', 'seq(tensor(int64))', 'map(...)'."""
    kind = kind_of(type_proto)
    if kind == "tensor":
        return f"tensor({elem_name(type_proto.tensor_type.elem_type)})"
    if kind == "sparse_tensor":
        return f"sparse_tensor({elem_name(type_proto.sparse_tensor_type.elem_type)})"
    if kind == "sequence":
        return f"seq({type_string(type_proto.sequence_type.elem_type)})"
    if kind == "optional":
        return f"optional({type_string(type_proto.optional_type.elem_type)})"
    if kind == "map":
        key = elem_name(type_proto.map_type.key_type)
        return f"map({key},{type_string(type_proto.map_type.value_type)})"
    return "unknown"


def value_type_string(value) -> str:
    """The type string of a runtime value (array, list of arrays, dict, or None)."""
    if value is None:
        return "optional(none)"
    if isinstance(value, list):
        inner = value_type_string(value[0]) if value else "unknown"
        return f"seq({inner})"
    if isinstance(value, dict):
        return "map"
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return type(value).__name__
    try:
        return f"tensor({elem_name(dtype_elem(dtype))})"
    except (KeyError, ValueError, TypeError):
        return f"array({dtype})"
