"""Nodes checked against their op's schema at session creation: each refusal names the node, its
op type and the input, output or attribute at fault, before any kernel or onnx's shape
inference sees the node."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import opforge
from tests.support.onnx_builders import model, tensor
from opforge.runtime import GraphError, InferenceSession


def one_node(node, inputs=("x",), shape=(2, 3), outputs=("y",), initializers=(), opset=17):
    return model([node], [tensor(name, list(shape)) for name in inputs],
                 [tensor(name, None) for name in outputs], initializers, opset=opset)


def refusal(proto) -> str:
    with pytest.raises(GraphError) as caught:
        InferenceSession(proto)
    return str(caught.value)


@pytest.mark.parametrize("node, says", [
    (helper.make_node("Relu", [], ["y"]), "has 0 inputs; the op takes 1 ('X')"),
    (helper.make_node("Add", ["x"], ["y"]), "has 1 input; the op takes 2 ('A', 'B')"),
    (helper.make_node("Relu", ["x", "x"], ["y"]), "has 2 inputs; the op takes 1"),
    (helper.make_node("Add", ["", "x"], ["y"]), "input #0 ('A') is required but its name is ''"),
    (helper.make_node("Sum", ["x", ""], ["y"]), "input #1 ('data_0') is required"),
    (helper.make_node("Concat", ["x", ""], ["y"], axis=0), "input #1 ('inputs') is required"),
])
def test_missing_or_extra_inputs_are_refused(node, says):
    message = refusal(one_node(node))
    assert f"({node.op_type}, domain 'ai.onnx')" in message and "node producing 'y'" in message
    assert says in message


@pytest.mark.parametrize("outputs, says", [
    (["", "y"], "has 2 outputs; the op takes 1 ('C')"),
    (["y", "z"], "has 2 outputs; the op takes 1 ('C')"),
    ([""], "output #0 ('C') is required but its name is ''"),
])
def test_outputs_the_op_does_not_have_are_refused(outputs, says):
    node = helper.make_node("Xor" if len(outputs) > 1 else "Add", ["x", "x"], outputs, name="n")
    message = refusal(one_node(node, outputs=[o for o in outputs if o] or ["x"]))
    assert "node 'n'" in message and says in message


def test_optional_inputs_and_outputs_may_be_left_out():
    node = helper.make_node("Dropout", ["x", "", ""], ["y", ""], name="d")
    session = InferenceSession(one_node(node))
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x)


@pytest.mark.parametrize("attrs, says", [
    ({"foo": 1}, "has attribute 'foo', which the op does not take"),
    ({"keepdims": 1.5}, "attribute 'keepdims' is FLOAT; the op takes INT"),
    ({"keepdims": 2}, "attribute 'keepdims' = 2 must be 0 or 1"),
    ({"keepdims": -1}, "attribute 'keepdims' = -1 must be 0 or 1"),
])
def test_attributes_outside_the_schema_are_refused(attrs, says):
    message = refusal(one_node(helper.make_node("ReduceSum", ["x"], ["y"], name="r", **attrs)))
    assert "node 'r' (ReduceSum, domain 'ai.onnx')" in message and says in message


def test_an_attribute_of_no_type_is_refused():
    node = helper.make_node("ReduceSum", ["x"], ["y"], name="r")
    node.attribute.add(name="keepdims")   # type UNDEFINED
    assert "attribute 'keepdims' is UNDEFINED; the op takes INT" in refusal(one_node(node))


@pytest.mark.parametrize("node, says", [
    (helper.make_node("Pad", ["x", "p"], ["y"], mode="bogus"), "'mode' = 'bogus' is not one of constant"),
    (helper.make_node("ScatterElements", ["x", "i", "x"], ["y"], reduction="avg"), "'reduction' = 'avg'"),
    (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=0), "'blocksize' = 0 must be positive"),
    (helper.make_node("Gemm", ["x", "x"], ["y"], transB=2), "'transB' = 2 must be 0 or 1"),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1], auto_pad="SAME"), "'auto_pad'"),
    (helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=5), "'exclusive' = 5 must be 0 or 1"),
    (helper.make_node("LRN", ["x"], ["y"], size=0), "'size' = 0 must be positive"),
    (helper.make_node("Cast", ["x"], ["y"]), "lacks attribute 'to', which the op requires"),
])
def test_attribute_values_outside_the_spec_are_refused(node, says):
    ints = [helper.make_tensor(n, TensorProto.INT64, [len(v)], v)
            for n, v in (("p", [0, 0, 0, 0]), ("a", [0]))]
    ints.append(helper.make_tensor("i", TensorProto.INT64, [2, 3], [0] * 6))
    assert says in refusal(one_node(node, initializers=ints, opset=18))


def test_a_node_onnx_shape_inference_cannot_survive_is_refused_first():
    # onnx's inference dereferences the missing input of this node and crashes the process
    node = helper.make_node("LabelEncoder", [""], ["y"], domain="ai.onnx.ml",
                            keys_strings=["a"], values_int64s=[1])
    proto = one_node(node)
    proto.opset_import.append(helper.make_opsetid("ai.onnx.ml", 2))
    assert "input #0 ('X') is required" in refusal(proto)


def test_nodes_of_subgraphs_are_checked():
    branch = helper.make_graph([helper.make_node("Relu", [], ["z"], name="inner")], "b", [],
                               [tensor("z", None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    proto = model([node], [tensor("c", [], TensorProto.BOOL)], [tensor("y", None)])
    assert "node 'inner' (Relu, domain 'ai.onnx') at opset 17 has 0 inputs" in refusal(proto)


def test_custom_ops_of_a_standard_op_type_are_not_held_to_its_schema():
    @opforge.custom_op("Relu", inputs=["X"], attrs={"slope": 0.5})
    def leaky(x, slope=0.5):
        return np.where(x > 0, x, slope * x)

    node = helper.make_node("Relu", ["x"], ["y"], slope=0.25)
    session = InferenceSession(one_node(node), custom_ops=[leaky])
    out = session.run(None, {"x": -np.ones((2, 3), np.float32)})[0]
    np.testing.assert_allclose(out, -0.25)


@pytest.mark.parametrize("node", [
    helper.make_node("Cast", ["x"], ["y"], to=1000),
    helper.make_node("LayerNormalization", ["x", "x"], ["y"], stash_type=-2),
])
def test_element_type_attributes_onnx_does_not_define_are_refused(node):
    assert "is not an element type ONNX defines" in refusal(one_node(node))


def test_an_undefined_element_type_declared_for_an_input_is_refused_when_fed():
    proto = one_node(helper.make_node("Relu", ["x"], ["y"]))
    proto.graph.input[0].type.tensor_type.elem_type = 1000
    sess = InferenceSession(proto)
    assert "unknown element type 1000" in sess.get_inputs()[0].type
    with pytest.raises(opforge.runtime.FeedError, match="declared of element type 1000"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
