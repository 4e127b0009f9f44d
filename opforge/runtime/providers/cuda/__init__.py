"""The CUDA execution provider: values as cupy arrays on one GPU, in a memory pool of the
session's; standard ops on cupy (cuBLAS for MatMul, Gemm and Conv); custom CUDA ops launched on
the session's stream. Importing this package imports no cupy: a session that uses CUDA does.
"""
from opforge.runtime.providers.cuda import kernels  # noqa: F401  (registers the kernels)
from opforge.runtime.providers.cuda.availability import available, unavailable_reason
from opforge.runtime.providers.cuda.kernel import register

__all__ = ["available", "register", "unavailable_reason"]
