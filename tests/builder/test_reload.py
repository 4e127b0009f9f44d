"""Live reload: ops.reload() and ops.watch() switch a running session to an edited kernel."""
import gc
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import opforge
from opforge import _core
from opforge.builder.reload import ReloadError

SOURCE = r"""
#include <chrono>
#include <thread>
#include <opforge/op.h>

static void scale(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t n = ctx.input(0).numel();
  const int64_t pause_ms = ctx.attr<int64_t>("pause_ms");
  for (int64_t i = 0; i < n; ++i) {
    if (i == n / 2 && pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    y[i] = FACTOR * x[i];
  }
}

OPFORGE_OP(Scale).domain("com.test").input("X", {DTYPES}).output("Y").attr("pause_ms", int64_t(0))
    .infer(opforge::same_as_input0).compute(scale);
"""


def write(path, factor: float, dtypes: str = "opforge::f32", extra: str = "") -> None:
    path.write_text(SOURCE.replace("FACTOR", f"{factor:.1f}f").replace("DTYPES", dtypes) + extra)


def model(pause_ms: int = 0) -> bytes:
    node = helper.make_node("Scale", ["x"], ["y"], domain="com.test", pause_ms=pause_ms)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.test", 1)]).SerializeToString()


@pytest.fixture
def source(tmp_path, shared_cache):
    path = tmp_path / "scale.cpp"
    write(path, 2.0)
    return path


def loaded_paths() -> set:
    gc.collect()
    return {path for path, _ in _core.loaded_libraries()}


def test_reload_switches_ops_and_sessions_in_place(source):
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    scale = ops.Scale   # an op object handed out before the reload follows it
    sess = opforge.InferenceSession(model(), custom_ops=[ops])
    x = np.arange(8, dtype=np.float32)
    assert sess.run(None, {"x": x})[0].tolist() == (2 * x).tolist()
    sess.run(None, {"x": x})   # a compiled plan now holds the old kernel
    old = ops.__file__
    write(source, 3.0)
    report = ops.reload()
    assert report.changed and report.sessions == 1 and report.previous == old and "unloaded" in str(report)
    assert sess.run(None, {"x": x})[0].tolist() == (3 * x).tolist()
    assert scale(x).tolist() == ops.Scale(x).tolist() == (3 * x).tolist()
    assert ops.generation == 1 and ops.__file__ != old
    assert old not in loaded_paths() and ops.__file__ in loaded_paths()
    assert not ops.reload().changed   # nothing edited


def test_failed_build_keeps_the_old_kernels(source):
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    sess = opforge.InferenceSession(model(), custom_ops=[ops])
    x = np.ones(4, np.float32)
    source.write_text(source.read_text().replace("const float* x", "const flaot* x"))
    with pytest.raises(opforge.BuildError, match=r"scale\.cpp:\d+"):
        ops.reload()
    assert sess.run(None, {"x": x})[0].tolist() == [2.0] * 4 and ops.generation == 0


def test_schema_change_that_breaks_the_graph_is_refused_naming_the_node(source):
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    sess = opforge.InferenceSession(model(), custom_ops=[ops])
    before = ops.__file__
    write(source, 5.0, dtypes="opforge::f64")   # float32 dropped: the session's node feeds float32
    with pytest.raises(ReloadError, match=r"refused.*Scale.*float32.*old kernels keep running"):
        ops.reload()
    assert ops.__file__ == before and sess.run(None, {"x": np.ones(2, np.float32)})[0].tolist() == [2.0, 2.0]
    write(source, 5.0, dtypes="opforge::f32, opforge::f64")   # widening the schema is fine
    assert ops.reload().changed and sess.run(None, {"x": np.ones(2, np.float32)})[0].tolist() == [5.0, 5.0]


def test_runs_in_flight_finish_on_their_kernels(source):
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    sess = opforge.InferenceSession(model(pause_ms=1500), custom_ops=[ops])
    write(source, 7.0)
    ops.reload()
    write(source, 2.0)
    ops.reload()   # both versions built: the reload below is a cache hit, done within the run
    x = np.ones(16, np.float32)
    old, results = ops.__file__, {}
    flight = threading.Thread(target=lambda: results.update(y=sess.run(None, {"x": x})[0]))
    flight.start()
    time.sleep(0.3)
    write(source, 7.0)
    ops.reload()   # while the run is inside the old kernel
    assert flight.is_alive()
    assert old in loaded_paths()
    flight.join()
    assert results["y"].tolist() == [2.0] * 16   # every element from the kernel it started with
    assert sess.run(None, {"x": x})[0].tolist() == [7.0] * 16
    assert old not in loaded_paths()   # unloaded once the last run let go


def test_watcher_reloads_on_save_and_reports_a_broken_edit(source, capsys):
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    sess = opforge.InferenceSession(model(), custom_ops=[ops])
    x = np.ones(3, np.float32)
    with ops.watch(interval=0.02) as watcher:
        write(source, 4.0)
        assert _eventually(lambda: sess.run(None, {"x": x})[0][0] == 4.0)
        write(source, 4.0, extra="this is not C++\n")
        assert _eventually(lambda: watcher.last_error is not None)
        assert isinstance(watcher.last_error, opforge.BuildError)
        assert sess.run(None, {"x": x})[0][0] == 4.0 and watcher.reloads == 1
    assert "reload of 'reload_ops' failed, the old kernels keep running" in capsys.readouterr().err


def test_edit_reload_run_cycles_give_each_run_one_version(source):
    """A small copy of benchmarks/bench_reload.py: runs on 4 threads while the source flips
    between versions; every result comes whole from one version."""
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    sess = opforge.InferenceSession(model(), custom_ops=[ops])
    x = np.random.default_rng(0).standard_normal(50_000).astype(np.float32) + 3
    factors, stop, bad, runs = (2.0, 3.0, 4.0), threading.Event(), [], [0]

    def run_forever():
        while not stop.is_set():
            ratio = sess.run(None, {"x": x})[0] / x
            if not (np.allclose(ratio, ratio[0], rtol=1e-6) and round(float(ratio[0]), 3) in factors):
                bad.append(ratio)
            runs[0] += 1

    threads = [threading.Thread(target=run_forever) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for cycle in range(12):
            write(source, factors[cycle % 3])
            ops.reload()
            assert sess.run(None, {"x": x})[0][0] == pytest.approx(factors[cycle % 3] * x[0])
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad and runs[0] > 12
    assert len([p for p in loaded_paths() if "reload_ops" in p]) == 1


def test_a_library_not_built_from_sources_cannot_reload(tmp_path, source):
    ops = opforge.CustomOpBuilder("reload_ops", [source]).load()
    copy = tmp_path / "copy.so"
    copy.write_bytes(open(ops.__file__, "rb").read())
    from opforge.runtime.custom_ops import collect

    with pytest.raises(ReloadError, match="nothing to rebuild"):
        collect([copy]).libraries[0].reload()


def _eventually(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False
