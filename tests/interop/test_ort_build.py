"""opforge libraries as onnxruntime custom-op libraries (opforge/interop/ort_build.py and the
adapter): every example op runs in plain onnxruntime and matches opforge's eager call."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import opforge
from tests.support.numeric import assert_close, assert_would_catch
from tests.support.ort_interop import one_op_model, ort_session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ops"


@pytest.fixture(scope="module")
def ops(shared_cache):
    return opforge.load_dir(EXAMPLES)


@pytest.fixture(scope="module")
def ort_lib(ops):
    return ops.onnxruntime_library()


def run_one(ort_lib, op, feeds: dict, out_elem, threads: int = 1, **attrs):
    inputs = [(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for name, v in feeds.items()]
    proto = one_op_model(op, inputs, [("y", out_elem, None)], **attrs)
    return ort_session(proto, ort_lib, threads).run(None, feeds)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_leaky_relu_every_dtype(ops, ort_lib, dtype):
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(dtype)
    got = run_one(ort_lib, "leaky_relu", {"x": x}, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                  threads=2, alpha=0.3)
    want = ops.leaky_relu(x, alpha=0.3)
    assert_close(got, want, 0, 0, "leaky_relu in onnxruntime")
    assert not np.array_equal(want, ops.leaky_relu(x, alpha=0.25))   # the attribute reached the op


def test_variadic_add_n(ops, ort_lib):
    xs = {f"x{k}": np.arange(12, dtype=np.int64).reshape(3, 4) * (k + 1) for k in range(3)}
    got = run_one(ort_lib, "add_n", xs, T.INT64)
    assert_close(got, ops.add_n(*xs.values()), 0, 0, "add_n of 3 inputs")


def test_softmax_rows_workspace_and_threads(ops, ort_lib):
    x = np.random.default_rng(1).standard_normal((257, 33)).astype(np.float32)
    got = run_one(ort_lib, "softmax_rows", {"x": x}, T.FLOAT, threads=2, temperature=0.7)
    want = ops.softmax_rows(x, temperature=0.7)
    assert_close(got, want, 1e-6, 1e-7, "softmax_rows")
    assert_would_catch(got, want, 1e-6, 1e-7, "softmax_rows")


def test_every_attribute_kind(ops, ort_lib):
    t = np.arange(6, dtype=np.float32).reshape(2, 3)
    attrs = dict(f=2.5, i=7, s="opforge", ints=[4, 5, 6], floats=[1.5, 2.0], strings=["x", "y", "z"],
                 t=numpy_helper.from_array(t))
    got = run_one(ort_lib, "attribute_kinds", {}, T.DOUBLE, **attrs)
    want = ops.attribute_kinds(f=2.5, i=7, s="opforge", ints=[4, 5, 6], floats=[1.5, 2.0],
                               strings=["x", "y", "z"], t=t)
    assert_close(got, want, 0, 0, "attribute summary")
    defaults = run_one(ort_lib, "attribute_kinds", {}, T.DOUBLE, t=numpy_helper.from_array(t))
    assert_close(defaults, ops.attribute_kinds(t=t), 0, 0, "attribute defaults")


def test_shape_inference_reaches_onnxruntime(ort_lib):
    proto = one_op_model("leaky_relu", [("x", T.FLOAT, ["N", 5])], [("y", T.FLOAT, None)])
    out = ort_session(proto, ort_lib).get_outputs()[0]
    assert out.shape == ["N", 5] and out.type == "tensor(float)"


def test_model_mixing_standard_and_custom_ops_matches_opforge(ops, ort_lib):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("leaky_relu", ["h"], ["a"], domain="com.example", alpha=0.1),
             helper.make_node("softmax_rows", ["a"], ["s"], domain="com.example", temperature=2.0),
             helper.make_node("Add", ["s", "a"], ["y"])]
    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32), "w")
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    proto.ir_version = 9
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    got = ort_session(proto, ort_lib).run(None, {"x": x})[0]
    want = opforge.InferenceSession(proto.SerializeToString(), custom_ops=[ops]).run(None, {"x": x})[0]
    assert_close(got, want, 1e-5, 1e-6, "mixed model, onnxruntime vs opforge")
    assert_would_catch(got, want, 1e-5, 1e-6, "mixed model")


def test_eight_threads_on_one_session_agree(ort_lib):
    from concurrent.futures import ThreadPoolExecutor

    proto = one_op_model("softmax_rows", [("x", T.FLOAT, ["N", 64])], [("y", T.FLOAT, None)])
    session = ort_session(proto, ort_lib, threads=2)
    feeds = [np.random.default_rng(k).standard_normal((128, 64)).astype(np.float32) for k in range(8)]
    alone = [session.run(None, {"x": x})[0] for x in feeds]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(5):
            together = list(pool.map(lambda x: session.run(None, {"x": x})[0], feeds))
            for a, b in zip(alone, together):
                assert np.array_equal(a, b)


THREADS_SOURCE = r"""
#include <opforge/op.h>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
// n: how many threads ran the chunks of one parallel_for, each chunk long enough for an idle
// pool thread to take some
static void infer(opforge::InferContext& ctx) { ctx.set_output(0, opforge::i64, {1}); }
static void threads_used(opforge::KernelContext& ctx) {
  std::mutex m;
  std::set<std::thread::id> ids;
  ctx.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * (e - b)));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  ctx.output(0).data<int64_t>()[0] = int64_t(ids.size());
}
OPFORGE_OP(threads_used).domain("com.example").input("x").output("n", {opforge::i64}).infer(infer)
    .compute(threads_used);
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: parallel_for runs its chunks in one thread")
def test_parallel_for_runs_on_onnxruntime_intra_op_threads(shared_cache):
    lib = opforge.load_inline("ort_threads", THREADS_SOURCE).onnxruntime_library()
    proto = one_op_model("threads_used", [("x", T.FLOAT, [1])], [("n", T.INT64, [1])])
    x = np.zeros(1, np.float32)
    assert ort_session(proto, lib, threads=1).run(None, {"x": x})[0].tolist() == [1]
    assert ort_session(proto, lib, threads=2).run(None, {"x": x})[0].tolist() == [2]


