"""Conv fusions: BatchNormalization folded into Conv/Gemm weights, Conv+Add(+activation) and
Conv+activation as com.microsoft FusedConv; and the FusedConv kernel itself against onnxruntime."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge
from tests.support.fusion_check import ATOL, LEVEL, RTOL, check_fusion, feeds_for, rng, session
from tests.support.kernel_variants import assert_path, build_isa, paths_taken
from tests.support.numeric import assert_close, assert_would_catch, scaled_atol
from tests.support.onnx_builders import tensor


def conv_model(tail, x_shape=(1, 8, 9, 9), m=8, k=3, bias=True, extra_inputs=(), outputs=("y",), opset=17,
               initializers=(), group=1, dtype=np.float32):
    """x -> Conv(w[, b]) -> c, then the nodes of ``tail`` (which read c and write ``outputs``)."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = (rng.standard_normal((m, x_shape[1] // group, k, k)) * 0.2).astype(dtype)
    inits = [numpy_helper.from_array(w, "w")] + list(initializers)
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(dtype), "b"))
    conv = helper.make_node("Conv", ["x", "w", "b" if bias else ""], ["c"], name="conv", pads=[k // 2] * 4,
                            group=group)
    graph = helper.make_graph([conv] + list(tail), "g", [tensor("x", list(x_shape), elem)] + list(extra_inputs),
                              [helper.make_tensor_value_info(o, elem, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def batchnorm(inputs, output="y", m=8, **attrs):
    scale, bias, mean = (rng.standard_normal(m).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 1.5, m).astype(np.float32)
    inits = [numpy_helper.from_array(v, f"bn_{n}") for n, v in zip(("s", "b", "m", "v"), (scale, bias, mean, var))]
    node = helper.make_node("BatchNormalization", [inputs, "bn_s", "bn_b", "bn_m", "bn_v"], [output], **attrs)
    return node, inits


@pytest.mark.parametrize("bias", [True, False])
def test_batchnorm_folds_into_conv(tmp_path, bias):
    bn, inits = batchnorm("c", epsilon=1e-3)
    model = conv_model([bn], bias=bias, initializers=inits)
    check_fusion(model, tmp_path, ["Conv"], "fold_batchnorm", level=LEVEL.ORT_ENABLE_BASIC)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, [5], [3, 5]])
def test_batchnorm_folds_into_gemm(tmp_path, trans_b, c_shape):
    b = rng.standard_normal((5, 4) if trans_b else (4, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(b, "gb")]
    inputs = ["a", "gb"]
    if c_shape:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_shape).astype(np.float32), "gc"))
        inputs.append("gc")
    bn, bn_inits = batchnorm("g", m=5)
    nodes = [helper.make_node("Gemm", inputs, ["g"], transB=trans_b, beta=0.5), bn]
    graph = helper.make_graph(nodes, "g", [tensor("a", [3, 4])], [tensor("y", None)], inits + bn_inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    check_fusion(model, tmp_path, ["Gemm"], "fold_batchnorm", level=LEVEL.ORT_ENABLE_BASIC)


def test_batchnorm_stays_when_the_conv_output_is_read_elsewhere():
    bn, inits = batchnorm("c")
    model = conv_model([bn], initializers=inits, outputs=("y", "c"))
    sess = session(model)
    assert sess.pass_stats["fold_batchnorm"] == 0
    assert "BatchNormalization" in [op for _, op, _ in sess.node_providers()]


@pytest.mark.parametrize("bad", ["bn_v", "b"])
def test_batchnorm_with_parameters_of_other_sizes_is_left_for_the_kernel_to_refuse(bad):
    """A statistic (or the Conv bias) of another length than the channels does not fold; the
    session refuses the node, naming it, instead of numpy's broadcasting error escaping."""
    bn, inits = batchnorm("c")
    model = conv_model([bn], initializers=inits)
    for init in model.graph.initializer:
        if init.name == bad:
            init.CopyFrom(numpy_helper.from_array(np.ones(32, np.float32), bad))
    with pytest.raises(opforge.OpforgeError, match="BatchNormalization|'conv'"):
        session(model).run(None, {"x": np.ones((1, 8, 9, 9), np.float32)})


@pytest.mark.parametrize("c_shape", [[7], [3, 7]])
def test_batchnorm_after_a_gemm_whose_bias_has_another_width_does_not_fold(c_shape):
    inits = [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "gb"),
             numpy_helper.from_array(np.ones(c_shape, np.float32), "gc")]
    bn, bn_inits = batchnorm("g", m=5)
    nodes = [helper.make_node("Gemm", ["a", "gb", "gc"], ["g"]), bn]
    graph = helper.make_graph(nodes, "g", [tensor("a", [3, 4])], [tensor("y", None)], inits + bn_inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(opforge.OpforgeError, match="Gemm"):
        session(model).run(None, {"a": np.ones((3, 4), np.float32)})


@pytest.mark.parametrize("bias", [True, False])
def test_per_channel_mul_and_add_fold_into_conv(tmp_path, bias):
    scale = numpy_helper.from_array(rng.uniform(0.5, 2, (8, 1, 1)).astype(np.float32), "scale")
    shift = numpy_helper.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), "shift")
    tail = [helper.make_node("Mul", ["c", "scale"], ["m"]), helper.make_node("Add", ["shift", "m"], ["y"])]
    model = conv_model(tail, bias=bias, initializers=[scale, shift])
    check_fusion(model, tmp_path, ["Conv"], "fold_conv_affine", count=2, level=LEVEL.ORT_ENABLE_BASIC)


