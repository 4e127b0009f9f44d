"""Gemm, MatMul, Conv, ConvTranspose and pooling kernels checked against onnxruntime and the ONNX
backend node test cases."""
import importlib

import numpy as np
import pytest

import opforge
from tests.support.kernel_check import check, run_onnxruntime
from tests.support.kernel_variants import assert_path, build_isa, paths_taken
from tests.support.numeric import assert_close, assert_would_catch
from opforge import _core
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

RNG = np.random.default_rng(0)
F32 = dict(rtol=1e-4, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -4
        return RNG.integers(lo, 5, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def tol(dtype):
    return F64 if dtype == np.float64 else F32


def check_reference(kernels, op_type, inputs, attrs=None, opset=18, **tolerance):
    """Like check(), against onnx.reference, for dtypes onnxruntime's CPU kernels lack."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["out0"], **(attrs or {}))
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_empty_tensor_value_info("out0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    want, = ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if x is not None})
    got = kernels.op(op_type, domain="", version=opset)(*inputs, **(attrs or {}))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **tolerance)


# ---- Gemm ----

GEMM_BIAS = [None, (), (1,), (7,), (1, 7), (5, 1), (5, 7)]


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_transposes_and_bias(kernels, trans, dtype):
    ta, tb = trans
    a = rand(*((6, 5) if ta else (5, 6)), dtype=dtype)
    b = rand(*((7, 6) if tb else (6, 7)), dtype=dtype)
    for c in GEMM_BIAS:
        bias = None if c is None else rand(*c, dtype=dtype)
        check(kernels, "Gemm", [a, b, bias], dict(transA=ta, transB=tb, alpha=0.5, beta=2.0), opset=13, **tol(dtype))


@pytest.mark.parametrize("m, n, k", [(1, 1000, 2048), (300, 1, 64), (1, 1, 9), (0, 4, 3), (4, 0, 3)])
def test_gemm_vector_and_empty_shapes(kernels, m, n, k):
    for ta, tb in [(0, 0), (1, 1)]:
        a = rand(*((k, m) if ta else (m, k)))
        b = rand(*((n, k) if tb else (k, n)))
        check(kernels, "Gemm", [a, b, rand(n)], dict(transA=ta, transB=tb, beta=0.5), opset=13, scale_atol=True, **F32)
        check(kernels, "Gemm", [a, b, None], dict(transA=ta, transB=tb), opset=13, scale_atol=True, **F32)


@pytest.mark.parametrize("k", [1, 7, 64, 129, 130])
def test_one_row_products(kernels, k):
    """float32 one-row and one-column products (gemv_f32.h): every count of vectors in a block
    (1 to 16 of 16 floats on AVX-512; on AVX2 1 to 8 of 8, and from 64 columns rows of B taken
    4, 3, 2 or 1 at a time) with and without a partial last one, more than one block of
    columns, rows of B^T not a multiple of 8, B transposed or not, alpha and beta with C; and
    that they ran on gemv_f32.h's loops."""
    widths = [1, 3, 16, 17, 40, 100, 128, 130, 255, 256, 300, 600]
    widths += [w for v in range(1, 13) for w in (8 * v - 3, 8 * v)]
    with paths_taken() as taken:
        for n in sorted(set(widths)):
            check(kernels, "MatMul", [rand(1, k), rand(k, n)], opset=13, scale_atol=True, **F32)
            check(kernels, "MatMul", [rand(n, k), rand(k, 1)], opset=13, scale_atol=True, **F32)
            for tb in (0, 1):
                b = rand(*((n, k) if tb else (k, n)))
                check(kernels, "Gemm", [rand(1, k), b, rand(n)], dict(transB=tb, alpha=0.5, beta=2.0), opset=13,
                      scale_atol=True, **F32)
                check(kernels, "Gemm", [rand(n, k), rand(*((1, k) if tb else (k, 1))), rand(1)],
                      dict(transB=tb, alpha=1.5, beta=0.5), opset=13, scale_atol=True, **F32)
    assert_path(taken, "gemv.f32", ("avx512", "avx2"))


# one-row (and one-column) products large enough that a session of 2 threads splits them:
# (op, A, B, attributes); the matrix from 256K floats, 32 columns or rows a block at least
SPLIT_PRODUCTS = {
    "gemm_head": ("Gemm", (1, 576), (1024, 576), dict(transB=1)),   # a classifier head's first layer
    "matmul_row": ("MatMul", (1, 700), (700, 500), {}),
    "matmul_column": ("MatMul", (600, 512), (512, 1), {}),
}


@pytest.mark.parametrize("case", list(SPLIT_PRODUCTS))
def test_one_row_products_split_between_threads(case):
    """A product streaming a large matrix once is bound by memory: on 2 threads each takes a
    block of its columns (rows, for one column), and the call says it split; the result is the
    float64 product's, and the same bits on every run (the plan's runs alone split it alike)."""
    op, a_shape, b_shape, attrs = SPLIT_PRODUCTS[case]
    a, b = rand(*a_shape), rand(*b_shape)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape)) for n, x in (("a", a), ("b", b))]
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"], **attrs)], "g", inputs,
                              [helper.make_empty_tensor_value_info("y")])
    options = opforge.SessionOptions()
    options.intra_op_num_threads = 2
    sess = opforge.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                                    .SerializeToString(), options)
    want = (a.astype(np.float64) @ (b.T if attrs.get("transB") else b).astype(np.float64)).astype(np.float32)
    with paths_taken() as taken:
        first = sess.run(None, {"a": a, "b": b})[0]
    assert_path(taken, "gemv.split", ("avx512", "avx2"))
    assert_close(first, want, 1e-5, 1e-5 * np.abs(want).max(), case)
    assert_would_catch(first, want, 1e-5, 1e-5 * np.abs(want).max(), case)
    for _ in range(12):
        assert np.array_equal(sess.run(None, {"a": a, "b": b})[0], first)


