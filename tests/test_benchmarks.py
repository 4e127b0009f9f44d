"""Every benchmark starts: it imports as `python -m benchmarks.NAME` does, and its --help works
(the benchmarks themselves are run by hand, not in the suite)."""
import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted(p.stem for p in (Path(__file__).parent.parent / "benchmarks").glob("*.py")
                    if p.stem != "__init__")


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_imports_and_prints_its_help(name, monkeypatch, capsys):
    module = importlib.import_module(f"benchmarks.{name}")
    if not hasattr(module, "main"):   # a module the others import (op_profile)
        return
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{name}.py", "--help"])
    with pytest.raises(SystemExit) as done:
        module.main()
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out
