"""Whole models against onnxruntime: the light_* model-zoo graphs with seeded random weights.

opforge runs each model as written, so its fusions and packed kernels are the ones users get, and
every value its optimized graph computes that the model also names (a fused conv's output, a
pool's, a Gemm's) is read out of the plan as it runs (``InferenceSession.run_observed``) and
compared with onnxruntime's value of that name. A deep network's softmax can hide a wrong
intermediate number; these comparisons cannot: each asserts that a 1e-3 relative error in any
element of at least a tenth of the tensor's largest magnitude would have failed it, and the tests
of the tests below plant such an error inside the running plan and see the comparison fail.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxruntime as ort
import opforge
from tests.support.model_check import assert_all_native, compare_with_onnxruntime, feeds_for, refuse_calls
from tests.support.zoo import light_model, light_model_names

@pytest.fixture(scope="module", params=light_model_names())
def zoo(request):
    """(name, model with random weights, feeds) for each light model."""
    model = light_model(request.param)
    return request.param, model, feeds_for(model)


# the op types whose outputs each zoo model's test must have compared (the fused and packed
# kernels the model runs, pools, Gemm): a pass that renames or hides them shows up here
COMPARED_KINDS = {"FusedConv", "PackedConv", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm",
                  "PackedMatMul", "FusedGemm"}


def test_light_model_zoo_matches_onnxruntime(zoo):
    name, model, feeds = zoo
    sess = compare_with_onnxruntime(model, feeds)
    assert_all_native(sess)
    compared = set(sess.compared_values)
    ops = _step_outputs(sess)
    missed = [(op, out) for op, out in ops if op in COMPARED_KINDS and out not in compared]
    assert not missed, f"outputs of these kernels were not compared with onnxruntime: {missed}"
    assert any(op in COMPARED_KINDS for op, _ in ops)


def _step_outputs(sess) -> list:
    """(op type, first output) of every step the session runs."""
    return [(step.node.op_type, step.outputs[0]) for step in sess._executor.steps if step.outputs]


def test_light_model_outputs_depend_on_the_input(zoo):
    """Random weights make the output a function of the input (the shipped constants did not)."""
    _, model, feeds = zoo
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a, b = sess.run(None, feeds)[0], sess.run(None, feeds_for(model, seed=1))[0]
    assert np.max(np.abs(a - b)) > 1e-3 * np.max(np.abs(a))


# ---- tests of the tests: a small wrong number inside the running plan must fail the comparison ----

def bump(seed: int = 0):
    """An edit: one element of at least a tenth of the tensor's largest magnitude times 1 + 1e-3."""
    def edit(value: np.ndarray) -> None:
        flat = value.reshape(-1)
        big = np.flatnonzero(np.abs(flat) >= 0.1 * np.abs(flat).max())
        flat[np.random.default_rng(seed).choice(big)] *= 1 + 1e-3
    return edit


def outputs_of(model: onnx.ModelProto, op_types) -> list:
    """The values that opforge's steps of these op types write, as the model runs them."""
    sess = opforge.InferenceSession(model.SerializeToString())
    return [out for op, out in _step_outputs(sess) if op in op_types]


# (model, kernel kinds): the kernels the planted error sits in (PackedConv where the CPU packs
# convolutions, FusedConv elsewhere; Gemm runs as PackedMatMul on weights packed at creation)
CONVS, GEMMS = ("PackedConv", "FusedConv"), ("Gemm", "PackedMatMul", "FusedGemm")
PLANTED = [("light_resnet50", CONVS), ("light_inception_v2", CONVS), ("light_densenet121", CONVS),
           ("light_squeezenet", CONVS), ("light_shufflenet", ("FusedConv", "Conv")),
           ("light_inception_v1", ("MaxPool", "AveragePool")), ("light_densenet121", ("AveragePool",)),
           ("light_bvlc_alexnet", GEMMS)]


@pytest.mark.parametrize("name, kinds", PLANTED, ids=[f"{m}-{k[0]}" for m, k in PLANTED])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_wrong_number_inside_a_kernel_output_fails_the_model_test(name, kinds, where):
    model = light_model(name)
    feeds = feeds_for(model)
    values = outputs_of(model, kinds)
    assert values, f"{name} runs no {kinds}: the planted error would test nothing"
    value = values[{"first": 0, "middle": len(values) // 2, "last": -1}[where]]
    with pytest.raises(AssertionError, match=f"{value!r}|softmax"):
        compare_with_onnxruntime(model, feeds, edit={value: bump()})


@pytest.mark.parametrize("op_types", [GEMMS, ("MaxPool",)], ids=["Gemm", "MaxPool"])
def test_a_native_kernel_that_refuses_its_calls_fails_the_model_test(monkeypatch, op_types):
    """A native kernel that refuses its calls fails the model test: the call raises, naming the
    node (no kernel hands a call to another provider)."""
    refuse_calls(monkeypatch, op_types)
    model = light_model("light_squeezenet" if "MaxPool" in op_types else "light_zfnet512")
    with pytest.raises(opforge.OpforgeError, match="refused \\(planted by the test\\)"):
        compare_with_onnxruntime(model, feeds_for(model))
