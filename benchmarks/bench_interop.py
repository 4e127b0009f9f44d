"""Per-call overhead of an opforge op in plain onnxruntime, against the same op written by hand
against onnxruntime's C API, side by side in one run.

    python -m benchmarks.bench_interop [--calls 20000] [--repeats 7]

Both libraries hold leaky_relu on float32: opforge's is examples/ops built with
ops.onnxruntime_library(); the anchor is benchmarks/ort_hand_written_op.cpp compiled here with
g++. Each one-node model runs on tiny inputs (the op's own work negligible, so what is timed is
the custom-op call path: onnxruntime's kernel dispatch, the adapter's reads of inputs, opforge's
checks, infer and output allocation) with one intra-op thread; the samples alternate A/B so load
drifts hit both. Prints the median microseconds per call, the ratio (target <= 1.1) and the
load average.
"""
import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto as T

import opforge
from tests.support.ort_interop import hand_written_library, one_op_model, ort_session

ROOT = Path(__file__).resolve().parent.parent


def per_call_us(session, feed: dict, calls: int) -> float:
    run = session.run
    started = time.perf_counter()
    for _ in range(calls):
        run(None, feed)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    opforge_lib = opforge.load_dir(ROOT / "examples" / "ops").onnxruntime_library()
    with tempfile.TemporaryDirectory() as tmp:
        hand_lib = hand_written_library(Path(tmp))
        print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for shape in ([16], [64, 64]):
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            sessions = {name: ort_session(one_op_model("leaky_relu", [("x", T.FLOAT, shape)], [("y", T.FLOAT, shape)],
                                                       domain=domain, alpha=0.1), lib)
                        for name, domain, lib in (("opforge", "com.example", opforge_lib),
                                                  ("hand-written", "com.hand", hand_lib))}
            outs = [s.run(None, {"x": x})[0] for s in sessions.values()]
            assert np.array_equal(outs[0], outs[1]), "the two ops disagree"
            samples = {name: [] for name in sessions}
            for _ in range(args.repeats):
                for name, session in sessions.items():
                    samples[name].append(per_call_us(session, {"x": x}, args.calls))
            ours, anchor = (statistics.median(samples[n]) for n in ("opforge", "hand-written"))
            print(f"leaky_relu {shape}: opforge {ours:.2f} us/call, hand-written {anchor:.2f} us/call, "
                  f"ratio {ours / anchor:.3f} (target <= 1.1)")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
