"""Checking one built-in kernel against onnxruntime on a one-node model."""
import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxruntime as ort
from tests.support.numeric import assert_close, assert_would_catch, scaled_atol

# Ops whose float comparisons must also prove they would see a 1e-3 relative error in any
# element of at least a tenth of the output's largest magnitude (see numeric.assert_would_catch).
PROVEN = {"Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "LpPool",
          "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "BatchNormalization",
          "InstanceNormalization", "LayerNormalization", "GroupNormalization", "LRN",
          "MeanVarianceNormalization"}


def run_onnxruntime(op_type, inputs, attrs=None, opset=18, num_outputs=1, domain=""):
    """Outputs of a one-node model run by onnxruntime; None entries are absent inputs."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for n, x in zip(names, inputs) if x is not None]
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outs]
    graph = helper.make_graph([node], "one_node", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def check(kernels, op_type, inputs, attrs=None, opset=18, num_outputs=1, rtol=1e-5, atol=1e-6,
          scale_atol=False, tamper=None):
    """Asserts the first ``num_outputs`` outputs of the opforge kernel for `op_type` at `opset`
    match onnxruntime; for the ops in PROVEN, also that the tolerances would catch a small error.
    ``scale_atol``: ``atol`` is relative to each output's largest magnitude (long sums whose
    small elements cancel). ``tamper`` edits opforge's outputs before the comparison (tests of
    the tests)."""
    expected = run_onnxruntime(op_type, inputs, attrs, opset, num_outputs)
    ours = kernels.op(op_type, domain="", version=opset)(*inputs, **_eager_attrs(attrs or {}))
    ours = list(ours) if isinstance(ours, tuple) else [ours]
    assert len(ours) >= len(expected), f"{op_type}: {len(ours)} outputs, onnxruntime gives {len(expected)}"
    compared = [tamper(o) for o in ours] if tamper else ours
    for k, (got, want) in enumerate(zip(compared, expected)):
        where = f"{op_type} output #{k}"
        atol_k = scaled_atol(want, atol) if scale_atol else atol
        assert_close(got, want, rtol, atol_k, where)
        if op_type in PROVEN and np.issubdtype(want.dtype, np.floating):
            assert_would_catch(got, want, rtol, atol_k, where)
    return ours


def _eager_attrs(attrs):
    """helper.make_node attribute values -> what an eager call takes (tensors as arrays)."""
    return {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for k, v in attrs.items()}


def check_reference(kernels, op_type, inputs, attrs, opset, rtol=0.0):
    """Like check(), against onnx.reference, for opsets onnxruntime does not have yet."""
    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["out0"], **attrs)
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_empty_tensor_value_info("out0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    want, = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    got = kernels.op(op_type, domain="", version=opset)(*inputs, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol)
