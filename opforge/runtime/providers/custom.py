"""Custom ops for a session's kernels: op libraries and Python ops registered, and asked for
their output types during shape inference."""
from __future__ import annotations

import numpy as np

from opforge.runtime.graph.types import TensorType
from opforge.runtime.providers.native import CODE_DTYPES, DTYPE_CODES, NativeFactory, attribute_values
from opforge.runtime.providers.python_op import DeviceBinding, PythonOp, python_infer
from opforge.runtime.providers.registry import CPU, CUDA


def register(registry, custom, pool, device=None) -> None:
    """Adds every custom kernel of `custom` (a runtime.custom_ops.CustomOps) to `registry` (a
    session layer: it overrides built-ins).

    CUDA ops run on `device` (the session's GPU); without one they decline their nodes with
    the reason, unless a CPU op of the same name and version (a CPU twin) takes them. Python
    ops run on the CPU, and also on `device` when they declare gpu=True.
    """
    from opforge.runtime.providers.cuda.custom_op import DeviceOpFactory

    handles = [h for library in custom.libraries for h in library.op_table]
    for handle in [h for h in handles if h.is_cuda]:
        registry.register(handle.domain, handle.name, handle.since_version,
                          CUDA if device is not None else CPU, DeviceOpFactory(handle, device),
                          until=handle.until_version)
    for handle in [h for h in handles if not h.is_cuda]:
        registry.register(handle.domain, handle.name, handle.since_version, CPU,
                          NativeFactory(handle, CPU, pool), until=handle.until_version)
    for op in custom.python_ops:
        registry.register(op.domain, op.op_type, op.since, CPU, op.bind)
        if op.gpu and device is not None:
            registry.register(op.domain, op.op_type, op.since, CUDA, DeviceBinding(op, device))


def make_custom_infer(registry, providers, opsets):
    """The `custom_infer` hook for shape inference: asks each custom op's own infer."""

    def custom_infer(node, input_types):
        factory = registry.resolve(node.domain, node.op_type, opsets.get(node.domain, 1), providers)
        if isinstance(factory, NativeFactory):
            return _native_infer(factory.handle, node, input_types)
        if hasattr(factory, "infer_types"):   # an op of an onnxruntime custom-op library
            return factory.infer_types(node, input_types)
        op = factory.op if isinstance(factory, DeviceBinding) else getattr(factory, "__self__", None)
        if isinstance(op, PythonOp) and op.infer is not None:
            return python_infer(op, node, input_types)
        return None

    return custom_infer


def _native_infer(handle, node, input_types):
    metas = []
    for t in input_types:
        if t is None or t.dtype is None or np.dtype(t.dtype) not in DTYPE_CODES or t.shape is None:
            return None
        metas.append((DTYPE_CODES[np.dtype(t.dtype)], [d if isinstance(d, int) else -1 for d in t.shape]))
    try:
        attrs = handle.attrs(attribute_values(node))
        out = handle.infer(metas, attrs, len(node.outputs))
    except Exception:
        # The op needs values or full shapes (types are found at run time), or the node does
        # not fit its schema (the core's call checks the counts; binding names the problem).
        return None
    return [None if o is None else TensorType(CODE_DTYPES[o[0]], tuple(d if d >= 0 else None for d in o[1]))
            for o in out]
