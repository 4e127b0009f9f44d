"""Transformer encoders, opforge against onnxruntime in one run, at 1 and 2 threads.

    python -m benchmarks.bench_transformers [--layers 2] [--blocks 7] [--runs 5] [--threads 1 2]
    python -m benchmarks.bench_transformers --profile [--hidden 256] [--batch 1] [--threads 1]
    python -m benchmarks.bench_transformers --versus-blas [--threads 2]

The encoders are built here with onnx.helper in the shape torch.onnx.export writes a BERT-style
layer (no download): MatMul + Add for every projection on a (batch, seq, hidden) input, Reshape
and Transpose into heads, QK^T / sqrt(d) + mask, Softmax, the product with V, an erf-GELU written
out as Div/Erf/Add/Mul/Mul, residual Adds, and LayerNormalization (hidden 768) or its
ReduceMean/Sub/Pow/Sqrt/Div decomposition (hidden 256), with seeded random weights. Hidden 256
and 768 (heads of 64, FFN 4x), sequence 128, batch 1 and 4.

Timing alternates blocks of ``--runs`` runs of each runtime, ``--blocks`` times, and reports the
median block of each, so a change of machine load touches both alike; each block starts after
0.05 s of untimed runs, past the 30-40 ms that onnxruntime's threads spin after its block. Outputs are checked
against onnxruntime first. The load average is printed at the start and at the end. With
--profile, each encoder instead gets its time per op type in both runtimes side by side
(benchmarks/op_profile.py). With --versus-blas, opforge's packed MatMul/Gemm path is timed
against its OpenBLAS path (OPFORGE_GEMM_ISA=blas) in the same interleaved blocks: two sessions
of one process, which a busy machine slows alike.
"""
import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import opforge

from benchmarks.op_profile import profile


class _Builder:
    """Nodes and initializers of one graph, with fresh value names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, value) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape, scale=None) -> str:
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, inputs: list, **attrs) -> str:
        self.count += 1
        out = f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _linear(g: _Builder, x: str, n_in: int, n_out: int) -> str:
    """x @ W + b, as torch exports nn.Linear on a 3-D input."""
    return g.op("Add", [g.op("MatMul", [x, g.weight(n_in, n_out)]), g.weight(n_out, scale=0.02)])


def _layer_norm(g: _Builder, x: str, hidden: int, decomposed: bool) -> str:
    gamma = g.const((1 + 0.1 * g.rng.standard_normal(hidden)).astype(np.float32))
    beta = g.weight(hidden, scale=0.1)
    if not decomposed:
        return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
    mean = g.op("ReduceMean", [x], axes=[-1])
    centred = g.op("Sub", [x, mean])
    var = g.op("ReduceMean", [g.op("Pow", [centred, g.const(np.float32(2))])], axes=[-1])
    std = g.op("Sqrt", [g.op("Add", [var, g.const(np.float32(1e-5))])])
    return g.op("Add", [g.op("Mul", [g.op("Div", [centred, std]), gamma]), beta])


def _gelu(g: _Builder, x: str) -> str:
    erf = g.op("Erf", [g.op("Div", [x, g.const(np.float32(np.sqrt(2.0)))])])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [erf, g.const(np.float32(1))])]), g.const(np.float32(0.5))])


def _attention(g: _Builder, x: str, mask: str, hidden: int, heads: int) -> str:
    d = hidden // heads
    split = g.const(np.array([0, 0, heads, d], np.int64))
    q, k, v = (g.op("Reshape", [_linear(g, x, hidden, hidden), split]) for _ in range(3))
    qh = g.op("Transpose", [q], perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [k], perm=[0, 2, 3, 1])
    vh = g.op("Transpose", [v], perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [qh, kt]), g.const(np.float32(np.sqrt(d)))])
    probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, vh])], perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [ctx, g.const(np.array([0, 0, hidden], np.int64))])
    return _linear(g, merged, hidden, hidden)


def encoder(hidden: int, layers: int, batch: int, seq: int = 128, seed: int = 0) -> onnx.ModelProto:
    """A BERT-style encoder of ``layers`` layers on input x (batch, seq, hidden) and an additive
    mask (batch, 1, 1, seq); LayerNormalization written out when hidden is 256."""
    g = _Builder(seed)
    heads, decomposed = hidden // 64, hidden == 256
    x = "x"
    for _ in range(layers):
        x = _layer_norm(g, g.op("Add", [x, _attention(g, x, "mask", hidden, heads)]), hidden, decomposed)
        ffn = _linear(g, _gelu(g, _linear(g, x, hidden, 4 * hidden)), 4 * hidden, hidden)
        x = _layer_norm(g, g.op("Add", [x, ffn]), hidden, decomposed)
    g.nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(
        g.nodes, f"encoder{hidden}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def feed_for(hidden: int, batch: int, seq: int = 128) -> dict:
    rng = np.random.default_rng(1)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[..., seq - seq // 8:] = -1e4   # the last tokens are padding
    return {"x": rng.standard_normal((batch, seq, hidden)).astype(np.float32), "mask": mask}


SETTLE_SECONDS = 0.05


def interleaved(fns, blocks: int, runs: int, clock=time.perf_counter) -> list:
    """Each function's median time per run over ``blocks`` blocks of ``runs`` runs, the blocks of
    the functions alternating. Each block is timed after SETTLE_SECONDS of untimed runs of its
    function: onnxruntime's worker threads spin for 30-40 ms after its last run (its default),
    taking a core from whatever runs next, and that window must not fall in the other's block."""
    times = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(blocks):
        for fn, taken in zip(fns, times):
            settle = time.perf_counter()
            while time.perf_counter() - settle < SETTLE_SECONDS:
                fn()
            start = clock()
            for _ in range(runs):
                fn()
            taken.append((clock() - start) / runs)
    return [statistics.median(t) for t in times]


