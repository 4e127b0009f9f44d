"""check_op on deliberately broken ops and on correct ones over many seeds.

    python -m benchmarks.bench_check_op [--seeds 100]

Prints check_op's table for each op of tests/testing/broken_ops.cpp (an off-by-one loop bound,
an unwritten last element, a wrong dtype in infer, a race on a shared buffer, a write past the
workspace, a wrong result from 1024 elements on, a wrong result for one dtype only, a wrong
broadcast), then runs the correct ops (broken_ops' scale, the example ops' leaky_relu, add_n and
softmax_rows) with --seeds seeds and counts false alarms (target: 0), with the cases run in
opforge and in onnxruntime (where it is installed), the time per check and the load average.
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ["off_by_one", "last_unwritten", "infer_dtype", "shared_buffer", "workspace_overrun", "blocked_tail",
          "float64_wrong", "add_bad_broadcast"]


def leaky_relu(x, alpha):
    return np.where(x > 0, x, (x.astype(np.float64) * np.float64(np.float32(alpha))).astype(x.dtype))


def softmax(x, temperature):
    if not x.size:
        return x.copy()
    e = np.exp((x - x.max(axis=-1, keepdims=True)) / temperature)
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    import opforge
    from opforge.testing import check_op

    broken = opforge.CustomOpBuilder("broken_ops", [ROOT / "tests" / "testing" / "broken_ops.cpp"]).load()
    examples = opforge.load_dir(ROOT / "examples" / "ops")
    caught = 0
    for name in BROKEN:
        reference = (lambda a, b: a + b) if name == "add_bad_broadcast" else (lambda x: 2 * x)
        report = check_op(getattr(broken, name), reference, raises=False)
        caught += not report.ok
        print(report, end="\n\n")
    print(f"broken ops caught: {caught} of {len(BROKEN)}")
    # softmax_rows sums rows of up to 262147 floats one after another (see test_check_op.py)
    correct = [(broken.scale, lambda x: 2 * x, {}), (examples.leaky_relu, leaky_relu, {}),
               (examples.add_n, lambda *xs: sum(xs[1:], xs[0]), {}),
               (examples.softmax_rows, softmax, {"atol": 1e-6, "rtol": 2e-3})]
    for op, reference, tolerances in correct if args.seeds else []:
        alarms, cases, in_ort, started = [], 0, 0, time.perf_counter()
        for seed in range(args.seeds):
            report = check_op(op, reference, seed=seed, raises=False, **tolerances)
            cases, in_ort = cases + report.runs["compute"], in_ort + report.runs["onnxruntime"]
            if not report.ok:
                alarms.append(report)
        seconds = (time.perf_counter() - started) / args.seeds
        print(f"{op.__name__}: {args.seeds} seeds, {cases} cases ({in_ort} also in onnxruntime), "
              f"{len(alarms)} false alarms, {seconds:.2f} s per check_op, "
              f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        for report in alarms[:2]:
            print(report)


if __name__ == "__main__":
    main()
