"""If, Loop, Scan and SequenceMap with subgraphs reading outer-scope values, compared with onnxruntime
where it has the op."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support.onnx_builders import assert_same, model, onnxruntime_outputs, tensor
from opforge.runtime import InferenceSession
from opforge.runtime.errors import KernelError

BOOL, INT64, FLOAT = TensorProto.BOOL, TensorProto.INT64, TensorProto.FLOAT


def if_model():
    """y = If(c): x * scale else x - scale; ``scale`` is made in the main graph after the If."""
    then_graph = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["t"])], "then", [],
                                   [tensor("t", [3])])
    else_graph = helper.make_graph([helper.make_node("Sub", ["x", "scale"], ["e"])], "else", [],
                                   [tensor("e", [3])])
    return model([helper.make_node("If", ["c"], ["y"], then_branch=then_graph,
                                   else_branch=else_graph),
                  helper.make_node("Abs", ["x"], ["scale"])],
                 [tensor("c", [], BOOL), tensor("x", [3])], [tensor("y", [3])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_reads_outer_values(cond):
    feed = {"c": np.array(cond), "x": np.array([-1.0, 2.0, -3.0], np.float32)}
    proto = if_model()
    assert_same(InferenceSession(proto).run(None, feed), onnxruntime_outputs(proto, feed))


def loop_model():
    """Loop M times: acc += x * bias (bias from the main graph), scan out acc each step.

    The body also holds an If that reads ``limit`` from the main graph, two scopes up.
    """
    inner_then = helper.make_graph([helper.make_node("Identity", ["limit"], ["o"])], "t", [],
                                   [tensor("o", [], BOOL)])
    inner_else = helper.make_graph([helper.make_node("Not", ["limit"], ["p"])], "e", [],
                                   [tensor("p", [], BOOL)])
    body = helper.make_graph(
        [helper.make_node("Mul", ["x", "bias"], ["step"]),
         helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan_out"]),
         helper.make_node("If", ["cond_in"], ["cond_out"], then_branch=inner_then,
                          else_branch=inner_else)],
        "body", [tensor("i", [], INT64), tensor("cond_in", [], BOOL), tensor("acc_in", [2])],
        [tensor("cond_out", [], BOOL), tensor("acc_out", [2]), tensor("scan_out", [2])])
    nodes = [helper.make_node("Loop", ["M", "", "acc0"], ["acc", "trace"], body=body),
             helper.make_node("Neg", ["x"], ["bias"])]
    return model(nodes, [tensor("M", [], INT64), tensor("x", [2]), tensor("acc0", [2]),
                         tensor("limit", [], BOOL)],
                 [tensor("acc", [2]), tensor("trace", [None, 2])])


def test_loop_reads_outer_values_at_two_depths():
    feed = {"M": np.array(4, np.int64), "x": np.array([1.0, -2.0], np.float32),
            "acc0": np.array([0.5, 0.5], np.float32), "limit": np.array(True)}
    proto = loop_model()
    actual = InferenceSession(proto).run(None, feed)
    assert actual[1].shape == (4, 2)
    assert_same(actual, onnxruntime_outputs(proto, feed))


def test_loop_with_zero_trips_returns_initial_values():
    feed = {"M": np.array(0, np.int64), "x": np.array([1.0, -2.0], np.float32),
            "acc0": np.array([0.5, 0.5], np.float32), "limit": np.array(True)}
    acc, trace = InferenceSession(loop_model()).run(None, feed)
    np.testing.assert_array_equal(acc, feed["acc0"])
    assert trace.shape == (0, 2) and trace.dtype == np.float32


def scan_model(opset_attrs: dict):
    """Scan over rows: state += row * w (w from the main graph); scan out state and row."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["row", "w"], ["weighted"]),
         helper.make_node("Add", ["state_in", "weighted"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["out_state"]),
         helper.make_node("Neg", ["row"], ["out_row"])],
        "body", [tensor("state_in", [3]), tensor("row", [3])],
        [tensor("state_out", [3]), tensor("out_state", [3]), tensor("out_row", [3])])
    nodes = [helper.make_node("Scan", ["init", "xs"], ["final", "states", "rows"], body=body,
                              num_scan_inputs=1, **opset_attrs),
             helper.make_node("Sqrt", ["weights"], ["w"])]
    return model(nodes, [tensor("init", [3]), tensor("xs", [None, None]), tensor("weights", [3])],
                 [tensor("final", [3]), tensor("states", [None, None]), tensor("rows", [None, None])])


