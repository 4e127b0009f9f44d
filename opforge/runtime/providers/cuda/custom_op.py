"""Custom CUDA ops (from a CUDA op library) in a session: run on the session's GPU and stream."""
from __future__ import annotations

from opforge.builder.device_arrays import laid_out
from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.providers.native import NativeFactory
from opforge.runtime.providers.registry import CUDA


class DeviceOpKernel:
    """A node bound to a CUDA op: outputs and workspace allocated in the session's memory pool,
    the op launched on the session's stream through the one checked call path."""

    provider = CUDA

    def __init__(self, handle, node, device):
        from opforge.runtime.providers.native import attribute_values

        self.handle, self.node, self.device = handle, node, device
        self.schema = handle.schema()
        try:
            self.attrs = handle.attrs(attribute_values(node))
        except TypeError as exc:
            raise KernelNotFoundError(f"CUDA op {handle.name} does not take this node's "
                                      f"attributes: {exc}") from None

    def run(self, inputs: list) -> list:
        inputs = laid_out(self.device.xp, inputs, self.schema["accepts_strided"])
        wanted = [bool(name) for name in self.node.outputs]
        return self.handle.invoke_cuda(inputs, wanted, self.attrs, self.device.id, self.device.stream_ptr)


class DeviceOpFactory(NativeFactory):
    """Binds nodes of a CUDA op: on the session's GPU when it has one, else it declines the
    node with the reason (a CPU op of the same name, if registered, then takes it)."""

    def __init__(self, handle, device=None):
        super().__init__(handle, CUDA)
        self.device = device

    def __call__(self, node, opset: int):
        if self.device is None:
            raise KernelNotFoundError(f"{self.handle.name} is a CUDA op and this session runs "
                                      "without the CUDA provider")
        return DeviceOpKernel(self.handle, node, self.device)
