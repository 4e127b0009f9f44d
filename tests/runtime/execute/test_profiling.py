"""SessionOptions.enable_profiling: a chrome trace of every node run, the compiled plan's included."""
import json

import numpy as np

import opforge
from tests.support.onnx_builders import chain_model


def test_profile_times_every_node_of_every_run_through_the_plan(tmp_path):
    options = opforge.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "trace")
    sess = opforge.InferenceSession(chain_model().SerializeToString(), options)
    feed = {"x": np.ones((2, 3), np.float32)}
    for _ in range(3):
        sess.run(None, feed)
    assert sess.memory_plan(feed) is not None   # profiling keeps the compiled plan
    events = json.loads(open(sess.end_profiling()).read())
    assert len(events) == 3 * 3
    assert sorted(e["args"]["op_type"] for e in events) == sorted(["Relu", "Neg", "Abs"] * 3)
    assert all(e["dur"] >= 0 and e["ph"] == "X" for e in events)
    starts = [e["ts"] for e in events]
    assert starts == sorted(starts) and starts[0] >= 0


def test_end_profiling_starts_a_new_trace(tmp_path):
    options = opforge.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "trace")
    sess = opforge.InferenceSession(chain_model().SerializeToString(), options)
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    sess.end_profiling()
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert len(json.loads(open(sess.end_profiling()).read())) == 3
