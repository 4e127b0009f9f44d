"""Ray Data throughput: opforge.ray.predict with 1 and 2 workers, and onnxruntime in the same
kind of actors, on a light-zoo model and on a custom-op model.

    pip install -e ".[ray,bench]" && python -m benchmarks.bench_ray [--seconds 6] [--model light_squeezenet]

Every execution of a Ray Data pipeline starts its own actors (a process each, opforge or
onnxruntime imported, the session made): a few seconds that a short run would count as
throughput. So the table gives the steady-state rate, read from the arrival times of the
output blocks (the rows after the first tenth over the time they took; 40 blocks, so a worker
idles at most for the last), and the start-up, the time to the first output. Scaling from 1 to 2
workers is on the steady-state rate (goal >= 0.9x linear on local cores). The per-batch
overhead is a 1-row batch of a tiny custom-op model. Prints the load average; quote figures
taken at load < 0.5.
"""
import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import ray

ROOT = Path(__file__).resolve().parent.parent
from examples.demo import build_model
from tests.support.zoo import light_model

import opforge  # noqa: E402
import opforge.ray  # noqa: E402

OPS = ROOT / "examples" / "ops"


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


def custom_op_model(width: int, depth: int) -> onnx.ModelProto:
    """x[batch, width] -> depth x (MatMul -> com.example::leaky_relu) -> com.example::softmax_rows:
    enough work per row (2 * depth * width^2 flop) for a worker's time to be the model's, not Ray's."""
    rng = np.random.default_rng(1)
    nodes, weights, value = [], [], "x"
    for i in range(depth):
        weights.append(numpy_helper.from_array(
            (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [value, f"w{i}"], [f"h{i}"]),
                  helper.make_node("leaky_relu", [f"h{i}"], [f"a{i}"], domain="com.example", alpha=0.1)]
        value = f"a{i}"
    nodes.append(helper.make_node("softmax_rows", [value], ["y"], domain="com.example", temperature=1.0))
    graph = helper.make_graph(nodes, "ray_bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def rate(run, dataset) -> tuple:
    """(rows/s, start-up s) of one execution, read from the arrival times of its output blocks:
    the rows after the first tenth over the time they took, and the time to the first block."""
    start = time.perf_counter()
    arrivals = []
    for batch in run(dataset).iter_batches(batch_size=None, batch_format="numpy"):
        arrivals.append((time.perf_counter(), len(next(iter(batch.values())))))
    total = sum(n for _, n in arrivals)
    done, k = 0, 0
    while done < total / 10:
        done += arrivals[k][1]
        k += 1
    return (total - done) / (arrivals[-1][0] - arrivals[k - 1][0]), arrivals[0][0] - start


def steady_state(runs: dict, dataset, repeats: int) -> dict:
    """{runtime: (rows/s, start-up s)}: medians over ``repeats`` executions, each runtime's
    executions interleaved with the others' so that load drift hits all alike."""
    results = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            results[name].append(rate(run, dataset))
    return {name: tuple(statistics.median(column) for column in zip(*values)) for name, values in results.items()}


def _plain_rate(model_bytes: bytes, ops: list, rows: np.ndarray, seconds: float) -> float:
    """Rows/s of one single-threaded session in this process, run for about ``seconds``."""
    options = opforge.SessionOptions()
    options.intra_op_num_threads = 1
    session = opforge.InferenceSession(model_bytes, options, custom_ops=[opforge.load_dir(p) for p in ops])
    feed = {session.get_inputs()[0].name: rows}
    session.run(None, feed)
    start, runs = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        session.run(None, feed)
        runs += 1
    return runs * len(rows) / (time.perf_counter() - start)


def plain_scaling(model_bytes: bytes, ops: list, rows: np.ndarray) -> float:
    """The same model in 2 plain processes at once over 1 alone, without Ray: what the cores
    give, so that the rest of Ray's shortfall is Ray's."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawned, not forked: a fork of a process that runs Ray's threads can deadlock
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        alone = pool.submit(_plain_rate, model_bytes, ops, rows, 2.0).result()
        both = [pool.submit(_plain_rate, model_bytes, ops, rows, 2.0) for _ in range(2)]
        return sum(f.result() for f in both) / alone


def sample_rows(model_bytes: bytes, ops: list, make_rows, batch_size: int) -> np.ndarray:
    """One run's input as a worker feeds it: a batch, or one row for a model of fixed batch 1."""
    first = opforge.InferenceSession(model_bytes, custom_ops=[opforge.load_dir(p) for p in ops]).get_inputs()[0]
    return make_rows(1 if first.shape[:1] == [1] else batch_size)


def measure(name, model_bytes, make_rows, custom_ops, batch_size, seconds, repeats) -> list:
    """The model over a dataset that one single-threaded session runs in about ``seconds`` (at least
    40 batches), in 40 blocks: a worker idles at most for the last one."""
    ops = [str(p) for p in custom_ops]
    sample = sample_rows(model_bytes, ops, make_rows, batch_size)
    rows = max(int(seconds * _plain_rate(model_bytes, ops, sample, 0.5)) // (40 * batch_size), 1) * 40 * batch_size
    dataset = ray.data.from_numpy(make_rows(rows)).repartition(40, shuffle=False).materialize()
    threads = 1   # one core per worker, as Ray schedules them: linear scaling is then 2x
    table = []
    for workers in (1, 2):
        options = opforge.SessionOptions()
        options.intra_op_num_threads = threads
        runs = {"opforge": lambda d, w=workers: opforge.ray.predict(
            d, model_bytes, custom_ops=custom_ops, batch_size=batch_size, concurrency=w, session_options=options),
            "onnxruntime": lambda d, w=workers: d.map_batches(
            OnnxruntimePredictor, batch_size=batch_size, batch_format="numpy", concurrency=w,
            fn_constructor_args=(model_bytes, threads))}
        if custom_ops:
            del runs["onnxruntime"]     # onnxruntime cannot run opforge's custom ops
        result = steady_state(runs, dataset, repeats)
        table.append((name, workers, result["opforge"], result.get("onnxruntime")))
    plain = plain_scaling(model_bytes, ops, sample)
    return [row + (plain,) for row in table]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="the time one worker takes over each model's dataset (sets its rows)")
    parser.add_argument("--model", default="light_squeezenet")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024, help="features of the custom-op model")
    parser.add_argument("--depth", type=int, default=8, help="MatMul + custom-op layers of the custom-op model")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    start_load = os.getloadavg()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    rng = np.random.default_rng(0)
    zoo = light_model(args.model)
    shape = opforge.InferenceSession(zoo).get_inputs()[0].shape[1:]   # the input to feed, not a weight
    zoo_rows = lambda n: rng.standard_normal([n] + shape).astype(np.float32)  # noqa: E731
    zoo_bytes = zoo.SerializeToString()
    table = measure(args.model, zoo_bytes, zoo_rows, (), args.batch_size, args.seconds, args.repeats)
    custom = custom_op_model(args.width, args.depth).SerializeToString()
    custom_rows = lambda n: rng.standard_normal((n, args.width)).astype(np.float32)  # noqa: E731
    table += measure(f"custom ops, {args.depth}x{args.width}", custom, custom_rows, [OPS], args.batch_size * 16,
                     args.seconds, args.repeats)
    demo = build_model().SerializeToString()
    tiny = ray.data.from_numpy(rng.standard_normal((2000, 8)).astype(np.float32)).repartition(40).materialize()
    (batches_per_s, _), = steady_state({"opforge": lambda d: opforge.ray.predict(
        d, demo, custom_ops=[OPS], batch_size=1, concurrency=1)}, tiny, 1).values()
    load = ", ".join(f"{v:.2f}" for v in start_load)
    print(f"\nRay Data steady-state throughput, rows/s ({os.cpu_count()} cores, load average at the start {load})"
          + ("  (busy machine: figures are not quiet-machine ones)" if start_load[0] > 0.5 else ""))
    print(f"{'model':<28}{'workers':>8}{'opforge':>11}{'start s':>9}{'onnxruntime':>13}{'start s':>9}{'ratio':>7}")
    for name, workers, (ours, our_start), theirs, _ in table:
        their_rate, their_start = theirs or (None, None)
        print(f"{name:<28}{workers:>8}{ours:>11.1f}{our_start:>9.2f}"
              + (f"{their_rate:>13.1f}{their_start:>9.2f}{their_rate / ours:>7.2f}" if theirs else f"{'-':>13}{'':>9}"))
    for name in dict.fromkeys(r[0] for r in table):
        (one, _), (two, _) = [r[2] for r in table if r[0] == name]
        line = f"scaling 1 -> 2 workers, {name}: opforge {two / one:.2f}x ({two / one / 2:.2f} of linear; goal >= 0.9)"
        theirs = [r[3] for r in table if r[0] == name]
        if all(theirs):
            line += f"; onnxruntime {theirs[1][0] / theirs[0][0]:.2f}x"
        plain = [r[4] for r in table if r[0] == name][0]
        print(line + f"; 2 plain processes without Ray {plain:.2f}x")
    print(f"per-batch overhead (1-row batches of the demo custom-op model): {1e3 / batches_per_s:.2f} ms")
    print("start s: an execution's actor start-up (process, import, session); "
          "ratio: opforge time per row over onnxruntime's (< 1: opforge is faster)")
    ray.shutdown()


if __name__ == "__main__":
    main()
