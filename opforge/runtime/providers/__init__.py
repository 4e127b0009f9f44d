"""Execution providers; importing this package registers their kernels."""
from opforge.runtime.providers import reference  # noqa: F401
from opforge.runtime.registry import CPU, CUDA, REFERENCE


def get_available_providers() -> list:
    """The providers that can run here, in priority order (as onnxruntime's function of that
    name): CUDAExecutionProvider only when cupy imports and a GPU is visible."""
    from opforge.runtime.providers.cuda import available

    return ([CUDA] if available() else []) + [CPU, REFERENCE]
