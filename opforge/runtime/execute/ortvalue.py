"""OrtValue and IOBinding: onnxruntime's way of handing values to a session and getting them back.

An OrtValue holds one value (a numpy array here; a cupy array for device "cuda"); an IOBinding
names the values (or caller-owned buffers) a run reads and writes, so a script written for
onnxruntime's `io_binding()` / `run_with_iobinding()` / `run_with_ort_values()` runs unchanged.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from opforge.runtime.errors import FeedError
from opforge.runtime.execute.feeds import on_device, to_host
from opforge.runtime.graph.types import dtype_elem, elem_dtype, value_type_string


def _dtype(element_type) -> np.dtype:
    """A numpy dtype from a numpy type/dtype or an ONNX TensorProto element type number."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        return elem_dtype(int(element_type))
    return np.dtype(element_type)


def _device(device_type: str) -> str:
    device = str(device_type).lower()
    if device not in ("cpu", "cuda"):
        raise FeedError(f"device_type {device_type!r}: opforge's OrtValues live on 'cpu' or 'cuda'")
    return device


def _on_device(array, device: str, device_id: int):
    if device == "cpu":
        return array
    import cupy

    with cupy.cuda.Device(device_id):
        return cupy.asarray(array)


class OrtValue:
    """One value for a session: a tensor on the CPU (numpy) or a CUDA device (cupy)."""

    def __init__(self, value: Any, device_type: str = "cpu", device_id: int = 0):
        self._value, self._device, self._device_id = value, _device(device_type), int(device_id)

    @staticmethod
    def ortvalue_from_numpy(array, device_type: str = "cpu", device_id: int = 0) -> "OrtValue":
        """An OrtValue holding ``array`` (shared on the CPU, copied to a CUDA device)."""
        device = _device(device_type)
        return OrtValue(_on_device(np.asarray(array), device, device_id), device, device_id)

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type=np.float32, device_type: str = "cpu",
                                     device_id: int = 0) -> "OrtValue":
        """An OrtValue of this shape and element type (numpy type or ONNX number), uninitialised,
        for a binding to write an output into."""
        device = _device(device_type)
        return OrtValue(_on_device(np.empty([int(d) for d in shape], _dtype(element_type)), device, device_id),
                        device, device_id)

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (copied from a device)."""
        return to_host(self._value) if on_device(self._value) else self._value

    def value(self):
        """The value as the session holds it: a numpy or cupy array, a list, or None."""
        return self._value

    def device_name(self) -> str:
        return self._device

    def shape(self) -> list:
        return list(self._value.shape)

    def data_type(self) -> str:
        return value_type_string(self._value)

    def element_type(self) -> int:
        return dtype_elem(self._value.dtype)

    def is_tensor(self) -> bool:
        return hasattr(self._value, "shape") and hasattr(self._value, "dtype")

    def has_value(self) -> bool:
        return self._value is not None

    def data_ptr(self) -> int:
        if self._device == "cuda":
            return int(self._value.data.ptr)
        return int(self._value.ctypes.data)

    def update_inplace(self, array) -> None:
        """Copies ``array`` into this value's memory (same shape and dtype)."""
        source = np.asarray(array)
        if source.shape != self._value.shape or source.dtype != self._value.dtype:
            raise FeedError(f"update_inplace: got {source.dtype}{list(source.shape)}, the value is "
                            f"{self._value.dtype}{list(self._value.shape)}")
        self._value[...] = _on_device(source, self._device, self._device_id)

    def __repr__(self) -> str:
        return f"<OrtValue {self.data_type()} {self.shape() if self.is_tensor() else ''} on {self._device}>"


