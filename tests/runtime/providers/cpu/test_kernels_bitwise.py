"""BitwiseAnd/Or/Xor/Not against onnxruntime, and BitShift on every integer type (opset 28's
signed types and out-of-range shifts) against numpy, as the ONNX spec defines them."""
import numpy as np
import pytest

from tests.support.kernel_check import check

RNG = np.random.default_rng(3)
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
SHAPES = [((3, 4, 5), (3, 4, 5)), ((3, 4, 5), (5,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (3,)),
          ((300, 257), (257,))]


def full_range(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_bitwise_binary(kernels, op, dtype, shapes):
    check(kernels, op, [full_range(shapes[0], dtype), full_range(shapes[1], dtype)], opset=18)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_bitwise_not(kernels, dtype):
    check(kernels, "BitwiseNot", [full_range((4, 70000), dtype)], opset=18)


def shift_oracle(x, y, left):
    """The ONNX BitShift-28 definition, element by element in Python integers."""
    bits = np.iinfo(x.dtype).bits
    x, y = np.broadcast_arrays(x, y)
    out = np.empty(x.shape, x.dtype)
    mask = (1 << bits) - 1
    for index in np.ndindex(x.shape):
        a, b = int(x[index]), int(y[index])
        if b < 0 or b >= bits:
            value = -1 if (not left and a < 0) else 0
        elif left:
            value = (a << b) & mask
            if np.issubdtype(x.dtype, np.signedinteger) and value >= 1 << (bits - 1):
                value -= 1 << bits
        else:
            value = a >> b  # Python's >> is arithmetic for negative ints
        out[index] = value
    return out


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_all_ints(kernels, dtype, direction):
    bits = np.iinfo(dtype).bits
    x = full_range((6, 40), dtype)
    lo = -3 if np.issubdtype(dtype, np.signedinteger) else 0
    y = RNG.integers(lo, bits + 3, size=(40,)).astype(dtype)  # negative and too-wide shifts too
    got = kernels.op("BitShift", domain="", version=28)(x, y, direction=direction)
    want = shift_oracle(x, y, direction == "LEFT")
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_bitshift_unsigned_matches_onnxruntime_at_opset_11(kernels):
    x = full_range((5, 7), np.uint32)
    y = RNG.integers(0, 32, size=(7,)).astype(np.uint32)
    check(kernels, "BitShift", [x, y], {"direction": "LEFT"}, opset=11)
    check(kernels, "BitShift", [x, y], {"direction": "RIGHT"}, opset=11)
