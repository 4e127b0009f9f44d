"""Shared fixtures: a private cache folder per test, and fresh Python processes."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A new, empty opforge cache for this test (set through OPFORGE_CACHE_DIR)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("OPFORGE_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One cache for tests that only read what they build (saves rebuilding)."""
    path = tmp_path_factory.mktemp("shared") / "cache"
    old = os.environ.get("OPFORGE_CACHE_DIR")
    os.environ["OPFORGE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("OPFORGE_CACHE_DIR", None)
    else:
        os.environ["OPFORGE_CACHE_DIR"] = old


def run_python(code: str, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter; returns the completed process (text output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
