"""ai.onnx.ml's ops that read maps: DictVectorizer and CastMap.

A map arrives as a Python dict (as onnxruntime takes it), so these run here, in Python, and give
numpy tensors of one row, [1, N], as onnxruntime's kernels do.
"""
from __future__ import annotations

import numpy as np

from opforge.runtime.errors import KernelError, KernelNotFoundError
from opforge.runtime.providers.cpu.python.ml_encoders import ML, attr_array, text
from opforge.runtime.providers.registry import kernel

CPU = "CPUExecutionProvider"


def _map(node, value, keys: str) -> dict:
    """The input map; KernelError naming the node when it is not a dict."""
    if not isinstance(value, dict):
        raise KernelError(f"{node.label}: input 'X' must be a map (a dict) of {keys} keys, "
                          f"got {type(value).__name__}")
    return value


def _key(key):
    """A map key as the vocabulary holds it: bytes as str, numpy integers as int."""
    if isinstance(key, bytes):
        return key.decode()
    return int(key) if isinstance(key, (int, np.integer)) and not isinstance(key, bool) else key


def _value_dtype(values) -> np.dtype:
    """The output dtype for a map's values: float32 for Python floats (onnxruntime's map(.,
    float)), else the values' own numpy type; strings as object."""
    sample = next(iter(values), 0.0)
    if isinstance(sample, (str, bytes)):
        return np.dtype(object)
    if isinstance(sample, np.generic):
        return sample.dtype
    if isinstance(sample, (bool, int)):
        return np.dtype(np.int64)
    return np.dtype(np.float32)


@kernel("DictVectorizer", since=1, domain=ML)
class DictVectorizer:
    """A map {key: value} -> a row of len(vocabulary) values, the value of each vocabulary key
    where the map has it, else 0 (an empty string for string values); keys not in the vocabulary
    are left out. The row's type is the map's value type as the model declares it (else that of
    the values: float32 for Python floats, int64 for ints). An empty map gives a row of zeros
    (onnxruntime's Python binding refuses it, unable to type it)."""

    provider = CPU

    def __init__(self, node, opset: int):
        self.node = node
        strings = attr_array(node.attrs, "string_vocabulary")
        ints = attr_array(node.attrs, "int64_vocabulary")
        if (strings is None) == (ints is None):
            raise KernelNotFoundError(f"{node.label}: needs exactly one of string_vocabulary and "
                                      "int64_vocabulary")
        vocabulary = (strings if strings is not None else ints).tolist()
        self.keys = "string" if strings is not None else "int64"
        self.columns: dict = {}   # a key the vocabulary repeats fills each of its columns (onnxruntime)
        for index, key in enumerate(vocabulary):
            self.columns.setdefault(key, []).append(index)
        self.width = len(vocabulary)
        declared = node.output_types[0] if node.output_types else None
        self.dtype = None if declared is None else np.dtype(declared.dtype)

    def run(self, inputs: list) -> list:
        mapping = _map(self.node, inputs[0], self.keys)
        dtype = self.dtype or _value_dtype(mapping.values())
        out = np.full((1, self.width), "" if dtype == object else 0, dtype)
        for key, value in mapping.items():
            for column in self.columns.get(_key(key), ()):
                out[0, column] = text(value) if dtype == object else value
        return [out]


@kernel("CastMap", since=1, domain=ML)
class CastMap:
    """A map {int64: string or float} -> [1, N] of float, int64 or string: DENSE takes the values
    in ascending key order; SPARSE writes each value at its key's index in a row of max_map,
    the rest 0 ("0.f" for strings, as onnxruntime); keys outside [0, max_map) are an error."""

    provider = CPU
    CASTS = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}

    def __init__(self, node, opset: int):
        self.node = node
        cast_to = text(node.attrs.get("cast_to", "TO_FLOAT"))
        map_form = text(node.attrs.get("map_form", "DENSE"))
        if cast_to not in self.CASTS or map_form not in ("DENSE", "SPARSE"):
            raise KernelNotFoundError(f"{node.label}: cast_to {cast_to!r} / map_form {map_form!r} "
                                      "are not ones CastMap defines")
        self.dtype, self.sparse = np.dtype(self.CASTS[cast_to]), map_form == "SPARSE"
        self.max_map = int(node.attrs.get("max_map", 1))
        if self.sparse and self.max_map < 1:
            raise KernelNotFoundError(f"{node.label}: max_map must be at least 1 for SPARSE, "
                                      f"got {self.max_map}")

    def _cast(self, value):
        if self.dtype == object:
            return text(value) if isinstance(value, (str, bytes)) else _float_text(value)
        if isinstance(value, (str, bytes)):
            try:
                number = float(text(value))
            except ValueError:
                raise KernelError(f"{self.node.label}: map value {text(value)!r} is not a number, "
                                  f"cannot cast it to {self.dtype}") from None
            return np.int64(number) if self.dtype == np.int64 else number
        return value

    def run(self, inputs: list) -> list:
        mapping = _map(self.node, inputs[0], "int64")
        items = sorted((_key(k), v) for k, v in mapping.items())
        if not self.sparse:
            values = [self._cast(v) for _, v in items]
            return [np.array(values, self.dtype).reshape(1, len(values))]
        # onnxruntime fills a string row with "0.f" (its default is the C++ literal's text)
        out = np.full((1, self.max_map), "0.f" if self.dtype == object else 0, self.dtype)
        for key, value in items:
            if not 0 <= key < self.max_map:
                raise KernelError(f"{self.node.label}: key {key} is outside [0, max_map={self.max_map})")
            out[0, key] = self._cast(value)
        return [out]


def _float_text(value) -> str:
    """A float as onnxruntime writes it in a string tensor (std::to_string: 6 decimals)."""
    return f"{float(value):f}"
