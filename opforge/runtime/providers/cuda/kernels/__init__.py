"""The standard ops the CUDA provider runs on cupy, one op family per file."""
from opforge.runtime.providers.cuda.kernels import (conv, elementwise, matmul, normalization,  # noqa: F401
                                                    pool, reduce, shape)