def test_gemm_empty_inner_dim(kernels):
    # onnxruntime returns C unscaled here; ONNX (and its reference) give beta * C.
    got = kernels.op("Gemm", version=13)(rand(3, 0), rand(0, 4), np.ones(4, np.float32), beta=0.5)
    np.testing.assert_array_equal(got, np.full((3, 4), 0.5, np.float32))
    got = kernels.op("Gemm", version=13)(rand(0, 3), rand(0, 4), None, transA=1)
    np.testing.assert_array_equal(got, np.zeros((3, 4), np.float32))


def test_gemm_beta_zero_ignores_c(kernels):
    a, b = rand(3, 4), rand(4, 5)
    got = kernels.op("Gemm", version=13)(a, b, np.full((5,), np.nan, np.float32), beta=0.0)
    np.testing.assert_allclose(got, a @ b, **F32)


def test_gemm_errors(kernels):
    gemm = kernels.op("Gemm", version=13)
    with pytest.raises(opforge.OpError, match="inner dimensions"):
        gemm(rand(3, 4), rand(5, 6), None)
    with pytest.raises(opforge.OpError, match="do not broadcast"):
        gemm(rand(3, 4), rand(4, 6), rand(4))
    with pytest.raises(opforge.OpError, match="must be 2-D"):
        gemm(rand(3, 4, 1), rand(4, 6), None)


# ---- MatMul ----

