"""Shape and data-movement kernels (Reshape, Transpose, Slice, Pad, Gather, ...) against onnxruntime."""
import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import opforge
from tests.support.kernel_check import check, check_reference, run_onnxruntime

RNG = np.random.default_rng(0)
# One dtype per element size, plus bool and float16: the kernels move bytes by size.
DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32,
          np.int64, np.uint32, np.uint64, np.bool_]
EXACT = dict(rtol=0, atol=0)


def rand(*shape, dtype=np.float32):
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(0, 100, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def ints(*values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def same(kernels, op_type, inputs, attrs=None, opset=18):
    """check() with exact equality; trailing absent inputs are dropped, as a model would."""
    inputs = list(inputs)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return check(kernels, op_type, inputs, attrs, opset=opset, **EXACT)


def check_split(kernels, inputs, attrs, opset, num_outputs):
    """Split's outputs are variadic, so it runs through the handle with outputs shaped like ORT's."""
    want = run_onnxruntime("Split", inputs, attrs, opset, num_outputs)
    handle = kernels.op("Split", domain="", version=opset).handle
    got = [np.empty_like(w) for w in want]
    handle.run(list(inputs), got, handle.attrs(attrs), None)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def infer(kernels, op_type, opset, metas, attrs=None, num_outputs=1):
    """Static shape inference: metas are (dtype code, shape with -1 unknown[, value])."""
    handle = kernels.op(op_type, domain="", version=opset).handle
    return handle.infer(metas, handle.attrs(attrs or {}), num_outputs)


F32, I64 = 1, 7


@pytest.mark.parametrize("op_type, opset, metas, attrs, missing", [
    ("Reshape", 14, [(F32, [2, 3]), (I64, [2])], {}, "shape"),
    ("Expand", 13, [(F32, [2, 3]), (I64, [2])], {}, "shape"),
    ("Tile", 13, [(F32, [2, 3]), (I64, [2])], {}, "repeats"),
    ("Slice", 13, [(F32, [5]), (I64, [1]), (I64, [1], np.array([3]))], {}, "starts"),
    ("Pad", 13, [(F32, [5]), (I64, [2])], {}, "pads"),
    ("Pad", 18, [(F32, [5]), (I64, [2], np.array([1, 1])), None, (I64, [1])], {}, "axes"),
    ("ConstantOfShape", 9, [(I64, [2])], {}, "input"),
    ("Range", 11, [(F32, []), (F32, []), (F32, [])], {}, "start"),
    ("Squeeze", 13, [(F32, [1, 3]), (I64, [1])], {}, "axes"),
    ("Unsqueeze", 13, [(F32, [3]), (I64, [1])], {}, "axes"),
    ("Split", 13, [(F32, [4]), (I64, [2])], {}, "split")])
def test_infer_names_the_input_whose_value_it_needs(kernels, op_type, opset, metas, attrs, missing):
    with pytest.raises(opforge.OpError, match=f"needs the value of input '{missing}'"):
        infer(kernels, op_type, opset, metas, attrs, 2 if op_type == "Split" else 1)


def test_infer_with_unknown_dims_and_values(kernels):
    assert infer(kernels, "Transpose", 13, [(F32, [2, -1, 4])], dict(perm=[2, 0, 1])) == [(F32, (4, 2, -1))]
    assert infer(kernels, "Concat", 13, [(F32, [2, -1]), (F32, [-1, 3])], dict(axis=0)) == [(F32, (-1, 3))]
    assert infer(kernels, "Reshape", 14, [(F32, [-1, 6]), (I64, [2], np.array([0, -1]))]) == [(F32, (-1, -1))]
    assert infer(kernels, "Reshape", 14, [(F32, [4, 6]), (I64, [3], np.array([2, -1, 3]))]) == [(F32, (2, 4, 3))]
    assert infer(kernels, "Flatten", 13, [(F32, [-1, 2, 3])], dict(axis=1)) == [(F32, (-1, 6))]
    assert infer(kernels, "Shape", 15, [(F32, [-1, 2, 3])], dict(start=1)) == [(I64, (2,))]
    assert infer(kernels, "Gather", 13, [(F32, [-1, 5]), (I64, [2, 3])], dict(axis=1)) == [(F32, (-1, 2, 3))]
    assert infer(kernels, "Slice", 13, [(F32, [-1, 8]), (I64, [1], np.array([1])), (I64, [1], np.array([-1])),
                                        (I64, [1], np.array([1]))]) == [(F32, (-1, 6))]
    assert infer(kernels, "Split", 18, [(F32, [2, 7])], dict(axis=1, num_outputs=3), 3) == [
        (F32, (2, 3)), (F32, (2, 3)), (F32, (2, 1))]
    assert infer(kernels, "Split", 13, [(F32, [6, 2]), (I64, [2], np.array([4, 2]))], {}, 2) == [
        (F32, (4, 2)), (F32, (2, 2))]


# ---- Shape, Size ----

@pytest.mark.parametrize("shape", [(), (0,), (2, 3), (1, 0, 4), (2, 3, 4, 5)])
def test_shape_and_size(kernels, shape):
    x = rand(*shape)
    same(kernels, "Shape", [x], opset=13)
    same(kernels, "Size", [x], opset=13)


@pytest.mark.parametrize("start, end", [(0, None), (1, None), (-1, None), (1, 3), (-3, -1), (5, None), (2, 1),
                                        (-10, 10)])
def test_shape_start_end(kernels, start, end):
    attrs = dict(start=start) if end is None else dict(start=start, end=end)
    same(kernels, "Shape", [rand(2, 3, 4, 5, dtype=np.int8)], attrs, opset=15)


# ---- Reshape, Flatten, Squeeze, Unsqueeze ----

@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_dtypes(kernels, dtype):
    same(kernels, "Reshape", [rand(2, 3, 4, dtype=dtype), ints(4, -1)], opset=14)


@pytest.mark.parametrize("shape, want, allowzero", [
    ((2, 3, 4), (0, -1), 0), ((2, 3, 4), (0, 0, 2, 2), 0), ((2, 3, 4), (-1,), 0), ((2, 0, 4), (0, -1), 0),
    ((2, 0, 4), (4, 0), 1), ((1,), (), 0), ((), (1, 1), 0), ((6,), (3, 2), 1)])
def test_reshape_shapes(kernels, shape, want, allowzero):
    same(kernels, "Reshape", [rand(*shape), ints(*want)], dict(allowzero=allowzero), opset=14)
    if not allowzero:
        same(kernels, "Reshape", [rand(*shape), ints(*want)], opset=5)


def test_reshape_errors(kernels):
    op = kernels.op("Reshape", version=14)
    with pytest.raises(opforge.OpError, match="cannot reshape"):
        op(rand(2, 3), ints(4, 2))
    with pytest.raises(opforge.OpError, match="more than one -1"):
        op(rand(2, 3), ints(-1, -1))


def test_views_alias_their_input(kernels):
    """The runtime may hand Reshape/Flatten/Squeeze/Unsqueeze the input's own buffer as output."""
    x = rand(2, 1, 3)
    keep = x.copy()
    for op_type, extra, shape in [("Reshape", [ints(3, 2)], (3, 2)), ("Flatten", [], (2, 3)),
                                  ("Squeeze", [ints(1)], (2, 3)), ("Unsqueeze", [ints(0)], (1, 2, 1, 3))]:
        handle = kernels.op(op_type, version=13).handle
        assert handle.schema()["inplace"] == [0]
        handle.run([x] + extra, [x.reshape(shape)], handle.attrs({}), None)
        np.testing.assert_array_equal(x, keep)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(kernels, axis):
    same(kernels, "Flatten", [rand(2, 3, 0 if axis == 2 else 4)], dict(axis=axis), opset=13)


@pytest.mark.parametrize("axes", [None, [1], [-3], [1, 3], [3, -1]])
def test_squeeze(kernels, axes):
    x = rand(2, 1, 3, 1, dtype=np.int64)
    same(kernels, "Squeeze", [x, None if axes is None else ints(*axes)], opset=13)
    same(kernels, "Squeeze", [x], {} if axes is None else dict(axes=axes), opset=11)
    with pytest.raises(opforge.OpError, match="cannot squeeze axis 0"):
        kernels.op("Squeeze", version=13)(x, ints(0))


@pytest.mark.parametrize("shape, axes", [((), [0]), ((3,), [0, 2]), ((2, 3), [-1]), ((2, 3), [1, -1]),
                                         ((2, 0), [0])])
def test_unsqueeze(kernels, shape, axes):
    x = rand(*shape, dtype=np.float16)
    same(kernels, "Unsqueeze", [x, ints(*axes)], opset=13)
    same(kernels, "Unsqueeze", [x], dict(axes=axes), opset=11)
    with pytest.raises(opforge.OpError, match="appears twice"):
        kernels.op("Unsqueeze", version=13)(x, ints(0, 0))


# ---- ConstantOfShape, Range, EyeLike ----

@pytest.mark.parametrize("value", [None, np.array([7], np.int64), np.array([2.5], np.float32),
                                   np.array([True]), np.array([1.5], np.float16), np.array([-3], np.int8)])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4)])
