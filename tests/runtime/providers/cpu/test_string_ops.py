"""String ops run by the executor's own kernels (no reference fallback), against onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from opforge.runtime import InferenceSession, SessionOptions
from opforge.runtime.errors import KernelError, KernelNotFoundError

S = TensorProto.STRING


def model(node, inputs, outputs, opset=20):
    graph = helper.make_graph([node], "strings", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m.SerializeToString()


def assert_like_onnxruntime(m, feed):
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feed)
    session = InferenceSession(m, SessionOptions(disable_reference_fallback=True))
    for _ in range(2):   # the second run goes through the compiled plan
        got = session.run(None, feed)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
            np.testing.assert_array_equal(g, w)


def test_string_concat_broadcasts():
    node = helper.make_node("StringConcat", ["x", "y"], ["z"])
    m = model(node, [helper.make_tensor_value_info("x", S, [2, 3]), helper.make_tensor_value_info("y", S, [3])],
              [helper.make_tensor_value_info("z", S, None)])
    x = np.array([["a", "bé", ""], ["的", "x y", "z"]], dtype=object)
    assert_like_onnxruntime(m, {"x": x, "y": np.array(["1", "", "中"], dtype=object)})


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "-"}, {"delimiter": "-", "maxsplit": 1}, {"maxsplit": 2}])
def test_string_split(attrs):
    node = helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs)
    m = model(node, [helper.make_tensor_value_info("x", S, [2, 2])],
              [helper.make_tensor_value_info("y", S, None), helper.make_tensor_value_info("n", TensorProto.INT64, None)])
    x = np.array([["a-b--c", "  one two  three "], ["", "x-"]], dtype=object)
    assert_like_onnxruntime(m, {"x": x})


# onnxruntime's StringNormalizer needs the en_US.UTF-8 locale (for case changes and case-blind
# stop words), which this machine may lack: the expected outputs, from the spec, are written out
@pytest.mark.parametrize("attrs,want", [
    ({"case_change_action": "LOWER", "stopwords": ["the", "A"]}, ["cat"]),
    ({"case_change_action": "UPPER", "stopwords": ["The"], "is_case_sensitive": 1}, ["A", "CAT", "THE"]),
    ({"stopwords": ["a", "the", "cat"]}, [""]),
    ({}, ["The", "a", "Cat", "the"])])
@pytest.mark.parametrize("rank", [1, 2])
def test_string_normalizer(attrs, want, rank):
    node = helper.make_node("StringNormalizer", ["x"], ["y"], **attrs)
    shape = [4] if rank == 1 else [1, 4]
    m = model(node, [helper.make_tensor_value_info("x", S, shape)], [helper.make_tensor_value_info("y", S, None)], 10)
    x = np.array(["The", "a", "Cat", "the"], dtype=object).reshape(shape)
    got, = InferenceSession(m, SessionOptions(disable_reference_fallback=True)).run(None, {"x": x})
    np.testing.assert_array_equal(got, np.array(want, dtype=object).reshape((-1,) if rank == 1 else (1, -1)))


def test_regex_full_match_and_a_bad_pattern():
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"[a-z]+@(gmail|yahoo)\.com")
    m = model(node, [helper.make_tensor_value_info("x", S, [3])], [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
    assert_like_onnxruntime(m, {"x": np.array(["bob@gmail.com", "bob@gmail.comx", "x@yahoo.com"], dtype=object)})
    bad = model(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern="(", name="rx"),
                [helper.make_tensor_value_info("x", S, [1])], [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
    with pytest.raises(KernelError, match="rx.*not a valid regex"):
        InferenceSession(bad, SessionOptions(disable_reference_fallback=True))


@pytest.mark.parametrize("op, attrs", [("RegexFullMatch", {"pattern": b"\xff+"}),
                                       ("StringNormalizer", {"stopwords": [b"ok", b"\xfe"]}),
                                       ("StringSplit", {"delimiter": b"\xc3"})])
def test_string_attributes_that_are_not_utf8_name_the_attribute(op, attrs):
    outputs = ["y", "z"] if op == "StringSplit" else ["y"]
    node = helper.make_node(op, ["x"], outputs, name="odd", **attrs)
    m = model(node, [helper.make_tensor_value_info("x", S, [1])], [helper.make_tensor_value_info(o, S, None) for o in outputs])
    name = next(iter(attrs))
    with pytest.raises(KernelError, match=f"odd.*attribute '{name}' is not UTF-8"):
        InferenceSession(m, SessionOptions(disable_reference_fallback=True)).run(None, {"x": np.array(["a"], object)})


def test_equal_of_strings_runs_in_python_while_numbers_keep_the_c_kernel():
    node = helper.make_node("Equal", ["x", "y"], ["z"])
    strings = model(node, [helper.make_tensor_value_info("x", S, [3]), helper.make_tensor_value_info("y", S, [1])],
                    [helper.make_tensor_value_info("z", TensorProto.BOOL, None)], 19)
    assert_like_onnxruntime(strings, {"x": np.array(["a", "b", "a"], dtype=object), "y": np.array(["a"], dtype=object)})
    F = TensorProto.FLOAT
    numbers = model(node, [helper.make_tensor_value_info("x", F, [3]), helper.make_tensor_value_info("y", F, [1])],
                    [helper.make_tensor_value_info("z", TensorProto.BOOL, None)], 19)
    session = InferenceSession(numbers, SessionOptions(disable_reference_fallback=True))
    assert hasattr(session._executor.steps[0].kernel, "handle")   # the native kernel
    np.testing.assert_array_equal(session.run(None, {"x": np.array([1, 2, 1], np.float32),
                                                     "y": np.array([1], np.float32)})[0], [True, False, True])


def test_a_native_kernel_quoting_an_attribute_that_is_not_utf8_says_so_escaped():
    """A kernel's message quoting a string attribute holds its bytes as they are: they reach the
    user as \\x escapes in an opforge error (at session creation, where infer refuses the node,
    and at run time), never as a UnicodeDecodeError."""
    cast = model(helper.make_node("CastLike", ["x", "like"], ["y"], name="odd", round_mode=b"up\xff"),
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                  helper.make_tensor_value_info("like", TensorProto.FLOAT, [1])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=25)
    with pytest.raises(KernelNotFoundError, match=r"odd.*round_mode.*got 'up\\xff'"):
        InferenceSession(cast, SessionOptions(disable_reference_fallback=True)).run(
            None, {"x": np.ones(2, np.float32), "like": np.ones(1, np.float32)})

    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], name="linear", domain="ai.onnx.ml",
                            coefficients=[1.0, -1.0, 0.5, 0.5], intercepts=[0.0, 0.0], classlabels_ints=[0, 1],
                            post_transform=b"SOFT\xffMAX")
    graph = helper.make_graph([node], "ml", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)])
    linear = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 3)])
    linear.ir_version = 9
    with pytest.raises(KernelError, match=r"linear.*SOFT\\xffMAX"):
        InferenceSession(linear.SerializeToString(), SessionOptions(disable_reference_fallback=True)).run(
            None, {"x": np.ones((3, 2), np.float32)})
