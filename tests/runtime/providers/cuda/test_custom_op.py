"""Custom CUDA ops in a session (opforge/runtime/providers/cuda/custom_op.py): how their inputs
reach the op's library, on the stand-in GPU."""
import numpy as np

from opforge.builder.device_arrays import VECTOR_ALIGNMENT
from opforge.runtime.graph.graph import Node
from opforge.runtime.providers.cuda.custom_op import DeviceOpKernel
from tests.support.cuda_support import NumpyGPU, OnDevice


class RecordingOp:
    """An op handle that records the inputs it is called with instead of launching."""

    name = "scale"

    def __init__(self, accepts_strided: bool):
        self.accepts_strided, self.seen = accepts_strided, None

    def schema(self):
        return {"accepts_strided": self.accepts_strided}

    def attrs(self, given):
        return given

    def invoke_cuda(self, inputs, wanted, attrs, device, stream):
        self.seen = inputs
        return [inputs[0]]


def address(array) -> int:
    return array.__cuda_array_interface__["data"][0]


def run_on(x, accepts_strided: bool):
    op = RecordingOp(accepts_strided)
    DeviceOpKernel(op, Node("n", "scale", "com.example", ["x"], ["y"]), NumpyGPU()).run([x])
    return op.seen[0]


def test_an_offset_view_reaches_the_op_aligned_for_vector_loads():
    """x[1:] starts 4 bytes into its allocation: an op that takes no strided inputs gets a copy
    starting at a VECTOR_ALIGNMENT boundary, so its kernels may load float4s."""
    base = np.arange(9, dtype=np.float32).view(OnDevice)
    view = base[1:]
    assert address(base) % VECTOR_ALIGNMENT == 0 and address(view) % VECTOR_ALIGNMENT != 0
    seen = run_on(view, accepts_strided=False)
    assert address(seen) % VECTOR_ALIGNMENT == 0 and seen.flags.c_contiguous
    np.testing.assert_array_equal(seen, np.arange(1, 9))
    assert run_on(base, accepts_strided=False) is base   # aligned and contiguous: no copy


def test_an_op_accepting_strided_inputs_gets_views_as_they_are():
    view = np.arange(18, dtype=np.float32).view(OnDevice)[1::2]
    assert run_on(view, accepts_strided=True) is view
    assert run_on(view, accepts_strided=False).flags.c_contiguous