@pytest.mark.parametrize("attrs", [
    {},
    {"scan_input_directions": [1], "scan_output_directions": [0, 1]},
    {"scan_input_axes": [1], "scan_output_axes": [1, -1]},
    {"scan_input_axes": [-1], "scan_input_directions": [1], "scan_output_axes": [0, 1]},
])
def test_scan_reads_outer_values_with_axes_and_directions(attrs):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 3) if not attrs.get("scan_input_axes") else (3, 4))
    feed = {"init": np.zeros(3, np.float32), "xs": xs.astype(np.float32),
            "weights": np.array([1.0, 4.0, 9.0], np.float32)}
    proto = scan_model(attrs)
    assert_same(InferenceSession(proto).run(None, feed), onnxruntime_outputs(proto, feed))


def test_control_flow_runs_on_the_executor_not_the_reference():
    providers = {op: provider for _, op, provider in InferenceSession(loop_model()).node_providers()}
    assert providers["Loop"] == "CPUExecutionProvider"


def test_sequence_map_body_reads_outer_values():
    body = helper.make_graph([helper.make_node("Add", ["item", "offset"], ["out"])], "body",
                             [tensor("item", [None])], [tensor("out", [None])])
    seq_in = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, None)
    seq_out = helper.make_tensor_sequence_value_info("ys", TensorProto.FLOAT, None)
    proto = model([helper.make_node("Neg", ["bias"], ["offset"]),
                   helper.make_node("SequenceMap", ["xs"], ["ys"], body=body)],
                  [seq_in, tensor("bias", [1])], [seq_out])
    xs = [np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]
    ys, = InferenceSession(proto).run(None, {"xs": xs, "bias": np.array([0.5], np.float32)})
    assert [y.tolist() for y in ys] == [[0.5, 1.5], [2.5]]


