"""com.microsoft's float contrib kernels (FusedMatMul, the GELU family, skip layer norms) against
onnxruntime, which implements them."""
import numpy as np
import pytest

from tests.support.exact_check import check

MS = "com.microsoft"
RNG = np.random.default_rng(0)
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def reseed():
    """Each test draws the same data whichever tests run before it."""
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state


def data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("sa, sb, attrs", [
    ((5, 7), (7, 9), {}),
    ((7, 5), (7, 9), {"transA": 1, "alpha": 0.5}),
    ((2, 3, 5, 8), (2, 3, 6, 8), {"transB": 1, "alpha": 0.125}),
    ((4, 5, 7), (9, 7), {"transB": 1}),
    ((2, 7, 5), (1, 7, 3), {"transA": 1}),
    ((7,), (7, 4), {"alpha": 2.0}),
])
def test_fused_matmul(kernels, sa, sb, attrs):
    check(kernels, "FusedMatMul", [data(*sa), data(*sb)], attrs, domain=MS, **TOL)


def test_gelu_family(kernels):
    x, bias = data(3, 5, 16) * 3, data(16)
    check(kernels, "BiasGelu", [x, bias], domain=MS, **TOL)
    check(kernels, "FastGelu", [x, bias], domain=MS, **TOL)
    check(kernels, "FastGelu", [x], domain=MS, **TOL)
    check(kernels, "QuickGelu", [x], {"alpha": 1.5}, domain=MS, **TOL)
    check(kernels, "Gelu", [x], domain=MS, **TOL)


@pytest.mark.parametrize("skip_shape", [(2, 5, 32), (5, 32), (1, 5, 32)])
def test_skip_layer_normalization(kernels, skip_shape):
    x, skip = data(2, 5, 32), data(*skip_shape)
    gamma, beta, bias = 1 + data(32) * 0.1, data(32), data(32)
    check(kernels, "SkipLayerNormalization", [x, skip, gamma, beta, bias], {"epsilon": 1e-5}, domain=MS,
          num_outputs=1, **TOL)
    check(kernels, "SkipLayerNormalization", [x, skip, gamma], domain=MS, **TOL)
    check(kernels, "SkipSimplifiedLayerNormalization", [x, skip, gamma, bias], {"epsilon": 1e-6}, domain=MS, **TOL)


def test_skip_layer_normalization_sum_output(kernels):
    x, skip, gamma, beta, bias = data(2, 4, 16), data(2, 4, 16), data(16), data(16), data(16)
    norm = kernels.op("SkipLayerNormalization", domain=MS)
    y, mean, inv, total = norm(x, skip, gamma, beta, bias, epsilon=1e-5)
    np.testing.assert_allclose(total, x + skip + bias, rtol=1e-6)
    np.testing.assert_allclose(mean[..., 0], total.mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv[..., 0], 1 / np.sqrt(total.var(-1) + 1e-5), rtol=1e-4)


def test_contrib_errors_name_the_input(kernels):
    with pytest.raises(Exception, match="gamma"):
        kernels.op("SkipLayerNormalization", domain=MS)(data(2, 3, 8), data(2, 3, 8), data(7))
    with pytest.raises(Exception, match="inner dimensions differ"):
        kernels.op("FusedMatMul", domain=MS)(data(2, 3), data(2, 3))
    with pytest.raises(Exception, match="transBatch"):
        kernels.op("FusedMatMul", domain=MS)(data(2, 3), data(3, 2), transBatchA=1)


def test_contrib_range_trilu_and_nhwc_max_pool(kernels):
    # onnxruntime's contrib Range sums delta step by step, opforge's computes start + i * delta
    check(kernels, "Range", [np.float32(1.5), np.float32(9), np.float32(0.7)], domain=MS, rtol=1e-6, atol=1e-6)
    check(kernels, "Range", [np.int64(10), np.int64(-3), None], domain=MS)
    x = data(2, 5, 6)
    check(kernels, "Trilu", [x, np.int64(1)], {"upper": 0}, domain=MS)
    check(kernels, "Trilu", [x], domain=MS)
    for dtype in (np.uint8, np.int8):
        q = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (2, 9, 8, 5)).astype(dtype)
        check(kernels, "NhwcMaxPool", [q], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
              domain=MS)
        check(kernels, "NhwcMaxPool", [q], {"kernel_shape": [2, 3], "dilations": [2, 1]}, domain=MS)


