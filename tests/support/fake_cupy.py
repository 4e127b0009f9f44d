"""A stand-in for cupy backed by host memory, so the eager CUDA call path (input checks, output
and workspace allocation, views through __cuda_array_interface__) and the CUDA provider (its
device, stream, memory pool, copies and kernels) run on a machine without a GPU. Only what
opforge uses is here, under cupy's own names and parameters (tests/test_cupy_api.py checks them
against cupy); other array functions are numpy's, run as device work.

It is as strict as cupy where a GPU would fail: arrays of strings or objects are refused at
upload, host arrays as operands of device math, and implicit conversion to numpy; a memory
pool's limit belongs to one device. And it catches what a GPU would only get wrong some of the
time: work is ordered by streams. Each allocation remembers the stream that last wrote it, and
reading it on another stream that waited for no event of the writer, with no host
synchronisation of the writer in between, raises UnorderedRead.
"""
import contextlib
import inspect
import itertools
import operator
import types
import weakref

import numpy as np

LEGACY_STREAM = 1   # what __cuda_array_interface__ says for the null stream (0 is not allowed there)


class UnorderedRead(RuntimeError):
    """Device memory read on a stream not ordered after the write that filled it."""


class _Clock:
    """Stream order: the operations queued on each stream (ticks), which ticks of other streams
    each stream waits for (through events), and which ones the host has waited for."""

    def __init__(self):
        self.ticks: dict = {}          # stream ptr -> operations queued on it so far
        self.waits: dict = {}          # stream ptr -> {other ptr: tick it waits for}
        self.host: dict = {}           # stream ptr -> tick the host has waited for
        self.non_blocking: dict = {}   # stream ptr -> made non-blocking (not ordered with the null stream)
        self.device: dict = {}         # stream ptr -> its device

    def enqueue(self, ptr: int) -> tuple:
        self.ticks[ptr] = self.ticks.get(ptr, 0) + 1
        return ptr, self.ticks[ptr]

    def snapshot(self, ptr: int) -> dict:
        """What work on `ptr` queued from now on comes after: its own work so far and what it waits for."""
        seen = dict(self.waits.get(ptr, {}))
        seen[ptr] = self.ticks.get(ptr, 0)
        return seen

    def wait(self, ptr: int, seen: dict) -> None:
        _merge(self.waits.setdefault(ptr, {}), seen)

    def host_wait(self, seen: dict) -> None:
        _merge(self.host, seen)

    def check_read(self, reader: int, written, what: str) -> None:
        """Raises UnorderedRead unless a read on stream `reader` comes after the write `written`."""
        if written is None:
            return
        writer, tick = written
        if writer == reader or self._implicitly_ordered(reader, writer):
            return
        if self.waits.get(reader, {}).get(writer, 0) >= tick or self.host.get(writer, 0) >= tick:
            return
        raise UnorderedRead(f"{what} read on stream {reader:#x} while the write to it queued on stream "
                            f"{writer:#x} may not have run: no event of that stream was waited for, and "
                            "the host did not synchronise it")

    def _implicitly_ordered(self, a: int, b: int) -> bool:
        """The legacy null stream and blocking streams wait for each other."""
        return (a == 0 and not self.non_blocking.get(b, False)) or (b == 0 and not self.non_blocking.get(a, False))


def _merge(into: dict, seen: dict) -> None:
    for ptr, tick in seen.items():
        into[ptr] = max(into.get(ptr, 0), tick)


_clock = _Clock()
_allocator = [None]   # the allocator of the innermost using_allocator block


class _Memory:
    """One allocation, shared by the arrays viewing it: its device, its pool block, and its last
    write as (stream ptr, tick), None once the host has written it directly."""

    def __init__(self, device: int, nbytes: int = 0):
        self.device, self.written = device, None
        allocate = _allocator[0]
        self.block = allocate(nbytes) if allocate is not None and nbytes else None

    def write(self) -> None:
        self.written = _clock.enqueue(_current_stream().ptr)