def counting_loop_model():
    """A Loop of a fed trip count whose body adds one to a carried value."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [tensor("i", [], TensorProto.INT64), tensor("c_in", [], TensorProto.BOOL), tensor("v_in", [])],
        [tensor("c_out", [], TensorProto.BOOL), tensor("v_out", [])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    node = helper.make_node("Loop", ["n", "", "v"], ["out"], name="long", body=body)
    return model([node], [tensor("n", [], TensorProto.INT64), tensor("v", [])], [tensor("out", [])])


@pytest.mark.parametrize("planned", [False, True])
def test_a_loop_stops_between_iterations_when_the_run_is_cancelled(planned):
    import threading

    from opforge.runtime import RunCancelledError, RunOptions

    sess = InferenceSession(counting_loop_model())
    feed = {"n": np.array(3, np.int64), "v": np.array(0.0, np.float32)}
    assert float(sess.run(None, feed)[0]) == 3.0
    if planned:
        assert float(sess.run(None, feed)[0]) == 3.0   # the compiled plan runs the loop next
    options = RunOptions()
    threading.Timer(0.3, setattr, (options, "terminate", True)).start()
    with pytest.raises(RunCancelledError, match="run cancelled \\(RunOptions.terminate\\)"):
        sess.run(None, {**feed, "n": np.array(2**62, np.int64)}, options)


def weighted_if_model():
    """If(c) picks one of two 3-layer MLPs whose weights live in the main graph; ``w_fed`` is
    an initializer that is also an input, so a feed may replace it."""
    rng = np.random.default_rng(11)
    inits = [helper.make_tensor(f"{b}{i}", FLOAT, [4, 4], rng.standard_normal(16).astype(np.float32))
             for b in "tw" for i in range(3)]
    inits.append(helper.make_tensor("w_fed", FLOAT, [4], np.ones(4, np.float32)))

    def branch(prefix):
        nodes, prev = [], "x"
        for i in range(3):
            nodes += [helper.make_node("MatMul", [prev, f"{prefix}{i}"], [f"{prefix}m{i}"]),
                      helper.make_node("Tanh", [f"{prefix}m{i}"], [f"{prefix}h{i}"])]
            prev = f"{prefix}h{i}"
        nodes.append(helper.make_node("Mul", [prev, "w_fed"], [f"{prefix}out"]))
        return helper.make_graph(nodes, prefix, [], [tensor(f"{prefix}out", [2, 4])])

    node = helper.make_node("If", ["c"], ["y"], name="top", then_branch=branch("t"), else_branch=branch("w"))
    return model([node], [tensor("c", [], BOOL), tensor("x", [2, 4]), tensor("w_fed", [4])], [tensor("y", [2, 4])],
                 inits)


def test_branches_run_as_compiled_plans_with_the_outer_weights_as_their_constants():
    from opforge.runtime.plan.compiled import PlannedExecutor

    proto = weighted_if_model()
    sess = InferenceSession(proto)
    (step,) = [s for s in sess._executor.steps if s.node.op_type == "If"]
    assert step.node.implicit_inputs == ["x", "w_fed"]   # the weights became the branches' own constants
    then = step.kernel.then_branch
    assert isinstance(then, PlannedExecutor)
    x = np.random.default_rng(12).standard_normal((2, 4)).astype(np.float32)
    for cond in (True, False):
        feed = {"c": np.array(cond), "x": x}
        for _ in range(3):   # Python executor, then recorded, then the branch's compiled plan
            assert_same(sess.run(None, feed), onnxruntime_outputs(proto, feed))
    assert then.plan_for({"x": x, "w_fed": np.ones(4, np.float32)}) is not None
    assert "t0" in then.graph.initializers and "t0" not in sess._executor.graph.initializers
    fed = {"c": np.array(True), "x": x, "w_fed": np.full(4, 2.0, np.float32)}   # the overridable one
    assert_same(sess.run(None, fed), onnxruntime_outputs(proto, fed))


def growing_loop_model():
    """acc = Concat(acc, x) each iteration: a new body signature every time."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Concat", ["acc_in", "x"], ["acc_out"], axis=0)],
        "body", [tensor("i", [], INT64), tensor("c_in", [], BOOL), tensor("acc_in", ["n"])],
        [tensor("c_out", [], BOOL), tensor("acc_out", ["m"])])
    node = helper.make_node("Loop", ["trips", "", "acc"], ["out"], body=body)
    return model([node], [tensor("trips", [], INT64), tensor("acc", ["k"]), tensor("x", [2])], [tensor("out", ["m"])])


@pytest.mark.parametrize("trips, planned", [(3, True), (40, False)])
def test_a_loop_body_is_planned_unless_its_shapes_outgrow_the_plan_cache(trips, planned):
    """3 iterations: their 3 signatures come back on the next run and get plans. 40: more
    signatures than the cache holds (32), so the body stops recording instead of compiling a
    plan per iteration on every run."""
    proto = growing_loop_model()
    sess = InferenceSession(proto)
    feed = {"trips": np.array(trips, np.int64), "acc": np.zeros(1, np.float32), "x": np.array([1.0, 2.0], np.float32)}
    for _ in range(3):
        assert_same(sess.run(None, feed), onnxruntime_outputs(proto, feed))
    (step,) = sess._executor.steps
    first = {"i": np.array(0, np.int64), "c_in": np.array(True), "acc_in": np.zeros(1, np.float32), "x": feed["x"]}
    assert (step.kernel.body.plan_for(first) is not None) == planned
    assert step.kernel.body.enabled == planned


def test_a_cancelled_compiled_plan_raises_run_cancelled():
    from opforge.runtime import RunCancelledError, RunOptions

    proto = weighted_if_model()
    sess = InferenceSession(proto)
    feed = {"c": np.array(True), "x": np.ones((2, 4), np.float32)}
    for _ in range(3):
        sess.run(None, feed)
    options = RunOptions()
    options.terminate = True
    with pytest.raises(RunCancelledError, match="run cancelled"):
        sess.run(None, feed, options)


