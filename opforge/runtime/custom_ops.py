"""The `custom_ops` argument of a session, sorted by kind: op libraries (sources and folders
built here), Python ops and op mappings. Providers register the first two; load applies mappings."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from opforge.runtime.load.mapping import OpMapping
from opforge.runtime.providers.python_op import PythonOp

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
