"""The standard ops the CUDA provider runs on cupy, one op family per file."""
from opforge.runtime.providers.cuda.kernels import (activations, conv, elementwise, matmul,  # noqa: F401
                                                    normalization, pool, reduce, shape)
