"""opforge.testing.shrink: a failing case shrinks to a smaller one that still fails, step by
step (variadic inputs, attributes, layout, axes), within its budget and the same every time."""
import numpy as np

from opforge.testing.cases import Case
from opforge.testing.shrink import preview, shrink

UNARY = {"inputs": [{"name": "X", "variadic": False}],
         "attributes": [{"name": "alpha", "required": False, "has_default": True},
                        {"name": "k", "required": True, "has_default": False}]}
VARIADIC = {"inputs": [{"name": "xs", "variadic": True}], "attributes": []}


def recorder(predicate):
    """A `fails` that says "fails" where predicate(case, inputs) holds, and logs every call."""
    calls = []

    def fails(case, inputs):
        calls.append(case)
        return "fails" if predicate(case, inputs) else None

    return fails, calls


def test_an_axis_shrinks_to_the_shortest_failing_length():
    x = np.arange(3 * 5000, dtype=np.float32).reshape(3, 5000)
    fails, calls = recorder(lambda case, inputs: inputs[0].size >= 1000)
    found = shrink(UNARY, Case(["float32"], [x.shape]), [x], fails)
    assert found.smaller and found.case.shapes == [(1000,)] and found.message == "fails"
    assert found.inputs[0].flags.c_contiguous and np.array_equal(found.inputs[0], x[0, :1000])   # the values kept
    assert found.calls == len(calls) <= 50


def test_attributes_layout_and_variadic_inputs_are_simplified_first():
    xs = [np.ones((4, 6), np.float32).T for _ in range(3)]
    case = Case(["float32"] * 3, [(6, 4)] * 3, "transposed", {"k": 2})
    fails, calls = recorder(lambda case, inputs: True)
    found = shrink(VARIADIC, case, xs, fails)
    assert found.case == Case(["float32"], [()], "contiguous", {})
    assert [len(c.dtypes) for c in calls[:2]] == [2, 1] and calls[2].attrs == {} and calls[3].layout == "contiguous"
    unary = Case(["float32"], [(6,)], "contiguous", {"alpha": 0.5, "k": 3})
    found = shrink(UNARY, unary, [np.ones(6, np.float32)], recorder(lambda case, inputs: True)[0])
    assert found.case.attrs == {"k": 3}   # a required attribute without a default stays


def test_broadcasting_inputs_shrink_together():
    a, b = np.ones((3, 1), np.float32), np.ones((1, 4), np.float32)
    schema = {"inputs": [{"name": "A", "variadic": False}, {"name": "B", "variadic": False}], "attributes": []}
    # fails only when both inputs really broadcast, in two dimensions
    fails, _ = recorder(lambda case, ins: ins[0].ndim == 2 and ins[0].shape[0] > 1 and ins[1].shape[-1] > 1)
    found = shrink(schema, Case(["float32"] * 2, [(3, 1), (1, 4)]), [a, b], fails)
    assert found.case.shapes == [(2, 1), (1, 2)]
    assert preview(schema, found.inputs) == "A=[[1.], [1.]] B=[[1., 1.]]"


def test_no_smaller_failing_case_keeps_the_original():
    x = np.ones(7, np.float32)
    case = Case(["float32"], [(7,)])
    found = shrink(UNARY, case, [x], recorder(lambda c, ins: ins[0].shape == (7,))[0])
    assert not found.smaller and found.case is case and found.message is None and found.calls > 0


def test_the_budget_bounds_the_calls_and_the_search_is_deterministic():
    x = np.arange(8 * 100000, dtype=np.float64).reshape(8, 100000)

    def run(budget):
        fails, calls = recorder(lambda case, inputs: inputs[0].size >= 777 and inputs[0].size % 3 == 0)
        return shrink(UNARY, Case(["float64"], [x.shape]), [x], fails, budget), calls

    few, calls = run(5)
    assert len(calls) == few.calls == 5
    first, again = run(50)[0], run(50)[0]
    assert first.case == again.case and first.calls == again.calls and first.case.size < x.size
