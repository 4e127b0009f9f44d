"""ai.onnx.ml's numeric ops on native kernels: sklearn models converted by skl2onnx, and one-node
models covering each mode, aggregate and post transform, compared with onnxruntime (tree
ensembles bit for bit on one thread)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import opforge
from tests.support.numeric import assert_close
from opforge.runtime import SessionOptions

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn import ensemble, linear_model, pipeline, preprocessing, svm  # noqa: E402

CPU = "CPUExecutionProvider"
ML = "ai.onnx.ml"


def sessions(model, threads=1, native=True):
    """(opforge session, onnxruntime session) for `model`; with `native`, every node must have
    a native kernel (no reference fallback)."""
    data = model.SerializeToString()
    ours = opforge.InferenceSession(
        data, SessionOptions(intra_op_num_threads=threads, disable_reference_fallback=native))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ours, ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def assert_same(model, feeds, threads=1, rtol=0.0, atol=0.0, columns=None):
    """Runs both sessions; every output equal (rtol=atol=0: bit for bit, NaN where NaN), in
    its first `columns` columns when given."""
    ours, theirs = sessions(model, threads)
    for name, got, want in zip([o.name for o in theirs.get_outputs()], ours.run(None, feeds),
                               theirs.run(None, feeds)):
        if columns is not None and got.ndim == 2:
            got, want = got[:, :columns], want[:, :columns]
        if np.issubdtype(want.dtype, np.floating):
            assert_close(got, want, rtol, atol, f"output {name!r}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"output {name!r}")
    placed = {op: provider for _, op, provider in ours.node_providers()}
    assert all(p == CPU for p in placed.values()), placed
    return ours


# ---- sklearn models through skl2onnx


def _classification(classes, seed=0):
    from sklearn.datasets import make_classification

    x, y = make_classification(300, 8, n_informative=5, n_classes=classes, random_state=seed)
    return x.astype(np.float32), y


def _regression(seed=0):
    from sklearn.datasets import make_regression

    x, y = make_regression(300, 8, n_informative=5, random_state=seed)
    return x.astype(np.float32), y


def _convert(model, x):
    from skl2onnx import to_onnx

    return to_onnx(model, x[:1], options={"zipmap": False} if hasattr(model, "predict_proba") else None)


CLASSIFIERS = {
    "random forest": lambda: ensemble.RandomForestClassifier(12, max_depth=6, random_state=0),
    "extra trees": lambda: ensemble.ExtraTreesClassifier(12, max_depth=6, random_state=0),
    "gradient boosting": lambda: ensemble.GradientBoostingClassifier(n_estimators=12, max_depth=3, random_state=0),
    "logistic regression": lambda: pipeline.make_pipeline(preprocessing.StandardScaler(),
                                                          linear_model.LogisticRegression()),
}
REGRESSORS = {
    "random forest": lambda: ensemble.RandomForestRegressor(12, max_depth=6, random_state=0),
    "extra trees": lambda: ensemble.ExtraTreesRegressor(12, max_depth=6, random_state=0),
    "gradient boosting": lambda: ensemble.GradientBoostingRegressor(n_estimators=12, max_depth=3, random_state=0),
    "linear regression": lambda: pipeline.make_pipeline(preprocessing.StandardScaler(),
                                                        linear_model.LinearRegression()),
}


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kind", list(CLASSIFIERS))
def test_sklearn_classifiers_match_onnxruntime(kind, classes):
    x, y = _classification(classes)
    fitted = CLASSIFIERS[kind]().fit(x, y)
    linear = kind == "logistic regression"   # onnxruntime sums its dot products in another order
    ours = assert_same(_convert(fitted, x), {"X": x}, rtol=1e-5 if linear else 0, atol=1e-6 if linear else 0)
    label, probabilities = ours.run(None, {"X": x})
    np.testing.assert_array_equal(label, fitted.predict(x))
    assert_close(probabilities, fitted.predict_proba(x).astype(np.float32), 1e-4, 1e-5, kind)


@pytest.mark.parametrize("kind", list(REGRESSORS))
def test_sklearn_regressors_match_onnxruntime(kind):
    x, y = _regression()
    fitted = REGRESSORS[kind]().fit(x, y)
    linear = kind == "linear regression"
    ours = assert_same(_convert(fitted, x), {"X": x}, rtol=1e-5 if linear else 0, atol=1e-3 if linear else 0)
    got, = ours.run(None, {"X": x[:1]})
    assert_close(got.ravel(), fitted.predict(x[:1]).astype(np.float32), 1e-4, 1e-3, kind)


@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly", "sigmoid"])
def test_sklearn_support_vector_regression(kernel):
    x, y = _regression()
    x = preprocessing.StandardScaler().fit_transform(x).astype(np.float32)
    fitted = svm.SVR(kernel=kernel, C=10.0, gamma=0.1, coef0=0.5, degree=2).fit(x[:150], y[:150] / 100)
    # onnxruntime multiplies by the support vectors with a blocked GEMM: sums in another order
    ours = assert_same(_convert(fitted, x), {"X": x}, rtol=1e-4, atol=1e-4)
    assert_close(ours.run(None, {"X": x})[0].ravel(), fitted.predict(x).astype(np.float32), 1e-3, 1e-3, kernel)


@pytest.mark.filterwarnings("ignore:.*probability.*:FutureWarning")   # sklearn 1.9 deprecates SVC(probability=True)
@pytest.mark.parametrize("probability", [False, True])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly"])
def test_sklearn_support_vector_classification(kernel, classes, probability):
    x, y = _classification(classes)
    x = preprocessing.StandardScaler().fit_transform(x).astype(np.float32)
    fitted = svm.SVC(kernel=kernel, gamma=0.1, coef0=0.5, degree=2, probability=probability,
                     random_state=0).fit(x[:150], y[:150])
    ours = assert_same(_convert(fitted, x), {"X": x}, rtol=1e-4, atol=1e-5)
    label = ours.run(None, {"X": x})[0]
    np.testing.assert_array_equal(label, fitted.predict(x))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_forest_on_two_threads_splits_trees_for_one_row_and_rows_for_many(threads):
    x, y = _classification(3, seed=1)
    fitted = ensemble.RandomForestClassifier(64, max_depth=8, random_state=1).fit(x, y)
    model = _convert(fitted, x)
    assert_same(model, {"X": x}, threads)   # rows split: each row's trees summed in order
    assert_same(model, {"X": x[:1]}, threads, rtol=1e-6, atol=1e-7)   # trees split: partial sums added


# ---- one-node tree ensembles: every mode, aggregate and post transform


MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
VALUES = np.array([-1.0, -0.5, 0.0, 0.5, 1.0], np.float32)   # thresholds and features: ties happen


def random_forest_attrs(rng, trees, depth, targets, prefix, modes=MODES, one_weight=False, every_target=False):
    """Node and leaf attributes of `trees` full trees with random modes, features, thresholds
    drawn from VALUES, missing values sent either way, and leaf weights for random targets (one,
    or all of them)."""
    a = {k: [] for k in ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                         f"{prefix}treeids", f"{prefix}nodeids", f"{prefix}ids", f"{prefix}weights"]}
    for t in range(trees):
        for n in range(2 ** (depth + 1) - 1):
            leaf = n >= 2 ** depth - 1
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(n)
            a["nodes_featureids"].append(0 if leaf else int(rng.integers(4)))
            a["nodes_values"].append(0.0 if leaf else float(rng.choice(VALUES)))
            a["nodes_modes"].append("LEAF" if leaf else str(rng.choice(modes)))
            a["nodes_truenodeids"].append(0 if leaf else 2 * n + 1)
            a["nodes_falsenodeids"].append(0 if leaf else 2 * n + 2)
            a["nodes_missing_value_tracks_true"].append(0 if leaf else int(rng.integers(2)))
            if leaf:
                chosen = list(range(targets)) if every_target else [int(rng.integers(targets))] if one_weight else sorted(
                    rng.choice(targets, int(rng.integers(1, targets + 1)), replace=False).tolist())
                for target in chosen:
                    a[f"{prefix}treeids"].append(t)
                    a[f"{prefix}nodeids"].append(n)
                    a[f"{prefix}ids"].append(target)
                    a[f"{prefix}weights"].append(float(rng.normal()))
    return a


def tree_model(op, attrs, dtype=TensorProto.FLOAT, version=1, outputs=("Y",)):
    node = helper.make_node(op, ["X"], list(outputs), domain=ML, name="trees", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", dtype, [None, None])],
                              [helper.make_empty_tensor_value_info(o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, version)],
                             ir_version=8)


def features(rng, rows=200, dtype=np.float32):
    x = rng.choice(VALUES, (rows, 4)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        x[rng.random((rows, 4)) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_regressor_modes_aggregates_and_transforms(aggregate, targets, transform):
    rng = np.random.default_rng([targets, len(aggregate), len(transform)])
    attrs = random_forest_attrs(rng, 5, 3, targets, "target_", one_weight=targets == 1)
    attrs.update(n_targets=targets, aggregate_function=aggregate, post_transform=transform,
                 base_values=rng.normal(size=targets).tolist())
    assert_same(tree_model("TreeEnsembleRegressor", attrs), {"X": features(rng)})


def test_tree_regressor_takes_double_features_and_sums_in_double():
    rng = np.random.default_rng(7)
    attrs = random_forest_attrs(rng, 4, 3, 2, "target_")
    attrs.update(n_targets=2)
    assert_same(tree_model("TreeEnsembleRegressor", attrs, TensorProto.DOUBLE), {"X": features(rng, dtype=np.float64)})


@pytest.mark.parametrize("rows", [1, 8, 203])
def test_plain_forests_walk_rows_in_blocks_as_onnxruntime_walks_them_one_by_one(rows):
    # every branch BRANCH_LEQ and no missing values sent true: rows walk each tree together
    rng = np.random.default_rng(rows)
    attrs = random_forest_attrs(rng, 6, 4, 3, "target_", modes=["BRANCH_LEQ"])
    attrs.update(n_targets=3, nodes_missing_value_tracks_true=[0] * len(attrs["nodes_modes"]))
    assert_same(tree_model("TreeEnsembleRegressor", attrs), {"X": features(rng, rows)})


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_tree_regressor_compares_integer_features_as_floats(dtype):
    # onnxruntime has no integer kernel: the same values as floats are the oracle.
    rng = np.random.default_rng(8)
    attrs = random_forest_attrs(rng, 4, 3, 2, "target_")
    attrs.update(n_targets=2)
    x = rng.integers(-1, 2, (100, 4))
    ours, theirs = (opforge.InferenceSession(tree_model("TreeEnsembleRegressor", attrs, t).SerializeToString(),
                                             SessionOptions(disable_reference_fallback=True))
                    for t in (helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), TensorProto.FLOAT))
    np.testing.assert_array_equal(ours.run(None, {"X": x.astype(dtype)})[0],
                                  theirs.run(None, {"X": x.astype(np.float32)})[0])


def test_tree_regressor_opset_3_double_thresholds():
    rng = np.random.default_rng(3)
    attrs = random_forest_attrs(rng, 4, 3, 2, "target_")
    for name in ["nodes_values", "target_weights"]:
        values = np.array(attrs.pop(name), np.float64) + 1e-9   # a double threshold a float cannot hold
        attrs[f"{name}_as_tensor"] = numpy_helper.from_array(values)
    attrs.update(n_targets=2)
    assert_same(tree_model("TreeEnsembleRegressor", attrs, TensorProto.DOUBLE, version=3),
                {"X": features(rng, dtype=np.float64)})


CLASSIFIER_CASES = {
    # (classes, weights to one class only, negative weights allowed, base values)
    "three classes": (3, False, True, 3),
    "two classes, both scored": (2, False, False, 0),
    "two classes, one scored, probabilities": (2, True, False, 0),
    "two classes, one scored, margins": (2, True, True, 0),
    "two classes, one scored, one base value": (2, True, True, 1),
    "two classes, both scored, two base values": (2, False, True, 2),
}


@pytest.mark.parametrize("labels", ["int64s", "strings"])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("case", list(CLASSIFIER_CASES))
def test_tree_classifier_cases_match_onnxruntime(case, transform, labels):
    classes, one_class, negative, bases = CLASSIFIER_CASES[case]
    rng = np.random.default_rng([classes, bases, len(transform), one_class, negative])
    attrs = random_forest_attrs(rng, 5, 3, classes, "class_")
    if one_class:
        attrs["class_ids"] = [0] * len(attrs["class_ids"])
    weights = np.array(attrs["class_weights"])
    attrs["class_weights"] = (weights if negative else np.abs(weights) / 5).tolist()
    attrs[f"classlabels_{labels}"] = ([3, 7, 11] if labels == "int64s" else ["no", "maybe", "yes"])[:classes]
    attrs["post_transform"] = transform
    if bases:
        attrs["base_values"] = rng.normal(size=bases).tolist()
    # One score under PROBIT: onnxruntime writes its probit and leaves the second column unset.
    columns = 1 if one_class and bases < 2 and transform == "PROBIT" else None
    assert_same(tree_model("TreeEnsembleClassifier", attrs, outputs=("Y", "Z")), {"X": features(rng)},
                columns=columns)


def tree_ensemble5_attrs(rng, v3, dtype, members=True):
    """TreeEnsemble (ai.onnx.ml 5) attributes for the trees of TreeEnsembleRegressor attributes
    `v3` (one weight per leaf), some BRANCH_EQ nodes made BRANCH_MEMBER of two values."""
    codes = {m: i for i, m in enumerate(MODES)}
    place, leaf_of = {}, {}
    for t, n, mode in zip(v3["nodes_treeids"], v3["nodes_nodeids"], v3["nodes_modes"]):
        (leaf_of if mode == "LEAF" else place)[(t, n)] = len(leaf_of if mode == "LEAF" else place)
    weight = {(t, n): (k, w) for t, n, k, w in zip(v3["target_treeids"], v3["target_nodeids"], v3["target_ids"],
                                                     v3["target_weights"])}
    a = {k: [] for k in ["nodes_featureids", "nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                         "nodes_falseleafs", "nodes_missing_value_tracks_true"]}
    modes, splits, sets = [], [], []
    for i, (t, n) in enumerate(zip(v3["nodes_treeids"], v3["nodes_nodeids"])):
        if (t, n) not in place:
            continue
        for side, child in (("true", v3["nodes_truenodeids"][i]), ("false", v3["nodes_falsenodeids"][i])):
            a[f"nodes_{side}leafs"].append(int((t, child) in leaf_of))
            a[f"nodes_{side}nodeids"].append(leaf_of.get((t, child), place.get((t, child))))
        a["nodes_featureids"].append(v3["nodes_featureids"][i])
        a["nodes_missing_value_tracks_true"].append(v3["nodes_missing_value_tracks_true"][i])
        mode = codes[v3["nodes_modes"][i]]
        if members and mode == codes["BRANCH_EQ"] and rng.random() < 0.7:
            mode = 6
            sets += [float(v) for v in rng.choice([-1.0, 0.0, 1.0], 2)] + [np.nan]   # onnxruntime: whole numbers only
        modes.append(mode)
        splits.append(v3["nodes_values"][i])
    leaves = sorted(leaf_of, key=leaf_of.get)
    a.update(tree_roots=[place[(t, 0)] for t in sorted({t for t, _ in place})],
             nodes_modes=numpy_helper.from_array(np.array(modes, np.uint8)),
             nodes_splits=numpy_helper.from_array(np.array(splits, dtype)),
             leaf_targetids=[weight[k][0] for k in leaves],
             leaf_weights=numpy_helper.from_array(np.array([weight[k][1] for k in leaves], dtype)))
    if sets:
        a["membership_values"] = numpy_helper.from_array(np.array(sets, dtype))
    return a


@pytest.mark.parametrize("transform", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_opset_5(dtype, aggregate, transform):
    rng = np.random.default_rng([aggregate, transform, dtype().itemsize])
    v3 = random_forest_attrs(rng, 5, 3, 3, "target_", one_weight=True)
    attrs = tree_ensemble5_attrs(rng, v3, dtype)
    attrs.update(n_targets=3, aggregate_function=aggregate, post_transform=transform)
    tensor_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = np.round(features(rng, dtype=dtype))   # onnxruntime tests membership of a feature cut to an integer
    ours, _ = sessions(tree_model("TreeEnsemble", attrs, tensor_type, version=5))
    # onnxruntime reads post_transform through its own enum, where 1 is LOGISTIC and 2 SOFTMAX;
    # the operator's definition (and opforge) has 1 SOFTMAX, 2 LOGISTIC.
    attrs["post_transform"] = {1: 2, 2: 1}.get(transform, transform)
    _, theirs = sessions(tree_model("TreeEnsemble", attrs, tensor_type, version=5))
    assert_close(ours.run(None, {"X": x})[0], theirs.run(None, {"X": x})[0], 0, 0, "TreeEnsemble")
    assert [p for _, _, p in ours.node_providers()] == [CPU]


def test_tree_ensemble_state_is_per_node_and_survives_runs():
    rng = np.random.default_rng(11)
    first, second = (random_forest_attrs(rng, 3, 2, 1, "target_", one_weight=True) for _ in range(2))
    x = features(rng)
    for attrs in (first, second, first):
        attrs["n_targets"] = 1   # sessions of equal-sized ensembles, one after another
        ours = assert_same(tree_model("TreeEnsembleRegressor", attrs), {"X": x})
        np.testing.assert_array_equal(ours.run(None, {"X": x})[0], ours.run(None, {"X": x})[0])


@pytest.mark.parametrize("break_it, says", [
    (lambda a: a["nodes_truenodeids"].__setitem__(0, 99), "goes to node 99, which that tree does not have"),
    (lambda a: a["nodes_truenodeids"].__setitem__(1, 0), "is not a set of trees"),
    (lambda a: a["target_nodeids"].__setitem__(0, 0), "which is not a LEAF"),
    (lambda a: a["nodes_modes"].__setitem__(0, "BRANCH_XX"), "BRANCH_XX"),
])
def test_a_broken_ensemble_is_refused_naming_the_fault(break_it, says):
    attrs = random_forest_attrs(np.random.default_rng(0), 2, 2, 1, "target_", one_weight=True)
    break_it(attrs)
    ours = opforge.InferenceSession(tree_model("TreeEnsembleRegressor", attrs).SerializeToString(),
                                    SessionOptions(disable_reference_fallback=True))
    with pytest.raises(opforge.OpError, match=says):
        ours.run(None, {"X": np.zeros((2, 4), np.float32)})


def test_too_few_features_are_refused():
    attrs = random_forest_attrs(np.random.default_rng(0), 2, 2, 1, "target_", one_weight=True)
    attrs["nodes_featureids"] = [3] * len(attrs["nodes_featureids"])
    ours = opforge.InferenceSession(tree_model("TreeEnsembleRegressor", attrs).SerializeToString(),
                                    SessionOptions(disable_reference_fallback=True))
    with pytest.raises(opforge.OpError, match="X has 2 features; the trees read feature 3"):
        ours.run(None, {"X": np.zeros((2, 2), np.float32)})


@pytest.mark.parametrize("split", [True, False], ids=["split by the optimizer", "one node"])
@pytest.mark.parametrize("case", ["three classes", "two classes, one scored, margins"])
def test_string_class_labels_run_on_the_cpu_provider(case, split):
    # the native kernel scores with labels 0..n-1; the indices are mapped to the strings after:
    # by a CategoryMapper node the optimizer adds, or (optimizations off) inside the node's kernel
    classes, one_class, _, bases = CLASSIFIER_CASES[case]
    rng = np.random.default_rng(5)
    attrs = random_forest_attrs(rng, 3, 2, classes, "class_")
    if one_class:
        attrs["class_ids"] = [0] * len(attrs["class_ids"])
    attrs.update(classlabels_strings=["no", "maybe", "yes"][:classes], post_transform="LOGISTIC")
    model = tree_model("TreeEnsembleClassifier", attrs, outputs=("Y", "Z"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("Y", TensorProto.STRING, None))
    ours, theirs = sessions(model)
    if not split:
        ours = opforge.InferenceSession(model.SerializeToString(), SessionOptions(
            intra_op_num_threads=1, disable_reference_fallback=True,
            graph_optimization_level=opforge.GraphOptimizationLevel.ORT_DISABLE_ALL))
    x = features(rng)
    ops = ["TreeEnsembleClassifier", "CategoryMapper"] if split else ["TreeEnsembleClassifier"]
    assert [(op, p) for _, op, p in ours.node_providers()] == [(op, CPU) for op in ops]
    want_label, want_scores = theirs.run(None, {"X": x})
    for _ in range(3):   # the first run records; the others run the compiled plan (its core maps the labels)
        label, scores = ours.run(None, {"X": x})
        assert label.dtype == object and set(want_label) >= {"no", "maybe"}
        np.testing.assert_array_equal(label, want_label)
        assert_close(scores, want_scores, 0, 0, "Z")


def test_a_model_saved_with_its_string_labels_split_runs_on_onnxruntime(tmp_path):
    rng = np.random.default_rng(6)
    attrs = random_forest_attrs(rng, 3, 2, 3, "class_")
    attrs.update(classlabels_strings=["no", "maybe", "yes"])
    model = tree_model("TreeEnsembleClassifier", attrs, outputs=("Y", "Z"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("Y", TensorProto.STRING, None))
    options = SessionOptions(intra_op_num_threads=1, disable_reference_fallback=True)
    options.optimized_model_filepath = str(tmp_path / "split.onnx")
    ours = opforge.InferenceSession(model.SerializeToString(), options)
    saved = ort.InferenceSession(options.optimized_model_filepath, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node] == [
        "TreeEnsembleClassifier", "CategoryMapper"]
    x = features(rng)
    (label, scores), (want_label, want_scores) = ours.run(None, {"X": x}), saved.run(None, {"X": x})
    np.testing.assert_array_equal(label, want_label)
    assert_close(scores, want_scores, 0, 0, "Z")


# ---- linear models and feature transforms


def one_node(op, inputs, outputs=("Y",), **attrs):
    node = helper.make_node(op, [n for n, _ in inputs], list(outputs), domain=ML, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                      for n, x in inputs],
        [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)],
                              ir_version=8)
    return model, dict(inputs)


RNG = np.random.default_rng(1)
X = RNG.normal(size=(50, 6)).astype(np.float32)


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(targets, transform):
    model, feeds = one_node("LinearRegressor", [("X", X)], coefficients=RNG.normal(size=6 * targets).tolist(),
                            intercepts=RNG.normal(size=targets).tolist(), targets=targets, post_transform=transform)
    assert_same(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("classes, scores", [(3, 3), (2, 2), (2, 1)])
def test_linear_classifier(classes, scores, transform):
    model, feeds = one_node("LinearClassifier", [("X", X)], ("Y", "Z"),
                            coefficients=RNG.normal(size=6 * scores).tolist(),
                            intercepts=RNG.normal(size=scores).tolist(), classlabels_ints=[4, 5, 6][:classes],
                            post_transform=transform)
    assert_same(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier_in_linear_mode(classes, transform):
    # no support vectors: one linear score per class, all offset by rho[0]
    model, feeds = one_node("SVMClassifier", [("X", X)], ("Y", "Z"), coefficients=RNG.normal(size=6 * classes).tolist(),
                            rho=[0.25], classlabels_ints=[4, 5, 6][:classes], post_transform=transform,
                            kernel_type="LINEAR", kernel_params=[0.1, 0.0, 3.0])
    assert_same(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scaler(dtype):
    x = (X * 10).astype(dtype)
    for offset, scale in [(RNG.normal(size=6), RNG.normal(size=6)), ([0.5], [2.0])]:
        model, feeds = one_node("Scaler", [("X", x)], offset=list(map(float, offset)), scale=list(map(float, scale)))
        assert_same(model, feeds)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    x = X.copy()
    x[3] = 0   # a row of zeros is left as it is
    model, feeds = one_node("Normalizer", [("X", x)], norm=norm)
    assert_same(model, feeds, rtol=1e-6, atol=0)


def test_binarizer_imputer_extractor_and_vectorizer():
    x = X.copy()
    x[RNG.random(x.shape) < 0.2] = np.nan
    for model, feeds in [
        one_node("Binarizer", [("X", X)], threshold=0.25),
        one_node("Imputer", [("X", x)], imputed_value_floats=RNG.normal(size=6).tolist(), replaced_value_float=np.nan),
        one_node("Imputer", [("X", X.round(0))], imputed_value_floats=[9.0], replaced_value_float=0.0),
        one_node("ArrayFeatureExtractor", [("X", X), ("I", np.array([4, 0, 4], np.int64))]),
        one_node("FeatureVectorizer", [("A", X), ("B", X[:, :2]), ("C", X[:, :3])], inputdimensions=[6, 3, 2]),
        one_node("FeatureVectorizer", [("A", (X * 9).astype(np.int64)), ("B", X[:, :1].astype(np.int64))],
                 inputdimensions=[2, 3]),
    ]:
        assert_same(model, feeds)


def test_a_comparison_here_sees_one_wrong_bit():
    got = np.array([0.25, 0.5], np.float32)
    wrong = got.copy()
    wrong.view(np.int32)[1] += 1
    with pytest.raises(AssertionError):
        assert_close(wrong, got, 0.0, 0.0, "one ulp")
