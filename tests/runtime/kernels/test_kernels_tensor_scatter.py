"""TensorScatter (a KV cache's update) checked against onnxruntime on random caches."""
import numpy as np
import pytest

import opforge
from kernel_check import run_onnxruntime
from numeric import assert_close

RNG = np.random.default_rng(0)


def scatter(kernels, inputs, attrs):
    return kernels.op("TensorScatter", domain="", version=24)(*inputs, **attrs)


@pytest.mark.parametrize("shape, steps, axis", [
    ((2, 3, 8, 4), 3, -2),     # (batch, heads, max sequence, head size): the default axis
    ((3, 10, 6), 1, 1),        # a 3-D cache, one decode step
    ((2, 7, 3, 5), 7, 1),      # a prefill that fills the whole sequence axis
    ((2, 2, 3, 6), 2, -1),     # the last axis
])
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_matches_onnxruntime(kernels, shape, steps, axis, mode):
    cache = RNG.standard_normal(shape).astype(np.float32)
    update_shape = list(shape)
    update_shape[axis] = steps
    update = RNG.standard_normal(update_shape).astype(np.float32)
    capacity = shape[axis]
    high = capacity if mode == "circular" else capacity - steps + 1
    indices = RNG.integers(0, high, shape[0]).astype(np.int64)
    attrs = {"mode": mode, "axis": axis}
    want, = run_onnxruntime("TensorScatter", [cache, update, indices], attrs, opset=24)
    got = scatter(kernels, [cache, update, indices], attrs)
    assert_close(got, want, 0, 0, f"TensorScatter {mode} {shape}")
    assert not np.array_equal(got, cache)


def test_tensor_scatter_without_indices_writes_at_the_start(kernels):
    cache = np.zeros((2, 5, 3), np.int64)
    update = RNG.integers(1, 9, (2, 2, 3))
    got = scatter(kernels, [cache, update], {"axis": 1})
    want, = run_onnxruntime("TensorScatter", [cache, update], {"axis": 1}, opset=24)
    assert_close(got, want, 0, 0, "TensorScatter int64")
    assert np.array_equal(got[:, :2], update) and not got[:, 2:].any()


def test_tensor_scatter_refuses_a_linear_write_past_the_cache(kernels):
    cache, update = np.zeros((1, 4, 2), np.float32), np.ones((1, 2, 2), np.float32)
    with pytest.raises(opforge.OpError, match="past the cache"):
        scatter(kernels, [cache, update, np.array([3])], {"axis": 1})


def test_tensor_scatter_refuses_the_batch_axis_and_misfit_updates(kernels):
    cache = np.zeros((2, 4, 2), np.float32)
    with pytest.raises(opforge.OpError, match="batch axis"):
        scatter(kernels, [cache, np.ones((1, 4, 2), np.float32)], {"axis": 0})
    with pytest.raises(opforge.OpError, match="does not fit"):
        scatter(kernels, [cache, np.ones((2, 2, 3), np.float32)], {"axis": 1})