def test_scan_over_a_vector_runs_natively():
    """Each step of a 1-D scan input is a scalar: it reaches the body's kernels as a 0-d array
    (a numpy scalar would send the node to the reference, refused with the fallback off)."""
    from opforge.runtime import SessionOptions

    body = helper.make_graph([helper.make_node("Add", ["sum_in", "x"], ["sum_out"]),
                              helper.make_node("Identity", ["sum_out"], ["partial"])], "body",
                             [tensor("sum_in", []), tensor("x", [])], [tensor("sum_out", []), tensor("partial", [])])
    proto = model([helper.make_node("Scan", ["init", "xs"], ["total", "partials"], body=body, num_scan_inputs=1)],
                  [tensor("init", []), tensor("xs", [5])], [tensor("total", []), tensor("partials", [5])])
    feed = {"init": np.array(1.0, np.float32), "xs": np.arange(5, dtype=np.float32)}
    options = SessionOptions()
    options.disable_reference_fallback = True
    assert_same(InferenceSession(proto, options).run(None, feed), onnxruntime_outputs(proto, feed))


def recurrent_loop_model(trips: int = 20):
    """h = tanh(h @ W) for a fed trip count, stopping early once sum(h) > `stop` (an outer value);
    scan outputs: sum(h) and the iteration number at every step."""
    rng = np.random.default_rng(5)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["m"]), helper.make_node("Tanh", ["m"], ["h_out"]),
         helper.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "stop"], ["c_out"]), helper.make_node("Identity", ["i"], ["i_out"])],
        "body", [tensor("i", [], INT64), tensor("c_in", [], BOOL), tensor("h_in", [1, 16])],
        [tensor("c_out", [], BOOL), tensor("h_out", [1, 16]), tensor("s", []), tensor("i_out", [], INT64)])
    node = helper.make_node("Loop", ["n", "", "h0"], ["h", "sums", "steps"], name="rnn", body=body)
    weight = helper.make_tensor("W", FLOAT, [16, 16], (rng.standard_normal(256) * 0.2).astype(np.float32))
    return model([node], [tensor("n", [], INT64), tensor("h0", [1, 16]), tensor("stop", [])],
                 [tensor("h", [1, 16]), tensor("sums", [None]), tensor("steps", [None], INT64)], [weight])


def python_iterations(monkeypatch) -> list:
    """The iteration numbers that go through the Python loop's run_body (not the C++ loop)."""
    from opforge.runtime.execute import control_flow

    seen = []
    original = control_flow.run_body
    monkeypatch.setattr(control_flow, "run_body",
                        lambda body, env, node, i, key=None: seen.append(i) or original(body, env, node, i, key))
    return seen


def test_loop_iterations_run_in_cpp_once_the_body_has_a_plan(monkeypatch):
    in_python = python_iterations(monkeypatch)
    proto = recurrent_loop_model()
    sess = InferenceSession(proto)
    h0 = np.random.default_rng(6).standard_normal((1, 16)).astype(np.float32)
    for stop, trips, steps in ((100.0, 20, 20), (100.0, 20, 20), (0.0, 50, 3), (100.0, 0, 0)):
        feed = {"n": np.array(trips, np.int64), "h0": h0, "stop": np.array(stop, np.float32)}
        got, want = sess.run(None, feed), onnxruntime_outputs(proto, feed)
        assert_same(got, want)
        assert got[1].shape == want[1].shape == (steps,) and got[2].dtype == np.int64
    # the first run: one iteration as it is, one recorded for the plan, the other 18 in C++; the
    # later runs all in C++ (the early stop too)
    assert in_python == [0, 1]


def test_values_with_memory_of_their_own_are_64_byte_aligned():
    """A compiled plan's graph outputs, and the C++ loop's carried values at every iteration, get
    memory of their own (csrc/executor.cpp, aligned_bytes): 64-byte aligned whatever their size,
    and freed with the arrays that hold them."""
    proto = recurrent_loop_model(trips=40)
    sess = InferenceSession(proto)
    rng = np.random.default_rng(7)
    for run in range(6):
        h0 = rng.standard_normal((1, 16)).astype(np.float32)
        feed = {"n": np.array(40, np.int64), "h0": h0, "stop": np.array(100.0, np.float32)}
        got = sess.run(None, feed)
        assert_same(got, onnxruntime_outputs(proto, feed))
        assert got[0].ctypes.data % 64 == 0, f"run {run}: h at {got[0].ctypes.data:#x}"
    odd = model([helper.make_node("Add", ["x", "x"], ["y"]), helper.make_node("NonZero", ["y"], ["nz"])],
                [tensor("x", [None])], [tensor("y", [None]), tensor("nz", [1, None], INT64)])
    sess = InferenceSession(odd)
    for n in (1, 3, 17, 1000, 4099):
        x = rng.standard_normal(n).astype(np.float32) * (rng.random(n) < 0.5)
        for run in range(3):   # the plan for a shape runs from its second run
            y, nz = sess.run(None, {"x": x})
            np.testing.assert_array_equal(y, x + x)
            np.testing.assert_array_equal(nz, np.array(np.nonzero(x + x)))
        assert y.ctypes.data % 64 == 0 and nz.ctypes.data % 64 == 0, n


