"""CUDA side by side, in one run:

1. build: a one-op .cu library (examples/cuda/swish.cu) built by opforge in a fresh process
   (support objects cached, new source each time) vs `nvcc -c` plus a link by hand, with the
   same nvcc flags; needs nvcc only;
2. elementwise (GPU): the custom Swish op called eagerly vs a cupy ElementwiseKernel and a cupy
   RawKernel doing the same on the same array: per-call time on a small array (the overhead of a
   call, host clock; target <= 1.1x) and GPU time on large ones (CUDA events);
3. models (GPU): the Swish CNN of examples/cuda (custom op) and a ResNet-style CNN (standard ops)
   on opforge's CUDA provider vs torch eager on the same weights (target <= 1.5x, ratio printed),
   vs opforge on the CPU, and vs onnxruntime's CUDA provider when it has one.

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


RAW_SWISH = r"""
extern "C" __global__ void swish_raw(float* y, const float* x, float beta, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i] / (1.0f + __expf(-beta * x[i]));
}
"""


def host_time_per_call(fn, calls: int = 2000) -> float:
    """Seconds per call of fn() as the host sees it, the GPU drained before and after: what a
    call costs on top of its kernel when the kernel is tiny."""
    import cupy as cp

    for _ in range(50):
        fn()
    cp.cuda.get_current_stream().synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    cp.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - started) / calls


def bench_elementwise(repeat: int) -> list:
    import cupy as cp

    ops = opforge.CustomOpBuilder("swish_cuda", [SWISH]).load()
    kernel = cp.ElementwiseKernel("T x, float32 beta", "T y", "y = x / (1.0f + __expf(-beta * (float)x))",
                                  "swish_ref")
    raw = cp.RawKernel(RAW_SWISH, "swish_raw")

    def raw_call(x):
        y = cp.empty_like(x)
        blocks = min((x.size + 255) // 256, 65535)
        raw((blocks,), (256,), (y, x, cp.float32(1.5), cp.int64(x.size)))
        return y

    rows = []
    small = cp.random.standard_normal(4096, dtype=cp.float32)
    for name, other in (("ElementwiseKernel", lambda: kernel(small, cp.float32(1.5))), ("RawKernel", lambda: raw_call(small))):
        np.testing.assert_allclose(cp.asnumpy(ops.Swish(small, beta=1.5)), cp.asnumpy(other()), rtol=1e-5, atol=1e-6)
        ours, theirs = host_time_per_call(lambda: ops.Swish(small, beta=1.5)), host_time_per_call(other)
        rows.append((f"swish n=4096, per call: opforge op / cupy {name} (us)",
                     f"{ours * 1e6:9.2f} / {theirs * 1e6:9.2f}   ratio {ours / theirs:.2f} (target <= 1.1)"))
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


def torch_eager(model, device: str = "cuda"):
    """The model's graph as torch eager calls on `device`, with the model's own weights: a
    function of a torch tensor. Covers the ops of the two CNNs measured here."""
    import torch
    import torch.nn.functional as F
    from onnx import helper, numpy_helper

    weights = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()).to(device) for i in model.graph.initializer}

    def conv(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), group=1, **_):
        return F.conv2d(F.pad(x, (pads[1], pads[3], pads[0], pads[2])), w, b, stride=tuple(strides), groups=group)

    ops = {
        "Conv": conv,
        "BatchNormalization": lambda x, s, b, m, v, epsilon=1e-5, **_: F.batch_norm(x, m, v, s, b, False, 0.0, epsilon),
        "Relu": lambda x: torch.relu(x),
        "Add": lambda a, b: a + b,
        "Swish": lambda x, beta=1.0: x * torch.sigmoid(beta * x),
        "GlobalAveragePool": lambda x: x.mean(dim=(2, 3), keepdim=True),
        "Flatten": lambda x, axis=1: x.flatten(axis),
        "Gemm": lambda a, b, c=None, transB=0, alpha=1.0, **_: alpha * (a @ (b.T if transB else b)) + (0 if c is None else c),
        "Softmax": lambda x, axis=-1: torch.softmax(x, axis),
    }
    nodes = [(ops[n.op_type], list(n.input), n.output[0],
              {a.name: helper.get_attribute_value(a) for a in n.attribute}) for n in model.graph.node]
    source, result = model.graph.input[0].name, model.graph.output[0].name

    @torch.no_grad()
    def run(x):
        values = {**weights, source: x}
        for fn, inputs, output, attrs in nodes:
            values[output] = fn(*(values[i] for i in inputs), **attrs)
        return values[result]

    return run


def bench_model(repeat: int) -> list:
    import importlib.util

    import cupy as cp
    import torch

    from benchmarks.gpu_probe import resnet_style_model

    spec = importlib.util.spec_from_file_location("swish_model", ROOT / "examples" / "cuda" / "swish_model.py")
    swish_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(swish_model)
    cuda_ops = opforge.CustomOpBuilder("swish_cuda", [SWISH]).load()
    cpu_ops = opforge.CustomOpBuilder("swish_cpu", [ROOT / "examples" / "cuda" / "swish_cpu.cpp"]).load()
    rows = []
    for title, model in (("Swish CNN", swish_model.build_model()), ("ResNet-style CNN", resnet_style_model())):
        x = np.random.default_rng(0).standard_normal((32, 3, 32, 32)).astype(np.float32)
        proto = model.SerializeToString()
        gpu = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"], custom_ops=[cuda_ops])
        cpu = opforge.InferenceSession(proto, custom_ops=[cpu_ops])
        reference = cpu.run(None, {"x": x})[0]
        eager, xt = torch_eager(model), torch.from_numpy(x).cuda()
        np.testing.assert_allclose(gpu.run(None, {"x": x})[0], reference, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(eager(xt).cpu().numpy(), reference, rtol=1e-3, atol=1e-4)
        binding = gpu.io_binding()   # the input already on the GPU, as torch's is
        binding.bind_ortvalue_input("x", opforge.OrtValue(cp.asarray(x), "cuda", 0))
        binding.bind_output(model.graph.output[0].name, "cuda")

        def torch_run():
            eager(xt)
            torch.cuda.synchronize()

        ours = median_seconds(lambda: gpu.run_with_iobinding(binding), repeat)
        theirs = median_seconds(torch_run, repeat)
        host = median_seconds(lambda: cpu.run(None, {"x": x}), max(3, repeat // 4))
        rows.append((f"{title} batch 32: opforge CUDA / torch eager (ms)",
                     f"{ours * 1e3:8.2f} / {theirs * 1e3:8.2f}   ratio {ours / theirs:.2f} (target <= 1.5)"))
        rows.append((f"{title} batch 32: opforge CPU (ms), CPU / CUDA", f"{host * 1e3:8.2f}   {host / ours:.1f}x"))
        rows += bench_onnxruntime(title, decomposed(model), x, reference, repeat)
    return rows


def bench_onnxruntime(title: str, model, x, reference, repeat: int) -> list:
    """onnxruntime's CUDA provider on the model (Swish as standard ops), where it has one."""
    try:
        import onnxruntime as ort
    except ImportError:
        return [(f"{title}: onnxruntime CUDA", "onnxruntime is not installed")]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return [(f"{title}: onnxruntime CUDA", "not available in this onnxruntime")]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference, rtol=1e-3, atol=1e-4)
    seconds = median_seconds(lambda: sess.run(None, {"x": x}), repeat)
    return [(f"{title} batch 32: onnxruntime CUDA, numpy in and out (ms)", f"{seconds * 1e3:8.2f}")]


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
        print(f"{name:<64} {value}")


if __name__ == "__main__":
    main()
