"""passes/fuse_qdq.py: QDQ groups become quantized ops only where that keeps the model's meaning."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge
from tests.support.exact_integers import exact_form

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
    want = ort.InferenceSession(exact_form(model).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
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


# onnxruntime's choices on x86 (passes/fuse_qdq.py names its source files): an int8 value feeds a
# fused Conv/MatMul only if QDQS8ToU8Transformer made it uint8 (its QuantizeLinear -> DequantizeLinear
# pair has no other reader); Add and Mul fuse only with the same type on every input and output.
FUSABLE = {"Conv", "MatMul", "Add", "Mul", "LeakyRelu", "Softmax", "Concat", "GlobalAveragePool", "Sigmoid", "Relu",
           "Clip"}


class QDQGraph:
    """A float graph written in QDQ form: ``quantized`` puts QuantizeLinear -> DequantizeLinear
    after a value, ``weight`` adds a DequantizeLinear of a constant int8 tensor."""

    def __init__(self, dtype=np.int8):
        self.dtype, self.nodes, self.inits, self.outputs = dtype, [], [], []

    def quantized(self, name, scale=0.05, zero=3):
        self.inits += [numpy_helper.from_array(np.float32(scale), f"{name}_s"),
                       numpy_helper.from_array(np.array(zero, self.dtype), f"{name}_z")]
        self.nodes += [helper.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
                       helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_d"])]
        return f"{name}_d"

    def weight(self, name, shape, scale=0.02):
        self.inits += [numpy_helper.from_array(RNG.integers(-127, 128, shape).astype(np.int8), name),
                       numpy_helper.from_array(np.float32(scale), f"{name}_s"),
                       numpy_helper.from_array(np.int8(0), f"{name}_z")]
        self.nodes.append(helper.make_node("DequantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_d"]))
        return f"{name}_d"

    def op(self, op_type, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], **attrs))
        return output

    def model(self, *outputs):
        graph = helper.make_graph(self.nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        return model


def fusable_ops(op_types) -> dict:
    """How many of each op that fuse_qdq may turn into a QLinear op, and of those ops."""
    counted = [op for op in op_types if op in FUSABLE or op.startswith("QLinear")]
    return {op: counted.count(op) for op in set(counted)}


def assert_fuses_as_onnxruntime(model, tmp_path):
    """opforge fuses the same ops as onnxruntime's saved optimized model and computes its numbers."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])   # saves its fusions
    oracle = ort.InferenceSession(exact_form(model).SerializeToString(), providers=["CPUExecutionProvider"])
    sess = opforge.InferenceSession(model.SerializeToString())
    feeds = {"x": RNG.standard_normal((4, 8)).astype(np.float32)}
    for got, want in zip(sess.run(None, feeds), oracle.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    ours = fusable_ops(op for _, op, _ in sess.node_providers())
    assert ours == fusable_ops(n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node)
    return ours


def matmul_model(fan_out: bool):
    """x -> QDQ -> MatMul(DQ(w)) -> QDQ -> y; with ``fan_out`` an Abs reads x's DequantizeLinear too."""
    g = QDQGraph()
    xd = g.quantized("x")
    y = g.quantized(g.op("MatMul", [xd, g.weight("w", (8, 6))], "m"), 0.1, -2)
    outputs = [y] + ([g.op("Abs", [xd], "side")] if fan_out else [])
    return g.model(*outputs)


def test_an_int8_matmul_fuses_only_when_its_input_has_no_other_reader(tmp_path):
    assert assert_fuses_as_onnxruntime(matmul_model(fan_out=False), tmp_path) == {"QLinearMatMul": 1}
    assert assert_fuses_as_onnxruntime(matmul_model(fan_out=True), tmp_path) == {"MatMul": 1}


def test_an_int8_conv_read_by_two_nodes_stays_float(tmp_path):
    g = QDQGraph()
    xd = g.quantized("x")
    x4 = g.quantized(g.op("Reshape", [xd, g.op("Constant", [], "shape", value=numpy_helper.from_array(
        np.array([1, 4, 2, 4], np.int64)))], "x4"))
    y = g.quantized(g.op("Conv", [x4, g.weight("w", (3, 4, 1, 1))], "c"), 0.1)
    assert assert_fuses_as_onnxruntime(g.model(y, g.op("Abs", [x4], "side")), tmp_path)["Conv"] == 1


def test_an_add_of_an_activation_and_an_int8_constant_stays_float(tmp_path):
    g = QDQGraph()
    y = g.quantized(g.op("Add", [g.quantized("x"), g.weight("b", (8,))], "a"), 0.08)
    assert assert_fuses_as_onnxruntime(g.model(y), tmp_path) == {"Add": 1}


def test_an_add_fuses_when_its_inputs_and_output_keep_one_type(tmp_path):
    """Int8 throughout when every value has a second reader (none becomes uint8); mixed, and so
    float, when only the output has one."""
    for side_readers in (("x", "r", "a"), ("a",)):
        g = QDQGraph()
        xd = g.quantized("x")
        rd = g.quantized(g.op("Relu", [xd], "r"), 0.03, -5)
        ad = g.quantized(g.op("Add", [xd if "x" in side_readers else g.quantized(g.op("Neg", [xd], "n")), rd], "a"),
                         0.08, 1)
        sides = [g.op("Sigmoid", [{"x": xd, "r": rd, "a": ad}[v]], f"side_{v}") for v in side_readers]
        fused = assert_fuses_as_onnxruntime(g.model(g.op("Relu", [ad], "y"), *sides), tmp_path)
        assert fused.get("QLinearAdd", 0) == (len(side_readers) == 3)


def test_a_leaky_relu_between_quantizers_becomes_qlinear_leaky_relu(tmp_path):
    g = QDQGraph()
    y = g.quantized(g.op("LeakyRelu", [g.quantized("x")], "l", alpha=0.2), 0.04, -100)
    assert assert_fuses_as_onnxruntime(g.model(y), tmp_path) == {"QLinearLeakyRelu": 1}


def test_a_relu_or_clip_the_quantizer_makes_redundant_goes_and_its_matmul_fuses(tmp_path):
    """As onnxruntime's ReluQuantFusion / ClipQuantFusion: a Relu before a QuantizeLinear whose zero
    point is the type's least value, or a Clip whose range covers the quantized one, goes."""
    cases = [("Relu", {}, 0, {"QLinearMatMul": 1}), ("Relu", {}, 5, {"MatMul": 1, "Relu": 1}),
             ("Clip", {"min": 0.0, "max": 30.0}, 0, {"QLinearMatMul": 1}),
             ("Clip", {"min": 0.0, "max": 6.0}, 0, {"MatMul": 1, "Clip": 1})]
    for op, bounds, zero, fused in cases:
        g = QDQGraph(np.uint8)
        m = g.op("MatMul", [g.quantized("x", 0.05, 128), g.weight("w", (8, 6))], "m")
        inputs = [m]
        for name, value in bounds.items():
            g.inits.append(numpy_helper.from_array(np.float32(value), name))
            inputs.append(name)
        y = g.quantized(g.op(op, inputs, "r"), 0.1, zero)
        assert assert_fuses_as_onnxruntime(g.model(y), tmp_path) == fused, (op, bounds, zero)


def maxpool_model(scale, out_scale):
    """x -> QDQ (uint8, zero point 7) -> MaxPool 3x3/2 -> QDQ (out_scale) -> y, x of 1x3x9x9."""
    inits = [numpy_helper.from_array(np.float32(scale), "s1"), numpy_helper.from_array(np.uint8(7), "z1"),
             numpy_helper.from_array(np.float32(out_scale), "s2"), numpy_helper.from_array(np.uint8(7), "z2")]
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s1", "z1"], ["xq"]), n("DequantizeLinear", ["xq", "s1", "z1"], ["xd"]),
             n("MaxPool", ["xd"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             n("QuantizeLinear", ["m", "s2", "z2"], ["mq"]), n("DequantizeLinear", ["mq", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_a_maxpool_between_equal_positive_quantizers_pools_the_8bit_values():
    """onnxruntime's drop rule for MaxPool: its DequantizeLinear and QuantizeLinear go when they
    share a constant positive scale and zero point; a negative scale (which would turn the largest
    quantized value into the smallest float) or another output scale keeps the float MaxPool."""
    for scale, out_scale, dropped in ((0.05, 0.05, True), (-0.05, -0.05, False), (0.05, 0.06, False)):
        _, got, want = ops_run(maxpool_model(scale, out_scale))
        np.testing.assert_array_equal(got, want)
        sess = opforge.InferenceSession(maxpool_model(scale, out_scale).SerializeToString())
        assert len(sess.node_providers()) == (3 if dropped else 5), (scale, out_scale)
