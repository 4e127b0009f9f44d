"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss checked against onnxruntime."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)
SCORES = RNG.standard_normal((4, 10, 6, 3)).astype(np.float32)
LABELS = RNG.integers(0, 10, (4, 6, 3)).astype(np.int64)
LABELS[0, :2] = -100
WEIGHTS = RNG.uniform(0.2, 2, 10).astype(np.float32)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_matches_onnxruntime(kernels, op, reduction, weighted):
    inputs = [SCORES, LABELS, WEIGHTS if weighted else None]
    attrs = {"reduction": reduction, "ignore_index": -100}
    outs = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    want = run_onnxruntime(op, inputs, attrs, 13, outs)
    got = kernels.op(op, domain="", version=13)(*inputs, **attrs)
    got = list(got) if isinstance(got, tuple) else [got]
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-5, 1e-6, f"{op} output {k}")
        assert_would_catch(g, w, 1e-5, 1e-6, f"{op} output {k}")


def test_loss_label_out_of_range(kernels):
    labels = LABELS.copy()
    labels[1, 1, 1] = 10
    with pytest.raises(opforge.OpError, match="label 10 is outside"):
        kernels.op("NegativeLogLikelihoodLoss", domain="", version=13)(SCORES, labels, ignore_index=-100)
    with pytest.raises(opforge.OpError, match="reduction"):
        kernels.op("SoftmaxCrossEntropyLoss", domain="", version=13)(SCORES, LABELS, reduction="max")
