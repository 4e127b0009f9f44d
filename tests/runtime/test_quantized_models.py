"""Quantized models made by onnxruntime's quantizer, and models onnxruntime optimized and saved (so
they hold com.microsoft fusions), against onnxruntime: every integer tensor of the model equal
element for element, float outputs close, and no node on the reference fallback.

The models are built here: squeezenet from the light zoo (seeded random weights, 64x64 input) and
the transformer encoder layer of tests/support/transformer_models.py, quantized by `quantize_dynamic` and
`quantize_static` (a seeded calibration reader), or optimized by onnxruntime at the extended level
and saved with `optimized_model_filepath`.
"""
from __future__ import annotations

import copy
import logging

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxruntime as ort
import opforge
from tests.support.exact_integers import exact_form
from tests.support.numeric import assert_close, scaled_atol
from tests.support.model_check import with_probes
from tests.support.transformer_models import encoder_layer

quantization = pytest.importorskip("onnxruntime.quantization")
from tests.support.quantized_models import Calibration, squeezenet  # noqa: E402  (needs the quantizer)
INTEGER_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32))


def cnn_feeds(seed):
    return {"data_0": np.random.default_rng(seed).standard_normal((1, 3, 64, 64)).astype(np.float32)}


def encoder_feeds(seed, masked=True):
    rng = np.random.default_rng(seed)
    mask = (rng.random((2, 7)) > 0.2) if masked else np.ones((2, 7))
    return {"ids": rng.integers(0, 50, (2, 7)).astype(np.int64), "mask": mask.astype(np.int64)}


def optimized_by_onnxruntime(path, folder) -> onnx.ModelProto:
    """The model as onnxruntime's extended-level optimizer saves it."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(folder / f"optimized_{path.name}")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (model, feeds, op types it must contain), all built once."""
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice on pre-processing
    folder = tmp_path_factory.mktemp("quantized")
    sources = {"cnn": (squeezenet(), cnn_feeds), "encoder": (encoder_layer(), encoder_feeds)}
    paths, built = {}, {}
    for name, (model, feeds) in sources.items():
        paths[name] = folder / f"{name}.onnx"
        onnx.save(model, paths[name])
        paths[f"{name}_dynamic"] = folder / f"{name}_dynamic.onnx"
        quantization.quantize_dynamic(paths[name], paths[f"{name}_dynamic"])
        for fmt in ("QOperator", "QDQ"):
            paths[f"{name}_static_{fmt}"] = folder / f"{name}_{fmt}.onnx"
            reader = Calibration([feeds(100 + i) for i in range(2)])
            # uint8 activations for the CNN: onnxruntime fuses its QDQ convolutions only then (with
            # int8 ones it runs them in float, whose rounding no other summation order reproduces)
            activations = quantization.QuantType.QUInt8 if name == "cnn" else quantization.QuantType.QInt8
            quantization.quantize_static(paths[name], paths[f"{name}_static_{fmt}"], reader,
                                         quant_format=getattr(quantization.QuantFormat, fmt),
                                         activation_type=activations)
    for name, must in MODELS.items():
        source = name.removeprefix("optimized_")
        feeds = cnn_feeds(0) if source.startswith("cnn") else encoder_feeds(0)
        model = optimized_by_onnxruntime(paths[source], folder) if name != source else onnx.load(paths[source])
        built[name] = (model, feeds, must)
    return built


# The models, with op types each must contain (so a quantizer or optimizer change that drops them
# shows up here rather than passing quietly).
MODELS = {
    "cnn_dynamic": {"DynamicQuantizeLinear", "ConvInteger"},
    "cnn_static_QOperator": {"QuantizeLinear", "QLinearConv", "QLinearConcat", "QLinearGlobalAveragePool",
                             "QLinearSoftmax", "DequantizeLinear"},
    "encoder_dynamic": {"DynamicQuantizeLinear", "MatMulInteger", "DequantizeLinear"},
    "encoder_static_QOperator": {"QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearSoftmax"},
    "cnn_static_QDQ": {"QuantizeLinear", "DequantizeLinear", "Conv", "Concat", "GlobalAveragePool"},
    "encoder_static_QDQ": {"QuantizeLinear", "DequantizeLinear", "MatMul", "Add", "Softmax"},
    "optimized_cnn": {"FusedConv"},
    "optimized_encoder": {"FusedMatMul", "BiasGelu"},
    "optimized_encoder_dynamic": {"MatMulIntegerToFloat", "DynamicQuantizeMatMul", "SkipLayerNormalization",
                                  "Gelu", "FusedMatMul"},
    "optimized_encoder_static_QDQ": {"QLinearMatMul", "QLinearSoftmax", "QuantizeLinear", "DequantizeLinear"},
}


