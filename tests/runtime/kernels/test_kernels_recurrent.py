"""CausalConvWithState and LinearAttention against onnx.reference (onnxruntime has neither yet)."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from opforge.errors import OpError

RNG = np.random.default_rng(9)


def reference(op_type, inputs, attrs, opset=27):
    """The op's outputs from onnx.reference; None inputs are left out of the node."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["out0", "out1"], **attrs)
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_empty_tensor_value_info("out0"), helper.make_empty_tensor_value_info("out1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def compare(kernels, op_type, inputs, attrs, rtol=1e-5, atol=1e-6):
    want = reference(op_type, inputs, attrs)
    got = kernels.op(op_type, domain="", version=27)(*inputs, **attrs)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("kernel", [1, 4])
def test_causal_conv_with_state(kernels, activation, kernel):
    x = RNG.standard_normal((2, 3, 7)).astype(np.float32)
    w = RNG.standard_normal((3, 1, kernel)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)
    past = RNG.standard_normal((2, 3, kernel - 1)).astype(np.float32)
    compare(kernels, "CausalConvWithState", [x, w], {"activation": activation})
    compare(kernels, "CausalConvWithState", [x, w, bias, past], {"activation": activation})


def test_causal_conv_state_carries_across_calls(kernels):
    """Two calls on halves, the second given the first's state, equal one call on the whole."""
    x = RNG.standard_normal((1, 2, 10)).astype(np.float32)
    w = RNG.standard_normal((2, 1, 3)).astype(np.float32)
    conv = kernels.op("CausalConvWithState", domain="", version=27)
    whole, _ = conv(x, w)
    first, state = conv(x[..., :6], w)
    second, _ = conv(x[..., 6:], w, None, state)
    np.testing.assert_allclose(np.concatenate([first, second], -1), whole, rtol=1e-6, atol=1e-6)


def test_causal_conv_refuses_a_mismatched_weight(kernels):
    with pytest.raises(OpError, match="'weight'"):
        kernels.op("CausalConvWithState", domain="", version=27)(np.zeros((1, 3, 4), np.float32),
                                                                  np.zeros((2, 1, 2), np.float32))


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_linear_attention(kernels, rule, heads):
    q_heads, kv_heads = heads
    b, t, dk, dv = 2, 5, 4, 3
    q = RNG.standard_normal((b, t, q_heads * dk)).astype(np.float32)
    k = (RNG.standard_normal((b, t, kv_heads * dk)) * 0.5).astype(np.float32)
    v = RNG.standard_normal((b, t, kv_heads * dv)).astype(np.float32)
    past = RNG.standard_normal((b, kv_heads, dk, dv)).astype(np.float32)
    decay = -RNG.random((b, t, kv_heads)).astype(np.float32) if "gated" in rule else None
    beta = RNG.random((b, t, kv_heads)).astype(np.float32) if "delta" in rule else None
    attrs = {"q_num_heads": q_heads, "kv_num_heads": kv_heads, "update_rule": rule}
    compare(kernels, "LinearAttention", [q, k, v, None, decay, beta], attrs)
    compare(kernels, "LinearAttention", [q, k, v, past, decay, beta], dict(attrs, scale=0.3))
    if "gated" in rule:   # a decay per key dim, and one beta shared by the heads
        decay = -RNG.random((b, t, kv_heads * dk)).astype(np.float32)
        beta = beta[..., :1] if beta is not None else None
        compare(kernels, "LinearAttention", [q, k, v, past, decay, beta], attrs)


def test_linear_attention_float16_and_a_missing_decay(kernels):
    q, k = (RNG.standard_normal((1, 3, 8)).astype(np.float16) for _ in range(2))
    v = RNG.standard_normal((1, 3, 6)).astype(np.float16)
    beta = RNG.random((1, 3, 2)).astype(np.float16)
    attrs = {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "delta"}
    compare(kernels, "LinearAttention", [q, k, v, None, None, beta], attrs, rtol=2e-3, atol=2e-3)
    with pytest.raises(OpError, match="needs input 'decay'"):
        kernels.op("LinearAttention", domain="", version=27)(q, k, v, None, None, beta, q_num_heads=2,
                                                            kv_num_heads=2, update_rule="gated_delta")