class ndarray(np.lib.mixins.NDArrayOperatorsMixin):
    """A host array that presents itself as a GPU array on `device` (the current one by default)."""

    def __init__(self, array, device: "int | None" = None, memory: "_Memory | None" = None):
        self.array = np.asarray(array)
        self._memory = memory or _Memory(_Device.current if device is None else device)

    device = property(lambda self: types.SimpleNamespace(id=self._memory.device))
    data = property(lambda self: types.SimpleNamespace(ptr=self.array.__array_interface__["data"][0]))

    @property
    def __cuda_array_interface__(self):
        face = self.array.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
                "strides": face["strides"], "version": 3, "stream": _current_stream().ptr or LEGACY_STREAM}

    def __getattr__(self, name):
        if name.startswith("__") or name in ("array", "_memory"):
            raise AttributeError(name)   # numpy asks instances for __array_interface__: cupy has none
        value = getattr(self.array, name)
        if callable(value):
            method = getattr(np.ndarray, name)
            return lambda *args, **kwargs: _device_call(method, (self,) + args, kwargs)
        return _wrap(value, [self]) if isinstance(value, np.ndarray) else value

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
                        "construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _device_call(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _device_call(func, args, kwargs)

    def __getitem__(self, index):
        return _device_call(operator.getitem, (self, index), {})

    def __setitem__(self, index, value):
        _device_call(operator.setitem, (self, index, value), {}, writes=self)

    def __len__(self):
        return len(self.array)

    def __bool__(self):
        return bool(self.get())

    def __float__(self):
        return float(self.get())

    def __int__(self):
        return int(self.get())

    def get(self, stream=None, order="C", out=None, blocking=True):
        """A numpy copy, read on `stream` (the current one by default), which the host then waits for."""
        stream = stream or _current_stream()
        _clock.check_read(stream.ptr, self._memory.written, "an array copied to the host")
        _clock.host_wait(_clock.snapshot(stream.ptr))
        return np.array(self.array, order=order)

    def __repr__(self):
        return f"fake_cupy.ndarray({self.array!r}, device={self._memory.device})"


def _device_call(fn, args, kwargs, writes: "ndarray | None" = None):
    """fn (a numpy routine) as device work on the current stream: device operands are read
    there (unless the result is a view of them), host arrays are refused as cupy refuses them,
    results are device arrays written there; `writes` (or `out=`) is written in place."""
    stream = _current_stream().ptr
    sources: list = []
    result = fn(*_unwrap(args, sources), **{k: _unwrap(v, sources if k != "out" else []) for k, v in kwargs.items()})
    out = kwargs.get("out")
    targets = [writes] if writes is not None else list(out if isinstance(out, tuple) else (out,)) if out is not None else []
    for source in sources:
        if source is writes or (not targets and _is_view(result, source)):
            continue   # a view reads nothing
        _clock.check_read(stream, source._memory.written, "an array")
    for target in targets:
        target._memory.write()
    if writes is not None:
        return result
    if targets:
        return targets[0] if len(targets) == 1 else tuple(targets)
    return _wrap(result, sources)


def _unwrap(value, sources: list):
    if isinstance(value, ndarray):
        sources.append(value)
        return value.array
    if isinstance(value, np.ndarray) and value.ndim:
        raise TypeError(f"Unsupported type {type(value)}")   # cupy's words for a host array operand
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, sources) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, sources) for k, v in value.items()}
    return value


def _is_view(result, source: ndarray) -> bool:
    return isinstance(result, np.ndarray) and np.may_share_memory(result, source.array)


def _wrap(result, sources: list):
    """Results of device work as device arrays: views share their source's memory, anything
    new is written on the current stream; Python scalars and lists were read by the host."""
    if isinstance(result, (np.ndarray, np.generic)):
        result = np.asarray(result)
        for source in sources:
            if np.may_share_memory(result, source.array):
                return ndarray(result, memory=source._memory)
        memory = _Memory(_Device.current, result.nbytes)
        memory.write()
        return ndarray(result, memory=memory)
    if isinstance(result, tuple):
        return tuple(_wrap(r, sources) for r in result)
    if result is not None:
        _clock.host_wait(_clock.snapshot(_current_stream().ptr))   # .item(), .tolist(): cupy blocks
    return result


