"""The opset-27 state-carrying sequence kernels (LinearAttention, CausalConvWithState) checked
against onnxruntime and onnx's ReferenceEvaluator on random inputs."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch, bump_one_element

RNG = np.random.default_rng(0)


def normal(*shape, dtype=np.float32, scale=1.0, rng=None):
    return (scale * (rng or RNG).standard_normal(shape)).astype(dtype)


def run_reference(op, inputs, attrs, opset, outs):
    """onnx's ReferenceEvaluator on a one-node model; None entries are absent inputs."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op, names, [f"out{i}" for i in range(outs)], **attrs)
    graph = helper.make_graph([node], "one_node",
                              [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                               for n, x in zip(names, inputs) if x is not None],
                              [helper.make_empty_tensor_value_info(f"out{i}") for i in range(outs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def ours(kernels, op, inputs, attrs, opset=27):
    got = kernels.op(op, domain="", version=opset)(*inputs, **attrs)
    return list(got) if isinstance(got, tuple) else [got]


def compare(got, want, rtol, atol, where):
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol, atol, f"{where} output {k}")
        if w.dtype == np.float32:
            assert_would_catch(g, w, rtol, atol, f"{where} output {k}")


# -- LinearAttention ------------------------------------------------------------------------------

def linear_attention_inputs(rule, batch=2, steps=6, q_heads=4, kv_heads=2, dk=8, dv=12, past=True,
                            per_head_decay=False, shared_beta=False, dtype=np.float32):
    q = normal(batch, steps, q_heads * dk, dtype=dtype, scale=0.5)
    k = normal(batch, steps, kv_heads * dk, dtype=dtype, scale=0.3)
    v = normal(batch, steps, kv_heads * dv, dtype=dtype)
    state = normal(batch, kv_heads, dk, dv, dtype=dtype, scale=0.5) if past else None
    decay = beta = None
    if rule in ("gated", "gated_delta"):
        width = kv_heads if per_head_decay else kv_heads * dk
        decay = -RNG.uniform(0.01, 0.5, (batch, steps, width)).astype(dtype)
    if rule in ("delta", "gated_delta"):
        beta = RNG.uniform(0.1, 0.9, (batch, steps, 1 if shared_beta else kv_heads)).astype(dtype)
    return [q, k, v, state, decay, beta], {"q_num_heads": q_heads, "kv_num_heads": kv_heads, "update_rule": rule}


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_rules_match_onnxruntime(kernels, rule):
    inputs, attrs = linear_attention_inputs(rule)
    want = run_onnxruntime("LinearAttention", inputs, attrs, opset=27, num_outputs=2)
    compare(ours(kernels, "LinearAttention", inputs, attrs), want, 1e-4, 1e-5, f"LinearAttention {rule}")


@pytest.mark.parametrize("case", [
    dict(per_head_decay=True, shared_beta=True),      # one decay per head, one beta for all heads
    dict(q_heads=6, kv_heads=1, past=False),          # multi-query, no past state
    dict(steps=1, q_heads=2, kv_heads=2, dk=16, dv=4),  # one decode step
    dict(batch=1, steps=70, q_heads=2, kv_heads=2),   # a long prefill: errors would compound
])
def test_linear_attention_shapes_match_reference(kernels, case):
    inputs, attrs = linear_attention_inputs("gated_delta", **case)
    attrs["scale"] = 0.3
    want = run_reference("LinearAttention", inputs, attrs, 27, 2)
    compare(ours(kernels, "LinearAttention", inputs, attrs), want, 1e-4, 1e-5, f"LinearAttention {case}")


def test_linear_attention_float16_matches_reference(kernels):
    inputs, attrs = linear_attention_inputs("gated_delta", dtype=np.float16)
    want = run_reference("LinearAttention", inputs, attrs, 27, 2)
    got = ours(kernels, "LinearAttention", inputs, attrs)
    assert got[0].dtype == np.float16 and got[1].dtype == np.float16
    compare(got, want, 2e-3, 2e-3, "LinearAttention float16")


def test_linear_attention_float_state_with_float16_activations(kernels):
    """The state keeps its own dtype (S) while query, key and value are float16 (T)."""
    inputs, attrs = linear_attention_inputs("gated_delta", dtype=np.float16)
    inputs[3] = inputs[3].astype(np.float32)
    want = run_reference("LinearAttention", inputs, attrs, 27, 2)
    got = ours(kernels, "LinearAttention", inputs, attrs)
    assert got[0].dtype == np.float16 and got[1].dtype == np.float32
    compare(got[:1], want[:1], 2e-3, 2e-3, "LinearAttention float16 output")
    compare(got[1:], want[1:], 1e-5, 1e-6, "LinearAttention float state")


def test_linear_attention_comparison_sees_a_small_error(kernels):
    inputs, attrs = linear_attention_inputs("gated_delta")
    want = run_reference("LinearAttention", inputs, attrs, 27, 2)
    got = ours(kernels, "LinearAttention", inputs, attrs)
    with pytest.raises(AssertionError):
        assert_close(bump_one_element(got[0]), want[0], 1e-4, 1e-5, "tampered output")


@pytest.mark.parametrize("rule, drop, message", [
    ("gated", 4, "needs the input 'decay'"),
    ("delta", 5, "needs the input 'beta'"),
    ("linear", None, "takes no input 'decay'"),
])
def test_linear_attention_refuses_inputs_that_do_not_fit_the_rule(kernels, rule, drop, message):
    inputs, attrs = linear_attention_inputs("gated_delta" if rule == "linear" else rule)
    if drop is not None:
        inputs[drop] = None
    attrs["update_rule"] = rule
    with pytest.raises(opforge.OpError, match=message):
        ours(kernels, "LinearAttention", inputs, attrs)


def test_linear_attention_refuses_a_past_state_of_the_wrong_shape(kernels):
    inputs, attrs = linear_attention_inputs("linear")
    inputs[3] = inputs[3][:, :, :4]
    with pytest.raises(opforge.OpError, match="past_state"):
        ours(kernels, "LinearAttention", inputs, attrs)


# -- CausalConvWithState --------------------------------------------------------------------------

def causal_conv_inputs(batch=3, channels=5, length=9, kernel=4, bias=True, past=True, dtype=np.float32, rng=None):
    return [normal(batch, channels, length, dtype=dtype, rng=rng),
            normal(channels, 1, kernel, dtype=dtype, scale=0.5, rng=rng),
            normal(channels, dtype=dtype, rng=rng) if bias else None,
            normal(batch, channels, kernel - 1, dtype=dtype, rng=rng) if past else None]


@pytest.mark.parametrize("activation", ["none", "silu", "swish"])
@pytest.mark.parametrize("bias, past", [(True, True), (False, True), (True, False), (False, False)])
def test_causal_conv_matches_onnxruntime(kernels, activation, bias, past):
    inputs = causal_conv_inputs(bias=bias, past=past)
    attrs = {"activation": activation}
    want = run_onnxruntime("CausalConvWithState", inputs, attrs, opset=27, num_outputs=2)
    compare(ours(kernels, "CausalConvWithState", inputs, attrs), want, 1e-5, 1e-6, f"CausalConv {activation}")


@pytest.mark.parametrize("shape", [dict(length=1), dict(kernel=1), dict(length=2, kernel=6), dict(batch=1, channels=1)])
def test_causal_conv_shapes_match_reference(kernels, shape):
    inputs = causal_conv_inputs(**shape)
    want = run_reference("CausalConvWithState", inputs, {"activation": "silu"}, 27, 2)
    got = ours(kernels, "CausalConvWithState", inputs, {"activation": "silu"})
    compare(got, want, 1e-5, 1e-6, f"CausalConv {shape}")


def causal_conv_silu_float64(x, w, b, past):
    """CausalConvWithState with silu in float64, and each output's sum of |terms| (its rounding scale)."""
    xp = np.concatenate([past, x], axis=-1).astype(np.float64)
    k, length = w.shape[-1], x.shape[-1]
    terms = np.stack([xp[..., j:j + length] * w[None, :, 0, j, None] for j in range(k)])
    y = terms.sum(0) + b[None, :, None]
    e = np.exp(-np.abs(y))   # sigmoid without overflow on either side
    return y * np.where(y >= 0, 1 / (1 + e), e / (1 + e)), np.abs(terms).sum(0) + np.abs(b)[None, :, None]


@pytest.mark.parametrize("seed", range(8))
def test_causal_conv_silu_of_large_values_is_exact_to_float_rounding(kernels, seed):
    """Convolutions far past where e^-y overflows float, on both sides of zero. The sums cancel
    terms of hundreds, so the float64 result is the oracle, with the rounding of those terms
    allowed; onnxruntime's silu is not it either: past y = -16 it gives -2e-6 where y * e^y is
    -7e-7, so it checks only the state output, which is copied exactly."""
    # its own generator: the same inputs whatever other tests ran first, and theirs unchanged
    x, w, b, past = causal_conv_inputs(length=40, rng=np.random.default_rng(100 + seed))
    inputs = [x * 300, w, b, past * 300]
    got = ours(kernels, "CausalConvWithState", inputs, {"activation": "silu"})
    want, scale = causal_conv_silu_float64(*inputs)
    assert np.abs(got[0]).max() > 200 and (got[0] < 0).any() and want.min() < -10 * np.finfo(np.float32).eps
    allowed = 1e-6 * np.abs(want) + 1e-7 + 4 * np.finfo(np.float32).eps * scale
    error = np.abs(got[0] - want)
    assert (error <= allowed).all(), f"worst {error.max():.3g} at want {want.flat[np.argmax(error - allowed)]:.4g}"
    big = np.abs(want) >= 0.1 * np.abs(want).max()
    assert (1e-3 * np.abs(want[big]) > allowed[big] + error[big]).all()   # a 1e-3 relative error would fail
    state = run_onnxruntime("CausalConvWithState", inputs, {"activation": "silu"}, opset=27, num_outputs=2)[1]
    np.testing.assert_array_equal(got[1], state)


def test_causal_conv_float16_matches_reference(kernels):
    inputs = causal_conv_inputs(dtype=np.float16)
    want = run_reference("CausalConvWithState", inputs, {"activation": "silu"}, 27, 2)
    got = ours(kernels, "CausalConvWithState", inputs, {"activation": "silu"})
    compare(got, want, 1e-3, 1e-3, "CausalConv float16")


def test_causal_conv_state_carries_across_calls(kernels):
    """Two calls that pass the state on give the same output as one call over the whole input."""
    x, w, b, _ = causal_conv_inputs(length=10, past=False)
    whole, _ = ours(kernels, "CausalConvWithState", [x, w, b], {})
    first, state = ours(kernels, "CausalConvWithState", [x[..., :6], w, b], {})
    second, _ = ours(kernels, "CausalConvWithState", [x[..., 6:], w, b, state], {})
    assert_close(np.concatenate([first, second], axis=-1), whole, 1e-6, 1e-6, "chunked CausalConv")


def test_causal_conv_refuses_a_state_of_the_wrong_length(kernels):
    x, w, b, past = causal_conv_inputs()
    with pytest.raises(opforge.OpError, match="past_state"):
        ours(kernels, "CausalConvWithState", [x, w, b, past[..., :1]], {})


def test_causal_conv_refuses_an_unknown_activation(kernels):
    with pytest.raises(opforge.OpError, match="activation"):
        ours(kernels, "CausalConvWithState", causal_conv_inputs(), {"activation": "gelu"})
