"""Whether CUDA can be used in this process: a GPU the driver sees, and cupy able to use it."""
from opforge.builder.cuda_driver import driver_info


def unavailable_reason() -> str:
    """Why the CUDA provider cannot run here ("" when it can)."""
    problem = driver_info().problem
    if problem:
        return problem
    try:
        import cupy
    except Exception as exc:  # ImportError, or a cupy built for another CUDA
        return f"cupy does not import ({type(exc).__name__}: {exc}); pip install cupy-cuda13x"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # a driver older than cupy's CUDA runtime says so here
        return f"cupy cannot use the GPU ({type(exc).__name__}: {exc})"
    return "" if count > 0 else "cupy sees no GPU"


def available() -> bool:
    """True when a GPU is visible and cupy imports."""
    return not unavailable_reason()
