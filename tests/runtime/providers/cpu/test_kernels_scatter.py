"""Scatter, selection and placement kernels (ScatterElements/ND, Compress, NonZero, Unique,
OneHot, ReverseSequence, CenterCropPad, CumSum/CumProd) against onnxruntime."""
import numpy as np
import pytest

from opforge.errors import OpError
from tests.support.kernel_check import check, run_onnxruntime
from tests.support.kernel_check import check_reference

RNG = np.random.default_rng(7)
EXACT = dict(rtol=0, atol=0)
DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_]


def rand(*shape, dtype=np.float32):
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-50 if np.issubdtype(dtype, np.signedinteger) else 0, 50, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_elements_replaces_along_every_axis(kernels, dtype):
    data = rand(4, 5, 3, dtype=dtype)
    for axis in (0, 1, -1):
        n = data.shape[axis]
        idx = RNG.integers(-n, n, size=(2, 3, 3)).astype(np.int64)
        check(kernels, "ScatterElements", [data, idx, rand(2, 3, 3, dtype=dtype)], {"axis": axis}, **EXACT)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_scatter_elements_reductions_fold_duplicates(kernels, reduction, dtype):
    data = rand(6, 4, dtype=dtype)
    idx = RNG.integers(0, 6, size=(10, 4)).astype(np.int32)   # many duplicates per column
    check(kernels, "ScatterElements", [data, idx, rand(10, 4, dtype=dtype)],
          {"axis": 0, "reduction": reduction}, rtol=1e-6, atol=0)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_slices_and_elements(kernels, reduction):
    data = rand(4, 3, 5)
    # whole rows (k = 1), rows of a matrix (k = 2) and single elements (k = 3); no duplicate
    # index for 'none', whose duplicates are unordered in onnxruntime
    for idx, upd_shape in ((np.array([[2], [0]]), (2, 3, 5)), (np.array([[1, 2], [3, 0], [0, 0]]), (3, 5)),
                           (np.array([[[0, 1, 2]], [[3, 2, 4]]]), (2, 1))):
        check(kernels, "ScatterND", [data, idx.astype(np.int64), rand(*upd_shape)], {"reduction": reduction},
              rtol=1e-6, atol=0)
    if reduction != "none":
        dup = np.array([[1], [1], [3], [1]], np.int64)
        check(kernels, "ScatterND", [data, dup, rand(4, 3, 5)], {"reduction": reduction}, rtol=1e-6, atol=1e-6)


def test_scatter_old_name_and_bad_indices(kernels):
    data, idx, upd = rand(3, 3), np.array([[1, 0, 2], [0, 2, 1]], np.int64), rand(2, 3)
    check(kernels, "Scatter", [data, idx, upd], {"axis": 0}, opset=10, **EXACT)
    scatter = kernels.op("ScatterElements", domain="", version=18)
    with pytest.raises(OpError, match="index 3 is out of range for size 3"):
        scatter(data, np.array([[3, 0, 0]], np.int64), rand(1, 3))
    with pytest.raises(OpError, match="reduction"):
        scatter(data, idx, upd, reduction="sum")


def test_tensor_scatter_writes_cache_rows(kernels):
    cache, update = rand(2, 3, 6, 4), rand(2, 3, 2, 4)
    for mode, starts in (("linear", [1, 4]), ("circular", [5, 3])):
        check_reference(kernels, "TensorScatter", [cache, update, np.array(starts, np.int64)], {"mode": mode}, 24)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compress_with_and_without_axis(kernels, dtype):
    x = rand(3, 4, 2, dtype=dtype)
    check(kernels, "Compress", [x, np.array([True, False, True, True])], {"axis": 1}, **EXACT)
    check(kernels, "Compress", [x, np.array([False, True])], {"axis": -3}, **EXACT)   # shorter condition
    check(kernels, "Compress", [x, rand(24, dtype=np.bool_)], **EXACT)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
def test_nonzero_lists_coordinates(kernels, dtype):
    x = rand(3, 4, 5, dtype=dtype) * (RNG.random((3, 4, 5)) < 0.5).astype(dtype)
    check(kernels, "NonZero", [x], opset=13, **EXACT)
    check(kernels, "NonZero", [np.zeros((2, 3), dtype)], opset=13, **EXACT)


