"""Per-op-type time of one model in onnxruntime and opforge, side by side (bench_models --profile).

onnxruntime's side comes from its profiler JSON (the `*_kernel_time` events), opforge's from
SessionOptions.enable_profiling / end_profiling's chrome trace. Convolution throughput is given
in GFLOP/s against the machine's measured sgemm limit (OpenBLAS from scipy-openblas32, the BLAS
opforge links; onnxruntime's MLAS reaches the same per core).
"""
from __future__ import annotations

import ctypes
import json
import os
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx

import onnxruntime as ort
import opforge


def sgemm_limit(threads: int, size: int = 1024, repeat: int = 5) -> float:
    """Best GFLOP/s of `threads` concurrent single-threaded OpenBLAS size^3 sgemms, one per
    thread (as opforge's pool runs them; OpenBLAS's own threads spin-wait under load)."""
    import scipy_openblas32 as blas

    lib = ctypes.CDLL(os.path.join(blas.get_lib_dir(), f"lib{blas.get_library()}.so"))
    lib.scipy_openblas_set_num_threads(ctypes.c_int(1))
    sgemm = lib.scipy_cblas_sgemm
    sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                           ctypes.c_void_p, ctypes.c_int]
    rng = np.random.default_rng(0)
    mats = [[rng.standard_normal((size, size), np.float32) for _ in range(3)] for _ in range(threads)]

    def one(a, b, c):
        sgemm(101, 111, 111, size, size, size, 1.0, a.ctypes.data, size, b.ctypes.data, size, 0.0,
              c.ctypes.data, size)

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeat):
            start = time.perf_counter()
            list(pool.map(lambda m: one(*m), mats))
            best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 * threads / best / 1e9


def conv_flops(model: onnx.ModelProto, feed: dict) -> float:
    """Multiply-adds x 2 of every Conv in ``model``, with the shapes opforge infers for it."""
    options = opforge.SessionOptions()
    options.graph_optimization_level = opforge.GraphOptimizationLevel.ORT_DISABLE_ALL
    types = opforge.InferenceSession(model.SerializeToString(), options).types
    total = 0.0
    for node in model.graph.node:
        out, weight = types.get(node.output[0]), types.get(node.input[1]) if node.op_type == "Conv" else None
        if weight is not None and out is not None and out.shape and weight.shape:
            if all(isinstance(d, int) for d in list(out.shape) + list(weight.shape)):
                total += 2.0 * float(np.prod(out.shape)) * float(np.prod(weight.shape[1:]))
    return total


def _ort_times(model, feed, threads: int, repeat: int, folder: str) -> dict:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(folder, "ort")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(repeat + 1):
        sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    since = runs[1] if len(runs) > 1 else 0   # the first run warms up
    times = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= since:
            times[e["args"]["op_name"]] += e["dur"] / 1e3 / repeat
    return times


def _opforge_times(model, feed, threads: int, repeat: int, folder: str) -> dict:
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(folder, "opforge")
    sess = opforge.InferenceSession(model.SerializeToString(), options)
    sess.run(None, feed)
    os.remove(sess.end_profiling())   # the first run warms up
    for _ in range(repeat):
        sess.run(None, feed)
    times = defaultdict(float)
    for e in json.loads(Path(sess.end_profiling()).read_text()):
        times[e["args"]["op_type"]] += e["dur"] / 1e3 / repeat
    return times


def profile(name: str, model: onnx.ModelProto, feed: dict, threads: int, repeat: int,
            limit: float) -> None:
    """Prints per-op-type ms per run for both runtimes and their Conv GFLOP/s."""
    with tempfile.TemporaryDirectory() as folder:
        theirs = _ort_times(model, feed, threads, repeat, folder)
        ours = _opforge_times(model, feed, threads, repeat, folder)
    flops = conv_flops(model, feed)
    print(f"\n{name}: ms per run by op type (opforge's trace times each node on its Python executor)")
    print(f"{'op type':<28}{'ort ms':>9}{'opforge ms':>12}{'ratio':>8}")
    for op in sorted(set(theirs) | set(ours), key=lambda o: -max(theirs.get(o, 0), ours.get(o, 0))):
        a, b = theirs.get(op, 0.0), ours.get(op, 0.0)
        print(f"{op:<28}{a:>9.3f}{b:>12.3f}{(b / a if a else float('nan')):>8.2f}")
    total_a, total_b = sum(theirs.values()), sum(ours.values())
    print(f"{'total':<28}{total_a:>9.3f}{total_b:>12.3f}{total_b / total_a:>8.2f}")
    conv_a = sum(t for op, t in theirs.items() if "Conv" in op)
    conv_b = sum(t for op, t in ours.items() if "Conv" in op)
    if flops and conv_a and conv_b:
        gflops_a, gflops_b = flops / conv_a / 1e6, flops / conv_b / 1e6
        print(f"conv {flops / 1e9:.2f} GFLOP (every op type with Conv in its name): onnxruntime "
              f"{gflops_a:.0f} GFLOP/s ({gflops_a / limit:.0%} of sgemm), opforge {gflops_b:.0f} "
              f"GFLOP/s ({gflops_b / limit:.0%}); sgemm limit {limit:.0f} GFLOP/s")
