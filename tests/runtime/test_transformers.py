"""Transformer encoders against onnxruntime: graphs written the way torch.onnx.export writes them.

The graphs are built here, node by node, as torch exports them, so the tests run without torch."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.model_check import compare_with_onnxruntime, refuse_calls
from tests.support.transformer_models import encoder_layer, packed_qkv_encoder


@pytest.mark.parametrize("batch, seq", [(1, 7), (3, 12), (2, 16)])
def test_transformer_encoder_matches_onnxruntime(batch, seq):
    rng = np.random.default_rng(batch * seq)
    ids = rng.integers(0, 50, (batch, seq)).astype(np.int64)
    mask = (rng.random((batch, seq)) > 0.2).astype(np.int64)
    sess = compare_with_onnxruntime(encoder_layer(), {"ids": ids, "mask": mask}, rtol=1e-4, atol=1e-5)
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"


@pytest.mark.parametrize("batch, seq", [(2, 9), (3, 11)])
def test_packed_qkv_encoder_matches_onnxruntime(batch, seq):
    rng = np.random.default_rng(batch + seq)
    feeds = {"ids": rng.integers(0, 50, (batch, seq)).astype(np.int64),
             "mask": (rng.random((batch, seq)) > 0.2).astype(np.int64)}
    sess = compare_with_onnxruntime(packed_qkv_encoder(), feeds, rtol=1e-4, atol=1e-5)
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"


@pytest.mark.parametrize("op_types", [("MatMul",), ("PackedMatMul", "FusedMatMul")])
def test_a_native_matmul_that_refuses_its_calls_fails_the_model_test(monkeypatch, op_types):
    """Every native MatMul (and the packed and fused ones it becomes) refusing its calls fails the
    comparison: the call raises, naming the node; no other provider takes it over."""
    import opforge
    refuse_calls(monkeypatch, op_types)
    rng = np.random.default_rng(0)
    feeds = {"ids": rng.integers(0, 50, (2, 7)).astype(np.int64), "mask": np.ones((2, 7), np.int64)}
    with pytest.raises(opforge.OpforgeError, match="refused \\(planted by the test\\)"):
        compare_with_onnxruntime(encoder_layer(), feeds)
