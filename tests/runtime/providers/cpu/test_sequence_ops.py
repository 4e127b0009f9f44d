"""Sequence ops run by the executor's own kernels (no reference fallback), against onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from opforge.runtime import InferenceSession, SessionOptions
from opforge.runtime.errors import KernelError

RNG = np.random.default_rng(3)
SEQ = helper.make_tensor_sequence_value_info


def model(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, "sequences", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def native_session(m):
    return InferenceSession(m.SerializeToString(), SessionOptions(disable_reference_fallback=True))


def assert_like_onnxruntime(m, feed):
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    session = native_session(m)
    for attempt in range(2):   # the second run goes through the compiled plan
        got = session.run(None, feed)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(w, list):
                assert isinstance(g, list) and len(g) == len(w), f"run {attempt}: {g!r} != {w!r}"
                for a, b in zip(g, w):
                    np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_array_equal(g, w)


def test_split_insert_erase_at_length_concat():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=0),
        helper.make_node("SequenceInsert", ["parts", "x", "front"], ["with_x"]),
        helper.make_node("SequenceErase", ["with_x", "second"], ["erased"]),
        helper.make_node("SequenceAt", ["erased", "last"], ["tail"]),
        helper.make_node("SequenceLength", ["erased"], ["count"]),
        helper.make_node("ConcatFromSequence", ["erased"], ["joined"], axis=0),
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=1, keepdims=0),
        helper.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=-1, new_axis=1),
    ]
    inits = [helper.make_tensor("sizes", TensorProto.INT64, [3], [1, 2, 3]),
             helper.make_tensor("front", TensorProto.INT64, [], [0]),
             helper.make_tensor("second", TensorProto.INT64, [], [1]),
             helper.make_tensor("last", TensorProto.INT64, [], [-1])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("tail", "joined", "stacked")]
    outs += [helper.make_tensor_value_info("count", TensorProto.INT64, []), SEQ("erased", TensorProto.FLOAT, None)]
    m = model(nodes, [x], outs)
    m.graph.initializer.extend(inits)
    assert_like_onnxruntime(m, {"x": RNG.standard_normal((6, 4)).astype(np.float32)})


def test_construct_empty_and_identity_of_a_sequence():
    a = helper.make_tensor_value_info("a", TensorProto.INT32, [2])
    b = helper.make_tensor_value_info("b", TensorProto.INT32, [3])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
             helper.make_node("Identity", ["seq"], ["same"]),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.INT32),
             helper.make_node("SequenceInsert", ["empty", "b"], ["one"]),
             helper.make_node("ConcatFromSequence", ["same"], ["flat"], axis=0)]
    outs = [SEQ("same", TensorProto.INT32, None), SEQ("one", TensorProto.INT32, None),
            helper.make_tensor_value_info("flat", TensorProto.INT32, None)]
    assert_like_onnxruntime(model(nodes, [a, b], outs), {"a": np.array([1, 2], np.int32),
                                                         "b": np.array([3, 4, 5], np.int32)})


def test_split_to_sequence_with_a_scalar_split_leaves_a_short_last_piece():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 2])
    nodes = [helper.make_node("SplitToSequence", ["x", "three"], ["seq"], axis=0)]
    m = model(nodes, [x], [SEQ("seq", TensorProto.FLOAT, None)])
    m.graph.initializer.append(helper.make_tensor("three", TensorProto.INT64, [], [3]))
    assert_like_onnxruntime(m, {"x": RNG.standard_normal((7, 2)).astype(np.float32)})


def test_a_position_outside_the_sequence_names_the_node():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("SequenceConstruct", ["a", "a"], ["seq"]),
             helper.make_node("SequenceAt", ["seq", "where"], ["y"], name="pick")]
    m = model(nodes, [a, helper.make_tensor_value_info("where", TensorProto.INT64, [])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    session = native_session(m)
    np.testing.assert_array_equal(session.run(None, {"a": np.ones(2, np.float32), "where": np.array(-2)})[0],
                                  np.ones(2, np.float32))
    with pytest.raises(KernelError, match=r"pick.*position 2 is outside \[-2, 1\]"):
        session.run(None, {"a": np.ones(2, np.float32), "where": np.array(2)})
