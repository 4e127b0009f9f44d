"""Comparing opforge with onnxruntime on whole models, as users run them.

opforge runs each model as written, so its fusions and packed kernels are the ones users get, and
every value its optimized graph computes that the model also names (a fused conv's output, a
pool's, a Gemm's) is read out of the plan as it runs (``InferenceSession.run_observed``) and
compared with onnxruntime's value of that name. Each comparison asserts that a 1e-3 relative
error in any element of at least a tenth of the tensor's largest magnitude would have failed it.
"""
from __future__ import annotations

import numpy as np
import onnx

import onnxruntime as ort
import opforge
from tests.support.numeric import assert_close, assert_would_catch, scaled_atol

# float32 through ~50 layers, different summation orders: relative 1e-4, and an absolute
# tolerance of 1e-5 of the tensor's largest magnitude for elements that cancel to near zero.
RTOL, ATOL = 1e-4, 1e-5
# float32 rounding of the softmax itself (exp, sum, divide), relative to each probability
SOFTMAX_ROUNDING = 8 * np.finfo(np.float32).eps


def with_probes(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs also list ``names`` (values its nodes make)."""
    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    listed = {v.name for v in probed.graph.output}
    probed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in listed)
    return probed


def made_by(model: onnx.ModelProto) -> dict:
    """{value name: the node of ``model`` that makes it}."""
    return {name: node for node in model.graph.node for name in node.output if name}


def _observed_run(sess, feeds: dict, names: list, edit: dict) -> tuple[list, dict]:
    """One run of ``sess`` with a copy taken of each of ``names`` as it is made (after
    ``edit[name]`` changed it in place, where given)."""
    seen = {}

    def observer(name):
        def take(value):
            if name in edit:
                edit[name](value)
            if isinstance(value, np.ndarray):
                seen[name] = value.copy()
        return take

    outputs = sess.run_observed(None, feeds, {name: observer(name) for name in names})
    return outputs, seen


def run_opforge(model: onnx.ModelProto, feeds: dict, edit: "dict | None" = None, options=None):
    """opforge on ``model`` as written: ``(outputs, observed values, session)`` of its compiled
    plan (the second run), checked equal to the first run's (which records the plan)."""
    sess = opforge.InferenceSession(model.SerializeToString(), options)
    names = [n for n in sess.observable_values() if n in made_by(model)]
    first, first_seen = _observed_run(sess, feeds, names, edit or {})
    assert sess.memory_plan(feeds) is not None, "the first run compiled no plan for these feeds"
    planned, seen = _observed_run(sess, feeds, names, edit or {})
    assert len(first) == len(planned) == len(model.graph.output)
    assert first_seen.keys() == seen.keys()
    for name, a, b in [*zip([v.name for v in model.graph.output], first, planned),
                       *((n, first_seen[n], seen[n]) for n in seen)]:
        assert_close(a, b, RTOL, scaled_atol(b, ATOL), f"{name}: first run vs planned run")
    return planned, seen, sess


def softmax_atol(logits: np.ndarray, probs: np.ndarray, axis: int, opset: int, rtol: float, atol: float):
    """Per element, how far a softmax output may be off when each logit is off by at most its
    own tolerance t_j = atol + rtol |l_j|: dp_i = p_i (dl_i - sum_j p_j dl_j), so
    |dp_i| <= p_i (t_i + sum_j p_j t_j), plus the softmax's own float32 rounding."""
    shape = probs.shape
    axis = axis + len(shape) if axis < 0 else axis
    if opset < 13:   # the softmax of the rows of the input flattened to 2-D at `axis`
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        logits, probs = logits.reshape(rows, -1).astype(np.float64), probs.reshape(rows, -1).astype(np.float64)
        axis = 1
    else:
        logits, probs = logits.astype(np.float64), probs.astype(np.float64)
    t = atol + rtol * np.abs(logits)
    bound = probs * (t + np.sum(probs * t, axis=axis, keepdims=True)) + SOFTMAX_ROUNDING * probs
    return bound.reshape(shape)


class Oracle:
    """onnxruntime's values of the model's outputs and of ``names``, with the tolerance each
    comparison takes: ``rtol`` and ``atol`` (relative to the tensor's largest magnitude), except
    for softmax outputs, whose tolerance follows from their logits' (softmax_atol)."""

    def __init__(self, model: onnx.ModelProto, feeds: dict, names, rtol: float, atol: float):
        self.model, self.rtol, self.atol = model, rtol, atol
        self.producers = made_by(model)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        logits = [self.producers[n].input[0] for n in names if self._is_softmax(n)]
        outputs = [v.name for v in model.graph.output]
        wanted = list(dict.fromkeys(outputs + list(names) + logits))
        session = ort.InferenceSession(with_probes(model, wanted).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        fetched = [o.name for o in session.get_outputs()]
        self.values = dict(zip(fetched, session.run(None, feeds)))

    def _is_softmax(self, name: str) -> bool:
        node = self.producers.get(name)
        return node is not None and node.op_type == "Softmax" and node.domain in ("", "ai.onnx")

    def check(self, name: str, got, sensitive: bool) -> None:
        """``got`` against onnxruntime's value of ``name``: integers equal, floats within the
        tolerance; with ``sensitive``, also that a small error would have failed it."""
        want = self.values[name]
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{name!r}: opforge made {got.dtype}{list(got.shape)}, onnxruntime {want.dtype}{list(want.shape)}")
        if want.dtype.kind in "biu":
            differ = int(np.count_nonzero(got != want))
            assert not differ, f"{name!r}: {differ} of {want.size} elements differ"
            return
        if self._is_softmax(name):
            node = self.producers[name]
            logits = self.values[node.input[0]]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1 if self.opset < 13 else -1)
            bound = softmax_atol(logits, want, axis, self.opset, self.rtol, scaled_atol(logits, self.atol))
            over = np.abs(got.astype(np.float64) - want) - bound
            worst = int(np.argmax(over))
            assert over.flat[worst] <= 0, (
                f"softmax {name!r}: {int(np.count_nonzero(over > 0))} of {want.size} elements off by more than "
                f"their logits' tolerance allows; worst at {np.unravel_index(worst, want.shape)}: "
                f"{got.flat[worst]:.7g} vs {want.flat[worst]:.7g} (allowed {bound.flat[worst]:.3g})")
            return   # its logits carry the sensitivity: a wrong logit shows there
        assert_close(got, want, self.rtol, scaled_atol(want, self.atol), f"{name!r}")
        if sensitive:
            assert_would_catch(got, want, self.rtol, scaled_atol(want, self.atol), repr(name))


def compare_with_onnxruntime(model: onnx.ModelProto, feeds: dict, rtol=RTOL, atol=ATOL,
                             edit: "dict | None" = None, sensitive: bool = True):
    """Compare opforge with onnxruntime on ``model``: its outputs, and every value opforge's
    optimized graph computes that the model names too (see run_opforge). ``edit``: {value
    name: function editing it in place} applied inside opforge's runs (tests of the tests).
    ``atol`` is relative to each tensor's largest magnitude. With ``sensitive``, each observed
    float comparison must be able to see a 1e-3 relative error (assert_would_catch). Returns
    the opforge session."""
    got, seen, sess = run_opforge(model, feeds, edit)
    oracle = Oracle(model, feeds, list(seen), rtol, atol)
    for value, out in zip(model.graph.output, got):
        oracle.check(value.name, out, sensitive=False)
    for name, value in seen.items():
        oracle.check(name, value, sensitive)
    sess.compared_values = list(seen)
    return sess


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict:
    """Standard-normal float32 feeds for every input the model needs (unknown dims as 1)."""
    rng = np.random.default_rng(seed)
    constants = {t.name for t in model.graph.initializer}
    return {v.name: rng.standard_normal([d.dim_value or 1 for d in v.type.tensor_type.shape.dim]).astype(np.float32)
            for v in model.graph.input if v.name not in constants}


def assert_all_native(sess) -> None:
    """Every node bound to a native CPU kernel (bound once, at session creation: a kernel never
    hands a call to another provider at run time)."""
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"


def refuse_calls(monkeypatch, op_types) -> None:
    """Native kernels of ``op_types`` refuse every call (a test of the tests)."""
    from opforge.errors import OpError
    from opforge.runtime.providers import native

    real = native.NativeKernel.run_traced

    def refusing(self, inputs):
        if self.node.op_type in op_types:
            raise OpError(f"{self.node.op_type}: refused (planted by the test)")
        return real(self, inputs)

    monkeypatch.setattr(native.NativeKernel, "run_traced", refusing)
