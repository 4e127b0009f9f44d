"""Einsum checked against numpy.einsum (onnxruntime lacks some of these forms)."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)

CASES = [
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
    ("...ij,...jk", [(2, 1, 4, 6), (3, 6, 5)]),      # implicit output, broadcast ellipsis
    ("ii->i", [(6, 6)]),
    ("bii->b", [(3, 5, 5)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("i,j->ij", [(4,), (3,)]),
    ("abc->cba", [(2, 3, 4)]),
    ("ij->", [(5, 7)]),
]


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_matches_numpy(kernels, equation, shapes):
    inputs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    want = np.einsum(equation, *[x.astype(np.float64) for x in inputs]).astype(np.float32)
    got = kernels.op("Einsum", domain="", version=12)(*inputs, equation=equation)
    assert_close(got, want, 1e-5, 1e-5, equation)
    assert_would_catch(got, want, 1e-5, 1e-5, equation)


def test_einsum_int64_and_onnxruntime(kernels):
    x, y = RNG.integers(-5, 5, (3, 4)), RNG.integers(-5, 5, (4, 2))
    got = kernels.op("Einsum", domain="", version=12)(x, y, equation="ij,jk->ik")
    np.testing.assert_array_equal(got, x @ y)
    a, b = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6,)).astype(np.float32)
    want = run_onnxruntime("Einsum", [a, b], {"equation": "ij,j->i"}, 12)[0]
    assert_close(kernels.op("Einsum", domain="", version=12)(a, b, equation="ij,j->i"), want, 1e-5, 1e-6, "ij,j->i")


def test_einsum_bad_equations(kernels):
    einsum = kernels.op("Einsum", domain="", version=12)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(opforge.OpError, match="rank"):
        einsum(x, equation="ijk->i")
    with pytest.raises(opforge.OpError, match="sizes"):
        einsum(x, x, equation="ij,ji->i")
    with pytest.raises(opforge.OpError, match="operands"):
        einsum(x, equation="ij,jk->ik")
    with pytest.raises(opforge.OpError, match="invalid character"):
        einsum(x, equation="i1->i")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_einsum_a_label_of_size_zero_and_another_size_is_refused(kernels, dtype):
    """'j' of size 0 in one operand and 3 in the other read past the empty one (SIGSEGV for
    16-bit floats); a size of 1 still broadcasts, to 0 as well, as numpy does."""
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    einsum = kernels.op("Einsum", domain="", version=12)
    x, y = np.ones((5, 2, 0), dtype), np.ones((5, 3, 4), dtype)
    with pytest.raises(opforge.OpError, match="label 'j' has sizes 0 and 3"):
        einsum(x, y, equation="bij,bjk->bik")
    with pytest.raises(opforge.OpError, match="label 'j' has sizes 3 and 0"):
        einsum(np.ones((5, 2, 3), dtype), np.ones((5, 0, 4), dtype), equation="bij,bjk->bik")
    got = einsum(np.ones((5, 2, 1), dtype), np.ones((5, 0, 4), dtype), equation="bij,bjk->bik")
    np.testing.assert_array_equal(got.astype(np.float32), np.zeros((5, 2, 4), np.float32))
