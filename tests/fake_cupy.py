"""A stand-in for cupy backed by host memory, so the eager CUDA call path (input checks, output
and workspace allocation, views through __cuda_array_interface__) runs on a machine without a
GPU. Only what opforge.builder.device_arrays uses is here."""
import types

import numpy as np


class ndarray:
    """A host array that presents itself as a GPU array on `device`."""

    def __init__(self, array: np.ndarray, device: int = 0):
        self.array, self.device = array, types.SimpleNamespace(id=device)

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)
    flags = property(lambda self: types.SimpleNamespace(c_contiguous=self.array.flags.c_contiguous))

    @property
    def __cuda_array_interface__(self):
        face = self.array.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
                "strides": face["strides"], "version": 3}


class _Device:
    current = 0

    def __init__(self, device: "int | None" = None):
        self.id = _Device.current if device is None else device

    def __enter__(self):
        self.saved, _Device.current = _Device.current, self.id
        return self

    def __exit__(self, *exc):
        _Device.current = self.saved


def module() -> types.ModuleType:
    """A fresh fake `cupy` module; `allocations` records every empty() call."""
    cp = types.ModuleType("cupy")
    cp.ndarray = ndarray
    cp.allocations = []

    def empty(shape, dtype):
        cp.allocations.append((tuple(shape), str(dtype), _Device.current))
        return ndarray(np.empty(shape, dtype), _Device.current)

    cp.empty = empty
    cp.ascontiguousarray = lambda a: ndarray(np.ascontiguousarray(a.array), a.device.id)
    cp.asarray = lambda a: a
    stream = types.SimpleNamespace(ptr=0)
    cp.cuda = types.SimpleNamespace(Device=_Device, get_current_stream=lambda: stream,
                                    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    return cp
