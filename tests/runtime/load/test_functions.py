"""Model-local functions expanded at load, compared with onnxruntime."""
import numpy as np
import onnx
from onnx import AttributeProto, helper

from tests.support.onnx_builders import assert_same, model, onnxruntime_outputs, tensor
from opforge.runtime import InferenceSession
from opforge.runtime.load.functions import inline_local_functions

DOMAIN = "local"


def ref(name: str, target: str) -> AttributeProto:
    return AttributeProto(name=name, ref_attr_name=target, type=AttributeProto.FLOAT)


def inner_function() -> onnx.FunctionProto:
    """Inner(x; alpha=0.5) = LeakyRelu(x, alpha) + x, with an internal value 't'."""
    leaky = helper.make_node("LeakyRelu", ["x"], ["t"])
    leaky.attribute.append(ref("alpha", "alpha"))
    return helper.make_function(DOMAIN, "Inner", ["x"], ["y"],
                                [leaky, helper.make_node("Add", ["t", "x"], ["y"])],
                                [helper.make_opsetid("", 17)], attributes=[],
                                attribute_protos=[helper.make_attribute("alpha", 0.5)])


def outer_function() -> onnx.FunctionProto:
    """Outer(x; beta) = Inner(Inner(x, alpha=beta)) * Inner(x, alpha=beta): nested calls."""
    first = helper.make_node("Inner", ["x"], ["t"], domain=DOMAIN)
    first.attribute.append(ref("alpha", "beta"))
    return helper.make_function(
        DOMAIN, "Outer", ["x"], ["y"],
        [first, helper.make_node("Inner", ["t"], ["u"], domain=DOMAIN),
         helper.make_node("Mul", ["u", "t"], ["y"])],
        [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)], attributes=["beta"])


def function_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Outer", ["X"], ["t"], domain=DOMAIN, beta=0.1, name="outer"),
             helper.make_node("Inner", ["t"], ["Y"], domain=DOMAIN, alpha=0.3, name="last")]
    return model(nodes, [tensor("X", [4])], [tensor("Y", [4])],
                 functions=[inner_function(), outer_function()])


def test_nested_functions_with_attribute_references_match_onnxruntime():
    proto = function_model()
    feed = {"X": np.array([-2.0, -1.0, 1.0, 2.0], np.float32)}
    actual = InferenceSession(proto).run(None, feed)
    assert_same(actual, onnxruntime_outputs(proto, feed))


def test_expansion_gives_unique_names_and_no_functions():
    inlined = inline_local_functions(function_model())
    assert not inlined.functions
    outputs = [o for node in inlined.graph.node for o in node.output]
    assert len(outputs) == len(set(outputs)) == 7
    assert {n.domain for n in inlined.graph.node} == {""}
    alphas = [a.f for n in inlined.graph.node for a in n.attribute if a.name == "alpha"]
    np.testing.assert_allclose(alphas, [0.1, 0.5, 0.3])  # caller's, default, caller's
    onnx.checker.check_model(inlined)


def test_function_called_inside_a_subgraph_is_expanded():
    call = helper.make_node("Inner", ["x"], ["t"], domain=DOMAIN, alpha=0.2)
    then_graph = helper.make_graph([call], "then", [], [tensor("t", [3])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [tensor("e", [3])])
    proto = model([helper.make_node("If", ["c"], ["y"], then_branch=then_graph,
                                    else_branch=else_graph)],
                  [tensor("c", [], onnx.TensorProto.BOOL), tensor("x", [3])], [tensor("y", [3])],
                  functions=[inner_function()])
    session = InferenceSession(proto)
    for cond in (True, False):
        feed = {"c": np.array(cond), "x": np.array([-1.0, 0.5, 2.0], np.float32)}
        assert_same(session.run(None, feed), onnxruntime_outputs(proto, feed))
