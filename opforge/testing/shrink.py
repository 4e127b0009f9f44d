"""Shrinking a failing case, as hypothesis shrinks an example: fewer variadic inputs, attributes
back to their defaults, contiguous inputs, fewer and shorter axes, while the same check fails."""
from __future__ import annotations

import dataclasses

import numpy as np

from opforge.testing.cases import Case

SHRINK_CALLS = 50   # candidate cases tried per failing check, at most
PREVIEW = 16        # inputs of at most this many elements are shown with their values


@dataclasses.dataclass
class Shrunk:
    """The smallest failing case found from `original` (`original` itself when no candidate
    failed: then `message` is None), its inputs, and how many candidates were tried."""

    case: Case
    inputs: list
    message: "str | None"
    original: Case
    calls: int

    @property
    def smaller(self) -> bool:
        return self.case is not self.original


def shrink(schema: dict, case: Case, inputs: list, fails, budget: int = SHRINK_CALLS) -> Shrunk:
    """The smallest or simplest case found from `case` (its inputs cut from `inputs`, so the
    values that failed are kept) for which `fails(case, inputs)` still returns a message,
    trying at most `budget` candidates. Deterministic: it makes no random choices."""
    search = _Search(case, inputs, fails, budget)
    while search.calls < budget:
        if any(search.tries(candidate) for candidate in _simpler(schema, search.case, search.inputs)):
            continue
        if not search.shorter_axes():
            break
    return Shrunk(search.case, search.inputs, search.message, case, search.calls)


class _Search:
    """The smallest failing case so far, and the calls spent finding it."""

    def __init__(self, case: Case, inputs: list, fails, budget: int):
        self.case, self.inputs, self.fails, self.budget = case, inputs, fails, budget
        self.message, self.calls = None, 0
        self.settled = set()   # (shapes, axis): that axis is as short as a bisection found, at those shapes

    def tries(self, candidate) -> bool:
        """Runs a candidate (case, inputs) or None; True, and it is the case from now on, when it fails."""
        if candidate is None or self.calls >= self.budget:
            return False
        self.calls += 1
        message = self.fails(*candidate)
        if message is None:
            return False
        (self.case, self.inputs), self.message = candidate, message
        return True

    def shorter_axes(self) -> bool:
        """Each axis cut to 1, else to the shortest failing length a bisection finds."""
        progress = False
        for axis in range(_rank(self.case)):
            start = _length(self.case, axis)
            if start <= 1 or (tuple(self.case.shapes), axis) in self.settled:
                continue
            if self.tries(_cut(self.case, self.inputs, axis, 1)):
                progress = True
                continue
            good, bad = 1, start   # passes at good, fails at bad
            while bad - good > 1 and self.calls < self.budget:
                middle = (good + bad) // 2
                if self.tries(_cut(self.case, self.inputs, axis, middle)):
                    bad = middle
                else:
                    good = middle
            progress |= bad < start
            if bad - good == 1:
                self.settled.add((tuple(self.case.shapes), axis))
        return progress


def _simpler(schema: dict, case: Case, inputs: list):
    """Candidates no larger than `case`, each one step simpler, in the order they are tried."""
    params = schema["inputs"]
    if params and params[-1]["variadic"] and len(case.dtypes) - (len(params) - 1) > 1:
        yield _with(case, inputs[:-1], dtypes=case.dtypes[:-1])
    required = {a["name"] for a in schema["attributes"] if a["required"] and not a["has_default"]}
    for name in case.attrs:
        if name not in required:
            yield _with(case, inputs, attrs={k: v for k, v in case.attrs.items() if k != name})
    if case.layout != "contiguous":
        yield _with(case, [None if a is None else a.copy(order="C") for a in inputs], layout="contiguous")
    for axis in range(_rank(case)):
        yield _dropped(case, inputs, axis)


def _with(case: Case, inputs: list, **changes) -> tuple:
    """(case with `changes` and the shapes of `inputs`, inputs): contiguous ones copied as such."""
    if changes.get("layout", case.layout) == "contiguous":
        inputs = [a if a is None or a.flags.c_contiguous else a.copy(order="C") for a in inputs]
    shapes = [None if a is None else tuple(a.shape) for a in inputs]
    return dataclasses.replace(case, shapes=shapes, **changes), inputs


# Axes are counted as broadcasting aligns them, from the right: axis a of the case is axis
# a - (rank - ndim) of an input with fewer dimensions, which lacks it when that is negative.
def _rank(case: Case) -> int:
    return max((len(s) for s in case.shapes if s is not None), default=0)


def _own_axis(case: Case, shape: tuple, axis: int) -> int:
    return axis - (_rank(case) - len(shape))


def _length(case: Case, axis: int) -> int:
    return max(s[_own_axis(case, s, axis)] for s in case.shapes if s is not None and _own_axis(case, s, axis) >= 0)


def _cut(case: Case, inputs: list, axis: int, length: int) -> tuple:
    """The first `length` entries along `axis` of every input at full length there (inputs of
    length 1 along it keep broadcasting)."""
    full, cut = _length(case, axis), []
    for a in inputs:
        own = None if a is None else _own_axis(case, a.shape, axis)
        if own is None or own < 0 or a.shape[own] != full:
            cut.append(a)
        else:
            cut.append(a[(slice(None),) * own + (slice(0, length),)])
    return _with(case, cut)


def _dropped(case: Case, inputs: list, axis: int) -> "tuple | None":
    """Every input without `axis` (its entry 0 kept), or None where an input is empty along it."""
    out = []
    for a in inputs:
        own = None if a is None else _own_axis(case, a.shape, axis)
        if own is None or own < 0:
            out.append(a)
        elif a.shape[own] == 0:
            return None
        else:
            out.append(a[(slice(None),) * own + (0,)])
    return _with(case, out)


def preview(schema: dict, inputs: list) -> str:
    """The values of the inputs of at most PREVIEW elements, e.g. "X=[1.5, -2.]" (others left out)."""
    params = schema["inputs"]
    parts = []
    for k, a in enumerate(inputs):
        if a is None or a.size > PREVIEW:
            continue
        param = params[min(k, len(params) - 1)] if params else {"name": f"#{k}", "variadic": False}
        name = f"{param['name']}[{k - len(params) + 1}]" if param["variadic"] else param["name"]
        text = np.array2string(np.asarray(a), separator=", ", max_line_width=10**6)
        parts.append(f"{name}={' '.join(text.split())}")
    return " ".join(parts)
