"""Custom ops for a session: op libraries, sources and folders, Python ops and mappings."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from opforge.runtime.graph.types import TensorType
from opforge.runtime.load.mapping import OpMapping
from opforge.runtime.providers.native import CODE_DTYPES, DTYPE_CODES, NativeFactory, attribute_values
from opforge.runtime.providers.python_op import PythonOp, python_infer
from opforge.runtime.providers.registry import CPU, CUDA

SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++", ".cu")


@dataclass
class CustomOps:
    """What a session's `custom_ops` argument held, sorted by kind."""

    libraries: list = field(default_factory=list)
    python_ops: list = field(default_factory=list)
    mappings: list = field(default_factory=list)

    def op_types(self) -> set:
        """(domain, op type) of every op the libraries and Python ops provide."""
        found = {(h.domain, h.name) for lib in self.libraries for h in lib.op_table}
        return found | {(op.domain, op.op_type) for op in self.python_ops}


def collect(entries) -> CustomOps:
    """Sorts `custom_ops` entries; paths to sources or folders are built (cached) here.

    Accepts op libraries from CustomOpBuilder/load_inline/load_dir, a path to a C++ source, a
    folder of them or a built library (.so), PythonOp and OpMapping objects. Raises TypeError
    naming an entry of another kind.
    """
    found = CustomOps()
    for entry in entries or []:
        if hasattr(entry, "op_table"):
            found.libraries.append(entry)
        elif isinstance(entry, PythonOp):
            found.python_ops.append(entry)
        elif isinstance(entry, OpMapping):
            found.mappings.append(entry)
        elif isinstance(entry, (str, os.PathLike)):
            found.libraries.append(_load_path(Path(entry)))
        else:
            raise TypeError(f"custom_ops entry {entry!r} is not an op library, a path to C++ "
                            "sources, a PythonOp (opforge.custom_op) or an opforge.OpMapping"
                            + (" (a pybind11 module has no opforge ops to register)"
                               if hasattr(entry, "__file__") else ""))
    return found


def _load_path(path: Path):
    import opforge

    if path.is_dir():
        return opforge.load_dir(path)
    if not path.exists():
        raise FileNotFoundError(f"custom op source or folder {path} does not exist")
    if path.suffix == ".so":
        from opforge import _core
        from opforge.builder.ops import OpLibrary

        return OpLibrary(path.stem, str(path), _core.load_library(str(path.absolute())))
    if path.suffix not in SOURCE_SUFFIXES:
        raise ValueError(f"custom op path {path}: expected a folder, a C++ source or a .so")
    return opforge.CustomOpBuilder(_identifier(path.stem), [path], extra_include_paths=[path.parent]).load()


def _identifier(text: str) -> str:
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in text)
    return ident if ident and not ident[0].isdigit() else f"ops_{ident}"


def register(registry, custom: CustomOps, pool, allow_fallback: bool = True, device=None) -> None:
    """Adds every custom kernel to `registry` (a session layer: it overrides built-ins).

    CUDA ops run on `device` (the session's GPU); without one they decline their nodes with
    the reason, unless a CPU op of the same name and version (a CPU twin) takes them.
    """
    from opforge.runtime.providers.cuda.custom_op import DeviceOpFactory

    handles = [h for library in custom.libraries for h in library.op_table]
    for handle in [h for h in handles if h.is_cuda]:
        registry.register(handle.domain, handle.name, handle.since_version,
                          CUDA if device is not None else CPU, DeviceOpFactory(handle, device))
    for handle in [h for h in handles if not h.is_cuda]:
        registry.register(handle.domain, handle.name, handle.since_version, CPU,
                          NativeFactory(handle, CPU, pool, allow_fallback))
    for op in custom.python_ops:
        registry.register(op.domain, op.op_type, op.since, CPU, op.bind)


def make_custom_infer(registry, providers, opsets):
    """The `custom_infer` hook for shape inference: asks each custom op's own infer."""

    def custom_infer(node, input_types):
        factory = registry.resolve(node.domain, node.op_type, opsets.get(node.domain, 1), providers)
        if isinstance(factory, NativeFactory):
            return _native_infer(factory.handle, node, input_types)
        op = getattr(factory, "__self__", None)
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
