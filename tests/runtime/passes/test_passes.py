"""Graph passes: constant folding with the session's kernels, and dead-node removal."""
import numpy as np
from onnx import TensorProto, helper

from tests.support.onnx_builders import model, tensor
from opforge.runtime.execute.executor import Dispatcher
from opforge.runtime.graph.graph import build_graph, sort_graph
from opforge.runtime.graph.shapes import infer_types
from opforge.runtime.options import GraphOptimizationLevel
from opforge.runtime.passes import PassContext, passes_for, run_passes
from opforge.runtime.passes.constant_folding import fold_constants
from opforge.runtime.passes.dead_code import remove_dead_nodes
from opforge.runtime.passes.drop_redundant_clips import drop_redundant_clips
from opforge.runtime.providers.registry import REFERENCE, default_registry


def prepared(proto):
    graph = build_graph(proto.graph)
    sort_graph(graph)
    bind = Dispatcher(default_registry, [REFERENCE], {"": 17}).bind
    return graph, PassContext(bind, infer_types(graph, {"": 17}))


def folding_model(x_shape):
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", 1, [], [2.0])),
             helper.make_node("Mul", ["w", "c"], ["w2"], name="scale_weights"),
             helper.make_node("Shape", ["x"], ["x_shape"], name="shape_of_x"),
             helper.make_node("RandomUniform", [], ["noise"], shape=[3], name="random"),
             helper.make_node("Add", ["w2", "noise"], ["wn"]),
             helper.make_node("Mul", ["x", "wn"], ["y"], name="use")]
    return model(nodes, [tensor("x", x_shape)],
                 [tensor("y", x_shape), tensor("x_shape", [2], TensorProto.INT64)],
                 initializers=[weight])


def test_constants_and_static_shapes_fold_random_ops_do_not():
    graph, context = prepared(folding_model([2, 3]))
    assert fold_constants(graph, context) == 3
    assert [n.op_type for n in graph.nodes] == ["RandomUniform", "Add", "Mul"]
    np.testing.assert_array_equal(graph.initializers["w2"], [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(graph.initializers["x_shape"], [2, 3])


def test_shape_of_a_dynamic_value_does_not_fold():
    graph, context = prepared(folding_model(["N", 3]))
    fold_constants(graph, context)
    assert "shape_of_x" in [n.name for n in graph.nodes]


def test_initializer_that_is_also_an_input_is_not_a_constant():
    proto = folding_model([2, 3])
    proto.graph.input.append(tensor("w", [3]))
    graph, context = prepared(proto)
    fold_constants(graph, context)
    assert "scale_weights" in [n.name for n in graph.nodes]


def test_dead_nodes_and_their_initializers_are_removed():
    unused = helper.make_tensor("unused_w", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="live"),
             helper.make_node("Add", ["x", "unused_w"], ["a"], name="dead1"),
             helper.make_node("Neg", ["a"], ["b"], name="dead2")]
    graph, _ = prepared(model(nodes, [tensor("x", [2])], [tensor("r", [2])], initializers=[unused]))
    assert remove_dead_nodes(graph) == 2
    assert [n.name for n in graph.nodes] == ["live"] and graph.initializers == {}


def test_a_node_read_only_by_a_subgraph_stays_alive():
    then_graph = helper.make_graph([helper.make_node("Identity", ["hidden"], ["t"])], "t", [],
                                   [tensor("t", [2])])
    nodes = [helper.make_node("Neg", ["x"], ["hidden"], name="feeds_subgraph"),
             helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=then_graph)]
    graph, _ = prepared(model(nodes, [tensor("c", [], TensorProto.BOOL), tensor("x", [2])],
                              [tensor("y", [2])]))
    assert remove_dead_nodes(graph) == 0


def test_levels_choose_passes():
    assert passes_for(GraphOptimizationLevel.ORT_DISABLE_ALL) == []
    basic = passes_for(GraphOptimizationLevel.ORT_ENABLE_BASIC)
    assert basic[:3] == [drop_redundant_clips, fold_constants, remove_dead_nodes]   # before folding: see its doc
    extended = passes_for(GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    assert extended[:len(basic)] == basic and len(extended) > len(basic)
    assert passes_for(GraphOptimizationLevel.ORT_ENABLE_ALL) == extended
    graph, context = prepared(folding_model([2, 3]))
    stats = run_passes(graph, GraphOptimizationLevel.ORT_ENABLE_BASIC, context)
    assert list(stats) == ["upcast_float16"] + [p.__name__ for p in basic]   # required first
    assert stats["fold_constants"] == 3 and stats["remove_dead_nodes"] == 0


def paddle_style_classifier():
    """What PaddleOCR's exported classifiers do: the input declared with dim_value -1 (Paddle
    writes -1 for "any size"), its Shape read and cut with Slice/Gather, the pieces concatenated
    with constants into a Reshape's target, and a Expand to a shape built the same way."""
    from onnx import numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 4, -1])
    consts = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "minus1": np.array([-1], np.int64),
              "twelve": np.array([12], np.int64), "starts": np.array([3], np.int64), "ends": np.array([4], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["batch"], axis=0),
             helper.make_node("Slice", ["shape", "starts", "ends"], ["width"]),
             helper.make_node("Concat", ["batch", "twelve", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Concat", ["batch", "i1", "width"], ["row_shape"], axis=0),
             helper.make_node("ReduceMean", ["flat", "i1"], ["mean"], keepdims=1),
             helper.make_node("Expand", ["mean", "row_shape"], ["y"])]
    graph = helper.make_graph(nodes, "paddle", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    proto.ir_version = 8
    return proto


def test_a_shape_of_an_input_with_unknown_dims_feeds_the_graph_unfolded_and_matches_onnxruntime():
    import onnxruntime

    from opforge.runtime import InferenceSession

    proto = paddle_style_classifier()
    sess = InferenceSession(proto)   # folding must leave the unknown dims symbolic, not raise
    assert "Shape" in {op for _, op, _ in sess.node_providers()}
    for shape in [(2, 3, 4, 5), (1, 3, 4, 9)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        want, = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        got, = sess.run(None, {"x": x})
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-6)