def test_constant_of_shape(kernels, value, shape):
    attrs = {} if value is None else dict(value=numpy_helper.from_array(value))
    same(kernels, "ConstantOfShape", [ints(*shape)], attrs, opset=9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("start, limit, delta", [(0, 10, 1), (1, 10, 3), (10, 1, -2), (5, 5, 1), (3, 1, 1)])
def test_range(kernels, dtype, start, limit, delta):
    same(kernels, "Range", [np.array(v, dtype) for v in (start, limit, delta)], opset=11)


def test_range_fractional_and_zero_delta(kernels):
    check(kernels, "Range", [np.array(v, np.float32) for v in (0.5, 100.3, 0.7)], opset=11)
    with pytest.raises(opforge.OpError, match="'delta' must not be 0"):
        kernels.op("Range", version=11)(*[np.array(v, np.int64) for v in (0, 4, 0)])


@pytest.mark.parametrize("stash_type", [1, 11])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int64])
def test_range_27(kernels, stash_type, dtype):
    fractional = np.issubdtype(dtype, np.floating)
    for start, limit, delta in [(0, 10, 1), (1.5, 30.5, 0.25 if fractional else 2), (10, -3, -1.5)]:
        args = [np.array(v, dtype) for v in (start, limit, delta)]
        check_reference(kernels, "Range", args, dict(stash_type=stash_type), opset=27, rtol=1e-3)