@pytest.mark.parametrize("bits, k, zero_points", [(4, 64, "packed"), (4, 80, None), (4, 48, "float"), (8, 48, "packed"), (2, 64, "packed")])
def test_matmul_nbits(kernels, bits, k, zero_points):
    n, block = 24, 16
    blocks = (k + block - 1) // block
    b = RNG.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8)
    scales = RNG.uniform(0.01, 0.05, n * blocks).astype(np.float32)
    per_byte = 8 // bits
    zp = {"packed": RNG.integers(0, 256, n * ((blocks + per_byte - 1) // per_byte)).astype(np.uint8),
          "float": RNG.uniform(100, 150, n * blocks).astype(np.float32), None: None}[zero_points]
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block}
    a = data(3, 5, k)
    check(kernels, "MatMulNBits", [a, b, scales, zp], attrs, domain=MS, rtol=1e-4, atol=1e-4)
    check(kernels, "MatMulNBits", [a, b, scales, zp, None, data(n)], attrs, domain=MS, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["bsd", "bnsd"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [16, 12])
def test_rotary_embedding(kernels, layout, interleaved, rotary_dim):
    batch, seq, heads, head = 2, 5, 3, 16
    x = data(batch, seq, heads * head) if layout == "bsd" else data(batch, heads, seq, head)
    half = rotary_dim // 2
    angles = np.arange(12)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    attrs = {"interleaved": interleaved, "num_heads": heads}
    if rotary_dim < head:
        attrs["rotary_embedding_dim"] = rotary_dim
    positions = RNG.integers(0, 12, (batch, seq)).astype(np.int64)
    check(kernels, "RotaryEmbedding", [x, positions, cos, sin], attrs, domain=MS, **TOL)
    check(kernels, "RotaryEmbedding", [x, np.array([3], np.int64), cos, sin], attrs, domain=MS, **TOL)


@pytest.mark.parametrize("extras", ["plain", "bias_and_masks", "causal"])
def test_multi_head_attention(kernels, extras):
    batch, s, t, heads, h = 2, 5, 7, 4, 8
    q, k, v = data(batch, s, heads * h), data(batch, t, heads * h), data(batch, t, heads * 6)
    inputs, attrs = [q, k, v], {"num_heads": heads}
    if extras == "bias_and_masks":
        mask = np.ones((batch, t), np.int32)
        mask[0, -2:] = 0
        inputs += [data(2 * heads * h + heads * 6), mask, data(1, heads, s, t)]
    if extras == "causal":  # self-attention lengths: onnxruntime's rows differ for causal cross-attention
        k, v = data(batch, s, heads * h), data(batch, s, heads * 6)
        inputs, attrs = [q, k, v], attrs | {"unidirectional": 1, "scale": 0.3}
    check(kernels, "MultiHeadAttention", inputs, attrs, domain=MS, num_outputs=1, **TOL)
    got = kernels.op("MultiHeadAttention", domain=MS)(q, k, v, num_heads=heads)
    assert got[0].shape == (batch, s, heads * 6) if isinstance(got, tuple) else got.shape == (batch, s, heads * 6)


@pytest.mark.parametrize("masked, causal", [(False, 0), (True, 0), (False, 1)])
def test_attention(kernels, masked, causal):
    batch, s, c, heads, h = 2, 6, 12, 3, 4
    x, w, bias = data(batch, s, c), data(c, 3 * heads * h) * 0.5, data(3 * heads * h)
    mask = None
    if masked:
        mask = np.ones((batch, s), np.int32)
        mask[1, -3:] = 0
    check(kernels, "Attention", [x, w, bias, mask], {"num_heads": heads, "unidirectional": causal}, domain=MS, **TOL)
