"""float16 models on the CPU: nodes with no float16 kernel compute in float32 between casts
(passes/upcast_float16.py), as onnxruntime does, instead of falling to the reference provider."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge
from tests.support.numeric import assert_close, assert_would_catch, scaled_atol
from tests.support.onnx_builders import tensor
from tests.support.zoo import light_model

LEVEL = opforge.GraphOptimizationLevel
F16 = TensorProto.FLOAT16
rng = np.random.default_rng(7)


def build(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def session(model, level=LEVEL.ORT_ENABLE_ALL):
    options = opforge.SessionOptions()
    options.graph_optimization_level = level
    options.disable_reference_fallback = True   # every node must find a native kernel
    return opforge.InferenceSession(model.SerializeToString(), options)


def ops(sess):
    return [op for _, op, _ in sess.node_providers()]


def onnxruntime_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def weight(*shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def conv(x, w, y, **attrs):
    return helper.make_node("Conv", [x, w], [y], pads=[1, 1, 1, 1], **attrs)


X = rng.standard_normal((1, 4, 6, 6)).astype(np.float16)


def test_conv_computes_in_float32_with_weights_converted_once():
    model = build([conv("x", "w", "y")], [tensor("x", X.shape, F16)], [tensor("y", None, F16)],
                  [("w", weight(8, 4, 3, 3))])
    sess = session(model, LEVEL.ORT_DISABLE_ALL)    # required at every level, as in onnxruntime
    assert ops(sess) == ["Cast", "Conv", "Cast"] and sess.pass_stats == {"upcast_float16": 1}
    conv_node = next(n for n in sess._executor.graph.nodes if n.op_type == "Conv")
    assert sess._executor.graph.initializers[conv_node.inputs[1]].dtype == np.float32  # no Cast per run
    for _ in range(2):   # recording run, then the compiled plan
        got, = sess.run(None, {"x": X})
        want, = onnxruntime_run(model, {"x": X})
        assert got.dtype == np.float16
        assert_close(got, want, 1e-3, scaled_atol(want, 1e-3), "Conv float16 vs onnxruntime")


def test_a_chain_stays_float32_through_ops_that_have_float16_kernels():
    # Relu and Dropout take float16 natively; after the Conv they read its float32 result, so the
    # value is rounded to float16 once, at the end (onnxruntime's result), not between nodes
    nodes = [conv("x", "w", "c"), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d", "mask"]),
             helper.make_node("Mul", ["d", "d"], ["y"])]
    model = build(nodes, [tensor("x", X.shape, F16)], [tensor("y", None, F16)], [("w", weight(8, 4, 3, 3))])
    sess = session(model, LEVEL.ORT_DISABLE_ALL)
    assert ops(sess) == ["Cast", "Conv", "Relu", "Dropout", "Mul", "Cast"]
    assert sess.pass_stats["upcast_float16"] == 4
    got, = sess.run(None, {"x": X})
    want, = onnxruntime_run(model, {"x": X})
    assert_close(got, want, 1e-3, scaled_atol(want, 1e-3), "chain vs onnxruntime")


def test_a_float16_kernel_alone_is_left_as_it_is():
    model = build([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", X.shape, F16)], [tensor("y", None, F16)])
    sess = session(model)
    assert ops(sess) == ["Relu"] and sess.pass_stats["upcast_float16"] == 0
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(X, 0))


def test_a_cast_reads_the_float16_value():
    # Conv's result cast to int32 must round what float16 holds, as the model says: the Cast
    # reads the float16 value, which is cast back for it, and not the float32 one
    x = (rng.standard_normal((1, 4, 6, 6)) * 8).astype(np.float16)
    nodes = [conv("x", "w", "c"), helper.make_node("Cast", ["c"], ["y"], to=TensorProto.INT32)]
    model = build(nodes, [tensor("x", x.shape, F16)], [tensor("y", None, TensorProto.INT32)],
                  [("w", weight(8, 4, 3, 3, scale=1.0))])
    sess = session(model, LEVEL.ORT_DISABLE_ALL)
    assert ops(sess) == ["Cast", "Conv", "Cast", "Cast"]
    got, = sess.run(None, {"x": x})
    want, = onnxruntime_run(model, {"x": x})
    c16 = session(build(nodes[:1], [tensor("x", x.shape, F16)], [tensor("c", None, F16)],
                        [("w", sess_weight(model))]), LEVEL.ORT_DISABLE_ALL).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, c16.astype(np.int32))   # truncation of the float16 values
    # onnxruntime's float16 sums differ from ours by a unit in the last place here and there (the
    # order of float32 additions), which moves a truncation across an integer
    assert np.abs(got - want).max() <= 1 and np.mean(got == want) > 0.95


def test_a_cast_to_float16_keeps_its_type():
    nodes = [conv("x", "w", "c"), helper.make_node("Cast", ["c"], ["h"], to=F16),
             helper.make_node("Relu", ["h"], ["y"])]
    model = build(nodes, [tensor("x", X.shape, F16)], [tensor("y", None, F16)], [("w", weight(8, 4, 3, 3))])
    sess = session(model, LEVEL.ORT_DISABLE_ALL)
    assert ops(sess) == ["Cast", "Conv", "Cast", "Cast", "Relu"]
    got, = sess.run(None, {"x": X})
    want, = onnxruntime_run(model, {"x": X})
    assert got.dtype == np.float16
    assert_close(got, want, 1e-3, scaled_atol(want, 1e-3), "Conv, Cast, Relu")


def sess_weight(model):
    return numpy_helper.to_array(model.graph.initializer[0])


def test_one_cast_per_value_and_a_value_both_read_and_returned():
    nodes = [conv("x", "w1", "a"), conv("x", "w2", "b"), helper.make_node("Add", ["a", "b"], ["y"])]
    model = build(nodes, [tensor("x", X.shape, F16)], [tensor("y", None, F16), tensor("a", None, F16)],
                  [("w1", weight(8, 4, 3, 3)), ("w2", weight(8, 4, 3, 3))])
    sess = session(model, LEVEL.ORT_DISABLE_ALL)
    assert ops(sess).count("Cast") == 3   # x in once; y and a (a graph output) home
    got = sess.run(None, {"x": X})
    want = onnxruntime_run(model, {"x": X})
    for g, w, name in zip(got, want, ("y", "a")):
        assert g.dtype == np.float16
        assert_close(g, w, 1e-3, scaled_atol(w, 1e-3), name)


def float16_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its float32 weights, inputs and outputs stored as float16."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for t in model.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in [*model.graph.input, *model.graph.output]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = F16
    del model.graph.value_info[:]
    return model


def widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float16 model's float32 twin with the same (float16-rounded) weights."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for t in model.graph.initializer:
        if t.data_type == F16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for v in [*model.graph.input, *model.graph.output]:
        if v.type.tensor_type.elem_type == F16:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    return model


@pytest.mark.parametrize("name", ["light_squeezenet", "light_inception_v1"])
def test_float16_cnn_runs_natively_as_onnxruntime_does(name):
    model = float16_model(light_model(name))
    inits = {t.name for t in model.graph.initializer}
    data = next(v for v in model.graph.input if v.name not in inits)
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float16)
    sess = session(model)
    assert {p for _, _, p in sess.node_providers()} == {"CPUExecutionProvider"}
    got = sess.run(None, {data.name: x})[0]
    assert got.dtype == np.float16
    # float32 from end to end, rounded once at the output: as onnxruntime's float16 run and as
    # the float32 twin's output rounded to float16. Rounding between nodes (inception_v1's Dropout
    # breaking the chain) put 5% of error into its softmax.
    truth = onnxruntime_run(widened(model), {data.name: x.astype(np.float32)})[0]
    theirs = onnxruntime_run(model, {data.name: x})[0]
    atol = scaled_atol(truth, 1e-4)
    assert_close(got.astype(np.float32), truth, 1e-3, atol, f"{name} float16 vs float32")
    assert_would_catch(got, truth, 1e-3, atol, name, error=5e-3)   # float16 keeps 3 digits
    assert_close(got, theirs, 1e-3, scaled_atol(theirs, 1e-4), f"{name} vs onnxruntime float16")


def branch(name, nodes, output, shape=None):
    return helper.make_graph(nodes, name, [], [tensor(output, shape, F16)])


def test_float16_nodes_inside_if_branches_compute_in_float32():
    # a Conv (no float16 kernel) in one branch, reading the outer weights; a Softmax after it
    # and a ReduceMean in the other: every node of both branches native, as onnxruntime
    then_g = branch("then", [conv("x", "w", "c"), helper.make_node("Softmax", ["c"], ["t"], axis=1)],
                    "t", [1, 8, 6, 6])
    else_g = branch("else", [helper.make_node("LeakyRelu", ["x"], ["e0"]),
                             helper.make_node("ReduceMean", ["e0"], ["e"], keepdims=1)], "e", [1, 1, 1, 1])
    model = build([helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
                  [tensor("x", X.shape, F16), tensor("flag", [], TensorProto.BOOL)], [tensor("y", None, F16)],
                  [("w", weight(8, 4, 3, 3))])
    sess = session(model)   # the reference fallback is off
    assert sess.pass_stats["upcast_float16"] == 2   # the Conv and the Softmax after it
    for flag in (True, False):
        feeds = {"x": X, "flag": np.array(flag)}
        for _ in range(2):
            got, = sess.run(None, feeds)
            want, = onnxruntime_run(model, feeds)
            assert got.dtype == np.float16
            assert_close(got, want, 1e-3, scaled_atol(want, 1e-3), f"If branch {flag}")
    assert_would_catch(got, want, 1e-3, scaled_atol(want, 1e-3), "If branch", error=5e-3)


def test_float16_nodes_of_loop_and_scan_bodies_compute_in_float32():
    # a Loop whose body convolves its carried state (the weights are the body's own constant
    # after the session hoists them), and a Scan whose body Convs each slice, an If nested in it
    loop_body = helper.make_graph(
        [conv("s", "w", "c"), helper.make_node("Tanh", ["c"], ["s_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "loop_body",
        [tensor("i", [], TensorProto.INT64), tensor("cond", [], TensorProto.BOOL), tensor("s", X.shape, F16)],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("s_out", X.shape, F16)])
    inner_if = helper.make_node(
        "If", ["pick"], ["picked"],
        then_branch=branch("then", [conv("slice", "dw", "p0", group=4)], "p0", [1, 4, 6, 6]),
        else_branch=branch("else", [helper.make_node("Neg", ["slice"], ["p1"])], "p1", [1, 4, 6, 6]))
    scan_body = helper.make_graph(
        [inner_if, helper.make_node("Add", ["acc", "picked"], ["acc_out"]),
         helper.make_node("Identity", ["picked"], ["each"])], "scan_body",
        [tensor("acc", [1, 4, 6, 6], F16), tensor("slice", [1, 4, 6, 6], F16)],
        [tensor("acc_out", [1, 4, 6, 6], F16), tensor("each", [1, 4, 6, 6], F16)])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["looped"], body=loop_body),
             helper.make_node("Unsqueeze", ["looped", "zero"], ["stack"]),
             helper.make_node("Concat", ["stack", "stack"], ["seq"], axis=0),
             helper.make_node("Scan", ["looped", "seq"], ["total", "all"], body=scan_body, num_scan_inputs=1)]
    model = build(nodes, [tensor("x", X.shape, F16), tensor("trips", [], TensorProto.INT64),
                          tensor("pick", [], TensorProto.BOOL)],
                  [tensor("total", None, F16), tensor("all", None, F16)],
                  [("w", weight(4, 4, 3, 3)), ("dw", weight(4, 1, 3, 3)), ("zero", np.array([0], np.int64))])
    sess = session(model)
    assert sess.pass_stats["upcast_float16"] >= 3   # the Loop body's Conv and Tanh, the If's Conv
    for pick in (True, False):
        feeds = {"x": X, "trips": np.array(3, np.int64), "pick": np.array(pick)}
        for _ in range(2):
            got = sess.run(None, feeds)
            want = onnxruntime_run(model, feeds)
            for g, w, name in zip(got, want, ("total", "all")):
                assert g.dtype == np.float16
                assert_close(g, w, 2e-3, scaled_atol(w, 1e-4), f"{name}, pick {pick}")
    assert_would_catch(got[0], want[0], 2e-3, scaled_atol(want[0], 1e-4), "Scan total", error=5e-3)
