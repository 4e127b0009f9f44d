"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) against onnx.reference."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from opforge.errors import OpError

RNG = np.random.default_rng(17)
DOMAIN = "ai.onnx.preview.training"


def reference(op_type, inputs, num_outputs, attrs):
    names = [f"in{i}" for i in range(len(inputs))]
    outs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, domain=DOMAIN, **attrs)
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))


def run_handle(kernels, op_type, inputs, want, attrs):
    """Variadic outputs: called through the handle with outputs shaped like the reference's."""
    handle = kernels.op(op_type, domain=DOMAIN, version=1).handle
    got = [np.empty(w.shape, inputs[2].dtype) for w in want]
    handle.run(list(inputs), got, handle.attrs(attrs), None)
    return got


CASES = [("Adagrad", 3, {"decay_factor": 0.1, "epsilon": 1e-6, "norm_coefficient": 0.01}),
         ("Adam", 4, {"alpha": 0.85, "beta": 0.95, "epsilon": 1e-5, "norm_coefficient": 0.02,
                      "norm_coefficient_post": 0.01}),
         ("Momentum", 3, {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}),
         ("Momentum", 3, {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01})]


@pytest.mark.parametrize("op_type,per,attrs", CASES)
@pytest.mark.parametrize("tensors", [1, 2])
@pytest.mark.parametrize("step", [0, 3])
def test_optimizers_match_the_reference(kernels, op_type, per, attrs, tensors, step):
    shapes = [(3, 4), (5,)][:tensors]
    operands = [np.abs(RNG.standard_normal(shape)).astype(np.float32) for _ in range(per) for shape in shapes]
    inputs = [np.array(0.1, np.float32), np.array(step, np.int64), *operands]
    want = reference(op_type, inputs, (per - 1) * tensors, attrs)
    got = run_handle(kernels, op_type, inputs, want, attrs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.astype(np.float32), rtol=1e-5, atol=1e-7)


def test_an_operand_count_that_does_not_divide_is_refused(kernels):
    adagrad = kernels.op("Adagrad", domain=DOMAIN, version=1).handle
    inputs = [np.array(0.1, np.float32), np.array(1, np.int64), *(np.zeros(2, np.float32) for _ in range(4))]
    with pytest.raises(OpError, match="3 tensors per updated tensor"):
        adagrad.run(inputs, [np.empty(2, np.float32)] * 2, adagrad.attrs({}), None)
