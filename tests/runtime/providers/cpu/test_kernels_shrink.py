"""Shrink checked against onnxruntime for every dtype it takes (onnx's reference for double,
where onnxruntime rounds through float)."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch, bump_one_element

RNG = np.random.default_rng(0)


def reference(x, attrs):
    proto = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([helper.make_node("Shrink", ["x"], ["y"], **attrs)], "shrink",
                              [helper.make_tensor_value_info("x", proto, x.shape)],
                              [helper.make_tensor_value_info("y", proto, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    return ReferenceEvaluator(model).run(None, {"x": x})


def shrink(kernels, x, **attrs):
    return kernels.op("Shrink", domain="", version=9)(x, **attrs)


@pytest.mark.parametrize("attrs", [{}, {"lambd": 1.5, "bias": 1.5}, {"lambd": 0.2, "bias": -0.7}])
def test_shrink_floats_match_onnxruntime(kernels, attrs):
    x = (3 * RNG.standard_normal((6, 50))).astype(np.float32)
    want, = run_onnxruntime("Shrink", [x], attrs, opset=9)
    got = shrink(kernels, x, **attrs)
    assert_close(got, want, 1e-6, 0, f"Shrink {attrs}")
    assert_would_catch(got, want, 1e-6, 0, "Shrink")
    with pytest.raises(AssertionError):
        assert_close(bump_one_element(got), want, 1e-6, 0, "tampered Shrink")


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_shrink_other_dtypes_match_onnxruntime(kernels, dtype):
    if np.issubdtype(dtype, np.integer):
        low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -20
        x = RNG.integers(low, 20, (4, 30)).astype(dtype)
        attrs = {"lambd": 3.0, "bias": 2.0}
    else:
        x = (3 * RNG.standard_normal((4, 30))).astype(dtype)
        attrs = {"lambd": 1.0, "bias": 0.25}
    want, = reference(x, attrs) if dtype == np.float64 else run_onnxruntime("Shrink", [x], attrs, opset=9)
    got = shrink(kernels, x, **attrs)
    assert_close(got, want, 1e-3 if dtype == np.float16 else 1e-12, 0, f"Shrink {np.dtype(dtype).name}")
    assert (got == 0).any() and (got != 0).any()
