"""Live reload under load: edit, reload and run, with runs in flight on several threads.

    python -m benchmarks.bench_reload [--cycles 1000] [--versions 1000] [--threads 4] [--saves 10]

1. cycles: a one-op library (y = k * x) runs in a session on --threads threads without pause
   while the main thread, --cycles times, edits the source to the next of --versions factors k,
   calls ops.reload() and runs once. Every run's result is checked to come whole from one
   version (all elements the same k, a k the source has had), and the process's RSS is printed
   at the start, every tenth of the cycles and at the end (flat memory: reloaded libraries are
   unloaded). With --versions below --cycles, edits return to sources built before (cache hits:
   the reload is then a dlopen and a rebind, not a compile).
2. saves: with ops.watch() on, the source is saved with a new factor --saves times and the
   time from the save to the first run() whose result uses it is measured (target <= 0.5 s for
   a one-op library). The load average is printed with the figures.
"""
import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SOURCE = r"""
#include <opforge/op.h>

static void scale(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  ctx.parallel_for(ctx.input(0).numel(), 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = FACTORf * x[i];
  });
}

OPFORGE_OP(Scale).domain("com.bench").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(scale);
"""


NONCE = os.urandom(6).hex()   # in every source: no run of the benchmark finds an earlier one's builds


def factor_of(version: int) -> float:
    return float(version % 997 + 2)


def write(path: Path, factor: float) -> None:
    path.write_text(f"// {NONCE}\n" + SOURCE.replace("FACTOR", f"{factor:.1f}"))


def model():
    from onnx import TensorProto, helper

    node = helper.make_node("Scale", ["x"], ["y"], domain="com.bench")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.bench", 1)])


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def cycles(ops, sess, source: Path, args) -> dict:
    """Edit/reload/run cycles with runs in flight on args.threads threads."""
    from opforge import _core

    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32) + 3
    stop, bad, runs, seen = threading.Event(), [], [0], set()
    known = {factor_of(v) for v in range(args.versions)}

    def run_forever():
        while not stop.is_set():
            ratio = sess.run(None, {"x": x})[0] / x
            k = round(float(ratio[0]), 3)
            if not (np.allclose(ratio, ratio[0], rtol=1e-6) and k in known):
                bad.append(ratio)
            seen.add(k)
            runs[0] += 1

    workers = [threading.Thread(target=run_forever) for _ in range(args.threads)]
    for w in workers:
        w.start()
    rss = [rss_mb()]
    print(f"cycles: {args.cycles}, {args.versions} distinct sources, {args.threads} threads running; "
          f"RSS at start {rss[0]:.1f} MB")
    started = time.perf_counter()
    try:
        for cycle in range(1, args.cycles + 1):
            write(source, factor_of(cycle % args.versions))
            ops.reload()
            y = sess.run(None, {"x": x})[0]
            assert np.allclose(y, factor_of(cycle % args.versions) * x), f"cycle {cycle}: the new kernel did not run"
            if cycle % max(1, args.cycles // 10) == 0:
                rss.append(rss_mb())
                print(f"  cycle {cycle:5d}: RSS {rss[-1]:.1f} MB, runs in flight so far {runs[0]}, "
                      f"libraries loaded {len(_core.loaded_libraries())}, load {load_average()}")
    finally:
        stop.set()
        for w in workers:
            w.join()
    seconds = time.perf_counter() - started
    print(f"{args.cycles} cycles in {seconds:.1f} s ({1000 * seconds / args.cycles:.1f} ms each); "
          f"{runs[0]} runs on {args.threads} threads, {len(bad)} from more than one version or none; "
          f"{len(seen)} versions seen by the threads; RSS {rss[0]:.1f} -> {rss[-1]:.1f} MB "
          f"(growth after the first tenth: {rss[-1] - rss[1]:+.1f} MB)")
    return {"bad": len(bad), "rss": rss}


def saves(ops, sess, source: Path, args) -> list:
    """Seconds from saving an edited source to the first run that uses it, with a watcher on."""
    x = np.ones(1024, np.float32)
    took, builds = [], []
    with ops.watch(interval=0.02) as watcher:
        for i in range(args.saves):
            factor = 2000.0 + i   # never built before: each save compiles
            saved = time.perf_counter()
            write(source, factor)
            while sess.run(None, {"x": x})[0][0] != factor:
                if watcher.last_error is not None:
                    raise watcher.last_error
                time.sleep(0.001)
            took.append(time.perf_counter() - saved)
            while watcher.reloads < i + 1:   # its report is filed just after the sessions switch
                time.sleep(0.001)
            builds.append(watcher.last_report.build_seconds)
    rest = [t - b for t, b in zip(took, builds)]
    print(f"save -> run on the new kernel, {args.saves} saves: median {statistics.median(took):.3f} s, "
          f"max {max(took):.3f} s (target <= 0.5 s: median/target {statistics.median(took) / 0.5:.2f}); "
          f"of which the compiler's build median {statistics.median(builds):.3f} s (min {min(builds):.3f}), "
          f"and noticing the save + rebinding the session + the first run median {statistics.median(rest):.3f} s; "
          f"load average {load_average()} on {os.cpu_count()} cores")
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--versions", type=int, default=1000, help="distinct sources the edits cycle through")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--saves", type=int, default=10)
    args = parser.parse_args()
    import opforge

    folder = Path(tempfile.mkdtemp(prefix="opforge-bench-reload-"))
    source = folder / "scale.cpp"
    write(source, factor_of(0))
    ops = opforge.CustomOpBuilder("bench_reload", [source]).load()
    sess = opforge.InferenceSession(model(), custom_ops=[ops])
    print(f"load average {load_average()} on {os.cpu_count()} cores")
    if args.cycles:
        cycles(ops, sess, source, args)
    if args.saves:
        saves(ops, sess, source, args)


if __name__ == "__main__":
    main()
