"""Cast, CastLike, BitCast, IsNaN and IsInf on the narrow types (float8, float4, float8e8m0,
4- and 2-bit integers), checked bit for bit against ml_dtypes and onnx.numpy_helper (the
oracle onnx's own test data comes from), and the float8 round trip against onnxruntime."""
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import opforge

RNG = np.random.default_rng(7)
FLOAT8 = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
          TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
          TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}
NARROW_INTS = {TensorProto.UINT4: ml_dtypes.uint4, TensorProto.INT4: ml_dtypes.int4,
               TensorProto.UINT2: ml_dtypes.uint2, TensorProto.INT2: ml_dtypes.int2}
ALL_NARROW = {**FLOAT8, **NARROW_INTS, TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
              TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu}


def cast(kernels, x, to, opset=25, **attrs):
    return kernels.op("Cast", domain="", version=opset)(x, to=to, **attrs)


def assert_bits(got, want):
    """Same dtype, shape and bytes (NaN encodings included)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    unsigned = np.dtype(f"u{got.dtype.itemsize}")
    mismatch = np.flatnonzero(got.view(unsigned).ravel() != want.view(unsigned).ravel())
    assert mismatch.size == 0, (f"{mismatch.size} elements differ, first at {mismatch[0]}: "
                                f"got {got.ravel()[mismatch[0]]!r}, want {want.ravel()[mismatch[0]]!r}")


def float_probe():
    """float32 values that exercise every float8/float4 rounding path: random bit patterns,
    every float16 value, ties between neighbours, the saturation edges and the specials."""
    random_bits = RNG.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    halves = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    scales = np.ldexp(np.float32(1), np.arange(-30, 20)).astype(np.float32)
    mantissas = np.linspace(1, 2, 65, dtype=np.float32)
    grid = np.outer(scales, mantissas).ravel()
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 448, 449, 464, 480, 57344, 61440,
                         6.0, 7.0, 6.5, 240, 241, 248], np.float32)
    probe = np.concatenate([random_bits, halves, grid, -grid, specials, -specials])
    return probe.reshape(-1, 7) if probe.size % 7 == 0 else probe


@pytest.mark.parametrize("to", sorted(FLOAT8), ids=lambda t: TensorProto.DataType.Name(t))
@pytest.mark.parametrize("saturate", [1, 0])
def test_float_to_float8(kernels, to, saturate):
    x = float_probe()
    want = (numpy_helper.saturate_cast(x, FLOAT8[to]) if saturate else x.astype(FLOAT8[to]))
    assert_bits(cast(kernels, x, to, saturate=saturate), want)
    halves = x.astype(np.float16)
    want = (numpy_helper.saturate_cast(halves, FLOAT8[to]) if saturate else halves.astype(FLOAT8[to]))
    assert_bits(cast(kernels, halves, to, saturate=saturate), want)


def test_float_to_float4_and_narrow_ints(kernels):
    x = float_probe()
    assert_bits(cast(kernels, x, TensorProto.FLOAT4E2M1), x.astype(ml_dtypes.float4_e2m1fn))
    finite = x[np.abs(x) < 1e9]
    for to, dtype in NARROW_INTS.items():
        assert_bits(cast(kernels, finite, to), finite.astype(dtype))
    ints = np.arange(-1000, 1000, dtype=np.int32)
    for to, dtype in NARROW_INTS.items():
        assert_bits(cast(kernels, ints, to), ints.astype(dtype))
        assert_bits(cast(kernels, ints.astype(np.int64), to), ints.astype(dtype))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float_to_float8e8m0(kernels, round_mode, saturate):
    x = float_probe()
    want = numpy_helper.to_float8e8m0(x, bool(saturate), round_mode)
    got = cast(kernels, x, TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)
    assert_bits(got, want)


@pytest.mark.parametrize("src", sorted(ALL_NARROW), ids=lambda t: TensorProto.DataType.Name(t))
def test_every_encoding_to_wide_types(kernels, src):
    encodings = np.arange(256, dtype=np.uint8)
    if src in NARROW_INTS or src == TensorProto.FLOAT4E2M1:
        encodings = encodings[:16] if src != TensorProto.UINT2 and src != TensorProto.INT2 else encodings[:4]
    x = encodings.view(ALL_NARROW[src])
    as_float = x.astype(np.float32)
    for to, dtype in [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
                      (TensorProto.FLOAT16, np.float16), (TensorProto.BFLOAT16, ml_dtypes.bfloat16)]:
        with np.errstate(over="ignore"):
            assert_bits(cast(kernels, x, to), as_float.astype(dtype))
    finite = np.isfinite(as_float)
    for to, dtype in [(TensorProto.INT8, np.int8), (TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64),
                      (TensorProto.UINT8, np.uint8)]:
        small = finite & (as_float >= np.iinfo(dtype).min) & (as_float <= np.iinfo(dtype).max)
        assert_bits(cast(kernels, x[small], to), as_float[small].astype(dtype))
    assert_bits(cast(kernels, x, TensorProto.BOOL), as_float != 0)


def test_narrow_to_narrow_goes_through_the_value(kernels):
    x = np.arange(16, dtype=np.uint8).view(ml_dtypes.int4)
    assert_bits(cast(kernels, x, TensorProto.FLOAT8E4M3FN), x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn))
    y = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    finite = y[np.isfinite(y.astype(np.float32))]
    assert_bits(cast(kernels, finite, TensorProto.INT4), finite.astype(np.float32).astype(ml_dtypes.int4))


def test_castlike_takes_the_narrow_target(kernels):
    x = RNG.standard_normal((3, 5)).astype(np.float32) * 100
    like = np.zeros(1, ml_dtypes.float8_e4m3fn)
    got = kernels.op("CastLike", domain="", version=19)(x, like, saturate=0)
    assert_bits(got, x.astype(ml_dtypes.float8_e4m3fn))


def onnxruntime_round_trip(x, to, saturate):
    """float32 -> float8 -> float32 through two Casts in onnxruntime."""
    nodes = [helper.make_node("Cast", ["x"], ["n"], to=to, saturate=saturate),
             helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("to", sorted(FLOAT8), ids=lambda t: TensorProto.DataType.Name(t))
@pytest.mark.parametrize("saturate", [1, 0])
def test_float8_round_trip_matches_onnxruntime(kernels, to, saturate):
    x = float_probe().ravel()
    if not saturate:
        # Past the largest finite value, unsaturated, onnxruntime and ml_dtypes (whose results
        # are onnx's test data, which we follow) disagree: e.g. 485 -> e4m3fn is 448 in
        # onnxruntime but NaN in ml_dtypes, 62000 -> e5m2 NaN against inf. Compare the rest.
        x = x[~(np.abs(x) > float(ml_dtypes.finfo(FLOAT8[to]).max))]
    want = onnxruntime_round_trip(x, to, saturate)
    got = cast(kernels, cast(kernels, x, to, opset=19, saturate=saturate), TensorProto.FLOAT, opset=19)
    np.testing.assert_array_equal(got, want)


BITCASTS = [(np.float32, np.int32), (np.int32, np.float32), (np.float64, np.int64), (np.uint16, np.int16),
            (np.bool_, np.uint8), (np.int8, np.uint8), (np.float16, ml_dtypes.bfloat16),
            (ml_dtypes.float8_e4m3fn, np.uint8), (ml_dtypes.int4, ml_dtypes.uint4)]


@pytest.mark.parametrize("src, dst", BITCASTS, ids=str)
def test_bitcast(kernels, src, dst):
    raw = RNG.integers(0, 256, size=(4, 6 * np.dtype(src).itemsize), dtype=np.uint8)
    if np.dtype(src) == np.bool_:
        raw &= 1
    if np.dtype(src) in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        raw &= 0x0F
    x = raw.view(src)
    got = kernels.op("BitCast", domain="", version=26)(x, to=helper.np_dtype_to_tensor_dtype(np.dtype(dst)))
    assert_bits(got, x.view(dst))


def test_bitcast_refuses_other_widths(kernels):
    with pytest.raises(opforge.OpError, match="same bit width"):
        kernels.op("BitCast", domain="", version=26)(np.zeros(3, np.float32), to=TensorProto.INT64)
    with pytest.raises(opforge.OpError, match=r"int4 \(4 bits\)"):
        kernels.op("BitCast", domain="", version=26)(np.zeros(3, ml_dtypes.int4), to=TensorProto.UINT8)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, *FLOAT8.values()], ids=str)
def test_isnan_isinf_narrow_floats(kernels, dtype):
    bits = np.arange(2 ** (8 * np.dtype(dtype).itemsize), dtype=np.uint64)
    x = bits.astype(np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8).view(dtype)
    as_float = x.astype(np.float32)
    np.testing.assert_array_equal(kernels.op("IsNaN", domain="", version=20)(x), np.isnan(as_float))
    for neg, pos in [(1, 1), (0, 1), (1, 0)]:
        want = np.isinf(as_float) & np.where(as_float > 0, bool(pos), bool(neg))
        got = kernels.op("IsInf", domain="", version=20)(x, detect_negative=neg, detect_positive=pos)
        np.testing.assert_array_equal(got, want)


def test_string_cast_is_refused_clearly(kernels):
    with pytest.raises(opforge.OpError, match="'to' = 8"):
        cast(kernels, np.zeros(2, np.float32), TensorProto.STRING)


MOVERS = [("Transpose", lambda x: [x], {"perm": [2, 0, 1]}, lambda x: np.transpose(x, (2, 0, 1))),
          ("Reshape", lambda x: [x, np.array([3, -1])], {}, lambda x: x.reshape(3, -1)),
          ("Flatten", lambda x: [x], {"axis": 2}, lambda x: x.reshape(6, 5)),
          ("Unsqueeze", lambda x: [x, np.array([1])], {}, lambda x: x[:, None]),
          ("Concat", lambda x: [x, x[:, :1]], {"axis": 1}, lambda x: np.concatenate([x, x[:, :1]], 1)),
          ("Slice", lambda x: [x, np.array([1]), np.array([3]), np.array([2])], {}, lambda x: x[:, :, 1:3]),
          ("Gather", lambda x: [x, np.array([2, 0, 2])], {"axis": 1}, lambda x: x[:, [2, 0, 2]]),
          ("Expand", lambda x: [x[:, :1], np.array([2, 3, 5])], {}, lambda x: np.broadcast_to(x[:, :1], (2, 3, 5))),
          ("Tile", lambda x: [x, np.array([1, 2, 1])], {}, lambda x: np.tile(x, (1, 2, 1))),
          ("Where", lambda x: [x.view(np.uint8) % 2 == 0, x, x[::-1]], {},
           lambda x: np.where(x.view(np.uint8) % 2 == 0, x, x[::-1]))]


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float4_e2m1fn], ids=str)
@pytest.mark.parametrize("op, inputs, attrs, oracle", MOVERS, ids=[m[0] for m in MOVERS])
def test_ops_that_move_elements_take_narrow_types(kernels, dtype, op, inputs, attrs, oracle):
    width = {np.dtype(ml_dtypes.int4): 16, np.dtype(ml_dtypes.uint2): 4}.get(np.dtype(dtype), 256)
    x = RNG.integers(0, width, size=(2, 3, 5), dtype=np.uint8).view(dtype)
    got = kernels.op(op, domain="", version=13)(*inputs(x), **attrs)
    assert_bits(got, np.ascontiguousarray(oracle(x)))


def test_pad_refuses_narrow_types_by_name(kernels):
    with pytest.raises(TypeError, match="int4"):
        kernels.op("Pad", domain="", version=13)(np.zeros((2, 2), ml_dtypes.int4), np.array([0, 1, 0, 1]))