def _from_pointer(pointer: int, shape, element_type, device: str, device_id: int):
    """An array over memory the caller owns: a raw pointer, as onnxruntime's bind_input takes."""
    dtype = _dtype(element_type)
    shape = [int(d) for d in shape]
    count = int(np.prod(shape, dtype=np.int64))
    if device == "cuda":
        import cupy

        memory = cupy.cuda.UnownedMemory(int(pointer), count * dtype.itemsize, None, device_id)
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))
    if not pointer:
        raise FeedError("bind: buffer_ptr is NULL")
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(pointer))
    return np.frombuffer(buffer, dtype, count).reshape(shape)


class IOBinding:
    """The inputs and outputs of runs through ``session.run_with_iobinding``."""

    def __init__(self, session):
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, OrtValue | None] = {}   # None: allocated by the run
        self._results: list[OrtValue] = []
        self._devices: dict[str, tuple] = {}      # output name -> (device, id) it is bound to

    def bind_cpu_input(self, name: str, array) -> None:
        self._inputs[name] = np.asarray(array)

    def bind_input(self, name: str, device_type, device_id, element_type, shape, buffer_ptr) -> None:
        self._inputs[name] = _from_pointer(buffer_ptr, shape, element_type, _device(device_type), device_id)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue.value()

    def bind_output(self, name: str, device_type="cpu", device_id: int = 0, element_type=None,
                    shape=None, buffer_ptr=None) -> None:
        """An output to return (allocated by the run), or with ``buffer_ptr`` to write there."""
        device = _device(device_type)
        target = None
        self._devices[name] = (device, int(device_id))
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise FeedError(f"bind_output({name!r}): a buffer_ptr needs element_type and shape")
            target = OrtValue(_from_pointer(buffer_ptr, shape, element_type, device, device_id), device, device_id)
        self._outputs[name] = target

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._outputs[name] = ortvalue

    def get_outputs(self) -> list:
        """The bound outputs of the last run, as OrtValues, in binding order."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list:
        return [value.numpy() for value in self._results]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._devices.clear()

    def synchronize_inputs(self) -> None:
        """Waits until the session's GPU has finished the work queued on it, the writes of bound
        inputs in its memory included, as onnxruntime's does (nothing to wait for on the CPU)."""
        self._synchronize(self._inputs.values())

    def synchronize_outputs(self) -> None:
        """Waits until the session's GPU has finished writing the outputs in its memory: needed
        after a run whose options disable the wait at its end, to read them on another stream."""
        self._synchronize([value.value() for value in self._results])

    def _synchronize(self, values) -> None:
        device = self._session.device
        if device is not None and any(on_device(value) for value in values):
            device.synchronize()

    def _run(self, run_options=None) -> None:
        names = list(self._outputs)
        wanted = {name: self._wants(name) for name in names}
        on_device = any(device == "cuda" for device, _ in wanted.values())
        values = self._session._run(names or None, self._inputs, run_options, keep_on_device=on_device)
        names = names or [o.name for o in self._session.get_outputs()]
        results = []
        for name, value in zip(names, values):
            device, device_id = wanted.get(name, ("cpu", 0))
            value = _moved(value, device, device_id)
            target = self._outputs.get(name)
            if target is None:
                results.append(OrtValue(value, device, device_id))
                continue
            if list(np.shape(value)) != target.shape() or value.dtype != target.value().dtype:
                raise FeedError(f"output {name!r} is {value_type_string(value)} {list(np.shape(value))}; "
                                f"the buffer bound to it is {target.data_type()} {target.shape()}")
            target.value()[...] = value
            results.append(target)
        self._results = results

    def _wants(self, name: str) -> tuple:
        """(device, device id) where output ``name`` is to be handed back."""
        target = self._outputs.get(name)
        if target is not None:
            return target.device_name(), target._device_id
        return self._devices.get(name, ("cpu", 0))


def _moved(value, device: str, device_id: int):
    """``value`` in the memory of ``device``: copied only when it is elsewhere."""
    if value is None or not hasattr(value, "dtype"):
        return value
    if device == "cpu":
        return to_host(value) if on_device(value) else value
    return value if on_device(value) else _on_device(value, device, device_id)
