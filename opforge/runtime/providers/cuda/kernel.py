"""CUDA kernels: the base class (attributes read once, compute on the device's array module)
and @cuda_kernel, which records a kernel where it is written; `register` adds them all to a
session's registry, bound to the session's device."""
from __future__ import annotations

import functools

import numpy as np

from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.providers.registry import CUDA

FLOATS = (np.dtype("float16"), np.dtype("float32"), np.dtype("float64"))
NUMBERS = FLOATS + tuple(np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                                "uint32", "uint64"))
# What a cupy array holds: strings and objects (refused at upload) and bfloat16 or the float8
# types stay on the CPU.
DEVICE_DTYPES = NUMBERS + (np.dtype(bool),)
CUDA_KERNELS: list = []   # (domain, op type, since version, kernel class)


def cuda_kernel(op_type: str, since: int = 1, domain: str = ""):
    """Class decorator: this class is the CUDA kernel of `op_type` from opset `since` on."""

    def record(cls):
        CUDA_KERNELS.append((domain, op_type, since, cls))
        return cls

    return record


def register(registry, device) -> int:
    """Adds every CUDA kernel to `registry`, bound to `device`; returns how many."""
    for domain, op_type, since, cls in CUDA_KERNELS:
        registry.register(domain, op_type, since, CUDA, functools.partial(cls, device=device))
    return len(CUDA_KERNELS)


class CudaKernel:
    """A node bound to a kernel on a device. Subclasses read attributes in `setup` (raising
    KernelNotFoundError for a form they do not implement, so the node goes to the CPU) and
    compute with `self.xp` (cupy; numpy in tests) in `compute(*inputs)`.

    `dtypes`: what the inputs in device memory may be (a node with another dtype, or an unknown
    one, goes to the CPU); `host_inputs` / `host_outputs`: indices of inputs read and outputs
    made in host memory (shapes, axes, starts...).
    """

    provider = CUDA
    dtypes: tuple = FLOATS
    host_inputs: tuple = ()
    host_outputs: tuple = ()

    def __init__(self, node, opset: int, device):
        self.node, self.opset, self.device, self.xp = node, opset, device, device.xp
        self._check_dtypes(node)
        self.setup(node, opset)

    def _check_dtypes(self, node) -> None:
        for index, name in enumerate(node.inputs):
            if index in self.host_inputs or not name:
                continue
            info = node.input_types[index] if index < len(node.input_types) else None
            dtype = getattr(info, "dtype", None)
            if dtype is None or np.dtype(dtype) not in self.dtypes:
                what = "an unknown dtype" if dtype is None else np.dtype(dtype).name
                raise KernelNotFoundError(f"the CUDA kernel of {node.op_type} does not take {what} "
                                          f"for input #{index}")

    def setup(self, node, opset: int) -> None:
        """Read attributes; raise KernelNotFoundError to decline the node."""

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def decline(self, why: str):
        raise KernelNotFoundError(f"the CUDA kernel of {self.node.op_type} {why}")

    def run(self, inputs: list) -> list:
        out = self.compute(*inputs)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def compute(self, *inputs):
        raise NotImplementedError
