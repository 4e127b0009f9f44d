"""ONNX backend node test cases run through InferenceSession, compared as onnx's runner does.

Run as a script (``python tests/runtime/test_conformance.py``) to list every failing case.
"""
from __future__ import annotations

import collections
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from opforge.runtime import InferenceSession, SessionOptions

# The cases expected to fail, by name: a run must fail exactly these, so a case that regresses
# fails the test even while another newly passes, and a case that starts passing is taken off
# the list. Bernoulli's expected outputs are one run's random draws (onnxruntime fails them too).
BERNOULLI = {"test_bernoulli", "test_bernoulli_double", "test_bernoulli_double_expanded",
             "test_bernoulli_expanded", "test_bernoulli_seed", "test_bernoulli_seed_expanded"}
EXPECTED_FAILURES = BERNOULLI

# With the reference fallback off, a case passes only if native kernels run every node of it:
# ImageDecoder runs on the reference provider only (it needs Pillow, a test dependency).
IMAGE_DECODER = {f"test_image_decoder_decode_{kind}" for kind in (
    "bmp_rgb", "jpeg2k_rgb", "jpeg_bgr", "jpeg_grayscale", "jpeg_rgb", "png_rgb", "pnm_rgb", "tiff_rgb", "webp_rgb")}
EXPECTED_NATIVE_FAILURES = BERNOULLI | IMAGE_DECODER

RTOL_DEFAULT = 1e-3
ATOL_DEFAULT = 1e-7


def collect_cases():
    """Every node test case onnx ships, generated in memory."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases()


def as_value(value):
    """Test data as the runtime takes it: TensorProtos become arrays, sequences lists."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return [as_value(v) for v in value]
    return value


def assert_similar(expected, actual, rtol: float, atol: float, where: str = "output") -> None:
    """onnx's backend comparison, extended to sequences and empty optionals (None)."""
    from onnx.backend.test.runner import Runner

    if expected is None or actual is None:
        assert expected is None and actual is None, f"{where}: expected {expected!r}, got {actual!r}"
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a sequence, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{where}: sequence length {len(actual)} != {len(expected)}"
        for index, (e, a) in enumerate(zip(expected, actual)):
            assert_similar(e, a, rtol, atol, f"{where}[{index}]")
    else:
        Runner.assert_similar_outputs([np.asarray(expected)], [np.asarray(actual)], rtol, atol)


def run_case(case, native_only: bool = False) -> None:
    """Run every data set of ``case`` twice (the second run goes through the compiled plan);
    raise on the first mismatch. ``native_only`` turns the reference fallback off."""
    options = SessionOptions()
    options.disable_reference_fallback = native_only
    session = InferenceSession(case.model, options)
    names = [value.name for value in case.model.graph.input]
    rtol = getattr(case, "rtol", RTOL_DEFAULT)
    atol = getattr(case, "atol", ATOL_DEFAULT)
    for inputs, expected in case.data_sets:
        feed = dict(zip(names, (as_value(v) for v in inputs)))
        for attempt in ("first run", "planned run"):
            actual = session.run(None, feed)
            assert session.memory_plan(feed) is not None, f"{attempt} left no compiled plan"
            assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
            for index, (e, a) in enumerate(zip(expected, actual)):
                assert_similar(as_value(e), a, rtol, atol, f"{attempt}, output {index}")


def run_all(cases, native_only: bool = False):
    """Return (passed count, {case name: 'ErrorType: message'} for the failures)."""
    failures = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            try:
                run_case(case, native_only)
            except Exception as exc:  # a failing case is counted, whatever it raised
                failures[case.name] = " ".join(f"{type(exc).__name__}: {exc}".split())
    return len(cases) - len(failures), failures


def test_node_conformance():
    cases = collect_cases()
    start = time.perf_counter()
    passed, failures = run_all(cases)
    elapsed = time.perf_counter() - start
    kinds = collections.Counter(message.split(":")[0] for message in failures.values())
    print(f"\nONNX node conformance: {passed}/{len(cases)} passed in {elapsed:.1f}s; "
          f"failures by kind: {dict(kinds)}")
    for name, message in sorted(failures.items()):
        print(f"  {name}: {message[:160]}")
    assert_fails_exactly(failures, EXPECTED_FAILURES)


def assert_fails_exactly(failures: dict, expected: set) -> None:
    """That the failing cases are ``expected``, naming those that newly fail or newly pass."""
    broken = {name: failures[name] for name in sorted(set(failures) - expected)}
    fixed = sorted(expected - set(failures))
    assert not broken, "cases that fail and are not expected to:\n" + "\n".join(
        f"  {name}: {message[:300]}" for name, message in broken.items())
    assert not fixed, f"cases that now pass: take them off the expected failures: {fixed}"


if __name__ == "__main__":
    import sys

    all_cases = collect_cases()
    t0 = time.perf_counter()
    count, failed = run_all(all_cases, native_only="--native-only" in sys.argv)
    print(f"{count}/{len(all_cases)} passed in {time.perf_counter() - t0:.1f}s")
    for case_name, text in sorted(failed.items()):
        print(f"{case_name}: {text[:300]}")


def test_node_conformance_native_kernels_only():
    cases = collect_cases()
    passed, failures = run_all(cases, native_only=True)
    print(f"\nONNX node conformance with native kernels only: {passed}/{len(cases)} passed")
    assert_fails_exactly(failures, EXPECTED_NATIVE_FAILURES)
