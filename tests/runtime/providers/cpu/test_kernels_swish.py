"""Swish (opset 24), the gate of SwiGLU, checked against onnxruntime and onnx's reference."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch, bump_one_element

RNG = np.random.default_rng(0)


def swish(kernels, x, **attrs):
    return kernels.op("Swish", domain="", version=24)(x, **attrs)


def reference(x, **attrs):
    node = helper.make_node("Swish", ["x"], ["y"], **attrs)
    proto = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "swish", [helper.make_tensor_value_info("x", proto, x.shape)],
                              [helper.make_tensor_value_info("y", proto, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("alpha", [1.0, 1.702, -0.5])
def test_swish_matches_onnxruntime(kernels, alpha):
    x = (4 * RNG.standard_normal((3, 7, 33))).astype(np.float32)
    want, = run_onnxruntime("Swish", [x], {"alpha": alpha}, opset=24)
    got = swish(kernels, x, alpha=alpha)
    assert_close(got, want, 1e-5, 1e-6, f"Swish alpha={alpha}")
    assert_would_catch(got, want, 1e-5, 1e-6, "Swish")
    with pytest.raises(AssertionError):
        assert_close(bump_one_element(got), want, 1e-5, 1e-6, "tampered Swish")


@pytest.mark.parametrize("dtype, rtol", [(np.float16, 1e-3), (np.float64, 1e-12)])
def test_swish_other_dtypes_match_reference(kernels, dtype, rtol):
    x = (4 * RNG.standard_normal((5, 40))).astype(dtype)
    got = swish(kernels, x, alpha=0.8)
    assert_close(got, reference(x, alpha=0.8), rtol, rtol, f"Swish {np.dtype(dtype).name}")