MATMUL_SHAPES = [((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                 ((2, 1, 3, 4), (5, 4, 6)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((1, 64), (64, 300)),
                 ((8, 1, 64), (8, 64, 1)), ((6, 33, 17), (6, 17, 29)), ((0, 3, 4), (4, 5)), ((3, 0), (0, 5)),
                 ((2, 3, 0), (2, 0, 4)), ((3, 4), (4, 0))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_matmul_shapes(kernels, dtype):
    for sa, sb in MATMUL_SHAPES:
        check(kernels, "MatMul", [rand(*sa, dtype=dtype), rand(*sb, dtype=dtype)], opset=13, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_matmul_unsigned(kernels, dtype):
    # onnxruntime 1.31's unsigned MatMul fails with a type mismatch: numpy is the oracle.
    for sa, sb in MATMUL_SHAPES:
        a, b = rand(*sa, dtype=dtype), rand(*sb, dtype=dtype)
        got = kernels.op("MatMul", version=13)(a, b)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, np.matmul(a, b))


def test_matmul_large_batched(kernels):
    check(kernels, "MatMul", [rand(12, 64, 32), rand(12, 32, 64)], opset=13, **F32)
    check(kernels, "MatMul", [rand(3, 200, 150), rand(3, 150, 120)], opset=13, **F32)
    check(kernels, "MatMul", [rand(2, 1, 100, 70), rand(1, 3, 70, 90)], opset=13, **F32)


def test_matmul_errors(kernels):
    matmul = kernels.op("MatMul", version=13)
    with pytest.raises(opforge.OpError, match="inner dimensions"):
        matmul(rand(3, 4), rand(5, 6))
    with pytest.raises(opforge.OpError, match="do not broadcast"):
        matmul(rand(2, 3, 4), rand(3, 4, 5))
    with pytest.raises(opforge.OpError, match="rank >= 1"):
        matmul(np.float32(1), rand(3))


# ---- Conv ----

# (X shape, W shape, attributes): 1-D/2-D/3-D, pads (asymmetric), strides, dilations, groups,
# depthwise with a channel multiplier, 1x1 (direct GEMM), auto_pad, and sizes that split into
# several im2col tiles.
CONV_CASES = [
    ((1, 3, 8, 8), (4, 3, 3, 3), {}),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 1])),
    ((2, 3, 9, 8), (4, 3, 3, 2), dict(dilations=[2, 1], strides=[1, 2])),
    ((2, 4, 9, 8), (6, 2, 3, 3), dict(group=2, auto_pad="SAME_UPPER", strides=[2, 2])),
    ((2, 4, 9, 8), (6, 2, 3, 3), dict(group=2, auto_pad="SAME_LOWER", strides=[2, 2])),
    ((2, 4, 9, 8), (6, 4, 2, 3), dict(auto_pad="SAME_LOWER", kernel_shape=[2, 3])),
    ((2, 4, 9, 8), (8, 4, 3, 3), dict(auto_pad="VALID", strides=[3, 2])),
    ((2, 4, 9, 8), (8, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    ((2, 4, 9, 8), (4, 1, 3, 3), dict(group=4, pads=[0, 2, 1, 0], strides=[2, 3], dilations=[2, 1])),
    ((1, 1, 7, 7), (5, 1, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 1, 512), (128, 1, 64), dict(strides=[32])),      # an audio front end: one channel, long taps
    ((2, 1, 33, 30), (16, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 4, 9, 8), (8, 4, 1, 1), {}),
    ((2, 6, 9, 8), (9, 2, 1, 1), dict(group=3)),
    ((2, 4, 9, 8), (8, 4, 1, 1), dict(strides=[2, 2])),
    ((2, 4, 9), (8, 4, 3), dict(pads=[1, 1])),
    ((2, 4, 20), (6, 2, 5), dict(group=2, strides=[3], dilations=[2], pads=[2, 0])),
    ((2, 4, 5, 6, 7), (3, 4, 3, 2, 3), dict(pads=[1, 0, 1, 1, 0, 1], strides=[1, 2, 1])),
    ((1, 4, 5, 6, 7), (4, 1, 3, 3, 3), dict(group=4, pads=[1, 1, 1, 1, 1, 1])),
    ((1, 16, 40, 40), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 32, 30, 30), (16, 32, 1, 1), {}),
    ((0, 3, 8, 8), (4, 3, 3, 3), {}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
def test_conv(kernels, xs, ws, attrs):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    check(kernels, "Conv", [x, w, b], attrs, opset=11, **F32)
    check(kernels, "Conv", [x, w, None], attrs, opset=11, **F32)


# Strided convs on the input's phase planes (conv_source.h), over several tiles, row blocks
# and K blocks: a 7x7 stem, K = 576 in two blocks, dilation with stride, 3-D, and a stride
# above the kernel (phases 0 and 1 of 3); a strided 1x1 over output tiles. Weights are scaled
# by fan-in, so that the sums stay near 1 and the absolute tolerance keeps its meaning.
STRIDED_CONV_CASES = [
    ((1, 3, 45, 47), (20, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ((1, 64, 29, 31), (26, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 70, 15, 14), (13, 70, 1, 1), dict(strides=[2, 2])),
    ((1, 8, 23, 25), (12, 8, 3, 3), dict(strides=[3, 2], pads=[2, 0, 1, 1], dilations=[2, 1])),
    ((1, 5, 9, 20, 21), (7, 5, 3, 3, 3), dict(strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1])),
    ((1, 6, 33, 34), (10, 6, 2, 2), dict(strides=[3, 3])),
    # a stem's few channels, each copied in several pieces of rows (conv_source.h's copy_source)
    ((1, 3, 120, 122), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1])),
]


@pytest.mark.parametrize("xs, ws, attrs", STRIDED_CONV_CASES)
def test_conv_strided_phases(kernels, xs, ws, attrs):
    x, w, b = rand(*xs), (rand(*ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32), rand(ws[0])
    check(kernels, "Conv", [x, w, b], attrs, opset=11, **F32)


def test_conv_float64(kernels):
    # onnxruntime has no float64 Conv on the CPU: onnx.reference is the oracle.
    x, w, b = rand(2, 3, 7, 6, dtype=np.float64), rand(4, 3, 3, 3, dtype=np.float64), rand(4, dtype=np.float64)
    check_reference(kernels, "Conv", [x, w, b], dict(pads=[1, 1, 0, 0], strides=[2, 1]), opset=11, **F64)
    check_reference(kernels, "Conv", [x, rand(6, 1, 3, 3, dtype=np.float64)], dict(group=3), opset=11, **F64)
    check_reference(kernels, "Conv", [x, rand(4, 3, 1, 1, dtype=np.float64)], {}, opset=11, **F64)
    one_channel = rand(2, 1, 9, 8, dtype=np.float64)   # im2col over the OpenBLAS path, not a depthwise loop
    check_reference(kernels, "Conv", [one_channel, rand(5, 1, 3, 3, dtype=np.float64)], dict(pads=[1, 1, 1, 1]),
                    opset=11, **F64)


def test_conv_errors(kernels):
    conv = kernels.op("Conv", version=11)
    with pytest.raises(opforge.OpError, match="not divisible by group"):
        conv(rand(1, 3, 5, 5), rand(4, 1, 3, 3), None, group=2)
    with pytest.raises(opforge.OpError, match="kernel_shape"):
        conv(rand(1, 3, 5, 5), rand(4, 3, 3, 3), None, kernel_shape=[2, 2])
    with pytest.raises(opforge.OpError, match="auto_pad"):
        conv(rand(1, 3, 5, 5), rand(4, 3, 3, 3), None, auto_pad="SAME")
    with pytest.raises(opforge.OpError, match="larger than the padded input"):
        conv(rand(1, 3, 2, 2), rand(4, 3, 3, 3), None)
    with pytest.raises(opforge.OpError, match="'pads' has 2 values"):
        conv(rand(1, 3, 5, 5), rand(4, 3, 3, 3), None, pads=[1, 1])


# ---- ConvTranspose ----

CONV_TRANSPOSE_CASES = [
    ((1, 3, 4, 4), (3, 2, 3, 3), {}),
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 3], pads=[1, 0, 0, 2])),
    ((2, 4, 4, 5), (4, 3, 3, 2), dict(strides=[2, 2], group=2, output_padding=[1, 0], dilations=[1, 2])),
    ((2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="VALID")),
    ((2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], output_shape=[9, 10])),
    ((2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], output_shape=[8, 10], auto_pad="SAME_UPPER")),
    ((2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2], kernel_shape=[3, 3], output_padding=[1, 1])),
    ((2, 4, 5), (4, 3, 3), dict(strides=[2], pads=[1, 1])),
    ((1, 4, 7), (4, 1, 4), dict(strides=[3], group=4, output_padding=[2])),
    ((2, 4, 5, 3, 4), (4, 3, 3, 2, 3), dict(strides=[2, 1, 2], pads=[1, 0, 1, 1, 0, 0])),
    ((2, 4, 5, 6), (4, 3, 1, 1), {}),
    ((2, 4, 5, 6), (4, 3, 1, 1), dict(group=2)),
    ((0, 3, 4, 4), (3, 2, 3, 3), {}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_TRANSPOSE_CASES)