def compare(model, feeds, tamper=None):
    """opforge on ``model`` as written (its fusions intact; ``tamper`` edits the copy it gets),
    first and planned run, against onnxruntime on the model's exact form (exact_integers.py):
    every int8, uint8 and int32 tensor opforge's graph computes that the model names too equal
    element for element, float outputs within 1e-4. Returns (opforge session, number of
    integer tensors compared)."""
    sess = opforge.InferenceSession((tamper or (lambda m: m))(model).SerializeToString())
    named = {o for node in model.graph.node for o in node.output if o}
    observed = [n for n in sess.observable_values() if n in named]
    outputs = [o.name for o in model.graph.output]
    oracle = ort.InferenceSession(exact_form(with_probes(model, observed)).SerializeToString(),
                                  providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in oracle.get_outputs()], oracle.run(None, feeds)))
    integers = [n for n in observed if want[n].dtype in INTEGER_DTYPES]
    for _ in range(2):   # the first run, then the planned one
        seen = {}
        got = sess.run_observed(None, feeds, {n: (lambda n: lambda v: seen.__setitem__(n, v.copy()))(n)
                                               for n in integers})
        for name in integers:
            assert seen[name].dtype == want[name].dtype and seen[name].shape == want[name].shape, name
            differ = int(np.count_nonzero(seen[name] != want[name]))
            assert not differ, f"{name}: {differ} of {want[name].size} integers differ"
        for name, value in zip(outputs, got):
            if want[name].dtype in INTEGER_DTYPES:
                assert np.array_equal(value, want[name]), f"{name}: integers differ"
            else:
                assert_close(value, want[name], 1e-4, scaled_atol(want[name], 1e-5), name)
    return sess, len(integers)


@pytest.mark.parametrize("name", list(MODELS))
def test_quantized_and_optimized_models_match_onnxruntime(models, name):
    model, feeds, must = models[name]
    present = {n.op_type for n in model.graph.node}
    assert must <= present, f"{name} lacks {sorted(must - present)}: the quantizer or optimizer changed"
    sess, integers = compare(model, feeds)
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"
    assert integers > 0 or name in ("optimized_cnn", "optimized_encoder"), "no integer tensor was compared"
    if name in FUSED:  # as onnxruntime fuses them (passes/fuse_qdq.py, passes/fuse_dynamic_quant.py)
        ran = {op for _, op, _ in sess.node_providers()}
        fused, gone = FUSED[name]
        assert fused <= ran and not gone & ran, f"{name} ran {sorted(ran)}"


# model -> (ops opforge's session must run, ops it must have fused away)
FUSED = {"cnn_static_QDQ": ({"QLinearConv", "QLinearConcat", "QLinearGlobalAveragePool", "QLinearSoftmax"},
                            {"Conv", "Concat"}),
         "optimized_encoder_static_QDQ": ({"QLinearMatMul", "QLinearSoftmax"}, {"Softmax"}),
         "encoder_static_QDQ": ({"QLinearMatMul", "QLinearSoftmax"}, set()),
         "encoder_dynamic": ({"MatMulIntegerToFloat", "DynamicQuantizeMatMul"}, {"MatMulInteger"})}


@pytest.mark.parametrize("name", ["cnn_static_QDQ", "encoder_static_QDQ", "optimized_encoder_static_QDQ"])
def test_unprobed_qdq_models_fuse_and_compute_as_onnxruntime(models, name, tmp_path):
    """Without probes both runtimes fuse: opforge must fuse the same ops (as many QLinear ops, as
    many float ones left between DequantizeLinear and QuantizeLinear) and give the same numbers."""
    model, feeds, _ = models[name]
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    optimized = optimized_by_onnxruntime(path, tmp_path)
    want = ort.InferenceSession(exact_form(model).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = opforge.InferenceSession(model.SerializeToString())
    for got, expected in zip(sess.run(None, feeds), want):
        assert_close(got, expected, 1e-4, scaled_atol(expected, 1e-5), name)

    def fusable(op_types):
        kept = [op for op in op_types if op.startswith("QLinear") or op in ("Conv", "MatMul", "Add", "Mul", "Softmax")]
        return {op: kept.count(op) for op in set(kept)}

    assert fusable(op for _, op, _ in sess.node_providers()) == fusable(n.op_type for n in optimized.graph.node)


def test_an_integer_off_by_one_fails_the_comparison(models):
    model, feeds, _ = models["cnn_static_QOperator"]
    conv = next(n for n in model.graph.node if n.op_type == "QLinearConv")

    def tamper(proto):
        proto = copy.deepcopy(proto)
        weight = next(t for t in proto.graph.initializer if t.name == conv.input[3])
        values = numpy_helper.to_array(weight).copy()
        values.reshape(-1)[0] += 1 if values.reshape(-1)[0] < 100 else -1
        weight.CopyFrom(numpy_helper.from_array(values, weight.name))
        return proto

    with pytest.raises(AssertionError, match="integers differ"):
        compare(model, feeds, tamper)
