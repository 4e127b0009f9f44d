"""Quantized model latency, side by side in one run: onnxruntime and opforge on the same inputs.

    python -m benchmarks.bench_quantized [--threads 2] [--repeat 20]

Builds squeezenet (light zoo, seeded weights, 224x224) and a BERT-style encoder layer (hidden 256,
ffn 1024, batch 8, sequence 16), quantizes them with onnxruntime's quantize_dynamic and
quantize_static (QOperator and QDQ, a seeded calibration reader; uint8 activations for
squeezenet, as in tests/runtime/test_quantized_models.py), and prints, as bench_models.py
does, the load average, each runtime's median latency (runs interleaved) and the ratio. Outputs are
checked first: every integer tensor equal, floats within 1e-4 ('match'). Where they differ from
onnxruntime's they are checked against onnxruntime on the model's exact form
(tests/support/exact_integers.py): its uint8 x int8 products saturate in 16-bit lanes on CPUs
without VNNI (AVX2), so there 'exact' means equal to exact integer products and not to
onnxruntime's.
"""
import argparse
import logging
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

import onnxruntime as ort
import opforge

ROOT = Path(__file__).resolve().parent.parent
from benchmarks.bench_models import median_times, print_load
from tests.support.exact_integers import exact_form
from tests.support.quantized_models import Calibration, squeezenet
from tests.support.transformer_models import encoder_layer
from onnxruntime import quantization


def cnn_feeds(seed):
    return {"data_0": np.random.default_rng(seed).standard_normal((1, 3, 224, 224)).astype(np.float32)}


def encoder_feeds(seed):
    rng = np.random.default_rng(seed)
    return {"ids": rng.integers(0, 50, (8, 16)).astype(np.int64), "mask": np.ones((8, 16), np.int64)}


def quantized_models(folder: Path):
    """(name, model, feeds) for each quantized model."""
    sources = {"squeezenet": (squeezenet(224), cnn_feeds),
               "encoder": (encoder_layer(hidden=256, heads=4, ffn=1024), encoder_feeds)}
    for name, (model, feeds) in sources.items():
        path = folder / f"{name}.onnx"
        onnx.save(model, path)
        yield f"{name} float", model, feeds(0)
        out = folder / f"{name}_dynamic.onnx"
        quantization.quantize_dynamic(path, out)
        yield f"{name} dynamic", onnx.load(out), feeds(0)
        for fmt in ("QOperator", "QDQ"):
            out = folder / f"{name}_{fmt}.onnx"
            activations = quantization.QuantType.QUInt8 if name == "squeezenet" else quantization.QuantType.QInt8
            quantization.quantize_static(path, out, Calibration([feeds(100 + i) for i in range(2)]),
                                         quant_format=getattr(quantization.QuantFormat, fmt),
                                         activation_type=activations)
            yield f"{name} static {fmt}", onnx.load(out), feeds(0)


def outputs_match(got, want) -> bool:
    for g, w in zip(got, want):
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        if np.issubdtype(w.dtype, np.integer):
            if np.any(g != w):
                return False
        elif not np.allclose(g, w, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(w), initial=0))):
            return False
    return len(got) == len(want)


def measure(name, model, feeds, threads, repeat) -> dict:
    source = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    ref = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    sess = opforge.InferenceSession(source, options)
    want = ref.run(None, feeds)
    sess.run(None, feeds)
    got = sess.run(None, feeds)
    ok = "yes" if outputs_match(got, want) else "NO"
    if ok == "NO":
        exact = ort.InferenceSession(exact_form(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
        ok = "exact" if outputs_match(got, exact.run(None, feeds)) else "NO"
    fallback = sum(1 for _, _, p in sess.node_providers() if p != "CPUExecutionProvider")
    ort_time, ours_time = median_times([lambda: ref.run(None, feeds), lambda: sess.run(None, feeds)], repeat)
    return {"name": name, "ort": ort_time, "ours": ours_time, "ok": ok, "nodes": len(sess.node_providers()),
            "fallback": fallback}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    print_load("at start")
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure(n, m, f, args.threads, args.repeat) for n, m, f in quantized_models(Path(folder))]
    print(f"\nquantized model latency, {args.threads} thread(s), median of {args.repeat} interleaved runs")
    print_load("at end")
    print(f"\n{'model':<28}{'nodes':>6}{'ref':>5}{'ort ms':>10}{'opforge ms':>12}{'ratio':>8}  match")
    for r in rows:
        print(f"{r['name']:<28}{r['nodes']:>6}{r['fallback']:>5}{r['ort'] * 1e3:>10.2f}{r['ours'] * 1e3:>12.2f}"
              f"{r['ours'] / r['ort']:>8.2f}  {r['ok']}")
    quantized = [r for r in rows if "float" not in r["name"]]
    geo = math.exp(sum(math.log(r["ours"] / r["ort"]) for r in quantized) / len(quantized))
    print(f"\ngeo-mean latency ratio opforge/onnxruntime over {len(quantized)} quantized models: {geo:.2f}")


if __name__ == "__main__":
    main()
