"""Transformer kernels (Attention-23, RMSNormalization, SimplifiedLayerNormalization, RotaryEmbedding,
SwiGLU) checked against onnxruntime, or numpy where onnxruntime has no kernel."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)


def normal(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def ours_vs_onnxruntime(kernels, op, inputs, attrs, opset, outs=1, rtol=1e-4, atol=1e-5):
    want = run_onnxruntime(op, inputs, attrs, opset, outs)
    got = kernels.op(op, domain="", version=opset)(*inputs, **attrs)
    got = list(got) if isinstance(got, tuple) else [got]
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol, atol, f"{op} output {k}")
        assert_would_catch(g, w, rtol, atol, f"{op} output {k}")
    return got


def numpy_attention(q, k, v, bias, group):
    """softmax(q k^T / sqrt(d) + bias) v over (B, H, S, D), KV heads repeated `group` times."""
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_attention_with_bool_mask_matches_onnxruntime(kernels):
    q, k, v = normal(2, 8, 12, 32), normal(2, 8, 20, 32), normal(2, 8, 20, 32)
    mask = RNG.random((2, 1, 12, 20)) > 0.3
    mask[..., 0] = True
    ours_vs_onnxruntime(kernels, "Attention", [q, k, v, mask], {}, 23)


def test_attention_gqa_causal_cache_matches_onnxruntime(kernels):
    """A decoder step as exported models run it: 3-D Q/K/V, 8 query heads over 2 KV heads, a past
    cache, a float mask and is_causal; Y and the present cache are compared."""
    q, k, v = normal(2, 5, 8 * 16), normal(2, 5, 2 * 16), normal(2, 5, 2 * 16)
    past_k, past_v = normal(2, 2, 11, 16), normal(2, 2, 11, 16)
    mask = np.where(RNG.random((5, 16)) > 0.2, 0, -np.inf).astype(np.float32)
    mask[:, 0] = 0
    inputs = [q, k, v, mask, past_k, past_v]
    ours_vs_onnxruntime(kernels, "Attention", inputs, {"q_num_heads": 8, "kv_num_heads": 2, "is_causal": 1}, 23,
                        outs=3)


def test_attention_long_sequence_against_numpy(kernels):
    """More queries than one 64-row block and a key count past the vector width, with GQA."""
    q, k, v = normal(1, 4, 150, 64), normal(1, 2, 150, 64), normal(1, 2, 150, 64)
    causal = np.triu(np.full((150, 150), -np.inf), 1)
    got = kernels.op("Attention", domain="", version=23)(q, k, v, is_causal=1)
    want = numpy_attention(q, k, v, causal, 2).astype(np.float32)
    assert_close(got[0], want, 1e-4, 1e-5, "Attention Y")
    assert_would_catch(got[0], want, 1e-4, 1e-5, "Attention Y")


def test_attention_fully_masked_row_is_zero(kernels):
    q, k, v = normal(1, 2, 3, 8), normal(1, 2, 4, 8), normal(1, 2, 4, 8)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    y = kernels.op("Attention", domain="", version=23)(q, k, v, mask)[0]
    assert np.all(y[:, :, 1] == 0) and np.all(np.isfinite(y))


def test_attention_bad_inputs_give_clear_errors(kernels):
    attention = kernels.op("Attention", domain="", version=23)
    q, k, v = normal(1, 6, 3, 8), normal(1, 4, 3, 8), normal(1, 4, 3, 8)
    with pytest.raises(opforge.OpError, match="not a multiple"):
        attention(q, k, v)
    with pytest.raises(opforge.OpError, match="q_num_heads"):
        attention(normal(1, 3, 16), normal(1, 3, 16), normal(1, 3, 16))
    with pytest.raises(opforge.OpError, match="attn_mask"):
        attention(q[:, :4], k, v, np.zeros((2, 3, 3), np.float32))
    with pytest.raises(opforge.OpError, match="qk_matmul_output_mode"):
        attention(q[:, :4], k, v, qk_matmul_output_mode=7)


@pytest.mark.parametrize("axis,scale_shape", [(-1, (64,)), (1, (6, 64)), (0, (1, 64))])
def test_rms_normalization_matches_onnxruntime(kernels, axis, scale_shape):
    x = normal(3, 6, 64) * 3 + 1
    ours_vs_onnxruntime(kernels, "RMSNormalization", [x, normal(*scale_shape)], {"axis": axis, "epsilon": 1e-6}, 23)


@pytest.mark.parametrize("axis,scale_shape", [(-1, (64,)), (1, (6, 64))])
def test_simplified_layer_normalization_matches_onnxruntime(kernels, axis, scale_shape):
    """onnxruntime's RMS norm in the default domain (no ONNX schema), with its inv_std_var output."""
    x = normal(3, 6, 64) * 3 + 1
    y, inv = ours_vs_onnxruntime(kernels, "SimplifiedLayerNormalization", [x, normal(*scale_shape)],
                                 {"axis": axis, "epsilon": 1e-6}, 17, outs=2, rtol=1e-5, atol=1e-6)
    assert inv.dtype == np.float32 and inv.shape == x.shape[:axis % 3] + (1,) * (3 - axis % 3)


@pytest.mark.parametrize("dtype", [np.float16, "mixed"])
def test_simplified_layer_normalization_float16(kernels, dtype):
    """float16 X and scale, or float16 X with a float scale (Y takes the scale's type)."""
    x = normal(4, 96, dtype=np.float16)
    scale = normal(96, dtype=np.float32 if dtype == "mixed" else np.float16)
    ours_vs_onnxruntime(kernels, "SimplifiedLayerNormalization", [x, scale], {"epsilon": 1e-5}, 17, outs=2,
                        rtol=5e-4, atol=1e-4)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_matches_onnxruntime(kernels, interleaved):
    x = normal(2, 4, 10, 32)
    angles = np.arange(64)[:, None] * 10000.0 ** (-np.arange(8) / 8)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    positions = RNG.integers(0, 64, (2, 10)).astype(np.int64)
    ours_vs_onnxruntime(kernels, "RotaryEmbedding", [x, cos, sin, positions],
                        {"interleaved": interleaved, "rotary_embedding_dim": 16}, 23)


def test_rotary_embedding_position_out_of_range(kernels):
    cos = np.ones((4, 4), np.float32)
    with pytest.raises(opforge.OpError, match="position_ids value 9"):
        kernels.op("RotaryEmbedding", domain="", version=23)(normal(1, 2, 3, 8), cos, cos,
                                                            np.array([[0, 1, 9]], np.int64))


def test_swiglu_against_numpy(kernels):
    a, b = normal(4, 96), normal(4, 96)
    got = kernels.op("SwiGLU", domain="", version=28)(a, b, alpha=1.702)
    want = (a / (1 + np.exp(-1.702 * a.astype(np.float64))) * b).astype(np.float32)
    assert_close(got, want, 1e-5, 1e-6, "SwiGLU")
    assert_would_catch(got, want, 1e-5, 1e-6, "SwiGLU")