def test_loop_values_that_change_shape_go_back_to_the_python_loop():
    proto = growing_loop_model()
    sess = InferenceSession(proto)
    feed = {"trips": np.array(5, np.int64), "acc": np.zeros(1, np.float32), "x": np.array([1.0, 2.0], np.float32)}
    for _ in range(4):   # plans exist for each iteration's signature from the third run on
        assert_same(sess.run(None, feed), onnxruntime_outputs(proto, feed))


def recurrent_scan_model():
    """Scan over time (axis 1 of x, backwards) with a state h: h = tanh(h @ W + x_t); scan
    outputs: h at each step (stacked on axis 1) and sum(x_t) (forward, axis 0)."""
    rng = np.random.default_rng(8)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["m"]), helper.make_node("Add", ["m", "x_t"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["y_t"]),
         helper.make_node("ReduceSum", ["x_t"], ["s_t"], keepdims=0)],
        "body", [tensor("h_in", [2, 8]), tensor("x_t", [2, 8])],
        [tensor("h_out", [2, 8]), tensor("y_t", [2, 8]), tensor("s_t", [])])
    node = helper.make_node("Scan", ["h0", "x"], ["h", "ys", "sums"], name="rnn_scan", body=body,
                            num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1],
                            scan_output_axes=[1, 0])
    weight = helper.make_tensor("W", FLOAT, [8, 8], (rng.standard_normal(64) * 0.3).astype(np.float32))
    return model([node], [tensor("h0", [2, 8]), tensor("x", [2, "t", 8])],
                 [tensor("h", [2, 8]), tensor("ys", [2, "t", 8]), tensor("sums", ["t"])], [weight])


def test_scan_steps_run_in_cpp_once_the_body_has_a_plan(monkeypatch):
    in_python = python_iterations(monkeypatch)
    proto = recurrent_scan_model()
    sess = InferenceSession(proto)
    rng = np.random.default_rng(9)
    h0 = rng.standard_normal((2, 8)).astype(np.float32)
    for length in (12, 12, 5, 1):
        feed = {"h0": h0, "x": rng.standard_normal((2, length, 8)).astype(np.float32)}
        got, want = sess.run(None, feed), onnxruntime_outputs(proto, feed)
        assert_same(got, want)
        assert got[1].shape == (2, length, 8) and got[2].shape == (length,)
    assert in_python == [0, 1]   # the rest, the later runs included, in C++


def scan_output_model(grow: bool):
    """Loop 5 times; the body scans out i (int64 scalar), [i, i] as float32, and a range(1 + i)
    when ``grow`` (a scan output whose shape changes between iterations)."""
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Identity", ["i"], ["i_out"]),
             helper.make_node("Cast", ["i"], ["f"], to=FLOAT),
             helper.make_node("Concat", ["f1", "f1"], ["pair"], axis=0),
             helper.make_node("Unsqueeze", ["f", "zero"], ["f1"])]
    outputs = [tensor("cond_out", [], BOOL), tensor("i_out", [], INT64), tensor("pair", [2])]
    if grow:
        nodes.append(helper.make_node("Range", ["zero_s", "limit", "one_s"], ["ramp"]))
        nodes.append(helper.make_node("Add", ["i", "one_s"], ["limit"]))
        outputs.append(tensor("ramp", [None], INT64))
    consts = [helper.make_tensor("zero", INT64, [1], [0]), helper.make_tensor("zero_s", INT64, [], [0]),
              helper.make_tensor("one_s", INT64, [], [1])]
    body = helper.make_graph(nodes, "body", [tensor("i", [], INT64), tensor("cond_in", [], BOOL)], outputs, consts)
    scans = ["is", "pairs"] + (["ramps"] if grow else [])
    return model([helper.make_node("Loop", ["M", ""], scans, body=body)], [tensor("M", [], INT64)],
                 [tensor("is", [None], INT64), tensor("pairs", [None, 2])] +
                 ([tensor("ramps", [None, None], INT64)] if grow else []))


