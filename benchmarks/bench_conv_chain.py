"""Per-conv time of convs the way a CNN runs them: the same conv shape N times in a chain
(Conv + Relu, each with weights of its own), opforge against onnxruntime, both runtimes in
alternating turns in one process.

    python -m benchmarks.bench_conv_chain [--threads 1] [--rounds 20] [C,H,W,k ...]

Why a chain: timed alone, one conv in onnxruntime also pays its ReorderInput and ReorderOutput
(NCHW <-> NCHWc); inside a model its convs pass NCHWc to each other and pay neither. A 1x1 conv
of 64 channels on 56x56 took onnxruntime 0.58 ms alone and 0.35 ms a conv in a chain of 12 (AMD
Zen 3, 1 thread), so a comparison of single convs flatters opforge. Prints, per shape, the
median per-conv milliseconds of both, their ratio (opforge / onnxruntime) and GFLOP/s, with the
load average (compare ratios from one run only; absolute times drift on shared machines).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge

# resnet50's and squeezenet's common conv shapes (channels in = out)
DEFAULT_SHAPES = ["64,56,56,1", "64,56,56,3", "128,28,28,1", "128,28,28,3", "256,14,14,1", "256,14,14,3",
                  "512,7,7,3", "16,55,55,1"]


def chain_model(c: int, h: int, w: int, k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    """x -> n x (Conv c->c, k x k, same padding, + Relu), seeded weights scaled to keep the
    activations of order one."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        wt = (rng.standard_normal((c, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        inits += [numpy_helper.from_array(wt, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(c).astype(np.float32) * 0.1, f"b{i}")]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def sessions(model: onnx.ModelProto, threads: int):
    """onnxruntime's and opforge's sessions of one model, at `threads` intra-op threads."""
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads  # its defaults otherwise (spinning workers), as bench_models
    oo = opforge.SessionOptions()
    oo.intra_op_num_threads = threads
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]), opforge.InferenceSession(data, oo)


def per_conv_ms(shape: tuple, n: int, threads: int, rounds: int) -> tuple[float, float]:
    """Median per-conv milliseconds of onnxruntime and opforge over `rounds` alternating turns
    (ABBA) of a chain of n convs of `shape` = (C, H, W, k)."""
    c, h, w, k = shape
    model = chain_model(c, h, w, k, n)
    x = np.random.default_rng(1).standard_normal((1, c, h, w)).astype(np.float32)
    feed = {"x": x}
    runtimes = sessions(model, threads)
    for s in runtimes:
        for _ in range(3):
            s.run(None, feed)
    times: list[list[float]] = [[], []]
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            for _ in range(2):
                start = time.perf_counter()
                runtimes[i].run(None, feed)
                times[i].append((time.perf_counter() - start) / n)
    return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES, help="C,H,W,k (channels in = out)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--length", type=int, default=0, help="convs a chain (default: ~40 ms of work, 4..12)")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{'C,H,W,k':<14}{'convs':>6}{'ort ms':>9}{'opforge ms':>12}{'ratio':>7}{'ort GF/s':>10}{'opf GF/s':>10}")
    ratios = []
    for text in args.shapes:
        shape = tuple(int(v) for v in text.split(","))
        c, h, w, k = shape
        flop = 2 * c * c * k * k * h * w
        n = args.length or int(np.clip(4e8 / flop, 4, 12))
        a, b = per_conv_ms(shape, n, args.threads, args.rounds)
        ratios.append(b / a)
        print(f"{text:<14}{n:>6}{a:>9.3f}{b:>12.3f}{b / a:>7.2f}{flop / a / 1e6:>10.1f}{flop / b / 1e6:>10.1f}")
    print(f"geo-mean ratio {float(np.exp(np.mean(np.log(ratios)))):.2f}; "
          f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
