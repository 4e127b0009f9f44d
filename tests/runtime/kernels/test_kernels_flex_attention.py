"""FlexAttention (ai.onnx.preview) against onnx.reference: the C kernel, and the executor's kernel
for nodes with score_mod / prob_mod subgraphs."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from opforge.runtime import InferenceSession, SessionOptions

RNG = np.random.default_rng(13)


def flex_model(q, k, v, **attrs):
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", **attrs)
    graph = helper.make_graph(
        [node], "flex",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in (("q", q), ("k", k), ("v", v))],
        [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                   helper.make_opsetid("ai.onnx.preview", 1)])


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12), (np.float16, 2e-3)])
@pytest.mark.parametrize("heads", [(2, 2), (6, 3)])
def test_flex_attention_matches_the_reference(kernels, dtype, tol, heads):
    q = RNG.standard_normal((2, heads[0], 5, 8)).astype(dtype)
    k = RNG.standard_normal((2, heads[1], 7, 8)).astype(dtype)
    v = RNG.standard_normal((2, heads[1], 7, 4)).astype(dtype)
    flex = kernels.op("FlexAttention", domain="ai.onnx.preview", version=1)
    for attrs in ({}, {"scale": 0.2}, {"softmax_precision": int(TensorProto.DOUBLE)}):
        want, = ReferenceEvaluator(flex_model(q, k, v, **attrs)).run(None, {"q": q, "k": k, "v": v})
        got = flex(q, k, v, **attrs)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("mod", ["score_mod", "prob_mod"])
def test_mod_subgraphs_run_on_the_sessions_kernels(mod):
    q = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    k, v = RNG.standard_normal((2, 1, 1, 5, 4)).astype(np.float32)
    body = helper.make_graph([helper.make_node("Mul", ["s", "half"], ["t"])], "mod",
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
                             [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    proto = flex_model(q, k, v, **{mod: body})
    want, = ReferenceEvaluator(proto).run(None, {"q": q, "k": k, "v": v})
    session = InferenceSession(proto.SerializeToString(), SessionOptions(disable_reference_fallback=True))
    for _ in range(2):
        got, = session.run(None, {"q": q, "k": k, "v": v})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    plain, = ReferenceEvaluator(flex_model(q, k, v)).run(None, {"q": q, "k": k, "v": v})
    assert not np.allclose(got, plain, rtol=1e-3)   # the subgraph did change the result
