"""ai.onnx.ml's string and map ops on the CPU provider (LabelEncoder, CategoryMapper,
OneHotEncoder, ZipMap, string class labels): scikit-learn pipelines as skl2onnx converts them by
default, and one-node models of each attribute variant, compared with onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import opforge
from tests.support.numeric import assert_close, assert_would_catch
from opforge.runtime import SessionOptions

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn import compose, ensemble, linear_model, pipeline, preprocessing, svm  # noqa: E402
from tests.support.ml_tables import table

CPU = "CPUExecutionProvider"
ML = "ai.onnx.ml"


def sessions(model):
    """(opforge session with no reference fallback, onnxruntime session) for `model`."""
    data = model.SerializeToString()
    ours = opforge.InferenceSession(data, SessionOptions(intra_op_num_threads=1, disable_reference_fallback=True))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ours, ort.InferenceSession(data, options, providers=[CPU])


def assert_same_value(got, want, tolerance, name):
    """Arrays: same dtype and shape, numbers within `tolerance` (0: bit for bit, the sign of
    zero included; else a 1e-3 relative error must show), anything else equal. ZipMap's lists
    of dicts: same length, same keys in the same order and types, Python float scores compared
    as numbers are."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), name
        for g, w in zip(got, want):
            assert [(type(k), k) for k in g] == [(type(k), k) for k in w], name
            assert all(type(v) is float for v in g.values()), name
        if want:
            assert_same_value(np.array([list(g.values()) for g in got]),
                              np.array([list(w.values()) for w in want]), tolerance, name)
        return
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=name)
    elif tolerance:
        assert_close(got, want, 0, tolerance, name)
        assert_would_catch(got, want, 0, tolerance, name)
    else:
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"), err_msg=name)


def assert_same(model, feeds, tolerance=0.0):
    """Every output of both sessions the same (see assert_same_value), on the first run (the
    Python executor's) and the next two (the compiled plan's, where a OneHotEncoder of strings
    runs in the core); every node on the CPU provider. Returns opforge's outputs."""
    ours, theirs = sessions(model)
    want = theirs.run(None, feeds)
    for _ in range(3):
        got = ours.run(None, feeds)
        for name, g, w in zip([o.name for o in theirs.get_outputs()], got, want):
            assert_same_value(g, w, tolerance, f"output {name!r}")
    placed = [(name, provider) for name, _, provider in ours.node_providers()]
    assert all(p == CPU for _, p in placed), placed
    return got


# ---- scikit-learn pipelines, converted with skl2onnx's default options (ZipMap included)


def feeds_of(frame):
    """One [N, 1] feed per column, strings as object arrays."""
    return {c: np.asarray(frame[c].to_numpy(), dtype=object if frame[c].dtype.kind not in "fi" else None)
            .reshape(-1, 1) for c in frame.columns}


def encoded(model, *, int_categories=False):
    """`model` after one-hot encoded string (and, with `int_categories`, int64) columns and
    standardised float ones."""
    categorical = ["color", "size"] + (["doors"] if int_categories else [])
    numeric = ["weight", "height"] + ([] if int_categories else ["doors"])
    columns = compose.ColumnTransformer([("cat", preprocessing.OneHotEncoder(handle_unknown="ignore"), categorical),
                                         ("num", preprocessing.StandardScaler(), numeric)])
    return pipeline.make_pipeline(columns, model)


PIPELINES = {
    "logistic regression": (lambda: encoded(linear_model.LogisticRegression()), 1e-6),
    "random forest, int64 categories": (lambda: encoded(ensemble.RandomForestClassifier(10, max_depth=5, random_state=0),
                                                        int_categories=True), 0.0),
    "gradient boosting": (lambda: encoded(ensemble.GradientBoostingClassifier(n_estimators=8, random_state=0)), 1e-6),
    "svc with probabilities": (lambda: encoded(svm.SVC(probability=True, random_state=0)), 1e-6),
    "svc": (lambda: encoded(svm.SVC()), 1e-5),
}


@pytest.mark.filterwarnings("ignore:.*probability.*:FutureWarning")   # sklearn 1.9 deprecates SVC(probability=True)
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("kind", list(PIPELINES))
def test_pipelines_with_string_columns_and_labels_match_onnxruntime(kind, binary):
    from skl2onnx import to_onnx

    frame, labels = table()
    if binary:
        labels = np.where(labels == "low", "low", "not low").astype(object)
    make, tolerance = PIPELINES[kind]
    fitted = make().fit(frame, labels)
    model = to_onnx(fitted, frame[:1])
    assert "ZipMap" in {n.op_type for n in model.graph.node} or kind == "svc"
    unseen, _ = table(60, seed=1)
    unseen.loc[:4, "color"] = "mauve"   # a category fit never saw: all zeros
    got = assert_same(model, feeds_of(unseen), tolerance)
    np.testing.assert_array_equal(got[0], fitted.predict(unseen))


