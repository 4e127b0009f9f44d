"""GPU arrays for eager calls of CUDA ops: which inputs are accepted, output allocation, the stream.

opforge._core calls these when a CUDA op is called (`lib.op(x, ...)`); the checks against the
op's schema and the call itself stay in the one C++ call path. cupy is imported here, on the
first CUDA call, never at `import opforge`.
"""
from opforge.errors import OpError

_DLPACK_CUDA = 2  # DLDeviceType kDLCUDA

# Where the inputs of a CUDA op that takes no strided inputs start: a multiple of the widest
# vector load a kernel may do (float4, double2, int4). cupy's allocations are 256-byte aligned,
# but a view starting inside one (x[1:]) is aligned to its element size only.
VECTOR_ALIGNMENT = 16


def prepare(op: str, names: list, args: tuple, accepts_strided: bool) -> tuple:
    """(cupy arrays or None, device id, cupy's current stream on it as an int) for the inputs;
    `names` are the op's declared inputs (the last may be variadic).

    Raises OpError when no GPU is usable, TypeError for an input in host memory (a numpy
    array: nothing is copied to the device behind the caller's back), ImportError without cupy,
    ValueError for inputs on two GPUs.
    """
    _require_device(op)
    for index, value in enumerate(args):
        if value is not None and not _on_gpu(value):
            name = names[min(index, len(names) - 1)] if names else "?"
            raise TypeError(f"{op}(): input '{name}' (#{index}) is a {_kind(value)} in host "
                            f"memory, but {op} is a CUDA op and takes GPU arrays: pass "
                            "cupy.asarray(x) (opforge does not copy to the GPU behind your back)")
    cp = import_cupy(op)
    arrays = [None if value is None else _as_cupy(cp, value) for value in args]
    devices = sorted({a.device.id for a in arrays if a is not None})
    if len(devices) > 1:
        raise ValueError(f"{op}(): inputs are on GPUs {devices}; a CUDA op runs on one GPU: copy them "
                         "to one (with cupy.cuda.Device(n): cupy.asarray(x))")
    device = devices[0] if devices else cp.cuda.Device().id
    with cp.cuda.Device(device):
        arrays = laid_out(cp, arrays, accepts_strided)
        stream = cp.cuda.get_current_stream().ptr
    return arrays, device, stream


def laid_out(xp, arrays: list, accepts_strided: bool) -> list:
    """The GPU `arrays` as an op gets them: as they are if it accepts strided inputs, else
    C-contiguous and starting at a multiple of VECTOR_ALIGNMENT bytes, copied on the current
    stream where they are not (`xp`: cupy, or a stand-in array module)."""
    if accepts_strided:
        return arrays
    return [None if a is None else _laid_out(xp, a) for a in arrays]


def _laid_out(xp, a):
    if not a.flags.c_contiguous:
        return xp.ascontiguousarray(a)   # a new allocation, aligned
    if a.__cuda_array_interface__["data"][0] % VECTOR_ALIGNMENT:
        return a.copy()
    return a


def empty(shape: tuple, dtype: str, device: int):
    """A new cupy array on `device` (outputs and workspace of an eager call)."""
    import cupy as cp

    with cp.cuda.Device(device):
        return cp.empty(shape, dtype=dtype)


def import_cupy(op: str = ""):
    """cupy, or ImportError saying how to install it."""
    try:
        import cupy
    except ImportError as exc:
        who = f"{op} is a CUDA op: calling it" if op else "CUDA ops need cupy: using them"
        raise ImportError(f"{who} needs cupy for GPU arrays: pip install cupy-cuda13x "
                          f"(or pip install \"opforge[cuda]\"); importing it said: {exc}") from None
    return cupy


def _require_device(op: str) -> None:
    from opforge.builder.cuda_driver import driver_info

    problem = driver_info().problem
    if problem:
        raise OpError(f"{op}: no CUDA device is available: {problem}")


def _on_gpu(value) -> bool:
    if hasattr(value, "__cuda_array_interface__"):
        return True
    device = getattr(value, "__dlpack_device__", None)
    return device is not None and device()[0] == _DLPACK_CUDA


def _as_cupy(cp, value):
    if isinstance(value, cp.ndarray):
        return value
    if hasattr(value, "__cuda_array_interface__"):
        return cp.asarray(value)   # a view of the same memory
    return cp.from_dlpack(value)


def _kind(value) -> str:
    kind = type(value)
    return "numpy array" if kind.__module__ == "numpy" else f"{kind.__module__}.{kind.__name__}"
