"""Per-op-type time of one model in onnxruntime and opforge, side by side (bench_models --profile).

onnxruntime's side comes from its profiler JSON (the `*_kernel_time` events), opforge's from
SessionOptions.enable_profiling / end_profiling's chrome trace. Convolution throughput is given
in GFLOP/s against the machine's sgemm limit, measured in the same run: the best 1024^3 sgemm of
OpenBLAS (scipy-openblas32, the BLAS opforge links) and onnxruntime's MatMul (MLAS) at the same
thread count. OpenBLAS runs the kernel $OPENBLAS_CORETYPE names where that is set (these machines
set Haswell: 130 GFLOP/s on one Zen 5 core, against 243 for SkylakeX and MLAS's ~250), so neither
alone is an honest anchor. The FMA peak (a register-only
loop of independent fused multiply-adds per thread) is printed beside it as the ceiling.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx

import onnxruntime as ort
import opforge


def openblas_sgemm(threads: int, size: int = 1024, repeat: int = 5) -> float:
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


def mlas_sgemm(threads: int, size: int = 1024, repeat: int = 10) -> float:
    """Best GFLOP/s of onnxruntime's MatMul (MLAS) on size^3 with `threads` intra-op threads."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "sgemm",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [size, size]) for n in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [size, size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((size, size), np.float32) for n in "ab"}
    sess.run(None, feed)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(None, feed)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


FMA_PEAK_SOURCE = r"""
#include <opforge/op.h>
#include <thread>
#include <vector>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

// 12 independent accumulators hide the FMA latency; nothing but registers is touched.
float fma_loop(int64_t iterations, float seed) {
#if defined(__AVX512F__)
  __m512 acc[12], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(seed);
  for (auto& a : acc) a = y;
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  float s = 0.f;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
#elif defined(__FMA__)
  __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(seed);
  for (auto& a : acc) a = y;
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm256_fmadd_ps(a, x, y);
  float s = 0.f;
  for (auto& a : acc) s += a[0];
  return s;
#else
  float acc[12], s = 0.f;
  for (auto& a : acc) a = seed;
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = a * 0.999f + seed;
  for (auto& a : acc) s += a;
  return s;
#endif
}

int lanes() {
#if defined(__AVX512F__)
  return 16;
#elif defined(__FMA__)
  return 8;
#else
  return 1;
#endif
}

// Y[0] = a sum the loops computed, Y[1] = float lanes per FMA; one loop per thread.
void fma_peak(opforge::KernelContext& ctx) {
  const int64_t iterations = ctx.attr<int64_t>("iterations"), threads = ctx.attr<int64_t>("threads");
  std::vector<float> sums(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { sums[size_t(t)] = fma_loop(iterations, ctx.input(0).data<float>()[0]); });
  for (auto& th : pool) th.join();
  float* y = ctx.output(0).data<float>();
  y[0] = 0.f;
  for (float s : sums) y[0] += s;
  y[1] = float(lanes());
}

void infer(opforge::InferContext& ctx) { ctx.set_output(0, opforge::f32, {2}); }

}  // namespace

OPFORGE_OP(fma_peak)
    .input("X", {opforge::f32})
    .output("Y", {opforge::f32})
    .attr("iterations", int64_t(1))
    .attr("threads", int64_t(1))
    .infer(infer)
    .compute(fma_peak);
"""


def fma_peak(threads: int, iterations: int = 5_000_000, repeat: int = 7) -> float:
    """GFLOP/s of `threads` threads each running 12 independent vector FMA chains (built for
    this CPU with -march=native); nan when no compiler is at hand."""
    try:
        lib = opforge.load_inline("opforge_fma_peak", FMA_PEAK_SOURCE, extra_cflags=["-march=native"])
    except Exception as error:   # a benchmark without a toolchain still prints the sgemm limit
        print(f"FMA peak not measured: {str(error).splitlines()[0]}", file=sys.stderr)
        return float("nan")
    x = np.ones(1, np.float32)
    best, lanes = float("inf"), 1.0
    for _ in range(repeat):
        start = time.perf_counter()
        lanes = float(lib.fma_peak(x, iterations=iterations, threads=threads)[1])
        best = min(best, time.perf_counter() - start)
    return 2 * 12 * lanes * iterations * threads / best / 1e9


def sgemm_limit(threads: int) -> dict:
    """The machine's float32 limits on `threads` threads, in GFLOP/s: 'openblas', 'mlas' (1024^3
    sgemms), 'limit' (the better of the two) and 'fma_peak'."""
    limits = {"openblas": openblas_sgemm(threads), "mlas": mlas_sgemm(threads), "fma_peak": fma_peak(threads)}
    limits["limit"] = max(limits["openblas"], limits["mlas"])
    return limits


def describe_limit(limits: dict, threads: int) -> str:
    """One line naming the limits."""
    return (f"sgemm limit on {threads} thread(s): {limits['limit']:.0f} GFLOP/s (1024^3: OpenBLAS "
            f"{limits['openblas']:.0f}, onnxruntime MLAS {limits['mlas']:.0f}); FMA peak "
            f"{limits['fma_peak']:.0f}")


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
            limits: dict) -> None:
    """Prints per-op-type ms per run for both runtimes and their Conv GFLOP/s."""
    with tempfile.TemporaryDirectory() as folder:
        theirs = _ort_times(model, feed, threads, repeat, folder)
        ours = _opforge_times(model, feed, threads, repeat, folder)
    flops = conv_flops(model, feed)
    print(f"\n{name}: ms per run by op type (both traces time the nodes of their runtime's own execution plan)")
    print(f"{'op type':<28}{'ort ms':>9}{'opforge ms':>12}{'ratio':>8}")
    for op in sorted(set(theirs) | set(ours), key=lambda o: -max(theirs.get(o, 0), ours.get(o, 0))):
        a, b = theirs.get(op, 0.0), ours.get(op, 0.0)
        print(f"{op:<28}{a:>9.3f}{b:>12.3f}{(b / a if a else float('nan')):>8.2f}")
    total_a, total_b = sum(theirs.values()), sum(ours.values())
    print(f"{'total':<28}{total_a:>9.3f}{total_b:>12.3f}{total_b / total_a:>8.2f}")
    conv_a = sum(t for op, t in theirs.items() if "Conv" in op)
    conv_b = sum(t for op, t in ours.items() if "Conv" in op)
    if flops and conv_a and conv_b:
        limit, peak = limits["limit"], limits["fma_peak"]
        print(f"conv {flops / 1e9:.2f} GFLOP (every op type with Conv in its name), GFLOP/s and share of "
              f"the sgemm limit {limit:.0f} / FMA peak {peak:.0f}:")
        for who, ms in (("onnxruntime", conv_a), ("opforge", conv_b)):
            rate = flops / ms / 1e6
            print(f"  {who:<12}{rate:>6.0f} GFLOP/s {rate / limit:>6.0%} {rate / peak:>6.0%}")
