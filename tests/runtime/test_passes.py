"""Graph passes: constant folding with the session's kernels, and dead-node removal."""
import numpy as np
from onnx import TensorProto, helper

from onnx_builders import model, tensor
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
