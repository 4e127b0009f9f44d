"""Model loading: sources, malformed files, opset checks, and external data kept in its folder."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.support.onnx_builders import chain_model, model, tensor
from opforge.runtime import InferenceSession
from opforge.runtime.errors import ModelLoadError
from opforge.runtime.load.model import load_model


def weighted_model(location: str, offset: int = 0) -> onnx.ModelProto:
    """y = x + w, with w (4 floats) stored externally at ``location``."""
    weight = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", "16")):
        weight.external_data.append(onnx.StringStringEntryProto(key=key, value=value))
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [tensor("x", [4])],
                 [tensor("y", [4])], initializers=[weight])


def test_loads_path_bytes_and_proto(tmp_path):
    proto = chain_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    for source in (str(path), path, path.read_bytes(), proto):
        loaded = load_model(source)
        assert loaded.opsets == {"": 17}
        assert [n.op_type for n in loaded.proto.graph.node] == ["Relu", "Neg", "Abs"]


def test_ai_onnx_domain_reads_as_default():
    proto = chain_model()
    proto.opset_import[0].domain = "ai.onnx"
    assert load_model(proto).opsets == {"": 17}


def test_external_data_inside_the_folder_loads(tmp_path):
    weights = np.arange(4, dtype=np.float32)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w.bin").write_bytes(b"\0" * 8 + weights.tobytes())
    onnx.save(weighted_model("data/w.bin", offset=8), tmp_path / "m.onnx")
    session = InferenceSession(str(tmp_path / "m.onnx"))
    y, = session.run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, weights + 1)


@pytest.mark.parametrize("location", ["../secret.bin", "data/../../secret.bin", "/etc/passwd"])
def test_external_data_escaping_the_folder_is_rejected(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    onnx.save(weighted_model(location), folder / "m.onnx")
    with pytest.raises(ModelLoadError, match="tensor 'w'.*outside|tensor 'w'.*not a plain relative"):
        load_model(folder / "m.onnx")


def test_external_data_symlink_escaping_the_folder_is_rejected(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    (folder / "w.bin").symlink_to(tmp_path / "secret.bin")
    onnx.save(weighted_model("w.bin"), folder / "m.onnx")
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load_model(folder / "m.onnx")


def test_truncated_external_data_is_reported(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 10)
    onnx.save(weighted_model("w.bin"), tmp_path / "m.onnx")
    with pytest.raises(ModelLoadError, match="holds only 10 bytes"):
        load_model(tmp_path / "m.onnx")


def test_external_data_from_bytes_needs_a_folder():
    with pytest.raises(ModelLoadError, match="pass base_dir"):
        load_model(weighted_model("w.bin").SerializeToString())


def test_truncated_model_file_names_the_file(tmp_path):
    data = chain_model().SerializeToString()
    for cut in (len(data) // 2, len(data) - 3, 7):
        path = tmp_path / f"cut{cut}.onnx"
        path.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError, match=f"cut{cut}.onnx"):
            InferenceSession(str(path))


@pytest.mark.parametrize("content", [b"", b"\xff\xfe garbage \x00\x01", b"not a model at all"])
def test_garbage_is_a_load_error(tmp_path, content):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match="bad.onnx"):
        load_model(path)


def test_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="cannot read model file"):
        load_model(tmp_path / "absent.onnx")


def test_opset_and_ir_version_are_checked():
    too_new = chain_model()
    too_new.opset_import[0].version = 999
    with pytest.raises(ModelLoadError, match="opset 999"):
        load_model(too_new)
    no_ir = chain_model()
    no_ir.ir_version = 0
    with pytest.raises(ModelLoadError, match="ir_version"):
        load_model(no_ir)
    no_opset = chain_model()
    del no_opset.opset_import[:]
    with pytest.raises(ModelLoadError, match="opset_import is empty"):
        load_model(no_opset)


def test_wrong_source_type_is_a_load_error():
    with pytest.raises(ModelLoadError, match="not int"):
        load_model(42)


def test_every_prefix_of_a_model_is_a_load_error():
    data = chain_model().SerializeToString()
    for cut in range(len(data)):
        with pytest.raises(ModelLoadError):
            InferenceSession(data[:cut])


def external_tensor(name: str, location: str, values) -> onnx.TensorProto:
    """A TensorProto whose data lives in the file ``location`` (written by the test)."""
    tensor_proto = numpy_helper.from_array(np.asarray(values, np.float32), name)
    tensor_proto.ClearField("raw_data")
    tensor_proto.data_location = onnx.TensorProto.EXTERNAL
    tensor_proto.external_data.append(onnx.StringStringEntryProto(key="location", value=location))
    return tensor_proto


def function_with_external_constant(location: str) -> onnx.ModelProto:
    """y = AddW(x): a local function whose If branch holds a Constant stored at ``location``."""
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=external_tensor("w", location, [0.0] * 4)),
         helper.make_node("Add", ["x", "w"], ["z"])], "then", [], [tensor("z", [4])])
    body = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True), "c")),
            helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    function = helper.make_function("local", "AddW", ["x"], ["y"], body,
                                    [helper.make_opsetid("", 17)])
    return model([helper.make_node("AddW", ["x"], ["y"], domain="local")], [tensor("x", [4])],
                 [tensor("y", [4])], functions=[function])


def test_external_data_in_a_function_subgraph_is_read_from_the_model_folder(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "w.bin").write_bytes(np.full(4, 100, np.float32).tobytes())  # the cwd's decoy
    path = tmp_path / "models" / "m.onnx"
    onnx.save(function_with_external_constant("w.bin"), path)
    monkeypatch.chdir(tmp_path)
    y, = InferenceSession(str(path)).run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, np.arange(4, dtype=np.float32) + 1)


def test_external_data_in_a_function_may_not_escape_the_folder(tmp_path):
    (tmp_path / "secret.bin").write_bytes(np.zeros(4, np.float32).tobytes())
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "m.onnx"
    onnx.save(function_with_external_constant("../secret.bin"), path)
    with pytest.raises(ModelLoadError, match="tensor 'w'.*not a plain relative path"):
        InferenceSession(str(path))


def test_a_model_without_the_default_domain_reads_it_at_the_newest_opset():
    """onnxruntime runs such a model with its newest opset: Softmax then normalizes over the last
    axis (opset 13 on), not over the flattened trailing axes (opsets 1-12)."""
    proto = model([helper.make_node("Softmax", ["x"], ["y"])], [tensor("x", [2, 3, 4])],
                  [tensor("y", [2, 3, 4])])
    del proto.opset_import[:]
    proto.opset_import.append(helper.make_opsetid("com.example", 1))
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    y, = InferenceSession(proto).run(None, {"x": x})
    want = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    assert load_model(proto).opsets[""] == onnx.defs.onnx_opset_version()
