"""Whole models against onnxruntime: the light_* model zoo graphs."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))


def compare_with_onnxruntime(model, feeds, rtol=1e-3, atol=1e-4):
    """Runs `model` on both runtimes (opforge twice: recorded, then planned); returns the session."""
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    want = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = opforge.InferenceSession(source)
    for attempt in ("first run", "planned run"):
        got = sess.run(None, feeds)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=attempt)
    return sess


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_zoo_matches_onnxruntime(name):
    path = LIGHT / f"{name}.onnx"
    arg = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in arg.shape])
    sess = compare_with_onnxruntime(path, {arg.name: x.astype(np.float32)}, rtol=2e-3, atol=1e-4)
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"
