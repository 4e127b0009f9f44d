"""Dropout and the random ops. Seeded training-mode Dropout draws numpy's RandomState(seed)
stream, as onnx's reference does, and is compared with numpy exactly; the random ops and Bernoulli
draw onnxruntime's streams and are compared with onnxruntime's sessions, run after run; unseeded
calls by their properties."""
import numpy as np
import pytest

from opforge.errors import OpError
from tests.support.kernel_check import check

RNG = np.random.default_rng(5)


def test_dropout_inference_is_identity_with_a_full_mask(kernels):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    check(kernels, "Dropout", [x, np.array(0.3, np.float32)], opset=13, num_outputs=2, rtol=0, atol=0)
    check(kernels, "Dropout", [x], {"ratio": 0.4}, opset=7, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.8])
def test_training_dropout_draws_numpys_stream(kernels, dtype, ratio):
    x = RNG.standard_normal((4, 5, 6)).astype(dtype)
    r = np.array(ratio, dtype)
    y, mask = kernels.op("Dropout", domain="", version=13)(x, r, np.array(True), seed=42)
    keep = np.random.RandomState(42).uniform(0, 1.0, x.shape) >= r
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_array_equal(y, (keep * x * (dtype(1) / (dtype(1) - r))).astype(dtype))
    assert 0.5 * (1 - ratio) < keep.mean() < 1.5 * (1 - ratio)


def test_training_dropout_without_seed_varies_and_keeps_its_scale(kernels):
    x = np.ones((64, 64), np.float32)
    dropout = kernels.op("Dropout", domain="", version=13)
    y1, m1 = dropout(x, np.array(0.5, np.float32), np.array(True))
    y2, _ = dropout(x, np.array(0.5, np.float32), np.array(True))
    assert not np.array_equal(y1, y2)
    assert set(np.unique(y1)) <= {0.0, 2.0} and 0.4 < m1.mean() < 0.6
    np.testing.assert_array_equal(y1 != 0, m1)


def test_training_dropout_refuses_a_ratio_of_one(kernels):
    with pytest.raises(OpError, match="ratio must be in"):
        kernels.op("Dropout", domain="", version=13)(np.ones(3, np.float32), np.array(1.0, np.float32),
                                                     np.array(True))


def session_pair(node, inputs, elem):
    """onnxruntime's and opforge's sessions of a one-node model (reference fallback off)."""
    import onnxruntime as ort
    from onnx import helper

    import opforge

    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, elem, v.shape) for n, v in inputs],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    options = opforge.SessionOptions()
    options.disable_reference_fallback = True
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]), opforge.InferenceSession(model, options)


def random_nodes(dtype):
    from onnx import helper

    x = np.zeros((4, 9), dtype)
    return [(helper.make_node("RandomUniform", [], ["y"], shape=[5, 7], seed=3.0, low=-2.0, high=5.0,
                              dtype=11 if dtype == np.float64 else 1), []),
            (helper.make_node("RandomNormal", [], ["y"], shape=[301], seed=11.0, mean=1.0, scale=2.0,
                              dtype=11 if dtype == np.float64 else 1), []),
            (helper.make_node("RandomUniformLike", ["x"], ["y"], seed=4.0), [("x", x)]),
            (helper.make_node("RandomNormalLike", ["x"], ["y"], seed=7.0), [("x", x)])]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index", range(4))
def test_seeded_random_ops_draw_onnxruntimes_numbers_run_after_run(dtype, index):
    # onnxruntime's node keeps its generator: each run goes on from where the last stopped
    node, inputs = random_nodes(dtype)[index]
    theirs, ours = session_pair(node, inputs, 11 if dtype == np.float64 else 1)
    runs = []
    for _ in range(3):
        want, = theirs.run(None, dict(inputs))
        got, = ours.run(None, dict(inputs))
        assert got.dtype == want.dtype == dtype
        np.testing.assert_array_equal(got, want)
        runs.append(got)
    assert not np.array_equal(runs[0], runs[1])


def test_unseeded_random_ops_differ_between_sessions():
    node, inputs = random_nodes(np.float32)[1]
    node.attribute.pop([a.name for a in node.attribute].index("seed"))
    _, first = session_pair(node, inputs, 1)
    _, second = session_pair(node, inputs, 1)
    a, b = first.run(None, {})[0], second.run(None, {})[0]
    assert not np.array_equal(a, b) and abs(a.mean() - 1.0) < 0.4 and abs(a.std() - 2.0) < 0.4


def test_random_ops_in_float16_draw_as_float(kernels):
    got = kernels.op("RandomUniform", domain="", version=1)(shape=[3, 7], low=-2.0, high=3.0, seed=7.0, dtype=10)
    want = kernels.op("RandomUniform", domain="", version=1)(shape=[3, 7], low=-2.0, high=3.0, seed=7.0, dtype=1)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want.astype(np.float16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bernoulli_draws_onnxruntimes_numbers_with_ones_at_rate_p(dtype):
    from onnx import helper

    p = np.random.default_rng(1).random(500).astype(dtype)
    theirs, ours = session_pair(helper.make_node("Bernoulli", ["x"], ["y"], seed=5.0), [("x", p)],
                                11 if dtype == np.float64 else 1)
    for _ in range(2):
        want, = theirs.run(None, {"x": p})
        got, = ours.run(None, {"x": p})
        # onnxruntime runs onnx's function body, Greater(draw, p): 1 with probability 1 - p. The
        # same draws, 1 where they are below p, give the operator's definition
        np.testing.assert_array_equal(got, 1 - want)


def test_bernoulli_draws_zeros_and_ones_at_the_given_rates(kernels):
    p = np.repeat(np.array([[0.0], [0.3], [1.0]], np.float32), 4000, axis=1)
    y = kernels.op("Bernoulli", domain="", version=15)(p, seed=2.0, dtype=7)
    assert y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
    assert y[0].sum() == 0 and y[2].sum() == 4000 and 0.27 < y[1].mean() < 0.33
    with pytest.raises(OpError, match="outside"):
        kernels.op("Bernoulli", domain="", version=15)(np.array([1.5], np.float32))


@pytest.mark.parametrize("dtype", [6, 7])
def test_multinomial_draws_onnxruntimes_samples(dtype):
    import onnxruntime as ort
    from onnx import helper

    import opforge

    out = {6: np.int32, 7: np.int64}[dtype]
    node = helper.make_node("Multinomial", ["x"], ["y"], seed=3.0, sample_size=200, dtype=dtype)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [3, 5])],
                              [helper.make_tensor_value_info("y", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    probabilities = np.random.default_rng(0).dirichlet(np.ones(5), 3)
    x = np.log(probabilities).astype(np.float32)
    x[1, 2] = -np.inf   # a class that can never be drawn
    options = opforge.SessionOptions()
    options.disable_reference_fallback = True
    theirs, ours = ort.InferenceSession(model), opforge.InferenceSession(model, options)
    for _ in range(3):   # the node's stream goes on from run to run, as onnxruntime's
        want, = theirs.run(None, {"x": x})
        got, = ours.run(None, {"x": x})
        assert got.dtype == out and got.shape == (3, 200)
        np.testing.assert_array_equal(got, want)
    assert not (got[1] == 2).any()
    counts = np.stack([np.bincount(row, minlength=5) / 200 for row in got])
    np.testing.assert_allclose(counts, probabilities, atol=0.12)
