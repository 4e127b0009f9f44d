"""GridSample and AffineGrid checked against onnxruntime."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(kernels, mode, padding, align):
    if mode == "cubic" and padding == "border":
        pytest.skip("onnxruntime clamps the coordinate before taking cubic taps; onnx's reference and "
                    "torch clamp each tap (the node tests cover it)")
    x = RNG.standard_normal((2, 3, 7, 9)).astype(np.float32)
    grid = RNG.uniform(-1.3, 1.3, (2, 5, 6, 2)).astype(np.float32)  # some points outside
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    want = run_onnxruntime("GridSample", [x, grid], attrs, 20)[0]
    got = kernels.op("GridSample", domain="", version=20)(x, grid, **attrs)
    assert_close(got, want, 1e-5, 1e-5, f"GridSample {attrs}")
    assert_would_catch(got, want, 1e-5, 1e-5, f"GridSample {attrs}")


def test_affine_grid_feeds_grid_sample_like_torch(kernels):
    """A spatial transformer: AffineGrid then GridSample, both compared with onnxruntime."""
    theta = np.array([[[0.9, -0.2, 0.1], [0.15, 1.1, -0.05]]] * 2, np.float32)
    size = np.array([2, 3, 8, 10], np.int64)
    for align in (0, 1):
        want = run_onnxruntime("AffineGrid", [theta, size], {"align_corners": align}, 20)[0]
        got = kernels.op("AffineGrid", domain="", version=20)(theta, size, align_corners=align)
        assert_close(got, want, 1e-5, 1e-6, "AffineGrid")
        assert_would_catch(got, want, 1e-5, 1e-6, "AffineGrid")


def test_grid_sample_bad_attributes(kernels):
    x, grid = np.ones((1, 1, 3, 3), np.float32), np.zeros((1, 2, 2, 2), np.float32)
    with pytest.raises(opforge.OpError, match="padding_mode"):
        kernels.op("GridSample", domain="", version=20)(x, grid, padding_mode="wrap")
    with pytest.raises(opforge.OpError, match="grid"):
        kernels.op("GridSample", domain="", version=20)(x, np.zeros((1, 2, 2, 3), np.float32))
