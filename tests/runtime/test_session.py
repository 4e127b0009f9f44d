"""InferenceSession: onnxruntime's API, feed validation, options, providers and cancellation."""
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from tests.support.onnx_builders import chain_model, model, onnxruntime_outputs, tensor
from opforge.runtime import (FeedError, GraphOptimizationLevel, InferenceSession, KernelError,
                             KernelNotFoundError, RunCancelledError, RunOptions, SessionOptions)
from opforge.runtime.providers.registry import CPU, REFERENCE


def typed_model():
    """Inputs of several kinds: a float matrix with a symbolic dim, an int64 vector, a sequence."""
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["y"]),
             helper.make_node("Identity", ["ids"], ["ids_out"]),
             helper.make_node("SequenceLength", ["s"], ["count"])]
    proto = model(nodes, [tensor("x", ["batch", 3]), tensor("ids", [2], TensorProto.INT64), seq],
                  [tensor("y", ["batch", 3]), tensor("ids_out", [2], TensorProto.INT64),
                   tensor("count", [], TensorProto.INT64)])
    proto.producer_name, proto.model_version, proto.doc_string = "tests", 7, "a test model"
    onnx.helper.set_model_props(proto, {"owner": "runtime"})
    return proto


def good_feed():
    return {"x": np.ones((2, 3), np.float32), "ids": np.array([1, 2], np.int64),
            "s": [np.zeros(2, np.float32)]}


def test_inputs_outputs_and_metadata_read_like_onnxruntime():
    proto = typed_model()
    ours = InferenceSession(proto)
    theirs = onnxruntime.InferenceSession(proto.SerializeToString())
    for mine, other in zip(ours.get_inputs() + ours.get_outputs(),
                           theirs.get_inputs() + theirs.get_outputs()):
        assert (mine.name, mine.type, mine.shape) == (other.name, other.type, other.shape)
    meta, other_meta = ours.get_modelmeta(), theirs.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "version",
                  "custom_metadata_map"):
        assert getattr(meta, field) == getattr(other_meta, field), field


def test_run_returns_requested_outputs_in_order():
    session = InferenceSession(typed_model())
    count, y = session.run(["count", "y"], good_feed())
    assert count == 1 and y.shape == (2, 3)


@pytest.mark.parametrize("change, message", [
    ({"extra": np.ones(1)}, r"unknown input 'extra'"),
    ({"x": np.ones((2, 3), np.float64)}, r"input 'x' expects tensor\(float\) of shape \['batch', 3\], got tensor\(double\)"),
    ({"x": np.ones(3, np.float32)}, r"input 'x' expects .*rank 2.*shape \[3\]"),
    ({"x": np.ones((2, 4), np.float32)}, r"input 'x' expects .*dimension 1 is 4, not 3"),
    ({"ids": np.array([1, 2], np.int32)}, r"input 'ids' expects tensor\(int64\)"),
    ({"s": np.zeros(2, np.float32)}, r"input 's' expects seq\(tensor\(float\)\)"),
])
def test_bad_feeds_name_the_input_and_expected_type(change, message):
    feed = {**good_feed(), **change}
    with pytest.raises(FeedError, match=message):
        InferenceSession(typed_model()).run(None, feed)


