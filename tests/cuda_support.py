"""What CUDA tests need: nvcc (to build) and a GPU with cupy (to launch), and small helpers."""
import functools

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
