"""Checking the inputs given to ``run`` against the model's declared input types."""
from __future__ import annotations

import operator
from typing import Any, Mapping

import numpy as np
import onnx

from opforge.runtime.errors import FeedError
from opforge.runtime.graph.graph import ValueInfo
from opforge.runtime.graph.types import MAX_RANK, dims_of, elem_dtype, is_elem_type, value_type_string


def check_feeds(feed: Mapping[str, Any], required: list[ValueInfo],
                optional: list[ValueInfo]) -> dict[str, Any]:
    """Validate ``feed`` and return it as the executor's environment.

    ``required`` inputs must be given; ``optional`` ones (initializers that are also graph
    inputs) may override their initializer. Raises FeedError naming the input and the expected
    type and shape, for an unknown name, a missing input, a wrong dtype, rank or fixed dim.
    """
    if not isinstance(feed, Mapping):
        raise FeedError("input_feed must be a dict of input name -> value, "
                        f"not {type(feed).__name__}")
    declared = {v.name: v for v in required + optional}
    for name in feed:
        if name not in declared:
            raise FeedError(f"unknown input {name!r}; the model's inputs are "
                            f"{[v.name for v in required]}")
    env = {}
    for info in required:
        if info.name not in feed:
            raise FeedError(f"input {info.name!r} is missing; it expects {describe(info)}")
    for name, value in feed.items():
        info = declared[name]
        spec = _tensor_spec(info)
        if spec and type(value) is np.ndarray and value.dtype == spec[0] and _dims_fit(value.shape, spec[1]):
            env[name] = value   # the common case, checked without touching the type's protobuf
        else:
            env[name] = check_value(value, info.type_proto, info)
    return env


class FeedChecker:
    """``check_feeds`` for one model's inputs, with the usual feed checked against specs worked
    out once: a dict holding each required input, and nothing else, as a numpy array of its
    declared dtype and fixed dims. This runs before every run, so it is kept to a few
    comparisons per input (a batch-1 model's whole run is a few microseconds)."""

    def __init__(self, required: list[ValueInfo], optional: list[ValueInfo]):
        self.required, self.optional = required, optional
        self._specs: list | None = []
        for info in sorted(required, key=lambda v: v.name):
            spec = _tensor_spec(info)
            if not spec:
                self._specs = None
                break
            dtype, dims = spec
            self._specs.append((info.name, dtype) + _shape_check(dims))

    def check(self, feed: Mapping[str, Any]) -> tuple[dict[str, Any], tuple | None]:
        """The executor's environment for ``feed`` and, for the usual feed, its plan signature
        (what ``plan.compiled.signature`` makes of it), else None. Raises FeedError as
        ``check_feeds`` does."""
        specs = self._specs
        if specs is not None and type(feed) is dict and len(feed) == len(specs):
            key = []
            for name, dtype, rank, fixed_dims, fixed in specs:
                value = feed.get(name)
                if type(value) is not np.ndarray or value.dtype is not dtype and value.dtype != dtype:
                    break
                shape = value.shape
                if rank is None:
                    if len(shape) > MAX_RANK:
                        break
                elif len(shape) != rank or fixed_dims is not None and fixed_dims(shape) != fixed:
                    break
                key.append((name, value.dtype, shape))
            else:
                return dict(feed), tuple(key)
        return check_feeds(feed, self.required, self.optional), None


def _shape_check(dims) -> tuple:
    """(rank or None, a getter of the fixed dims or None, what it must give) for declared
    ``dims``: one C call per feed instead of a loop over them."""
    if dims is None:
        return None, None, None
    axes = [axis for axis, d in enumerate(dims) if isinstance(d, int)]
    if not axes:
        return len(dims), None, None
    return len(dims), operator.itemgetter(*axes), operator.itemgetter(*axes)(dims)


def _tensor_spec(info: ValueInfo):
    """(dtype, fixed dims or None) of a tensor input, worked out once per ValueInfo; False for
    other kinds, which take the full check."""
    spec = info.__dict__.get("_feed_spec")
    if spec is None:
        spec = False
        type_proto = info.type_proto
        if type_proto is not None and type_proto.WhichOneof("value") == "tensor_type":
            tensor = type_proto.tensor_type
            if tensor.elem_type and is_elem_type(tensor.elem_type):
                spec = (elem_dtype(tensor.elem_type),
                        dims_of(tensor.shape) if tensor.HasField("shape") else None)
        info.__dict__["_feed_spec"] = spec
    return spec


def _dims_fit(shape: tuple, dims) -> bool:
    if dims is None:
        return len(shape) <= MAX_RANK
    return len(shape) == len(dims) and all(not isinstance(d, int) or d == n for d, n in zip(dims, shape))


def describe(info: ValueInfo) -> str:
    """``tensor(float) of shape ['N', 3]``: a declared input type, for messages."""
    text = info.type_string
    tensor = info.tensor_type
    if tensor is not None and tensor.shape is not None:
        text += f" of shape {list(tensor.shape)}"
    return text


