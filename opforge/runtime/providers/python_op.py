"""Ops written as Python functions with a schema: for prototyping before writing C++.

    @opforge.custom_op("Swish", domain="com.example", inputs=["X"], outputs=["Y"],
                       attrs={"beta": 1.0}, infer=lambda x, beta: [x])
    def swish(x, beta=1.0):
        return x / (1 + np.exp(-beta * x))

The function takes the node's inputs as numpy arrays (None for an absent optional input) and its
attributes as keyword arguments, and returns an array or a tuple of arrays. `infer` gets each
input's TensorType(dtype, shape) and the attributes and returns one TensorType (or a
(dtype, shape) pair) per output; without it, output types are known only at run time.

In a CUDA session a Python op runs on the CPU, its inputs copied to the host, unless it says
`gpu=True`: it then takes and returns cupy arrays on the session's GPU (a function written with
array methods, or `cupy.get_array_module(x)`, runs on either), and on the CPU elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from opforge.runtime.errors import GraphError, KernelError
from opforge.runtime.graph.types import TensorType


@dataclass
class PythonOp:
    """A Python function registered as an op: (domain, op_type, since) plus its schema."""

    fn: Callable
    op_type: str
    domain: str = ""
    since: int = 1
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=lambda: ["Y"])
    attrs: dict = field(default_factory=dict)
    infer: Callable | None = None
    dtypes: dict = field(default_factory=dict)   # input name -> allowed dtype names
    gpu: bool = False     # takes and returns GPU (cupy) arrays in a CUDA session

    def __call__(self, *inputs, **attrs):
        """Eager call: the function itself, with attribute defaults filled."""
        return self.fn(*inputs, **{**self.attrs, **attrs})

    def bind(self, node, opset: int, device=None) -> "PythonKernel":
        """The registry factory: checks the node's attributes against the schema. With
        `device` (a gpu=True op in a CUDA session) the kernel works in that device's memory."""
        unknown = sorted(set(node.attrs) - set(self.attrs))
        if unknown:
            raise KernelError(f"{node.label}: Python op {self.op_type} has no attribute(s) "
                              f"{', '.join(unknown)}; it takes {sorted(self.attrs) or 'none'}")
        attrs = {**self.attrs, **_plain(node)}
        return PythonKernel(self, node, attrs) if device is None else DevicePythonKernel(self, node, attrs, device)


class DeviceBinding:
    """The registry factory of a gpu=True Python op in a session with a GPU."""

    def __init__(self, op: PythonOp, device):
        self.op, self.device = op, device

    def __call__(self, node, opset: int) -> "DevicePythonKernel":
        return self.op.bind(node, opset, self.device)


def _plain(node) -> dict:
    """The node's attributes, bytes decoded to str; KernelError naming one that is not UTF-8."""
    try:
        return {k: v.decode() if isinstance(v, bytes) else v for k, v in node.attrs.items()}
    except UnicodeDecodeError as exc:
        raise KernelError(f"{node.label}: a string attribute is not UTF-8 text ({exc})") from None


class PythonKernel:
    """A node bound to a PythonOp."""

    provider = "CPUExecutionProvider"

    def __init__(self, op: PythonOp, node, attrs: dict):
        self.op, self.node, self.attrs = op, node, attrs

    def run(self, inputs: list) -> list:
        try:
            result = self.op.fn(*inputs[:len(self.node.inputs)], **self.attrs)
        except Exception as exc:
            raise KernelError(f"{self.node.label}: Python op {self.op.op_type} raised "
                              f"{type(exc).__name__}: {exc}") from exc
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(outputs) < len(self.node.outputs):
            raise KernelError(f"{self.node.label}: Python op {self.op.op_type} returned "
                              f"{len(outputs)} value(s) for {len(self.node.outputs)} output(s)")
        outputs = [self.as_array(v) if v is not None else None for v in outputs]
        if self.op.infer is not None:
            self._check(inputs, outputs)
        return outputs

    def as_array(self, value):
        return np.asarray(value)

    def _check(self, inputs: list, outputs: list) -> None:
        """Each output the node names has the dtype and shape the op's infer gives for these
        inputs; KernelError naming the output otherwise."""
        types = [None if x is None else TensorType(x.dtype, x.shape) for x in inputs]
        try:
            expected = python_infer(self.op, self.node, types[:len(self.node.inputs)]) or []
        except Exception as exc:  # python_infer raises GraphError for a malformed answer
            raise KernelError(str(exc)) from None
        for name, value, want in zip(self.node.outputs, outputs, expected):
            if not name or want is None:
                continue
            problem = _mismatch(value, want)
            if problem:
                raise KernelError(f"{self.node.label}: Python op {self.op.op_type} returned {problem} "
                                  f"for output {name!r}; its infer says {want.dtype}"
                                  f"{list(want.shape) if want.shape is not None else ''}")


class DevicePythonKernel(PythonKernel):
    """A gpu=True Python op on the session's GPU: device arrays in and out (a numpy result is
    moved to the device)."""

    provider = "CUDAExecutionProvider"

    def __init__(self, op: PythonOp, node, attrs: dict, device):
        super().__init__(op, node, attrs)
        self.device = device

    def as_array(self, value):
        return self.device.upload(value)


def _mismatch(value, want: TensorType) -> str | None:
    if value is None:
        return "None"
    if value.dtype != want.dtype:
        return f"{value.dtype}{list(value.shape)}"
    if want.shape is not None and (len(want.shape) != value.ndim or any(
            isinstance(w, int) and w != got for w, got in zip(want.shape, value.shape))):
        return f"{value.dtype}{list(value.shape)}"
    return None


def python_infer(op: PythonOp, node, input_types) -> "list | None":
    """A Python op's infer for the node: TensorType per output, None where unknown. None when
    its infer raises (types are then found at run time); GraphError when it returns something
    that is not a type per output."""
    try:
        result = op.infer(*input_types, **{**op.attrs, **node.attrs})
    except Exception:  # it needs full shapes or values: types are found at run time
        return None
    try:
        return [None if r is None else TensorType(np.dtype(r[0]), _dims(r[1])) for r in result]
    except Exception as exc:  # whatever it returned is not (dtype, shape) per output
        raise GraphError(f"{node.label}: the infer of Python op {op.op_type} returned {result!r}, "
                         f"not a (dtype, shape) or TensorType per output ({exc})") from None


def _dims(shape) -> "tuple | None":
    if shape is None:
        return None
    dims = tuple(shape)
    if not all(d is None or isinstance(d, str) or (isinstance(d, (int, np.integer)) and d >= 0)
               for d in dims):
        raise ValueError(f"{list(dims)} is not a shape")
    return dims


def custom_op(op_type: str, domain: str = "", since: int = 1, inputs=None, outputs=None,
              attrs=None, infer=None, dtypes=None, gpu: bool = False):
    """Decorator turning a Python function into a PythonOp for `custom_ops=[...]`; `gpu=True`
    says the function also takes cupy arrays, so CUDA sessions run it on the GPU."""

    def wrap(fn: Callable) -> PythonOp:
        return PythonOp(fn, op_type, domain, since, list(inputs or []), list(outputs or ["Y"]),
                        dict(attrs or {}), infer, dict(dtypes or {}), bool(gpu))

    return wrap
