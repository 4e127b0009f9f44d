"""ai.onnx.ml's encoders: LabelEncoder, CategoryMapper, OneHotEncoder.

They map keys (strings or numbers) to values, so they run here, on numpy arrays, strings as arrays
of Python str (dtype object, as onnxruntime returns them). Where a key repeats, the value that
wins is onnxruntime's: the first for LabelEncoder (opset >= 2), the last for the others.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from opforge.runtime.errors import KernelError, KernelNotFoundError
from opforge.runtime.providers.registry import kernel

ML = "ai.onnx.ml"
UNUSED = "_Unused"   # the operators' default string


def text(value) -> str:
    """A string attribute (bytes as loaded) as str."""
    return value.decode() if isinstance(value, bytes) else value


def attr_array(attrs: dict, name: str) -> "np.ndarray | None":
    """A list or tensor attribute as an array (strings as an object array of str); None when absent."""
    value = attrs.get(name)
    if value is None:
        return None
    if isinstance(value, TensorProto):
        value = numpy_helper.to_array(value)
        return np.array([text(v) for v in value.ravel()], dtype=object) if value.dtype == object else value.ravel()
    if value and isinstance(value[0], (bytes, str)):
        return np.array([text(v) for v in value], dtype=object)
    if value and isinstance(value[0], float):
        return np.array(value, np.float32)
    return np.array(value, np.int64)


class Lookup:
    """keys -> values for whole arrays: numbers by binary search over the sorted keys, strings
    through a dict. ``first``: a repeated key keeps its first value (else its last);
    ``nan_matches``: a NaN key matches NaN inputs (LabelEncoder from opset 4)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default, first: bool = False,
                 nan_matches: bool = False):
        self.values_dtype = values.dtype
        self.default = default
        order = np.arange(len(keys)) if first else np.arange(len(keys))[::-1]
        self.strings = keys.dtype == object
        if self.strings:
            self.table = {k: v for k, v in zip(keys[order[::-1]].tolist(), values[order[::-1]].tolist())}
            return
        unique, at = np.unique(keys[order], return_index=True)   # NaNs collapse into one, last
        self.keys, self.values = unique, values[order[at]]
        self.nan_value = self.values[-1] if nan_matches and unique.size and np.isnan(unique[-1]) else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Each element of ``x`` looked up; the default where it is no key."""
        if self.strings:
            found = map(self.table.get, x.ravel().tolist(), [self.default] * x.size)
            return np.fromiter(found, self.values_dtype, x.size).reshape(x.shape)
        if self.keys.size == 0:
            return np.full(x.shape, self.default, self.values_dtype)
        at = np.minimum(np.searchsorted(self.keys, x), self.keys.size - 1)
        y = np.where(self.keys[at] == x, self.values[at], np.asarray(self.default, self.values_dtype))
        if self.nan_value is not None:
            y[np.isnan(x)] = self.nan_value
        return y.astype(self.values_dtype, copy=False)


class _EncoderKernel:
    provider = "CPUExecutionProvider"

    def __init__(self, node, opset: int):
        self.node = node
        self.attrs = node.attrs

    def input(self, value, strings: bool) -> np.ndarray:
        """Input X as an array, strings as an object array; KernelError when its kind is not the
        one the node's keys call for."""
        x = np.asarray(value)
        if (x.dtype.kind in "OU") != strings:
            want = "strings" if strings else "numbers"
            raise KernelError(f"{self.node.label}: input 'X' must hold {want}, got {x.dtype}")
        return x.astype(object) if strings and x.dtype != object else x


@kernel("LabelEncoder", since=1, domain=ML)
class LabelEncoder(_EncoderKernel):
    """Each element of X mapped through keys_* to values_* (opset 1: strings to their index in
    classes_strings, or indices to those strings), the default where it is no key."""

    def __init__(self, node, opset: int):
        super().__init__(node, opset)
        if opset < 2:   # by the input's kind: strings to indices, or indices to strings
            classes = attr_array(self.attrs, "classes_strings")
            classes = np.zeros(0, object) if classes is None else classes
            indices = np.arange(len(classes), dtype=np.int64)
            self.lookups = {True: Lookup(classes, indices, self._default(indices.dtype)),
                            False: Lookup(indices, classes, self._default(classes.dtype))}
            return
        keys, values = (self._first(f"{kind}_{name}" for name in ("tensor", "strings", "int64s", "floats"))
                        for kind in ("keys", "values"))
        if keys is None or values is None:
            raise KernelError(f"{node.label}: needs one keys_* and one values_* attribute")
        if len(keys) != len(values):
            raise KernelError(f"{node.label}: {len(keys)} keys but {len(values)} values")
        lookup = Lookup(keys, values, self._default(values.dtype), first=True, nan_matches=opset >= 4)
        self.lookups = {lookup.strings: lookup}

    def _first(self, names) -> "np.ndarray | None":
        return next((a for name in names if (a := attr_array(self.attrs, name)) is not None), None)

    def _default(self, dtype: np.dtype):
        tensor = attr_array(self.attrs, "default_tensor")
        if tensor is not None and tensor.size:
            return tensor[0]
        if dtype == object:
            return text(self.attrs.get("default_string", UNUSED))
        if dtype.kind in "iu":
            return int(self.attrs.get("default_int64", -1))
        return float(self.attrs.get("default_float", -0.0))

    def run(self, inputs: list) -> list:
        x = np.asarray(inputs[0])
        strings = x.dtype.kind in "OU"
        if strings not in self.lookups:
            strings = not strings   # the one lookup there is: input() says what it wants
        return [self.lookups[strings](self.input(x, strings))]