@pytest.mark.parametrize("labels", ["int", "string"])
def test_a_forest_gives_maps_keyed_by_its_labels(labels):
    from skl2onnx import to_onnx

    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5) * 5
    if labels == "string":
        y = np.array(["zero", "one", "five", "six"], object)[np.searchsorted([0, 1, 5, 6], y)]
    fitted = ensemble.RandomForestClassifier(8, max_depth=4, random_state=0).fit(x, y)
    got = assert_same(to_onnx(fitted, x[:1]), {"X": x})
    assert type(next(iter(got[1][0]))) is (int if labels == "int" else str)


def test_label_and_ordinal_encoders_match_onnxruntime():
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import Int64TensorType, StringTensorType

    words = np.array(["pear", "fig", "kiwi", "fig", "plum"], object)
    encoder = preprocessing.LabelEncoder().fit(words)
    assert_same(to_onnx(encoder, initial_types=[("X", StringTensorType([None]))]), {"X": words})
    numbers = np.array([30, 9, 4, 9, 30], np.int64)
    encoder = preprocessing.LabelEncoder().fit(numbers)
    assert_same(to_onnx(encoder, initial_types=[("X", Int64TensorType([None]))]), {"X": numbers})
    columns = np.array([["a", "x"], ["b", "y"], ["c", "x"]], object)
    encoder = preprocessing.OrdinalEncoder().fit(columns)
    got = assert_same(to_onnx(encoder, initial_types=[("X", StringTensorType([None, 2]))]), {"X": columns[::-1]})
    np.testing.assert_array_equal(got[0], encoder.transform(columns[::-1]))


# ---- one node of each op, its attribute variants


def one_node(op, x, version, output=TensorProto.UNDEFINED, outputs=("Y",), **attrs):
    """A model of one ai.onnx.ml node reading X (its element type from `x`)."""
    node = helper.make_node(op, ["X"], list(outputs), domain=ML, **attrs)
    element = TensorProto.STRING if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    results = [helper.make_tensor_value_info(outputs[0], output, None) if output else
               helper.make_empty_tensor_value_info(outputs[0])]
    results += [helper.make_empty_tensor_value_info(o) for o in outputs[1:]]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", element, None)], results)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, version)],
                             ir_version=8)


def strings(*words):
    return np.array(words, dtype=object)


def tensor(values):
    return numpy_helper.from_array(np.asarray(values))


S, I, F, D = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT, TensorProto.DOUBLE
NUMBERS = np.array([[1, 7], [2, -3], [7, 1]], np.int64)
WORDS = strings("a", "zz", "b", "a", "", "c").reshape(2, 3)
FLOATS = np.array([1.5, np.nan, -0.0, 0.0, 2.0, 9.0], np.float32)

LABEL_ENCODERS = {
    # name: (opset, input, output type, attributes)
    "v1 strings to indices, a repeated class": (1, WORDS, I, dict(classes_strings=["a", "a", "b"], default_int64=-7)),
    "v1 indices to strings": (1, NUMBERS, S, dict(classes_strings=["a", "b", "c"], default_string="?")),
    "v1 indices to strings, default": (1, NUMBERS, S, dict(classes_strings=["a", "b", "c"])),
    "strings to int64, first of repeated keys": (2, WORDS, I, dict(keys_strings=["b", "a", "b"], values_int64s=[1, 2, 3])),
    "strings to strings": (2, WORDS, S, dict(keys_strings=["a", "c"], values_strings=["A", "C"], default_string="-")),
    "strings to floats, default -0": (3, WORDS, F, dict(keys_strings=["a", "b"], values_floats=[0.5, -2.25])),
    "int64 to strings": (2, NUMBERS, S, dict(keys_int64s=[7, 2, 7], values_strings=["seven", "two", "x"])),
    "int64 to int64": (2, NUMBERS, I, dict(keys_int64s=[1, 2], values_int64s=[10, 20], default_int64=99)),
    "int64 to floats": (2, NUMBERS, F, dict(keys_int64s=[1, -3], values_floats=[0.25, 1e-8], default_float=4.5)),
    "floats to int64, NaN no key before opset 4": (2, FLOATS, I, dict(keys_floats=[np.nan, 0.0, 2.0], values_int64s=[5, 6, 7])),
    "floats to strings": (2, FLOATS, S, dict(keys_floats=[1.5, 9.0], values_strings=["x", "y"])),
    "floats to floats": (2, FLOATS, F, dict(keys_floats=[1.5, 9.0], values_floats=[3.0, 0.125])),
    "opset 4: NaN is a key": (4, FLOATS, I, dict(keys_floats=[np.nan, 0.0, 2.0], values_int64s=[5, 6, 7])),
    "opset 4: tensors of int64 to strings, default tensor": (
        4, NUMBERS, S, dict(keys_tensor=tensor(np.array([7, 2])), values_tensor=tensor(strings("s", "t")),
                            default_tensor=tensor(strings("dflt")))),
    "opset 4: doubles to doubles, default -0": (
        4, FLOATS.astype(np.float64), D, dict(keys_tensor=tensor(np.array([1.5, np.nan])),
                                              values_tensor=tensor(np.array([1e300, 2.5])))),
    "opset 4: strings to doubles": (
        4, WORDS, D, dict(keys_strings=["zz", ""], values_tensor=tensor(np.array([0.1, 0.2])),
                          default_tensor=tensor(np.array([7.0])))),
    "opset 4: int64 to int64, default_int64": (4, NUMBERS, I, dict(keys_int64s=[7], values_int64s=[2], default_int64=55)),
}


