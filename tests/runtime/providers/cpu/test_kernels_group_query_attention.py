"""com.microsoft's GroupQueryAttention against onnxruntime's CPU kernel: prompts and token
generation with a key/value cache, grouped heads, packed QKV, rotary embedding, masking options."""
import numpy as np
import pytest

from tests.support.exact_check import check, onnxruntime_outputs
from tests.support.numeric import assert_close, assert_would_catch

MS = "com.microsoft"
RNG = np.random.default_rng(0)
# Sums of 16 to 64 products in float32, then a softmax: onnxruntime's flash and GEMM paths and
# ours round differently by a few 1e-7.
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def reseed():
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state


def data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def rotary_caches(positions=32, half=8):
    angles = np.arange(positions)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def gqa(kernels, inputs, attrs):
    """Checks output, present_key and present_value against onnxruntime."""
    inputs = list(inputs)
    while inputs[-1] is None:
        inputs.pop()
    return check(kernels, "GroupQueryAttention", inputs, attrs, domain=MS, num_outputs=3, **TOL)


def lengths(seqlens, total):
    return np.array(seqlens, np.int32), np.array(total, np.int32)


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 4), (6, 1)])
@pytest.mark.parametrize("extra", [{}, {"scale": 0.3}, {"softcap": 1.5}, {"local_window_size": 3},
                                   {"smooth_softmax": 1}, {"causal": 0}])
def test_prompt(kernels, heads, kv_heads, extra):
    batch, seq, head = 2, 7, 16
    q, k, v = data(batch, seq, heads * head), data(batch, seq, kv_heads * head), data(batch, seq, kv_heads * head)
    seqlens, total = lengths([seq - 1] * batch, seq)
    gqa(kernels, [q, k, v, None, None, seqlens, total], {"num_heads": heads, "kv_num_heads": kv_heads} | extra)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("head, half", [(16, 8), (32, 8)])
def test_packed_prompt_with_rotary(kernels, interleaved, head, half):
    batch, seq, heads, kv_heads = 2, 6, 4, 2
    qkv = data(batch, seq, (heads + 2 * kv_heads) * head)
    cos, sin = rotary_caches(half=half)
    seqlens, total = lengths([seq - 1] * batch, seq)
    gqa(kernels, [qkv, None, None, None, None, seqlens, total, cos, sin],
        {"num_heads": heads, "kv_num_heads": kv_heads, "do_rotary": 1, "rotary_interleaved": interleaved})


def test_right_padded_prompt(kernels):
    """A batch of prompts of different lengths, right-padded: padded rows attend to the whole
    prompt, as onnxruntime's do; their cache rows hold the padding. With a local window
    onnxruntime leaves the padded rows unspecified (its documentation says so), so only the
    valid rows are compared there."""
    batch, seq, heads, kv_heads, head = 3, 6, 4, 2, 16
    q, k, v = data(batch, seq, heads * head), data(batch, seq, kv_heads * head), data(batch, seq, kv_heads * head)
    cos, sin = rotary_caches()
    seqlens, total = lengths([5, 2, 3], seq)
    inputs, attrs = [q, k, v, None, None, seqlens, total, cos, sin], {"num_heads": heads, "kv_num_heads": kv_heads,
                                                                      "do_rotary": 1}
    gqa(kernels, inputs, attrs)
    attrs["local_window_size"] = 2
    want = onnxruntime_outputs("GroupQueryAttention", inputs, attrs, domain=MS, num_outputs=3)
    got = kernels.op("GroupQueryAttention", domain=MS)(*inputs, **attrs)
    valid = [np.concatenate([x[b, :n + 1] for b, n in enumerate(seqlens)]) for x in (got[0], want[0])]
    assert_close(*valid, TOL["rtol"], TOL["atol"], "valid rows")
    assert_would_catch(*valid, TOL["rtol"], TOL["atol"], "valid rows")
    for g, w in zip(got[1:], want[1:]):
        assert_close(g, w, TOL["rtol"], TOL["atol"], "present")


