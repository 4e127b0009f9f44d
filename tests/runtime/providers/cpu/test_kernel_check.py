"""Tests of the kernel tests: the comparisons in kernel_check fail on a small wrong number.

For each family the issue names (Conv, Gemm/MatMul, pools, normalizations) the check passes on
the kernel's real output and fails once one element of it is off by 1e-3 relative, with the
tolerances the family's tests use.
"""
import numpy as np
import pytest

from tests.support.kernel_check import check
from tests.support.numeric import bump_one_element

RNG = np.random.default_rng(7)
F32 = dict(rtol=1e-4, atol=1e-5)   # as in test_kernels_nn


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


POOL = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
CASES = [
    ("Conv", [rand(1, 3, 9, 8), rand(4, 3, 3, 3), rand(4)], dict(pads=[1, 1, 1, 1]), 11, 1, F32),
    ("ConvTranspose", [rand(1, 3, 4, 4), rand(3, 2, 3, 3), rand(2)], dict(strides=[2, 2]), 11, 1, F32),
    ("Gemm", [rand(5, 6), rand(6, 7), rand(7)], dict(alpha=0.5), 13, 1, dict(F32, scale_atol=True)),
    ("MatMul", [rand(2, 3, 4), rand(4, 5)], {}, 13, 1, F32),
    ("MaxPool", [rand(2, 3, 9, 8)], POOL, 12, 2, F32),
    ("AveragePool", [rand(2, 3, 9, 8)], POOL, 19, 1, F32),
    ("LpPool", [rand(2, 3, 9, 8)], dict(POOL, p=2), 18, 1, F32),
    ("GlobalAveragePool", [rand(2, 3, 9, 8)], {}, 1, 1, F32),
    ("BatchNormalization", [rand(2, 3, 4, 5), rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.5], {}, 15, 1,
     dict(rtol=1e-5, atol=1e-6)),
    ("InstanceNormalization", [rand(2, 3, 4, 5), rand(3), rand(3)], {}, 6, 1, dict(rtol=1e-4, atol=1e-5)),
    ("LayerNormalization", [rand(2, 3, 8), rand(8), rand(8)], {}, 17, 3, dict(rtol=1e-4, atol=1e-5, scale_atol=True)),
]


def bump_floats(value):
    floating = value is not None and np.issubdtype(value.dtype, np.floating)
    return bump_one_element(value) if floating else value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_check_passes_the_kernel_and_fails_a_one_element_error(kernels, case):
    op_type, inputs, attrs, opset, outputs, tolerance = case
    check(kernels, op_type, inputs, attrs, opset=opset, num_outputs=outputs, **tolerance)
    with pytest.raises(AssertionError, match=f"{op_type} output #0"):
        check(kernels, op_type, inputs, attrs, opset=opset, num_outputs=outputs, tamper=bump_floats,
              **tolerance)
