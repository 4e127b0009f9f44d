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


def test_gpu_check_script_parses_and_lists_its_steps():
    """benchmarks/gpu_check.sh (run by hand on a GPU) is valid bash and names its steps."""
    import subprocess

    script = Path(__file__).parent.parent / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, check=True).stdout
    assert "steps: install gpu cupy tests example race fp16 stream memcheck bench" in out
    refused = subprocess.run(["bash", str(script), "--only", "nope"], capture_output=True, text=True)
    assert refused.returncode == 2 and "no step 'nope'" in refused.stderr


def test_isolated_timing_runs_each_runtime_in_a_process_of_its_own():
    """bench_models --isolate: a tiny model timed in one process per runtime and round."""
    import numpy as np

    from benchmarks import bench_models

    model = bench_models.add_chain(20)
    feed = {"v0": np.ones(16, np.float32)}
    ort_time, ours_time, ratio = bench_models.isolated_times(model.SerializeToString(), feed, threads=1, repeat=3,
                                                             rounds=1, seconds=0.05)
    assert 0 < ort_time < 1 and 0 < ours_time < 1
    assert ratio == pytest.approx(ours_time / ort_time)   # one round: its own ratio


def test_lock_step_ab_times_both_checkouts_on_the_same_models(tmp_path):
    """bench_ab: two servers (here both this checkout) take turns on each model; every round
    gives a ratio, and the same code on both sides gives ratios near 1."""
    import numpy as np
    import onnx

    from benchmarks import bench_ab, bench_models

    onnx.save(bench_models.add_chain(50), tmp_path / "chain.onnx")
    np.savez(tmp_path / "chain.npz", v0=np.ones(16, np.float32))
    here = str(Path(__file__).resolve().parents[1])
    result = bench_ab.compare(here, here, tmp_path, threads=1, rounds=4, turn=0.01)
    assert list(result) == ["chain"]
    a_time, b_time, ratio, rounds = result["chain"]
    assert 0 < a_time < 0.1 and 0 < b_time < 0.1 and len(rounds) == 4
    assert 0.2 < ratio < 5   # the same code: far from what any real difference would show


def test_lock_step_ab_refuses_a_checkout_without_opforge(tmp_path):
    from benchmarks import bench_ab

    with pytest.raises(SystemExit, match="stopped"):
        bench_ab.Server(str(tmp_path), tmp_path, 1)


def test_conv_chain_times_both_runtimes_on_the_same_chain():
    """bench_conv_chain: the chain's outputs agree between the runtimes (so both time the same
    work), and a tiny chain is timed per conv on each."""
    import numpy as np

    from benchmarks import bench_conv_chain

    model = bench_conv_chain.chain_model(8, 9, 11, 3, 3)
    x = np.random.default_rng(0).standard_normal((1, 8, 9, 11)).astype(np.float32)
    theirs, ours = (s.run(None, {"x": x})[0] for s in bench_conv_chain.sessions(model, threads=1))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())
    assert np.abs(theirs).max() > 0.1   # the activations stay of order one through the chain
    ort_ms, ours_ms = bench_conv_chain.per_conv_ms((8, 9, 11, 3), 3, threads=1, rounds=2)
    assert 0 < ort_ms < 1000 and 0 < ours_ms < 1000
