"""A stand-in for cupy backed by host memory, so the eager CUDA call path (input checks, output
and workspace allocation, views through __cuda_array_interface__) and the CUDA provider's device
(stream, memory pool, copies) run on a machine without a GPU. Only what opforge uses is here,
under cupy's own names and parameters (tests/test_cupy_api.py checks them against cupy)."""
import contextlib
import itertools
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


class Stream:
    """A stream that records how it was made; entering it makes it current."""

    _pointers = itertools.count(0x1000)
    current = None

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.ptr, self.non_blocking, self.external = 0 if null else next(Stream._pointers), non_blocking, None

    @classmethod
    def from_external(cls, obj):
        version, ptr = obj.__cuda_stream__()
        stream = cls()
        stream.ptr, stream.external = ptr, obj
        return stream

    def __enter__(self):
        self.saved, Stream.current = Stream.current, self
        return self

    def __exit__(self, *exc):
        Stream.current = self.saved


class MemoryPool:
    def __init__(self, allocator=None):
        self.limit, self.used = 0, 0

    def set_limit(self, size=None, fraction=None):
        self.limit = int(size or 0)

    def get_limit(self):
        return self.limit

    def malloc(self, size):
        self.used += size
        return size

    def total_bytes(self):
        return self.used


def module() -> types.ModuleType:
    """A fresh fake `cupy` module; `allocations` records every empty() call, `allocators` the
    allocator of each using_allocator block."""
    _Device.current, Stream.current = 0, None
    cp = types.ModuleType("cupy")
    cp.ndarray = ndarray
    cp.allocations = []

    def empty(shape, dtype):
        cp.allocations.append((tuple(shape), str(dtype), _Device.current))
        return ndarray(np.empty(shape, dtype), _Device.current)

    def asarray(a, dtype=None, order=None):
        return a if isinstance(a, ndarray) else ndarray(np.array(a, dtype=dtype), _Device.current)

    def asnumpy(a, stream=None, order="C", out=None):
        return np.array(a.array) if isinstance(a, ndarray) else np.asarray(a)

    @contextlib.contextmanager
    def using_allocator(allocator=None):
        cp.allocators.append(allocator)
        yield

    null = Stream(null=True)
    cp.empty = empty
    cp.ascontiguousarray = lambda a, dtype=None: ndarray(np.ascontiguousarray(a.array, dtype), a.device.id)
    cp.asarray, cp.asnumpy, cp.allocators = asarray, asnumpy, []
    cp.cuda = types.SimpleNamespace(Device=_Device, Stream=Stream, MemoryPool=MemoryPool,
                                    using_allocator=using_allocator,
                                    get_current_stream=lambda device_id=-1: Stream.current or null,
                                    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    return cp