@pytest.mark.parametrize("shape", [(3, 3), (3, 5), (5, 2), (0, 3)])
@pytest.mark.parametrize("k", [0, 1, -2, 7])
def test_eye_like(kernels, shape, k):
    same(kernels, "EyeLike", [rand(*shape)], dict(k=k), opset=9)
    same(kernels, "EyeLike", [rand(*shape, dtype=np.int32)], dict(k=k, dtype=7), opset=9)


# ---- Transpose, DepthToSpace, SpaceToDepth ----

@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_dtypes(kernels, dtype):
    same(kernels, "Transpose", [rand(67, 45, dtype=dtype)], opset=13)
    same(kernels, "Transpose", [rand(2, 5, 17, 40, dtype=dtype)], dict(perm=[0, 2, 3, 1]), opset=13)
    same(kernels, "Transpose", [rand(2, 17, 33, 9, dtype=dtype)], dict(perm=[0, 3, 1, 2]), opset=13)


@pytest.mark.parametrize("shape, perm", [
    ((), None), ((5,), [0]), ((3, 4), [1, 0]), ((300, 520), [1, 0]), ((2, 3, 4), [2, 0, 1]), ((2, 3, 4), [1, 0, 2]),
    ((4, 1, 5), [2, 1, 0]), ((2, 0, 3), [2, 1, 0]), ((3, 4, 5, 6), [3, 2, 1, 0]), ((2, 3, 4, 5, 6), [0, 3, 1, 4, 2]),
    ((8, 64, 56, 56), [0, 2, 3, 1]), ((16, 12, 128, 64), [0, 2, 1, 3])])
