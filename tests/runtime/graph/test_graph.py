"""Graph IR: building from protos, topological order, and structural errors naming nodes."""
import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.onnx_builders import chain_model, model, tensor
from opforge.runtime.errors import GraphError
from opforge.runtime.graph.graph import ALIGNMENT, aligned, build_graph, sort_graph, topological_order


def diamond_nodes():
    return [helper.make_node("Relu", ["x"], ["a"], name="n0"),
            helper.make_node("Neg", ["x"], ["b"], name="n1"),
            helper.make_node("Add", ["a", "b"], ["c"], name="n2"),
            helper.make_node("Abs", ["c"], ["d"], name="n3"),
            helper.make_node("Mul", ["d", "a"], ["y"], name="n4")]


def test_toposort_orders_shuffled_nodes():
    nodes = diamond_nodes()
    for seed in range(10):
        shuffled = nodes[:]
        random.Random(seed).shuffle(shuffled)
        graph = build_graph(model(shuffled, [tensor("x", [2])], [tensor("y", [2])]).graph)
        order = [n.name for n in topological_order(graph)]
        produced = {"x"}
        for name in order:
            node = next(n for n in graph.nodes if n.name == name)
            assert all(i in produced for i in node.inputs), (seed, order)
            produced.update(node.outputs)
        assert sorted(order) == ["n0", "n1", "n2", "n3", "n4"]


def test_toposort_keeps_original_order_among_ready_nodes():
    nodes = [helper.make_node("Neg", ["x"], ["b"], name="second"),
             helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Add", ["a", "b"], ["y"], name="last")]
    graph = build_graph(model(nodes, [tensor("x", [2])], [tensor("y", [2])]).graph)
    assert [n.name for n in topological_order(graph)] == ["second", "first", "last"]


def test_cycle_names_the_nodes_in_it():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="entry"),
             helper.make_node("Add", ["a", "c"], ["b"], name="loop_add"),
             helper.make_node("Neg", ["b"], ["c"], name="loop_neg"),
             helper.make_node("Abs", ["c"], ["y"], name="exit")]
    graph = build_graph(model(nodes, [tensor("x", [2])], [tensor("y", [2])]).graph)
    with pytest.raises(GraphError, match="cycle") as caught:
        topological_order(graph)
    message = str(caught.value)
    assert "'loop_add' (Add" in message and "'loop_neg' (Neg" in message
    assert "entry" not in message and "exit" not in message


def test_missing_producer_names_consumer_and_value():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    graph = build_graph(model(nodes, [tensor("x", [2])], [tensor("y", [2])]).graph)
    with pytest.raises(GraphError, match=r"node 'adder' \(Add, domain 'ai.onnx'\) reads value 'ghost'"):
        topological_order(graph)


def test_value_produced_twice_names_both_nodes():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="one"),
             helper.make_node("Neg", ["x"], ["y"], name="two")]
    graph = build_graph(model(nodes, [tensor("x", [2])], [tensor("y", [2])]).graph)
    with pytest.raises(GraphError, match="'y' is produced twice") as caught:
        topological_order(graph)
    assert "'one' (Relu" in str(caught.value) and "'two' (Neg" in str(caught.value)


def test_unproduced_graph_output_is_reported():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r")]
    graph = build_graph(model(nodes, [tensor("x", [2])], [tensor("y", [2])]).graph)
    with pytest.raises(GraphError, match="output 'y'"):
        topological_order(graph)


def if_model_reading_outer_value():
    """``If`` whose branches read ``scale``, produced by a node listed after the If."""
    then_graph = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["t"])], "then", [],
                                   [tensor("t", [2])])
    else_graph = helper.make_graph([helper.make_node("Sub", ["x", "scale"], ["e"])], "else", [],
                                   [tensor("e", [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_graph,
                              else_branch=else_graph),
             helper.make_node("Abs", ["x"], ["scale"], name="make_scale")]
    return model(nodes, [tensor("cond", [], 9), tensor("x", [2])], [tensor("y", [2])])


def test_subgraph_outer_values_become_implicit_inputs_and_order_the_graph():
    graph = build_graph(if_model_reading_outer_value().graph)
    if_node = graph.nodes[0]
    assert if_node.implicit_inputs == ["x", "scale"]
    assert if_node.attrs["then_branch"].outer_refs() == ["x", "scale"]
    assert [n.name for n in topological_order(graph)] == ["make_scale", "branch"]


def test_subgraph_reading_unknown_value_is_reported():
    body = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["t"], name="inner")], "then",
                             [], [tensor("t", [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=body,
                              else_branch=body)]
    graph = build_graph(model(nodes, [tensor("cond", [], 9)], [tensor("y", [2])]).graph)
    with pytest.raises(GraphError, match="'branch'.*'nowhere'"):
        sort_graph(graph)


def test_node_attributes_and_initializers_are_python_values():
    proto = chain_model()
    proto.graph.node[0].attribute.append(helper.make_attribute("note", [1, 2]))
    proto.graph.initializer.append(helper.make_tensor("w", 1, [2], [1.0, 2.0]))
    graph = build_graph(proto.graph)
    assert graph.nodes[0].attrs["note"] == [1, 2]
    np.testing.assert_array_equal(graph.initializers["w"], np.array([1, 2], np.float32))
    assert graph.inputs[0].tensor_type.shape == ("N", 3)
    assert graph.nodes[0].to_proto().attribute[0].ints == [1, 2]


@pytest.mark.parametrize("dims, data", [([2, 4], [1.0] * 6), ([2**40], [1.0]), ([-1], [1.0])])
def test_an_initializer_whose_data_does_not_match_its_dims_is_refused(dims, data):
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    weight.ClearField("dims")
    weight.dims.extend(dims)
    del weight.float_data[:]
    weight.float_data.extend(data)
    proto = model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [2, 4])], [tensor("y", None)],
                  initializers=[weight])
    with pytest.raises(GraphError, match="initializer 'w' of graph 'test' cannot be read as a tensor of dims"):
        build_graph(proto.graph)



def test_large_initializers_start_on_a_cache_line():
    """Weights of 4 KB to 16 MB are 64-byte aligned (kernels load them 64 bytes at a time), in
    subgraphs too; their values, dtype and read-only flag are kept; small ones are left as given."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((37, 64)).astype(np.float32), "i": np.arange(1000, dtype=np.int64),
               "small": np.ones(3, np.float32)}
    branch = helper.make_graph([helper.make_node("Identity", ["inner"], ["z"])], "branch", [],
                               [tensor("z", [1100])], [numpy_helper.from_array(np.ones(1100, np.float32), "inner")])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=branch)]
    proto = model(nodes, [tensor("x", [2, 37]), tensor("c", [], TensorProto.BOOL)], [tensor("y", [2, 64])])
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    graph = build_graph(proto.graph)
    inner = graph.nodes[1].subgraphs()[0].initializers["inner"]
    for name in ("w", "i"):
        got = graph.initializers[name]
        assert got.ctypes.data % ALIGNMENT == 0 and not got.flags.writeable
        np.testing.assert_array_equal(got, weights[name])
        assert got.dtype == weights[name].dtype
    assert inner.ctypes.data % ALIGNMENT == 0
    raw = np.empty(8192 + ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data + 16) % ALIGNMENT   # 16 bytes past a cache line
    shifted = raw[start:start + 8192].view(np.float32)
    assert aligned(shifted).ctypes.data % ALIGNMENT == 0
    assert aligned(weights["small"]) is weights["small"]
