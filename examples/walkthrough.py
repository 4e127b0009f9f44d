"""A first hour with opforge, one notebook cell at a time (`# %%` cells: VS Code, Jupytext and
PyCharm open this file as a notebook; `python examples/walkthrough.py` runs it whole).

Write an op, build and call it on numpy, edit a header it includes and reload in the same
process, break it and read the error, use it in an ONNX model, profile the model; then make a
mistake that compiles, let check_op point at it, fix it and reload it into the running session.
"""
# %% A folder for the op's sources (a fresh one each run)
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opforge

work = Path(tempfile.mkdtemp(prefix="opforge-walkthrough-"))
print("sources in", work)

# %% Write an op: y = x * sigmoid(beta * x) (Swish), with a tuning constant in a header
(work / "swish_params.h").write_text("constexpr float kOutputScale = 1.0f;\n")
SWISH = r"""
#include <cmath>
#include <opforge/op.h>
#include "swish_params.h"

static void swish(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const float beta = ctx.attr<float>("beta");
  ctx.parallel_for(ctx.input(0).numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = kOutputScale * x[i] / (1.0f + std::exp(-beta * x[i]));
  });
}

OPFORGE_OP(Swish)
    .domain("com.example")
    .doc("x * sigmoid(beta * x), times kOutputScale from swish_params.h")
    .input("X", {opforge::f32})
    .output("Y")
    .attr("beta", 1.0f)
    .infer(opforge::same_as_input0)
    .compute(swish);
"""
(work / "swish.cpp").write_text(SWISH)

# %% Build and load it (compiled once, then cached), and read its schema
ops = opforge.CustomOpBuilder("walkthrough_ops", [work / "swish.cpp"]).load()
print(ops)
help(ops.Swish)

# %% Call it on numpy arrays
x = np.linspace(-4, 4, 9, dtype=np.float32)
y = ops.Swish(x, beta=1.5)
expected = x / (1 + np.exp(-1.5 * x))
np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-7)
print("Swish(x) =", np.round(y, 4))

# %% Edit the header and load again: the new code runs in this same process
(work / "swish_params.h").write_text("constexpr float kOutputScale = 2.0f;\n")
ops = opforge.CustomOpBuilder("walkthrough_ops", [work / "swish.cpp"]).load()
np.testing.assert_allclose(ops.Swish(x, beta=1.5), 2 * expected, rtol=1e-6, atol=1e-7)
print("after the edit, Swish(x) is doubled:", np.round(ops.Swish(x, beta=1.5), 4))

# %% Break it: the BuildError starts with the compiler's first error at your file:line
(work / "swish.cpp").write_text(SWISH.replace("const float beta", "const flaot beta"))
try:
    opforge.CustomOpBuilder("walkthrough_ops", [work / "swish.cpp"]).load()
    raise AssertionError("a source with a typo built")
except opforge.BuildError as error:
    first_line = str(error).splitlines()[0]
    print("BuildError:", first_line)
    assert first_line.startswith(f"{work / 'swish.cpp'}:9:"), first_line
    print("the full compiler log is error.log; the command, error.command")
(work / "swish.cpp").write_text(SWISH)   # fixed again: this build is still in the cache

# %% Use it in an ONNX model: x -> MatMul -> com.example::Swish -> y
weights = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["h"]),
     helper.make_node("Swish", ["h"], ["y"], domain="com.example", beta=1.5)],
    "walkthrough",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
    [numpy_helper.from_array(weights, "w")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.example", 1)])
ops = opforge.CustomOpBuilder("walkthrough_ops", [work / "swish.cpp"]).load()
options = opforge.SessionOptions()
options.enable_profiling = True
options.profile_file_prefix = str(work / "profile")
sess = opforge.InferenceSession(model, options, custom_ops=[ops])
print(sess)
batch = np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32)
for _ in range(20):
    out, = sess.run(None, {"x": batch})
h = batch @ weights
np.testing.assert_allclose(out, 2 * h / (1 + np.exp(-1.5 * h)), rtol=1e-5, atol=1e-5)
print("model output checked against numpy:", out.shape)

# %% Profile it: a chrome-trace JSON (open it in chrome://tracing or https://ui.perfetto.dev)
trace = sess.end_profiling()
events = json.loads(Path(trace).read_text())
total = {}
for event in events:
    key = f"{event['args']['op_name']} on {event['args']['provider']}"
    total[key] = total.get(key, 0.0) + event["dur"]
for key, micros in sorted(total.items(), key=lambda item: -item[1]):
    print(f"{key:<40}{micros / 20:>10.1f} us per run")
# the MatMul shows as PackedMatMul: from the extended optimization level on, its weights are packed
# once, at session creation, for opforge's own GEMM tiles
assert {"PackedMatMul on CPUExecutionProvider", "Swish on CPUExecutionProvider"} <= set(total), total

# %% A mistake that compiles (a sign flipped in the sigmoid), reloaded into the running session
from opforge.testing import check_op  # noqa: E402


def swish_reference(x, beta):
    """What Swish should compute (kOutputScale is 2 since the header edit), in numpy."""
    return (2 * x / (1 + np.exp(-beta * x.astype(np.float64)))).astype(x.dtype)


(work / "swish.cpp").write_text(SWISH.replace("std::exp(-beta * x[i])", "std::exp(beta * x[i])"))
print(ops.reload())   # rebuilt; the session switches at its next run, without being recreated
wrong, = sess.run(None, {"x": batch})

# %% check_op exercises the op on every case its schema allows and points at what is wrong
report = check_op(ops.Swish, swish_reference, atol=1e-5, rtol=1e-5, raises=False)
print(report)
assert not report.ok and report.failures["values"], report

# %% Fix it and reload: the same session runs the fixed kernel at its next run
(work / "swish.cpp").write_text(SWISH)
print(ops.reload())   # the fixed source was built before: a cache hit
check_op(ops.Swish, swish_reference, atol=1e-5, rtol=1e-5)   # raises OpCheckError, a table, if not
out, = sess.run(None, {"x": batch})
np.testing.assert_allclose(out, 2 * h / (1 + np.exp(-1.5 * h)), rtol=1e-5, atol=1e-5)
assert not np.allclose(out, wrong)
print("fixed: the session's output changed back to the right values, max change",
      float(np.abs(out - wrong).max()))

# %% Or let opforge watch the files: saving a source or a header it includes reloads the library
import time  # noqa: E402

with ops.watch() as watcher:
    (work / "swish_params.h").write_text("constexpr float kOutputScale = 3.0f;\n")
    deadline = time.monotonic() + 60
    while not np.allclose(sess.run(None, {"x": batch})[0], 1.5 * out, rtol=1e-5, atol=1e-5):
        assert time.monotonic() < deadline and watcher.last_error is None, watcher.last_error
        time.sleep(0.01)
print(f"saved the header; the session ran the new kernel after {watcher.reloads} reload")

# %% Clean up: the sources' folder goes (the built libraries stay in opforge's cache)
import shutil  # noqa: E402

shutil.rmtree(work)
print("removed", work)