def test_transpose_perms(kernels, shape, perm):
    same(kernels, "Transpose", [rand(*shape)], None if perm is None else dict(perm=perm), opset=13)


def test_transpose_bad_perm(kernels):
    with pytest.raises(opforge.OpError, match="not a permutation"):
        kernels.op("Transpose", version=13)(rand(2, 3), perm=[0, 0])
    with pytest.raises(opforge.OpError, match="'perm' has 3 entries"):
        kernels.op("Transpose", version=13)(rand(2, 3), perm=[0, 1, 2])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape, b", [((1, 8, 2, 3), 2), ((2, 27, 4, 5), 3), ((2, 64, 9, 9), 4), ((1, 4, 0, 2), 2)])
def test_depth_to_space(kernels, mode, shape, b):
    x = rand(*shape)
    want = same(kernels, "DepthToSpace", [x], dict(blocksize=b, mode=mode), opset=13)[0]
    if mode == "DCR":  # onnxruntime has no DepthToSpace-1; it is DCR only
        np.testing.assert_array_equal(kernels.op("DepthToSpace", version=1)(x, blocksize=b), want)


@pytest.mark.parametrize("shape, b", [((1, 2, 4, 6), 2), ((2, 3, 9, 12), 3), ((2, 5, 16, 16), 8)])
def test_space_to_depth(kernels, shape, b):
    x = rand(*shape, dtype=np.int64)
    want = same(kernels, "SpaceToDepth", [x.astype(np.float64)], dict(blocksize=b), opset=13)[0]
    # onnxruntime's SpaceToDepth takes floats only; the kernel moves any dtype the same way.
    np.testing.assert_array_equal(kernels.op("SpaceToDepth", version=13)(x, blocksize=b), want.astype(np.int64))
    with pytest.raises(opforge.OpError, match="not divisible by blocksize"):
        kernels.op("SpaceToDepth", version=13)(rand(1, 2, 5, 5), blocksize=2)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_28(kernels, mode):
    for shape, b in [((1, 2, 4, 6), 2), ((2, 3, 9, 12), 3)]:
        check_reference(kernels, "SpaceToDepth", [rand(*shape, dtype=np.int16)], dict(blocksize=b, mode=mode), 28)


# ---- Concat, Split ----

@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_dtypes(kernels, dtype):
    same(kernels, "Concat", [rand(2, 3, dtype=dtype), rand(2, 5, dtype=dtype)], dict(axis=1), opset=13)


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 0), (2, 4)], -1), ([(5,)], 0), ([(2, 3, 4), (2, 5, 4)], 1),
    ([(0, 3), (0, 3)], 0), ([(1000, 300), (1000, 200)], 1), ([(300, 1000), (200, 1000)], 0)])
def test_concat_axes(kernels, shapes, axis):
    same(kernels, "Concat", [rand(*s) for s in shapes], dict(axis=axis), opset=13)


def test_concat_mismatch(kernels):
    with pytest.raises(opforge.OpError, match="differs from the others"):
        kernels.op("Concat", version=13)(rand(2, 3), rand(3, 4), axis=1)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16, np.int64])
def test_split(kernels, dtype):
    x = rand(4, 6, 3, dtype=dtype)
    check_split(kernels, [x], dict(axis=1), 11, 3)
    check_split(kernels, [x], dict(axis=1, split=[1, 0, 5]), 11, 3)
    check_split(kernels, [x, ints(1, 3)], dict(axis=0), 13, 2)
    check_split(kernels, [x, ints(2, 4)], dict(axis=-2), 18, 2)
    check_split(kernels, [x], dict(axis=-1, num_outputs=2), 18, 2)
    check_split(kernels, [rand(2, 7, dtype=dtype)], dict(axis=1, num_outputs=3), 18, 3)


