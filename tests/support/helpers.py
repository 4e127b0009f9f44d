"""Helpers shared by the tests: paths, and fresh Python processes."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_python(code: str, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter; returns the completed process (text output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
