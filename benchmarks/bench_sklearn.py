"""sklearn pipelines' latency, side by side in one run: onnxruntime and opforge on the same inputs.

    python -m benchmarks.bench_sklearn [--threads 1] [--repeat 200]

Trains seeded sklearn models on a synthetic 20-feature problem, converts them with skl2onnx
(no ZipMap) and times each at batch 1 and 1000: a 100-tree random forest (classifier and
regressor), a 100-tree gradient boosting classifier, and a StandardScaler + LogisticRegression
pipeline. Then string pipelines as skl2onnx converts them by default: a ColumnTransformer
(OneHotEncoder on two string columns, StandardScaler on three number columns) before a
LogisticRegression, a 100-tree random forest or an SVC with probabilities, string class labels
and ZipMap's list of dicts. Prints the load average, median latency of each runtime, the
opforge/onnxruntime ratio, how many nodes ran on the reference fallback, and whether the
outputs matched (relative 1e-5, absolute 1e-6; labels and map keys exactly) before timing.
Targets (DESIGN.md, issue 9): real models geo-mean <= 1.25, none above 2x; sklearn pipelines
within 1.5x.
"""
import argparse
import math
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import opforge

ROOT = Path(__file__).resolve().parent.parent
from benchmarks.bench_models import median_times, print_load
from tests.support.ml_tables import table as string_table


def models() -> list:
    """(name, fitted sklearn model, float32 features) for each benchmarked pipeline."""
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = make_classification(2000, 20, n_informative=10, n_classes=3, random_state=0)
    xr, yr = make_regression(2000, 20, n_informative=10, random_state=0)
    x, xr = x.astype(np.float32), xr.astype(np.float32)
    return [
        ("random forest classifier", RandomForestClassifier(100, max_depth=10, random_state=0).fit(x, y), x),
        ("random forest regressor", RandomForestRegressor(100, max_depth=10, random_state=0).fit(xr, yr), xr),
        ("gradient boosting classifier",
         GradientBoostingClassifier(n_estimators=100, max_depth=3, random_state=0).fit(x, y), x),
        ("scaler + logistic regression",
         make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y), x),
    ]


def string_models() -> list:
    """(name, fitted pipeline, frame) for each string pipeline, converted with ZipMap."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    from sklearn.svm import SVC

    frame, labels = string_table(2000)

    def encoded(model):
        columns = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), ["color", "size"]),
                                     ("num", StandardScaler(), ["weight", "height", "doors"])])
        return make_pipeline(columns, model).fit(frame, labels)

    return [("strings + logistic regression", encoded(LogisticRegression()), frame),
            ("strings + random forest", encoded(RandomForestClassifier(100, max_depth=10, random_state=0)), frame),
            ("strings + SVC (probabilities)", encoded(SVC(probability=True, random_state=0)), frame)]


def frame_feed(frame, batch: int) -> dict:
    """One [batch, 1] feed per column, strings as object arrays."""
    return {c: np.asarray(frame[c].to_numpy()[:batch], dtype=object if frame[c].dtype.kind not in "fi" else None)
            .reshape(-1, 1) for c in frame.columns}


def convert(model, x):
    from skl2onnx import to_onnx

    options = {"zipmap": False} if hasattr(model, "predict_proba") else None
    return to_onnx(model, x[:1], options=options).SerializeToString()


def matches(got: list, want: list) -> bool:
    return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))


def _same(got, want) -> bool:
    """Numbers within 1e-5 relative, 1e-6 absolute; labels exactly; ZipMap's lists of dicts
    with the same keys in the same order."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            list(g) == list(w) and np.allclose(list(g.values()), list(w.values()), rtol=1e-5, atol=1e-6)
            for g, w in zip(got, want))
    if want.dtype == object:
        return got.dtype == object and got.shape == want.shape and (got == want).all()
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)


def measure(name: str, source: bytes, feed: dict, batch: int, threads: int, repeat: int) -> dict:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    ref = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    sess = opforge.InferenceSession(source, opforge.SessionOptions(intra_op_num_threads=threads))
    want = ref.run(None, feed)
    sess.run(None, feed)
    ok = matches(sess.run(None, feed), want)
    fallback = sum(1 for _, _, p in sess.node_providers() if p != "CPUExecutionProvider")
    ort_time, ours_time = median_times([lambda: ref.run(None, feed), lambda: sess.run(None, feed)], repeat)
    return {"name": f"{name}, batch {batch}", "ort": ort_time, "ours": ours_time, "ok": ok,
            "nodes": len(sess.node_providers()), "fallback": fallback}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print_load("at start")
    rows = []
    for name, model, x in models():
        source = convert(model, x)
        for batch in (1, 1000):
            feed = {onnx.load_from_string(source).graph.input[0].name: np.ascontiguousarray(x[:batch])}
            rows.append(measure(name, source, feed, batch, args.threads, args.repeat if batch == 1 else args.repeat // 4))
    from skl2onnx import to_onnx

    for name, model, frame in string_models():
        source = to_onnx(model, frame[:1]).SerializeToString()
        for batch in (1, 1000):
            rows.append(measure(name, source, frame_feed(frame, batch), batch, args.threads,
                                args.repeat if batch == 1 else args.repeat // 4))
    print(f"\nsklearn pipelines, {args.threads} thread(s), median of {args.repeat} runs (batch 1000: a quarter)")
    print_load("at end")
    print()
    print(f"{'model':<44}{'nodes':>6}{'ref':>5}{'ort us':>10}{'opforge us':>12}{'ratio':>8}  match")
    for r in rows:
        print(f"{r['name']:<44}{r['nodes']:>6}{r['fallback']:>5}{r['ort'] * 1e6:>10.1f}{r['ours'] * 1e6:>12.1f}"
              f"{r['ours'] / r['ort']:>8.2f}  {'yes' if r['ok'] else 'NO'}")
    matched = [r for r in rows if r["ok"]]
    if matched:
        geo = math.exp(sum(math.log(r["ours"] / r["ort"]) for r in matched) / len(matched))
        print(f"\ngeo-mean latency ratio opforge/onnxruntime over {len(matched)} matching rows: {geo:.2f} "
              "(target <= 1.25, none above 2)")
    print("'ref' counts nodes on the reference fallback; ratio < 1 means opforge is faster.")


if __name__ == "__main__":
    main()
