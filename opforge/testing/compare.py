"""Comparing an op's results with a reference's: tolerances per dtype, and the worst element."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opforge.testing.buffers import index_of

# (atol, rtol) per dtype: a few units in the last place of elementwise work in that dtype.
# Integers, booleans and strings compare exactly.
TOLERANCES = {
    "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2), "float32": (1e-5, 1e-5),
    "float64": (1e-12, 1e-12), "complex64": (1e-5, 1e-5), "complex128": (1e-12, 1e-12),
}


def tolerance(dtype: np.dtype, atol=None, rtol=None) -> tuple:
    """(atol, rtol) for results of `dtype`: the table above, else exact; `atol` / `rtol` (a
    number, or a dict by dtype name) override it."""
    base = TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))
    if np.dtype(dtype).kind == "f" and np.dtype(dtype).name not in TOLERANCES:
        base = (1e-1, 1e-1)   # the narrow float8 / float4 types
    pick = lambda given, default: (given.get(np.dtype(dtype).name, default) if isinstance(given, dict)
                                   else default if given is None else given)
    return pick(atol, base[0]), pick(rtol, base[1])


@dataclass
class Mismatch:
    """Where an output disagrees with the reference beyond tolerance."""

    count: int
    total: int
    max_abs: float
    max_rel: float
    index: list
    got: object
    expected: object
    atol: float
    rtol: float

    def describe(self, output: str) -> str:
        return (f"output '{output}': {self.count} of {self.total} elements beyond atol={self.atol:g}, "
                f"rtol={self.rtol:g}; max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}; "
                f"worst at {self.index}: got {self.got!r}, expected {self.expected!r}")


def mismatch(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> "Mismatch | None":
    """How `got` differs from `expected` (same shape) beyond atol + rtol * |expected|, or None.
    NaN matches NaN and an infinity itself."""
    if got.size == 0:
        return None
    with np.errstate(invalid="ignore"):
        candidates = np.flatnonzero(got != expected)   # NaN != NaN: decided below
    if candidates.size == 0:
        return None
    found = _mismatch_at(got.reshape(-1)[candidates], expected.reshape(-1)[candidates], atol, rtol)
    if found is None:
        return None
    count, max_abs, max_rel, worst = found
    flat = int(candidates[worst])
    return Mismatch(count, int(got.size), max_abs, max_rel, index_of(flat, got.shape), got.reshape(-1)[flat].item(),
                    expected.reshape(-1)[flat].item(), atol, rtol)


def _mismatch_at(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> "tuple | None":
    """(elements beyond tolerance, max abs error, max rel error, position of the worst) among
    these elements, or None when all are within it."""
    if got.dtype.kind in "fc" or expected.dtype.kind in "fc":
        g = got.astype(np.complex128 if got.dtype.kind == "c" else np.float64)
        e = expected.astype(np.complex128 if expected.dtype.kind == "c" else np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(g - e)
            same = (g == e) | (np.isnan(g) & np.isnan(e))
        err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
        scale = np.abs(np.where(np.isfinite(e), e, 0))
        limit = atol + rtol * scale
    else:
        err = (np.asarray(got) != np.asarray(expected)).astype(np.float64)
        limit = np.zeros(err.shape)
        scale = np.abs(expected.astype(np.float64)) if expected.dtype.kind in "iu" else np.ones(err.shape)
    bad = err > limit
    if not bad.any():
        return None
    worst = int(np.argmax(np.where(bad, err - limit, -1.0)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.where(bad, err / np.maximum(scale, np.finfo(np.float64).tiny), 0.0)
    return int(bad.sum()), float(np.max(np.where(bad, err, 0))), float(np.max(rel)), worst


def reference_outputs(reference, inputs: list, attrs: dict, num_outputs: int) -> list:
    """The reference's results for one call as a list of arrays: it takes the op's inputs
    positionally (absent optional ones as None) and its attributes as keyword arguments, and
    returns an array or a tuple of them (an onnx FunctionProto is run by onnx.reference)."""
    if hasattr(reference, "node") and hasattr(reference, "input"):   # an onnx FunctionProto
        reference = function_reference(reference)
    results = reference(*inputs, **attrs)
    if not isinstance(results, (tuple, list)):
        results = [results]
    return [None if r is None else np.asarray(r) for r in list(results)[:num_outputs]]


def function_reference(function):
    """A reference callable that runs an ONNX function body with onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(function)
    declared = set(function.attribute) | {a.name for a in function.attribute_proto}

    def run(*inputs, **attrs):
        feeds = {name: value for name, value in zip(function.input, inputs) if value is not None}
        return evaluator.run(None, feeds, attributes={k: v for k, v in attrs.items() if k in declared})

    return run
