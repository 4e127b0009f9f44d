"""GPU checks of the CUDA provider, one per run, each printing what it saw.

benchmarks/gpu_check.sh runs them in turn; each exits non-zero when what it checks does not
hold. --dry-run does the CPU side only (models, reference results), for a machine without a GPU.

    python -m benchmarks.gpu_probe cupy      # cupy's version, a tiny kernel and a matmul
    python -m benchmarks.gpu_probe race      # io_binding on the device, 200 runs vs the CPU
    python -m benchmarks.gpu_probe fp16      # float16 Erf and Gelu stay float16 on the GPU
    python -m benchmarks.gpu_probe stream    # user_compute_stream from a cupy stream
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opforge

CUDA = "CUDAExecutionProvider"


def resnet_style_model(seed: int = 0, channels: int = 32) -> onnx.ModelProto:
    """A ResNet-style CNN on standard ops: a stem, two residual blocks (Conv, BatchNormalization,
    Relu, Add), a strided Conv, GlobalAveragePool, Gemm, Softmax; input (N, 3, 32, 32)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name, *shape, scale=None):
        scale = scale or (2.0 / np.prod(shape[1:])) ** 0.5
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def conv_bn(x, y, cin, cout, stride=1, relu=True):
        nodes.append(helper.make_node("Conv", [x, weight(f"{y}_w", cout, cin, 3, 3)], [f"{y}_c"],
                                      pads=[1, 1, 1, 1], strides=[stride, stride]))
        stats = [weight(f"{y}_s", cout, scale=1.0), weight(f"{y}_b", cout, scale=0.1),
                 weight(f"{y}_m", cout, scale=0.1)]
        inits.append(numpy_helper.from_array(np.abs(rng.standard_normal(cout)).astype(np.float32) + 0.5, f"{y}_v"))
        nodes.append(helper.make_node("BatchNormalization", [f"{y}_c", *stats, f"{y}_v"],
                                      [f"{y}_n" if relu else y]))
        if relu:
            nodes.append(helper.make_node("Relu", [f"{y}_n"], [y]))
        return y

    c = channels
    h = conv_bn("x", "stem", 3, c)
    for block in range(2):
        a = conv_bn(h, f"b{block}a", c, c)
        b = conv_bn(a, f"b{block}b", c, c, relu=False)
        nodes.append(helper.make_node("Add", [h, b], [f"b{block}_sum"]))
        nodes.append(helper.make_node("Relu", [f"b{block}_sum"], [f"b{block}_out"]))
        h = f"b{block}_out"
    h = conv_bn(h, "down", c, 2 * c, stride=2)
    nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", weight("fc_w", 10, 2 * c), weight("fc_b", 10, scale=0.1)],
                               ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "resnet_style",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check_cupy(dry: bool) -> None:
    if dry:
        return
    import cupy as cp

    print("cupy", cp.__version__, "CUDA runtime", cp.cuda.runtime.runtimeGetVersion(),
          "driver", cp.cuda.runtime.driverGetVersion())
    props = cp.cuda.runtime.getDeviceProperties(0)
    print("GPU 0:", props["name"].decode(), f"sm_{props['major']}{props['minor']}",
          f"{props['totalGlobalMem'] / 2**30:.1f} GiB")
    square = cp.ElementwiseKernel("T x", "T y", "y = x * x", "opforge_probe_square")
    x = cp.arange(16, dtype=cp.float32)
    assert cp.asnumpy(square(x)).tolist() == (np.arange(16, dtype=np.float32) ** 2).tolist()
    a = cp.random.standard_normal((256, 128), dtype=cp.float32)
    b = cp.random.standard_normal((128, 64), dtype=cp.float32)
    np.testing.assert_allclose(cp.asnumpy(a @ b), cp.asnumpy(a) @ cp.asnumpy(b), rtol=1e-4, atol=1e-3)
    print("elementwise kernel (NVRTC) and matmul (cuBLAS): ok")
    print("opforge.get_available_providers():", opforge.get_available_providers())
    assert CUDA in opforge.get_available_providers()


