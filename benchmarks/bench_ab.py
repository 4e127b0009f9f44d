"""Run-time cost of a change: this checkout (B) against another one (A), in lock step.

    git worktree add /tmp/opforge-a <base commit>
    (cd /tmp/opforge-a && OPFORGE_SKIP_KERNEL_BUILD=1 python setup.py build_ext --inplace)
    python -m benchmarks.bench_ab /tmp/opforge-a [--new CHECKOUT] [--threads 1] [--rounds 40] [--turn 0.05]
                                  [models...]

One server process per checkout loads every model once (the light zoo with seeded weights and
the 1000-node Add chain, as bench_models) and then waits; the driver asks them in turn (ABBA) to
run one model for about --turn seconds, so that A and B see the same moments of a noisy host.
On a shared 2-vCPU machine the speed of one process drifts by up to 1.5x over seconds; with
processes timed one after another (minutes apart) a 3% question cannot be answered, while the
ratio of two turns a few milliseconds apart is steady. The table gives, per model, the ratio of
the medians over all runs and the median of the per-round ratios (the paired estimate, which is
the one to quote) with its range. A's kernel library comes from A's own tree or cache: build it
there first (A's first run otherwise builds it, which takes minutes).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def serve(tree: str, models: str, threads: int) -> None:
    """The server: opforge from `tree`, every model of `models`; on each stdin line 'name k' runs
    that model k times and prints the k wall times as a JSON list."""
    sys.path.insert(0, tree)
    import opforge

    if not Path(opforge.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"opforge came from {opforge.__file__}, not from {tree}")
    from benchmarks.bench_models import WARMUP_RUNS   # imports the opforge above

    sessions = {}
    for path in sorted(Path(models).glob("*.onnx")):
        feed = dict(np.load(path.with_suffix(".npz")))
        options = opforge.SessionOptions()
        options.intra_op_num_threads = threads
        sess = opforge.InferenceSession(str(path), options)
        for _ in range(WARMUP_RUNS):  # past the plan's compile and its timing of steps with and without workers
            sess.run(None, feed)
        sessions[path.stem] = (sess, feed)
    print(json.dumps(sorted(sessions)), flush=True)
    for line in sys.stdin:
        name, count = line.split()
        sess, feed = sessions[name]
        taken = []
        for _ in range(int(count)):
            start = time.perf_counter()
            sess.run(None, feed)
            taken.append(time.perf_counter() - start)
        print(json.dumps(taken), flush=True)


def write_models(folder: Path, names: list) -> None:
    """The chosen models (all when `names` is empty) and one seeded random feed each, as files."""
    import onnx
    import onnxruntime as ort

    from benchmarks.bench_models import add_chain, random_feed
    from tests.support.zoo import light_model, light_model_names

    models = {n: (lambda n=n: light_model(n)) for n in light_model_names()}
    models["add_chain_1000"] = add_chain
    chosen = [n for n in models if not names or any(part in n for part in names)]
    if not chosen:
        raise SystemExit(f"no model matches {names}; the models are {sorted(models)}")
    for name in chosen:
        model = models[name]()
        onnx.save(model, folder / f"{name}.onnx")
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.savez(folder / f"{name}.npz", **random_feed(ref))


class Server:
    def __init__(self, tree: str, models: Path, threads: int):
        here = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_ab", "--serve", tree, str(models), str(threads)],
            cwd=here, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.names = json.loads(self._line(tree))
        self.tree = tree

    def _line(self, tree: str) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the server for {tree} stopped (exit code {self.proc.wait()})")
        return line

    def run(self, name: str, count: int) -> list:
        self.proc.stdin.write(f"{name} {count}\n")
        self.proc.stdin.flush()
        return json.loads(self._line(self.tree))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def compare(a_tree: str, b_tree: str, models: Path, threads: int, rounds: int, turn: float) -> dict:
    """Per model: (A's median, B's median, B/A of the medians, per-round B/A ratios)."""
    a, b = Server(a_tree, models, threads), Server(b_tree, models, threads)
    try:
        runs = {n: max(3, round(turn / statistics.median(a.run(n, 3)))) for n in a.names}
        times = {n: ([], []) for n in a.names}
        ratios = {n: [] for n in a.names}
        for r in range(rounds):
            for name, count in runs.items():
                order = (0, 1) if r % 2 == 0 else (1, 0)
                got = [None, None]
                for side in order:
                    got[side] = (a, b)[side].run(name, count)
                    times[name][side].extend(got[side])
                ratios[name].append(statistics.median(got[1]) / statistics.median(got[0]))
    finally:
        a.close()
        b.close()
    result = {}
    for name in runs:
        ta, tb = statistics.median(times[name][0]), statistics.median(times[name][1])
        result[name] = (ta, tb, tb / ta, sorted(ratios[name]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", help="the other checkout (A), with its _core built")
    parser.add_argument("models", nargs="*", help="model names or parts of them (default: all)")
    parser.add_argument("--new", default=str(Path(__file__).resolve().parents[1]),
                        help="the checkout to compare (B; default: this one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--turn", type=float, default=0.05, help="seconds of runs per turn (at least 3 runs)")
    parser.add_argument("--serve", nargs=3, metavar=("TREE", "MODELS", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_intermixed_args()
    if args.serve:
        return serve(args.serve[0], args.serve[1], int(args.serve[2]))
    if not args.base:
        parser.error("the base checkout (A) is required")
    here = args.new
    with tempfile.TemporaryDirectory() as tmp:
        write_models(Path(tmp), args.models)
        load = os.getloadavg()
        print(f"A = {args.base}\nB = {here}\nthreads {args.threads}, {args.rounds} rounds of ~{args.turn} s turns; "
              f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        result = compare(args.base, here, Path(tmp), args.threads, args.rounds, args.turn)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"\n{'model':<24}{'A ms':>10}{'B ms':>10}{'B/A all runs':>14}{'B/A per round':>15}  range of rounds")
    logs = []
    for name, (ta, tb, ratio, rounds) in result.items():
        paired = statistics.median(rounds)
        if name.startswith("light_"):
            logs.append(math.log(paired))
        print(f"{name:<24}{ta * 1e3:>10.3f}{tb * 1e3:>10.3f}{ratio:>14.3f}{paired:>15.3f}  "
              f"{rounds[0]:.3f}..{rounds[-1]:.3f}")
    if logs:
        print(f"light zoo geo-mean of the per-round B/A: {math.exp(sum(logs) / len(logs)):.3f}")


if __name__ == "__main__":
    main()
