"""float16 and bfloat16 elementwise kernels (computed in float, rounded once), Mod with fmod=0 on
floats, Pow's wider exponent types, Shrink and Swish. Arithmetic is checked exactly against
numpy's own half arithmetic (ml_dtypes' for bfloat16); transcendental ops against onnxruntime
on float32 rounded to the half type, within one unit in the last place."""
import ml_dtypes
import numpy as np
import pytest

from tests.support.kernel_check import check, run_onnxruntime

RNG = np.random.default_rng(11)
HALVES = [np.float16, ml_dtypes.bfloat16]
SHAPES = [((3, 4, 5), (3, 4, 5)), ((3, 4, 5), (5,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (3,)),
          ((300, 257), (257,))]


def rand(shape, dtype, scale=4.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def call(kernels, op, inputs, opset, **attrs):
    return kernels.op(op, domain="", version=opset)(*inputs, **attrs)


def ulps(got, want):
    """Units in the last place between two half arrays of one dtype (NaNs must agree)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g = got.view(np.uint16).astype(np.int64)
    w = want.view(np.uint16).astype(np.int64)
    g = np.where(g & 0x8000, -(g & 0x7FFF), g)  # sign-magnitude to a monotone integer line
    w = np.where(w & 0x8000, -(w & 0x7FFF), w)
    nan_g, nan_w = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(nan_g, nan_w)
    return np.abs(np.where(nan_g, 0, g - w))


def assert_exact(got, want):
    assert ulps(got, want).max(initial=0) == 0


@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply),
                                    ("Div", np.divide)])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("opset", [7, 14])
def test_arith_halves(kernels, op, fn, dtype, shapes, opset):
    a, b = rand(shapes[0], dtype), rand(shapes[1], dtype)
    with np.errstate(all="ignore"):
        assert_exact(call(kernels, op, [a, b], opset), fn(a, b))


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_variadic_halves(kernels, dtype):
    xs = [rand((3, 4), dtype), rand((4,), dtype), rand((2, 1, 4), dtype)]
    xs[0][0, 0] = np.nan
    assert_exact(call(kernels, "Max", xs, 13), np.maximum(np.maximum(xs[0], xs[1]), xs[2]))
    assert_exact(call(kernels, "Min", xs, 13), np.minimum(np.minimum(xs[0], xs[1]), xs[2]))
    assert_exact(call(kernels, "Sum", xs, 13), (xs[0] + xs[1]) + xs[2])
    mean = ((xs[0] + xs[1]) + xs[2]).astype(np.float32) * np.float32(1 / 3)
    assert_exact(call(kernels, "Mean", xs, 13), mean.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, *HALVES], ids=str)
def test_mod_fmod0_floats_is_numpys_mod(kernels, dtype):
    a = rand((6, 7), dtype, 10)
    b = rand((7,), dtype, 3)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 5.0, -5.0], np.float32).astype(dtype)
    a[0], b[:] = specials, np.where(np.abs(b.astype(np.float32)) < 0.1, 1.0, b.astype(np.float32)).astype(dtype)
    a[1, :4], b[:4] = 3.0, np.array([np.inf, -np.inf, 0.0, -0.0], np.float32).astype(dtype)
    with np.errstate(all="ignore"):
        want = np.mod(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
        got = call(kernels, "Mod", [a, b], 13, fmod=0)
        if dtype in (np.float32, np.float64):
            want = np.mod(a, b)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
        fmod = call(kernels, "Mod", [a, b], 13, fmod=1)
        np.testing.assert_array_equal(fmod.astype(np.float64),
                                      np.fmod(a.astype(np.float32), b.astype(np.float32)).astype(dtype).astype(np.float64))


@pytest.mark.parametrize("exp_dtype", [np.uint8, np.uint32, np.uint64, np.int8, np.int16, np.float16])
def test_pow_exponent_types(kernels, exp_dtype):
    x = rand((3, 4), np.float32)
    e = RNG.integers(0, 4, size=(4,)).astype(exp_dtype)
    # onnxruntime has Pow only for a few exponent types; numpy in float64 judges the rest
    want = np.power(x.astype(np.float64), e.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(call(kernels, "Pow", [x, e], 15), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_pow_half_base(kernels, dtype):
    x = np.abs(rand((3, 4), dtype)) + dtype(0.5)
    e = rand((4,), dtype, 1.5)
    want = np.power(x.astype(np.float32), e.astype(np.float32)).astype(dtype)
    assert ulps(call(kernels, "Pow", [x, e], 15), want).max() <= 1


UNARY = [("Neg", 13), ("Abs", 13), ("Sign", 13), ("Exp", 13), ("Log", 13), ("Sqrt", 13), ("Reciprocal", 13),
         ("Floor", 13), ("Ceil", 13), ("Round", 11), ("Erf", 13), ("Sin", 7), ("Cos", 7), ("Tan", 7),
         ("Atan", 7), ("Sinh", 9), ("Asinh", 9)]
ACTIVATIONS = [("Relu", 14, {}), ("LeakyRelu", 16, {"alpha": 0.3}), ("Elu", 6, {"alpha": 0.7}),
               ("Selu", 6, {}), ("Celu", 12, {"alpha": 1.5}), ("HardSigmoid", 6, {}), ("HardSwish", 14, {}),
               ("Sigmoid", 13, {}), ("Tanh", 13, {}), ("Softplus", 1, {}), ("Softsign", 1, {}),
               ("ThresholdedRelu", 10, {"alpha": 0.5}), ("Mish", 18, {})]


def half_vs_onnxruntime(kernels, op, opset, attrs, dtype, x):
    """Our half result against onnxruntime's float32 result rounded to the half type."""
    exact = run_onnxruntime(op, [x.astype(np.float32)], attrs, opset)[0]
    want = exact.astype(dtype)
    got = call(kernels, op, [x], opset, **attrs)
    # Near zero (Gelu's far negative tail) float32 approximations differ by ~1e-7, which is
    # many half ulps there: those elements are held to an absolute error instead.
    tiny = np.abs(exact) < 2 ** -10
    np.testing.assert_allclose(got.astype(np.float32)[tiny], exact[tiny], rtol=0, atol=2 ** -16)
    distance = np.where(tiny, 0, ulps(got, want))
    assert distance.max(initial=0) <= 1, f"{op}: {distance.max()} ulps apart"
    assert (distance == 1).mean() < 0.02, f"{op}: {(distance == 1).mean():.1%} of results one ulp off"


@pytest.mark.parametrize("op, opset", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_unary_halves(kernels, op, opset, dtype):
    x = rand((40, 50), dtype, 2)
    if op in ("Log", "Sqrt"):
        x = np.abs(x) + dtype(0.01)
    with np.errstate(all="ignore"):
        half_vs_onnxruntime(kernels, op, opset, {}, dtype, x)


@pytest.mark.parametrize("op, opset, attrs", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_activations_halves(kernels, op, opset, attrs, dtype):
    half_vs_onnxruntime(kernels, op, opset, attrs, dtype, rand((40, 50), dtype, 3))


def shrink_oracle(x, bias, lambd):
    """onnx's definition, computed in float64 and converted back."""
    wide = x.astype(np.float64)
    out = np.where(wide < -lambd, wide + bias, np.where(wide > lambd, wide - bias, 0))
    return out.astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("bias, lambd", [(0.0, 0.5), (1.5, 1.5), (2.0, 0.0)])
def test_shrink(kernels, dtype, bias, lambd):
    x = (RNG.standard_normal((6, 9)) * 5).astype(dtype) if np.dtype(dtype).kind == "f" else \
        RNG.integers(0 if np.dtype(dtype).kind == "u" else -9, 10, size=(6, 9)).astype(dtype)
    got = call(kernels, "Shrink", [x], 9, bias=bias, lambd=lambd)
    np.testing.assert_array_equal(got, shrink_oracle(x, bias, lambd))
    if np.dtype(dtype) == np.float32:
        check(kernels, "Shrink", [x], {"bias": bias, "lambd": lambd}, opset=9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("alpha", [1.0, 0.5, -2.0])
def test_swish(kernels, dtype, alpha):
    x = (RNG.standard_normal((50, 60)) * 4).astype(dtype)
    want = x / (1 + np.exp(-alpha * x.astype(np.float64)))
    got = call(kernels, "Swish", [x], 24, alpha=alpha)
    np.testing.assert_allclose(got, want.astype(dtype), rtol=2e-6 if dtype == np.float32 else 1e-12, atol=1e-6)
    tampered = got.copy()
    tampered.flat[7] *= 1.001
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(tampered, want.astype(dtype), rtol=2e-6 if dtype == np.float32 else 1e-12,
                                   atol=1e-6)


def test_bfloat16_pow_refuses_bool_exponent(kernels):
    with pytest.raises(TypeError, match=r"Pow\(\): input 'Y' \(#1\) has dtype bool"):
        call(kernels, "Pow", [rand((2,), ml_dtypes.bfloat16), np.ones(2, bool)], 15)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("shapes", [((3, 8), (8, 5)), ((2, 3, 4, 16), (2, 1, 16, 7)), ((16,), (16, 3)),
                                    ((4, 0), (0, 3))], ids=str)
def test_matmul_halves(kernels, dtype, shapes):
    a, b = rand(shapes[0], dtype, 1), rand(shapes[1], dtype, 1)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32).astype(dtype)
    got = call(kernels, "MatMul", [a, b], 13)
    assert ulps(got, want).max(initial=0) <= 1  # float32 sums against float64 ones, then rounded


REDUCTIONS = [("ReduceSum", np.sum), ("ReduceMean", np.mean), ("ReduceMax", np.max), ("ReduceMin", np.min),
              ("ReduceProd", np.prod), ("ReduceSumSquare", lambda x, **kw: np.sum(x * x, **kw)),
              ("ReduceL1", lambda x, **kw: np.sum(np.abs(x), **kw)),
              ("ReduceLogSumExp", lambda x, **kw: np.log(np.sum(np.exp(x), **kw)))]


@pytest.mark.parametrize("op, fn", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("axes", [(1,), (0, 2), None], ids=str)
def test_reductions_halves(kernels, op, fn, dtype, axes):
    x = rand((5, 6, 7), dtype, 0.7)
    want = fn(x.astype(np.float64), axis=axes, keepdims=True).astype(np.float32).astype(dtype)
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    got = call(kernels, op, inputs, 18)
    assert ulps(got, want).max() <= 1  # float32 against float64 before the one rounding


@pytest.mark.parametrize("op, fn", [("Equal", np.equal), ("Less", np.less), ("Greater", np.greater),
                                    ("LessOrEqual", np.less_equal), ("GreaterOrEqual", np.greater_equal)])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_comparisons_halves(kernels, op, fn, dtype):
    a = np.round(rand((4, 9), dtype, 2).astype(np.float32)).astype(dtype)  # many equal pairs
    b = np.round(rand((9,), dtype, 2).astype(np.float32)).astype(dtype)
    a[0, :4] = np.array([np.nan, 0.0, -0.0, np.inf], np.float32).astype(dtype)
    b[:4] = np.array([np.nan, -0.0, 0.0, np.inf], np.float32).astype(dtype)
    want = fn(a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(call(kernels, op, [a, b], 19 if op == "Equal" else 13), want)


def reference_softmax_half(x, axis, op):
    """onnx's reference, step by step in the half type (numpy rounds each operation), with the
    sum added in float32 and rounded once (as numpy sums a contiguous float16 row)."""
    if op == "Hardmax":
        y = np.zeros_like(x)
        np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
        return y
    tmp = x - x.max(axis=axis, keepdims=True)
    y = np.exp(tmp)
    y = y / y.astype(np.float32).sum(axis=axis, keepdims=True).astype(x.dtype)
    return np.log(y) if op == "LogSoftmax" else y


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_halves_round_each_step(kernels, op, dtype, axis):
    x = rand((4, 6, 33), dtype, 3)
    x[1, 2, :5] = x[1, 2, 5:10]  # ties for Hardmax
    with np.errstate(all="ignore"):
        want = reference_softmax_half(x, axis, op)
    got = call(kernels, op, [x], 13, axis=axis)
    distance = np.where(np.abs(want.astype(np.float32)) < 2 ** -10, 0, ulps(got, want))  # log(q ~ 1)
    assert distance.max() <= 1
    assert (distance == 1).mean() < 0.01  # summation order alone may move a rounding
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2 ** -7, atol=2 ** -10)
    if op == "Softmax":  # within a float16 ulp or two of onnxruntime's float32 result too
        ort = run_onnxruntime(op, [x.astype(np.float32)], {"axis": axis}, 13)[0]
        np.testing.assert_allclose(got.astype(np.float32), ort, rtol=2 ** -7, atol=2 ** -9)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_halves(kernels, dtype, approximate):
    half_vs_onnxruntime(kernels, "Gelu", 20, {"approximate": approximate}, dtype, rand((40, 50), dtype, 3))


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_prelu_and_clip_halves(kernels, dtype):
    x = rand((6, 7), dtype, 3)
    x[0, :2] = np.array([np.nan, -np.inf], np.float32).astype(dtype)
    slope = rand((7,), dtype, 0.5)
    want = np.where(x.astype(np.float32) < 0, x.astype(np.float32) * slope.astype(np.float32),
                    x.astype(np.float32)).astype(dtype)
    assert_exact(call(kernels, "PRelu", [x, slope], 16), want)
    lo, hi = np.array(-1.25, dtype), np.array(2.5, dtype)
    want = np.minimum(np.maximum(x.astype(np.float32), np.float32(-1.25)), np.float32(2.5)).astype(dtype)
    want[0, 0] = np.nan  # NaN passes through Clip
    assert_exact(call(kernels, "Clip", [x, lo, hi], 13), want)
    assert_exact(call(kernels, "Clip", [x], 6, min=-1.25, max=2.5), want)
    only_max = np.minimum(x.astype(np.float32), np.float32(2.5)).astype(dtype)
    only_max[0, 0] = np.nan
    assert_exact(call(kernels, "Clip", [x, None, hi], 13), only_max)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 1), (3, 5), ()], ids=str)
def test_gemm_halves(kernels, dtype, trans_a, trans_b, c_shape):
    a = rand((16, 3) if trans_a else (3, 16), dtype, 1)
    b = rand((5, 16) if trans_b else (16, 5), dtype, 1)
    alpha, beta = 0.75, 1.5
    wide_a = a.astype(np.float64).T if trans_a else a.astype(np.float64)
    wide_b = b.astype(np.float64).T if trans_b else b.astype(np.float64)
    want = alpha * wide_a @ wide_b
    inputs = [a, b]
    if c_shape is not None:
        c = rand(c_shape, dtype, 1)
        want = want + beta * c.astype(np.float64)
        inputs.append(c)
    got = call(kernels, "Gemm", inputs, 13, alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    assert ulps(got, want.astype(np.float32).astype(dtype)).max() <= 1
