"""Whether CUDA can be used in this process: a GPU the driver sees, and cupy able to run kernels on it."""
from opforge.builder.cuda_driver import driver_info

_kernel_problems: dict = {}   # cupy module -> why it cannot run kernels ("" when it can), asked once


def unavailable_reason() -> str:
    """Why the CUDA provider cannot run here ("" when it can)."""
    problem = driver_info().problem
    if problem:
        return problem
    try:
        import cupy
    except Exception as exc:  # ImportError, or a cupy built for another CUDA
        return f"cupy does not import ({type(exc).__name__}: {exc}); pip install \"cupy-cuda13x[ctk]\""
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # a driver older than cupy's CUDA runtime says so here
        return f"cupy cannot use the GPU ({type(exc).__name__}: {exc})"
    if count == 0:
        return "cupy sees no GPU"
    if cupy not in _kernel_problems:
        _kernel_problems[cupy] = _kernel_problem(cupy)
    return _kernel_problems[cupy]


def _kernel_problem(cupy) -> str:
    """Why cupy cannot run the provider's kernels on GPU 0 ("" when it can): a GPU that is
    seen is not enough, cupy compiles its elementwise kernels with NVRTC at run time and
    multiplies matrices with cuBLAS, libraries that its wheel does not bring by itself."""
    try:
        with cupy.cuda.Device(0):
            x = cupy.arange(4, dtype=cupy.float32).reshape(2, 2)
            scaled, product = cupy.asnumpy(x * 2 + 1), cupy.asnumpy(x @ x)
    except Exception as exc:  # no NVRTC or cuBLAS, or no code in cupy for this GPU
        return (f"cupy cannot run kernels on the GPU ({type(exc).__name__}: {exc}); NVRTC and cuBLAS "
                "come with pip install \"cupy-cuda13x[ctk]\"")
    if scaled.tolist() != [[1, 3], [5, 7]] or product.tolist() != [[2, 3], [6, 11]]:
        return f"cupy's test kernels give wrong results on the GPU: {scaled.tolist()}, {product.tolist()}"
    return ""


def available() -> bool:
    """True when a GPU is visible and cupy runs kernels on it."""
    return not unavailable_reason()