def test_split_eager_single_output_and_errors(kernels):
    x = rand(4, 6)
    np.testing.assert_array_equal(kernels.op("Split", version=13)(x, ints(6), axis=1), x)
    with pytest.raises(opforge.OpError, match="sums to 5"):
        kernels.op("Split", version=13)(x, ints(5), axis=1)
    split11 = kernels.op("Split", version=11).handle
    with pytest.raises(opforge.OpError, match="does not split evenly"):
        split11.run([rand(5, 2)], [rand(2, 2), rand(3, 2)], split11.attrs({}), None)


# ---- Slice ----

SLICES = [  # starts, ends, axes, steps
    ([1], [3], None, None), ([0, 1], [2, -1], None, None), ([-3], [100], [1], None), ([10], [-100], [1], [-1]),
    ([-1, 2], [-100, 0], [0, 2], [-2, -1]), ([0], [5], [-1], [2]), ([5], [0], [2], [-3]), ([2], [1], [0], [1]),
    ([0, 0, 0], [9, 9, 9], [2, 0, 1], [4, 3, 2]), ([-2**63], [2**63 - 1], [1], [1]),
    ([2**63 - 1], [-2**63], [0], [-2**63]), ([1], [4], [2], [2**62])]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICES)
def test_slice(kernels, starts, ends, axes, steps):
    x = rand(4, 5, 6)
    inputs = [x, ints(*starts), ints(*ends), None if axes is None else ints(*axes),
              None if steps is None else ints(*steps)]
    same(kernels, "Slice", inputs, opset=13)
    if steps is None:
        same(kernels, "Slice", [x], dict(starts=starts, ends=ends, **({} if axes is None else dict(axes=axes))),
             opset=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_dtypes_and_int32(kernels, dtype):
    x = rand(7, 9, dtype=dtype)
    same(kernels, "Slice", [x, ints(1, -1, dtype=np.int32), ints(6, 0, dtype=np.int32),
                            ints(0, 1, dtype=np.int32), ints(2, -2, dtype=np.int32)], opset=13)


def test_slice_empty_and_errors(kernels):
    same(kernels, "Slice", [rand(0, 3), ints(0), ints(2), ints(1)], opset=13)
    with pytest.raises(opforge.OpError, match="must not be 0"):
        kernels.op("Slice", version=13)(rand(3), ints(0), ints(2), ints(0), ints(0))
    with pytest.raises(opforge.OpError, match="appears twice"):
        kernels.op("Slice", version=13)(rand(3, 3), ints(0, 0), ints(2, 2), ints(1, -1))


# ---- Gather, GatherElements, GatherND ----

@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_dtypes(kernels, dtype):
    same(kernels, "Gather", [rand(5, 4, dtype=dtype), ints(0, 4, -1, 2)], dict(axis=0), opset=13)
    same(kernels, "Gather", [rand(5, 4, dtype=dtype), ints(3, -4, dtype=np.int32)], dict(axis=1), opset=13)


@pytest.mark.parametrize("shape, idx, axis", [
    ((5,), np.array(2), 0), ((5, 6, 7), [[0, 1], [4, -5]], 1), ((5, 6, 7), [1, 1, 1], -1), ((5, 6), [], 0),
    ((0, 6), [1], 1), ((1000, 64), list(range(-1000, 1000, 3)), 0)])
def test_gather_shapes(kernels, shape, idx, axis):
    same(kernels, "Gather", [rand(*shape), np.array(idx, np.int64)], dict(axis=axis), opset=13)


def test_gather_out_of_range(kernels):
    with pytest.raises(opforge.OpError, match="index 5 is out of range"):
        kernels.op("Gather", version=13)(rand(5, 2), ints(5))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.float16])
