"""Running ninja and reporting its progress."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from opforge import config
from opforge.errors import BuildError


def ninja_binary() -> str:
    """The ninja executable: the `ninja` package's, else one on PATH."""
    try:
        import ninja  # the PyPI package ships the binary

        candidate = os.path.join(ninja.BIN_DIR, "ninja")
        if os.path.exists(candidate):
            return candidate
    except ImportError:
        pass
    found = shutil.which("ninja")
    if not found:
        raise BuildError("ninja not found: `pip install ninja` (a dependency of opforge)")
    return found


def run_ninja(workdir: Path, verbose: bool, echo: "bool | None" = None) -> "tuple[bool, str]":
    """Runs ninja in `workdir`; returns (succeeded, combined output). `verbose` shows every
    command and its output; `echo` (default: `verbose`) prints ninja's output as it comes."""
    argv = [ninja_binary(), "-C", str(workdir), f"-j{config.build_jobs()}"]
    echo = verbose if echo is None else echo
    if verbose:
        argv.append("-v")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    chunks = []
    for line in proc.stdout:
        chunks.append(line)
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()
    proc.wait()
    return proc.returncode == 0, "".join(chunks)


def write_if_changed(path: Path, text: str) -> None:
    """Rewrites `path` only when its text differs (ninja then keeps its up-to-date state)."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.write_text(text)
