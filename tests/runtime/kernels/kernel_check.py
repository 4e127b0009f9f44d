"""Checking one built-in kernel against onnxruntime on a one-node model."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxruntime as ort


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


def check(kernels, op_type, inputs, attrs=None, opset=18, num_outputs=1, rtol=1e-5, atol=1e-6):
    """Asserts the opforge kernel for `op_type` at `opset` matches onnxruntime."""
    expected = run_onnxruntime(op_type, inputs, attrs, opset, num_outputs)
    ours = kernels.op(op_type, domain="", version=opset)(*inputs, **_eager_attrs(attrs or {}))
    ours = list(ours) if isinstance(ours, tuple) else [ours]
    for got, want in zip(ours, expected):
        assert got.dtype == want.dtype, f"{op_type}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{op_type}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=op_type)
    return ours


def _eager_attrs(attrs):
    """helper.make_node attribute values -> what an eager call takes (tensors as arrays)."""
    return {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for k, v in attrs.items()}
