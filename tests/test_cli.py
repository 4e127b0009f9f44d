"""The `opforge` command: version, build, run, info, bench and cache, as a user types them."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import opforge
from opforge.cli import main

OP = """
#include <opforge/op.h>
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = 2 * x[i];
}
OPFORGE_OP(Twice).domain("com.example").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(run);
"""


def model_with_custom_op(path):
    nodes = [helper.make_node("Twice", ["x"], ["t"], domain="com.example"), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture
def ops_folder(tmp_path):
    folder = tmp_path / "ops"
    folder.mkdir()
    (folder / "twice.cpp").write_text(OP)
    return folder


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"opforge {opforge.__version__}"


def test_every_argument_has_help():
    from opforge.cli import parser

    for action in parser()._subparsers._group_actions[0].choices.values():
        for argument in action._actions:
            assert argument.help, f"{action.prog} {argument.dest} has no help text"


def test_info_names_the_ops_without_a_kernel(tmp_path, capsys):
    path = model_with_custom_op(tmp_path / "m.onnx")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "com.example::Twice (1 node)" in out and "x: tensor(float) ['n', 3]" in out and "--ops" in out


def test_info_with_ops_lists_each_nodes_kernel(tmp_path, ops_folder, capsys):
    path = model_with_custom_op(tmp_path / "m.onnx")
    assert main(["info", str(path), "--ops", str(ops_folder)]) == 0
    out = capsys.readouterr().out
    assert "Twice" in out and "2 on CPUExecutionProvider" in out


def test_run_summarises_times_and_saves(tmp_path, ops_folder, capsys):
    path = model_with_custom_op(tmp_path / "m.onnx")
    x = np.array([[-1.0, 2.0, 3.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out_file = tmp_path / "out.npz"
    assert main(["run", str(path), "--ops", str(ops_folder), "--input", f"x={tmp_path / 'x.npy'}",
                 "--repeat", "3", "--save", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "output y: float32 [1, 3] min 0 max 6 mean 3.33333" in out
    assert "latency over 3 runs: median" in out
    np.testing.assert_array_equal(np.load(out_file)["y"], [[0.0, 4.0, 6.0]])


def test_bench_compares_with_onnxruntime(tmp_path, capsys):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "relu.onnx")
    assert main(["bench", str(tmp_path / "relu.onnx"), "--repeat", "5", "--ort"]) == 0
    out = capsys.readouterr().out
    assert "opforge      median" in out and "onnxruntime  median" in out and "ratio opforge/onnxruntime" in out


def test_build_refuses_a_folder_mixed_with_files(ops_folder, capsys):
    assert main(["build", str(ops_folder), str(ops_folder / "twice.cpp")]) == 1
    assert "give one folder, or source files, not both" in capsys.readouterr().err


def test_a_library_without_ops_is_an_error(tmp_path, cache_dir, capsys):
    (tmp_path / "empty.cpp").write_text("// nothing here yet\n")
    assert main(["build", str(tmp_path / "empty.cpp")]) == 1
    assert "defines no ops" in capsys.readouterr().err


def test_cache_ls_accounts_for_every_byte_and_clean_evicts_support_too(tmp_path, ops_folder, cache_dir, capsys):
    from opforge.cache import evict

    assert main(["build", str(ops_folder)]) == 0
    assert sum(evict.usage(cache_dir).values()) == evict.folder_bytes(cache_dir)
    assert main(["cache", "ls"]) == 0
    assert "support objects and precompiled headers" in capsys.readouterr().out
    assert main(["cache", "clean", "--max-size", "0"]) == 0
    assert not any((cache_dir / "support").iterdir()) and not any((cache_dir / "work").iterdir())
    assert main(["cache", "clean", "--max-size", "lots"]) == 1