def test_gather_elements(kernels, axis, dtype):
    data = rand(4, 5, 6, dtype=dtype)
    idx = RNG.integers(-data.shape[axis], data.shape[axis], size=(3, 4, 6))
    same(kernels, "GatherElements", [data, idx.astype(np.int64)], dict(axis=axis), opset=13)
    same(kernels, "GatherElements", [data, idx.astype(np.int32)], dict(axis=axis), opset=13)


@pytest.mark.parametrize("shape, idx, batch_dims", [
    ((2, 2), [[0, 0], [1, 1]], 0), ((2, 2), [[1], [0]], 0), ((2, 2, 2), [[0, 1], [1, 0]], 0),
    ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0), ((2, 2, 2), [[1], [0]], 1), ((3, 4, 5), [[[-1, 2]], [[0, 0]], [[2, 4]]], 1),
    ((2, 3, 4), [[[1], [2]], [[0], [0]]], 1)])
def test_gather_nd(kernels, shape, idx, batch_dims):
    data = rand(*shape)
    same(kernels, "GatherND", [data, np.array(idx, np.int64)], dict(batch_dims=batch_dims), opset=13)
    if batch_dims == 0:
        same(kernels, "GatherND", [data, np.array(idx, np.int64)], opset=11)


# ---- Expand, Tile ----

@pytest.mark.parametrize("shape, want", [
    ((3, 1), (2, 3, 4)), ((), (2, 3)), ((1,), (5,)), ((2, 3), (1, 1)), ((1, 3), (4, 1)), ((4, 1, 6), (4, 5, 1)),
    ((1, 1, 64, 64), (2, 8, 64, 64)), ((3, 1), (0, 3, 5))])
@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int64, np.int16])
def test_expand(kernels, shape, want, dtype):
    same(kernels, "Expand", [rand(*shape, dtype=dtype), ints(*want)], opset=13)


def test_expand_not_broadcastable(kernels):
    with pytest.raises(opforge.OpError, match="do not broadcast"):
        kernels.op("Expand", version=13)(rand(2, 3), ints(4, 3))


@pytest.mark.parametrize("shape, reps", [((3,), (4,)), ((2, 3), (2, 3)), ((2, 3), (1, 1)), ((2, 1, 3), (3, 4, 0)),
                                         ((), ()), ((64, 32), (1, 20)), ((1, 5), (1000, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint16, np.float64])
def test_tile(kernels, shape, reps, dtype):
    same(kernels, "Tile", [rand(*shape, dtype=dtype), ints(*reps)], opset=13)


def test_tile_bad_repeats(kernels):
    with pytest.raises(opforge.OpError, match="'repeats' has 1 entries"):
        kernels.op("Tile", version=13)(rand(2, 3), ints(2))


# ---- Pad ----

PADS = [[1, 2, 0, 3], [0, 0, 0, 0], [2, 0, 1, 1], [-1, 1, 0, -2], [0, 3, 2, 0]]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", PADS)
def test_pad_modes(kernels, mode, pads):
    x = rand(4, 5)
    same(kernels, "Pad", [x, ints(*pads)], dict(mode=mode), opset=13)
    same(kernels, "Pad", [x], dict(mode=mode, pads=pads, value=1.5), opset=2)


@pytest.mark.parametrize("pads", PADS)
def test_pad_wrap_and_axes(kernels, pads):
    x = rand(4, 5, 3)
    same(kernels, "Pad", [x, ints(*pads), None, ints(0, -2)], dict(mode="wrap"), opset=19)
    same(kernels, "Pad", [x, ints(*pads), np.array(2.5, np.float32), ints(-1, 0)], opset=18)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.uint32,
                                   np.uint64, np.bool_])
def test_pad_dtypes(kernels, dtype):
    x = rand(2, 3, 4, dtype=dtype)
    value = np.array(1, dtype)
    same(kernels, "Pad", [x, ints(0, 1, 2, 1, 0, 1), value], opset=13)
    same(kernels, "Pad", [x, ints(0, 1, 2, 1, 0, 1)], dict(mode="reflect"), opset=13)