def test_scan_outputs_stack_per_iteration_values():
    is_, pairs = InferenceSession(scan_output_model(False)).run(None, {"M": np.array(5, np.int64)})
    assert is_.dtype == np.int64 and is_.shape == (5,)
    np.testing.assert_array_equal(is_, np.arange(5))
    assert pairs.dtype == np.float32 and pairs.shape == (5, 2)
    np.testing.assert_array_equal(pairs, np.repeat(np.arange(5, dtype=np.float32)[:, None], 2, axis=1))


def test_a_scan_output_that_changes_shape_is_an_error_naming_it():
    with pytest.raises(KernelError, match=r"scan output 3 changes shape between iterations: \[\d+\] at "
                                          r"iteration 0, \[\d+\] at iteration 1") as caught:
        InferenceSession(scan_output_model(True)).run(None, {"M": np.array(3, np.int64)})
    assert caught.value.__cause__ is None   # opforge's own finding, not an internal error


def scan_sum_model(opset: int, inputs: list, num_scan_inputs: int = 1):
    """Scan: state += the scanned row; ``inputs`` are the node's (opset 8 adds sequence lengths first)."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "row"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["row_out"])], "body",
                             [tensor("s_in", [2]), tensor("row", [2])], [tensor("s_out", [2]), tensor("row_out", [2])])
    shape = [1, 3, 2] if opset == 8 else [3, 2]
    state = [1, 2] if opset == 8 else [2]
    node = helper.make_node("Scan", inputs, ["y", "z"], name="scan", body=body, num_scan_inputs=num_scan_inputs)
    return model([node], [tensor("initial", state), tensor("x", shape)], [tensor("y", None), tensor("z", None)],
                 opset=opset)


@pytest.mark.parametrize("opset, inputs, num_scan_inputs", [
    (8, ["", "initial", "x", "x"], 1),   # one input more than the body takes (a fuzzed model crashed)
    (9, ["initial", "x", "x"], 1),
    (9, ["initial"], 1),
    (9, ["initial", "x"], 3)])
def test_a_scan_whose_inputs_do_not_match_its_body_is_refused_naming_it(opset, inputs, num_scan_inputs):
    from opforge.runtime.errors import GraphError

    with pytest.raises(GraphError, match="node 'scan' \\(Scan.*(body takes 2 input|num_scan_inputs = 3)"):
        InferenceSession(scan_sum_model(opset, inputs, num_scan_inputs))


@pytest.mark.parametrize("opset, inputs", [(8, ["", "initial", "x"]), (9, ["initial", "x"])])
def test_the_scan_of_the_mismatch_test_runs_when_it_matches(opset, inputs):
    proto = scan_sum_model(opset, inputs)
    x = np.arange(6, dtype=np.float32).reshape([1, 3, 2] if opset == 8 else [3, 2])
    feed = {"initial": np.ones([1, 2] if opset == 8 else [2], np.float32), "x": x}
    assert_same(InferenceSession(proto).run(None, feed), onnxruntime_outputs(proto, feed))


def test_a_loop_whose_body_takes_other_inputs_than_the_node_gives_is_refused_naming_it():
    from opforge.runtime.errors import GraphError

    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Identity", ["v_in"], ["v_out"])], "body",
                             [tensor("i", [], INT64), tensor("c_in", [], BOOL), tensor("v_in", [2])],
                             [tensor("c_out", [], BOOL), tensor("v_out", [2])])
    proto = model([helper.make_node("Loop", ["n", "", "v", "v"], ["a", "b"], name="loop", body=body)],
                  [tensor("n", [], INT64), tensor("v", [2])], [tensor("a", None), tensor("b", None)])
    with pytest.raises(GraphError, match="node 'loop' \\(Loop.*body takes 3 input"):
        InferenceSession(proto)
