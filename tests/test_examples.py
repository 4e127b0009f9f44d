"""The examples run as a reader runs them, each in a fresh interpreter, and check themselves."""
import os
import subprocess
import sys

from tests.support.helpers import EXAMPLES, ROOT


def run_example(name: str, cwd) -> str:
    env = {**os.environ, "TMPDIR": str(cwd),   # what an example leaves in a temporary folder stays here
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_walkthrough_runs_every_cell(tmp_path):
    out = run_example("walkthrough.py", tmp_path)
    assert not list(tmp_path.glob("opforge-walkthrough-*")), "the walkthrough left its folder in the temp folder"
    assert "Swish(X, /, *, beta=1.0)" in out                            # help(op)
    assert "after the edit, Swish(x) is doubled" in out                 # the header edit reloaded
    assert "BuildError: " in out and "swish.cpp:9:" in out and "flaot" in out
    assert "model output checked against numpy: (32, 16)" in out
    assert "Swish on CPUExecutionProvider" in out and "us per run" in out   # the profile
    assert "check_op(Swish, seed=0)" in out                                 # the mistake found
    assert any(line.startswith("values") and "FAIL" in line for line in out.splitlines())
    assert "fixed: the session's output changed back" in out                # reload() in the running session
    assert "saved the header; the session ran the new kernel" in out        # ops.watch()


def test_demo_runs(tmp_path):
    assert "checked against a numpy implementation" in run_example("demo.py", tmp_path)
