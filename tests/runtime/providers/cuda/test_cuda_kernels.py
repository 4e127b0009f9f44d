"""The CUDA provider's standard-op kernels, one node at a time, against onnxruntime's CPU
provider: on a real GPU with cupy where there is one (the `cuda`-marked cases), and everywhere
on cuda_support's stand-in GPUs: numpy as their array module, and the stand-in cupy under the
provider's own device (cupy's dtype rules, stream order, no host arrays in device math)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import opforge
from opforge.runtime.providers.registry import CUDA
from tests.support.cuda_support import cupy_gpu, numpy_gpu  # noqa: F401  (the stand-in GPU fixtures)

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(7)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# (case id, op type, node attributes, inputs fed at run time, constant inputs, opset)
CASES = [
    ("pow", "Pow", {}, {"a": np.abs(randn(3, 4)) + 0.1, "b": randn(4)}, {}, 17),
    ("clip", "Clip", {}, {"x": randn(3, 4)}, {"lo": np.float32(-0.5), "hi": np.float32(0.3)}, 17),
    ("clip-high-only", "Clip", {}, {"x": randn(5)}, {"": None, "hi": np.float32(0.1)}, 17),
    ("where", "Where", {}, {"c": randn(3, 1) > 0, "a": randn(3, 4), "b": randn(4)}, {}, 17),
    ("leaky", "LeakyRelu", {"alpha": 0.2}, {"x": randn(6)}, {}, 17),
    ("max3", "Max", {}, {"a": randn(2, 3), "b": randn(3), "c": randn(2, 1)}, {}, 17),
    ("sum3", "Sum", {}, {"a": randn(2, 3), "b": randn(3), "c": randn(2, 1)}, {}, 17),
    ("less", "Less", {}, {"a": randn(2, 3), "b": randn(3)}, {}, 17),
    ("equal-int", "Equal", {}, {"a": np.array([1, 2, 3], np.int64), "b": np.array([1, 0, 3], np.int64)}, {}, 17),
    ("cast", "Cast", {"to": TensorProto.INT32}, {"x": randn(4) * 10}, {}, 17),
    ("div", "Div", {}, {"a": randn(2, 3), "b": np.abs(randn(2, 3)) + 1}, {}, 17),
    ("sigmoid-f16", "Sigmoid", {}, {"x": randn(8, dtype=np.float16)}, {}, 17),
    ("reducemax-13", "ReduceMax", {"axes": [0, 2], "keepdims": 0}, {"x": randn(2, 3, 4)}, {}, 13),
    ("reduceprod-18", "ReduceProd", {"keepdims": 1}, {"x": randn(2, 3)}, {"axes": np.array([-1], np.int64)}, 18),
    ("reducesum-all", "ReduceSum", {"keepdims": 0}, {"x": randn(2, 3)}, {}, 13),
    ("reducemean-noop", "ReduceMean", {"noop_with_empty_axes": 1}, {"x": randn(2, 3)}, {}, 18),
    ("argmax", "ArgMax", {"axis": 1, "keepdims": 0}, {"x": randn(3, 5)}, {}, 13),
    ("argmin", "ArgMin", {"axis": -1}, {"x": randn(3, 5)}, {}, 13),
    ("logsoftmax-11", "LogSoftmax", {"axis": 1}, {"x": randn(2, 3, 4)}, {}, 11),
    ("softmax-11", "Softmax", {}, {"x": randn(2, 3, 4)}, {}, 11),
    ("squeeze", "Squeeze", {}, {"x": randn(1, 3, 1, 2)}, {"axes": np.array([0, -2], np.int64)}, 13),
    ("squeeze-all-11", "Squeeze", {}, {"x": randn(1, 3, 1, 2)}, {}, 11),
    ("unsqueeze", "Unsqueeze", {}, {"x": randn(3, 2)}, {"axes": np.array([0, -1], np.int64)}, 13),
    ("unsqueeze-11", "Unsqueeze", {"axes": [1]}, {"x": randn(3, 2)}, {}, 11),
    ("expand", "Expand", {}, {"x": randn(3, 1)}, {"shape": np.array([2, 1, 4], np.int64)}, 13),
    ("flatten0", "Flatten", {"axis": 0}, {"x": randn(2, 3, 4)}, {}, 13),
    ("flatten-negative", "Flatten", {"axis": -1}, {"x": randn(2, 3, 4)}, {}, 13),
    ("transpose", "Transpose", {}, {"x": randn(2, 3, 4)}, {}, 13),
    ("reshape-zero", "Reshape", {}, {"x": randn(2, 3, 4)}, {"shape": np.array([0, -1], np.int64)}, 14),
    ("gather-neg", "Gather", {"axis": 1}, {"x": randn(3, 5)}, {"i": np.array([[0, -1], [2, 4]], np.int64)}, 13),
    ("slice-steps", "Slice", {}, {"x": randn(6, 7)},
     {"s": np.array([5, 1], np.int64), "e": np.array([-100, 1000], np.int64),
      "a": np.array([0, 1], np.int64), "st": np.array([-2, 3], np.int64)}, 13),
    ("concat", "Concat", {"axis": -1}, {"a": randn(2, 3), "b": randn(2, 1)}, {}, 13),
    ("shape-15", "Shape", {"start": 1, "end": -1}, {"x": randn(2, 3, 4, 5)}, {}, 15),
    ("gemm", "Gemm", {"transA": 1, "alpha": 0.7, "beta": 0.3}, {"a": randn(4, 3), "b": randn(4, 5)},
     {"c": randn(5)}, 13),
    ("matmul-batched", "MatMul", {}, {"a": randn(2, 1, 3, 4), "b": randn(5, 4, 2)}, {}, 13),
    ("conv-dilated", "Conv", {"dilations": [2, 1], "strides": [1, 2], "pads": [2, 0, 1, 1]},
     {"x": randn(2, 3, 9, 8)}, {"w": randn(4, 3, 3, 2), "b": randn(4)}, 13),
    ("conv-same-lower", "Conv", {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, {"x": randn(1, 2, 7, 6)},
     {"w": randn(3, 2, 4, 3)}, 13),
    ("conv-depthwise", "Conv", {"group": 4, "pads": [1, 1, 1, 1]}, {"x": randn(2, 4, 5, 5)},
     {"w": randn(4, 1, 3, 3)}, 13),
    ("conv-1x1", "Conv", {}, {"x": randn(2, 6, 4, 4)}, {"w": randn(5, 6, 1, 1)}, 13),
    ("maxpool-pads-dilations", "MaxPool", {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "dilations": [1, 2],
                                           "strides": [2, 1]}, {"x": randn(2, 3, 8, 7)}, {}, 13),
    ("avgpool-include-pad", "AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
     {"x": randn(1, 2, 5, 5)}, {}, 13),
    ("avgpool-same-upper", "AveragePool", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
     {"x": randn(1, 2, 5, 6)}, {}, 13),
    ("globalmax", "GlobalMaxPool", {}, {"x": randn(2, 3, 4, 5)}, {}, 13),
    ("layernorm-axis1", "LayerNormalization", {"axis": 1, "epsilon": 1e-3}, {"x": randn(2, 3, 4)},
     {"g": randn(3, 4), "bb": randn(3, 4)}, 17),
    ("batchnorm", "BatchNormalization", {"epsilon": 1e-3}, {"x": randn(2, 3, 4)},
     {"s": randn(3), "bb": randn(3), "m": randn(3), "v": np.abs(randn(3)) + 0.5}, 15),
    ("erf", "Erf", {}, {"x": randn(3, 4) * 2}, {}, 17),
    ("gelu", "Gelu", {}, {"x": randn(3, 4) * 3}, {}, 20),
    ("gelu-tanh", "Gelu", {"approximate": "tanh"}, {"x": randn(3, 4) * 3}, {}, 20),
    ("erf-f16", "Erf", {}, {"x": randn(3, 4, dtype=np.float16) * 2}, {}, 17),
    ("gelu-f16", "Gelu", {}, {"x": randn(3, 4, dtype=np.float16) * 3}, {}, 20),
    ("gelu-tanh-f16", "Gelu", {"approximate": "tanh"}, {"x": randn(3, 4, dtype=np.float16) * 3}, {}, 20),
    ("sin", "Sin", {}, {"x": randn(5)}, {}, 17),
    ("cos", "Cos", {}, {"x": randn(5)}, {}, 17),
    ("sign", "Sign", {}, {"x": np.array([-2, 0, 3.5], np.float32)}, {}, 17),
    ("round-half-even", "Round", {}, {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.7, 2.2], np.float32)}, {}, 17),
    ("softplus", "Softplus", {}, {"x": np.concatenate([randn(6) * 3, [30.0, -30.0]]).astype(np.float32)}, {}, 17),
    ("softplus-f16", "Softplus", {}, {"x": np.array([-30.0, -3.0, 0.5, 9.0, 12.0, 15.0, 19.5, 30.0], np.float16)}, {}, 17),
    ("softsign", "Softsign", {}, {"x": randn(6) * 3}, {}, 17),
    ("mish", "Mish", {}, {"x": randn(6) * 3}, {}, 18),
    ("elu", "Elu", {"alpha": 0.7}, {"x": randn(6) * 3}, {}, 17),
    ("celu", "Celu", {"alpha": 1.3}, {"x": randn(6) * 3}, {}, 17),
    ("selu", "Selu", {}, {"x": randn(6) * 3}, {}, 17),
    ("thresholded-relu", "ThresholdedRelu", {"alpha": 0.4}, {"x": randn(6)}, {}, 17),
    ("hardsigmoid", "HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {"x": randn(6) * 3}, {}, 17),
    ("hardswish", "HardSwish", {}, {"x": randn(6) * 4}, {}, 17),
    ("prelu-broadcast", "PRelu", {}, {"x": randn(2, 3, 4)}, {"slope": randn(3, 1)}, 17),
    ("and", "And", {}, {"a": randn(2, 3) > 0, "b": randn(3) > 0}, {}, 17),
    ("xor", "Xor", {}, {"a": randn(2, 3) > 0, "b": randn(2, 3) > 0}, {}, 17),
    ("not", "Not", {}, {"x": randn(4) > 0}, {}, 17),
]


def single_node_model(op, attrs, feeds, consts, opset):
    names = list(feeds) + list(consts)
    node = helper.make_node(op, names, ["y"], **attrs)
    # symbolic sizes, so that no node is folded into a constant before it reaches a kernel
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                            [f"{n}{d}" for d in range(v.ndim)]) for n, v in feeds.items()]
    inits = [const(n, v) for n, v in consts.items() if n]
    graph = helper.make_graph([node], op, inputs, [helper.make_empty_tensor_value_info("y")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture(params=["stand-in", "stand-in-cupy", pytest.param("gpu", marks=pytest.mark.cuda)])
def device(request):
    """Where the session's CUDA kernels run: numpy's stand-in GPU, the stand-in cupy, or the real one."""
    if request.param != "gpu":
        request.getfixturevalue("numpy_gpu" if request.param == "stand-in" else "cupy_gpu")
    return request.param


@pytest.mark.parametrize("op, attrs, feeds, consts, opset", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_matches_onnxruntime(device, op, attrs, feeds, consts, opset):
    proto = single_node_model(op, attrs, feeds, consts, opset).SerializeToString()
    expected = ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"])
    placed = [p for _, o, p in sess.node_providers() if o == op]
    assert placed == [CUDA], sess.node_providers()
    got = sess.run(None, feeds)[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tolerance = 1e-3 if got.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def as_float16(values: dict) -> dict:
    return {n: v.astype(np.float16) if getattr(v, "dtype", None) == np.float32 else v for n, v in values.items()}


@pytest.mark.parametrize("op, attrs, feeds, consts, opset", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_output_dtype_is_the_inferred_one_in_float16(device, op, attrs, feeds, consts, opset):
    """Every kernel on float16 values gives the dtype ONNX's type inference gives the node: a
    kernel that computes wider (cupyx's erf has no float16 loop) would spread float32 through
    an fp16 model."""
    proto = single_node_model(op, attrs, as_float16(feeds), as_float16(consts), opset).SerializeToString()
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"])
    assert [p for _, o, p in sess.node_providers() if o == op] == [CUDA], sess.node_providers()
    assert sess.run(None, as_float16(feeds))[0].dtype == sess.types.get("y").dtype
