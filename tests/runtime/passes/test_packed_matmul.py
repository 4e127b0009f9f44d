"""MatMul/Gemm on weights packed at session creation (com.opforge PackedMatMul, pack_matmul_weights):
every tile path this CPU can run, against numpy in float64 and onnxruntime, odd sizes, batched and
broadcast A, Gemm's flags, the fused bias and activation, threads, and what must stay unpacked."""
import platform
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from scipy.special import erf

import onnxruntime as ort
import opforge
from opforge.runtime.errors import KernelError
from tests.support.numeric import assert_close, assert_would_catch, bump_one_element, scaled_atol
from tests.support.onnx_builders import tensor

LEVEL = opforge.GraphOptimizationLevel
RTOL, ATOL = 1e-5, 1e-5
rng = np.random.default_rng(0)


def _cpu_flags() -> set:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return next((set(ln.split(":", 1)[1].split()) for ln in text.splitlines() if ln.startswith("flags")), set())


_FLAGS = _cpu_flags()
ISAS = [pytest.param("avx512", marks=pytest.mark.skipif("avx512f" not in _FLAGS, reason="no AVX-512F")),
        pytest.param("avx2", marks=pytest.mark.skipif(not {"avx2", "fma"} <= _FLAGS, reason="no AVX2+FMA")),
        pytest.param("neon", marks=pytest.mark.skipif(platform.machine() != "aarch64", reason="not aarch64")),
        "portable"]


def build(nodes, inputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, [tensor("y", None)],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def session(model, threads=1, level=LEVEL.ORT_ENABLE_ALL, path=""):
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = level
    options.optimized_model_filepath = path
    return opforge.InferenceSession(model.SerializeToString(), options)


def ops(sess):
    return [op for _, op, _ in sess.node_providers()]


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def activate(y, act):
    return np.maximum(y, 0) if act == "Relu" else 0.5 * y * (1 + erf(y / np.sqrt(2))) if act == "Gelu" else y


def linear_model(a_shape, k, n, bias_shape=(), act=""):
    """y = act(a @ w (+ b)) written as MatMul, Add and Relu/Gelu nodes (Gelu at opset 20)."""
    w, b = randn(k, n), randn(*bias_shape) if bias_shape is not None else None
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p" if b is not None or act else "y"])]
    if b is not None:
        nodes.append(helper.make_node("Add", ["p", "b"], ["q" if act else "y"]))
    if act:
        nodes.append(helper.make_node(act, ["q" if b is not None else "p"], ["y"]))
    inits = [("w", w)] + ([("b", b)] if b is not None else [])
    want = lambda a: activate(a.astype(np.float64) @ w + (b if b is not None else 0), act)  # noqa: E731
    return build(nodes, [tensor("a", list(a_shape))], inits, opset=20 if act == "Gelu" else 17), want


def check(got, want, where):
    """float32 ``got`` against float64 ``want``, tight enough that one 1e-3 error is caught."""
    want = np.asarray(want, np.float64)
    atol = scaled_atol(want, ATOL)
    assert_close(np.asarray(got, np.float64), want, RTOL, atol, where)
    assert_would_catch(got, want, RTOL, atol, where)


@pytest.fixture
def isa(request, monkeypatch):
    monkeypatch.setenv("OPFORGE_GEMM_ISA", request.param)
    return request.param


# ---- every tile path, odd sizes, the fused epilogue ----

# N from 16 (narrower weights stay on OpenBLAS); last panels of 1, 7, 16, 17 and 31 columns
SIZES = [(1, 16, 1), (1, 39, 17), (7, 17, 129), (17, 129, 7), (13, 33, 300), (129, 64, 40), (5, 31, 1)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("m,n,k", SIZES)
@pytest.mark.parametrize("act", ["", "Relu", "Gelu"])
def test_packed_matmul_matches_float64(isa, m, n, k, act):
    # a known single row stays on the GEMV (test_one_row_products_stay_unpacked): one row runs
    # the packed tile where the rows are not known before the run
    model, want = linear_model(["rows" if m == 1 else m, k], k, n, bias_shape=(n,), act=act)
    sess = session(model)
    assert ops(sess) == ["PackedMatMul"] and sess.pass_stats["pack_matmul_weights"] == 1
    a = randn(m, k)
    for _ in range(2):   # the first run records, the second runs the compiled plan
        check(sess.run(None, {"a": a})[0], want(a), f"{isa} {m}x{n}x{k} {act or 'no activation'}")


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_no_bias_and_threads_splitting_rows_and_panels(isa):
    model, want = linear_model([130, 300], 300, 200, bias_shape=None)
    a = randn(130, 300)
    for threads in (1, 2, 3):
        sess = session(model, threads)
        assert ops(sess) == ["PackedMatMul"]
        check(sess.run(None, {"a": a})[0], want(a), f"{isa} {threads} threads")


def test_a_wrong_element_fails_the_check():
    model, want = linear_model([7, 129], 129, 17)
    a = randn(7, 129)
    got = session(model).run(None, {"a": a})[0]
    with pytest.raises(AssertionError):
        check(bump_one_element(got), want(a), "bumped")


def test_nan_passes_through_relu():
    model, _ = linear_model([3, 8], 8, 40, act="Relu")
    a = randn(3, 8)
    a[1, 2] = np.nan
    got = session(model).run(None, {"a": a})[0]
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2]]).any()


