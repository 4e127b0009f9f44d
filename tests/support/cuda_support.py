"""What CUDA tests need: nvcc (to build), a GPU with cupy (to launch), the test CUDA library, and
two stand-in GPUs on which the CUDA provider's kernels run without one: numpy (NumpyGPU), and
the provider's own device over the stand-in cupy (cupy_gpu), which orders work by streams."""
import contextlib
import functools
from pathlib import Path

import numpy as np
import pytest


@functools.lru_cache(maxsize=None)
def gpu_unavailable() -> str:
    """Why kernels cannot be launched here ("" when they can): cupy missing, or no GPU."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a cupy that cannot load its CUDA libraries
        return f"cupy does not import ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"cupy sees no GPU ({type(exc).__name__}: {exc})"
    return "" if count > 0 else "cupy sees no GPU"


@functools.lru_cache(maxsize=None)
def nvcc_path() -> "str | None":
    from opforge.builder.cuda_toolchain import find_nvcc

    try:
        return find_nvcc()
    except Exception:
        return None


requires_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc (the CUDA compiler)")


CUDA_OPS = Path(__file__).resolve().parents[1] / "builder" / "cuda_ops"
SOURCES = ["elementwise.cu", "launch.cu", "host_ops.cpp"]


def build_test_library(folder: Path = CUDA_OPS, **kwargs):
    """The test CUDA library (tests/builder/cuda_ops: CUDA ops, a CPU op, a launch from a .cpp)."""
    import opforge

    return opforge.CustomOpBuilder("cuda_test_ops", [folder / s for s in SOURCES],
                                   extra_include_paths=[folder], **kwargs).load()


class OnDevice(np.ndarray):
    """Host memory standing in for GPU memory (the kernels compute with numpy)."""

    @property
    def __cuda_array_interface__(self):
        face = self.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
                "strides": face["strides"], "version": 3}


class NumpyGPU:
    """A stand-in GPU for whole sessions: the CUDA provider's kernels run with numpy as their
    array module; values on it are OnDevice arrays."""

    name, provider, id, stream_ptr = "cuda:0", "CUDAExecutionProvider", 0, 0

    def __init__(self):
        self.xp = np
        self.entered = 0
        self.uploads = self.downloads = 0   # copies made, to check that bound values are not copied

    def active(self):
        self.entered += 1
        return contextlib.nullcontext(self)

    def run(self, synchronize=True):
        return contextlib.nullcontext(self)   # numpy's work is done when its call returns

    def synchronize(self):
        pass

    def upload(self, value):
        if value is None or isinstance(value, OnDevice):   # already here, as cupy.asarray passes it
            return value
        array = np.array(value)
        if array.dtype.kind in "OUSV":
            raise ValueError(f"Unsupported dtype {array.dtype}")   # as cupy.asarray refuses it
        self.uploads += 1
        return array.view(OnDevice)

    def download(self, value):
        self.downloads += 1
        return np.asarray(value)


@pytest.fixture
def numpy_gpu(monkeypatch):
    """Sessions asking for CUDA get a NumpyGPU (the CUDA provider's kernels, run with numpy)."""
    from opforge.runtime import session as session_module

    gpu = NumpyGPU()
    monkeypatch.setattr(session_module, "_cuda_usable", lambda: True)
    monkeypatch.setattr(session_module, "_cuda_device",
                        lambda providers, options: gpu if "CUDAExecutionProvider" in providers else None)
    return gpu


@pytest.fixture
def cupy_gpu(monkeypatch):
    """Sessions asking for CUDA get the CUDA provider as it runs on a GPU (its CudaDevice: stream,
    memory pool, copies; kernels on cupy and cupyx) over the stand-in cupy, which it returns."""
    import sys

    from opforge.runtime import session as session_module
    from tests.support import fake_cupy

    cp, cupyx = fake_cupy.module(), fake_cupy.cupyx_module()
    for name, module in (("cupy", cp), ("cupyx", cupyx), ("cupyx.scipy", cupyx.scipy),
                         ("cupyx.scipy.special", cupyx.scipy.special)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(session_module, "_cuda_usable", lambda: True)
    return cp
