"""The C++ compiler: which one, and its identity, detected once and remembered in the cache."""
import json
import os
from pathlib import Path
from typing import NamedTuple

from opforge import config
from opforge.cache.keys import digest
from opforge.errors import BuildError


class Toolchain(NamedTuple):
    """A compiler command and what identifies its output: real path and version banner."""

    command: tuple          # argv prefix, e.g. ("ccache", "/usr/bin/g++")
    real_path: str
    version: str
    family: str             # "gcc" or "clang"

    @property
    def identity(self) -> str:
        return digest(self.command, self.real_path, self.version)


def detect(root: Path) -> Toolchain:
    """The toolchain named by $CXX (else c++), its version read once per binary and cached.

    The warm path starts no subprocess: the version is keyed by the binary's path, size and
    modification time. Raises BuildError when no compiler is found.
    """
    argv = _split(config.cxx())
    found = which(argv[-1]) if argv else None
    if not found:
        raise BuildError(f"C++ compiler '{config.cxx()}' not found: install one (Debian/Ubuntu: "
                         "`apt-get install g++`) or set CXX to its path")
    real = os.path.realpath(found)
    st = os.stat(real)
    memo = root / "toolchains" / (digest(argv, real, st.st_size, st.st_mtime_ns)[:24] + ".json")
    try:
        version = json.loads(memo.read_text())["version"]
    except (OSError, ValueError, KeyError):
        version = _read_version(argv[:-1] + [found])
        from opforge.cache.entry import write_atomic

        write_atomic(memo, json.dumps({"version": version, "path": real}))
    family = "clang" if "clang" in version.lower() else "gcc"
    return Toolchain(tuple(argv[:-1] + [found]), real, version, family)


def _split(command: str) -> list:
    """$CXX as argv ("ccache g++" -> two words); shlex only when it holds quotes or escapes."""
    if any(c in command for c in "'\"\\"):
        import shlex

        return shlex.split(command)
    return command.split()


def which(program: str) -> "str | None":
    """The executable `program` resolves to on PATH (shutil.which without its import cost)."""
    if os.sep in program:
        return program if os.access(program, os.X_OK) else None
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _read_version(argv) -> str:
    import subprocess

    try:
        out = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise BuildError(f"cannot run the C++ compiler {argv[-1]}: {exc}") from None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"


def cpu_identity() -> str:
    """The CPU model and feature flags, for keys of builds made with -march=native."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return os.uname().machine
    wanted = [ln for ln in lines if ln.startswith(("model name", "flags", "Features"))]
    return digest(sorted(set(wanted)))
