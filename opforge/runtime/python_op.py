"""Ops written as Python functions with a schema: for prototyping before writing C++.

    @opforge.custom_op("Swish", domain="com.example", inputs=["X"], outputs=["Y"],
                       attrs={"beta": 1.0}, infer=lambda x, beta: [x])
    def swish(x, beta=1.0):
        return x / (1 + np.exp(-beta * x))

The function takes the node's inputs as numpy arrays (None for an absent optional input) and its
attributes as keyword arguments, and returns an array or a tuple of arrays. `infer` gets each
input's TensorType(dtype, shape) and the attributes and returns one TensorType (or a
(dtype, shape) pair) per output; without it, output types are known only at run time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from opforge.runtime.errors import KernelError


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

    def __call__(self, *inputs, **attrs):
        """Eager call: the function itself, with attribute defaults filled."""
        return self.fn(*inputs, **{**self.attrs, **attrs})

    def bind(self, node, opset: int) -> "PythonKernel":
        """The registry factory: checks the node's attributes against the schema."""
        unknown = sorted(set(node.attrs) - set(self.attrs))
        if unknown:
            raise KernelError(f"{node.label}: Python op {self.op_type} has no attribute(s) "
                              f"{', '.join(unknown)}; it takes {sorted(self.attrs) or 'none'}")
        return PythonKernel(self, node, {**self.attrs, **_plain(node.attrs)})


def _plain(attrs: dict) -> dict:
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}


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
        return [np.asarray(v) if v is not None else None for v in outputs]


def custom_op(op_type: str, domain: str = "", since: int = 1, inputs=None, outputs=None,
              attrs=None, infer=None, dtypes=None):
    """Decorator turning a Python function into a PythonOp for `custom_ops=[...]`."""

    def wrap(fn: Callable) -> PythonOp:
        return PythonOp(fn, op_type, domain, since, list(inputs or []), list(outputs or ["Y"]),
                        dict(attrs or {}), infer, dict(dtypes or {}))

    return wrap
