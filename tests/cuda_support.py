"""What CUDA tests need: nvcc (to build) and a GPU with cupy (to launch), and small helpers."""
import functools
from pathlib import Path

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


CUDA_OPS = Path(__file__).parent / "builder" / "cuda_ops"
SOURCES = ["elementwise.cu", "launch.cu", "host_ops.cpp"]


def build_test_library(folder: Path = CUDA_OPS, **kwargs):
    """The test CUDA library (tests/builder/cuda_ops: CUDA ops, a CPU op, a launch from a .cpp)."""
    import opforge

    return opforge.CustomOpBuilder("cuda_test_ops", [folder / s for s in SOURCES],
                                   extra_include_paths=[folder], **kwargs).load()
