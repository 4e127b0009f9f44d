"""CUDA side by side, in one run:

1. build: a one-op .cu library (examples/cuda/swish.cu) built by opforge in a fresh process
   (support objects cached, new source each time) vs `nvcc -c` plus a link by hand, with the
   same nvcc flags; needs nvcc only;
2. elementwise (GPU): the custom Swish op vs a cupy ElementwiseKernel doing the same;
3. model (GPU): a small CNN whose activations are the custom op, on opforge's CUDA provider,
   vs the same CNN with Swish written as standard ops (Sigmoid, Mul) on opforge's CUDA provider
   (cupy only) and on onnxruntime's CUDA provider when it has one.

    python -m benchmarks.bench_cuda [--build-only] [--repeat N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

import opforge

SWISH = ROOT / "examples" / "cuda" / "swish.cu"


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_build(repeat: int) -> list:
    """(what, seconds) for the hand build and opforge's cold build of the same source."""
    from opforge.builder.build import Build
    from opforge.builder.cuda_toolchain import detect_cuda
    from opforge.builder.spec import make_spec
    from opforge.builder.toolchain import detect
    from opforge.cache import cache_root

    work = Path(tempfile.mkdtemp(prefix="bench-cuda-"))
    env = {**os.environ, "OPFORGE_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(ROOT)}
    counter = [0]

    def fresh_source() -> Path:
        counter[0] += 1
        path = work / f"src{counter[0]}" / "swish.cu"
        path.parent.mkdir()
        path.write_text(SWISH.read_text() + f"\n// build {counter[0]}\n")
        return path

    load = "import sys, opforge; opforge.CustomOpBuilder('swish', [sys.argv[1]]).load()"
    subprocess.run([sys.executable, "-c", load, str(fresh_source())], env=env, check=True,
                   capture_output=True)   # builds and caches the support objects
    opforge_s = median_seconds(lambda: subprocess.run([sys.executable, "-c", load, str(fresh_source())],
                                                      env=env, check=True, capture_output=True), repeat)
    os.environ["OPFORGE_CACHE_DIR"] = env["OPFORGE_CACHE_DIR"]
    root = cache_root()
    spec = make_spec("swish", [fresh_source()])
    build = Build(spec, detect(root), root, detect_cuda(root))
    plan = build._plan(work, next((root / "support").iterdir()))
    nvcc = list(plan.nvcc) + list(plan.cuda_flags)
    link = list(plan.cxx) + list(plan.extra_objects) + list(plan.ldflags)

    def by_hand():
        src = fresh_source()
        subprocess.run(nvcc + ["-c", str(src), "-o", str(src.with_suffix(".o"))], check=True)
        subprocess.run(link[:1] + [str(src.with_suffix(".o"))] + link[1:] + ["-o", str(src.with_suffix(".so"))],
                       check=True)

    hand_s = median_seconds(by_hand, repeat)
    archs = ",".join(a.name + ("+PTX" if a.ptx else "") for a in build.archs)
    return [(f"hand: nvcc -c + link ({archs})", hand_s),
            ("opforge: fresh process, import, build, load", opforge_s),
            ("ratio opforge / hand", opforge_s / hand_s)]


def gpu_time(fn, repeat: int) -> float:
    """Median seconds of fn() on the GPU, with CUDA events around each call."""
    import cupy as cp

    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def bench_elementwise(repeat: int) -> list:
    import cupy as cp

    ops = opforge.CustomOpBuilder("swish_cuda", [SWISH]).load()
    kernel = cp.ElementwiseKernel("T x, float32 beta", "T y", "y = x / (1.0f + __expf(-beta * (float)x))",
                                  "swish_ref")
    rows = []
    for n in (1 << 20, 1 << 24, 1 << 26):
        x = cp.random.standard_normal(n, dtype=cp.float32)
        np.testing.assert_allclose(cp.asnumpy(ops.Swish(x, beta=1.5)), cp.asnumpy(kernel(x, cp.float32(1.5))),
                                   rtol=1e-5, atol=1e-6)
        ours = gpu_time(lambda: ops.Swish(x, beta=1.5), repeat)
        theirs = gpu_time(lambda: kernel(x, cp.float32(1.5)), repeat)
        gbs = 8 * n / 1e9
        rows.append((f"swish n={n:>9}: opforge op / cupy ElementwiseKernel (us)",
                     f"{ours * 1e6:9.1f} / {theirs * 1e6:9.1f}   ({gbs / ours:6.0f} / {gbs / theirs:6.0f} GB/s)"))
    return rows


def decomposed(model):
    """The model with each com.example::Swish node written as x * Sigmoid(beta * x)."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for node in out.graph.node:
        if node.op_type != "Swish":
            nodes.append(node)
            continue
        beta = next((a.f for a in node.attribute if a.name == "beta"), 1.0)
        x, y = node.input[0], node.output[0]
        out.graph.initializer.append(numpy_helper.from_array(np.array(beta, np.float32), f"{y}_beta"))
        nodes += [helper.make_node("Mul", [x, f"{y}_beta"], [f"{y}_bx"]),
                  helper.make_node("Sigmoid", [f"{y}_bx"], [f"{y}_s"]),
                  helper.make_node("Mul", [x, f"{y}_s"], [y])]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def bench_model(repeat: int) -> list:
    import swish_model

    model = swish_model.build_model()
    x = np.random.default_rng(0).standard_normal((32, 3, 32, 32)).astype(np.float32)
    cuda_ops = opforge.CustomOpBuilder("swish_cuda", [SWISH]).load()
    runs = {"opforge CUDA, custom Swish op": opforge.InferenceSession(
        model.SerializeToString(), providers=["CUDAExecutionProvider"], custom_ops=[cuda_ops])}
    plain = decomposed(model).SerializeToString()
    runs["opforge CUDA, Swish as Sigmoid*Mul (cupy only)"] = opforge.InferenceSession(
        plain, providers=["CUDAExecutionProvider"])
    reference = opforge.InferenceSession(plain).run(None, {"x": x})[0]
    try:
        import onnxruntime as ort

        if "CUDAExecutionProvider" in ort.get_available_providers():
            runs["onnxruntime CUDA, Swish as Sigmoid*Mul"] = ort.InferenceSession(
                plain, providers=["CUDAExecutionProvider"])
    except ImportError:
        pass
    rows = []
    for name, sess in runs.items():
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, reference, rtol=1e-3, atol=1e-4)
        rows.append((f"CNN batch 32, {name} (ms per run)",
                     f"{median_seconds(lambda: sess.run(None, {'x': x}), repeat) * 1e3:8.2f}"))
    if len(runs) < 3:
        rows.append(("onnxruntime CUDA", "not available in this onnxruntime"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-only", action="store_true", help="only the build timing (no GPU)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = [(name, f"{value:.3f}" if isinstance(value, float) else value)
            for name, value in bench_build(args.repeat)]
    if not args.build_only:
        if "CUDAExecutionProvider" not in opforge.get_available_providers():
            rows.append(("GPU benchmarks", "skipped: no GPU with cupy here"))
        else:
            rows += bench_elementwise(max(args.repeat, 20)) + bench_model(max(args.repeat, 20))
    print(f"load average at start: {load:.2f}")
    for name, value in rows:
        print(f"{name:<62} {value}")


if __name__ == "__main__":
    main()
