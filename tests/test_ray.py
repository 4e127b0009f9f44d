"""opforge.ray: batch inference on a local Ray cluster, custom ops built once on the driver.

Workers run with no compiler (CXX=false, a PATH with nothing on it) and an empty opforge cache:
they install the driver's built library and never build.
"""
import shutil
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ray = pytest.importorskip("ray", reason="the ray extra (pip install opforge[ray]) is not installed")

import opforge  # noqa: E402
import opforge.ray as opray  # noqa: E402

OP = """
#include <opforge/op.h>
#include "factor.h"
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = FACTOR * x[i];
}
OPFORGE_OP(Scale).domain("com.example").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(run);
"""


def scale_relu_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Scale", ["x"], ["t"], domain="com.example"), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local cluster of 2 CPUs whose workers have no compiler and their own empty cache."""
    worker_cache = tmp_path_factory.mktemp("worker") / "cache"
    bare_bin = tmp_path_factory.mktemp("bin")   # what Ray needs to start a worker, and no compiler
    for tool in ("bash", "python"):
        (bare_bin / tool).symlink_to(shutil.which(tool) if tool == "bash" else sys.executable)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"CXX": "false", "PATH": str(bare_bin), "OPFORGE_CACHE_DIR": str(worker_cache)}})
    yield worker_cache
    ray.shutdown()


@pytest.fixture(scope="module")
def ops_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ops")
    (folder / "scale.cpp").write_text(OP)
    (folder / "factor.h").write_text("#define FACTOR 3.0f\n")
    return folder


def test_workers_without_a_compiler_run_custom_ops_row_for_row(cluster, ops_folder):
    model = scale_relu_model()
    x = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    local = opforge.InferenceSession(model, custom_ops=[str(ops_folder)]).run(None, {"x": x})[0]
    dataset = ray.data.from_items([{"id": i, "x": row} for i, row in enumerate(x)])
    for run in range(2):                      # the second run reuses the installed library
        out = opray.predict(dataset, model, custom_ops=[str(ops_folder)], batch_size=8, concurrency=2)
        rows = sorted(out.take_all(), key=lambda r: r["id"])   # ids pass through the model
        got = np.stack([r["y"] for r in rows])
        np.testing.assert_array_equal(got, local)
        entries = [p for p in (cluster / "libs").iterdir() if p.is_dir() and not p.name.startswith(".")]
        assert len(entries) == 1, entries
        if run == 0:
            stamp = entries[0].stat().st_mtime_ns
    assert entries[0].stat().st_mtime_ns == stamp
    assert not any((cluster / "work").iterdir()) and not (cluster / "support").exists() \
        or not any((cluster / "support").iterdir())


def test_columns_are_mapped_and_worker_errors_name_the_batch(cluster):
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["sum"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    dataset = ray.data.from_items([{"a": float(i), "left": float(10 * i)} for i in range(12)])
    out = opray.predict(dataset, model, input_columns={"b": "left"}, output_columns={"sum": "total"},
                        batch_size=4).take_all()
    assert sorted(r["total"] for r in out) == [11.0 * i for i in range(12)]
    with pytest.raises(Exception, match=r"batch \d+ of this worker .*4 rows.*model input .b. has no column"):
        opray.predict(dataset, model, batch_size=4).take_all()


def test_predictor_works_without_ray_and_checks_shipped_bytes(ops_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("OPFORGE_CACHE_DIR", str(tmp_path / "cache"))
    shipped = opray._prepare_ops([str(ops_folder)])
    predictor = opray.Predictor(scale_relu_model().SerializeToString(), shipped)
    out = predictor({"x": np.array([[1, -1, 2, 0]], np.float32)})
    np.testing.assert_array_equal(out["y"], [[3, 0, 6, 0]])
    data = bytearray(shipped[0].artifact)
    data[len(data) // 2] ^= 0xFF
    damaged = shipped[0]._replace(artifact=bytes(data))
    monkeypatch.setenv("OPFORGE_CACHE_DIR", str(tmp_path / "other"))
    with pytest.raises(opforge.OpforgeError, match="arrived damaged"):
        opray.install(damaged)


def test_a_worker_of_another_platform_rebuilds_from_the_shipped_sources(ops_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("OPFORGE_CACHE_DIR", str(tmp_path / "cache"))
    shipped = opray._prepare_ops([str(ops_folder)])[0]._replace(platform="another-platform")
    lib = opray.install(shipped)
    np.testing.assert_array_equal(lib.Scale(np.ones(2, np.float32)), [3.0, 3.0])


class _RecordingDataset:
    """Takes map_batches' arguments instead of running them."""

    def map_batches(self, fn, **kwargs):
        self.fn, self.kwargs = fn, kwargs
        return self


def test_a_single_block_dataset_is_split_so_every_worker_gets_batches(cluster):
    x = np.arange(60, dtype=np.float32).reshape(30, 2)
    one_block = ray.data.from_numpy(x).materialize()
    assert one_block.num_blocks() == 1            # Ray would hand it all to one worker
    spread = opray._spread(one_block, 2).materialize()
    assert spread.num_blocks() == 4
    np.testing.assert_array_equal(np.stack([r["data"] for r in spread.take_all()]), x)   # order kept
    assert opray._spread(one_block, 1) is one_block
    assert opray._spread(one_block, (1, 3)).materialize().num_blocks() == 6
    lazy = ray.data.from_numpy(x).map_batches(lambda b: b)
    assert opray._spread(lazy, 2) is lazy       # its reads decide its blocks


def test_gpu_workers_ask_for_the_cuda_provider_first(monkeypatch):
    monkeypatch.setattr(ray, "put", lambda value: value)
    model = scale_relu_model()
    gpu = opray.predict(_RecordingDataset(), model, num_gpus=1)
    assert gpu.fn is opray.Predictor and gpu.kwargs["num_gpus"] == 1
    assert gpu.kwargs["fn_constructor_kwargs"]["providers"] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    chosen = opray.predict(_RecordingDataset(), model, num_gpus=1, providers=["CPUExecutionProvider"])
    assert chosen.kwargs["fn_constructor_kwargs"]["providers"] == ["CPUExecutionProvider"]
    assert opray.predict(_RecordingDataset(), model).kwargs["fn_constructor_kwargs"]["providers"] is None


def test_the_ray_example_runs_as_written_with_as_many_actors_as_cpus(tmp_path):
    """examples/ray_batch.py: a cluster of 2 CPUs and concurrency=2, in a fresh process (the
    example starts its own cluster). It hung when predict's own split of the dataset waited for
    a CPU the two actors held; Ray's deprecation warning for `concurrency` must not show."""
    import os
    import subprocess

    from tests.support.helpers import EXAMPLES, ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(EXAMPLES / "ray_batch.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "1000 rows through 2 workers" in done.stdout
    assert "deprecated" not in (done.stdout + done.stderr).lower(), done.stderr[-2000:]


def test_sessions_in_actors_use_the_cpus_the_actor_reserved(monkeypatch):
    monkeypatch.setattr(ray, "put", lambda value: value)
    recorded = opray.predict(_RecordingDataset(), scale_relu_model(), num_cpus=2)
    assert recorded.kwargs["fn_constructor_kwargs"]["threads"] == 2
    relu = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])]), opset_imports=[helper.make_opsetid("", 17)])
    predictor = opray.Predictor(relu.SerializeToString(), threads=2)
    assert predictor.session.get_session_options().intra_op_num_threads == 2
