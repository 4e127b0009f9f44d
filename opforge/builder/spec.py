"""BuildSpec: what the user asked to build, checked and normalised."""
import os
import sys
import time
from typing import NamedTuple
from pathlib import Path

CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++", ".C")
CUDA_SUFFIXES = (".cu",)
BACKENDS = ("CPU", "CUDA")
BASE_CFLAGS = ("-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall")


class BuildSpec(NamedTuple):
    """A library to build: its name, absolute source paths, backend and flags."""

    name: str
    sources: tuple
    backend: str = "CPU"
    extra_cflags: tuple = ()
    extra_ldflags: tuple = ()
    extra_include_paths: tuple = ()
    build_dir: "Path | None" = None
    verbose: bool = False
    texts: tuple = ()   # source contents, read once
    extra_cuda_cflags: tuple = ()
    read_at_ns: int = 0   # time.time_ns() just before the texts were read

    def reread(self) -> "BuildSpec":
        """The same spec with its sources read again, as they are now."""
        missing = [str(p) for p in self.sources if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"library '{self.name}': source file(s) not found: {', '.join(missing)}")
        read_at = time.time_ns()
        return self._replace(texts=_read_texts(self.sources), read_at_ns=read_at)

    def link_flags(self) -> tuple:
        """Linker flags: a shared library, in which (for op libraries, on Linux) a symbol no
        object or library defines fails the link, naming it, instead of the load; extension
        modules leave Python's symbols to the interpreter that imports them."""
        strict = ("-Wl,--no-undefined",) if sys.platform.startswith("linux") and not self.is_extension else ()
        return ("-shared",) + strict + self.extra_ldflags

    @property
    def is_cuda(self) -> bool:
        """True for a CUDA library: .cu sources go to nvcc and the CUDA runtime is linked in."""
        return self.backend == "CUDA"

    @property
    def is_extension(self) -> bool:
        """True when a source defines a pybind11 module, which is loaded as a Python module."""
        return any("PYBIND11_MODULE" in text for text in self.texts)


def make_spec(name, sources, backend=None, extra_cflags=None, extra_ldflags=None,
              extra_include_paths=None, build_dir=None, verbose=False,
              extra_cuda_cflags=None) -> BuildSpec:
    """Checks the arguments of CustomOpBuilder and returns a BuildSpec.

    The backend defaults to CUDA when a source is a .cu file, else CPU. Raises ValueError for a
    bad name or backend (or .cu sources with backend="CPU"), FileNotFoundError for missing sources.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"library name {name!r} must be a Python identifier (letters, digits, _)")
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = tuple(Path(s).expanduser().absolute() for s in sources)
    if not paths:
        raise ValueError(f"library '{name}' has no sources")
    backend = _backend(name, backend, [p.name for p in paths if p.suffix in CUDA_SUFFIXES])
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"library '{name}': source file(s) not found: {', '.join(missing)}")
    suffixes = CPP_SUFFIXES + (CUDA_SUFFIXES if backend == "CUDA" else ())
    odd = [p.name for p in paths if p.suffix not in suffixes]
    if odd:
        raise ValueError(f"library '{name}': {', '.join(odd)} not a C++ or CUDA source "
                         f"(expected {', '.join(suffixes)})")
    if extra_cuda_cflags and backend != "CUDA":
        raise ValueError(f"library '{name}': extra_cuda_cflags given to a CPU library; "
                         "pass backend='CUDA' or add a .cu source")
    read_at = time.time_ns()
    return BuildSpec(name, paths, backend, tuple(extra_cflags or ()), tuple(extra_ldflags or ()),
                     tuple(Path(p).absolute() for p in extra_include_paths or ()),
                     Path(build_dir).absolute() if build_dir else None, bool(verbose), _read_texts(paths),
                     tuple(extra_cuda_cflags or ()), read_at)


def _read_texts(paths) -> tuple:
    return tuple(p.read_text(errors="replace") for p in paths)


def _backend(name: str, backend, cuda_sources: list) -> str:
    """"CPU" or "CUDA": as given, or CUDA when there are .cu sources."""
    if backend is None:
        return "CUDA" if cuda_sources else "CPU"
    backend = str(backend).upper()
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "CPU" and cuda_sources:
        raise ValueError(f"library '{name}': {', '.join(cuda_sources)} need nvcc; pass backend='CUDA' "
                         "(or leave backend out: .cu sources make a CUDA library)")
    return backend
