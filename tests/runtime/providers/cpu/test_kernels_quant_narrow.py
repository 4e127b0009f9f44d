"""QuantizeLinear and DequantizeLinear on the narrow types: 4- and 2-bit integers, float8 and
float4, per tensor, per axis and blocked; checked against numpy (and onnx.numpy_helper's
saturating cast), and the quantize-dequantize round trip against onnxruntime where it has one."""
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(5)
INTS = {TensorProto.INT4: ml_dtypes.int4, TensorProto.UINT4: ml_dtypes.uint4,
        TensorProto.INT2: ml_dtypes.int2, TensorProto.UINT2: ml_dtypes.uint2}
FLOATS = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
          TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz, TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}


def op(kernels, name, *inputs, opset=25, **attrs):
    return kernels.op(name, domain="", version=opset)(*inputs, **attrs)


def int_oracle(x, scale, zp, dtype):
    info = ml_dtypes.iinfo(dtype)
    q = np.rint(x.astype(np.float32) / scale) + zp.astype(np.float32)
    return np.clip(q, info.min, info.max).astype(dtype)


def assert_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("to", sorted(INTS), ids=lambda t: TensorProto.DataType.Name(t))
def test_quantize_narrow_ints_per_tensor_and_axis(kernels, to):
    dtype = INTS[to]
    info = ml_dtypes.iinfo(dtype)
    x = (RNG.standard_normal((4, 6, 5)) * 6).astype(np.float32)
    x[0, 0, :3] = [np.nan, 2.5, -2.5]  # NaN saturates low (as onnxruntime); ties go to even
    zp = np.array(1 if info.max > 1 else 0, dtype=dtype)
    scale = np.float32(0.75)
    got = op(kernels, "QuantizeLinear", x, scale, zp)
    want = int_oracle(np.nan_to_num(x, nan=-1e9), scale, zp, dtype)
    assert_bits(got, want)
    back = op(kernels, "DequantizeLinear", got, scale, zp)
    np.testing.assert_array_equal(back, (got.astype(np.float32) - zp.astype(np.float32)) * scale)
    scales = RNG.uniform(0.2, 2, size=6).astype(np.float32)
    zps = RNG.integers(info.min, info.max + 1, size=6).astype(dtype)
    got = op(kernels, "QuantizeLinear", x, scales, zps, axis=1)
    want = int_oracle(np.nan_to_num(x, nan=-1e9), scales[:, None], zps[:, None], dtype)
    assert_bits(got, want)
    back = op(kernels, "DequantizeLinear", got, scales, zps, axis=1)
    np.testing.assert_array_equal(back, (got.astype(np.float32) - zps[:, None].astype(np.float32)) * scales[:, None])


@pytest.mark.parametrize("to", sorted(FLOATS), ids=lambda t: TensorProto.DataType.Name(t))
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_narrow_floats(kernels, to, saturate):
    dtype = FLOATS[to]
    x = (RNG.standard_normal((3, 40)) * 300).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, np.nan, 1e9]
    scale = np.float32(0.5)
    zp = np.zeros((), dtype)
    got = op(kernels, "QuantizeLinear", x, scale, zp, saturate=saturate)
    with np.errstate(all="ignore"):
        scaled = x / scale
        want = (numpy_helper.saturate_cast(scaled, dtype) if saturate or to == TensorProto.FLOAT4E2M1
                else scaled.astype(dtype))
    assert_bits(got, want)
    back = op(kernels, "DequantizeLinear", got, scale, zp)
    np.testing.assert_array_equal(back, got.astype(np.float32) * scale)


def test_blocked_int4_with_float16_scale(kernels):
    x = (RNG.standard_normal((2, 8)) * 4).astype(np.float16)
    scale = RNG.uniform(0.3, 1.0, size=(2, 2)).astype(np.float16)
    zp = np.array([[1, -2], [0, 3]], dtype=ml_dtypes.int4)
    got = op(kernels, "QuantizeLinear", x, scale, zp, axis=1, block_size=4)
    full_scale = np.repeat(scale.astype(np.float32), 4, axis=1)
    full_zp = np.repeat(zp, 4, axis=1)
    assert_bits(got, int_oracle(x, full_scale, full_zp, ml_dtypes.int4))
    back = op(kernels, "DequantizeLinear", got, scale, zp, axis=1, block_size=4)
    want = ((got.astype(np.float32) - full_zp.astype(np.float32)) * full_scale).astype(np.float16)
    np.testing.assert_array_equal(back, want)


def onnxruntime_qdq(x, scale, zp, opset=21):
    """x quantized and dequantized by onnxruntime (its Python API cannot return narrow types)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(scale), "s"), numpy_helper.from_array(np.asarray(zp), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2],
                         ids=str)
def test_qdq_round_trip_matches_onnxruntime(kernels, dtype):
    x = (RNG.standard_normal((5, 33)) * 8).astype(np.float32)
    scale = np.float32(0.37)
    zp = np.array(3 if dtype == ml_dtypes.uint4 else 0, dtype=dtype)
    want = onnxruntime_qdq(x, scale, zp)
    got = op(kernels, "DequantizeLinear", op(kernels, "QuantizeLinear", x, scale, zp, opset=21), scale, zp, opset=21)
    np.testing.assert_array_equal(got, want)