def measure(hidden: int, batch: int, threads: int, layers: int, blocks: int, runs: int, cpu: bool) -> dict:
    source = encoder(hidden, layers, batch).SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    ref = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    sess = opforge.InferenceSession(source, options)
    feed = feed_for(hidden, batch)
    want = ref.run(None, feed)[0]
    sess.run(None, feed)
    got = sess.run(None, feed)[0]   # the second run goes through the compiled plan
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    # one thread runs in the calling thread in both runtimes: its CPU time leaves out the time
    # other processes hold the core
    clock = time.thread_time if cpu and threads == 1 else time.perf_counter
    ort_time, ours_time = interleaved([lambda: ref.run(None, feed), lambda: sess.run(None, feed)], blocks, runs,
                                      clock)
    return {"hidden": hidden, "batch": batch, "threads": threads, "ort": ort_time, "ours": ours_time, "err": err}


def versus_blas(hidden: int, batch: int, threads: int, layers: int, blocks: int, runs: int) -> dict:
    source = encoder(hidden, layers, batch).SerializeToString()
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    sessions, before = {}, os.environ.get("OPFORGE_GEMM_ISA")
    for isa in ("blas", before or "auto"):   # read when the session is made
        os.environ["OPFORGE_GEMM_ISA"] = isa
        sessions["blas" if isa == "blas" else "auto"] = opforge.InferenceSession(source, options)
    if before is None:
        del os.environ["OPFORGE_GEMM_ISA"]
    feed = feed_for(hidden, batch)
    blas, packed = interleaved([lambda: sessions["blas"].run(None, feed), lambda: sessions["auto"].run(None, feed)],
                               blocks, runs)
    return {"hidden": hidden, "batch": batch, "threads": threads, "blas": blas, "packed": packed}


def load_line(when: str) -> str:
    load = os.getloadavg()
    busy = "  (busy machine: compare only ratios from one run)" if load[0] > 0.5 else ""
    return f"load average {when}: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}{busy}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 768])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--cpu-time", action="store_true",
                        help="time 1-thread rows by the calling thread's CPU time (a busy machine)")
    parser.add_argument("--versus-blas", action="store_true",
                        help="opforge's packed path against its OpenBLAS path, no onnxruntime")
    parser.add_argument("--profile", action="store_true", help="time per op type in both runtimes")
    args = parser.parse_args()
    print(load_line("at start"))
    if args.profile:
        for t in args.threads:
            for h in args.hidden:
                for b in args.batch:
                    profile(f"encoder hidden {h} batch {b}, {t} thread(s)", encoder(h, args.layers, b),
                            feed_for(h, b), t, args.blocks * args.runs, float("nan"))
        print(load_line("at end"))
        return
    if args.versus_blas:
        rows = [versus_blas(h, b, t, args.layers, args.blocks, args.runs)
                for t in args.threads for h in args.hidden for b in args.batch]
        print(load_line("at end"))
        print(f"\n{'hidden':>7}{'batch':>6}{'threads':>8}{'blas ms':>10}{'packed ms':>11}{'ratio':>8}")
        for r in rows:
            print(f"{r['hidden']:>7}{r['batch']:>6}{r['threads']:>8}{r['blas'] * 1e3:>10.2f}{r['packed'] * 1e3:>11.2f}"
                  f"{r['packed'] / r['blas']:>8.2f}")
        return
    rows = [measure(h, b, t, args.layers, args.blocks, args.runs, args.cpu_time)
            for t in args.threads for h in args.hidden for b in args.batch]
    clock = "thread CPU time at 1 thread, wall time at more" if args.cpu_time else "wall time"
    print(f"\n{args.layers}-layer encoders, seq 128; median of {args.blocks} interleaved blocks of {args.runs} runs"
          f" ({clock})")
    print(load_line("at end"))
    print(f"\n{'hidden':>7}{'batch':>6}{'threads':>8}{'ort ms':>10}{'opforge ms':>12}{'ratio':>8}{'max err':>10}")
    for r in rows:
        print(f"{r['hidden']:>7}{r['batch']:>6}{r['threads']:>8}{r['ort'] * 1e3:>10.2f}{r['ours'] * 1e3:>12.2f}"
              f"{r['ours'] / r['ort']:>8.2f}{r['err']:>10.1e}")
    ratios = [r["ours"] / r["ort"] for r in rows]
    print(f"geo-mean ratio {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