def check_race(dry: bool, runs: int = 200, batch: int = 64) -> None:
    """Inputs written and outputs read on the caller's stream around io_binding runs whose
    values stay on the GPU; the caller's stream is kept busy so that a run not ordered after
    the write, or a read not ordered after the run, sees stale data. Every run is compared with
    the CPU session's result for the same batch."""
    proto = resnet_style_model().SerializeToString()
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((batch, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    cpu = opforge.InferenceSession(proto)
    expected = [cpu.run(None, {"x": b})[0] for b in batches]
    if dry:
        return
    sess = opforge.InferenceSession(proto, providers=[CUDA])
    print("nodes not on the GPU:", [(op, p) for _, op, p in sess.node_providers() if p != CUDA] or "none")
    import cupy as cp

    caller = cp.cuda.Stream(non_blocking=True)
    unsynced = opforge.RunOptions()
    unsynced.add_run_config_entry("disable_synchronize_execution_providers", "1")
    with caller:
        sources = [cp.asarray(b) for b in batches]
        busy = cp.random.standard_normal((2048, 2048), dtype=cp.float32)
        x = cp.empty_like(sources[0])
    caller.synchronize()
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", opforge.OrtValue(x, "cuda", 0))
    binding.bind_output("y", "cuda")
    wrong = []
    for i in range(runs):
        k = i % len(batches)
        with caller:
            for _ in range(4):
                busy = busy @ busy * 2048 ** -0.5   # work queued before the write, on the caller's stream
            x[...] = sources[k]
            sess.run_with_iobinding(binding, unsynced if i % 2 else None)
            got = cp.asnumpy(binding.get_outputs()[0].value(), stream=caller)
        if not np.allclose(got, expected[k], rtol=1e-3, atol=1e-4):
            wrong.append((i, k, float(np.abs(got - expected[k]).max())))
    print(f"race probe: {runs} io_binding runs at batch {batch} (every other one with "
          f"disable_synchronize_execution_providers=1), {len(wrong)} differ from the CPU")
    for i, k, err in wrong[:10]:
        print(f"  run {i} (batch {k}): max |GPU - CPU| = {err:.3g}")
    assert not wrong


def check_fp16(dry: bool) -> None:
    """Erf and Gelu (both approximations) on float16 in a CUDA session: outputs float16, on the
    GPU, close to the CPU's float16 result."""
    x16 = TensorProto.FLOAT16
    nodes = [helper.make_node("Erf", ["x"], ["erf"]), helper.make_node("Gelu", ["x"], ["gelu"]),
             helper.make_node("Gelu", ["x"], ["gelu_tanh"], approximate="tanh")]
    outs = [helper.make_tensor_value_info(n, x16, [4, 64]) for n in ("erf", "gelu", "gelu_tanh")]
    graph = helper.make_graph(nodes, "fp16", [helper.make_tensor_value_info("x", x16, [4, 64])], outs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    x = np.random.default_rng(4).uniform(-4, 4, (4, 64)).astype(np.float16)
    want = opforge.InferenceSession(proto).run(None, {"x": x})
    assert all(w.dtype == np.float16 for w in want)
    if dry:
        return
    sess = opforge.InferenceSession(proto, providers=[CUDA])
    placed = [(op, p) for _, op, p in sess.node_providers() if op in ("Erf", "Gelu")]
    print("placed:", placed)
    assert placed and all(p == CUDA for _, p in placed)
    got = sess.run(None, {"x": x})
    for name, g, w in zip(("erf", "gelu", "gelu_tanh"), got, want):
        print(f"{name:<10} dtype {g.dtype}, max |GPU - CPU| = "
              f"{float(np.abs(g.astype(np.float32) - w.astype(np.float32)).max()):.3g}")
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=1e-2, atol=2e-3)


def check_stream(dry: bool) -> None:
    """A session on the caller's cupy stream: the caller's work before a run (the input written)
    and after it (the output read) are ordered on that stream with no host wait in between."""
    proto = resnet_style_model().SerializeToString()
    x = np.random.default_rng(5).standard_normal((16, 3, 32, 32)).astype(np.float32)
    expected = opforge.InferenceSession(proto).run(None, {"x": x})[0]
    if dry:
        return
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    sess = opforge.InferenceSession(proto, providers=[(CUDA, {"user_compute_stream": str(stream.ptr)})])
    unsynced = opforge.RunOptions()
    unsynced.add_run_config_entry("disable_synchronize_execution_providers", "1")
    with stream:
        busy = cp.random.standard_normal((2048, 2048), dtype=cp.float32)
        for _ in range(8):
            busy = busy @ busy * 2048 ** -0.5
        xd = cp.asarray(x) + 0.0
        (out,) = sess.run_with_ort_values(None, {"x": opforge.OrtValue(xd, "cuda", 0)}, unsynced)
        y = out.value() * 1.0   # read on the same stream, no host wait in between
    stream.synchronize()
    err = float(np.abs(cp.asnumpy(y) - expected).max())
    print(f"user_compute_stream {stream.ptr:#x}: session stream {sess.device.stream_ptr:#x}, "
          f"max |GPU - CPU| = {err:.3g}")
    assert sess.device.stream_ptr == stream.ptr
    np.testing.assert_allclose(cp.asnumpy(y), expected, rtol=1e-3, atol=1e-4)


CHECKS = {"cupy": check_cupy, "race": check_race, "fp16": check_fp16, "stream": check_stream}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--dry-run", action="store_true", help="the CPU side only (no GPU needed)")
    args = parser.parse_args()
    CHECKS[args.check](args.dry_run)
    print(f"{args.check}: {'dry run ok (CPU side only)' if args.dry_run else 'ok'}")


if __name__ == "__main__":
    sys.exit(main())