@pytest.mark.parametrize("case", list(LABEL_ENCODERS))
def test_label_encoder(case):
    opset, x, output, attrs = LABEL_ENCODERS[case]
    assert_same(one_node("LabelEncoder", x, opset, output, **attrs), {"X": x})


CATEGORY_MAPPERS = {
    "strings to int64, last of repeated": (WORDS, I, dict(cats_strings=["a", "b", "a"], cats_int64s=[1, 2, 3])),
    "strings to int64, default": (WORDS, I, dict(cats_strings=["c"], cats_int64s=[4], default_int64=-9)),
    "int64 to strings, last of repeated": (NUMBERS, S, dict(cats_strings=["a", "b", "c"], cats_int64s=[7, 2, 7])),
    "int64 to strings, default": (NUMBERS, S, dict(cats_strings=["a"], cats_int64s=[1], default_string="none")),
    # cats_int64s 0..n-1 (class indices to labels) take a table; below 0 and from n on the default
    "int64 0..n-1 to strings": (np.array([[0, 2], [-1, 3], [9, 1], [-7, 0]], np.int64), S,
                                dict(cats_strings=["x", "y", "z"], cats_int64s=[0, 1, 2], default_string="none")),
    "int64 0..n-1 to strings, default default": (np.array([[2, -1, 3, 1 << 62]], np.int64), S,
                                                 dict(cats_strings=["x", "y", "z"], cats_int64s=[0, 1, 2])),
}


@pytest.mark.parametrize("case", list(CATEGORY_MAPPERS))
def test_category_mapper(case):
    x, output, attrs = CATEGORY_MAPPERS[case]
    assert_same(one_node("CategoryMapper", x, 1, output, **attrs), {"X": x})


ONE_HOT = {
    "strings": (WORDS, dict(cats_strings=["c", "a", "b"])),
    "strings, one dimension": (WORDS.ravel(), dict(cats_strings=["zz", "a"])),
    "int64, repeated category: its last index": (NUMBERS, dict(cats_int64s=[7, 1, 7, 2])),
    "int64, three dimensions": (NUMBERS.reshape(3, 1, 2), dict(cats_int64s=[1, 2])),
    "floats cut to int64": (np.array([[1.7, -0.5, 2.0, np.nan]], np.float32), dict(cats_int64s=[2, 1, 0])),
    "doubles cut to int64": (np.array([[-1.2, 3.99]]), dict(cats_int64s=[-1, 3])),
    "zeros=0, every category known": (WORDS[:, :1], dict(cats_strings=["a", "zz"], zeros=0)),
    # past 512 categories rows are set one by one instead of taken from a table
    "strings, 600 categories": (strings(*(f"w{i}" for i in range(0, 1300, 3))).reshape(-1, 1),
                                dict(cats_strings=[f"w{i}" for i in range(600)][::-1])),
    "int64, 600 categories": (np.arange(-5, 1300, 7, dtype=np.int64).reshape(1, -1),
                              dict(cats_int64s=list(range(600))[::-1])),
    "no elements": (WORDS[:0], dict(cats_strings=["a", "b"])),
}


