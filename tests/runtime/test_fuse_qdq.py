"""passes/fuse_qdq.py: QDQ groups become quantized ops only where that keeps the model's meaning."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge

RNG = np.random.default_rng(0)


def qdq_conv_model(bias_scale_factor=1.0, with_output_q=True):
    """x -> Q -> DQ -> Conv(DQ(w int8), DQ(bias int32)) [-> Q -> DQ] -> y."""
    xs, ws = np.float32(0.02), np.float32(0.005)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("xs", xs), ("xz", np.uint8(128)), ("w", RNG.integers(-100, 100, (8, 3, 3, 3)).astype(np.int8)),
        ("ws", ws), ("wz", np.int8(0)), ("b", RNG.integers(-500, 500, 8).astype(np.int32)),
        ("bs", np.float32(xs * ws * bias_scale_factor)), ("bz", np.int32(0)), ("ys", np.float32(0.05)),
        ("yz", np.uint8(100))]]
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             n("DequantizeLinear", ["w", "ws", "wz"], ["wd"]), n("DequantizeLinear", ["b", "bs", "bz"], ["bd"]),
             n("Conv", ["xd", "wd", "bd"], ["c" if with_output_q else "y"], pads=[1, 1, 1, 1])]
    if with_output_q:
        nodes += [n("QuantizeLinear", ["c", "ys", "yz"], ["cq"]), n("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def ops_run(model):
    sess = opforge.InferenceSession(model.SerializeToString())
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = sess.run(None, {"x": x})[0]
    return {op for _, op, _ in sess.node_providers()}, got, want


def test_a_qdq_conv_becomes_qlinear_conv_with_onnxruntimes_integers():
    ops, got, want = ops_run(qdq_conv_model())
    assert "QLinearConv" in ops and "Conv" not in ops
    np.testing.assert_array_equal(got, want)  # the same integers, dequantized alike


def test_a_bias_on_another_scale_or_no_output_quantizer_keeps_the_float_conv():
    for model in (qdq_conv_model(bias_scale_factor=1.5), qdq_conv_model(with_output_q=False)):
        ops, got, want = ops_run(model)
        assert "Conv" in ops and "QLinearConv" not in ops
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weight_only_dequantize_still_folds():
    sess = opforge.InferenceSession(qdq_conv_model(with_output_q=False).SerializeToString())
    assert sum(op == "DequantizeLinear" for _, op, _ in sess.node_providers()) == 1  # x's, not the weights'