def test_conv_transpose(kernels, xs, ws, attrs):
    x, w = rand(*xs), rand(*ws)
    b = rand(ws[1] * attrs.get("group", 1))
    check(kernels, "ConvTranspose", [x, w, b], attrs, opset=11, **F32)
    check(kernels, "ConvTranspose", [x, w, None], attrs, opset=11, **F32)


def test_conv_transpose_float64(kernels):
    x, w = rand(2, 3, 4, 4, dtype=np.float64), rand(3, 2, 3, 3, dtype=np.float64)
    check_reference(kernels, "ConvTranspose", [x, w, rand(2, dtype=np.float64)], dict(strides=[2, 2]), opset=11,
                    **F64)


def test_conv_transpose_errors(kernels):
    convt = kernels.op("ConvTranspose", version=11)
    with pytest.raises(opforge.OpError, match="input channels"):
        convt(rand(1, 3, 4, 4), rand(4, 2, 3, 3), None)
    with pytest.raises(opforge.OpError, match="not positive"):
        convt(rand(1, 3, 2, 2), rand(3, 2, 3, 3), None, pads=[3, 3, 3, 3])
    with pytest.raises(opforge.OpError, match="'output_shape' has 3 values"):
        convt(rand(1, 3, 4, 4), rand(3, 2, 3, 3), None, output_shape=[1, 2, 3])
    with pytest.raises(opforge.OpError, match="differs from W's spatial dim"):
        convt(rand(1, 3, 4, 4), rand(3, 2, 3, 3), None, kernel_shape=[2, 3])


# Every since-version registered, and the opsets between them, as models stamp them.
VERSION_CASES = [("Gemm", o, [rand(4, 3), rand(3, 8), rand(8)], dict(alpha=1.5)) for o in (7, 9, 11, 13)] + [
    ("MatMul", o, [rand(2, 3, 4), rand(4, 5)], {}) for o in (1, 9, 13)] + [
    ("Conv", o, [rand(2, 3, 7, 6), rand(4, 3, 3, 3), rand(4)], dict(pads=[1, 1, 0, 0])) for o in (1, 11, 22)] + [
    ("ConvTranspose", o, [rand(2, 3, 4, 4), rand(3, 2, 3, 3)], dict(strides=[2, 2])) for o in (1, 11, 22)]


@pytest.mark.parametrize("op_type, opset, inputs, attrs", VERSION_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in VERSION_CASES])
def test_versions(kernels, op_type, opset, inputs, attrs):
    check(kernels, op_type, inputs, attrs, opset=opset, **F32)


# ---- pooling ----