@kernel("CategoryMapper", since=1, domain=ML)
class CategoryMapper(_EncoderKernel):
    """Strings to the int64 paired with them in cats_strings/cats_int64s, or int64 to strings."""

    def __init__(self, node, opset: int):
        super().__init__(node, opset)
        strings, ints = attr_array(self.attrs, "cats_strings"), attr_array(self.attrs, "cats_int64s")
        strings = np.zeros(0, object) if strings is None else strings
        ints = np.zeros(0, np.int64) if ints is None else ints
        if len(strings) != len(ints):
            raise KernelError(f"{node.label}: cats_strings has {len(strings)} entries, cats_int64s {len(ints)}")
        self.to_ints = Lookup(strings, ints, int(self.attrs.get("default_int64", -1)))
        default = text(self.attrs.get("default_string", UNUSED))
        self.to_strings = Lookup(ints, strings, default)
        # cats_int64s 0..n-1 (a classifier's class indices to its string labels, as the
        # split_string_labels pass writes it): one take from [default, strings..., default]
        self.dense = (np.array([default, *strings.tolist(), default], object)
                      if np.array_equal(ints, np.arange(ints.size)) else None)
        # a compiled plan maps int64 inputs through the same table in its core
        self.core_step = None if self.dense is None else ("index_to_string", self.dense.tolist(), self.dense.size)

    def run(self, inputs: list) -> list:
        x = np.asarray(inputs[0])
        if x.dtype.kind in "OU":
            return [self.to_ints(x if x.dtype == object else x.astype(object))]
        if x.dtype != np.int64:
            raise KernelError(f"{self.node.label}: input 'X' must hold strings or int64, got {x.dtype}")
        if self.dense is not None:   # x + 1 clipped to the table: below 0 or from n on, the default
            return [self.dense.take(x + 1, mode="clip")]
        return [self.to_strings(x)]


@kernel("OneHotEncoder", since=1, domain=ML)
class OneHotEncoder(_EncoderKernel):
    """X's shape plus one axis of len(cats): 1.0 at each element's category, numbers cut to
    int64 first; an element of no category is all zeros, or an error when zeros=0."""

    def __init__(self, node, opset: int):
        super().__init__(node, opset)
        cats = attr_array(self.attrs, "cats_strings")
        if cats is None:
            cats = attr_array(self.attrs, "cats_int64s")
        if cats is None or cats.size == 0:
            raise KernelError(f"{node.label}: needs cats_int64s or cats_strings")
        self.size = cats.size
        self.lookup = Lookup(cats, np.arange(cats.size, dtype=np.int64), -1)
        self.zeros = bool(self.attrs.get("zeros", 1))
        # each category's row, then the all-zero row that index -1 (no category) takes: one
        # take per run (a batch-1 pipeline pays this encoder per string column); for up to
        # 512 categories (1 MB), else rows are set one by one
        self.rows = (np.vstack([np.eye(self.size, dtype=np.float32), np.zeros((1, self.size), np.float32)])
                     if self.size <= 512 else None)
        # a compiled plan runs string inputs in its core (Plan.add_core_step); an unknown
        # category is an error only here (zeros=0)
        self.core_step = (("string_onehot", self.lookup.table, self.size)
                          if self.lookup.strings and self.zeros else None)

    def run(self, inputs: list) -> list:
        x = inputs[0]
        if not (type(x) is np.ndarray and x.dtype == object and self.lookup.strings):
            x = self.input(x, self.lookup.strings)
        if self.lookup.strings:
            get = self.lookup.table.get
            at = [get(key, -1) for key in x.ravel().tolist()]
            unknown = -1 in at
        else:
            if x.dtype != np.int64:
                with np.errstate(invalid="ignore"):
                    x = x.astype(np.int64)   # truncated, as onnxruntime casts
            at = self.lookup(x).ravel()
            unknown = bool((at < 0).any())
        if not self.zeros and unknown:
            raise KernelError(f"{self.node.label}: Unknown Category and zeros = 0.")
        if self.rows is not None:
            return [self.rows.take(at, axis=0).reshape(x.shape + (self.size,))]
        at = np.asarray(at, np.int64)
        y = np.zeros((at.size, self.size), np.float32)
        rows = np.flatnonzero(at >= 0)
        y[rows, at[rows]] = 1.0
        return [y.reshape(*x.shape, self.size)]

