"""onnxruntime's Python API, the same script run against onnxruntime and opforge.

`script(rt)` uses the API the way onnxruntime's own Python tests and users do; it must run
unchanged with `rt` being either module and observe the same things.
"""
import json
import threading

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import opforge


def add_model() -> bytes:
    """z = x + y over ['n', 2] floats, with metadata."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])], "adder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="parity")
    model.ir_version, model.model_version = 8, 3
    helper.set_model_props(model, {"author": "tests"})
    return model.SerializeToString()


def collections_model() -> bytes:
    """Strings through Identity, a sequence's length, and a map's values through ZipMap's inverse:
    the non-tensor values onnxruntime's tests feed."""
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["s2"]), helper.make_node("SequenceLength", ["seq"], ["count"])],
        "collections", [helper.make_tensor_value_info("s", TensorProto.STRING, [2]), seq],
        [helper.make_tensor_value_info("s2", TensorProto.STRING, [2]),
         helper.make_tensor_value_info("count", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def script(rt, model: bytes, folder) -> dict:
    """Observations of one runtime; every call here is onnxruntime's API. `folder` takes the
    profile files."""
    seen = {}
    seen["device"] = rt.get_device()
    seen["cpu available"] = "CPUExecutionProvider" in rt.get_available_providers()
    seen["cpu known"] = "CPUExecutionProvider" in rt.get_all_providers()
    seen["version string"] = type(rt.get_version_string()).__name__
    rt.set_default_logger_severity(3)   # the CUDA request below warns where no GPU is usable
    seen["cuda request"] = rt.InferenceSession(
        model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]).get_providers()
    rt.set_default_logger_severity(2)
    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.custom_key", "1")
    seen["config"] = so.get_session_config_entry("session.custom_key")
    try:
        so.get_session_config_entry("session.never_set")
    except RuntimeError:
        seen["missing config"] = "RuntimeError"
    sess = rt.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    seen["inputs"] = [(i.name, i.type, i.shape) for i in sess.get_inputs()]
    seen["outputs"] = [(o.name, o.type, o.shape) for o in sess.get_outputs()]
    meta = sess.get_modelmeta()
    seen["meta"] = (meta.producer_name, meta.graph_name, meta.version, meta.custom_metadata_map)
    seen["providers"] = sess.get_providers()
    seen["provider options"] = sess.get_provider_options()
    seen["session options"] = type(sess.get_session_options()).__name__
    seen["overridable"] = sess.get_overridable_initializers()
    seen["profiling start"] = sess.get_profiling_start_time_ns()
    x, y = np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((3, 2), np.float32)
    feeds = {"x": x, "y": y}
    seen["run"] = sess.run(None, feeds)
    seen["run z"] = sess.run(["z"], feeds)
    ro = rt.RunOptions()
    ro.add_run_config_entry("run.key", "v")
    seen["run config"] = ro.get_run_config_entry("run.key")
    seen["run with options"] = sess.run(["z"], feeds, ro)
    stop = rt.RunOptions()
    stop.terminate = True
    try:
        sess.run(["z"], feeds, stop)
        seen["terminate"] = "ran"
    except Exception as e:    # onnxruntime raises its Fail, opforge RunCancelledError
        seen["terminate"] = "terminate" in str(e)
    profiled = rt.SessionOptions()
    profiled.enable_profiling = True
    profiled.profile_file_prefix = str(folder / rt.__name__)
    psess = rt.InferenceSession(model, profiled, providers=["CPUExecutionProvider"])
    psess.run(None, feeds)
    with open(psess.end_profiling()) as f:
        events = json.load(f)
    seen["profile"] = (type(events).__name__,
                       any(e["cat"] == "Node" and e["name"].endswith("_kernel_time") and e["args"].get("op_name") == "Add"
                           and e["args"].get("provider") == "CPUExecutionProvider" and e["dur"] >= 0
                           for e in events))
    # OrtValue
    v = rt.OrtValue.ortvalue_from_numpy(x)
    seen["ortvalue"] = (v.device_name(), v.shape(), v.data_type(), v.element_type(), v.is_tensor(),
                        v.has_value(), v.numpy().tolist())
    empty = rt.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    seen["empty ortvalue"] = (empty.shape(), empty.data_type())
    outs = sess.run_with_ort_values(["z"], {"x": v, "y": rt.OrtValue.ortvalue_from_numpy(y)})
    seen["run_with_ort_values"] = (type(outs[0]).__name__, outs[0].numpy().tolist())
    # I/O binding: allocated outputs, a preallocated OrtValue, raw pointers
    b = sess.io_binding()
    b.bind_cpu_input("x", x)
    b.bind_ortvalue_input("y", rt.OrtValue.ortvalue_from_numpy(y))
    b.bind_output("z")
    sess.run_with_iobinding(b)
    seen["binding outputs"] = [type(o).__name__ for o in b.get_outputs()]
    seen["binding to cpu"] = [o.tolist() for o in b.copy_outputs_to_cpu()]
    out = rt.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    b.clear_binding_outputs()
    b.bind_ortvalue_output("z", out)
    sess.run_with_iobinding(b)
    seen["preallocated output"] = out.numpy().tolist()
    raw_in, raw_out = np.full((3, 2), 5, np.float32), np.zeros((3, 2), np.float32)
    b2 = sess.io_binding()
    b2.bind_input("x", "cpu", 0, np.float32, [3, 2], raw_in.ctypes.data)
    b2.bind_input("y", "cpu", 0, np.float32, [3, 2], raw_in.ctypes.data)
    b2.bind_output("z", "cpu", 0, np.float32, [3, 2], raw_out.ctypes.data)
    sess.run_with_iobinding(b2)
    seen["pointer output"] = raw_out.tolist()
    # threads sharing one session
    results = [None] * 4

    def work(i):
        results[i] = sess.run(["z"], {"x": x * i, "y": y})[0].tolist()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen["threads"] = results
    sess.set_providers(["CPUExecutionProvider"])
    seen["after set_providers"] = (sess.get_providers(), sess.run(["z"], feeds)[0].tolist())
    other = rt.InferenceSession(collections_model(), providers=["CPUExecutionProvider"])
    strings, count = other.run(None, {"s": np.array(["a", "bc"], dtype=object),
                                      "seq": [np.zeros(2, np.float32), np.ones(3, np.float32)]})
    seen["strings"] = (strings.dtype, strings.tolist())
    seen["sequence"] = int(count)
    seen["collection inputs"] = [(i.name, i.type, i.shape) for i in other.get_inputs()]
    return seen


def test_the_same_script_runs_on_onnxruntime_and_opforge(tmp_path):
    model = add_model()
    theirs, ours = script(onnxruntime, model, tmp_path), script(opforge, model, tmp_path)
    assert theirs.keys() == ours.keys()
    for key in theirs:
        want, got = theirs[key], ours[key]
        if key in ("run", "run z", "run with options"):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape and g.tolist() == w.tolist(), key
        elif key in ("providers", "cuda request"):   # opforge adds its reference fallback last
            assert got[: len(want)] == want, key
        elif key == "device":   # onnxruntime's CPU wheel says CPU; opforge names what it can use here
            assert got == ("GPU" if "CUDAExecutionProvider" in opforge.get_available_providers() else "CPU")
        elif key == "provider options":
            assert got["CPUExecutionProvider"] == want["CPUExecutionProvider"]
        elif key == "after set_providers":
            assert got[0][: len(want[0])] == want[0] and got[1] == want[1]
        elif key == "overridable":
            assert [(a.name, a.type, a.shape) for a in got] == [(a.name, a.type, a.shape) for a in want]
        else:
            assert got == want, key


def test_profiling_start_time_is_set_when_profiling(tmp_path):
    so = opforge.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "profile")
    sess = opforge.InferenceSession(add_model(), so)
    assert sess.get_profiling_start_time_ns() > 0


def test_binding_an_output_buffer_of_the_wrong_shape_names_it():
    sess = opforge.InferenceSession(add_model())
    b = sess.io_binding()
    for name in ("x", "y"):
        b.bind_cpu_input(name, np.ones((3, 2), np.float32))
    b.bind_ortvalue_output("z", opforge.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32))
    with pytest.raises(opforge.OpforgeError, match="output 'z' is tensor\\(float\\) \\[3, 2\\]; the buffer bound"):
        sess.run_with_iobinding(b)


def test_logger_severity_is_onnxruntimes_scale():
    import logging

    log = logging.getLogger("opforge.runtime")
    before = log.level
    try:
        opforge.set_default_logger_severity(3)
        assert log.getEffectiveLevel() == logging.ERROR
        opforge.set_default_logger_severity(0)
        assert log.getEffectiveLevel() == logging.DEBUG
        with pytest.raises(ValueError, match="0 \\(verbose\\) to 4 \\(fatal\\)"):
            opforge.set_default_logger_severity(7)
    finally:
        log.setLevel(before)
