"""Kernels from compiled op libraries (built-in or a user's), bound to nodes through the C ABI."""
from __future__ import annotations

import numpy as np

from opforge import _core
from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.graph.domains import is_standard_domain
from opforge.runtime.providers.registry import default_registry

def _numpy_dtype(name: str) -> "np.dtype | None":
    """numpy's dtype of that name, or ml_dtypes' (bfloat16, float8_e4m3fn, int4...)."""
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:  # such values then go to the reference provider
        return None
    return np.dtype(getattr(ml_dtypes, name))


# numpy dtype <-> the C ABI's dtype code, from the core's one table (opforge/dtype.h)
CODE_DTYPES = {code: dtype for code, name in _core.DTYPE_NAMES.items()
               if (dtype := _numpy_dtype(name)) is not None}
DTYPE_CODES = {dtype: code for code, dtype in CODE_DTYPES.items()}


def attribute_values(node) -> dict:
    """The node's attributes as an op's AttrPack takes them (tensors as arrays, graphs as bytes)."""
    from onnx import numpy_helper
    from onnx import TensorProto

    out = {}
    for key, value in node.attrs.items():
        if isinstance(value, TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, list) and value and isinstance(value[0], TensorProto):
            value = [numpy_helper.to_array(v) for v in value]
        elif hasattr(value, "to_proto"):
            value = value.to_proto()
        out[key] = value
    return out


def call_problem(schema: dict, inputs: list, num_outputs: int) -> "str | None":
    """Why an op of ``schema`` cannot serve a node with these input names ('' for one left
    out) and this many outputs: too few or too many inputs, a required one left out, more
    outputs than the op has. None when it can."""
    params, outputs = schema["inputs"], schema["outputs"]
    variadic = bool(params) and params[-1]["variadic"]
    required = max((i + 1 for i, p in enumerate(params) if not (p["optional"] or p["variadic"])),
                   default=0)
    name = schema["name"]
    if len(inputs) < required or (len(inputs) > len(params) and not variadic):
        most = " or more" if variadic else "" if required == len(params) else f" to {len(params)}"
        plural = "" if required == 1 and not most else "s"
        return f"{name} takes {required}{most} input{plural}, the node gives {len(inputs)}"
    for index, value in enumerate(inputs):
        param = params[min(index, len(params) - 1)]
        if not value and not param["optional"]:
            return f"{name}'s input #{index} '{param['name']}' is required, the node leaves it out"
    if num_outputs > len(outputs) and not (outputs and outputs[-1]["variadic"]):
        return f"{name} has {len(outputs)} output(s), the node names {num_outputs}"
    return None


def dtype_allowed(schema_param: dict, dtype, opset: int = 0) -> bool:
    """Whether a declared input accepts `dtype` (a numpy dtype) at `opset` (0: any version):
    dtypes the op added at a later opset (``dtypes_since``) count from that opset on."""
    if not schema_param["dtypes"]:
        return True
    name = np.dtype(dtype).name
    return name in schema_param["dtypes"] and (not opset or schema_param["dtype_since"].get(name, 0) <= opset)


class NativeKernel:
    """A node bound to an op of a compiled library: attributes converted once, each call made
    through the core's one call sequence (csrc/invoke.h: checks, infer, outputs, workspace,
    compute).

    Bound once, when the session is created, and never switched: a call the op refuses (a
    value of a type type inference could not tell, a mode its infer refuses) raises, naming the
    node. Immutable once bound, so threads share it."""

    def __init__(self, handle, node, opset: int, provider: str, pool=None):
        self.handle, self.node, self.opset, self.pool = handle, node, opset, pool
        self.provider = provider
        self.schema = handle.schema()
        try:
            self.attrs = handle.attrs(attribute_values(node), opset)
        except TypeError as exc:
            raise KernelNotFoundError(f"{provider} kernel {handle.name} does not take this "
                                      f"node's attributes: {exc}") from None
        self.num_outputs = len(node.outputs)
        self.wanted = [bool(name) for name in node.outputs]
        self.inplace = self.schema["inplace"]

    def unsupported(self, dtypes: list) -> "str | None":
        """Why the op cannot take these input dtypes (None when it can; None entries are
        unknown); their count was checked when the node was bound (`call_problem`)."""
        params = self.schema["inputs"]
        for i, dtype in enumerate(dtypes):
            if dtype is None or not params:
                continue
            param = params[min(i, len(params) - 1)]
            if np.dtype(dtype) not in DTYPE_CODES or not dtype_allowed(param, dtype, self.opset):
                return (f"{self.provider} kernel {self.handle.name} does not take "
                        f"{np.dtype(dtype).name} for input '{param['name']}' at opset {self.opset}")
        return None

    def run(self, inputs: list) -> list:
        return self.handle.invoke(inputs, self.wanted, self.attrs, self.pool)[0]

    def run_traced(self, inputs: list) -> tuple:
        """``(outputs, workspace bytes)`` of one call (the plan recorder reads the bytes)."""
        return self.handle.invoke(inputs, self.wanted, self.attrs, self.pool)


