"""README.md runs as written: every ```python and ```bash block, in order, in an empty folder.

A C++ block whose first line names a file (``// my_ops.cpp``) is a file the README tells the
reader to create; it is written into the folder when the reading reaches it. A block that must
not run here is marked with an HTML comment the rendered page does not show,
``<!-- readme-test: skip (why) -->``, on the line before it; SKIPPED below lists each one, so a
new skip is a visible change to this test, never a silent one.
"""
import json
import os
import re
import subprocess
import sys

from tests.support.helpers import ROOT

README = ROOT / "README.md"
RUNNABLE = ("python", "bash", "sh")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
SKIP = re.compile(r"<!-- readme-test: skip \((.+?)\) -->\n$")
FILE_NAME = re.compile(r"^// ([\w.-]+\.(?:cpp|cu|h|cuh))\n")

# (language, first line) of every block the README marks as not run here, and why.
SKIPPED = {
    ("bash", 'pip install -e ".[test,ray]"     # opforge, with what the tests and the Ray example need'):
        "installs packages and runs the whole suite",
    ("python", "import ray, opforge.ray"): "needs a Parquet dataset under images/",
    ("python", "import cupy as cp, opforge"): "needs an NVIDIA GPU and cupy",
    ("bash", "python -m benchmarks.bench_builder      # cold build, edit + rebuild, fresh process vs g++ and torch"):
        "runs for minutes, from the repository root",
}

# Runs the blocks in one interpreter, as a reader pasting them into one notebook would; a
# traceback names the block as README.md:LINE.
RUNNER = """
import json, subprocess, sys
from pathlib import Path
namespace = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    print(f"--- README.md:{block['line']} ({block['kind']})", flush=True)
    if block["kind"] == "file":
        Path(block["name"]).write_text(block["code"])
    elif block["kind"] == "python":
        exec(compile(block["code"], f"README.md:{block['line']}", "exec"), namespace)
    else:
        subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]], check=True)
"""


def readme_blocks(text: str):
    """(kind, code, line, skip reason or None) of every fenced block, in order; kind is the
    fence's language, or "file" for a C++ block that names the file it is."""
    for match in FENCE.finditer(text):
        lang, code = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        skip = SKIP.search(text[:match.start()])
        reason = skip.group(1) if skip else None
        named = FILE_NAME.match(code)
        if named:
            yield "file", code, line, reason, named.group(1)
        elif lang in RUNNABLE:
            yield ("python" if lang == "python" else "bash"), code, line, reason, None


def test_the_skipped_blocks_are_exactly_the_listed_ones():
    marked = {(kind, code.splitlines()[0]): reason
              for kind, code, _, reason, _ in readme_blocks(README.read_text()) if reason}
    print("README blocks not run here:", *(f"{k[0]} '{k[1]}': {why}" for k, why in marked.items()),
          sep="\n  ")
    assert marked == SKIPPED


def test_every_readme_block_runs_as_written(tmp_path):
    blocks = [{"kind": kind, "code": code, "line": line, "name": name}
              for kind, code, line, reason, name in readme_blocks(README.read_text()) if not reason]
    assert sum(b["kind"] == "python" for b in blocks) >= 4 and sum(b["kind"] == "bash" for b in blocks) >= 3
    work, bin_dir = tmp_path / "reader", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    command = bin_dir / "opforge"   # the `opforge` command of the tree under test
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m opforge "$@"\n')
    command.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(blocks), cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"a README block failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    out = done.stdout
    assert "leaky_relu(X, /, *, alpha=0.01)" in out and "Y: same as X (float32 | float64)" in out   # help(op)
    assert out.count("leaky_relu(X, ") == 1, "help(op) shows the signature once"
    assert "output y: float32 [2, 4]" in out and "latency over 10 runs" in out   # opforge run
    assert (work / "out.npz").is_file() and (work / "ops" / "my_ops.cpp").is_file()
