"""Whole models against onnxruntime: the light_* model-zoo graphs with seeded random weights.

Final outputs are compared on the model as written (what fusions see), and every Conv, Gemm and
MatMul output on a copy that lists them as graph outputs, since a deep network's softmax can hide
a wrong intermediate number. The tests of the tests below show a 1e-3 relative error in one
element of one such output makes the comparison fail.
"""
from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxruntime as ort
import opforge
from numeric import assert_close, assert_would_catch, scaled_atol
from zoo import light_model, light_model_names

PROBED = ("Conv", "Gemm", "MatMul")

# float32 through ~50 layers, different summation orders: relative 1e-4, and an absolute
# tolerance of 1e-5 of the tensor's largest magnitude for elements that cancel to near zero.
RTOL, ATOL = 1e-4, 1e-5


def with_probes(model: onnx.ModelProto, op_types=PROBED) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs also list every output of the ``op_types`` nodes."""
    probed = copy.deepcopy(model)
    listed = {v.name for v in probed.graph.output}
    for node in probed.graph.node:
        if node.op_type in op_types:
            probed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in node.output
                                       if n and n not in listed)
    return probed


def run_opforge(model: onnx.ModelProto, feeds: dict, names: list[str]) -> tuple[list, object]:
    """opforge's outputs of ``model`` on ``feeds`` from its compiled plan (the second run),
    checked equal to the first run's; returns (outputs, session)."""
    sess = opforge.InferenceSession(model.SerializeToString())
    first = sess.run(None, feeds)
    assert sess.memory_plan(feeds) is not None, "the first run compiled no plan for these feeds"
    planned = sess.run(None, feeds)
    assert [o.name for o in sess.get_outputs()] == names
    assert len(first) == len(planned) == len(names), f"{len(planned)} outputs for {len(names)}"
    for name, a, b in zip(names, first, planned):
        assert_close(a, b, RTOL, scaled_atol(b, ATOL), f"{name}: first run vs planned run")
    return planned, sess


def compare_with_onnxruntime(model: onnx.ModelProto, feeds: dict, rtol=RTOL, atol=ATOL,
                             tamper=None, sensitive: bool = True):
    """Compare opforge with onnxruntime on ``model``: its final outputs, then every Conv, Gemm and
    MatMul output (see ``with_probes``). ``tamper`` edits the models opforge gets (tests of the
    tests). ``atol`` is relative to each tensor's largest magnitude. With ``sensitive``, also
    check that each probed comparison would fail had any element of at least a tenth of its
    tensor's largest magnitude been off by 1e-3 relative. Returns the opforge session of the
    model as written."""
    tamper = tamper or (lambda m: m)
    session = None
    for kind, proto in (("output", model), ("probe", with_probes(model))):
        oracle = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in oracle.get_outputs()]
        want = oracle.run(None, feeds)
        got, sess = run_opforge(tamper(proto), feeds, names)
        assert len(got) == len(want)
        for name, g, w in zip(names, got, want):
            assert_close(g, w, rtol, scaled_atol(w, atol), f"{kind} {name!r}")
            if sensitive and kind == "probe":
                assert_would_catch(g, w, rtol, scaled_atol(w, atol), name)
        session = session or sess
    return session


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict:
    """Standard-normal float32 feeds for every input the model needs (unknown dims as 1)."""
    rng = np.random.default_rng(seed)
    constants = {t.name for t in model.graph.initializer}
    return {v.name: rng.standard_normal([d.dim_value or 1 for d in v.type.tensor_type.shape.dim]).astype(np.float32)
            for v in model.graph.input if v.name not in constants}


def assert_all_native(sess) -> None:
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"


@pytest.fixture(scope="module", params=light_model_names())
def zoo(request):
    """(name, model with random weights, feeds) for each light model."""
    model = light_model(request.param)
    return request.param, model, feeds_for(model)


def test_light_model_zoo_matches_onnxruntime(zoo):
    name, model, feeds = zoo
    assert_all_native(compare_with_onnxruntime(model, feeds))


def test_light_model_outputs_depend_on_the_input(zoo):
    """Random weights make the output a function of the input (the shipped constants did not)."""
    _, model, feeds = zoo
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a, b = sess.run(None, feeds)[0], sess.run(None, feeds_for(model, seed=1))[0]
    assert np.max(np.abs(a - b)) > 1e-3 * np.max(np.abs(a))


# ---- tests of the tests: a small wrong number inside the runtime must fail the comparison ----

def perturb(model: onnx.ModelProto, value: str, feeds: dict, seed: int = 0):
    """A tamper function: multiplies one element of ``value`` by 1 + 1e-3 inside the model,
    an element whose magnitude is at least a tenth of the tensor's largest."""
    probe = with_probes(model, ())
    probe.graph.output.append(onnx.ValueInfoProto(name=value))
    oracle = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    x = oracle.run([value], feeds)[0]
    big = np.flatnonzero(np.abs(x) >= 0.1 * np.abs(x).max())
    factor = np.ones(x.shape, x.dtype)
    factor.flat[np.random.default_rng(seed).choice(big)] = 1 + 1e-3

    def tamper(proto: onnx.ModelProto) -> onnx.ModelProto:
        edited = copy.deepcopy(proto)
        producer = next(n for n in edited.graph.node if value in n.output)
        producer.output[list(producer.output).index(value)] = value + "/raw"
        edited.graph.node.append(helper.make_node("Mul", [value + "/raw", value + "/factor"], [value]))
        edited.graph.initializer.append(numpy_helper.from_array(factor, value + "/factor"))
        return edited
    return tamper


def probed_nodes(model: onnx.ModelProto) -> list[str]:
    return [n.output[0] for n in model.graph.node if n.op_type in PROBED]


# The models with small weights: vgg19, alexnet and zfnet carry 60-140 M random parameters each,
# and assert_would_catch already covers every one of their probed outputs.
SMALL_MODELS = ["light_squeezenet", "light_shufflenet", "light_resnet50", "light_inception_v1",
                "light_densenet121"]


@pytest.mark.parametrize("name", SMALL_MODELS)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_perturbed_conv_gemm_or_matmul_output_fails_the_model_test(name, where):
    model = light_model(name)
    feeds = feeds_for(model)
    values = probed_nodes(model)
    value = values[{"first": 0, "middle": len(values) // 2, "last": -1}[where]]
    with pytest.raises(AssertionError, match="(output|probe) '"):
        compare_with_onnxruntime(model, feeds, tamper=perturb(model, value, feeds))