class _Device:
    current = 0

    def __init__(self, device: "int | None" = None):
        self.id = _Device.current if device is None else device
        self.saved: list = []

    def __enter__(self):
        self.saved.append(_Device.current)
        _Device.current = self.id
        return self

    def __exit__(self, *exc):
        _Device.current = self.saved.pop()   # as cupy: whatever happened to the current device inside

    def use(self):
        _Device.current = self.id

    def synchronize(self):
        """The host waits for every stream of this device."""
        _clock.host_wait({ptr: tick for ptr, tick in _clock.ticks.items()
                          if _clock.device.get(ptr, self.id) == self.id})


class Event:
    """A point in a stream's work: what waiting for it orders after."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.seen: dict = {}

    def record(self, stream=None):
        self.seen = _clock.snapshot((stream or _current_stream()).ptr)

    def synchronize(self):
        _clock.host_wait(self.seen)


class Stream:
    """A stream: a pointer, the device it was made on, and entering it makes it current there."""

    _pointers = itertools.count(0x1000)
    null: "Stream"
    _current: dict = {}     # device -> stack of streams entered on it
    _entered_on: list = []  # the device of each stream entered, innermost last

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.ptr = 0 if null else next(Stream._pointers)
        self.device_id = -1 if null else _Device.current
        self.non_blocking, self.external = non_blocking, None
        if not null:
            _clock.non_blocking[self.ptr] = non_blocking
            _clock.device[self.ptr] = self.device_id

    @classmethod
    def from_external(cls, obj):
        version, ptr = obj.__cuda_stream__()
        stream = cls.__new__(cls)
        stream.ptr, stream.device_id, stream.non_blocking, stream.external = ptr, -1, None, obj
        return stream

    def __eq__(self, other):
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self):
        return self.ptr

    def __enter__(self):
        if self.device_id not in (-1, _Device.current):
            raise RuntimeError(f"the stream of device {self.device_id} entered while device "
                               f"{_Device.current} is current")
        Stream._current.setdefault(_Device.current, []).append(self)
        Stream._entered_on.append(_Device.current)
        return self

    def __exit__(self, *exc):
        Stream._current[Stream._entered_on.pop()].pop()

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event):
        _clock.wait(self.ptr, event.seen)

    def synchronize(self):
        _clock.host_wait(_clock.snapshot(self.ptr))


Stream.null = Stream(null=True)


def _current_stream(device_id: int = -1) -> Stream:
    stack = Stream._current.get(_Device.current if device_id == -1 else device_id)
    return stack[-1] if stack else Stream.null


class OutOfMemoryError(MemoryError):
    """What a pool over its limit raises (cupy.cuda.memory.OutOfMemoryError)."""


class _Block:
    """Bytes taken from a pool, given back when the memory holding them goes."""

    def __init__(self, size: int):
        self.size = size


class MemoryPool:
    """A pool whose limit and bytes in use are per device, as cupy's are: set_limit and
    get_limit apply to the current device."""

    def __init__(self, allocator=None):
        self.limits: dict = {}
        self.used: dict = {}

    def set_limit(self, size=None, fraction=None):
        self.limits[_Device.current] = int(size or 0)

    def get_limit(self):
        return self.limits.get(_Device.current, 0)

    def malloc(self, size):
        device = _Device.current
        used, limit = self.used.get(device, 0), self.limits.get(device, 0)
        if limit and used + size > limit:
            raise OutOfMemoryError(f"Out of memory allocating {size:,} bytes (allocated so far: {used:,} "
                                   f"bytes, limit set to: {limit:,} bytes).")
        self.used[device] = used + size
        block = _Block(size)
        weakref.finalize(block, self._free, device, size)
        return block

    def _free(self, device: int, size: int) -> None:
        self.used[device] -= size

    def used_bytes(self):
        return self.used.get(_Device.current, 0)

    def total_bytes(self):
        return self.used_bytes()


class _Module(types.ModuleType):
    """The fake cupy: its own names, then numpy's routines run as device work."""

    def __getattr__(self, name):
        value = getattr(np, name)
        if isinstance(value, np.ufunc) or (inspect.isroutine(value) and not inspect.isclass(value)):
            return lambda *args, **kwargs: _device_call(value, args, kwargs)
        return value