def test_a_mul_that_is_not_per_channel_stays():
    scale = numpy_helper.from_array(rng.uniform(0.5, 2, (1, 1, 9, 9)).astype(np.float32), "scale")
    model = conv_model([helper.make_node("Mul", ["c", "scale"], ["y"])], initializers=[scale])
    assert session(model).pass_stats["fold_conv_affine"] == 0


def test_conv_add_relu_becomes_one_fused_conv(tmp_path):
    tail = [helper.make_node("Add", ["z", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = conv_model(tail, extra_inputs=[tensor("z", [1, 8, 9, 9])])
    fused = check_fusion(model, tmp_path, ["FusedConv"], "fuse_conv_add")
    assert fused.pass_stats["fuse_conv_activation"] == 1


def test_conv_add_of_its_own_input_is_fused(tmp_path):
    """Y = Conv(X) + X: Y may be planned over Z, which is X; the kernel must not read X after
    writing Y."""
    tail = [helper.make_node("Add", ["c", "x"], ["y"])]
    check_fusion(conv_model(tail), tmp_path, ["FusedConv"], "fuse_conv_add")


@pytest.mark.parametrize("side", [3, 7, 14])
def test_depthwise_conv_add_in_place(tmp_path, side):
    """S = DepthwiseConv(R) + Z, Z and S inside the graph and Z read nowhere else (so S is planned
    over it), on rows narrower than a vector, of one and a half, and of 14: no vector may write
    lanes that a later one reads as Z."""
    tail = [helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node("Neg", ["s"], ["y"])]
    model = conv_model(tail, x_shape=(2, 8, side + 2, side), group=8)
    model.graph.node.insert(0, helper.make_node("Relu", ["x"], ["r"]))
    model.graph.node.insert(1, helper.make_node("Neg", ["x"], ["z"]))
    model.graph.node[2].input[0] = "r"
    check_fusion(model, tmp_path, ["Relu", "Neg", "FusedConv", "Neg"], "fuse_conv_add")


@pytest.mark.parametrize("side", [9, 14])
def test_packed_fused_conv_with_z_in_place(side):
    """FusedConv(R, W, B, Z) of 8 -> 32 channels, Z read nowhere else (so Y is planned over it):
    AVX2 builds pack it and run row tiles, whose last vector of a row of 14 would repeat lanes
    already stored over Z."""
    x_shape, w_shape = (2, 8, side + 2, side), (32, 8, 3, 3)
    w = (rng.standard_normal(w_shape) * 0.2).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["x"], ["z0"]),
             helper.make_node("Tile", ["z0", "reps"], ["z"]),
             helper.make_node("FusedConv", ["r", "w", "b", "z"], ["s"], domain="com.microsoft", pads=[1] * 4,
                              activation="Relu"),
             helper.make_node("Neg", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [tensor("x", list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                               numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "reps")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    feeds = feeds_for(model)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = session(model)
    with paths_taken() as taken:
        for _ in range(2):
            got = sess.run(None, feeds)[0]
            assert_close(got, want, RTOL, scaled_atol(want, ATOL), f"side {side}")
    assert_would_catch(got, want, RTOL, scaled_atol(want, ATOL), f"side {side}")
    assert_path(taken, "conv.packed.row_tiles", ("avx2",))


def test_resnet_block_folds_and_fuses(tmp_path):
    bn, inits = batchnorm("c", output="n")
    tail = [bn, helper.make_node("Sum", ["n", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = conv_model(tail, extra_inputs=[tensor("z", [1, 8, 9, 9])], initializers=inits, bias=False)
    check_fusion(model, tmp_path, ["FusedConv"], "fold_batchnorm")


def test_add_that_broadcasts_is_not_fused():
    tail = [helper.make_node("Add", ["c", "z"], ["y"])]
    sess = session(conv_model(tail, extra_inputs=[tensor("z", [1, 8, 1, 1])]))
    assert sess.pass_stats["fuse_conv_add"] == 0


def test_nothing_fuses_below_the_extended_level():
    tail = [helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    sess = session(conv_model(tail, extra_inputs=[tensor("z", [1, 8, 9, 9])]), LEVEL.ORT_ENABLE_BASIC)
    assert [op for _, op, _ in sess.node_providers()] == ["Conv", "Add", "Relu"]


def activation(op, opset=17):
    """(node reading c writing y, initializers) for each activation FusedConv can take."""
    if op == "Clip" and opset >= 11:
        inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", -0.5), ("hi", 0.8))]
        return helper.make_node("Clip", ["c", "lo", "hi"], ["y"]), inits
    attrs = {"LeakyRelu": {"alpha": 0.2}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
             "Clip": {"min": -0.5, "max": 0.8}}.get(op, {})
    return helper.make_node(op, ["c"], ["y"], **attrs), []


@pytest.mark.parametrize("op,opset", [("Relu", 17), ("Tanh", 17), ("Sigmoid", 17), ("LeakyRelu", 17),
                                      ("HardSigmoid", 17), ("Clip", 17), ("Clip", 6)])
def test_conv_activation_becomes_fused_conv(tmp_path, op, opset):
    node, inits = activation(op, opset)
    check_fusion(conv_model([node], initializers=inits, opset=opset), tmp_path, ["FusedConv"],
                 "fuse_conv_activation")


def test_activation_after_a_shared_conv_output_is_not_fused():
    model = conv_model([helper.make_node("Relu", ["c"], ["y"]), helper.make_node("Neg", ["c"], ["n"])],
                       outputs=("y", "n"))
    assert session(model).pass_stats["fuse_conv_activation"] == 0


# ---- the FusedConv kernel itself, on models that already hold the com.microsoft node ----

def fused_conv_model(x_shape, w_shape, z=True, dtype=np.float32, **attrs):
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    # fan-in scaled weights: sums stay near 1, so the clipping activations see both sides
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    inputs = [tensor("x", list(x_shape), elem)]
    names = ["x", "w", "b"]
    if z:
        out = ort_conv_shape(x_shape, w_shape, attrs)
        inputs.append(tensor("z", out, elem))
        names.append("z")
    node = helper.make_node("FusedConv", names, ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def ort_conv_shape(x_shape, w_shape, attrs):
    pads, strides, dil = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    return [x_shape[0], w_shape[0]] + [
        (x_shape[2 + i] + pads[i] + pads[i + 2] - dil[i] * (w_shape[2 + i] - 1) - 1) // strides[i] + 1 for i in range(2)]


CASES = {
    "3x3": ((1, 16, 20, 20), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "1x1": ((1, 40, 7, 7), (24, 40, 1, 1), {}),
    "stride2": ((2, 6, 17, 15), (12, 6, 3, 3), dict(pads=[1, 0, 1, 2], strides=[2, 2])),
    # strided, on the input's phase planes: several tiles and row blocks, two K blocks
    "stride2_wide": ((1, 64, 30, 28), (28, 64, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "grouped": ((1, 12, 10, 10), (12, 4, 3, 3), dict(pads=[1, 1, 1, 1], group=3)),
    "depthwise": ((1, 12, 10, 10), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=12)),
    # depthwise 3x3 of stride 1 read in place: two images, two outputs per channel, rows of
    # three vectors (the last of 5 lanes); a single row exactly a vector wide
    "depthwise_wide": ((2, 6, 5, 37), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=6)),
    "depthwise_row": ((1, 4, 1, 16), (4, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=4)),
    # depthwise 3x3 of stride 2: outputs in two vectors (the last of 3 lanes) over an odd
    # width; no padding after (the last row and column read no pad); three vectors per row
    "depthwise_stride2": ((2, 6, 9, 37), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=6)),
    "depthwise_stride2_no_end_pad": ((1, 4, 8, 16), (4, 1, 3, 3), dict(pads=[1, 1, 0, 0], strides=[2, 2], group=4)),
    "depthwise_stride2_wide": ((1, 2, 4, 70), (2, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=2)),
    # TensorFlow's SAME for stride 2 on even sizes pads only after: 0 before on both axes, and
    # 1 before the rows with 0 before the columns
    "depthwise_stride2_tf_same": ((1, 4, 10, 36), (4, 1, 3, 3), dict(pads=[0, 0, 1, 1], strides=[2, 2], group=4)),
    "depthwise_stride2_mixed_pads": ((1, 2, 9, 20), (2, 1, 3, 3), dict(pads=[1, 0, 1, 1], strides=[2, 2], group=2)),
    # depthwise 5x5 and 7x7 of stride 1 read in place: the next vector's first columns shifted
    # in, of which the row holds five (5x5) or two (7x7, fewer than the three it could take)
    "depthwise_5x5": ((1, 6, 9, 21), (6, 1, 5, 5), dict(pads=[2, 2, 2, 2], group=6)),
    "depthwise_7x7": ((2, 4, 8, 18), (8, 1, 7, 7), dict(pads=[3, 3, 3, 3], group=4)),
    # depthwise 5x5 of stride 2 read in place, padded 2 before (odd sizes) or 1 (TensorFlow's
    # SAME on even sizes): outputs in two vectors, the ring of rows refilled two rows a step
    "depthwise_5x5_stride2": ((1, 4, 11, 45), (4, 1, 5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2], group=4)),
    "depthwise_5x5_stride2_tf_same": ((2, 3, 12, 40), (6, 1, 5, 5), dict(pads=[1, 1, 2, 2], strides=[2, 2], group=3)),
    # rows narrower than a vector (AVX2 stores each but the plane's last whole, its lanes past
    # the row landing on the next row, stored after), rows of 14 (a last vector shifted back
    # over the one before), and 7-wide outputs of stride 2
    "depthwise_narrow": ((2, 6, 7, 7), (6, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=6)),
    "depthwise_3wide": ((1, 4, 5, 3), (4, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=4)),
    "depthwise_14": ((1, 8, 14, 14), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=8)),
    # rows of one vector: both of its ends shifted in a lane of zeros (AVX2), and of 9 (its last
    # vector shifted back 7 lanes over the first)
    "depthwise_8wide": ((1, 4, 6, 8), (4, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=4)),
    "depthwise_9wide": ((2, 3, 5, 9), (3, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=3)),
    # 37 rows: three strips of output rows (AVX2 walks 16 at a time), each reading the row above it
    "depthwise_tall": ((1, 3, 37, 12), (3, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=3)),
    "depthwise_stride2_to_7": ((1, 4, 14, 14), (4, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=4)),
    # just past what the in-place paths take (they would compute these wrongly): the padded copy
    "depthwise_stride2_pad2": ((1, 4, 9, 20), (4, 1, 3, 3), dict(pads=[2, 2, 2, 2], strides=[2, 2], group=4)),
    "depthwise_5x5_stride2_pad0": ((1, 4, 12, 40), (4, 1, 5, 5), dict(strides=[2, 2], group=4)),
    # dilated taps of stride 2 (3 along rows: a tap's inputs start on even and odd columns in
    # turn), pads of 3 before a row of 23
    "depthwise_stride2_dilated": ((1, 4, 11, 23), (4, 1, 3, 3),
                                  dict(pads=[1, 3, 1, 3], strides=[2, 2], dilations=[2, 3], group=4)),
    # stride 2 along rows only, 5x5 with an odd pad before the row (a row's even input columns
    # land on the odd padded ones), over a row of 33: two full copies of 16 columns and one of 1
    "depthwise_stride2_rows_only": ((1, 3, 6, 33), (3, 1, 5, 5), dict(pads=[2, 1, 2, 3], strides=[1, 2], group=3)),
    # a padded input over 4 MB and few output channels: tiles read the input in place
    "large_plane": ((1, 64, 130, 130), (16, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
}
# the depthwise path each depthwise case must take where the build has it (conv_depthwise_f32.cpp)
DEPTHWISE_PATHS = {
    "depthwise": "same3x3", "depthwise_wide": "same3x3", "depthwise_row": "same3x3",
    "depthwise_stride2": "stride2_3x3", "depthwise_stride2_no_end_pad": "stride2_3x3",
    "depthwise_stride2_wide": "stride2_3x3", "depthwise_stride2_tf_same": "stride2_3x3",
    "depthwise_stride2_mixed_pads": "stride2_3x3", "depthwise_5x5": "same5x5", "depthwise_7x7": "same7x7",
    "depthwise_5x5_stride2": "stride2_5x5", "depthwise_5x5_stride2_tf_same": "stride2_5x5",
    "depthwise_stride2_pad2": "padded", "depthwise_5x5_stride2_pad0": "padded",
    "depthwise_stride2_dilated": "padded", "depthwise_stride2_rows_only": "padded",
    "depthwise_narrow": "same3x3", "depthwise_3wide": "same3x3", "depthwise_14": "same3x3",
    "depthwise_8wide": "same3x3", "depthwise_9wide": "same3x3", "depthwise_tall": "same3x3",
    "depthwise_stride2_to_7": "stride2_3x3"}
DEPTHWISE_ISAS = ("avx512", "avx2")   # the instruction sets with depthwise paths (conv_depthwise_*.cpp)
def avx2_depthwise_path(case: str) -> str:
    """The AVX2 depthwise path of a case (conv_depthwise_avx2.cpp): 3x3 of stride 1 padded 1
    over rows of 8 or more in place, stride 2 along rows on a copy split by column parity, the
    rest on a padded copy."""
    x_shape, _, attrs = CASES[case]
    if attrs.get("strides", [1, 1])[1] == 2:
        return "split"
    return "same3x3" if DEPTHWISE_PATHS[case] == "same3x3" and x_shape[-1] >= 8 else "padded"


ACTIVATIONS = [("", []), ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.1]),
               ("Clip", [-0.4, 0.6]), ("HardSigmoid", [0.3, 0.5])]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("act,params", ACTIVATIONS)
def test_fused_conv_kernel_matches_onnxruntime(case, act, params):
    x_shape, w_shape, attrs = CASES[case]
    if act:
        attrs = dict(attrs, activation=act, activation_params=params) if params else dict(attrs, activation=act)
    model = fused_conv_model(x_shape, w_shape, **attrs)
    feeds = feeds_for(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = session(model)
    assert sess.node_providers()[0][2] == "CPUExecutionProvider"
    with paths_taken() as taken:
        for _ in range(2):
            got = sess.run(None, feeds)[0]
            assert_close(got, want, RTOL, scaled_atol(want, ATOL), f"{case} {act}")
    assert_would_catch(got, want, RTOL, scaled_atol(want, ATOL), f"{case} {act}")
    if case in DEPTHWISE_PATHS:
        path = DEPTHWISE_PATHS[case] if build_isa() == "avx512" else avx2_depthwise_path(case)
        assert_path(taken, f"conv.depthwise.{path}", DEPTHWISE_ISAS)


def test_fused_conv_float64_without_z():
    model = fused_conv_model((1, 5, 8, 8), (7, 5, 3, 3), z=False, dtype=np.float64, activation="Relu", pads=[1] * 4)
    feeds = feeds_for(model)
    plain = onnx.ModelProto()
    plain.CopyFrom(model)
    plain.graph.node[0].attribute.remove(next(a for a in plain.graph.node[0].attribute if a.name == "activation"))
    got = session(model).run(None, feeds)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.maximum(session(plain).run(None, feeds)[0], 0), rtol=1e-12)


def test_fused_conv_rejects_an_unknown_activation():
    model = fused_conv_model((1, 4, 5, 5), (4, 4, 3, 3), z=False, activation="Swish")
    with pytest.raises(Exception, match="activation"):
        session(model).run(None, feeds_for(model))
