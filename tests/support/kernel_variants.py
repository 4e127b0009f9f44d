"""Which hand-written instruction-set paths the built-in kernels took: how a test knows that the
path it targets ran, rather than a fallback that happens to compute the same numbers."""
from __future__ import annotations

import contextlib

import pytest

from opforge.runtime.providers.cpu import library as native


def build_isa() -> str:
    """The instruction set the kernel library's paths were compiled for: avx512, avx2, neon or
    portable (kernel_paths.h's OPFORGE_ISA_NAME)."""
    isa = set(native.kernel_isa())
    if "avx512f" in isa:
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= isa else "neon" if "aarch64" in isa else "portable"


@contextlib.contextmanager
def paths_taken():
    """Yields a set that, once the block ends, holds the paths the kernels' calls took in it."""
    before = native.kernel_paths()
    taken: set = set()
    yield taken
    after = native.kernel_paths()
    taken.update(name for name, calls in after.items() if calls > before.get(name, 0))


def assert_path(taken: set, path: str, isas: tuple) -> None:
    """That ``path`` ran in this build's instruction set; where the build's set is not among
    ``isas`` (those the path is written for), the test says so and skips (its numbers were
    checked against the fallback that ran instead)."""
    isa = build_isa()
    if isa not in isas:
        pytest.skip(f"{path} has no {isa} variant in this kernel build ({sorted(taken)} ran and matched)")
    assert f"{path}.{isa}" in taken, f"expected {path}.{isa} to run; the kernels took {sorted(taken)}"