def _supported(dtype: np.dtype) -> np.dtype:
    if dtype.kind in "OUSV" or dtype.byteorder == ">":
        raise ValueError(f"Unsupported dtype {dtype}")   # cupy's words
    return dtype


class _Interface:
    """A numpy view of memory given through __cuda_array_interface__ (host memory here)."""

    def __init__(self, face: dict):
        self.__array_interface__ = {k: face[k] for k in ("shape", "typestr", "data", "strides", "version")}


def module() -> types.ModuleType:
    """A fresh fake `cupy` module; `allocations` records every empty() call, `allocators` the
    allocator of each using_allocator block."""
    global _clock
    _clock = _Clock()
    _Device.current, Stream._current, Stream._entered_on, _allocator[0] = 0, {}, [], None
    Stream.null = Stream(null=True)
    cp = _Module("cupy")
    cp.ndarray = ndarray
    cp.allocations = []

    def empty(shape, dtype=float, order="C"):
        dtype = _supported(np.dtype(dtype))
        cp.allocations.append((tuple(np.atleast_1d(shape).tolist()) if np.ndim(shape) else (int(shape),),
                               str(dtype), _Device.current))
        array = np.empty(shape, dtype)
        return ndarray(array, memory=_Memory(_Device.current, array.nbytes))

    def asarray(a, dtype=None, order=None):
        """A device array: `a` itself when it is one; a view of memory given through
        __cuda_array_interface__ (whose stream the host first waits for, as cupy does); else a
        copy of host data queued on the current stream."""
        if isinstance(a, ndarray):
            return a if dtype is None else a.astype(dtype, copy=False)
        face = getattr(a, "__cuda_array_interface__", None)
        if face is not None:
            stream = face.get("stream")
            if stream is not None:
                _clock.host_wait(_clock.snapshot(0 if stream == LEGACY_STREAM else stream))
            return ndarray(np.asarray(_Interface(face)), memory=_Memory(_Device.current))
        host = np.asarray(a, dtype=dtype)
        _supported(host.dtype)
        memory = _Memory(_Device.current, host.nbytes)
        memory.write()
        return ndarray(np.array(host, order=order or "K"), memory=memory)

    def asnumpy(a, stream=None, order="C", out=None):
        return a.get(stream=stream, order=order) if isinstance(a, ndarray) else np.asarray(a, order=order)

    def ascontiguousarray(a, dtype=None):
        return _device_call(np.ascontiguousarray, (a,), {"dtype": dtype})

    def as_strided(x, shape=None, strides=None):
        return _device_call(np.lib.stride_tricks.as_strided, (x,), {"shape": shape, "strides": strides})

    @contextlib.contextmanager
    def using_allocator(allocator=None):
        cp.allocators.append(allocator)
        saved, _allocator[0] = _allocator[0], allocator
        try:
            yield
        finally:
            _allocator[0] = saved

    def set_device(device):
        _Device.current = device

    cp.empty, cp.asarray, cp.asnumpy, cp.ascontiguousarray = empty, asarray, asnumpy, ascontiguousarray
    cp.allocators = []
    cp.lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=as_strided))
    cp.cuda = types.SimpleNamespace(
        Device=_Device, Stream=Stream, Event=Event, MemoryPool=MemoryPool, using_allocator=using_allocator,
        get_current_stream=_current_stream,
        memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 2, getDevice=lambda: _Device.current,
                                      setDevice=set_device))
    return cp


def cupyx_module() -> types.ModuleType:
    """A fake `cupyx` with cupyx.scipy.special.erf typed as cupy types it: no float16 loop, so
    a float16 input comes back float32 (cupy 14 adds e->d: float64)."""
    import math

    def erf(x):
        wide = x.astype(np.promote_types(x.dtype, np.float32), copy=False)
        return _device_call(np.vectorize(math.erf, otypes=[wide.dtype]), (wide,), {})

    cupyx = types.ModuleType("cupyx")
    cupyx.scipy = types.ModuleType("cupyx.scipy")
    cupyx.scipy.special = types.ModuleType("cupyx.scipy.special")
    cupyx.scipy.special.erf = erf
    return cupyx