def check_value(value: Any, type_proto: onnx.TypeProto | None, info: ValueInfo) -> Any:
    """``value`` converted as the executor wants it, or FeedError if it does not fit."""
    kind = None if type_proto is None else type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return _check_tensor(value, type_proto.tensor_type, info)
    if kind == "sequence_type":
        if not isinstance(value, (list, tuple)):
            raise _mismatch(info, value)
        return [check_value(v, type_proto.sequence_type.elem_type, info) for v in value]
    if kind == "optional_type":
        return None if value is None else check_value(value, type_proto.optional_type.elem_type,
                                                       info)
    if kind == "map_type" and not isinstance(value, dict):
        raise _mismatch(info, value)
    if getattr(value, "ndim", 0) > MAX_RANK:
        raise _too_many_dims(info, value)
    return value


def on_device(value: Any) -> bool:
    """Whether ``value`` is an array in GPU memory (cupy, or anything with the CUDA array
    interface), which a session takes as it is instead of through numpy."""
    return hasattr(type(value), "__cuda_array_interface__")


def to_host(value: Any) -> np.ndarray:
    """A device array copied into a numpy array: a cupy array through its ``get()`` (on the
    current stream), others through numpy."""
    get = getattr(value, "get", None)
    return get() if callable(get) and on_device(value) else np.asarray(value)


def _check_tensor(value: Any, tensor: onnx.TypeProto.Tensor, info: ValueInfo) -> np.ndarray:
    if value is None or isinstance(value, (list, tuple, dict)) and not _is_nested_numbers(value):
        raise _mismatch(info, value)
    if isinstance(value, (list, tuple)) and tensor.elem_type and is_elem_type(tensor.elem_type):
        value = _list_as(value, elem_dtype(tensor.elem_type), info)
    array = value if on_device(value) else np.asarray(value)
    if array.ndim > MAX_RANK:
        raise _too_many_dims(info, array)
    if not tensor.elem_type:
        return array
    if not is_elem_type(tensor.elem_type):
        raise FeedError(f"input {info.name!r} is declared of element type {tensor.elem_type}, "
                        "which ONNX does not define")
    expected = elem_dtype(tensor.elem_type)
    if expected == object and array.dtype.kind in "USO":
        array = array.astype(object)
    elif array.dtype != expected:
        raise _mismatch(info, array)
    if tensor.HasField("shape"):
        _check_shape(array, dims_of(tensor.shape), info)
    return array


def _list_as(value, dtype: np.dtype, info: ValueInfo) -> np.ndarray:
    """A (nested) Python list given for a tensor, as an array of the declared dtype, as
    onnxruntime takes it; numbers the dtype cannot hold as they are (1.5 for an int64 input)
    are refused, where a cast would change them."""
    loose = np.asarray(value)
    if dtype == object or loose.dtype.kind in "USO":
        return loose
    try:
        array = np.asarray(value, dtype=dtype)
    except (ValueError, OverflowError, TypeError) as exc:
        raise FeedError(f"input {info.name!r} expects {describe(info)}; its list cannot be read as "
                        f"{dtype}: {exc}") from None
    if loose.size and loose.dtype.kind in "biuf" and not np.array_equal(array.astype(loose.dtype), loose):
        raise FeedError(f"input {info.name!r} expects {describe(info)}; its list holds values that "
                        f"{dtype} cannot hold as they are (e.g. {loose.reshape(-1)[0]!r}): pass an array")
    return array


def _is_nested_numbers(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float, bool, str, np.generic)) or _is_nested_numbers(v) for v in value)


def _check_shape(array: np.ndarray, dims: tuple, info: ValueInfo) -> None:
    if array.ndim != len(dims):
        raise FeedError(f"input {info.name!r} expects {describe(info)} (rank {len(dims)}), "
                        f"got an array of shape {list(array.shape)} (rank {array.ndim})")
    for axis, (want, got) in enumerate(zip(dims, array.shape)):
        if isinstance(want, int) and want != got:
            raise FeedError(f"input {info.name!r} expects {describe(info)}, got an array of "
                            f"shape {list(array.shape)}: dimension {axis} is {got}, not {want}")


def _too_many_dims(info: ValueInfo, value: Any) -> FeedError:
    return FeedError(f"input {info.name!r} has {value.ndim} dimensions; opforge takes tensors "
                     f"of at most {MAX_RANK}")


def _mismatch(info: ValueInfo, value: Any) -> FeedError:
    shape = getattr(value, "shape", None)
    got = value_type_string(value) + (f" of shape {list(shape)}" if shape is not None else "")
    return FeedError(f"input {info.name!r} expects {describe(info)}, got {got}")



def as_output(value: Any) -> Any:
    """A run's result as onnxruntime hands it out: string tensors as object arrays (never
    numpy's fixed-width ``<U``/``S``), inside sequences too."""
    if isinstance(value, np.ndarray):
        return value.astype(object) if value.dtype.kind in "US" else value
    if isinstance(value, list):
        return [v if type(v) is dict else as_output(v) for v in value]   # ZipMap's maps as they are
    return value