def python_kernel(node, opset: int, provider: str):
    """The built-in Python kernel (``providers/cpu``: sequence, strings...) of the node's op on ``provider``,
    bound to the node, for values a C kernel cannot take; None when there is none."""
    factory = default_registry.resolve(node.domain, node.op_type, opset, [provider])
    if factory is None or getattr(factory, "wraps_native", False):
        return None
    return factory(node, opset)


def wrapping_kernel(node, opset: int, native: "NativeFactory"):
    """The built-in Python kernel that wraps the native one for this node (its factory is marked
    ``wraps_native`` and takes ``native``, which binds a node, e.g. a rewritten copy, to the
    native op: string class labels mapped around numeric scoring); None when there is none or
    it declines the node."""
    factory = default_registry.resolve(node.domain, node.op_type, opset, [native.provider])
    if not getattr(factory, "wraps_native", False):
        return None
    try:
        return factory(node, opset, native)
    except KernelNotFoundError:
        return None


class NativeFactory:
    """The registry factory for one op handle: binds nodes of that op type to it, or declines
    them (KernelNotFoundError: the next provider is asked) when their input counts, kinds or
    dtypes, as type inference knows them, are not the op's. Decided once, for the session."""

    def __init__(self, handle, provider: str, pool=None):
        self.handle, self.provider, self.pool = handle, provider, pool
        self._schema = None

    @property
    def schema(self) -> dict:
        """The op's schema, read once."""
        if self._schema is None:
            self._schema = self.handle.schema()
        return self._schema

    def __call__(self, node, opset: int) -> NativeKernel:
        why = call_problem(self.schema, node.inputs, len(node.outputs))
        if why:
            raise KernelNotFoundError(why)
        wrapped = wrapping_kernel(node, opset, self)
        if wrapped is not None:
            return wrapped
        kernel = NativeKernel(self.handle, node, opset, self.provider, self.pool)
        kinds = [k for k in node.input_kinds if k not in (None, "tensor")]
        why = (f"{self.provider} kernel {self.handle.name} takes tensors; the node gives it a {kinds[0]}"
               if kinds else kernel.unsupported([None if t is None else t.dtype for t in node.input_types]))
        if why and (python := python_kernel(node, opset, self.provider)) is not None:
            return python   # Equal of strings, Identity of a sequence
        if why:
            raise KernelNotFoundError(why)
        refused = _refusal(kernel, node)
        if refused:   # a mode or attribute value the op does not implement: the next provider's
            raise KernelNotFoundError(f"{self.provider} kernel {self.handle.name} refuses this node: {refused}")
        return kernel


def _refusal(kernel: NativeKernel, node) -> "str | None":
    """What the op's infer says of the node with its inputs' types as inference knows them
    (sizes may be unknown), for standard ops only, which another provider may take: None when
    it takes the node or cannot tell before the values come (NeedsValue)."""
    if not is_standard_domain(node.domain):
        return None
    metas = []
    for name, t in zip(node.inputs, node.input_types or [None] * len(node.inputs)):
        if not name:
            metas.append(None)
        elif t is None or t.shape is None or np.dtype(t.dtype) not in DTYPE_CODES:
            return None   # not known well enough to ask
        else:
            metas.append((DTYPE_CODES[np.dtype(t.dtype)], [d if isinstance(d, int) else -1 for d in t.shape]))
    return kernel.handle.refusal(metas, kernel.attrs, len(node.outputs))


def register_library(registry, library, provider: str, pool=None) -> int:
    """Registers every op of an OpLibrary; returns how many."""
    for handle in library.op_table:
        registry.register(handle.domain, handle.name, handle.since_version, provider,
                          NativeFactory(handle, provider, pool), until=handle.until_version)
    return len(library.op_table)
