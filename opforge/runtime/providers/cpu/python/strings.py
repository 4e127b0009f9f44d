"""String ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch; Equal and
ArrayFeatureExtractor of strings.

Strings cannot cross the C ABI (its tensors hold fixed-size elements), so these run here, as
sequences do, on numpy arrays of Python str objects (dtype object, as onnxruntime returns them).
"""
from __future__ import annotations

import re

import numpy as np

from opforge.runtime.errors import KernelError
from opforge.runtime.providers.registry import kernel


class _StringKernel:
    provider = "CPUExecutionProvider"

    def __init__(self, node, opset: int):
        self.node = node
        self.attrs = node.attrs

    def attr_str(self, name: str, default: str | None = None) -> str | None:
        return self.text(self.attrs.get(name, default), name)

    def text(self, value, name: str):
        """An attribute's bytes as str; KernelError naming the node and attribute when they
        are not UTF-8."""
        try:
            return value.decode() if isinstance(value, bytes) else value
        except UnicodeDecodeError as exc:
            raise KernelError(f"{self.node.label}: attribute '{name}' is not UTF-8 text ({exc})") from None

    def strings(self, value, name: str) -> np.ndarray:
        """An input as an array of str; KernelError naming the node when it holds no strings."""
        value = np.asarray(value)
        if value.dtype.kind not in "OU":
            raise KernelError(f"{self.node.label}: input '{name}' must hold strings, got {value.dtype}")
        return value.astype(object)


@kernel("StringConcat", since=20)
class StringConcat(_StringKernel):
    """X + Y elementwise, with numpy broadcasting."""

    def run(self, inputs: list) -> list:
        x, y = self.strings(inputs[0], "X"), self.strings(inputs[1], "Y")
        try:
            return [np.asarray(np.frompyfunc(lambda a, b: a + b, 2, 1)(x, y), dtype=object)]
        except ValueError as exc:
            raise KernelError(f"{self.node.label}: {exc}") from None


@kernel("RegexFullMatch", since=20)
class RegexFullMatch(_StringKernel):
    """Whether each string matches 'pattern' in full (Python's re syntax, RE2's for common patterns)."""

    def __init__(self, node, opset: int):
        super().__init__(node, opset)
        try:
            self.regex = re.compile(self.attr_str("pattern", ""))
        except re.error as exc:
            raise KernelError(f"{node.label}: attribute 'pattern' is not a valid regex: {exc}") from None

    def run(self, inputs: list) -> list:
        x = self.strings(inputs[0], "X")
        return [np.array([self.regex.fullmatch(s) is not None for s in x.ravel()], bool).reshape(x.shape)]


@kernel("StringSplit", since=20)
class StringSplit(_StringKernel):
    """Each string split at 'delimiter' (runs of whitespace when empty or absent), at most
    'maxsplit' times; pieces padded with '' to the longest split, and the counts (0 for '', as
    onnxruntime counts)."""

    def run(self, inputs: list) -> list:
        x = self.strings(inputs[0], "X")
        delimiter = self.attr_str("delimiter") or None
        maxsplit = int(self.attrs.get("maxsplit", -1))
        if delimiter is None:   # outer whitespace is no separator, as in onnxruntime
            pieces = [s.strip().split(None, maxsplit) for s in x.ravel()]
        else:
            pieces = [s.split(delimiter, maxsplit) if s else [] for s in x.ravel()]   # '' has no pieces
        width = max((len(p) for p in pieces), default=0)
        y = np.full((len(pieces), width), "", dtype=object)
        for row, p in enumerate(pieces):
            y[row, :len(p)] = p
        counts = np.array([len(p) for p in pieces], np.int64).reshape(x.shape)
        return [y.reshape(*x.shape, width), counts]


@kernel("StringNormalizer", since=10)
class StringNormalizer(_StringKernel):
    """[C] or [1, C] strings without the stop words (compared in the given case sensitivity),
    then lower- or upper-cased; [''] when none is left."""

    def run(self, inputs: list) -> list:
        x = self.strings(inputs[0], "X")
        if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
            raise KernelError(f"{self.node.label}: input 'X' must be [C] or [1, C], got {list(x.shape)}")
        sensitive = bool(self.attrs.get("is_case_sensitive", 0))
        stops = [self.text(w, "stopwords") for w in self.attrs.get("stopwords", [])]
        fold = (lambda s: s) if sensitive else str.lower
        stops = {fold(w) for w in stops}
        action = self.attr_str("case_change_action", "NONE")
        change = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}.get(action)
        if change is None:
            raise KernelError(f"{self.node.label}: attribute 'case_change_action' = '{action}' is not "
                              "NONE, LOWER or UPPER")
        kept = [change(s) for s in x.ravel() if fold(s) not in stops] or [""]
        y = np.array(kept, dtype=object)
        return [y.reshape(1, -1) if x.ndim == 2 else y]


@kernel("Equal", since=1)
class Equal(_StringKernel):
    """Elementwise equality with broadcasting, for the strings the C kernel cannot take (it serves
    every other dtype)."""

    def run(self, inputs: list) -> list:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        try:
            return [np.asarray(np.equal(a, b), dtype=bool)]
        except (ValueError, TypeError) as exc:
            raise KernelError(f"{self.node.label}: {exc}") from None


@kernel("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
class ArrayFeatureExtractor(_StringKernel):
    """X's last axis gathered at the indices Y (a 0- or 1-D X gives [1, len(Y)]), for the strings
    the C kernel cannot take (skl2onnx picks string columns so)."""

    def run(self, inputs: list) -> list:
        x, at = self.strings(inputs[0], "X"), np.asarray(inputs[1]).ravel()
        width = x.shape[-1] if x.ndim else 1
        if at.dtype != np.int64 or ((at < 0) | (at >= width)).any():
            raise KernelError(f"{self.node.label}: Y must hold int64 indices into X's last axis of {width}, "
                              f"got {at.tolist()}")
        x = x.reshape(1, width) if x.ndim <= 1 else x
        return [np.take(x, at, axis=-1)]
