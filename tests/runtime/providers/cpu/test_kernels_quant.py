"""Quantization kernels (QuantizeLinear ... QLinearConv, and com.microsoft's quantized ops) against
onnxruntime: integer outputs must be equal, element for element."""
import numpy as np
import pytest

from tests.support.exact_check import check, onnxruntime_outputs
from tests.support.kernel_variants import assert_path, paths_taken

MS = "com.microsoft"
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def reseed():
    """Each test draws the same data whichever tests run before it."""
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state


def qrand(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


def zp(dtype, shape=()):
    info = np.iinfo(dtype)
    return RNG.integers(info.min // 2, info.max // 2 + 1, size=shape).astype(dtype)


def f32(*values):
    return np.array(values, np.float32).reshape(-1) if len(values) > 1 else np.float32(values[0])


# -- QuantizeLinear / DequantizeLinear -------------------------------------------------------------

def tie_values(shape, scale):
    """Values on rounding ties (k + 0.5) * scale and far out of range, besides random ones."""
    x = RNG.standard_normal(shape).astype(np.float32) * 50 * scale
    flat = x.reshape(-1)
    flat[: flat.size // 4] = (RNG.integers(-300, 300, flat.size // 4) + 0.5) * scale
    flat[-3:] = [1e9, -1e9, 0.0]
    return x


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor(kernels, dtype):
    x = tie_values((3, 40), 0.5)
    for opset in ((10, 13, 19, 21) if dtype in (np.uint8, np.int8) else (21,)):
        check(kernels, "QuantizeLinear", [x, np.float32(0.5), zp(dtype)], opset=opset)
    check(kernels, "QuantizeLinear", [x, np.float32(0.25), None], opset=13)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
def test_quantize_per_axis_and_blocked(kernels, dtype):
    x = tie_values((2, 6, 10), 0.1)
    scale = RNG.uniform(0.05, 0.2, 6).astype(np.float32)
    check(kernels, "QuantizeLinear", [x, scale, zp(dtype, 6)], {"axis": 1}, opset=21)
    scale = RNG.uniform(0.05, 0.2, (2, 6, 3)).astype(np.float32)
    check(kernels, "QuantizeLinear", [x, scale, zp(dtype, (2, 6, 3))], {"axis": -1, "block_size": 4}, opset=21)
    scale = RNG.uniform(0.05, 0.2, (1, 6, 10)).astype(np.float32)
    check(kernels, "QuantizeLinear", [x, scale, zp(dtype, (1, 6, 10))], {"axis": 0, "block_size": 2}, opset=21)


def test_quantize_half_input_and_output_dtype(kernels):
    x = np.clip(tie_values((4, 9), 0.5), -6e4, 6e4).astype(np.float16)
    check(kernels, "QuantizeLinear", [x, np.float16(0.5), np.int8(3)], opset=19)
    check(kernels, "QuantizeLinear", [x.astype(np.float32), np.float32(0.5)], {"output_dtype": 3}, opset=21)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
def test_dequantize(kernels, dtype):
    x = qrand(dtype, (3, 5, 8))
    z = zp(dtype) if dtype != np.int32 else None
    opsets = (10, 13, 19, 21) if dtype in (np.uint8, np.int8, np.int32) else (21,)
    for opset in opsets:
        check(kernels, "DequantizeLinear", [x, np.float32(0.37), z], opset=opset, rtol=0, atol=0)
    if dtype == np.int32:
        return
    check(kernels, "DequantizeLinear", [x, RNG.uniform(0.1, 1, 5).astype(np.float32), zp(dtype, 5)],
          {"axis": 1}, opset=opsets[-1], rtol=0, atol=0)
    check(kernels, "DequantizeLinear", [x, RNG.uniform(0.1, 1, (3, 5, 2)).astype(np.float32),
                                        zp(dtype, (3, 5, 2))], {"axis": 2, "block_size": 4}, rtol=0, atol=0)


def test_dequantize_half_scale(kernels):
    check(kernels, "DequantizeLinear", [qrand(np.int8, (4, 6)), np.float16(0.3), np.int8(-2)], opset=19,
          rtol=0, atol=0)


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros"])
def test_dynamic_quantize_linear(kernels, case):
    x = RNG.standard_normal((7, 33)).astype(np.float32) * 3
    x = {"mixed": x, "positive": np.abs(x) + 1, "negative": -np.abs(x) - 1, "zeros": x * 0}[case]
    check(kernels, "DynamicQuantizeLinear", [x], opset=11, num_outputs=3, rtol=0, atol=0)


def test_quantize_errors_name_the_problem(kernels):
    q = kernels.op("QuantizeLinear", version=21)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(Exception, match="scale has 2 values but x has 3"):
        q(x, np.ones(2, np.float32), np.zeros(2, np.uint8))
    with pytest.raises(Exception, match="block_size"):
        q(x, np.ones((2, 3), np.float32), np.zeros((2, 3), np.uint8), axis=1, block_size=-1)
    with pytest.raises(Exception, match="zero point's shape"):
        q(x, np.ones(3, np.float32), np.zeros(2, np.uint8))


# -- integer matrix products -------------------------------------------------------------------

GEMM_SHAPES = [((7, 13), (13, 37)), ((2, 3, 5, 64), (64, 33)), ((3, 1, 9, 8), (4, 8, 16)), ((70,), (70, 5)),
               ((6, 70), (70,)), ((1, 300), (300, 70))]


@pytest.mark.parametrize("a_type, b_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_matmul_integer(kernels, a_type, b_type):
    """Exact against int64 arithmetic, on the hand-written tiles (AVX-512 VNNI, or AVX2's 16-bit
    pairs): K of 13, 8, 70 and 300 (groups of 4 with a tail), rows not a multiple of the tile's 6,
    columns from 1 to 70 (panels of 32 with a partial last one)."""
    with paths_taken() as taken:
        for sa, sb in GEMM_SHAPES:
            a, b = qrand(a_type, sa), qrand(b_type, sb)
            za, zb = zp(a_type), zp(b_type)
            got = check(kernels, "MatMulInteger", [a, b, za, zb], opset=10)[0]
            exact = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)
            assert np.array_equal(got, exact), "MatMulInteger differs from exact integer arithmetic"
    assert_path(taken, "qgemm.tiles", ("avx512", "avx2"))
    a, b = qrand(a_type, (9, 20)), qrand(b_type, (20, 35))
    check(kernels, "MatMulInteger", [a, b, None, None], opset=10)
    check(kernels, "MatMulInteger", [a, b, zp(a_type), zp(b_type, 35)], opset=10)


@pytest.mark.parametrize("a_type, b_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_qlinear_matmul(kernels, a_type, b_type):
    for sa, sb in GEMM_SHAPES[:3]:
        a, b = qrand(a_type, sa), qrand(b_type, sb)
        n = sb[-1]
        per_column = (RNG.uniform(0.01, 0.03, (1, n)).astype(np.float32), zp(b_type, (1, n)))
        for b_scale, b_zp in ((np.float32(0.02), zp(b_type)),) + ((per_column,) if len(sb) == 2 else ()):
            inputs = [a, np.float32(0.05), zp(a_type), b, b_scale, b_zp, np.float32(2.5), zp(a_type)]
            check(kernels, "QLinearMatMul", inputs, opset=10)
            check(kernels, "QLinearMatMul", inputs, opset=21)


def test_the_oracle_is_exact_where_onnxruntime_is_not():
    """Full-range uint8 x int8 products (what overflows onnxruntime's 16-bit lanes on CPUs
    without VNNI): the oracle's MatMulInteger is exact, its QLinearMatMul rounds the exact sums."""
    a, b = qrand(np.uint8, (9, 64)), qrand(np.int8, (64, 35))
    za, zb, zy = np.array(3, np.uint8), np.array(-2, np.int8), np.array(1, np.uint8)
    exact = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    assert np.array_equal(onnxruntime_outputs("MatMulInteger", [a, b, za, zb], opset=10)[0], exact)
    sa, sb, sy = (np.array(v, np.float32) for v in (0.05, 0.02, 2.5))
    requantized = np.clip(np.rint(exact.astype(np.float32) * np.float32(sa * sb / sy)) + zy, 0, 255)
    got = onnxruntime_outputs("QLinearMatMul", [a, sa, za, b, sb, zb, sy, zy], opset=10)[0]
    assert np.array_equal(got, requantized.astype(np.uint8))


def test_matmul_integer_to_float_and_dynamic_quantize_matmul(kernels):
    a, b = qrand(np.uint8, (2, 5, 40)), qrand(np.int8, (40, 24))
    bias = RNG.standard_normal(24).astype(np.float32)
    b_scale = RNG.uniform(0.01, 0.02, 24).astype(np.float32)
    check(kernels, "MatMulIntegerToFloat", [a, b, np.float32(0.03), b_scale, np.uint8(120), None, bias], domain=MS,
          rtol=1e-5, atol=1e-5)
    check(kernels, "MatMulIntegerToFloat", [a, b, np.float32(0.03), np.float32(0.01)], domain=MS, rtol=1e-5, atol=1e-5)
    x = RNG.standard_normal((3, 7, 40)).astype(np.float32)
    check(kernels, "DynamicQuantizeMatMul", [x, b, b_scale, None, bias], domain=MS, rtol=1e-5, atol=1e-5)
    ub = qrand(np.uint8, (40, 24))
    check(kernels, "DynamicQuantizeMatMul", [x, ub, np.float32(0.01), np.uint8(128)], domain=MS, rtol=1e-5, atol=1e-5)


def test_matmul_integer_errors(kernels):
    mm = kernels.op("MatMulInteger", version=10)
    with pytest.raises(Exception, match="inner dimensions differ"):
        mm(np.zeros((2, 3), np.uint8), np.zeros((4, 2), np.uint8))
    with pytest.raises(Exception, match="b_zero_point"):
        mm(np.zeros((2, 3), np.uint8), np.zeros((3, 5), np.uint8), None, np.zeros(4, np.uint8))


# -- integer convolutions ------------------------------------------------------------------------

CONV_CASES = [((1, 3, 9, 11), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
              ((2, 4, 10, 10), (6, 2, 3, 3), {"strides": [2, 2], "group": 2, "dilations": [2, 1]}),
              ((1, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 0, 1, 2]}),
              ((1, 16, 5, 5), (40, 16, 1, 1), {}),
              ((2, 3, 20), (5, 3, 4), {"auto_pad": "SAME_UPPER"}),
              # stride 1 over several 32-column panels: im2col as shifted rows of the padded plane
              ((1, 5, 13, 17), (7, 5, 3, 5), {"pads": [1, 2, 0, 1]}),
              ((1, 3, 12, 40), (4, 3, 3, 3), {}),
              # stride 2 into rows of 41: im2col's 8-bit stride-2 gather, a block of 32 and a tail
              ((1, 3, 9, 81), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]})]


@pytest.mark.parametrize("x_type, w_type", [(np.uint8, np.uint8), (np.uint8, np.int8)])
def test_conv_integer(kernels, x_type, w_type):
    for xs, ws, attrs in CONV_CASES:
        x, w = qrand(x_type, xs), qrand(w_type, ws)
        check(kernels, "ConvInteger", [x, w, zp(x_type), zp(w_type)], attrs, opset=10)
    x, w = qrand(x_type, (1, 2, 6, 6)), qrand(w_type, (3, 2, 2, 2))
    check(kernels, "ConvInteger", [x, w], {}, opset=10)


@pytest.mark.parametrize("x_type, w_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_qlinear_conv(kernels, x_type, w_type):
    with paths_taken() as taken:
        qlinear_conv_cases(kernels, x_type, w_type)
    assert_path(taken, "qgemm.tiles", ("avx512", "avx2"))


def qlinear_conv_cases(kernels, x_type, w_type):
    for xs, ws, attrs in CONV_CASES:
        x, w = qrand(x_type, xs), qrand(w_type, ws)
        m = ws[0]
        w_scale = RNG.uniform(0.001, 0.004, m).astype(np.float32)
        w_zp = np.zeros(m, w_type) if w_type == np.int8 else np.full(m, zp(w_type), w_type)
        bias = RNG.integers(-5000, 5000, m).astype(np.int32)
        y_zp = zp(x_type)
        inputs = [x, np.float32(0.05), zp(x_type), w, w_scale, w_zp, np.float32(0.3), y_zp, bias]
        check(kernels, "QLinearConv", inputs, attrs, opset=10)
        check(kernels, "QLinearConv", inputs[:4] + [np.float32(0.002), w_zp[:1].reshape(()), np.float32(0.3), y_zp],
              attrs, opset=10)


def test_qlinear_conv_errors(kernels):
    conv = kernels.op("QLinearConv", version=10)
    x, w = np.zeros((1, 4, 5, 5), np.uint8), np.zeros((6, 4, 3, 3), np.uint8)
    s, z = np.float32(1), np.uint8(0)
    with pytest.raises(Exception, match="w_scale"):
        conv(x, s, z, w, np.ones(5, np.float32), z, s, z)
    with pytest.raises(Exception, match="divisible by group"):
        conv(x, s, z, w, s, z, s, z, group=3)


# -- com.microsoft's quantized elementwise ops ---------------------------------------------------

@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(kernels, op, dtype):
    for sa, sb in (((4, 37), (4, 37)), ((2, 3, 17), (17,)), ((5, 1), (1, 6)), ((3, 8), ())):
        a, b = qrand(dtype, sa), qrand(dtype, sb)
        for c_scale in (0.07, 0.5):
            check(kernels, op, [a, np.float32(0.05), zp(dtype), b, np.float32(0.09), zp(dtype), np.float32(c_scale),
                                zp(dtype)], domain=MS)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_sigmoid_leaky_relu_and_average_pool(kernels, dtype):
    x = qrand(dtype, (2, 5, 7, 3))
    check(kernels, "QLinearSigmoid", [x, np.float32(0.05), zp(dtype), np.float32(1 / 256), zp(dtype)], domain=MS)
    check(kernels, "QLinearLeakyRelu", [x, np.float32(0.05), zp(dtype), np.float32(0.04), zp(dtype)], {"alpha": 0.1},
          domain=MS)
    for last in (0, 1):
        check(kernels, "QLinearGlobalAveragePool", [x, np.float32(0.05), zp(dtype), np.float32(0.03), zp(dtype)],
              {"channels_last": last}, domain=MS)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_softmax(kernels, dtype):
    x = qrand(dtype, (3, 6, 10))
    y_zp = np.uint8(0) if dtype == np.uint8 else np.int8(-128)
    for attrs in ({"opset": 13}, {"opset": 13, "axis": 1}, {"opset": 12, "axis": 1}):
        check(kernels, "QLinearSoftmax", [x, np.float32(0.08), zp(dtype), np.float32(1 / 256), y_zp], attrs,
              domain=MS)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat(kernels, dtype):
    a, b, c = qrand(dtype, (2, 3, 4)), qrand(dtype, (2, 5, 4)), qrand(dtype, (2, 1, 4))
    y_scale, y_zp = np.float32(0.1), zp(dtype)
    inputs = [y_scale, y_zp, a, y_scale, y_zp, b, np.float32(0.07), zp(dtype), c, np.float32(0.3), zp(dtype)]
    check(kernels, "QLinearConcat", inputs, {"axis": 1}, domain=MS)
    check(kernels, "QLinearConcat", [y_scale, y_zp, a, np.float32(0.2), zp(dtype), a, y_scale, y_zp], {"axis": -1},
          domain=MS)
    # Runs of 300 and 100 values: the table lookup's 64-byte blocks and their tail.
    a, b = qrand(dtype, (2, 3, 10, 10)), qrand(dtype, (2, 1, 10, 10))
    inputs = [y_scale, y_zp, a, np.float32(0.07), zp(dtype), b, np.float32(0.3), zp(dtype)]
    check(kernels, "QLinearConcat", inputs, {"axis": 1}, domain=MS)