@pytest.mark.parametrize("buffer", ["exact", "shared"])
@pytest.mark.parametrize("extra", [{}, {"do_rotary": 1}, {"local_window_size": 4, "softcap": 2.0},
                                   {"smooth_softmax": 1, "scale": 0.2}])
def test_token_generation(kernels, buffer, extra):
    """One new token per row over a cache of past rows (a buffer of the past's own length, or one
    of the longest length, shared as onnxruntime's past_present_share_buffer writes it)."""
    batch, heads, kv_heads, head = 3, 4, 2, 16
    past_len = 9 if buffer == "exact" else 16
    q, k, v = data(batch, 1, heads * head), data(batch, 1, kv_heads * head), data(batch, 1, kv_heads * head)
    past_k, past_v = data(batch, kv_heads, past_len, head), data(batch, kv_heads, past_len, head)
    seqlens, total = lengths([9, 4, 6], 10)
    cos, sin = rotary_caches() if extra.get("do_rotary") else (None, None)
    gqa(kernels, [q, k, v, past_k, past_v, seqlens, total, cos, sin],
        {"num_heads": heads, "kv_num_heads": kv_heads} | extra)


def test_token_generation_with_position_ids_bias_and_sinks(kernels):
    batch, heads, kv_heads, head = 2, 4, 2, 16
    q, k, v = data(batch, 1, heads * head), data(batch, 1, kv_heads * head), data(batch, 1, kv_heads * head)
    past_k, past_v = data(batch, kv_heads, 6, head), data(batch, kv_heads, 6, head)
    seqlens, total = lengths([6, 4], 7)
    cos, sin = rotary_caches()
    positions = np.array([[11], [3]], np.int64)
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads, "do_rotary": 1}
    gqa(kernels, [q, k, v, past_k, past_v, seqlens, total, cos, sin, positions, data(batch, heads, 1, 7), data(heads)],
        attrs)
    gqa(kernels, [q, k, v, past_k, past_v, seqlens, total, None, None, None, data(1, 1, 1, 7)],
        {"num_heads": heads, "kv_num_heads": kv_heads, "softcap": 1.0})


def test_prompt_chunk_after_a_past(kernels):
    """A second prompt chunk (several new tokens over a cache), onnxruntime's interactive case."""
    heads, kv_heads, head = 4, 1, 32
    q, k, v = data(1, 3, heads * head), data(1, 3, kv_heads * head), data(1, 3, kv_heads * head)
    past_k, past_v = data(1, kv_heads, 5, head), data(1, kv_heads, 5, head)
    cos, sin = rotary_caches()
    seqlens, total = lengths([7], 8)
    gqa(kernels, [q, k, v, past_k, past_v, seqlens, total, cos, sin],
        {"num_heads": heads, "kv_num_heads": kv_heads, "do_rotary": 1, "rotary_interleaved": 1})


def test_refuses_what_it_does_not_compute(kernels):
    op = kernels.op("GroupQueryAttention", domain=MS)
    q, k, v = data(1, 2, 32), data(1, 2, 16), data(1, 2, 16)
    seqlens, total = lengths([1], 2)
    with pytest.raises(Exception, match="qk_output"):
        op(q, k, v, None, None, seqlens, total, num_heads=2, kv_num_heads=1, qk_output=1)
    with pytest.raises(Exception, match="multiple of kv_num_heads"):
        op(q, k, v, None, None, seqlens, total, num_heads=2, kv_num_heads=3)
    with pytest.raises(Exception, match="seqlens_k"):
        op(q, k, v, None, None, lengths([4], 2)[0], total, num_heads=2, kv_num_heads=1)
    with pytest.raises(Exception, match="needs causal"):
        op(q, k, v, None, None, seqlens, total, num_heads=2, kv_num_heads=1, causal=0, local_window_size=1)