@pytest.mark.parametrize("case", list(ONE_HOT))
def test_one_hot_encoder(case):
    x, attrs = ONE_HOT[case]
    assert_same(one_node("OneHotEncoder", x, 1, **attrs), {"X": x})


def test_one_hot_encoder_refuses_an_unknown_category_when_zeros_is_0():
    ours, theirs = sessions(one_node("OneHotEncoder", WORDS, 1, cats_strings=["a", "b"], zeros=0))
    with pytest.raises(Exception, match="Unknown Category"):
        theirs.run(None, {"X": WORDS})
    with pytest.raises(opforge.OpError, match="Unknown Category and zeros = 0"):
        ours.run(None, {"X": WORDS})


def test_one_hot_encoder_with_zeros_0_refuses_an_unknown_category_on_its_compiled_plan():
    ours, _ = sessions(one_node("OneHotEncoder", WORDS, 1, cats_strings=["a", "b", "zz", ""], zeros=0))
    known = strings("a", "b", "zz").reshape(1, 3)
    for _ in range(2):   # the second run is the compiled plan's
        np.testing.assert_array_equal(ours.run(None, {"X": known})[0][0], np.eye(4, dtype=np.float32)[:3])
    with pytest.raises(opforge.OpError, match="Unknown Category and zeros = 0"):
        ours.run(None, {"X": strings("a", "c", "b").reshape(1, 3)})


def zipmap(key_type, **attrs):
    node = helper.make_node("ZipMap", ["X"], ["Y"], domain=ML, **attrs)
    maps = helper.make_sequence_type_proto(helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(F, [])))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", F, None)],
                              [helper.make_value_info("Y", maps)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)],
                             ir_version=8)


SCORES = np.random.default_rng(3).random((5, 3)).astype(np.float32)


@pytest.mark.parametrize("x", [SCORES, SCORES[0], SCORES[:0]], ids=["rows", "one dimension", "no rows"])
@pytest.mark.parametrize("key_type, attrs", [
    (S, dict(classlabels_strings=["b", "a", "c"])),
    (S, dict(classlabels_strings=["b", "a", "b"])),   # a repeated label: its last score
    (I, dict(classlabels_int64s=[30, -1, 2])),
    (S, dict(classlabels_strings=["a", "b", "c"])),   # sorted and distinct: the columns as they are
    (I, dict(classlabels_int64s=[0, 1, 2])),
])
def test_zipmap_gives_onnxruntimes_list_of_dicts(key_type, attrs, x):
    assert_same(zipmap(key_type, **attrs), {"X": x})


def test_zipmap_refuses_scores_of_another_width():
    ours, _ = sessions(zipmap(S, classlabels_strings=["a", "b"]))
    with pytest.raises(opforge.OpError, match=r"features_per_batch\[3\] != number of classlabels\[2\]"):
        ours.run(None, {"X": SCORES})


# ---- classifiers with string class labels: native scores, labels mapped


X = np.random.default_rng(4).normal(size=(80, 4)).astype(np.float32)
LABELS = ["no", "maybe", "yes"]


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("classes, scores", [(3, 3), (2, 2), (2, 1)])
def test_linear_classifier_with_string_labels(classes, scores, transform):
    rng = np.random.default_rng([classes, scores, len(transform)])
    model = one_node("LinearClassifier", X, 1, S, ("Y", "Z"), coefficients=rng.normal(size=4 * scores).tolist(),
                     intercepts=rng.normal(size=scores).tolist(), classlabels_strings=LABELS[:classes],
                     post_transform=transform)
    assert_same(model, {"X": X}, 1e-6)


@pytest.mark.parametrize("probabilities", [False, True])
@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier_with_string_labels(classes, probabilities):
    rng = np.random.default_rng([classes, probabilities])
    vectors = rng.normal(size=(6, 4))
    pairs = classes * (classes - 1) // 2
    attrs = dict(kernel_type="RBF", kernel_params=[0.3, 0.0, 3.0], support_vectors=vectors.ravel().tolist(),
                 vectors_per_class=[3, 3] if classes == 2 else [2, 2, 2],
                 coefficients=rng.normal(size=(classes - 1) * 6).tolist(), rho=rng.normal(size=pairs).tolist(),
                 classlabels_strings=LABELS[:classes])
    if probabilities:
        attrs.update(prob_a=rng.normal(size=pairs).tolist(), prob_b=rng.normal(size=pairs).tolist())
    assert_same(one_node("SVMClassifier", X, 1, S, ("Y", "Z"), **attrs), {"X": X}, 1e-5)
