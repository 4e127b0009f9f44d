"""Running ninja and reporting its progress."""
import os
import shutil
import subprocess
import sys
import time
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


def run_ninja(workdir: Path, verbose: bool, echo: "bool | None" = None, progress=None) -> "tuple[bool, str]":
    """Runs ninja in `workdir`; returns (succeeded, combined output). `verbose` shows every
    command and its output. `echo` prints ninja's output as it comes ([n/N] and the file being
    compiled); by default (None) that starts once the build has taken a second, so fast builds
    stay quiet. `progress`, if given, is called with each line of output as it comes."""
    argv = [ninja_binary(), "-C", str(workdir), f"-j{config.build_jobs()}"]
    if verbose:
        argv.append("-v")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    chunks, shown, started = [], 0, time.monotonic()
    for line in proc.stdout:
        chunks.append(line)
        if progress is not None:
            progress(line)
        if verbose or echo or (echo is None and time.monotonic() - started > 1.0):
            sys.stdout.write("".join(chunks[shown:]))
            sys.stdout.flush()
            shown = len(chunks)
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
