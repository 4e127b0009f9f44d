"""Kernels from compiled op libraries (built-in or a user's), bound to nodes through the C ABI."""
from __future__ import annotations

import logging
import threading

import numpy as np

from opforge import _core
from opforge.errors import OpError, OpMemoryError
from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.graph.domains import is_standard_domain
from opforge.runtime.providers.registry import default_registry

logger = logging.getLogger("opforge.runtime")

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


def dtype_allowed(schema_param: dict, dtype) -> bool:
    """Whether a declared input accepts `dtype` (a numpy dtype)."""
    return not schema_param["dtypes"] or np.dtype(dtype).name in schema_param["dtypes"]


class NativeKernel:
    """A node bound to an op of a compiled library: attributes converted once, outputs
    allocated from the op's infer at each run.

    Immutable once bound, so threads share it: a run that the native op cannot take (inputs of
    a dtype known only at run time, or a mode its infer refuses) goes to the node's reference
    kernel for that call only, and `run_traced` tells the caller (the plan recorder) so."""

    def __init__(self, handle, node, opset: int, provider: str, pool=None, allow_fallback=True):
        self.handle, self.node, self.opset, self.pool = handle, node, opset, pool
        self.provider, self.allow_fallback = provider, allow_fallback
        self.schema = handle.schema()
        try:
            self.attrs = handle.attrs(attribute_values(node))
        except TypeError as exc:
            raise KernelNotFoundError(f"{provider} kernel {handle.name} does not take this "
                                      f"node's attributes: {exc}") from None
        self.num_outputs = len(node.outputs)
        self.inplace = self.schema["inplace"]
        self._reference = None
        self._values = None
        self._reference_lock = threading.Lock()
        self.reference_calls = 0   # calls handed to the reference kernel, so tests can see them

    def _fallback(self):
        """The node's reference kernel (made on first need), for calls the native op cannot take."""
        if not self.allow_fallback:
            raise KernelNotFoundError(f"{self.node.label}: {self.provider} kernel "
                                      f"{self.handle.name} cannot run these inputs and the reference "
                                      "fallback is disabled")
        with self._reference_lock:
            if self._reference is None:
                from opforge.runtime.providers.reference import reference_kernel

                self._reference = reference_kernel(self.node, self.opset)
        return self._reference

    def _values_kernel(self):
        """The kernel for calls whose values no C kernel takes (sequences, optionals, strings):
        a built-in Python kernel of this op (Identity's, Equal's) when there is one, else the
        reference kernel."""
        with self._reference_lock:
            if self._values is None:
                self._values = python_kernel(self.node, self.opset, self.provider) or False
        if self._values:
            return self._values
        self._count_reference_call()
        return self._fallback()

    def _count_reference_call(self) -> None:
        with self._reference_lock:
            self.reference_calls += 1

    def unsupported(self, dtypes: list) -> "str | None":
        """Why the op cannot take these input dtypes (None when it can); their count was
        checked when the node was bound (`call_problem`)."""
        params = self.schema["inputs"]
        for i, dtype in enumerate(dtypes):
            if dtype is None or not params:
                continue
            param = params[min(i, len(params) - 1)]
            if np.dtype(dtype) not in DTYPE_CODES or not dtype_allowed(param, dtype):
                return (f"{self.provider} kernel {self.handle.name} does not take "
                        f"{np.dtype(dtype).name} for input '{param['name']}'")
        return None

    def output_types(self, inputs: list, metas: "list | None" = None) -> list:
        """(numpy dtype, shape) per node output, from the op's infer with the values at hand;
        OpError when it leaves out an output the node names."""
        types = self.handle.infer(metas if metas is not None else _metas(inputs), self.attrs,
                                  self.num_outputs, True)
        for index, (name, t) in enumerate(zip(self.node.outputs, types)):
            if name and t is None:
                raise OpError(f"{self.handle.name}: infer gave no type to output #{index} "
                              f"({name!r}), which the node names")
        return [None if t is None else (CODE_DTYPES[t[0]], t[1]) for t in types]

    def run(self, inputs: list) -> list:
        return self.run_traced(inputs)[0]

    def run_traced(self, inputs: list) -> tuple:
        """``(outputs, workspace bytes)`` of one call; the bytes are None when the call went to
        the reference kernel (the plan then keeps this node as a Python step)."""
        if (not all(x is None or isinstance(x, np.ndarray) for x in inputs)
                or self.unsupported([getattr(x, "dtype", None) for x in inputs])):
            return self._values_kernel().run(inputs), None   # sequences, optionals, strings
        inputs = [None if x is None else np.asarray(x, order="C") for x in inputs]
        try:
            return self._run_native(inputs)
        except OpMemoryError:
            raise   # no kernel can make an output that large: the reference is not tried
        except OpError as exc:
            return self._recover(inputs, exc), None

    def _run_native(self, inputs: list) -> tuple:
        metas = _metas(inputs)
        try:
            outputs = [None if t is None or not name else np.empty(t[1], t[0])
                       for t, name in zip(self.output_types(inputs, metas), self.node.outputs)]
        except (MemoryError, ValueError) as exc:   # numpy's "array is too big" is a ValueError
            raise OpMemoryError(f"{self.handle.name}: its outputs for these inputs do not fit in memory "
                                f"({exc})") from None
        workspace = self.handle.workspace_size(metas, self.attrs) if self.schema["has_workspace"] else 0
        self.handle.run(inputs, outputs, self.attrs, self.pool)
        return outputs, workspace

    def _recover(self, inputs: list, error: Exception) -> list:
        """A built-in kernel that refuses a call (an attribute value or mode it does not
        implement, e.g. training_mode=1) hands that call to the reference kernel; when that
        fails too, or the op is not a standard one, the kernel's own error stands."""
        if not is_standard_domain(self.node.domain) or not self.allow_fallback:
            raise error
        try:
            results = self._fallback().run(inputs)
        except Exception:
            raise error from None
        self._count_reference_call()
        logger.debug("%s ran on the reference provider: the native kernel said %s",
                     self.node.label, error)
        return results


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


def _metas(inputs: list) -> list:
    """What the op handle's infer and workspace_size read: (dtype code, shape, value) per input."""
    return [None if x is None else (DTYPE_CODES[x.dtype], x.shape, x) for x in inputs]


class NativeFactory:
    """The registry factory for one op handle: binds nodes of that op type to it."""

    def __init__(self, handle, provider: str, pool=None, allow_fallback: bool = True):
        self.handle, self.provider, self.pool = handle, provider, pool
        self.allow_fallback = allow_fallback
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
        kernel = NativeKernel(self.handle, node, opset, self.provider, self.pool, self.allow_fallback)
        why = kernel.unsupported([None if t is None else t.dtype for t in node.input_types])
        if why and (python := python_kernel(node, opset, self.provider)) is not None:
            return python   # e.g. Equal of strings
        if why:
            raise KernelNotFoundError(why)
        return kernel


def register_library(registry, library, provider: str, pool=None, allow_fallback: bool = True) -> int:
    """Registers every op of an OpLibrary; returns how many. With allow_fallback, a node a
    kernel refuses at run time goes to the reference provider."""
    for handle in library.op_table:
        registry.register(handle.domain, handle.name, handle.since_version, provider,
                          NativeFactory(handle, provider, pool, allow_fallback))
    return len(library.op_table)