def test_every_example_op_is_checked_here(ops):
    """The tests above run each op of examples/ops in onnxruntime: a new example needs one too."""
    assert {h.name for h in ops.op_table} == {"leaky_relu", "add_n", "softmax_rows", "attribute_kinds"}


STATE_SOURCE = r"""
#include <opforge/op.h>
#include <atomic>
static std::atomic<int64_t> made{0};
struct Offset { float k; int64_t serial; };
// y = x + k, k kept in the node's state; y's last element the serial of the state read
static void offset(opforge::KernelContext& ctx) {
  const Offset& s = ctx.state<Offset>([&] { return Offset{ctx.attr<float>("k"), ++made}; });
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = x[i] + s.k;
  y[ctx.input(0).numel() - 1] = float(s.serial);
}
OPFORGE_OP(offset).domain("com.example").input("x", {opforge::f32}).output("y", {opforge::f32})
    .attr("k", 0.0f).infer(opforge::same_as_input0).compute(offset);
"""


def test_state_is_kept_per_kernel_instance(shared_cache):
    lib = opforge.load_inline("ort_state", STATE_SOURCE).onnxruntime_library()
    nodes = [helper.make_node("offset", ["x"], ["a"], domain="com.example", k=1.0),
             helper.make_node("offset", ["x"], ["b"], domain="com.example", k=10.0)]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", T.FLOAT, [4])],
                              [helper.make_tensor_value_info(n, T.FLOAT, [4]) for n in "ab"])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    session = ort_session(proto, lib)
    x = np.zeros(4, np.float32)
    first = session.run(None, {"x": x})
    second = session.run(None, {"x": x})
    assert first[0][:3].tolist() == [1, 1, 1] and first[1][:3].tolist() == [10, 10, 10]
    serials = {first[0][3], first[1][3]}
    assert len(serials) == 2                               # one state per node
    assert {second[0][3], second[1][3]} == serials         # made once, kept between runs


def test_library_path_and_cache(ops, ort_lib, tmp_path):
    assert ops.onnxruntime_library() == ort_lib             # cached: the same entry
    copied = ops.onnxruntime_library(tmp_path / "deploy" / "libmy_ops.so")
    assert Path(copied).read_bytes() == Path(ort_lib).read_bytes()
    out = subprocess.run(["nm", "-D", "--defined-only", ort_lib], capture_output=True, text=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert "RegisterCustomOps" in exported


def test_cli_builds_the_onnxruntime_library(tmp_path):
    target = tmp_path / "libops_ort.so"
    done = subprocess.run([sys.executable, "-m", "opforge", "build", str(EXAMPLES), "--onnxruntime", str(target)],
                          capture_output=True, text=True, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert target.is_file() and str(target) in done.stdout
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(run_one(str(target), "leaky_relu", {"x": x}, T.FLOAT, alpha=0.5),
                          np.where(x > 0, x, 0.5 * x))


def test_library_loaded_from_a_file_cannot_be_rebuilt(ops):
    from opforge.runtime.custom_ops import collect

    loaded = collect([ops.__file__]).libraries[0]
    with pytest.raises(ValueError, match="not from sources"):
        loaded.onnxruntime_library()


CONCURRENT = r"""
import sys, opforge
lib = opforge.load_inline("ort_race_" + sys.argv[1], ["#include <opforge/op.h>",
      "static void twice(opforge::KernelContext& c) { const float* x = c.input(0).data<float>();",
      "  float* y = c.output(0).data<float>(); for (int64_t i = 0; i < c.input(0).numel(); ++i) y[i] = 2 * x[i]; }",
      "OPFORGE_OP(twice).domain(\"com.example\").input(\"x\", {opforge::f32}).output(\"y\", {opforge::f32})",
      "    .infer(opforge::same_as_input0).compute(twice);"])
print(lib.onnxruntime_library())
"""


def test_processes_building_one_library_share_one_entry(shared_cache, tmp_path):
    tag = os.urandom(4).hex()   # a library no earlier run built
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=os.environ) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1
    x = np.arange(4, dtype=np.float32)
    assert run_one(paths.pop(), "twice", {"x": x}, T.FLOAT).tolist() == (2 * x).tolist()