# (X shape, attributes) shared by MaxPool, AveragePool and LpPool: pads (asymmetric), strides,
# ceil_mode (including a last window that would start in the padding), dilations, auto_pad, 1-D
# and 3-D.
POOL_CASES = [
    ((2, 3, 8, 8), dict(kernel_shape=[3, 3])),
    ((2, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 0, 1])),
    ((2, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 4, 4), dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((2, 3, 10, 9), dict(kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 1], pads=[1, 1, 0, 0])),
    ((2, 3, 10, 9), dict(kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 1], ceil_mode=1, pads=[1, 1, 0, 0])),
    ((2, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((2, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
    ((2, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID")),
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((2, 3, 5, 6, 7), dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 1, 0, 1])),
    ((1, 4, 56, 56), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((0, 3, 8, 8), dict(kernel_shape=[3, 3])),
    # stride 1 into the input's own size on small planes: each plane runs as one run of floats
    ((2, 3, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((1, 4, 9, 10), dict(kernel_shape=[2, 3], pads=[0, 1, 1, 1])),
    ((1, 3, 13, 12), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((2, 3, 20), dict(kernel_shape=[5], pads=[2, 2])),
    ((1, 2, 32, 32), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER")),
]


def run_handle(op, inputs, like, attrs, threads=1):
    """Runs `op` the way the runtime does: into preallocated outputs shaped like `like` (fewer
    outputs than the op has leave the rest unrequested), on a pool of `threads` threads."""
    outputs = [np.empty_like(w) for w in like]
    op.handle.run(list(inputs), outputs, op.handle.attrs(attrs), _core.ThreadPool(threads))
    return outputs


@pytest.mark.parametrize("xs, attrs", POOL_CASES)
def test_maxpool(kernels, xs, attrs):
    x = rand(*xs)
    y, _ = check(kernels, "MaxPool", [x], attrs, opset=12, num_outputs=2)
    check(kernels, "MaxPool", [x], dict(attrs, storage_order=1), opset=12, num_outputs=2)
    # Without Indices requested MaxPool takes its SIMD path.
    values, = run_handle(kernels.op("MaxPool", version=12), [x], [y], attrs)
    np.testing.assert_array_equal(values, y)


# int8 and uint8 MaxPool exist from opset 12 on.
MAXPOOL_VERSIONS = [(opset, dtype) for opset in (1, 8, 10, 11, 12, 22)
                    for dtype in (np.float32, np.float64, np.int8, np.uint8)
                    if opset >= 12 or dtype not in (np.int8, np.uint8)]


@pytest.mark.parametrize("opset, dtype", MAXPOOL_VERSIONS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_maxpool_versions_and_dtypes(kernels, opset, dtype):
    x = (rand(2, 3, 9, 8) * 20).astype(dtype)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 1], pads=[0, 1, 1, 0])
    if opset == 1:  # onnxruntime has no MaxPool-1
        check_reference(kernels, "MaxPool", [x], attrs, opset=opset, **tol(dtype))
    else:
        check(kernels, "MaxPool", [x], attrs, opset=opset, num_outputs=2)


# Rows too short for a 32-byte vector of 8-bit values take 16- or 8-byte vectors (squeezenet's
# quantized pools: rows of 27 and 13 outputs) with AVX-512, a plain loop with AVX2 (which takes 32
# outputs a vector at stride 1 and 16 at stride 2, the last one shifted back); widths around each
# vector's lane count and over several vectors.
@pytest.mark.parametrize("width", [9, 12, 15, 16, 17, 20, 27, 31, 32, 33, 40, 55, 70])
@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float64])
def test_maxpool_short_rows_take_narrow_vectors(kernels, width, stride, dtype):
    attrs = dict(kernel_shape=[3, 3], strides=[stride, stride], pads=[0, 0, 0, 1])
    x = (rand(1, 3, 7, (width - 1) * stride + 2) * 60).astype(dtype)
    y, _ = check(kernels, "MaxPool", [x], attrs, opset=12, num_outputs=2)   # against onnxruntime
    assert y.shape[-1] == width
    with paths_taken() as taken:
        values, = run_handle(kernels.op("MaxPool", version=12), [x], [y], attrs)   # the SIMD path
    np.testing.assert_array_equal(values, y)
    if dtype != np.float64:
        assert_path(taken, "pool.max8.separable", ("avx512", "avx2"))


# 2-D 8-bit MaxPool without Indices pools each window's rows, then along the row
# (pool_separable.h): every 2-D case's pads, ceil_mode, auto_pad and dilations, against
# onnxruntime (with Indices, which take the tap-by-tap path) and then without Indices.
@pytest.mark.parametrize("xs, attrs", [c for c in POOL_CASES if len(c[0]) == 4])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_maxpool_8bit_separable(kernels, xs, attrs, dtype):
    x = (rand(*xs) * 60).astype(dtype)
    y, _ = check(kernels, "MaxPool", [x], attrs, opset=12, num_outputs=2)
    values, = run_handle(kernels.op("MaxPool", version=12), [x], [y], attrs)
    np.testing.assert_array_equal(values, y)


# float32 square windows on rows wide enough that the vectors between the edges read every tap
# unmasked (pool_f32.cpp's reduce_inner; 3x3 at stride 2 is its own case): the shapes of
# squeezenet's, resnet's and inception's pools, 2x2 and 5x5, ceil_mode and pads on either edge.
INNER_POOL_CASES = [
    ((1, 3, 111, 111), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 3, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 75, 77), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 0, 1])),
    ((1, 3, 70, 70), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((1, 3, 70, 70), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 3, 90, 93), dict(kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 3, 40, 90), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
    # rows shorter than a vector's reads: inner while the reads past a row's end feed no output
    # (and stay inside the plane), masked where the last window reaches past the row (ceil_mode)
    ((1, 4, 27, 27), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ((1, 4, 55, 55), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ((1, 4, 28, 28), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 4, 14, 14), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 4, 13, 9), dict(kernel_shape=[3, 3], pads=[0, 0, 1, 0])),
]


@pytest.mark.parametrize("xs, attrs", INNER_POOL_CASES)
def test_float_pools_read_inner_vectors_unmasked(kernels, xs, attrs):
    x = rand(*xs)
    y, _ = check(kernels, "MaxPool", [x], attrs, opset=12, num_outputs=2)
    values, = run_handle(kernels.op("MaxPool", version=12), [x], [y], attrs)
    np.testing.assert_array_equal(values, y)
    check(kernels, "AveragePool", [x], dict(attrs, count_include_pad=0), opset=19, **F32)


# 3x3 windows of stride 1 and padding 1 keeping the map's size, taken row by row down first
# (pool_f32.cpp's run_rows3x3): rows of one vector (12, 16), of a vector and a lane (17), of
# three vectors (40); a single row (no row above or below).
@pytest.mark.parametrize("xs", [(1, 3, 12, 12), (2, 2, 9, 16), (1, 2, 17, 17), (1, 2, 5, 40), (1, 3, 1, 20)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pools_3x3_same_rows(kernels, xs, threads):
    x = rand(*xs)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    for op_type, extra, opset in [("MaxPool", {}, 12), ("AveragePool", dict(count_include_pad=0), 19),
                                  ("AveragePool", dict(count_include_pad=1), 19)]:
        a = dict(attrs, **extra)
        want, = run_onnxruntime(op_type, [x], a, opset)
        got, = run_handle(kernels.op(op_type, version=opset), [x], [want], a, threads=threads)
        assert_close(got, want, F32["rtol"], F32["atol"], op_type)
        assert_would_catch(got, want, F32["rtol"], F32["atol"], op_type)


# Rows wide enough for the SIMD loop, at strides 1, 2 (shuffled loads) and 3, for every dtype.
WIDE_POOL_CASES = [dict(kernel_shape=[2, 3], strides=[1, s], pads=[0, 1, 1, 0]) for s in (1, 2, 3)]


@pytest.mark.parametrize("attrs", WIDE_POOL_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8])
def test_pools_wide_rows(kernels, attrs, dtype):
    x = (rand(1, 2, 4, 301) * 30).astype(dtype)
    y, _ = check(kernels, "MaxPool", [x], attrs, opset=12, num_outputs=2)
    values, = run_handle(kernels.op("MaxPool", version=12), [x], [y], attrs)
    np.testing.assert_array_equal(values, y)
    if dtype == np.float32:
        check(kernels, "AveragePool", [x], attrs, opset=19, **F32)
        check(kernels, "LpPool", [x], attrs, opset=18, **F32)
    elif dtype == np.float64:  # onnxruntime has no float64 AveragePool or LpPool
        check_reference(kernels, "AveragePool", [x], attrs, opset=19, **F64)
        check_reference(kernels, "LpPool", [x], attrs, opset=18, **F64)


# The model zoo's pools (resnet50, shufflenet, squeezenet, inception_v2, densenet121, vgg19),
# on two threads: planes split between them, rows longer than one vector, both stride-2 tap pairs,
# and 3x3 windows of stride 2 taken down the rows first where all three rows lie in the plane.
ZOO_POOL_CASES = [
    ("MaxPool", (1, 24, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 64, 111, 111), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ("MaxPool", (1, 32, 56, 56), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])),
    ("MaxPool", (1, 32, 27, 27), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 16, 224, 224), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("AveragePool", (1, 64, 56, 56), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("AveragePool", (1, 24, 56, 56), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 24, 56, 56), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                           count_include_pad=1)),
    ("AveragePool", (1, 32, 28, 28), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 48, 7, 7), dict(kernel_shape=[7, 7])),   # resnet50's last: the whole plane
    ("MaxPool", (1, 16, 13, 13), dict(kernel_shape=[13, 13])),
]
POOL_ISAS = ("avx512", "avx2")   # the instruction sets with float32 pool paths (pool_f32.cpp, pool_avx2.cpp)


@pytest.mark.parametrize("op_type, xs, attrs", ZOO_POOL_CASES)
def test_zoo_pools_on_two_threads(kernels, op_type, xs, attrs):
    x = rand(*xs)
    want, = run_onnxruntime(op_type, [x], attrs, 19 if op_type == "AveragePool" else 12)
    with paths_taken() as taken:
        got, = run_handle(kernels.op(op_type, version=19 if op_type == "AveragePool" else 12), [x], [want], attrs,
                          threads=2)
    assert_close(got, want, F32["rtol"], F32["atol"], op_type)
    assert_would_catch(got, want, F32["rtol"], F32["atol"], op_type)
    if build_isa() in POOL_ISAS:   # the SIMD path of this build ran, not the generic loop
        ran = sorted(p for p in taken if p.startswith("pool."))
        assert ran and all(p.endswith("." + build_isa()) and ".generic." not in p for p in ran), ran
    if xs[2:] == tuple(attrs["kernel_shape"]):
        assert_path(taken, "pool.global", POOL_ISAS)
    elif build_isa() == "avx2":
        assert_path(taken, "pool.padded", POOL_ISAS)   # padded windows, and the last planes of the others
        if not any(attrs.get("pads", [0])):
            assert_path(taken, "pool.in_place", POOL_ISAS)


# Windows inside the plane (AVX2): planes read where they lie, the last ones (whose final loads
# would run past the input) from a padded copy, and planes too small for that from copies only.
IN_PLACE_POOL_CASES = [
    ("MaxPool", (2, 5, 17, 23), dict(kernel_shape=[3, 3], strides=[2, 2]), True),
    ("AveragePool", (1, 7, 9, 40), dict(kernel_shape=[2, 3], strides=[1, 2]), True),
    ("MaxPool", (1, 9, 6, 5), dict(kernel_shape=[2, 2], strides=[1, 1]), True),
    ("MaxPool", (1, 3, 3, 3), dict(kernel_shape=[2, 2]), False),
    ("MaxPool", (1, 6, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), False),  # a window past the end
]


@pytest.mark.parametrize("op_type, xs, attrs, in_place", IN_PLACE_POOL_CASES)
def test_pools_read_planes_in_place(kernels, op_type, xs, attrs, in_place):
    opset = 19 if op_type == "AveragePool" else 12
    x = rand(*xs)
    want, = run_onnxruntime(op_type, [x], attrs, opset)
    with paths_taken() as taken:
        got, = run_handle(kernels.op(op_type, version=opset), [x], [want], attrs)
    assert_close(got, want, F32["rtol"], F32["atol"], op_type)
    assert_would_catch(got, want, F32["rtol"], F32["atol"], op_type)
    if build_isa() != "avx2":
        pytest.skip(f"planes are read in place by the AVX2 pools; this build is {build_isa()} (the numbers matched)")
    assert ("pool.in_place.avx2" in taken) == in_place, sorted(taken)
    assert "pool.padded.avx2" in taken, sorted(taken)


# MaxPool 3x3 at stride 2 on AVX2 (pool.max3x3_stride2): each output vector takes its window
# rows' three-wide maxima, the top row's kept from the output row above. Rows of 1 to 56
# outputs (narrower than a vector, whole vectors, a last vector shifted back), pads, ceil_mode,
# planes read in place and padded, squeezenet's and resnet50's shapes.
@pytest.mark.parametrize("xs, attrs", [
    ((1, 3, 7, 3), {}), ((2, 3, 9, 17), {}), ((1, 4, 11, 16), dict(pads=[1, 1, 1, 1])),
    ((1, 2, 13, 33), dict(ceil_mode=1)), ((1, 3, 8, 81), dict(pads=[0, 1, 1, 0])),
    ((1, 2, 111, 111), {}), ((1, 2, 112, 112), dict(pads=[1, 1, 1, 1])), ((1, 5, 55, 55), dict(ceil_mode=1)),
])
def test_maxpool_3x3_stride2(kernels, xs, attrs):
    attrs = dict(attrs, kernel_shape=[3, 3], strides=[2, 2])
    x = rand(*xs)
    want, = run_onnxruntime("MaxPool", [x], attrs, 12)
    with paths_taken() as taken:
        got, = run_handle(kernels.op("MaxPool", version=12), [x], [want], attrs)
    np.testing.assert_array_equal(got, want)
    assert_path(taken, "pool.max3x3_stride2", ("avx2",))


@pytest.mark.parametrize("xs, attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(kernels, xs, attrs, count_include_pad):
    check(kernels, "AveragePool", [rand(*xs)], dict(attrs, count_include_pad=count_include_pad), opset=19, **F32)


@pytest.mark.parametrize("opset", [7, 10, 11])
def test_average_pool_versions(kernels, opset):
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 0, 1], count_include_pad=1)
    if opset >= 10:
        attrs["ceil_mode"] = 1
    check(kernels, "AveragePool", [rand(2, 3, 9, 8)], attrs, opset=opset, **F32)


