"""onnxruntime custom-op libraries in opforge sessions: a library that exports RegisterCustomOps
(onnxruntime-extensions, a team's own) is loaded with opforge's implementation of the part of
onnxruntime's C API custom ops use (csrc/ort_host_*.cpp), and its ops join a session's kernel
registry beside opforge's own."""
from __future__ import annotations

import threading
from pathlib import Path

from opforge.runtime.errors import KernelError, KernelNotFoundError
from opforge.runtime.graph.types import TensorType, dtype_elem, elem_dtype
from opforge.runtime.providers.native import attribute_values
from opforge.runtime.providers.registry import CPU

_loaded: dict = {}
_lock = threading.Lock()


class OrtCustomOpLibrary:
    """An onnxruntime custom-op library loaded into this process: `ops` lists its ops."""

    def __init__(self, path: str, ops: list):
        self.path, self.ops = path, ops

    def op_types(self) -> set:
        """(domain, op type) of every op."""
        return {(op.domain, op.name) for op in self.ops}

    def __repr__(self) -> str:
        return f"<onnxruntime custom-op library {self.path} ({len(self.ops)} ops)>"


def load_ort_library(path) -> OrtCustomOpLibrary:
    """Loads the custom-op library at `path` (once per process) and returns it.

    The library is loaded from a private copy (opforge.interop.private_copy): its global state
    (the API table such libraries keep) is then opforge's alone, even in a process where
    onnxruntime loaded the same file. Raises FileNotFoundError, or ImportError naming what failed.
    """
    from opforge import _core

    path = Path(path).expanduser().absolute()
    if not path.is_file():
        raise FileNotFoundError(f"custom-op library {path} does not exist")
    with _lock:
        copy = _private_copy(path)
        if copy not in _loaded:
            _loaded[copy] = OrtCustomOpLibrary(str(path), _core.load_ort_library(copy))
        return _loaded[copy]


def _private_copy(path: Path) -> str:
    from opforge.cache import cache_root
    from opforge.interop.private_copy import private_copy

    folder = cache_root() / "ort-libraries"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return str(private_copy(path, folder))


def register(registry, libraries: list, pool) -> None:
    """Adds every CPU op of `libraries` to `registry` (a session layer: overrides built-ins); an
    op the library has for another provider only declines its nodes, saying so."""
    for library in libraries:
        on_cpu = {(op.domain, op.name, op.since_version) for op in library.ops if op.provider == CPU}
        for op in library.ops:
            if op.provider == CPU:
                factory = OrtOpFactory(op, pool)
            elif (op.domain, op.name, op.since_version) not in on_cpu:
                factory = _elsewhere(op, library.path)
            else:
                continue
            registry.register(op.domain, op.name, op.since_version, CPU, factory, until=op.until_version)


def _elsewhere(op, path: str):
    def decline(node, opset):
        raise KernelNotFoundError(f"{op.name} of {path} runs on onnxruntime's {op.provider}; opforge runs "
                                  "the CPU ops of onnxruntime custom-op libraries only")
    return decline


def _meta(t) -> "tuple | None":
    """(element type, shape) of a TensorType, as the host takes it; None when unknown."""
    if t is None or t.dtype is None:
        return None
    return (dtype_elem(t.dtype), None if t.shape is None else list(t.shape))


def _problem(op, node) -> "str | None":
    """Why `op` cannot serve `node` (input or output counts), or None."""
    for what, params, names in (("input", op.inputs, node.inputs), ("output", op.outputs, node.outputs)):
        variadic = bool(params) and params[-1][1] == "variadic"
        required = max((i + 1 for i, p in enumerate(params) if p[1] == "required"), default=0)
        if len(names) < required or (len(names) > len(params) and not variadic):
            return f"{op.name} takes {len(params)}{' or more' if variadic else ''} {what}s, the node gives {len(names)}"
    return None


class OrtOpFactory:
    """The registry factory of one op of a custom-op library: binds a node to a new kernel of it
    (onnxruntime makes one per node too), reading the node's attributes then."""

    def __init__(self, op, pool=None):
        self.op, self.pool = op, pool

    def __call__(self, node, opset: int) -> "OrtNodeKernel":
        why = _problem(self.op, node)
        if why:
            raise KernelNotFoundError(why)
        return OrtNodeKernel(self.op, node, opset, self.pool)

    def infer_types(self, node, input_types) -> "list | None":
        """The op's output types for shape inference: its own shape inference when it has one,
        else the types it declares (an untyped output takes its last untyped input's type, as
        onnxruntime infers it); shapes unknown."""
        metas = [_meta(t) for t in input_types]
        try:
            found = self.op.infer(metas, attribute_values(node), dict(node.attr_types), len(node.outputs))
        except ValueError:
            found = None
        if found is not None:
            return [None if o is None else TensorType(elem_dtype(o[0]), None if o[1] is None else tuple(o[1]))
                    for o in found]
        return self._declared_types(input_types, len(node.outputs))

    def _declared_types(self, input_types, count: int) -> list:
        params, outs = self.op.inputs, self.op.outputs
        propagated = None
        for i, t in enumerate(input_types):
            if params and params[min(i, len(params) - 1)][0] == 0 and t is not None:
                propagated = t.dtype
        types = []
        for k in range(count):
            declared = outs[min(k, len(outs) - 1)][0] if outs else 0
            dtype = elem_dtype(declared) if declared else propagated
            types.append(None if dtype is None else TensorType(dtype, None))
        return types


class OrtNodeKernel:
    """A node bound to a custom-op library's kernel; a call's error raises KernelError naming
    the node. Immutable once bound; the library's kernels are called from several threads, as
    onnxruntime calls them."""

    provider = CPU

    def __init__(self, op, node, opset: int, pool=None):
        self.node, self.pool = node, pool
        info = {"name": node.name or "", "op_type": node.op_type, "domain": node.domain, "since_version": opset,
                "inputs": list(node.inputs), "outputs": list(node.outputs),
                "input_types": [_meta(t) for t in node.input_types or [None] * len(node.inputs)],
                "output_types": [_meta(t) for t in node.output_types or [None] * len(node.outputs)],
                "attrs": attribute_values(node), "attr_types": dict(node.attr_types)}
        try:
            self.kernel = op.bind(info)
        except ValueError as exc:
            raise KernelError(f"{node.label}: {exc}") from None

    def run(self, inputs: list) -> list:
        try:
            return self.kernel.run(inputs[:len(self.node.inputs)], self.pool)
        except ValueError as exc:
            raise KernelError(f"{self.node.label}: {exc}") from None
