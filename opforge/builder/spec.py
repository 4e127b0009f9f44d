"""BuildSpec: what the user asked to build, checked and normalised."""
import os
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

    @property
    def is_extension(self) -> bool:
        """True when a source defines a pybind11 module, which is loaded as a Python module."""
        return any("PYBIND11_MODULE" in text for text in self.texts)


def make_spec(name, sources, backend="CPU", extra_cflags=None, extra_ldflags=None,
              extra_include_paths=None, build_dir=None, verbose=False) -> BuildSpec:
    """Checks the arguments of CustomOpBuilder and returns a BuildSpec.

    Raises ValueError for a bad name or backend, FileNotFoundError for missing sources,
    NotImplementedError for CUDA (not supported yet).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"library name {name!r} must be a Python identifier (letters, digits, _)")
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = tuple(Path(s).expanduser().absolute() for s in sources)
    if not paths:
        raise ValueError(f"library '{name}' has no sources")
    backend = str(backend).upper()
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    cuda = [p.name for p in paths if p.suffix in CUDA_SUFFIXES]
    if backend == "CUDA" or cuda:
        raise NotImplementedError(
            f"library '{name}': CUDA builds (backend='CUDA', .cu sources) are not supported yet; "
            "build CPU sources with backend='CPU'")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"library '{name}': source file(s) not found: {', '.join(missing)}")
    odd = [p.name for p in paths if p.suffix not in CPP_SUFFIXES]
    if odd:
        raise ValueError(f"library '{name}': {', '.join(odd)} not a C++ source "
                         f"(expected {', '.join(CPP_SUFFIXES)})")
    texts = tuple(p.read_text(errors="replace") for p in paths)
    return BuildSpec(name, paths, backend, tuple(extra_cflags or ()), tuple(extra_ldflags or ()),
                     tuple(Path(p).absolute() for p in extra_include_paths or ()),
                     Path(build_dir).absolute() if build_dir else None, bool(verbose), texts)
