"""Dtype and shape inference: onnx's for standard ops, custom_infer for others, conflicts warned."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support.onnx_builders import chain_model, model, tensor
from opforge.runtime.errors import GraphError
from opforge.runtime.graph.graph import build_graph
from opforge.runtime.graph.shapes import infer_types
from opforge.runtime.graph.types import TensorType

FLOAT32 = np.dtype(np.float32)


def test_standard_ops_get_dtype_and_symbolic_shape():
    types = infer_types(build_graph(chain_model().graph), {"": 17})
    assert types.get("n") == TensorType(FLOAT32, ("N", 3))
    assert types.warnings == []


def test_reshape_shape_comes_from_initializer_data():
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, -1])
    proto = model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [tensor("x", [6, 2])],
                  [tensor("y", None)], initializers=[shape])
    assert infer_types(build_graph(proto.graph), {"": 17}).get("y") == TensorType(FLOAT32, (3, 4))


def test_declared_type_conflicting_with_inference_is_warned_and_overridden():
    proto = chain_model()
    proto.graph.output[0].CopyFrom(tensor("y", [7]))
    proto.graph.value_info.append(tensor("r", ["N", 3], TensorProto.DOUBLE))
    types = infer_types(build_graph(proto.graph), {"": 17})
    assert types.get("y") == TensorType(FLOAT32, ("N", 3))
    assert types.get("r") == TensorType(FLOAT32, ("N", 3))
    assert any("'y'" in w and "ranks differ" in w for w in types.warnings)
    assert any("'r'" in w and "element types differ" in w for w in types.warnings)


def custom_model():
    """x -> com.example::Stack2 (doubles the last dim) -> Relu -> y; onnx knows no Stack2."""
    nodes = [helper.make_node("Stack2", ["x"], ["s"], domain="com.example", name="custom"),
             helper.make_node("Relu", ["s"], ["y"])]
    proto = model(nodes, [tensor("x", ["N", 3])], [tensor("y", None)])
    proto.opset_import.append(helper.make_opsetid("com.example", 1))
    return proto


def test_custom_infer_types_custom_ops_and_what_follows_them():
    seen = []

    def custom_infer(node, input_types):
        seen.append((node.name, input_types))
        dtype, shape = input_types[0]
        return [TensorType(dtype, shape[:-1] + (shape[-1] * 2,))]

    types = infer_types(build_graph(custom_model().graph), {"": 17, "com.example": 1}, custom_infer)
    assert seen[0] == ("custom", [TensorType(FLOAT32, ("N", 3))])
    assert types.get("s") == TensorType(FLOAT32, ("N", 6))
    assert types.get("y") == TensorType(FLOAT32, ("N", 6))


def test_values_nobody_can_type_stay_unknown_or_as_declared():
    types = infer_types(build_graph(custom_model().graph), {"": 17, "com.example": 1})
    assert types.get("s") is None
    assert types.get("y") == TensorType(FLOAT32, None)  # only the declaration knows it


def test_a_value_of_more_than_16_dimensions_is_refused_naming_its_node():
    shape = helper.make_tensor("shape", TensorProto.INT64, [20], [1] * 19 + [-1])
    proto = model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="deep")],
                  [tensor("x", [6])], [tensor("y", None)], initializers=[shape])
    with pytest.raises(GraphError, match="value 'y' \\(made by node 'deep' \\(Reshape.*20 dimensions; "
                                         "opforge takes tensors of at most 16"):
        infer_types(build_graph(proto.graph), {"": 17})
