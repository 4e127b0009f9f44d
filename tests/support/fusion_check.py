"""How a fusion pass is checked: the pattern became the fused node, pass_stats counts it, the
result equals the unfused graph's (optimizations off) and onnxruntime's, and a saved optimized
model holds the fused node and runs the same in onnxruntime."""
import numpy as np
import onnx

import onnxruntime as ort
import opforge
from tests.support.numeric import assert_close, scaled_atol

LEVEL = opforge.GraphOptimizationLevel
RTOL, ATOL = 1e-5, 1e-5
rng = np.random.default_rng(0)


def session(model, level=LEVEL.ORT_ENABLE_ALL, path=""):
    options = opforge.SessionOptions()
    options.graph_optimization_level = level
    options.optimized_model_filepath = path
    return opforge.InferenceSession(model.SerializeToString(), options)


def feeds_for(model):
    out = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        out[value.name] = rng.standard_normal(shape).astype(dtype)
    return out


def check_fusion(model, tmp_path, fused_ops, stat, count=1, level=LEVEL.ORT_ENABLE_ALL):
    """Runs the four checks of the module docstring; returns the fused session."""
    feeds = feeds_for(model)
    saved = str(tmp_path / "optimized.onnx")
    fused = session(model, level, saved)
    assert [op for _, op, _ in fused.node_providers()] == fused_ops
    assert all(p == "CPUExecutionProvider" for _, _, p in fused.node_providers())
    assert fused.pass_stats[stat] == count
    plain = session(model, LEVEL.ORT_DISABLE_ALL).run(None, feeds)
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for _ in range(2):   # the first run records, the second runs the compiled plan
        got = fused.run(None, feeds)
        for g, p, o in zip(got, plain, oracle):
            assert_close(g, p, RTOL, scaled_atol(p, ATOL), "fused vs unfused")
            assert_close(g, o, RTOL, scaled_atol(o, ATOL), "fused vs onnxruntime")
    reloaded = onnx.load(saved)
    assert [n.op_type for n in reloaded.graph.node] == fused_ops
    domains = {n.domain for n in reloaded.graph.node} - {""}
    assert domains <= {o.domain for o in reloaded.opset_import}
    saved_run = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, s in zip(got, saved_run):
        assert_close(g, s, RTOL, scaled_atol(s, ATOL), "saved optimized model in onnxruntime")
    return fused