def test_average_pool_version_1(kernels):
    # onnxruntime has no AveragePool-1 and onnx.reference counts its pads; ONNX says pads are
    # excluded, which is onnxruntime's AveragePool-7 with count_include_pad=0.
    x, attrs = rand(2, 3, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 0, 1])
    want, = run_onnxruntime("AveragePool", [x], dict(attrs, count_include_pad=0), opset=7)
    got = kernels.op("AveragePool", version=1)(x, **attrs)
    assert_close(got, want, F32["rtol"], F32["atol"], "AveragePool-1")
    assert_would_catch(got, want, F32["rtol"], F32["atol"], "AveragePool-1")


@pytest.mark.parametrize("xs, attrs", POOL_CASES)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(kernels, xs, attrs, p):
    check(kernels, "LpPool", [rand(*xs)], dict(attrs, p=p), opset=18, **F32)


def test_lp_pool_version_2(kernels):
    check(kernels, "LpPool", [rand(2, 3, 9, 8)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0]),
          opset=11, **F32)


def test_pools_float64(kernels):
    x = rand(2, 3, 9, 8, dtype=np.float64)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    check(kernels, "MaxPool", [x], attrs, opset=12, num_outputs=2)
    check_reference(kernels, "AveragePool", [x], dict(attrs, count_include_pad=1), opset=19, **F64)
    check_reference(kernels, "LpPool", [x], attrs, opset=18, **F64)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("xs", [(2, 3, 9, 8), (2, 3, 100), (1, 2, 3, 4, 5), (2, 5, 1, 1), (0, 3, 4, 4)])
