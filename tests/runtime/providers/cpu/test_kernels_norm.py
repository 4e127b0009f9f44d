"""Normalization, softmax and reduction kernels checked against onnxruntime."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import check
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def reseed():
    """Each test draws the same data whichever tests run before it."""
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
# Shapes and axes covering: innermost, outermost, middle, several split groups, all, size-1 dims.
REDUCE_CASES = [((3, 4, 5), [2]), ((3, 4, 5), [0]), ((3, 4, 5), [1]), ((2, 3, 4, 5), [0, 2]),
                ((2, 3, 4, 5), [1, 3]), ((2, 3, 4, 5), [-1, -3]), ((2, 1, 4, 1), [1, 2]), ((7,), [0]),
                ((6, 5), None), ((300, 257), [1]), ((257, 300), [0]), ((16, 4096), [0, 1])]


def data(shape, dtype=np.float32, positive=False, small=False):
    """Random data in a range every reduce op is well-defined on (`small`: products stay in int32)."""
    if np.issubdtype(dtype, np.integer):
        if small:
            return RNG.choice([-1, 1, 2], size=shape).astype(dtype)
        return RNG.integers(1 if positive else -4, 5, size=shape).astype(dtype)
    x = RNG.uniform(0.5, 1.5, size=shape) if positive else RNG.standard_normal(shape)
    return x.astype(dtype)


def reduce_tolerance(op, dtype):
    if dtype == np.float64:
        return dict(rtol=1e-10, atol=1e-12)
    return dict(rtol=2e-5 if op != "ReduceProd" else 1e-4, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_reduce_axes_input(kernels, op, dtype):
    positive = op in ("ReduceLogSum", "ReduceProd")
    for shape, axes in REDUCE_CASES:
        if np.issubdtype(dtype, np.integer) and np.prod(shape) > 1000:
            continue
        x = data(shape, dtype, positive, small=op == "ReduceProd")
        inputs = [x, None if axes is None else np.array(axes, np.int64)]
        for keepdims in (0, 1):
            check(kernels, op, inputs, {"keepdims": keepdims}, opset=13 if op == "ReduceSum" else 18,
                  **reduce_tolerance(op, dtype))


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_attribute(kernels, op):
    x = data((2, 3, 4, 5), positive=op in ("ReduceLogSum", "ReduceProd"))
    for opset in (11, 12 if op == "ReduceSum" else 13):
        for axes in ([1], [0, 3], [-2], None):
            attrs = {"keepdims": 0} if axes is None else {"axes": axes, "keepdims": 1}
            check(kernels, op, [x], attrs, opset=opset, **reduce_tolerance(op, np.float32))


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_empty_and_scalar(kernels, op):
    opset = 13 if op == "ReduceSum" else 18
    x = data((2, 3), positive=True)
    check(kernels, op, [x, np.array([], np.int64)], {"noop_with_empty_axes": 1}, opset=opset)
    check(kernels, op, [x, None], {"noop_with_empty_axes": 1}, opset=opset)
    check(kernels, op, [x, np.array([], np.int64)], {"noop_with_empty_axes": 0}, opset=opset)
    empty = np.zeros((2, 0, 3), np.float32)
    check(kernels, op, [empty, np.array([1])], {}, opset=opset)  # reduces nothing: identity values
    check(kernels, op, [empty, np.array([2])], {"keepdims": 0}, opset=opset)
    check(kernels, op, [np.array(1.5, np.float32), None], {}, opset=opset)
    check(kernels, op, [np.array(1.5, np.float32), np.array([0])], {}, opset=opset)


def test_reduce_small_integers_and_special_values(kernels):
    for dtype in (np.int8, np.uint8):
        x = RNG.integers(0, 100, size=(4, 6)).astype(dtype)
        for op in ("ReduceMax", "ReduceMin"):
            check(kernels, op, [x, np.array([1])], {}, opset=18)
    x = RNG.integers(0, 2, size=(4, 6)).astype(bool)
    for op in ("ReduceMax", "ReduceMin"):
        for axes in ([1], [0], None):
            check(kernels, op, [x, None if axes is None else np.array(axes)], {}, opset=20)
    x = np.array([[-7, 3, 4], [5, -9, 2]], np.int32)  # integer results truncate; log of <= 0 is INT_MIN
    for op in ("ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
        check(kernels, op, [x, np.array([1])], {}, opset=18)
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    check(kernels, "ReduceMax", [x, np.array([1])], {}, opset=18)  # NaN is skipped, as onnxruntime does
    check(kernels, "ReduceLogSumExp", [x[1:], np.array([1])], {}, opset=18)


def test_reduce_large_parallel(kernels):
    x = data((1 << 20,))
    check(kernels, "ReduceSum", [x, None], {}, opset=13, rtol=1e-4, atol=1e-3)
    check(kernels, "ReduceMax", [x, None], {}, opset=18)
    x = data((64, 256, 64))
    check(kernels, "ReduceMean", [x, np.array([1])], {}, opset=18, rtol=1e-4, atol=1e-6)
    check(kernels, "ReduceLogSumExp", [x, np.array([0, 2])], {}, opset=18, rtol=1e-5, atol=1e-5)


def test_reduce_errors(kernels):
    x = data((2, 3))
    with pytest.raises(opforge.OpError, match="axis 2 is out of range for rank 2"):
        kernels.op("ReduceSum", version=13)(x, np.array([2]))
    with pytest.raises(opforge.OpError, match="axis -3 is out of range"):
        kernels.op("ReduceMax", version=11)(x, axes=[-3])


SOFTMAX_OPS = ["Softmax", "LogSoftmax", "Hardmax"]


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("opset", [1, 11, 13])
def test_softmax_family(kernels, op, opset):
    dtypes = [np.float32] if op == "Hardmax" else [np.float32, np.float64]  # no float64 Hardmax in ort
    for dtype in dtypes:
        tol = dict(rtol=1e-5, atol=5e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
        for shape in [(3, 7), (2, 3, 4, 5), (5,), (4, 1000), (2, 0, 3), (64, 33, 40), (3, 200, 5)]:
            x = (RNG.standard_normal(shape) * 4).astype(dtype)
            for axis in range(-len(shape), len(shape)):
                check(kernels, op, [x], {"axis": axis}, opset=opset, **tol)
            if len(shape) >= 2 or opset == 13:
                check(kernels, op, [x], {}, opset=opset, **tol)


def test_softmax_extremes_and_ties(kernels):
    x = np.array([[1000.0, 0.0, -1000.0], [-np.inf, 0.0, 1.0], [3.0, 3.0, 1.0]], np.float32)
    for op in SOFTMAX_OPS:
        check(kernels, op, [x], {}, opset=13)
        check(kernels, op, [x.T.copy()], {"axis": 0}, opset=13)


def test_softmax_errors(kernels):
    with pytest.raises(opforge.OpError, match="axis 2 is out of range for rank 2"):
        kernels.op("Softmax", version=13)(np.ones((2, 3), np.float32), axis=2)
    with pytest.raises(opforge.OpError, match="scalar"):
        kernels.op("LogSoftmax", version=13)(np.float32(1.0))


def bn_inputs(shape, dtype=np.float32, channels=None):
    """X plus scale, B, mean and a positive var of `channels` (default C) elements."""
    c = shape[1] if channels is None else channels
    x = RNG.standard_normal(shape).astype(dtype)
    params = [RNG.standard_normal(c).astype(dtype) for _ in range(3)]
    return [x, *params, RNG.uniform(0.5, 2.0, c).astype(dtype)]


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm(kernels, opset, dtype):
    for shape in [(2, 3, 4, 5), (2, 3), (1, 4, 7), (2, 3, 2, 2, 2), (0, 3, 4)]:
        check(kernels, "BatchNormalization", bn_inputs(shape, dtype), {}, opset=opset)
    check(kernels, "BatchNormalization", bn_inputs((2, 3, 4, 5), dtype), {"epsilon": 0.1}, opset=opset)


def test_batch_norm_old_opsets(kernels):
    inputs = bn_inputs((2, 3, 4, 5))
    want = kernels.op("BatchNormalization", version=9)(*inputs, epsilon=1e-3)
    for opset, attrs in [(1, {"consumed_inputs": [0, 0, 0, 1, 1]}), (6, {"is_test": 1})]:
        got = kernels.op("BatchNormalization", version=opset)(*inputs, epsilon=1e-3, **attrs)
        np.testing.assert_array_equal(got[0], want[0])  # onnxruntime has no kernel for these opsets
    # spatial=0 (opsets 6 to 8): one parameter per activation, C x D1 x D2
    x, *params = bn_inputs((2, 3, 4, 5), channels=60)
    check(kernels, "BatchNormalization", [x] + [p.reshape(3, 4, 5) for p in params], {"spatial": 0}, opset=7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_training_mode(kernels, dtype):
    """Batch statistics normalize; running_mean and running_var are updated with momentum."""
    for shape in [(2, 3, 4, 5), (4, 3), (3, 2, 7)]:
        for attrs in [{"training_mode": 1}, {"training_mode": 1, "momentum": 0.5, "epsilon": 1e-3}]:
            check(kernels, "BatchNormalization", bn_inputs(shape, dtype), attrs, opset=15, num_outputs=3,
                  rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_batch_norm_errors(kernels):
    op = kernels.op("BatchNormalization", version=15)
    with pytest.raises(opforge.OpError, match="input 'var' must have 3 elements, got 4"):
        op(*bn_inputs((2, 3, 4))[:4], np.ones(4, np.float32))
    with pytest.raises(opforge.OpError, match="rank 1"):
        op(np.ones(3, np.float32), *bn_inputs((2, 3))[1:])


def instance_norm_reference(x, scale, bias, eps=1e-5):
    axes = tuple(range(2, x.ndim))
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * scale.reshape(bshape) + bias.reshape(bshape)


def test_instance_norm(kernels):
    for shape in [(2, 3, 4, 5), (1, 2, 7), (2, 3, 2, 3, 4), (3, 2, 1000), (0, 2, 3)]:
        x, scale, bias = data(shape) * 3 + 1, data(shape[1]), data(shape[1])
        check(kernels, "InstanceNormalization", [x, scale, bias], {"epsilon": 1e-3}, opset=6, rtol=1e-4, atol=1e-5)
        got = kernels.op("InstanceNormalization", version=1)(x.astype(np.float64), scale, bias)  # no ort kernel
        want = instance_norm_reference(x.astype(np.float64), scale, bias)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    with pytest.raises(opforge.OpError, match=r"input X must be \(N, C, D1, ...\), got rank 2"):
        kernels.op("InstanceNormalization", version=6)(data((2, 3)), data(3), data(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm(kernels, dtype):
    # the Mean output of wide rows is small: float32's atol is relative to each output's scale
    tol = dict(rtol=1e-4, atol=1e-5, scale_atol=True) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    shape = (2, 3, 4, 5)
    x = data(shape, dtype) * 2 + 0.5
    for axis in (-1, -2, 1, 0, 3):
        norm_shape = shape[axis:]
        scale, bias = data(norm_shape, dtype), data(norm_shape, dtype)
        check(kernels, "LayerNormalization", [x, scale, bias], {"axis": axis}, opset=17, num_outputs=3, **tol)
        check(kernels, "LayerNormalization", [x, scale], {"axis": axis, "epsilon": 0.01}, opset=17, **tol)
    # Scale and B broadcast to the normalized shape (4, 5)
    check(kernels, "LayerNormalization", [x, data((5,), dtype), data((1, 5), dtype)], {"axis": 2}, opset=17,
          num_outputs=3, **tol)
    big = data((64, 768), dtype)
    check(kernels, "LayerNormalization", [big, data((768,), dtype), data((768,), dtype)], {}, opset=17,
          num_outputs=3, **tol)
    check(kernels, "LayerNormalization", [data((0, 4), dtype), data((4,), dtype)], {}, opset=17, num_outputs=3)


def test_layer_norm_errors(kernels):
    op = kernels.op("LayerNormalization", version=17)
    with pytest.raises(opforge.OpError, match="'stash_type' must be 1"):
        op(data((2, 3)), data(3), stash_type=0)
    with pytest.raises(opforge.OpError, match=r"input 'Scale' \(rank 1, 4 elements\) does not broadcast"):
        op(data((2, 3)), data(4))


def group_norm_reference(x, scale, bias, groups, eps, per_channel):
    """GroupNormalization in float64 numpy: scale and bias per channel (opset 21) or per group (18)."""
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    if not per_channel:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm(kernels, opset):
    for shape, groups in [((2, 6, 4, 5), 3), ((2, 6, 4, 5), 1), ((2, 6, 4, 5), 6), ((1, 4, 7), 2), ((3, 4), 2)]:
        count = shape[1] if opset == 21 else groups
        x, scale, bias = data(shape, np.float64) * 2 + 1, data(count, np.float64), data(count, np.float64)
        attrs = {"num_groups": groups, "epsilon": 1e-4}
        want = group_norm_reference(x, scale, bias, groups, 1e-4, opset == 21)
        # numpy in float64 is the oracle: onnxruntime's float32 kernel differs from it by up to
        # 3e-4 relative on small groups, and it computes float64 statistics in float32
        for dtype, rtol, atol in ((np.float32, 1e-4, 1e-5), (np.float64, 1e-8, 1e-12)):
            got = kernels.op("GroupNormalization", version=opset)(
                x.astype(dtype), scale.astype(dtype), bias.astype(dtype), **attrs)
            assert_close(got, want.astype(dtype), rtol, atol, f"GroupNormalization {dtype.__name__}")
            assert_would_catch(got, want, rtol, atol, f"GroupNormalization {dtype.__name__}")
    with pytest.raises(opforge.OpError, match=r"'num_groups' \(4\) must be positive and divide the channel count 6"):
        kernels.op("GroupNormalization", version=opset)(data((2, 6, 3)), data(6), data(6), num_groups=4)


def lrn_reference(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    sq, out, c = x.astype(np.float64) ** 2, np.empty(x.shape), x.shape[1]
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + size // 2)
        out[:, i] = x[:, i] / (bias + alpha / size * sq[:, lo:hi + 1].sum(axis=1)) ** beta
    return out


def test_lrn(kernels):
    x = data((2, 7, 5, 6)) * 3
    for opset in (1, 13):
        for attrs in [{"size": 3}, {"size": 5, "alpha": 0.01, "beta": 0.6, "bias": 2.0}, {"size": 1}, {"size": 9}]:
            check(kernels, "LRN", [x], attrs, opset=opset, rtol=1e-5, atol=1e-6)
    for size in (2, 4):  # even sizes follow the ONNX formula (onnxruntime rejects them)
        got = kernels.op("LRN", version=13)(x.astype(np.float64), size=size, alpha=0.125)
        np.testing.assert_allclose(got, lrn_reference(x, size, alpha=0.125), rtol=1e-12)
    with pytest.raises(opforge.OpError, match="'size' must be >= 1, got 0"):
        kernels.op("LRN", version=13)(x, size=0)


def test_mean_variance_norm(kernels):
    x = data((2, 3, 4, 5)) * 2 + 1
    for opset in (9, 13):
        for attrs in [{}, {"axes": [1]}, {"axes": [0, 1, 2, 3]}, {"axes": [2, 3]}, {"axes": [-1]}]:
            check(kernels, "MeanVarianceNormalization", [x], attrs, opset=opset, rtol=1e-4, atol=1e-5)
    xd = x.astype(np.float64)
    mean, std = xd.mean(axis=(0, 2, 3), keepdims=True), xd.std(axis=(0, 2, 3), keepdims=True)
    got = kernels.op("MeanVarianceNormalization", version=13)(xd)
    np.testing.assert_allclose(got, (xd - mean) / (std + 1e-9), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lp_norm(kernels, dtype):
    x = data((3, 4, 5), dtype)
    x[1, :, 2] = 0  # an all-zero slice along axis 1 stays zero
    for p in (1, 2):
        for axis in (-1, 0, 1, 2):
            check(kernels, "LpNormalization", [x], {"p": p, "axis": axis}, opset=1)
    check(kernels, "LpNormalization", [data((4, 3000), dtype)], {}, opset=1)
    with pytest.raises(opforge.OpError, match="'p' must be 1 or 2, got 3"):
        kernels.op("LpNormalization", version=1)(x, p=3)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_extremes(kernels, op):
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8):
        for shape in [(3, 4, 5), (7,), (2, 1300), (1300, 3)]:
            x = RNG.integers(0, 4, size=shape).astype(dtype)  # many ties: first vs last index matters
            for axis in range(-len(shape), len(shape)):
                for keepdims in (0, 1):
                    check(kernels, op, [x], {"axis": axis, "keepdims": keepdims}, opset=11)
                    for last in (0, 1):
                        check(kernels, op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last},
                              opset=13)
    check(kernels, op, [data((2, 5, 3))], {"axis": 1}, opset=13)
    check(kernels, op, [np.zeros((0, 3), np.float32)], {"axis": 1}, opset=13)
    with pytest.raises(opforge.OpError, match="axis 1 of input 'data' is empty"):
        kernels.op(op, version=13)(np.zeros((2, 0), np.float32), axis=1)
    with pytest.raises(opforge.OpError, match="axis 2 is out of range for rank 2"):
        kernels.op(op, version=13)(np.zeros((2, 3), np.float32), axis=2)


def test_cumsum(kernels):
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        for shape in [(3, 4, 5), (9,), (2, 2000), (0, 3)]:
            x = data(shape, dtype)
            for axis in range(-len(shape), len(shape)):
                for exclusive in (0, 1):
                    for reverse in (0, 1):
                        attrs = {"exclusive": exclusive, "reverse": reverse}
                        axis_input = np.array(axis, np.int64 if axis % 2 else np.int32)
                        check(kernels, "CumSum", [x, axis_input], attrs, opset=14, rtol=1e-5, atol=1e-5)
    with pytest.raises(opforge.OpError, match="axis 3 is out of range for rank 2"):
        kernels.op("CumSum", version=14)(data((2, 3)), np.array(3))


def test_topk(kernels):
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        for shape, axis, k in [((3, 4, 5), -1, 2), ((3, 4, 5), 1, 4), ((3, 4, 5), 0, 1), ((6,), 0, 6),
                               ((4, 300), 1, 10), ((4, 300), 1, 40), ((2, 3), 1, 0)]:
            x = RNG.integers(-5, 5, size=shape).astype(dtype)  # ties: the lower index comes first
            for largest in (0, 1):
                check(kernels, "TopK", [x, np.array([k])], {"axis": axis, "largest": largest}, opset=11,
                      num_outputs=2)
            if dtype in (np.float32, np.float64):
                check(kernels, "TopK", [x, np.array([k])], {"axis": axis}, opset=10, num_outputs=2)
                if k > 0:  # opset 1 requires k >= 1
                    check(kernels, "TopK", [x], {"axis": axis, "k": k}, opset=1, num_outputs=2)
    values, indices = kernels.op("TopK", version=11)(np.array([1, 5, 3], np.float32), np.array([2]), sorted=0)
    np.testing.assert_array_equal(np.sort(indices), [1, 2])  # any order is allowed when unsorted
    with pytest.raises(opforge.OpError, match=r"k = 4 must be in \[0, 3\]"):
        kernels.op("TopK", version=11)(np.zeros(3, np.float32), np.array([4]))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64])
def test_topk_small_and_unsigned_ints(kernels, dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=(5, 40), dtype=dtype, endpoint=True)
    x[:, :8] = x[:, 8:16]  # ties: the lower index comes first
    for largest in (0, 1):  # onnxruntime has no TopK for these types; Python's sort judges
        order = np.array([sorted(range(40), key=lambda j: (-int(row[j]) if largest else int(row[j]), j))[:7]
                          for row in x])
        values, indices = kernels.op("TopK", version=11)(x, np.array([7]), axis=1, largest=largest)
        np.testing.assert_array_equal(indices, order)
        np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))
        assert values.dtype == x.dtype


def test_static_shape_inference(kernels):
    """Graph-time infer: unknown dims (-1) pass through; value-dependent outputs ask for the value."""
    def infer(op, version, metas, attrs, num_outputs=1):
        handle = kernels.op(op, version=version).handle
        return handle.infer(metas, handle.attrs(attrs), num_outputs)

    f32, i64 = 1, 7
    with pytest.raises(opforge.OpError, match="needs the value of input 'axes'"):
        infer("ReduceSum", 13, [(f32, [2, -1, 4]), (i64, [1])], {})
    assert infer("ReduceSum", 13, [(f32, [2, -1, 4]), (i64, [1], np.array([1]))], {"keepdims": 0}) == [(f32, (2, 4))]
    assert infer("ReduceMean", 11, [(f32, [2, -1, 4])], {"axes": [0]}) == [(f32, (1, -1, 4))]
    assert infer("LayerNormalization", 17, [(f32, [-1, 7, 4]), (f32, [4])], {}, 3) == [
        (f32, (-1, 7, 4)), (f32, (-1, 7, 1)), (f32, (-1, 7, 1))]
    assert infer("ArgMax", 13, [(f32, [3, -1, 9])], {"axis": 1, "keepdims": 0}) == [(i64, (3, 9))]
    with pytest.raises(opforge.OpError, match="needs the value of input 'K'"):
        infer("TopK", 11, [(f32, [3, 9]), (i64, [1])], {}, 2)
    assert infer("TopK", 11, [(f32, [3, -1]), (i64, [1], np.array([2]))], {}, 2) == [(f32, (3, 2)), (i64, (3, 2))]


INPLACE_CASES = [
    ("Softmax", 13, lambda: [data((6, 40))], {}),
    ("Softmax", 13, lambda: [data((6, 5))], {}),
    ("LogSoftmax", 13, lambda: [data((3, 40, 5))], {"axis": 1}),
    ("LogSoftmax", 11, lambda: [data((6, 40))], {}),
    ("Hardmax", 13, lambda: [data((4, 7, 50))], {"axis": 1}),
    ("BatchNormalization", 15, lambda: bn_inputs((2, 3, 4, 5)), {}),
    ("BatchNormalization", 15, lambda: bn_inputs((2, 3, 4, 5)), {"training_mode": 1}),
    ("InstanceNormalization", 6, lambda: [data((2, 3, 10)), data(3), data(3)], {}),
    ("LayerNormalization", 17, lambda: [data((4, 6, 5)), data((6, 5)), data((6, 5))], {"axis": 1}),
    ("GroupNormalization", 21, lambda: [data((2, 4, 9)), data(4), data(4)], {"num_groups": 2}),
    ("MeanVarianceNormalization", 13, lambda: [data((2, 3, 4, 5))], {}),
    ("LpNormalization", 1, lambda: [data((3, 4, 5))], {"axis": 1}),
    ("LpNormalization", 1, lambda: [data((3, 40))], {}),
]


@pytest.mark.parametrize("op, opset, make_inputs, attrs", INPLACE_CASES)
def test_inplace_output_over_input(kernels, op, opset, make_inputs, attrs):
    """Ops declaring inplace(0, 0) give the same result with Y written over X."""
    handle = kernels.op(op, version=opset).handle
    assert handle.schema()["inplace"][0] == 0
    inputs = make_inputs()
    want = kernels.op(op, version=opset)(*inputs, **attrs)
    want = want[0] if isinstance(want, tuple) else want
    x = inputs[0].copy()
    outputs = [x] + [None] * (len(handle.schema()["outputs"]) - 1)
    handle.run([x] + inputs[1:], outputs, handle.attrs(attrs), None)
    np.testing.assert_array_equal(x, want)