def tensor_model():
    """typed_model without its sequence: every input a tensor, so feeds take the quick check."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["ids"], ["ids_out"])]
    return model(nodes, [tensor("x", ["batch", 3]), tensor("ids", [2], TensorProto.INT64)],
                 [tensor("y", ["batch", 3]), tensor("ids_out", [2], TensorProto.INT64)])


def tensor_feed():
    return {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3, "ids": np.array([1, 2], np.int64)}


@pytest.mark.parametrize("change, message", [
    ({"extra": np.ones(1)}, r"unknown input 'extra'"),
    ({"x": np.ones((2, 3), np.float64)}, r"input 'x' expects tensor\(float\) of shape \['batch', 3\], got tensor\(double\)"),
    ({"x": np.ones(3, np.float32)}, r"input 'x' expects .*rank 2.*shape \[3\]"),
    ({"x": np.ones((2, 4), np.float32)}, r"input 'x' expects .*dimension 1 is 4, not 3"),
    ({"ids": np.array([1, 2, 3], np.int64)}, r"input 'ids' expects .*dimension 0 is 3, not 2"),
    ({"ids": np.array([1, 2], np.int32)}, r"input 'ids' expects tensor\(int64\)"),
])
def test_bad_feeds_of_a_tensor_model_are_refused_after_its_plan_is_made(change, message):
    session = InferenceSession(tensor_model())
    for _ in range(2):
        session.run(None, tensor_feed())
    with pytest.raises(FeedError, match=message):
        session.run(None, {**tensor_feed(), **change})


@pytest.mark.parametrize("feed, message", [
    ({"x": np.ones((1, 3), np.float32)}, r"input 'ids' is missing"),
    ({"x": np.ones((1, 3), np.float32), "idz": np.ones(2, np.int64)}, r"unknown input 'idz'"),
    ([("x", np.ones((1, 3), np.float32))], r"must be a dict"),
])
def test_a_feed_without_each_tensor_input_is_refused(feed, message):
    session = InferenceSession(tensor_model())
    session.run(None, tensor_feed())
    with pytest.raises(FeedError, match=message):
        session.run(None, feed)


@pytest.mark.parametrize("layout", ["fortran", "strided", "subclass"])
def test_feeds_in_any_layout_give_the_outputs_of_a_c_ordered_feed(layout):
    session = InferenceSession(tensor_model())
    x = np.asfortranarray(np.arange(-9, 9, dtype=np.float32).reshape(6, 3))
    given = {"fortran": x, "strided": np.arange(-18, 18, dtype=np.float32).reshape(12, 3)[::2],
             "subclass": x.view(type("Sub", (np.ndarray,), {}))}[layout]
    want = np.maximum(np.asarray(given, np.float32), 0)
    for _ in range(3):   # the first run records, later ones run the compiled plan
        y, ids = session.run(None, {"x": given, "ids": np.array([4, 5], np.int64)})
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(ids, [4, 5])


def test_the_quick_feed_check_keys_plans_as_their_signature():
    from opforge.runtime.plan.compiled import signature

    session = InferenceSession(tensor_model())
    env, key = session._feeds.check(tensor_feed())
    assert key == signature(env) and env.keys() == tensor_feed().keys()
    session.run(None, tensor_feed())
    session.run(None, tensor_feed())
    assert session.memory_plan(tensor_feed()) is not None
    assert len(session._runner) == 1


def test_missing_input_names_it_and_its_type():
    feed = good_feed()
    del feed["ids"]
    with pytest.raises(FeedError, match=r"input 'ids' is missing; it expects tensor\(int64\) of shape \[2\]"):
        InferenceSession(typed_model()).run(None, feed)


def test_unknown_output_is_named():
    with pytest.raises(FeedError, match="unknown output 'nope'"):
        InferenceSession(typed_model()).run(["nope"], good_feed())


def test_terminate_stops_the_run():
    with pytest.raises(RunCancelledError, match="before node 'a'"):
        InferenceSession(chain_model()).run(None, {"x": np.ones((1, 3), np.float32)},
                                            RunOptions(terminate=True))


def test_providers_default_to_cpu_then_reference():
    session = InferenceSession(chain_model())
    assert session.get_providers() == [CPU]   # as onnxruntime lists them: what was asked for
    assert session._providers == [CPU, REFERENCE]
    assert InferenceSession(chain_model(), providers=[CPU, REFERENCE]).get_providers() == [CPU, REFERENCE]
    options = SessionOptions(disable_reference_fallback=True)
    InferenceSession(chain_model(), options, providers=[CPU])  # Relu has a native kernel
    decoder = helper.make_model(helper.make_graph(   # ImageDecoder runs on the reference provider only
        [helper.make_node("ImageDecoder", ["x"], ["y"], name="dec")], "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)]),
        opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(KernelNotFoundError, match=r"node 'dec' \(ImageDecoder, domain 'ai.onnx'\) at opset 20"):
        InferenceSession(decoder, options, providers=[CPU])
    with pytest.warns(UserWarning, match="'TensorrtExecutionProvider' is not in available provider names"):
        tensorrt = InferenceSession(chain_model(), providers=["TensorrtExecutionProvider"])
    assert tensorrt.get_providers() == [CPU]   # onnxruntime warns and falls back too


def test_optimized_model_is_saved_folded(tmp_path):
    nodes = [helper.make_node("Constant", [], ["two"], value=helper.make_tensor("v", 1, [], [2.0])),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Cast", ["shape"], ["shape_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["shape_f", "two"], ["scaled"]),
             helper.make_node("Neg", ["x"], ["unused"]),
             helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Add", ["total", "scaled"], ["y"])]
    proto = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2])])
    path = tmp_path / "optimized.onnx"
    session = InferenceSession(proto, SessionOptions(optimized_model_filepath=str(path)))
    assert [op for _, op, _ in session.node_providers()] == ["ReduceSum", "Add"]
    saved = onnx.load(path)
    assert [n.op_type for n in saved.graph.node] == ["ReduceSum", "Add"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = x.sum() + np.array([4.0, 6.0], np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected)
    unoptimized = InferenceSession(proto, SessionOptions(
        graph_optimization_level=GraphOptimizationLevel.ORT_DISABLE_ALL))
    # the Constant became an initializer at load (as onnxruntime's graph does); the rest stay
    assert len(unoptimized.node_providers()) == 6
    np.testing.assert_allclose(unoptimized.run(None, {"x": x})[0], expected)


def test_kernel_failure_names_the_node():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")]
    proto = model(nodes, [tensor("x", [None]), tensor("shape", [1], TensorProto.INT64)],
                  [tensor("y", None)])
    with pytest.raises(KernelError, match=r"node 'bad_reshape' \(Reshape"):
        InferenceSession(proto).run(None, {"x": np.ones(4, np.float32),
                                           "shape": np.array([3], np.int64)})


def test_a_feed_of_more_than_16_dimensions_is_refused():
    proto = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", None)], [tensor("y", None)])
    sess = InferenceSession(proto)
    assert sess.run(None, {"x": np.ones([1] * 16, np.float32)})[0].ndim == 16
    with pytest.raises(FeedError, match="input 'x' has 17 dimensions; opforge takes tensors of at most 16"):
        sess.run(None, {"x": np.ones([1] * 17, np.float32)})


def test_rank_limit_is_the_native_abi_limit():
    from opforge import _core
    from opforge.runtime.graph.types import MAX_RANK

    assert MAX_RANK == _core.MAX_DIMS


@pytest.mark.parametrize("source", ["string", "int64"])
def test_string_outputs_are_object_arrays_like_onnxruntime(source):
    node = (helper.make_node("Identity", ["s"], ["t"]) if source == "string"
            else helper.make_node("Cast", ["s"], ["t"], to=TensorProto.STRING))
    elem = TensorProto.STRING if source == "string" else TensorProto.INT64
    proto = model([node], [tensor("s", [2], elem)], [tensor("t", [2], TensorProto.STRING)])
    feed = {"s": np.array(["ab", "c"], dtype=object) if source == "string" else np.array([12, -3])}
    sess = InferenceSession(proto)
    want, = onnxruntime_outputs(proto, feed)
    for _ in range(2):   # the first run and the planned one
        got, = sess.run(None, feed)
        assert got.dtype == want.dtype == object and got.tolist() == want.tolist()


def test_a_python_list_feed_is_read_in_the_declared_dtype_as_onnxruntime_reads_it():
    session = InferenceSession(chain_model())
    y, = session.run(None, {"x": [[1.0, -2.0, 3.0]]})
    want, = session.run(None, {"x": np.array([[1.0, -2.0, 3.0]], np.float32)})
    assert y.dtype == np.float32 and np.array_equal(y, want)
    ints = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)]), opset_imports=[helper.make_opsetid("", 17)])
    assert InferenceSession(ints).run(None, {"x": [3, 4]})[0].tolist() == [3, 4]
    with pytest.raises(FeedError, match="'x'.*1.5"):
        InferenceSession(ints).run(None, {"x": [1.5, 2]})
