"""What the NVIDIA driver says, asked through libcuda with ctypes (no subprocess, no cupy):
the compute capabilities of the visible GPUs, or why there are none. Asked once per process."""
from typing import NamedTuple

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_found = None


class DriverInfo(NamedTuple):
    """capabilities: "90", "80"... one per distinct visible GPU; problem: why none ("" if some)."""

    capabilities: tuple
    problem: str


def driver_info() -> DriverInfo:
    """The visible GPUs' compute capabilities, or why there are none (read once per process)."""
    global _found
    if _found is None:
        _found = _probe()
    return _found


def _probe() -> DriverInfo:
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return DriverInfo((), "no NVIDIA driver is installed (libcuda.so.1 does not load)")
    status = cuda.cuInit(0)
    count = ctypes.c_int(0)
    if status == 0:
        status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return DriverInfo((), f"the NVIDIA driver reports CUDA error {status} ({_error_name(cuda, status)})")
    found = []
    for index in range(count.value):
        capability = _capability(cuda, index)
        if capability and capability not in found:
            found.append(capability)
    return DriverInfo(tuple(found), "" if found else "the NVIDIA driver sees no GPU")


def _capability(cuda, index: int) -> str:
    import ctypes

    device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if cuda.cuDeviceGet(ctypes.byref(device), index) != 0:
        return ""
    if cuda.cuDeviceGetAttribute(ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device):
        return ""
    if cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device):
        return ""
    return f"{major.value}{minor.value}"


def _error_name(cuda, status: int) -> str:
    import ctypes

    name = ctypes.c_char_p()
    if cuda.cuGetErrorName(status, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return "unknown"