def test_nonzero_counts_negative_zero_as_zero_and_nan_as_nonzero(kernels):
    got = kernels.op("NonZero", domain="", version=13)(np.array([0.0, -0.0, np.nan, 1.0], np.float32))
    np.testing.assert_array_equal(got, [[2, 3]])


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_flat_and_along_axes(kernels, sorted_):
    x = RNG.integers(0, 4, size=(5, 6)).astype(np.float32)
    x[3] = x[1]      # a repeated row
    x[:, 4] = x[:, 0]  # a repeated column
    check(kernels, "Unique", [x], {"sorted": sorted_}, opset=11, num_outputs=4, **EXACT)
    if sorted_:   # onnxruntime keeps first-seen order for an axis only when sorted
        for axis in (0, 1, -1):
            check(kernels, "Unique", [x], {"axis": axis, "sorted": 1}, opset=11, num_outputs=4, **EXACT)


def test_unique_3d_axis_against_numpy(kernels):
    x = RNG.integers(0, 2, size=(2, 5, 3)).astype(np.int64)
    y, first, inverse, counts = kernels.op("Unique", domain="", version=11)(x, axis=1)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=1)
    for got, w in zip((y, first, inverse, counts), want):
        np.testing.assert_array_equal(got, np.asarray(w).reshape(got.shape))


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot_any_axis_with_negative_and_out_of_range_indices(kernels, axis):
    indices = np.array([[0, -1, 3], [7, -4, 2]], np.int64)   # 7 and -4 fall outside depth 4
    values = np.array([-2.5, 4.0], np.float32)
    check(kernels, "OneHot", [indices, np.array(4, np.int64), values], {"axis": axis}, opset=11, **EXACT)
    check_reference(kernels, "OneHot", [indices.astype(np.float32), np.array(4.0, np.float32),
                                        values.astype(np.int32)], {"axis": axis}, 11)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(kernels, batch_axis, time_axis):
    shape = (5, 4, 3) if time_axis == 0 else (4, 5, 3)
    lens = np.array([5, 1, 0, 3], np.int64)
    for dtype in (np.float32, np.int8, np.bool_):
        check(kernels, "ReverseSequence", [rand(*shape, dtype=dtype), lens],
              {"batch_axis": batch_axis, "time_axis": time_axis}, opset=10, **EXACT)


def test_center_crop_pad_crops_and_pads_off_centre(kernels):
    x = rand(5, 6, 3)
    for shape, axes in (([3, 9], [0, 1]), ([4, 2], [-3, -2]), ([8, 7, 2], None), ([2], [2])):
        attrs = {} if axes is None else {"axes": axes}
        check_reference(kernels, "CenterCropPad", [x, np.array(shape, np.int64)], attrs, 18)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64, np.float16])
def test_cumulative_ops(kernels, op, dtype):
    x = (RNG.integers(1, 4, size=(3, 4, 5)) if op == "CumProd" else rand(3, 4, 5)).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        x = np.abs(x).astype(dtype)
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                attrs = {"exclusive": exclusive, "reverse": reverse}
                inputs = [x, np.array(axis, np.int64)]
                # float16 rounds each partial result, as numpy does; onnxruntime rounds once
                tol = 4e-3 if dtype == np.float16 else 1e-6
                if op == "CumSum" and not np.issubdtype(dtype, np.unsignedinteger):
                    check(kernels, op, inputs, attrs, opset=14, rtol=tol, atol=tol)
                else:   # onnxruntime has no CumProd, nor CumSum of unsigned ints
                    check_reference(kernels, op, inputs, attrs, 26, rtol=0 if dtype == np.float16 else tol)


def test_check_reference_would_catch_a_wrong_element(kernels):
    """The comparisons above are exact: one changed element fails them."""
    data, idx, upd = rand(3, 3), np.array([[1, 0, 2]], np.int64), rand(1, 3)
    want = run_onnxruntime("ScatterElements", [data, idx, upd], {"axis": 0}, 18)[0]
    with pytest.raises(AssertionError):
        check(kernels, "ScatterElements", [data, idx, upd], {"axis": 0},
              tamper=lambda o: o + (np.arange(o.size).reshape(o.shape) == 4) * 1e-3 * abs(want.flat[4]), **EXACT)
