"""opforge.testing.check_op: each deliberately broken op caught with a message that points at
its bug; correct ops (the examples', a share of the built-in kernels) pass over many seeds."""
import functools
from pathlib import Path

import numpy as np
import pytest

import opforge
from opforge.testing import OpCheckError, check_op
from tests.support.helpers import EXAMPLES

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def broken(shared_cache):
    return opforge.CustomOpBuilder("broken_ops", [HERE / "broken_ops.cpp"]).load()


@pytest.fixture(scope="module")
def examples(shared_cache):
    return opforge.load_dir(EXAMPLES / "ops")


def twice(x):
    return 2 * x


def failure(report, check: str) -> str:
    """The message of `check`'s smallest failing case (the check must have failed)."""
    assert report.failures.get(check), f"{check} did not fail:\n{report}"
    return report.smallest(check)[1]


def test_off_by_one_loop_bound_is_a_write_past_the_output(broken):
    report = check_op(broken.off_by_one, twice, raises=False)
    assert "wrote 4 bytes past the end of output 'Y'" in failure(report, "output bounds")
    assert "a loop bound 1 element past the end?" in failure(report, "output bounds")


def test_unwritten_last_element_is_named(broken):
    report = check_op(broken.last_unwritten, twice, raises=False)
    message = failure(report, "unwritten")
    assert "the last element" in message and "never written" in message and "i < n - 1" in message
    assert not report.failures.get("output bounds")


def test_wrong_dtype_in_infer_is_set_against_the_reference(broken):
    report = check_op(broken.infer_dtype, twice, raises=False)
    message = failure(report, "infer vs reference")
    assert "infer declares float32" in message and "the reference gives float64" in message
    assert "[fails for float64 only; float32 pass]" in str(report)


def test_race_on_a_shared_buffer_is_caught_by_concurrent_calls(broken):
    report = check_op(broken.shared_buffer, twice, raises=False)
    assert "a static buffer?" in failure(report, "concurrent calls")


def test_write_past_the_workspace_is_caught(broken):
    report = check_op(broken.workspace_overrun, twice, raises=False)
    message = failure(report, "workspace bounds")
    assert "past the end of its workspace" in message and "as the op's workspace function declares" in message
    assert not report.failures.get("output bounds")


def test_wrong_result_for_one_dtype_only_says_which(broken):
    report = check_op(broken.float64_wrong, twice, raises=False)
    message = failure(report, "values")
    assert "max abs error 0.001" in message and "worst at" in message
    assert "[fails for float64 only; float32 pass]" in str(report)
    assert {case.dtype for case, _ in report.failures["values"]} == {"float64"}


def test_wrong_broadcast_fails_only_where_inputs_broadcast(broken):
    report = check_op(broken.add_bad_broadcast, lambda a, b: a + b, raises=False)
    failure(report, "values")
    assert "[fails only where inputs broadcast]" in str(report)
    assert all(case.broadcasts for case, _ in report.failures["values"])


def test_check_op_raises_with_the_table(broken):
    with pytest.raises(OpCheckError) as caught:
        opforge.testing.check_op(broken.off_by_one, twice)
    text = str(caught.value)
    assert "check_op(off_by_one, seed=0)" in text and "output bounds" in text and "FAIL" in text
    assert caught.value.report.failures["output bounds"]
    assert "<table>" in caught.value.report._repr_html_()


def test_a_correct_op_passes_many_seeds(broken):
    """(benchmarks/bench_check_op.py runs 100 seeds.)"""
    for seed in range(8):
        report = check_op(broken.scale, twice, seed=seed)
        assert report.ok and report.cases > 20


def test_example_ops_pass(examples):
    # alpha reaches the kernel as a float32; float16 computes in float32
    def leaky_relu(x, alpha):
        slope = np.float32(alpha)
        return np.where(x > 0, x, (x.astype(np.float64) * np.float64(slope)).astype(x.dtype))
    check_op(examples.leaky_relu, leaky_relu)
    check_op(examples.add_n, lambda *xs: sum(xs[1:], xs[0]))
    def softmax(x, temperature):
        e = np.exp((x - x.max(axis=-1, keepdims=True)) / temperature) if x.size else x
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype) if x.size else x.copy()
    # rows of up to 262147 floats summed one after another in float32: n * eps ~ 1.6e-2 at
    # worst, a few 1e-4 as rounding errors go
    report = check_op(examples.softmax_rows, softmax, atol=1e-6, rtol=2e-3)
    assert report.refused   # temperature 0 and -2.5 are refused by infer


def test_required_attribute_needs_values(examples):
    with pytest.raises(ValueError, match="attribute 't' is required"):
        check_op(examples.attribute_kinds)


def _in_float64(fn):
    """A reference computed in float64 and rounded to the input's dtype."""
    return lambda x: fn(x.astype(np.float64)).astype(x.dtype)


def _leaky_relu(x, alpha):
    return np.where(x < 0, (x.astype(np.float64) * np.float64(np.float32(alpha))).astype(x.dtype), x)


BUILTIN_REFERENCES = {
    "Relu": lambda x: np.maximum(x, 0),
    "Abs": np.abs,
    "Neg": np.negative,
    "Sigmoid": _in_float64(lambda x: 1 / (1 + np.exp(-x))),
    "Tanh": _in_float64(np.tanh),
    "Exp": _in_float64(np.exp),
    "Floor": np.floor,
    "LeakyRelu": _leaky_relu,
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Max": lambda *xs: functools.reduce(np.maximum, xs),
}


# dtypes to try where all of them would take long (a variadic op makes three times the cases)
BUILTIN_DTYPES = {"Max": ["float32", "float16", "int8", "uint64"]}


@pytest.mark.parametrize("name", sorted(BUILTIN_REFERENCES))
def test_builtin_kernels_pass(kernels, name):
    with np.errstate(over="ignore"):   # exp of float16 overflows to inf, as the kernel's does
        report = check_op(kernels.op(name), BUILTIN_REFERENCES[name], dtypes=BUILTIN_DTYPES.get(name), threads=4)
    assert report.ok and report.runs["values"] >= 20


def test_an_onnx_function_body_is_a_reference(broken):
    from onnx import helper

    body = helper.make_function("com.broken", "Twice", ["X"], ["Y"], [helper.make_node("Add", ["X", "X"], ["Y"])],
                                [helper.make_opsetid("", 17)])
    assert check_op(broken.scale, body, threads=2).ok
    report = check_op(broken.float64_wrong, body, threads=2, raises=False)
    assert {case.dtype for case, _ in report.failures["values"]} == {"float64"}
