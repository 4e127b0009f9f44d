"""Checking a built-in kernel against onnxruntime on a one-node model of any domain: integer
outputs element for element, float outputs within tolerances that must catch a 1e-3 error.
onnxruntime runs the node's exact form (exact_integers.py), so an 8-bit product is checked
against exact integer arithmetic on every CPU."""
import numpy as np
from onnx import helper

import onnxruntime as ort
from tests.support.exact_integers import exact_form
from tests.support.numeric import assert_close, assert_would_catch


def onnxruntime_outputs(op, inputs, attrs=None, opset=21, domain="", num_outputs=1):
    """Outputs of a one-node model run by onnxruntime; None entries are absent inputs."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op, names, outs, domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for n, x in zip(names, inputs) if x is not None]
    graph = helper.make_graph([node], "one_node", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outs])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    sess = ort.InferenceSession(exact_form(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def check(kernels, op, inputs, attrs=None, opset=21, domain="", num_outputs=1, rtol=None, atol=None):
    """opforge's kernel equals onnxruntime: integers exactly, floats within rtol/atol (which must
    also catch a 1e-3 error)."""
    inputs = [None if x is None else np.asarray(x) for x in inputs]
    want = onnxruntime_outputs(op, inputs, attrs, opset, domain, num_outputs)
    got = kernels.op(op, domain=domain, version=opset if not domain else 1)(*inputs, **(attrs or {}))
    got = list(got) if isinstance(got, tuple) else [got]
    for k, (g, w) in enumerate(zip(got, want)):
        where = f"{op} output #{k}"
        if np.issubdtype(w.dtype, np.floating) and rtol is not None:
            assert_close(g, w, rtol, atol, where)
            assert_would_catch(g, w, rtol, atol, where)
        else:
            assert g.dtype == w.dtype and g.shape == w.shape, f"{where}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
            bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
            assert not bad.size, f"{where}: {bad.size} of {w.size} differ, first at {bad[0]}: {g.reshape(-1)[bad[0]]} " \
                                 f"vs {w.reshape(-1)[bad[0]]}"
    return got
