"""Resize and Upsample kernels checked against onnxruntime on image-like shapes."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 13, 18)).astype(np.float32)
NO_ROI = np.array([], np.float32)


def compare(kernels, inputs, attrs, opset=19, rtol=1e-5, atol=1e-5, prove=True):
    want = run_onnxruntime("Resize", inputs, attrs, opset)[0]
    got = kernels.op("Resize", domain="", version=opset)(*inputs, **attrs)
    assert_close(got, want, rtol, atol, f"Resize {attrs}")
    if prove:
        assert_would_catch(got, want, rtol, atol, f"Resize {attrs}")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
def test_resize_scales_up_and_down(kernels, mode, coordinates):
    # Scales that give whole output lengths: where scale * length is fractional, align_corners
    # divides by it (the spec, onnx's reference) and onnxruntime by the rounded-down length.
    for scales in ([1, 1, 2.0, 3.0], [1, 1, 10 / 13, 0.5]):
        compare(kernels, [X, NO_ROI, np.array(scales, np.float32)],
                {"mode": mode, "coordinate_transformation_mode": coordinates})


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_with_sizes(kernels, nearest_mode):
    compare(kernels, [X, NO_ROI, None, np.array([2, 3, 31, 9], np.int64)],
            {"mode": "nearest", "nearest_mode": nearest_mode})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_shrinking(kernels, mode):
    compare(kernels, [X, NO_ROI, None, np.array([2, 3, 5, 6], np.int64)], {"mode": mode, "antialias": 1})


def test_resize_cubic_exclude_outside_and_axes(kernels):
    compare(kernels, [X, NO_ROI, np.array([1.7, 0.8], np.float32)],
            {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5, "axes": [3, 2]})


def test_resize_tf_crop_and_resize_extrapolates(kernels):
    roi = np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3], np.float32)
    compare(kernels, [X, roi, None, np.array([2, 3, 8, 11], np.int64)],
            {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 5.0})


def test_resize_uint8_linear_rounds(kernels):
    x = RNG.integers(0, 256, (1, 3, 9, 10)).astype(np.uint8)
    compare(kernels, [x, NO_ROI, np.array([1, 1, 1.5, 2.5], np.float32)], {"mode": "linear"}, atol=1, prove=False)


def test_upsample_and_resize10_nearest_and_linear(kernels):
    scales = np.array([1, 1, 2, 3], np.float32)
    for mode in ("nearest", "linear"):
        want = run_onnxruntime("Upsample", [X, scales], {"mode": mode}, 9)[0]
        got = kernels.op("Upsample", domain="", version=9)(X, scales, mode=mode)
        assert_close(got, want, 1e-5, 1e-5, f"Upsample {mode}")
        got10 = kernels.op("Resize", domain="", version=10)(X, scales, mode=mode)
        assert_close(got10, want, 1e-5, 1e-5, f"Resize-10 {mode}")


def test_resize_bad_inputs_give_clear_errors(kernels):
    resize = kernels.op("Resize", domain="", version=19)
    with pytest.raises(opforge.OpError, match="exactly one"):
        resize(X, NO_ROI)
    with pytest.raises(opforge.OpError, match="'scales' has 2 values"):
        resize(X, NO_ROI, np.array([2, 2], np.float32))
    with pytest.raises(opforge.OpError, match="mode"):
        resize(X, NO_ROI, np.array([1, 1, 2, 2], np.float32), mode="bilateral")
    with pytest.raises(opforge.OpError, match="antialias"):
        resize(X, NO_ROI, np.array([1, 1, 2, 2], np.float32), antialias=1)
