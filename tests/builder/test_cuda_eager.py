"""Eager calls of CUDA ops: `lib.op(cupy_array)`. The checks run anywhere (a stand-in cupy and
driver where there is no GPU); tests marked `cuda` launch kernels and need a GPU with cupy."""
import sys

import numpy as np
import pytest

from tests.support import fake_cupy
import opforge
from tests.support.cuda_support import build_test_library, gpu_unavailable, requires_nvcc
from opforge.builder import cuda_driver

pytestmark = requires_nvcc


@pytest.fixture(scope="module")
def lib():
    """The test CUDA library (tests/builder/cuda_ops), built once into the shared test cache."""
    return build_test_library()


@pytest.fixture
def fake_gpu(monkeypatch):
    """A driver that reports one GPU and a cupy made of host memory."""
    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("90",), ""))
    cp = fake_cupy.module()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp


@pytest.mark.skipif(not gpu_unavailable(), reason="this machine has a GPU")
def test_without_a_device_the_call_says_so(lib):
    with pytest.raises(opforge.OpError, match="^scale: no CUDA device is available: "):
        lib.scale(np.ones(3, np.float32))


def test_numpy_input_is_refused_with_the_reason(lib, fake_gpu):
    with pytest.raises(TypeError, match=r"scale\(\): input 'X' \(#0\) is a numpy array in host memory, "
                                        r"but scale is a CUDA op and takes GPU arrays: pass cupy.asarray"):
        lib.scale(np.ones(3, np.float32))


def test_missing_cupy_says_what_to_install(lib, monkeypatch):
    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("90",), ""))
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    gpu_array = fake_cupy.ndarray(np.ones(3, np.float32))
    with pytest.raises(ImportError, match="pip install cupy-cuda13x"):
        lib.scale(gpu_array)


def test_inputs_on_two_gpus_are_refused(lib, fake_gpu):
    a = fake_cupy.ndarray(np.ones(3, np.float32), device=0)
    b = fake_cupy.ndarray(np.ones(3, np.float32), device=1)
    with pytest.raises(ValueError, match=r"inputs are on GPUs \[0, 1\]"):
        lib.add_via_workspace(a, b)


