"""FlexAttention (ai.onnx.preview): the native kernel for the plain op, and nodes with score_mod /
prob_mod graphs expanded into standard ops at load, checked against onnx's ReferenceEvaluator."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import opforge
from tests.support.numeric import assert_close, assert_would_catch, bump_one_element
from opforge.runtime import InferenceSession
from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.load.graph_attribute_ops import expand_graph_attribute_ops

RNG = np.random.default_rng(0)
PREVIEW = "ai.onnx.preview"


def flex_model(shapes, dtype=TensorProto.FLOAT, **attrs):
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW, **attrs)
    inputs = [helper.make_tensor_value_info(n, dtype, s) for n, s in zip("QKV", shapes)]
    graph = helper.make_graph([node], "flex", inputs, [helper.make_tensor_value_info("Y", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid(PREVIEW, 1)])
    model.ir_version = 10
    return model


def qkv(b=2, hq=4, hkv=2, lq=9, lk=13, e=16, ev=8, dtype=np.float32):
    return (RNG.standard_normal((b, hq, lq, e)).astype(dtype), RNG.standard_normal((b, hkv, lk, e)).astype(dtype),
            RNG.standard_normal((b, hkv, lk, ev)).astype(dtype))


def reference(model, q, k, v):
    return ReferenceEvaluator(model).run(None, {"Q": q, "K": k, "V": v})[0]


def flex(kernels, q, k, v, **attrs):
    return kernels.op("FlexAttention", domain=PREVIEW, version=1)(q, k, v, **attrs)


@pytest.mark.parametrize("attrs", [{}, {"scale": 0.3}, {"softmax_precision": 11}])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)])
def test_flex_attention_matches_reference(kernels, attrs, heads):
    q, k, v = qkv(hq=heads[0], hkv=heads[1])
    want = reference(flex_model([q.shape, k.shape, v.shape], **attrs), q, k, v)
    got = flex(kernels, q, k, v, **attrs)
    assert_close(got, want, 1e-5, 1e-6, f"FlexAttention {attrs}")
    assert_would_catch(got, want, 1e-5, 1e-6, "FlexAttention")


@pytest.mark.parametrize("dtype, proto, rtol", [(np.float16, TensorProto.FLOAT16, 1e-3),
                                                (np.float64, TensorProto.DOUBLE, 1e-12)])
def test_flex_attention_other_dtypes_match_reference(kernels, dtype, proto, rtol):
    q, k, v = qkv(dtype=dtype)
    want = reference(flex_model([q.shape, k.shape, v.shape], proto), q, k, v)
    got = flex(kernels, q, k, v)
    assert_close(got, want, rtol, rtol, f"FlexAttention {dtype.__name__}")


def test_flex_attention_long_sequence_matches_reference(kernels):
    """More queries than one 64-row block of the kernel, with grouped heads."""
    q, k, v = qkv(b=1, hq=4, hkv=2, lq=150, lk=140, e=32, ev=24)
    want = reference(flex_model([q.shape, k.shape, v.shape]), q, k, v)
    got = flex(kernels, q, k, v)
    assert_close(got, want, 1e-5, 1e-6, "FlexAttention long")
    assert_would_catch(got, want, 1e-5, 1e-6, "FlexAttention long")


def test_flex_attention_comparison_sees_a_small_error(kernels):
    q, k, v = qkv()
    want = reference(flex_model([q.shape, k.shape, v.shape]), q, k, v)
    with pytest.raises(AssertionError):
        assert_close(bump_one_element(flex(kernels, q, k, v)), want, 1e-5, 1e-6, "tampered FlexAttention")


def test_flex_attention_refuses_mismatched_heads(kernels):
    q, k, v = qkv(hq=3, hkv=2)
    with pytest.raises(opforge.OpError, match="not a multiple"):
        flex(kernels, q, k, v)


# -- nodes with score_mod / prob_mod graphs -------------------------------------------------------

def soft_cap_graph(cap=2.0):
    """score_mod: cap * tanh(scores / cap)."""
    nodes = [helper.make_node("Constant", [], ["cap"], value=helper.make_tensor("c", TensorProto.FLOAT, [], [cap])),
             helper.make_node("Div", ["scores", "cap"], ["scaled"]), helper.make_node("Tanh", ["scaled"], ["t"]),
             helper.make_node("Mul", ["t", "cap"], ["out"])]
    return helper.make_graph(nodes, "soft_cap", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])


def dropout_like_graph():
    """prob_mod: probabilities squared (anything elementwise the reference applies after softmax)."""
    return helper.make_graph([helper.make_node("Mul", ["p", "p"], ["out"])], "square",
                             [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])


def test_graph_attributes_expand_into_standard_ops():
    q, k, v = qkv()
    model = flex_model([q.shape, k.shape, v.shape], score_mod=soft_cap_graph(), prob_mod=dropout_like_graph())
    expanded = expand_graph_attribute_ops(model)
    ops = {node.op_type for node in expanded.graph.node}
    assert "FlexAttention" not in ops and {"Tanh", "Softmax", "MatMul"} <= ops


def test_a_node_of_unknown_input_types_is_left_for_the_reference_provider():
    """Q made by an op shape inference does not know: the node keeps its graph."""
    q, k, v = qkv()
    model = flex_model([q.shape, k.shape, v.shape], score_mod=soft_cap_graph())
    model.graph.node.insert(0, helper.make_node("Unknown", ["Q"], ["Q2"], domain="com.example"))
    model.graph.node[1].input[0] = "Q2"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    expanded = expand_graph_attribute_ops(model)
    assert [node.op_type for node in expanded.graph.node] == ["Unknown", "FlexAttention"]


@pytest.mark.parametrize("version", [-1, 0])
def test_a_preview_opset_without_the_op_is_refused_naming_the_node(version):
    """No schema at that opset: the node is not expanded, and no kernel binds it."""
    q, k, v = qkv()
    model = flex_model([q.shape, k.shape, v.shape], score_mod=soft_cap_graph())
    model.opset_import[1].version = version
    assert [node.op_type for node in expand_graph_attribute_ops(model).graph.node] == ["FlexAttention"]
    with pytest.raises(KernelNotFoundError, match=f"'Y' \\(FlexAttention.*opset {version}"):
        InferenceSession(model.SerializeToString())


@pytest.mark.parametrize("mods", [{"score_mod": soft_cap_graph()}, {"prob_mod": dropout_like_graph()},
                                  {"score_mod": soft_cap_graph(0.5), "prob_mod": dropout_like_graph()}])
def test_flex_attention_with_graphs_matches_reference(mods):
    q, k, v = qkv(hq=4, hkv=2)
    model = flex_model([q.shape, k.shape, v.shape], **mods)
    want = reference(model, q, k, v)
    sess = InferenceSession(model)
    got, = sess.run(None, {"Q": q, "K": k, "V": v})
    assert_close(got, want, 1e-5, 1e-6, f"FlexAttention with {sorted(mods)}")
    assert_would_catch(got, want, 1e-5, 1e-6, "FlexAttention with graphs")
    ran = {(op, provider) for _, op, provider in sess.node_providers()}
    assert {provider for _, provider in ran} == {"CPUExecutionProvider"}, (
        f"the expanded graph must run on native kernels, not compare onnx.reference with itself: {ran}")
    assert "FlexAttention" not in {op for op, _ in ran}, "the node's graphs were not expanded into standard ops"


def test_flex_attention_with_graphs_inside_an_if_branch():
    """The node sits in a subgraph and reads Q, K, V from the outer scope."""
    q, k, v = qkv()
    inner = flex_model([q.shape, k.shape, v.shape], score_mod=soft_cap_graph())
    then_branch = helper.make_graph(list(inner.graph.node), "then", [],
                                    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["Q"], ["Z"])], "else", [],
                                    [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_branch, else_branch=else_branch)
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, [])] + list(inner.graph.input)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=list(inner.opset_import))
    model.ir_version = 10
    branches = {a.name: a.g for a in expand_graph_attribute_ops(model).graph.node[0].attribute}
    assert "Tanh" in {n.op_type for n in branches["then_branch"].node}
    got, = InferenceSession(model).run(None, {"c": np.array(True), "Q": q, "K": k, "V": v})
    want = reference(inner, q, k, v)
    assert_close(got, want, 1e-5, 1e-6, "FlexAttention in an If branch")
    assert_would_catch(got, want, 1e-5, 1e-6, "FlexAttention in an If branch")
