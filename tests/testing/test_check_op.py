"""opforge.testing.check_op: each deliberately broken op caught with a message that points at
its bug, its failing case shrunk; correct ops (the examples', a share of the built-in kernels)
pass over many seeds, in opforge and in onnxruntime through their onnxruntime library."""
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
    assert "(float64[]) X=" in str(report)   # a case of few elements shows its input's values


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
    for op, reference in ((examples.leaky_relu, leaky_relu), (examples.add_n, lambda *xs: sum(xs[1:], xs[0]))):
        report = check_op(op, reference, onnxruntime=True)
        # every case the op took ran in onnxruntime too (float16, scalars, empty and strided inputs, attributes)
        assert report.runs["onnxruntime"] == report.runs["compute"] > 40 and not report.ort_skipped
    def softmax(x, temperature):
        e = np.exp((x - x.max(axis=-1, keepdims=True)) / temperature) if x.size else x
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype) if x.size else x.copy()
    # rows of up to 262147 floats summed one after another in float32: n * eps ~ 1.6e-2 at
    # worst, a few 1e-4 as rounding errors go
    report = check_op(examples.softmax_rows, softmax, atol=1e-6, rtol=2e-3, onnxruntime=True)
    assert report.refused   # temperature 0 and -2.5 are refused by infer
    assert report.runs["onnxruntime"] == report.runs["compute"]


def test_a_result_onnxruntime_disagrees_on_is_reported(broken, monkeypatch):
    from opforge.testing import ort_check

    real = ort_check.OrtRunner.run

    def one_element_off(self, case, inputs, declared):
        results = real(self, case, inputs, declared)
        if case.dtype == "float64" and case.shapes == [(7,)]:
            results[0] = results[0].copy()
            results[0][3] += 0.5
        return results

    monkeypatch.setattr(ort_check.OrtRunner, "run", one_element_off)
    report = check_op(broken.scale, twice, onnxruntime=True, raises=False)
    assert [case.describe() for case, _ in report.failures["onnxruntime"]] == ["(float64[7])"]
    message = failure(report, "onnxruntime")
    assert "onnxruntime's results differ from opforge's" in message
    assert "output 'Y': 1 of 7 elements beyond" in message and "worst at [3]" in message
    assert report.ok is False and not report.failures.get("values")   # opforge's own results are right

    def raising(self, case, inputs, declared):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : scale: no kernel")

    monkeypatch.setattr(ort_check.OrtRunner, "run", raising)
    report = check_op(broken.scale, twice, onnxruntime=True, raises=False)
    assert "onnxruntime raised where opforge computed: RuntimeError" in failure(report, "onnxruntime")


def test_cases_onnxruntime_cannot_express_are_skipped_not_failed(examples):
    from opforge.testing.cases import Case
    from opforge.testing.ort_check import OrtRunner

    t = np.arange(3, dtype=np.float32)
    report = check_op(examples.attribute_kinds, attrs={"t": [t], "tensors": [[t, t]]}, onnxruntime=True)
    skipped = report.ort_skipped
    assert skipped and {reason for _, reason in skipped} == {"attributes of kind tensors"}
    assert report.runs["onnxruntime"] == report.runs["compute"] - len(skipped) > 0   # tensor, ints... ran there
    assert f"onnxruntime skipped {len(skipped)} case(s) it cannot express" in str(report)
    runner = OrtRunner("unused.so", examples.leaky_relu.schema, 1)
    assert runner.cannot_run(Case(["bfloat16"], [(3,)])) == "dtype bfloat16"
    assert runner.cannot_run(Case(["float16"], [(3,)])) is None


def test_onnxruntime_none_true_false_or_a_path(examples):
    handle = examples.leaky_relu.handle   # a bare handle: no library to build an onnxruntime one from
    report = check_op(handle, threads=2)
    assert "the op's library was not built from sources" in report.ort_unavailable
    assert "not compared with onnxruntime" in str(report) and not report.runs.get("onnxruntime")
    with pytest.raises(ValueError, match="onnxruntime=True"):
        check_op(handle, onnxruntime=True, threads=2)
    report = check_op(handle, onnxruntime=examples.onnxruntime_library(), threads=2)
    assert report.runs["onnxruntime"] == report.runs["compute"]
    report = check_op(examples.leaky_relu, onnxruntime=False, threads=2)
    assert not report.runs.get("onnxruntime") and report.ort_unavailable is None


def test_a_bug_from_1024_elements_on_is_shrunk_to_its_smallest_case(broken):
    report = check_op(broken.blocked_tail, twice, seed=3, raises=False)
    start, _ = report.smallest("values")
    shrunk = report.shrunk["values"]
    assert start.shapes == [(3, 24001)] and shrunk.case.shapes == [(1025,)] and shrunk.calls <= 50
    x, = shrunk.inputs
    assert not np.allclose(broken.blocked_tail(x), 2 * x)   # it still fails, on values of the original
    assert "(float32[1025]); shrunk from (float32[3, 24001]) in" in str(report)
    assert not report.failures.get("onnxruntime")   # the same bug in onnxruntime: they agree
    again = check_op(broken.blocked_tail, twice, seed=3, raises=False).shrunk["values"]
    assert again.case == shrunk.case and np.array_equal(again.inputs[0], x)


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


TWICE = r"""
#include <opforge/op.h>
static void twice(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = 2.f * x[i];
}
OPFORGE_OP(twice).domain("com.edited").input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0)
    .compute(twice);
"""


def test_a_library_edited_since_its_load_is_not_compared_in_onnxruntime(tmp_path):
    source = tmp_path / "edited.cpp"
    source.write_text(TWICE)
    library = opforge.CustomOpBuilder("edited", [source]).load()
    assert check_op(library.twice, twice, onnxruntime=True, threads=2).runs["onnxruntime"] > 0
    source.write_text(TWICE.replace("2.f * x[i]", "3.f * x[i]"))   # not reloaded: the loaded op still doubles
    report = check_op(library.twice, twice, threads=2)
    assert "changed since it was loaded" in report.ort_unavailable and not report.runs.get("onnxruntime")
    with pytest.raises(ValueError, match="reload"):
        check_op(library.twice, twice, onnxruntime=True, threads=2)
    library.reload()
    assert check_op(library.twice, lambda x: 3 * x, onnxruntime=True, threads=2).runs["onnxruntime"] > 0