def test_global_pools(kernels, op, xs):
    check(kernels, op, [rand(*xs)], opset=2 if op == "GlobalLpPool" else 1, **F32)


def test_global_pools_float64_and_p(kernels):
    x = rand(2, 3, 9, 8, dtype=np.float64)
    check_reference(kernels, "GlobalAveragePool", [x], opset=22, **F64)
    check_reference(kernels, "GlobalMaxPool", [x], opset=22, **F64)
    for p in (1, 3):
        check(kernels, "GlobalLpPool", [rand(2, 3, 9, 8)], dict(p=p), opset=2, **F32)


def test_pool_errors(kernels):
    maxpool = kernels.op("MaxPool", version=12)
    with pytest.raises(opforge.OpError, match="'kernel_shape' has 1 values"):
        maxpool(rand(1, 3, 5, 5), kernel_shape=[3])
    with pytest.raises(opforge.OpError, match="storage_order"):
        maxpool(rand(1, 3, 5, 5), kernel_shape=[3, 3], storage_order=2)
    with pytest.raises(opforge.OpError, match="'strides' must be positive"):
        maxpool(rand(1, 3, 5, 5), kernel_shape=[3, 3], strides=[0, 1])
    with pytest.raises(opforge.OpError, match="rank >= 3"):
        kernels.op("AveragePool", version=19)(rand(3, 5), kernel_shape=[3])
    with pytest.raises(opforge.OpError, match="'p' must be >= 1"):
        kernels.op("LpPool", version=18)(rand(1, 3, 5, 5), kernel_shape=[3, 3], p=0)


