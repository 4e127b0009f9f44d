"""ai.onnx.ml's map readers on the CPU provider (providers/cpu/ml_maps.py): DictVectorizer and
CastMap, against onnxruntime where its Python binding can feed the map, else against values
written out here; and skl2onnx's conversion of a DictVectorizer pipeline."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime as ort
import opforge
from opforge.runtime.errors import KernelError

S, I, F = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT


def map_model(node, key_type, value_type, out_type):
    value = helper.make_value_info("x", helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(value_type, None)))
    graph = helper.make_graph([node], "g", [value], [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    return model.SerializeToString()


def native(model):
    options = opforge.SessionOptions()
    options.disable_reference_fallback = True
    session = opforge.InferenceSession(model, options)
    assert {p for _, _, p in session.node_providers()} == {"CPUExecutionProvider"}
    return session


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("key_type, vocabulary, feed", [
    (S, ["a", "b", "c", "a"], {"a": 1.5, "c": -2.0, "zz": 7.0}),   # a repeated key fills both columns
    (I, [3, 1, 2], {1: 1.5, 3: 2.0, 9: 4.0}),                    # 9 is no column
    (S, ["p", "q"], {"q": 0.25}),
])
def test_dict_vectorizer_as_onnxruntime(key_type, vocabulary, feed):
    attr = {"string_vocabulary": vocabulary} if key_type == S else {"int64_vocabulary": vocabulary}
    model = map_model(helper.make_node("DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml", **attr), key_type, F, F)
    got, = native(model).run(None, {"x": feed})
    want, = ort.InferenceSession(model).run(None, {"x": feed})
    same(got, want)


def test_dict_vectorizer_string_and_int_values():
    # onnxruntime's Python binding cannot feed map(int64, string): the values are written out
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml", int64_vocabulary=[4, 2])
    session = native(map_model(node, I, S, S))
    same(session.run(None, {"x": {2: "hi", 7: "no"}})[0], np.array([["", "hi"]], dtype=object))
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml", string_vocabulary=["a", "b"])
    session = native(map_model(node, S, I, I))
    same(session.run(None, {"x": {"b": 2, "zz": 3}})[0], np.array([[0, 2]], np.int64))
    same(session.run(None, {"x": {}})[0], np.array([[0, 0]], np.int64))   # onnxruntime refuses an empty map


@pytest.mark.parametrize("cast_to, out_type", [("TO_FLOAT", F), ("TO_INT64", I), ("TO_STRING", S)])
@pytest.mark.parametrize("form", ["DENSE", "SPARSE"])
def test_cast_map_of_floats_as_onnxruntime(cast_to, out_type, form):
    node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", cast_to=cast_to, map_form=form, max_map=8)
    model = map_model(node, I, F, out_type)
    feed = {3: 1.5, 0: -2.25, 5: 7.0}
    got, = native(model).run(None, {"x": feed})
    want, = ort.InferenceSession(model).run(None, {"x": feed})
    same(got, want)


def test_cast_map_of_strings():
    # onnxruntime's Python binding cannot feed map(int64, string): the values are written out
    def run(cast_to, form):
        node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", cast_to=cast_to, map_form=form, max_map=4)
        return native(map_model(node, I, S, F)).run(None, {"x": {3: "1.5", 0: "-2"}})[0]

    same(run("TO_FLOAT", "DENSE"), np.array([[-2.0, 1.5]], np.float32))
    same(run("TO_STRING", "SPARSE"), np.array([["-2", "0.f", "0.f", "1.5"]], dtype=object))
    same(run("TO_INT64", "SPARSE"), np.array([[-2, 0, 0, 1]], np.int64))


def test_cast_map_errors_name_the_node():
    node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", name="cm", map_form="SPARSE", max_map=2)
    session = native(map_model(node, I, F, F))
    with pytest.raises(KernelError, match=r"'cm'.*key 5 is outside \[0, max_map=2\)"):
        session.run(None, {"x": {5: 1.0}})
    node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", name="cm2")
    session = native(map_model(node, I, S, F))
    with pytest.raises(KernelError, match=r"'cm2'.*'abc' is not a number"):
        session.run(None, {"x": {1: "abc"}})


def test_skl2onnx_dict_vectorizer_pipeline_matches_onnxruntime():
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType

    rng = np.random.default_rng(0)
    keys = ["age", "height", "weight", "score", "x"]
    rows = [{k: float(rng.standard_normal()) for k in rng.choice(keys, 3, replace=False)} for _ in range(60)]
    pipe = make_pipeline(DictVectorizer(sparse=False), LogisticRegression()).fit(rows, rng.integers(0, 3, 60))
    onx = convert_sklearn(pipe, initial_types=[("input", DictionaryType(StringTensorType([]), FloatTensorType([])))],
                          target_opset={"": 17, "ai.onnx.ml": 3}).SerializeToString()
    session, oracle = native(onx), ort.InferenceSession(onx)
    assert [op for _, op, _ in session.node_providers()][0] == "DictVectorizer"
    for row in rows[:20] + [{"unseen": 1.0}]:
        (label, probabilities), (want_label, want) = session.run(None, {"input": row}), oracle.run(None, {"input": row})
        same(label, want_label)
        assert probabilities[0].keys() == want[0].keys()
        np.testing.assert_allclose([probabilities[0][k] for k in want[0]], [want[0][k] for k in want[0]], rtol=1e-6)
