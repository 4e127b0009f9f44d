"""The calls check_op makes of an op, generated from its schema: dtypes, shapes, layouts,
optional inputs present and absent, variadic counts and attribute values."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# One shape per input for every input of the op (the same shape for all of them).
SHAPES = [(), (0,), (2, 0, 3), (1,), (7,), (33,), (3, 5), (2, 3, 4), (3, 24001), (4, 262147)]
# Shapes of the first two inputs for ops that take two or more inputs of one dtype (others as the first).
BROADCASTS = [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((4,), (2, 3, 4)), ((2, 1, 4), (3, 1)), ((3, 5), ())]
# Shapes used while an attribute is varied away from its default.
ATTR_SHAPES = [(3, 5), (3, 24001)]
LARGE = (4, 262147)   # big enough for the threads of parallel_for to overlap in time
ATTR_EDGES = {"float": [0.0, 1.0, -2.5], "int": [0, 1, -1, 3]}


@dataclass
class Case:
    """One call: the dtype of each input (None: absent), their shapes, how the arrays are laid
    out ("contiguous", "strided": every other column, "transposed") and the attributes given."""

    dtypes: list
    shapes: list
    layout: str = "contiguous"
    attrs: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Elements in all inputs: how failing cases are ordered, smallest first."""
        return sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes if s is not None)

    @property
    def broadcasts(self) -> bool:
        """Whether the present inputs differ in shape."""
        return len({s for s in self.shapes if s is not None}) > 1

    @property
    def dtype(self) -> str:
        """The dtype that names the case (its first present input's)."""
        return next((d for d in self.dtypes if d is not None), "-")

    def describe(self) -> str:
        ins = ", ".join("absent" if d is None else f"{d}{list(s)}" for d, s in zip(self.dtypes, self.shapes))
        layout = "" if self.layout == "contiguous" else f" {self.layout}"
        attrs = "".join(f" {k}={v!r}" for k, v in self.attrs.items())
        return f"({ins}){layout}{attrs}"


def numpy_dtype(name: str) -> "np.dtype | None":
    """numpy's dtype of that name (ml_dtypes' for bfloat16, float8...), or None."""
    try:
        return np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes
        except ImportError:
            return None
        return np.dtype(getattr(ml_dtypes, name, None)) if hasattr(ml_dtypes, name) else None


def _usable(dtypes: list) -> list:
    return [d for d in dtypes if numpy_dtype(d) is not None]


def input_slots(schema: dict) -> list:
    """The input lists to try: one per variadic count (1, 2 and 3 for a variadic last input),
    each with, per optional input, both its present and its absent form. A slot is
    (param index, present)."""
    params = schema["inputs"]
    counts = [1, 2, 3] if params and params[-1]["variadic"] else [1]
    fixed = params[:-1] if params and params[-1]["variadic"] else params
    optional = [i for i, p in enumerate(fixed) if p["optional"]]
    lists = []
    for count in counts:
        tail = [(len(params) - 1, True)] * count if params and params[-1]["variadic"] else []
        for absent in ([], optional, optional[-1:]) if optional else ([],):
            slots = [(i, i not in absent) for i in range(len(fixed))]
            while slots and not slots[-1][1]:
                slots.pop()   # trailing absent inputs are left out rather than passed as None
            lists.append(slots + tail)
    return [list(x) for x in dict.fromkeys(tuple(s) for s in lists)]


def _input_dtypes(schema: dict, slots: list, primary: str) -> "list | None":
    """Each slot's dtype when input 0 has `primary`: inputs declaring the same dtype list as
    input 0 (or none) follow it; others take their first dtype. None when an input cannot."""
    params = schema["inputs"]
    lead = params[0]["dtypes"] if params else []
    out = []
    for index, present in slots:
        own = params[index]["dtypes"]
        if not present:
            out.append(None)
        elif not own or own == lead:
            out.append(primary)
        elif _usable(own):
            out.append(_usable(own)[0])
        else:
            return None
    return out


def attribute_variants(schema: dict, given: "dict | None") -> list:
    """Attribute sets to try: the defaults ({}), then each attribute alone at its edge values
    (from `given` {name: [values]} where named there). Raises ValueError for a required
    attribute without a default that `given` does not supply."""
    given = dict(given or {})
    base = {}
    for attr in schema["attributes"]:
        if attr["required"] and not attr["has_default"]:
            if not given.get(attr["name"]):
                raise ValueError(f"check_op({schema['name']}): attribute '{attr['name']}' is required; "
                                 f"give values to try with attrs={{'{attr['name']}': [...]}}")
            base[attr["name"]] = given[attr["name"]][0]
    variants = [dict(base)]
    for attr in schema["attributes"]:
        name = attr["name"]
        values = given.get(name, ATTR_EDGES.get(attr["type"], []))
        for value in values:
            if attr["has_default"] and value == attr["default"] and name not in given:
                continue
            variant = dict(base, **{name: value})
            if variant not in variants:
                variants.append(variant)
    return variants


def generate(schema: dict, dtypes: "list | None" = None, attrs: "dict | None" = None) -> list:
    """Every Case check_op runs for an op of `schema`, smallest first within each group."""
    params = schema["inputs"]
    primaries = dtypes or (_usable(params[0]["dtypes"]) if params and params[0]["dtypes"] else ["float32"])
    variants = attribute_variants(schema, attrs)
    cases = []
    for primary in primaries:
        for slots in input_slots(schema):
            kinds = _input_dtypes(schema, slots, primary)
            if kinds is None:
                continue
            present = [i for i, d in enumerate(kinds) if d is not None]
            cases += [Case(kinds, [shape if d is not None else None for d in kinds], "contiguous", variants[0])
                      for shape in SHAPES]
            cases += [Case(kinds, [(3, 5) if d is not None else None for d in kinds], layout, variants[0])
                      for layout in ("strided", "transposed")]
            same = [i for i in present if kinds[i] == primary]
            if len(same) >= 2:
                for first, second in BROADCASTS:
                    shapes = [first if d is not None else None for d in kinds]
                    shapes[same[1]] = second
                    cases.append(Case(kinds, shapes, "contiguous", variants[0]))
            for variant in variants[1:]:
                cases += [Case(kinds, [shape if d is not None else None for d in kinds], "contiguous", variant)
                          for shape in ATTR_SHAPES]
    return cases


def make_inputs(case: Case, rng: np.random.Generator, sample=None) -> list:
    """The case's arrays (None where absent), laid out as it says. `sample(index, dtype, shape,
    rng)` may give an input's values (return None to take the default ones)."""
    arrays = []
    for index, (name, shape) in enumerate(zip(case.dtypes, case.shapes)):
        if name is None:
            arrays.append(None)
            continue
        dtype = numpy_dtype(name)
        full = _full_shape(shape, case.layout)
        value = sample(index, dtype, full, rng) if sample is not None else None
        value = _random(dtype, full, rng) if value is None else np.asarray(value, dtype=dtype)
        arrays.append(_lay_out(value, case.layout))
    return arrays


def _full_shape(shape: tuple, layout: str) -> tuple:
    if layout == "strided":
        return shape[:-1] + (shape[-1] * 2,)
    if layout == "transposed":
        return tuple(reversed(shape))
    return shape


def _lay_out(value: np.ndarray, layout: str) -> np.ndarray:
    if layout == "strided":
        return value[..., ::2]
    if layout == "transposed":
        return value.T
    return value


def _random(dtype: np.dtype, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "u":
        return rng.integers(0, 40, shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-20, 20, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)