# ---- batched and broadcast A ----

@pytest.mark.parametrize("a_shape,bias_shape", [([2, 3, 7, 17], (33,)), ([4, 1, 5, 17], (1, 1, 33)),
                                                ([17], (33,)), ([2, 128, 17], (1,)), ([3, 1, 17], ())])
def test_batched_a_with_broadcast_weights_and_bias(a_shape, bias_shape):
    model, want = linear_model(a_shape, 17, 33, bias_shape=bias_shape, act="Gelu")
    sess = session(model)
    assert ops(sess) == ["PackedMatMul"] if len(a_shape) > 1 else "PackedMatMul" not in ops(sess)  # 1-D A: one row
    a = randn(*a_shape)
    got = sess.run(None, {"a": a})[0]
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    check(got, want(a), f"A {a_shape}")
    assert_close(got, oracle, RTOL, scaled_atol(oracle, ATOL), "vs onnxruntime")


@pytest.mark.parametrize("a_shape", [[1, 576], [1, 1, 576], [576]])
def test_one_row_products_stay_unpacked(a_shape):
    """A known single row of A keeps its MatMul, which takes the GEMV on W as it lies (a
    classifier head, 576 -> 1024: faster than the packed tile); the same product with rows
    unknown before the run packs."""
    model, want = linear_model(a_shape, 576, 1024, bias_shape=(1024,))
    sess = session(model)
    assert "PackedMatMul" not in ops(sess) and sess.pass_stats["pack_matmul_weights"] == 0
    a = randn(*a_shape)
    check(sess.run(None, {"a": a})[0], want(a), f"one row {a_shape}")
    model, _ = linear_model(["rows", 576], 576, 1024, bias_shape=(1024,))
    assert ops(session(model)) == ["PackedMatMul"]


def test_a_bias_that_grows_the_rank_stays_an_add():
    model, want = linear_model([5, 17], 17, 33, bias_shape=(1, 1, 33))
    sess = session(model)
    assert ops(sess) == ["PackedMatMul", "Add"]
    a = randn(5, 17)
    check(sess.run(None, {"a": a})[0], want(a), "rank-3 bias")


# ---- Gemm ----

@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (33,), (1, 33), (1,)])
@pytest.mark.parametrize("act", ["", "Relu"])
def test_gemm_flags_alpha_beta(trans_b, c_shape, act):
    a, b = randn(9, 21), randn(33, 21) if trans_b else randn(21, 33)
    c = randn(*c_shape) if c_shape else None
    nodes = [helper.make_node("Gemm", ["a", "b"] + (["c"] if c is not None else []), ["g" if act else "y"],
                              alpha=0.7, beta=1.3, transB=trans_b)]
    nodes += [helper.make_node(act, ["g"], ["y"])] if act else []
    model = build(nodes, [tensor("a", [9, 21])], [("b", b)] + ([("c", c)] if c is not None else []))
    sess = session(model)
    assert ops(sess) == ["PackedMatMul"]
    want = 0.7 * a.astype(np.float64) @ (b.T if trans_b else b) + (1.3 * c if c is not None else 0)
    check(sess.run(None, {"a": a})[0], activate(want, act), f"Gemm transB={trans_b} C {c_shape}")


@pytest.mark.parametrize("attrs,c_shape", [(dict(transA=1), (33,)), ({}, (9, 33)), ({}, (9, 1))])
def test_gemm_that_does_not_pack_stays_a_gemm(attrs, c_shape):
    a_shape = [21, 9] if attrs.get("transA") else [9, 21]
    b, c = randn(21, 33), randn(*c_shape)
    model = build([helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attrs)], [tensor("a", a_shape)],
                  [("b", b), ("c", c)])
    sess = session(model)
    assert ops(sess) == ["Gemm"] and sess.pass_stats["pack_matmul_weights"] == 0
    a = randn(*a_shape)
    check(sess.run(None, {"a": a})[0], (a.T if attrs else a).astype(np.float64) @ b + c, "unpacked Gemm")


# ---- when nothing is packed ----

@pytest.mark.parametrize("n", [1, 7, 15])
def test_narrow_weights_stay_on_openblas(n):
    model, want = linear_model([9, 20], 20, n, bias_shape=(n,), act="Relu")
    sess = session(model)
    assert "PackedMatMul" not in ops(sess) and sess.pass_stats["pack_matmul_weights"] == 0
    a = randn(9, 20)
    check(sess.run(None, {"a": a})[0], want(a), f"N={n}")


