"""RNN, GRU and LSTM on weights packed at session creation (com.opforge PackedRNN/GRU/LSTM,
pack_rnn_weights): the session packs W^T into the GEMM's panels once, and the input projections
read them. Against onnxruntime and the unpacked kernel: both directions, gate counts and input
widths off the 32-column panels, sequences above and below the packed product's 8 rows, opset 14's
layout, and what stays unpacked."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge
from opforge.runtime.passes.pack_rnn_weights import pack_directions
from tests.support.numeric import assert_close, assert_would_catch
from tests.support.optimized import ops, session

LEVEL = opforge.GraphOptimizationLevel
rng = np.random.default_rng(0)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_model(op, seq, batch, inputs, hidden, direction, layout=0, opset=17, dtype=np.float32, declared=None):
    """``declared``: X's sequence dim as the model states it (a name: known only at run time)."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op] * hidden
    weights = {"W": rng.standard_normal((dirs, g, inputs)) * 0.2, "R": rng.standard_normal((dirs, g, hidden)) * 0.2,
               "B": rng.standard_normal((dirs, 2 * g)) * 0.1}
    names = ["x", "W", "R", "B"]
    attrs = {"hidden_size": hidden, "direction": direction}
    if opset >= 14:
        attrs["layout"] = layout
    node = helper.make_node(op, names, ["y", "y_h"], **attrs)
    x_shape = [batch, seq, inputs] if layout else [seq, batch, inputs]
    steps = declared if declared is not None else seq
    stated = [batch, steps, inputs] if layout else [steps, batch, inputs]
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, stated)],
                              [helper.make_tensor_value_info("y", elem, None),
                               helper.make_tensor_value_info("y_h", elem, None)],
                              [numpy_helper.from_array(v.astype(dtype), n) for n, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal(x_shape).astype(dtype)}


def test_packed_layout_is_gemm_packeds_panels_of_w_transposed():
    w = rng.standard_normal((2, 40, 7)).astype(np.float32)
    packed = pack_directions(w)
    assert packed.shape == (2, 2, 7, 32) and packed.ctypes.data % 64 == 0
    for d in range(2):
        for gate in range(40):
            np.testing.assert_array_equal(packed[d, gate // 32, :, gate % 32], w[d, gate])
    assert not packed[:, 1, :, 8:].any()   # past G: zero


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("seq, batch, inputs, hidden", [(12, 2, 37, 24), (9, 1, 64, 40), (3, 2, 19, 16)])
def test_packed_rnn_matches_onnxruntime_and_the_unpacked_kernel(op, direction, seq, batch, inputs, hidden):
    # 3 steps of 2 (6 rows, below the packed product's 8) pack only where the length is not known
    # before the run (test_what_stays_unpacked): then the kernel takes W as it lies
    model, feed = rnn_model(op, seq, batch, inputs, hidden, direction, declared="steps" if seq * batch < 8 else None)
    sess = session(model)
    assert ops(sess) == [f"Packed{op}"]
    got = sess.run(None, feed)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    plain = session(model, level=LEVEL.ORT_ENABLE_BASIC)
    assert ops(plain) == [op]
    unpacked = plain.run(None, feed)
    for name, g, w, u in zip(("Y", "Y_h"), got, want, unpacked):
        assert_close(g, w, rtol=1e-5, atol=1e-5, where=f"{op} {name} against onnxruntime")
        assert_would_catch(g, w, rtol=1e-5, atol=1e-5, where=f"{op} {name}")
        assert_close(g, u, rtol=1e-5, atol=1e-5, where=f"{op} {name} against the unpacked kernel")


def test_packed_lstm_batch_first_two_threads():
    """layout = 1 (onnxruntime has none): against the unpacked kernel, itself checked against
    onnxruntime on the time-major form in test_kernels_rnn."""
    model, feed = rnn_model("LSTM", 16, 3, 50, 33, "bidirectional", layout=1, opset=14)
    sess = session(model, threads=2)
    assert ops(sess) == ["PackedLSTM"]
    want = session(model, threads=2, level=LEVEL.ORT_ENABLE_BASIC).run(None, feed)
    for _ in range(3):
        for g, w in zip(sess.run(None, feed), want):
            assert_close(g, w, rtol=1e-5, atol=1e-5, where="batch-first PackedLSTM")


def test_what_stays_unpacked():
    model, _ = rnn_model("LSTM", 10, 1, 16, 8, "forward", dtype=np.float64)   # double: the GEMM tiles are float
    assert ops(session(model)) == ["LSTM"]
    model, _ = rnn_model("GRU", 10, 1, 16, 8, "forward")
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 24, 16]))   # W a feed
    assert ops(session(model)) == ["GRU"]
    model, feed = rnn_model("LSTM", 1, 1, 16, 8, "forward")   # one step, as a streaming model runs it
    sess = session(model)
    assert ops(sess) == ["LSTM"] and sess.pass_stats["pack_rnn_weights"] == 0
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    assert_close(sess.run(None, feed)[0], want[0], rtol=1e-5, atol=1e-5, where="one LSTM step")


def test_a_wrong_packing_is_caught():
    """The packed weights are what the projections read: a packing that drops the last panel's
    lanes changes the outputs."""
    import importlib

    module = importlib.import_module("opforge.runtime.passes.pack_rnn_weights")

    model, feed = rnn_model("LSTM", 12, 1, 20, 24, "forward")   # G = 96: three panels
    want = session(model).run(None, feed)[0]
    real = module.pack_directions
    try:
        def broken(w):
            packed = real(w)
            packed[:, -1, :, 31] = 0
            return packed
        module.pack_directions = broken
        got = session(model).run(None, feed)[0]
    finally:
        module.pack_directions = real
    assert not np.allclose(got, want, rtol=1e-5, atol=1e-5)
