"""Custom CUDA ops (from a CUDA op library) in a session: run on the session's GPU and stream."""
from __future__ import annotations

import numpy as np

from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.providers.native import CODE_DTYPES, DTYPE_CODES, NativeFactory
from opforge.runtime.registry import CUDA


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
        xp = self.device.xp
        if not self.schema["accepts_strided"]:
            inputs = [None if x is None else xp.ascontiguousarray(x) for x in inputs]
        metas = [None if x is None else (DTYPE_CODES[np.dtype(x.dtype)], x.shape, None) for x in inputs]
        types = self.handle.infer(metas, self.attrs, len(self.node.outputs))
        outputs = [None if t is None or not name else xp.empty(t[1], CODE_DTYPES[t[0]])
                   for t, name in zip(types, self.node.outputs)]
        bytes_needed = self.handle.workspace_size(inputs, self.attrs, self.device.id)
        workspace = xp.empty(bytes_needed, np.uint8) if bytes_needed > 0 else None
        self.handle.run(inputs, outputs, self.attrs, None, self.device.stream_ptr, self.device.id, workspace)
        return outputs


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
