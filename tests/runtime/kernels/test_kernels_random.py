"""Dropout and the random ops: seeded calls draw numpy's RandomState(seed) stream, as onnx's
reference does, so they are compared with numpy exactly; unseeded ones by their properties."""
import numpy as np
import pytest

from opforge.errors import OpError
from kernel_check import check

RNG = np.random.default_rng(5)


def test_dropout_inference_is_identity_with_a_full_mask(kernels):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    check(kernels, "Dropout", [x, np.array(0.3, np.float32)], opset=13, num_outputs=2, rtol=0, atol=0)
    check(kernels, "Dropout", [x], {"ratio": 0.4}, opset=7, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.8])
def test_training_dropout_draws_numpys_stream(kernels, dtype, ratio):
    x = RNG.standard_normal((4, 5, 6)).astype(dtype)
    r = np.array(ratio, dtype)
    y, mask = kernels.op("Dropout", domain="", version=13)(x, r, np.array(True), seed=42)
    keep = np.random.RandomState(42).uniform(0, 1.0, x.shape) >= r
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_array_equal(y, (keep * x * (dtype(1) / (dtype(1) - r))).astype(dtype))
    assert 0.5 * (1 - ratio) < keep.mean() < 1.5 * (1 - ratio)


def test_training_dropout_without_seed_varies_and_keeps_its_scale(kernels):
    x = np.ones((64, 64), np.float32)
    dropout = kernels.op("Dropout", domain="", version=13)
    y1, m1 = dropout(x, np.array(0.5, np.float32), np.array(True))
    y2, _ = dropout(x, np.array(0.5, np.float32), np.array(True))
    assert not np.array_equal(y1, y2)
    assert set(np.unique(y1)) <= {0.0, 2.0} and 0.4 < m1.mean() < 0.6
    np.testing.assert_array_equal(y1 != 0, m1)


def test_training_dropout_refuses_a_ratio_of_one(kernels):
    with pytest.raises(OpError, match="ratio must be in"):
        kernels.op("Dropout", domain="", version=13)(np.ones(3, np.float32), np.array(1.0, np.float32),
                                                     np.array(True))


@pytest.mark.parametrize("dtype", [1, 11, 10])
def test_random_uniform_seeded_matches_numpy(kernels, dtype):
    np_dtype = {1: np.float32, 11: np.float64, 10: np.float16}[dtype]
    got = kernels.op("RandomUniform", domain="", version=1)(shape=[3, 7], low=-2.0, high=3.0, seed=7.0, dtype=dtype)
    want = np.random.RandomState(7).rand(3, 7).astype(np_dtype)
    want *= np_dtype(3.0 - -2.0)
    want += np_dtype(-2.0)
    assert got.dtype == np_dtype
    np.testing.assert_array_equal(got, want)
    like = kernels.op("RandomUniformLike", domain="", version=1)(np.zeros((3, 7), np_dtype), low=-2.0, high=3.0,
                                                                  seed=7.0)
    np.testing.assert_array_equal(like, want)


def test_random_normal_seeded_matches_numpy(kernels):
    got = kernels.op("RandomNormal", domain="", version=1)(shape=[5, 9], mean=1.5, scale=0.5, seed=3.0,
                                                          dtype=11)
    want = 1.5 + 0.5 * np.random.RandomState(3).randn(5, 9)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    like = kernels.op("RandomNormalLike", domain="", version=1)(np.zeros((400, 50), np.float32), seed=1.0)
    assert like.dtype == np.float32 and abs(like.mean()) < 0.05 and abs(like.std() - 1) < 0.05


def test_bernoulli_draws_zeros_and_ones_at_the_given_rates(kernels):
    p = np.repeat(np.array([[0.0], [0.3], [1.0]], np.float32), 4000, axis=1)
    y = kernels.op("Bernoulli", domain="", version=15)(p, seed=2.0, dtype=7)
    assert y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
    assert y[0].sum() == 0 and y[2].sum() == 4000 and 0.27 < y[1].mean() < 0.33
    with pytest.raises(OpError, match="outside"):
        kernels.op("Bernoulli", domain="", version=15)(np.array([1.5], np.float32))