def test_a_product_that_cannot_run_keeps_its_matmul_and_its_error():
    node = helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")
    model = build([node], [tensor("a", [3, 5])], [("w", randn(4, 20))])
    sess = session(model)
    assert ops(sess) == ["MatMul"]
    with pytest.raises(KernelError, match="node 'mm' \\(MatMul"):
        sess.run(None, {"a": randn(3, 5)})


def test_weights_fed_at_run_time_are_not_packed():
    model = build([helper.make_node("MatMul", ["a", "w"], ["y"])], [tensor("a", [3, 4]), tensor("w", [4, 5])], [])
    assert ops(session(model)) == ["MatMul"]


def test_basic_level_and_blas_setting_keep_matmul(monkeypatch):
    model, _ = linear_model([3, 17], 17, 33, bias_shape=None)
    assert ops(session(model, level=LEVEL.ORT_ENABLE_BASIC)) == ["MatMul"]
    monkeypatch.setenv("OPFORGE_GEMM_ISA", "blas")
    assert ops(session(model)) == ["MatMul"]
    monkeypatch.setenv("OPFORGE_GEMM_ISA", "sse")
    with pytest.raises(ValueError, match="OPFORGE_GEMM_ISA"):
        session(model)


def test_shared_weights_are_packed_for_each_reader():
    w = randn(17, 33)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("MatMul", ["p2", "w"], ["y"]),
             helper.make_node("Slice", ["p", "s0", "s1", "ax"], ["p2"])]
    inits = [("w", w), ("s0", np.array([0], np.int64)), ("s1", np.array([17], np.int64)),
             ("ax", np.array([1], np.int64))]
    sess = session(build(nodes, [tensor("a", [4, 17])], inits))
    assert ops(sess).count("PackedMatMul") == 2
    a = randn(4, 17)
    check(sess.run(None, {"a": a})[0], (a.astype(np.float64) @ w)[:, :17] @ w, "shared weights")


def test_saved_optimized_model_is_unpacked_and_runs_in_onnxruntime(tmp_path):
    model, want = linear_model([5, 17], 17, 33, bias_shape=(33,), act="Relu")
    path = str(tmp_path / "optimized.onnx")
    sess = session(model, path=path)
    assert ops(sess) == ["PackedMatMul"]
    saved = onnx.load(path)
    assert "PackedMatMul" not in {n.op_type for n in saved.graph.node}
    a = randn(5, 17)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    check(got, want(a), "saved model in onnxruntime")
    check(sess.run(None, {"a": a})[0], want(a), "packed session")


# ---- the op itself, given bad input ----

def packed_node_model(w_shape, n, isa="auto", activation=""):
    node = helper.make_node("PackedMatMul", ["a", "w"], ["y"], name="packed", domain="com.opforge", N=n,
                            isa=isa, activation=activation)
    graph = helper.make_graph([node], "g", [tensor("a", [3, 8])], [tensor("y", None)],
                              [numpy_helper.from_array(randn(*w_shape), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.opforge", 1)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("w_shape,n,kwargs,message", [
    ((2, 8, 16), 40, {}, "packed as"), ((1, 8, 32), 40, {}, "panels"), ((2, 7, 32), 40, {}, "inner dimensions"),
    ((2, 8, 32), 40, dict(isa="avx9"), "attribute isa"), ((2, 8, 32), 40, dict(activation="Tanh"), "activation")])
def test_bad_packed_input_is_a_clear_error(w_shape, n, kwargs, message):
    with pytest.raises(KernelError, match=message) as caught:
        session(packed_node_model(w_shape, n, **kwargs)).run(None, {"a": randn(3, 8)})
    assert "node 'packed' (PackedMatMul, domain 'com.opforge')" in str(caught.value)


def test_layout_passes_skip_device_sessions_and_the_basic_level():
    from opforge.runtime.passes import PassContext, run_layout_passes

    untouched = object()   # a graph either call would fail on, had it run a pass
    assert run_layout_passes(untouched, LEVEL.ORT_ENABLE_ALL, PassContext(None, None, on_device=True)) == {}
    assert run_layout_passes(untouched, LEVEL.ORT_ENABLE_BASIC, PassContext(None, None)) == {}


def test_erf_gelu_written_out_at_opset_17_joins_the_product():
    """MatMul + Add + x * 0.5 * (1 + erf(x / sqrt 2)): fuse_gelu makes com.microsoft's Gelu, which
    the packing takes in, as torch-exported encoders have it."""
    w, b = randn(24, 40), randn(40)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["x"]),
             helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["x", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    consts = [("sqrt2", np.float32(np.sqrt(2))), ("one", np.float32(1)), ("half", np.float32(0.5))]
    model = build(nodes, [tensor("a", [2, 9, 24])], [("w", w), ("b", b)] + consts)
    sess = session(model)
    assert ops(sess) == ["PackedMatMul"] and sess.pass_stats["fuse_gelu"] == 1
    a = randn(2, 9, 24)
    check(sess.run(None, {"a": a})[0], activate(a.astype(np.float64) @ w + b, "Gelu"), "written-out Gelu")