# ---- several host threads ----

# Eager calls run on one thread; these run the same ops on pools of 2 and 3 threads, which takes
# the parallel paths: im2col tiles, GEMMs split by rows or columns, batches, planes.
THREADED_CASES = [
    ("Conv", [rand(1, 16, 40, 40), rand(24, 16, 3, 3), rand(24)], dict(pads=[1, 1, 1, 1]), 11),
    ("Conv", [rand(2, 64, 5, 5), rand(96, 64, 3, 3), rand(96)], dict(pads=[1, 1, 1, 1]), 11),
    ("Conv", [rand(1, 32, 30, 30), rand(16, 32, 1, 1), None], {}, 11),
    ("Conv", [rand(2, 8, 30, 30), rand(16, 1, 3, 3), rand(16)], dict(group=8, strides=[2, 2]), 11),
    ("ConvTranspose", [rand(1, 32, 10, 10), rand(32, 16, 3, 3), rand(16)], dict(strides=[2, 2]), 11),
    ("Gemm", [rand(300, 200), rand(200, 100), rand(100)], {}, 13),
    ("Gemm", [rand(200, 64), rand(300, 200), None], dict(transA=1, transB=1), 13),
    ("Gemm", [rand(1, 512), rand(700, 512), None], dict(transB=1), 13),
    ("MatMul", [rand(8, 64, 48), rand(8, 48, 32)], {}, 13),
    ("MatMul", [rand(3, 200, 150), rand(3, 150, 120)], {}, 13),
    ("MatMul", [rand(4, 100, 150), rand(150, 120)], {}, 13),
    ("MatMul", [rand(30, 40, dtype=np.int64), rand(40, 50, dtype=np.int64)], {}, 13),
    ("MaxPool", [rand(2, 8, 30, 30)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 12),
    ("MaxPool", [rand(2, 8, 30, 30)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 1),
    ("AveragePool", [rand(2, 8, 30, 30)], dict(kernel_shape=[3, 3], count_include_pad=1), 19),
    ("GlobalAveragePool", [rand(4, 16, 30, 30)], {}, 1),
    ("GlobalMaxPool", [rand(4, 16, 30, 30)], {}, 1),
]


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("case", THREADED_CASES, ids=lambda c: c[0])
def test_threaded_matches_eager(kernels, threads, case):
    op_type, inputs, attrs, opset = case
    op = kernels.op(op_type, domain="", version=opset)
    want = op(*inputs, **attrs)
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(run_handle(op, inputs, want, attrs, threads), want):
        np.testing.assert_allclose(g, w, **F32)


# ---- ONNX backend node test cases ----

# The pool modules compute their expected outputs in Python when imported (~12 s): marked slow.
NODE_CASE_MODULES = ["conv", "convtranspose", "gemm", "matmul", "globalaveragepool", "globalmaxpool",
                     pytest.param("maxpool", marks=pytest.mark.slow),
                     pytest.param("averagepool", marks=pytest.mark.slow),
                     pytest.param("lppool", marks=pytest.mark.slow)]


def node_cases(module):
    """The backend test cases one onnx.backend.test.case.node module defines (importing it runs them)."""
    import onnx.backend.test.case.node as node

    importlib.import_module(f"onnx.backend.test.case.node.{module}")
    prefix = f"test_{module}_"
    return [c for c in node._NodeTestCases if c.name.startswith(prefix) or c.name == f"test_{module}"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("module", NODE_CASE_MODULES)
def test_onnx_node_cases(kernels, module):
    cases = node_cases(module)
    assert cases
    for case in cases:
        node = case.model.graph.node[0]
        opset = next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        op = kernels.op(node.op_type, domain="", version=opset)
        for inputs, outputs in case.data_sets:
            got = op(*inputs, **attrs)
            got = got if isinstance(got, tuple) else (got,)
            for g, want in zip(got, outputs):
                assert g.shape == want.shape, case.name
                np.testing.assert_allclose(g, want, rtol=5e-4, atol=1e-5, err_msg=case.name)
