"""Constant nodes become initializers at load: every value attribute, in subgraphs too, with no
kernel for Constant (the reference fallback is off) and the results onnxruntime gives."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.onnx_builders import model, onnxruntime_outputs, tensor
from opforge.runtime import InferenceSession, SessionOptions
from opforge.runtime.errors import GraphError
from opforge.runtime.load.constants import constants_to_initializers


def native_session(proto):
    options = SessionOptions()
    options.disable_reference_fallback = True
    return InferenceSession(proto, options)


VALUES = [
    ("value", numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5),
     TensorProto.FLOAT),
    ("value_float", 1.25, TensorProto.FLOAT),
    ("value_floats", [0.5, -1.5, 3.0], TensorProto.FLOAT),
    ("value_int", -7, TensorProto.INT64),
    ("value_ints", [3, 1, 4, 1, 5], TensorProto.INT64),
]


@pytest.mark.parametrize("attr, value, elem", VALUES, ids=[v[0] for v in VALUES])
def test_constant_value_matches_onnxruntime(attr, value, elem):
    # c + x broadcasts the constant against a scalar input, so the graph has a real kernel too
    nodes = [helper.make_node("Constant", [], ["c"], **{attr: value}),
             helper.make_node("Add", ["c", "x"], ["y"])]
    proto = model(nodes, [tensor("x", [], elem)], [tensor("y", None, elem)])
    x = np.array(2, dtype=helper.tensor_dtype_to_np_dtype(elem))
    want, = onnxruntime_outputs(proto, {"x": x})
    got, = native_session(proto).run(None, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_constant_as_graph_output_strings():
    nodes = [helper.make_node("Constant", [], ["s"], value_strings=["a", "bc", ""]),
             helper.make_node("Constant", [], ["t"], value_string="xyz")]
    proto = model(nodes, [], [tensor("s", [3], TensorProto.STRING),
                              tensor("t", [], TensorProto.STRING)])
    got = native_session(proto).run(None, {})
    want = onnxruntime_outputs(proto, {})
    for g, w in zip(got, want):
        assert g.shape == w.shape and list(g.ravel()) == list(w.ravel())


def test_sparse_value_is_densified():
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0, -2.0], dtype=np.float32), "v"),
        numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "i"), [2, 3])
    nodes = [helper.make_node("Constant", [], ["c"], sparse_value=sparse),
             helper.make_node("Mul", ["c", "x"], ["y"])]
    proto = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    got, = native_session(proto).run(None, {"x": x})
    np.testing.assert_array_equal(got, np.array([[0, 10, 0], [0, -10, 0]], dtype=np.float32))


def test_constants_inside_if_branches():
    def branch(name, value):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2])
        node = helper.make_node("Constant", [], [f"{name}_out"], value_floats=value)
        return helper.make_graph([node], name, [], [out])

    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", [1.0, 2.0]),
                              else_branch=branch("else", [-3.0, 4.5]))]
    proto = model(nodes, [tensor("cond", [], TensorProto.BOOL)], [tensor("y", [2])])
    session = native_session(proto)
    for cond in (True, False):
        feed = {"cond": np.array(cond)}
        np.testing.assert_array_equal(session.run(None, feed)[0], onnxruntime_outputs(proto, feed)[0])


def test_constant_without_value_names_the_node():
    graph = helper.make_graph([helper.make_node("Constant", [], ["c"], name="empty")], "g", [],
                              [tensor("c", None)])
    with pytest.raises(GraphError, match="'empty'.*exactly one value attribute"):
        constants_to_initializers(graph)


@pytest.mark.parametrize("attr, value", [("value_int", [1, 2]), ("value_float", [0.5]),
                                         ("value_floats", 1.5), ("value", 3)])
def test_constant_value_of_another_kind_names_the_attribute(attr, value):
    node = helper.make_node("Constant", [], ["c"], name="odd")
    node.attribute.append(helper.make_attribute(attr, value))
    graph = helper.make_graph([node], "g", [], [tensor("c", None)])
    with pytest.raises(GraphError, match=f"'odd'.*{attr}.*must be of kind"):
        constants_to_initializers(graph)


def test_constant_count_and_order_kept():
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["a"], value_int=1),
         helper.make_node("Neg", ["a"], ["b"]),
         helper.make_node("Constant", [], ["c"], value_int=2),
         helper.make_node("Add", ["b", "c"], ["d"])], "g", [], [tensor("d", [], TensorProto.INT64)])
    assert constants_to_initializers(graph) == 2
    assert [n.op_type for n in graph.node] == ["Neg", "Add"]
    assert {t.name: int(numpy_helper.to_array(t)) for t in graph.initializer} == {"a": 1, "c": 2}
