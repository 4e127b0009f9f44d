"""The ai.onnx.preview.training optimizer steps (Adagrad, Adam, Momentum) run by a session with
native kernels only, checked against onnx's ReferenceEvaluator on random tensors."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import opforge
from tests.support.numeric import assert_close, assert_would_catch, bump_one_element
from opforge.runtime import InferenceSession, SessionOptions

RNG = np.random.default_rng(0)
TRAINING = "ai.onnx.preview.training"
# Per optimized tensor: the accumulators it takes after X and G, and how many outputs it gives.
ACCUMULATORS = {"Adagrad": ["H"], "Adam": ["V", "H"], "Momentum": ["V"]}


def optimizer_model(op, shapes, attrs, dtype=TensorProto.FLOAT):
    """R, T, then X..., G..., accumulators... for tensors of ``shapes``; outputs X_new... and the
    new accumulators."""
    n = len(shapes)
    kinds = ["X", "G"] + ACCUMULATORS[op]
    names = [f"{kind}{i}" for kind in kinds for i in range(n)]
    outs = [f"{kind}{i}_new" for kind in ["X"] + ACCUMULATORS[op] for i in range(n)]
    node = helper.make_node(op, ["R", "T"] + names, outs, domain=TRAINING, **attrs)
    inputs = [helper.make_tensor_value_info("R", dtype, []), helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    inputs += [helper.make_tensor_value_info(name, dtype, shapes[int(name[-1])]) for name in names]
    graph = helper.make_graph([node], "step", inputs, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)])
    model.ir_version = 8
    return model, names


def feeds_for(names, shapes, step, dtype=np.float32):
    feeds = {"R": np.array(0.1, dtype), "T": np.array(step, np.int64)}
    for name in names:
        shape = shapes[int(name[-1])]
        # accumulators of squares are never negative
        value = RNG.uniform(0.1, 1.0, shape) if name[0] == "H" else RNG.standard_normal(shape)
        feeds[name] = value.astype(dtype)
    return feeds


def run_both(op, shapes, attrs, step, dtype=TensorProto.FLOAT):
    model, names = optimizer_model(op, shapes, attrs, dtype)
    feeds = feeds_for(names, shapes, step, helper.tensor_dtype_to_np_dtype(dtype))
    options = SessionOptions()
    options.disable_reference_fallback = True
    got = InferenceSession(model, options).run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    return got, [np.asarray(w, dtype=g.dtype) for g, w in zip(got, want)]


CASES = {
    "Adagrad": {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01},
    "Adam": {"alpha": 0.9, "beta": 0.8, "epsilon": 1e-3, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02},
    "Momentum": {"alpha": 0.9, "beta": 0.3, "mode": "standard", "norm_coefficient": 0.01},
    "Nesterov": {"alpha": 0.9, "beta": 0.3, "mode": "nesterov", "norm_coefficient": 0.01},
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("step", [0, 5])
def test_optimizer_steps_match_reference(name, step):
    op = "Momentum" if name == "Nesterov" else name
    got, want = run_both(op, [(3, 4), (7,), ()], CASES[name], step)
    assert len(got) == len(want) == 3 * (1 + len(ACCUMULATORS[op]))
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-5, 1e-6, f"{name} output {k}")
        if g.ndim and np.abs(w).max() > 0:
            assert_would_catch(g, w, 1e-5, 1e-6, f"{name} output {k}")


def test_optimizer_steps_in_double():
    got, want = run_both("Adam", [(5, 2)], CASES["Adam"], 3, TensorProto.DOUBLE)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.float64
        assert_close(g, w, 1e-12, 1e-14, f"Adam double output {k}")


def test_optimizer_comparison_sees_a_small_error():
    got, want = run_both("Adagrad", [(6, 6)], CASES["Adagrad"], 2)
    with pytest.raises(AssertionError):
        assert_close(bump_one_element(got[0]), want[0], 1e-5, 1e-6, "tampered Adagrad")


def test_optimizer_refuses_mismatched_groups():
    model, _ = optimizer_model("Adagrad", [(2,)], CASES["Adagrad"])
    model.graph.node[0].input.append("extra")
    model.graph.input.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [2]))
    options = SessionOptions()
    options.disable_reference_fallback = True
    with pytest.raises(opforge.OpforgeError, match="3 tensors per optimized tensor"):
        session = InferenceSession(model, options)
        session.run(None, feeds_for(["X0", "G0", "H0", "X0"], [(2,)], 1) | {"extra": np.ones(2, np.float32)})