def test_schema_checks_apply_to_gpu_arrays(lib, fake_gpu):
    x = fake_cupy.ndarray(np.ones(3, np.int32))
    with pytest.raises(TypeError, match=r"input 'X' \(#0\) has dtype int32; expected float32, float64"):
        lib.scale(x)
    with pytest.raises(TypeError, match=r"takes 2 inputs, got 1"):
        lib.add_via_workspace(fake_cupy.ndarray(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match="alpah"):
        lib.scale(fake_cupy.ndarray(np.ones(3, np.float32)), alpah=2.0)


def test_call_allocates_outputs_and_workspace_on_the_inputs_gpu(lib, fake_gpu):
    """Up to the launch: the stand-in GPU has no driver, so the library itself refuses to run."""
    a = fake_cupy.ndarray(np.ones((2, 3), np.float32), device=1)
    with pytest.raises(opforge.OpError, match="^add_via_workspace: no CUDA device is available"):
        lib.add_via_workspace(a, a)
    assert fake_gpu.allocations == [((2, 3), "float32", 1), ((24,), "uint8", 1)]


def test_offset_view_is_passed_aligned_for_vector_loads(fake_gpu):
    """x[1:] starts 4 bytes into its allocation: an op taking no strided inputs gets a copy that
    starts at a VECTOR_ALIGNMENT boundary; one that takes strided inputs gets the view itself."""
    from opforge.builder.device_arrays import VECTOR_ALIGNMENT, prepare

    view = fake_cupy.ndarray(np.arange(9, dtype=np.float32))[1:]
    assert view.data.ptr % VECTOR_ALIGNMENT != 0
    (given,), _, _ = prepare("scale", ["X"], (view,), False)
    assert given.data.ptr % VECTOR_ALIGNMENT == 0
    np.testing.assert_array_equal(given.get(), np.arange(1, 9))
    assert prepare("scale", ["X"], (view,), True)[0][0] is view


def test_infer_reading_a_gpu_value_is_the_ops_error(lib, fake_gpu):
    """infer runs on the host: the value of an input in GPU memory is hidden from it, so reading
    it is an error naming the op, where dereferencing the device pointer would crash."""
    x = fake_cupy.ndarray(np.ones(4, np.float32))
    times = fake_cupy.ndarray(np.array([2], np.int64))
    with pytest.raises(opforge.OpError, match=r"^tiled: infer reads the value of an input in GPU memory"):
        lib.tiled(x, times)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scale_on_cupy_arrays(lib, dtype):
    import cupy as cp

    x = cp.random.standard_normal((257, 3)).astype(dtype)
    y = lib.scale(x, alpha=2.5)
    assert isinstance(y, cp.ndarray) and y.dtype == x.dtype and y.shape == x.shape
    assert y.device.id == x.device.id
    np.testing.assert_allclose(cp.asnumpy(y), 2.5 * cp.asnumpy(x), rtol=1e-6)


@pytest.mark.cuda
def test_strided_input_is_made_contiguous(lib):
    import cupy as cp

    x = cp.random.standard_normal((64, 64)).astype(cp.float32).T
    np.testing.assert_allclose(cp.asnumpy(lib.scale(x, alpha=-1.0)), -cp.asnumpy(x), rtol=1e-6)


@pytest.mark.cuda
def test_device_workspace_and_two_inputs(lib):
    import cupy as cp

    a = cp.arange(1000, dtype=cp.float32)
    b = cp.full(1000, 0.5, dtype=cp.float32)
    np.testing.assert_allclose(cp.asnumpy(lib.add_via_workspace(a, b)), np.arange(1000) + 0.5)


@pytest.mark.cuda
def test_kernel_launched_from_a_host_cpp_file(lib):
    import cupy as cp

    x = cp.linspace(-1, 1, 33, dtype=cp.float32)
    np.testing.assert_array_equal(cp.asnumpy(lib.negate(x)), -cp.asnumpy(x))


@pytest.mark.cuda
def test_runs_on_cupys_current_stream(lib):
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.arange(1 << 20, dtype=cp.float32)
        y = lib.scale(x, alpha=3.0)
        z = y + 1  # cupy work queued after the op on the same stream
    stream.synchronize()
    np.testing.assert_allclose(cp.asnumpy(z), 3.0 * np.arange(1 << 20, dtype=np.float32) + 1)


@pytest.mark.cuda
def test_input_from_another_library_through_cuda_array_interface(lib):
    import cupy as cp

    class Foreign:  # what numba or torch arrays offer
        def __init__(self, array):
            self.__cuda_array_interface__ = array.__cuda_array_interface__
            self.keep = array

    x = cp.arange(10, dtype=cp.float32)
    np.testing.assert_allclose(cp.asnumpy(lib.scale(Foreign(x), alpha=2.0)), 2 * np.arange(10))


@pytest.mark.cuda
def test_failed_launch_is_the_ops_error(lib):
    import cupy as cp

    with pytest.raises(opforge.OpError, match="^bad_launch: a kernel launch failed: cudaErrorInvalidConfiguration"):
        lib.bad_launch(cp.ones(8, cp.float32))
    np.testing.assert_allclose(cp.asnumpy(lib.scale(cp.ones(4, cp.float32), alpha=2.0)), 2.0)  # still usable


@pytest.mark.cuda
def test_cuda_check_names_the_call_and_the_op(lib):
    import cupy as cp

    with pytest.raises(opforge.OpError, match=r"^bad_call: CUDA error cudaErrorInvalidDevice .* in cudaSetDevice\(-1\) at .*elementwise.cu:\d+"):
        lib.bad_call(cp.ones(8, cp.float32))


@pytest.mark.cuda
def test_numpy_refused_on_a_real_gpu(lib):
    with pytest.raises(TypeError, match="in host memory"):
        lib.scale(np.ones(3, np.float32))


@pytest.mark.cuda
def test_call_leaves_the_callers_current_gpu_current(lib):
    """The op's GPU is made current for its launch only: the caller's current GPU stays current."""
    import cupy as cp

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    with cp.cuda.Device(1):
        x = cp.ones(8, cp.float32)
    with cp.cuda.Device(0):
        y = lib.scale(x, alpha=2.0)
        assert cp.cuda.runtime.getDevice() == 0
    assert y.device.id == 1
