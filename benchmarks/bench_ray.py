"""Ray Data throughput: opforge.ray.predict with 1 and 2 workers, and onnxruntime in the same
kind of actors, on a light-zoo model and on a custom-op model.

    pip install -e ".[ray,bench]" && python benchmarks/bench_ray.py [--rows 2000] [--model light_squeezenet]

Prints rows/s per runtime and worker count, the scaling from 1 to 2 workers (goal >= 0.9x
linear on local cores), the per-batch overhead (a 1-row model's time per batch) and the load
average. Sessions are made once per actor; the timings exclude actor start-up (one warm-up pass).
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import ray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))
from demo import build_model  # noqa: E402
from zoo import light_model  # noqa: E402

import opforge  # noqa: E402
import opforge.ray  # noqa: E402


class OnnxruntimePredictor:
    """The same job as opforge.ray.Predictor, on onnxruntime (the anchor)."""

    def __init__(self, model: bytes, threads: int):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        first = self.session.get_inputs()[0]
        self.input, self.one_row = first.name, first.shape[:1] == [1]

    def __call__(self, batch: dict) -> dict:
        x = np.asarray(batch["data"], np.float32)
        if self.one_row:   # as opforge's Predictor does for a model with a fixed batch of 1
            return {"out": np.concatenate([self.session.run(None, {self.input: x[i:i + 1]})[0]
                                           for i in range(len(x))])}
        return {"out": self.session.run(None, {self.input: x})[0]}


def rows_per_second(dataset, run) -> float:
    run(dataset).materialize()             # warm-up: actors start, sessions are made
    start = time.perf_counter()
    count = run(dataset).count()
    return count / (time.perf_counter() - start)


def measure(name, model_bytes, x, custom_ops, batch_size) -> list:
    rows = []
    # In blocks for both workers: Ray hands a worker whole blocks, and from_numpy makes one (opforge's
    # predict splits such a dataset itself; the onnxruntime actors get the same blocks).
    dataset = ray.data.from_numpy(x).repartition(8, shuffle=False).materialize()
    threads = 1   # one core per worker, as Ray schedules them: linear scaling is then 2x
    for workers in (1, 2):
        options = opforge.SessionOptions()
        options.intra_op_num_threads = threads
        ours = rows_per_second(dataset, lambda d: opforge.ray.predict(
            d, model_bytes, custom_ops=custom_ops, batch_size=batch_size, concurrency=workers,
            session_options=options))
        theirs = None
        if not custom_ops:
            theirs = rows_per_second(dataset, lambda d: d.map_batches(
                OnnxruntimePredictor, batch_size=batch_size, batch_format="numpy", concurrency=workers,
                fn_constructor_args=(model_bytes, threads)))
        rows.append((name, workers, ours, theirs))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--model", default="light_squeezenet")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rng = np.random.default_rng(0)
    zoo = light_model(args.model)
    shape = opforge.InferenceSession(zoo).get_inputs()[0].shape[1:]   # the input to feed, not a weight
    table = measure(args.model, zoo.SerializeToString(), rng.standard_normal([max(args.rows // 20, 40)] + shape)
                    .astype(np.float32), (), args.batch_size)
    demo = build_model()
    table += measure("custom ops (examples/ops)", demo.SerializeToString(),
                     rng.standard_normal((args.rows * 50, 8)).astype(np.float32), [ROOT / "examples" / "ops"], 1000)
    tiny = rng.standard_normal((args.rows, 8)).astype(np.float32)
    overhead = rows_per_second(ray.data.from_numpy(tiny).materialize(), lambda d: opforge.ray.predict(
        d, demo.SerializeToString(), custom_ops=[ROOT / "examples" / "ops"], batch_size=1, concurrency=1))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"\nRay Data throughput, rows/s ({os.cpu_count()} cores, load average {load})"
          + ("  (busy machine: figures are not quiet-machine ones)" if os.getloadavg()[0] > 0.5 else ""))
    print(f"{'model':<28}{'workers':>8}{'opforge':>12}{'onnxruntime':>13}{'ratio':>8}")
    for name, workers, ours, theirs in table:
        ratio = f"{theirs / ours:>8.2f}" if theirs else f"{'':>8}"
        print(f"{name:<28}{workers:>8}{ours:>12.1f}{(f'{theirs:.1f}' if theirs else '-'):>13}{ratio}")
    for name in dict.fromkeys(r[0] for r in table):
        one, two = [r[2] for r in table if r[0] == name]
        print(f"scaling 1 -> 2 workers, {name}: {two / one:.2f}x ({two / one / 2:.2f} of linear; goal >= 0.9)")
    print(f"per-batch overhead (1-row batches of the custom-op model): {1e3 / overhead:.2f} ms")
    print("ratio: opforge time per row over onnxruntime's (< 1: opforge is faster)")
    ray.shutdown()


if __name__ == "__main__":
    main()