def test_pad_large_and_empty(kernels):
    same(kernels, "Pad", [rand(2, 16, 56, 56), ints(0, 0, 1, 1, 0, 0, 1, 1)], opset=13)
    same(kernels, "Pad", [rand(0, 3), ints(1, 1, 0, 1)], opset=13)
    x = rand()  # onnxruntime rejects scalars; ONNX pads nothing
    np.testing.assert_array_equal(kernels.op("Pad", version=13)(x, ints()), x)


def test_pad_errors(kernels):
    with pytest.raises(opforge.OpError, match="'mode' must be"):
        kernels.op("Pad", version=13)(rand(2), ints(1, 1), mode="mirror")
    with pytest.raises(opforge.OpError, match="'pads' has 2 entries"):
        kernels.op("Pad", version=13)(rand(2, 2), ints(1, 1))


# ---- Trilu ----

@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2), (2, 3, 4, 4), (0, 3)])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 5, -5])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(kernels, shape, k, upper):
    inputs = [rand(*shape, dtype=np.int64)] + ([] if k is None else [ints(k)])
    same(kernels, "Trilu", inputs, dict(upper=upper), opset=14)


def test_trilu_float_and_bool(kernels):
    same(kernels, "Trilu", [rand(5, 7), ints(2)], dict(upper=0), opset=14)
    same(kernels, "Trilu", [rand(5, 7, dtype=np.bool_)], opset=14)


# ---- scalars have no axis (as in onnxruntime), Range counts that are not finite ----

@pytest.mark.parametrize("op_type, opset, inputs, attrs", [
    ("Squeeze", 13, [np.float32(1), ints(0)], {}),
    ("Split", 18, [np.float32(1)], dict(axis=0, num_outputs=1)),
    ("Slice", 13, [np.float32(1), ints(0), ints(1), ints(0)], {}),
    ("Pad", 18, [np.float32(1), ints(0, 0), None, ints(0)], {}),
    ("Concat", 13, [np.float32(1), np.float32(2)], dict(axis=0)),
    ("Softmax", 13, [np.float32(1)], dict(axis=0)),
    ("Gather", 13, [np.float32(1), ints(0)], dict(axis=0)),
])
def test_axis_0_of_a_scalar_is_refused(kernels, op_type, opset, inputs, attrs):
    op = kernels.op(op_type, domain="", version=opset)
    with pytest.raises(opforge.OpError, match="out of range for rank 0|got a scalar|of rank >= 1"):
        op(*[np.asarray(x) if x is not None else None for x in inputs], **attrs)


@pytest.mark.parametrize("limit, delta", [(5.0, np.nan), (np.inf, 1.0), (1e30, 1e-30)])
def test_range_whose_count_is_not_finite_or_too_big_is_refused(kernels, limit, delta):
    op = kernels.op("Range", domain="", version=11)
    with pytest.raises(opforge.OpError, match="element count"):
        op(np.array(0.0), np.array(limit), np.array(delta))


@pytest.mark.parametrize("op_type, inputs, attrs", [
    ("Tile", [np.ones((2, 2), np.float32), ints(2, 2**62)], {}),              # 2 * 2**62 wrapped negative
    ("Pad", [np.ones((2, 2), np.float32), ints(0, 2**62, 0, 2**62)], {}),
    ("DepthToSpace", [np.ones((1, 4, 1, 1), np.float32)], dict(blocksize=2**32)),  # b*b wrapped to 0
    ("SpaceToDepth", [np.ones((1, 1, 1, 1), np.float32)], dict(blocksize=2**32)),
])
def test_sizes_that_overflow_are_refused_not_wrapped(kernels, op_type, inputs, attrs):
    op = kernels.op(op_type, domain="", version=13)
    with pytest.raises(opforge.OpError, match="does not fit in memory|not divisible|negative"):
        op(*inputs, **attrs)
