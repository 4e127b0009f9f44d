"""Compiled plans: one arena close to the liveness bound, same results as the first run, threads."""
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import opforge
from opforge.runtime.plan.memory import PlanStep, plan_memory
from tests.support.zoo import light_model



def branchy_model(width=6, depth=5):
    """Parallel chains of Conv/Relu/Add joined by Concat: many values of mixed lifetimes."""
    rng = np.random.default_rng(0)
    nodes, inits, heads = [], [], []
    for b in range(width):
        prev = "x"
        for d in range(depth):
            w = f"w{b}_{d}"
            inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.2, w))
            nodes.append(helper.make_node("Conv", [prev, w], [f"c{b}_{d}"], pads=[1, 1, 1, 1]))
            nodes.append(helper.make_node("Relu", [f"c{b}_{d}"], [f"r{b}_{d}"]))
            nodes.append(helper.make_node("Add", [f"r{b}_{d}", prev], [f"a{b}_{d}"]))
            prev = f"a{b}_{d}"
        heads.append(prev)
    nodes.append(helper.make_node("Concat", heads, ["cat"], axis=1))
    nodes.append(helper.make_node("GlobalAveragePool", ["cat"], ["y"]))
    graph = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def branchy():
    m = branchy_model()
    x = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return m, x, want


def test_planned_runs_match_onnxruntime(branchy):
    m, x, want = branchy
    sess = opforge.InferenceSession(m)
    first = sess.run(None, {"x": x})[0]        # recorded on the Python executor
    assert sess.memory_plan({"x": x}) is not None
    for _ in range(3):                          # then the compiled plan
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-5)


def test_arena_reuses_buffers(branchy):
    m, x, _ = branchy
    sess = opforge.InferenceSession(m)
    sess.run(None, {"x": x})
    plan = sess.memory_plan({"x": x}).memory
    total = sum(b.size for b in plan.blocks.values() if b.kind != "inplace")
    assert plan.lower_bound <= plan.arena_bytes < 0.5 * total


# resnet50 was 1.133x: conv1's whole im2col workspace needed contiguous space among long-lived
# activations. Convolutions now pack one L2-sized tile at a time, and it fits within the bound.
@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "densenet121", "inception_v2", "shufflenet"])
def test_arena_peak_is_within_5_percent_of_the_liveness_lower_bound(name):
    sess = opforge.InferenceSession(light_model(f"light_{name}"))
    arg = sess.get_inputs()[0]
    feed = {arg.name: np.zeros([d if isinstance(d, int) else 1 for d in arg.shape], np.float32)}
    sess.run(None, feed)
    plan = sess.memory_plan(feed).memory
    assert plan.lower_bound > 0
    assert plan.arena_bytes <= 1.05 * plan.lower_bound, plan.dump()


def test_plan_dump_is_readable(branchy):
    m, x, _ = branchy
    sess = opforge.InferenceSession(m)
    sess.run(None, {"x": x})
    text = sess.memory_plan({"x": x}).dump()
    assert "liveness lower bound" in text and "offset" in text
    assert any(kind in text for kind in ("reuse", "inplace"))


def test_new_input_shape_gets_its_own_plan(branchy):
    m, _, _ = branchy
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    sess = opforge.InferenceSession(m2)
    ref = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"])
    for h in (8, 16, 8, 12, 16):
        x = np.random.default_rng(h).standard_normal((1, 4, h, 16)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_threads_share_one_session(branchy):
    m, _, _ = branchy
    sess = opforge.InferenceSession(m)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = [np.random.default_rng(i).standard_normal((1, 4, 16, 16)).astype(np.float32) for i in range(8)]
    wants = [ref.run(None, {"x": x})[0] for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(5):
                np.testing.assert_allclose(sess.run(None, {"x": xs[i]})[0], wants[i], rtol=1e-4, atol=1e-5)
        except Exception as exc:  # collected and re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_data_dependent_shapes_stay_correct():
    # NonZero's output size depends on values: a plan made for one input must not be reused blindly
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["t"]),
             helper.make_node("Cast", ["t"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = opforge.InferenceSession(m)
    for x in ([0, 1, 0, 2, 0, 3], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0]):
        x = np.array(x, np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.nonzero(x)[0][:, None].astype(np.float32))


def test_planner_merges_in_place_outputs():
    steps = [PlanStep("a", ["x"], ["t1"]), PlanStep("relu", ["t1"], ["t2"], inplace=[0]),
             PlanStep("b", ["t2"], ["y"])]
    plan = plan_memory(steps, {"t1": 1000, "t2": 1000}, external={"x", "y"})
    assert plan.blocks["t2"].kind == "inplace" and plan.blocks["t2"].offset == plan.blocks["t1"].offset
    assert plan.arena_bytes == 1024


def test_planner_puts_concat_inputs_in_its_output():
    # p and q (with q2, which takes q's memory in place) are written straight into cat's block
    steps = [PlanStep("a", ["x"], ["p"]), PlanStep("b", ["x"], ["q"]),
             PlanStep("relu", ["q"], ["q2"], inplace=[0]),
             PlanStep("cat", ["p", "q2"], ["cat"], places=[0, 1024]), PlanStep("d", ["cat"], ["y"])]
    plan = plan_memory(steps, {"p": 1024, "q": 512, "q2": 512, "cat": 1536}, external={"x", "y"})
    blocks = plan.blocks
    assert blocks["p"].kind == "part" and blocks["p"].offset == blocks["cat"].offset
    assert blocks["q"].kind == "part" and blocks["q"].offset == blocks["cat"].offset + 1024
    assert blocks["q2"].offset == blocks["q"].offset
    assert blocks["cat"].start == 0 and plan.arena_bytes == 1536 == plan.lower_bound, plan.dump()
    assert "part of cat" in plan.dump()


def test_planner_nests_concats_and_leaves_inputs_it_cannot_move():
    # g, larger and alive throughout, takes the arena's start: o2's parts are placed from its offset
    steps = [PlanStep("g", ["x"], ["g"]), PlanStep("a", ["x"], ["p"]), PlanStep("b", ["x"], ["q"]),
             PlanStep("c", ["x"], ["r"]), PlanStep("cat1", ["p", "q"], ["o1"], places=[0, 256]),
             PlanStep("cat2", ["o1", "r", "x"], ["o2"], places=[0, 512, 1024]),
             PlanStep("d", ["o2", "g"], ["y"])]
    sizes = {"g": 4096, "p": 256, "q": 256, "r": 512, "o1": 512, "o2": 1280}
    blocks = plan_memory(steps, sizes, external={"x", "y"}).blocks
    base = blocks["o2"].offset
    assert base > 0
    assert [(blocks[n].kind, blocks[n].offset - base) for n in ("o1", "p", "q", "r")] == \
        [("part", 0), ("part", 0), ("part", 256), ("part", 512)]
    steps = steps[1:-1] + [PlanStep("d", ["o2"], ["y"])]
    # read again later, at an offset that breaks alignment, or concatenated into a graph output
    later = steps[:3] + [PlanStep("cat", ["p", "q", "r"], ["o"], places=[0, 256, 500]), PlanStep("e", ["p"], ["z"]),
                         PlanStep("d", ["o"], ["y"])]
    blocks = plan_memory(later, dict(sizes, o=1012), external={"x", "y", "z"}).blocks
    assert [blocks[n].kind for n in ("p", "q", "r")] == ["allocate", "part", "allocate"]
    into_output = steps[:3] + [PlanStep("cat", ["p", "q"], ["y"], places=[0, 256])]
    blocks = plan_memory(into_output, sizes, external={"x", "y"}).blocks
    assert {blocks[n].kind for n in ("p", "q")} == {"allocate"}


def concat_model():
    """Concats of convs and relus: fire-module style halves, a Concat nested in another, an
    input also read after its Concat, a constant input, and a Concat along an inner axis."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3, f"w{i}")
             for i in range(4)]
    inits.append(numpy_helper.from_array(rng.standard_normal((1, 8, 16, 16)).astype(np.float32), "k"))
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]) for i in range(4)]
    nodes += [helper.make_node("Relu", ["c1"], ["r1"]),
              helper.make_node("Concat", ["c0", "r1"], ["fire"], axis=1),
              helper.make_node("Concat", ["fire", "c2", "k"], ["nested"], axis=-3),
              helper.make_node("Concat", ["c3", "c3", "c3", "c3"], ["twice"], axis=1),
              helper.make_node("Concat", ["nested", "twice"], ["rows"], axis=2),
              helper.make_node("Sigmoid", ["c2"], ["after"]),
              helper.make_node("ReduceSum", ["rows"], ["s"], keepdims=0)]
    graph = helper.make_graph(nodes, "concats", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("rows", "after", "s")],
                              inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("threads", [1, 2])
def test_concat_inputs_written_in_place_match_onnxruntime(threads):
    m = concat_model()
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    sess = opforge.InferenceSession(m, options)
    for seed in range(3):   # the first run records, the others run the plan
        x = np.random.default_rng(seed).standard_normal((1, 4, 16, 16)).astype(np.float32)
        for got, want in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    blocks = sess.memory_plan({"x": x}).memory.blocks
    parts = {n: b.alias_of for n, b in blocks.items() if b.kind == "part"}
    assert parts == {"c0": "fire", "r1": "fire", "fire": "nested"}, parts   # c2 is read again; c3 four times


def test_concat_inputs_of_data_dependent_sizes_stay_right():
    # The plan puts a2 and b2 in y at the sizes of the recorded run (16 + 16 floats). With 24
    # positives a2 outgrows its place (it gets memory of its own) and b2, smaller, still sits at
    # y's float 16, where a2's copy goes: the Concat copies such a piece out before it copies.
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("Not", ["pos"], ["neg"]),
             helper.make_node("Compress", ["x", "pos"], ["a"], axis=0),
             helper.make_node("Compress", ["x", "neg"], ["b"], axis=0),
             helper.make_node("Neg", ["a"], ["a2"]), helper.make_node("Abs", ["b"], ["b2"]),
             helper.make_node("Concat", ["a2", "b2"], ["y"], axis=0), helper.make_node("Relu", ["y"], ["out"])]
    graph = helper.make_graph(nodes, "sizes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = opforge.InferenceSession(m)
    rng = np.random.default_rng(0)
    for positives in (16, 16, 24, 8, 16, 30):
        x = np.concatenate([rng.uniform(1, 2, positives), -rng.uniform(1, 2, 32 - positives)]).astype(np.float32)
        rng.shuffle(x)
        want = np.maximum(np.concatenate([-x[x > 0], np.abs(x[x <= 0])]), 0)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want, err_msg=f"{positives} positives")
    blocks = sess.memory_plan({"x": x}).memory.blocks
    assert (blocks["a"].kind, blocks["b"].kind) == ("part", "part")


def test_light_model_planned_run_matches_onnxruntime():
    model = light_model("light_squeezenet")
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {ref.get_inputs()[0].name: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    want = ref.run(None, feed)[0]
    sess = opforge.InferenceSession(model)
    for attempt in range(2):
        np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        assert sess.memory_plan(feed) is not None, "the first run compiled no plan"


def fed_shape_model(op_type):
    """``op_type`` sized by a fed int64 vector: its values are not part of a plan's signature."""
    x = [] if op_type == "ConstantOfShape" else ["x"]
    node = helper.make_node(op_type, x + ["s"], ["y"], name="grow")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("s", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((1, 1, 1), np.float32), "x")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op_type", ["Expand", "ConstantOfShape", "Tile"])
@pytest.mark.parametrize("dims, says", [
    ([2**31, 2**31, 3], "does not fit in memory"),        # elements fit int64, bytes do not
    ([2**32, 2**32, 1], "does not fit in memory"),        # elements do not fit int64
    ([0, 2**62, 1], "does not fit in memory"),            # empty, but numpy cannot hold it either
    ([2**20, 2**20, 64], "out of memory"),           # fits int64, fits no memory
])
def test_a_huge_size_reaching_a_compiled_plan_is_refused_naming_the_node(op_type, dims, says):
    sess = opforge.InferenceSession(fed_shape_model(op_type))
    small = {"s": np.array([2, 3, 1], np.int64)}
    for _ in range(2):
        assert sess.run(None, small)[0].shape == (2, 3, 1)
    assert sess.memory_plan(small) is not None
    with pytest.raises(opforge.OpError, match=f"node 'grow' \\({op_type}.*{says}"):
        sess.run(None, {"s": np.array(dims, np.int64)})
    assert sess.run(None, small)[0].shape == (2, 3, 1)   # the session stays usable


@pytest.mark.parametrize("op_type", ["Expand", "ConstantOfShape", "Tile"])
def test_a_huge_size_on_the_first_run_is_refused(op_type):
    sess = opforge.InferenceSession(fed_shape_model(op_type))
    with pytest.raises(opforge.OpError, match=f"node 'grow' \\({op_type}.*does not fit in memory"):
        sess.run(None, {"s": np.array([2**31, 2**31, 3], np.int64)})


def relu_model(dims=("n", 3)):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_plan_cache_keeps_the_most_recently_used_signatures():
    options = opforge.SessionOptions()
    options.plan_cache_size = 2
    sess = opforge.InferenceSession(relu_model(), options)
    feeds = [{"x": np.full((n, 3), -1.0 + n, np.float32)} for n in (1, 2, 3)]
    for feed in feeds + [feeds[1]]:
        np.testing.assert_array_equal(sess.run(None, feed)[0], np.maximum(feed["x"], 0))
    assert sess.memory_plan(feeds[0]) is None          # evicted: least recently used
    assert sess.memory_plan(feeds[1]) is not None and sess.memory_plan(feeds[2]) is not None
    assert len(sess._runner) == 2


def test_a_plan_that_failed_to_compile_is_tried_again(monkeypatch):
    from opforge.runtime.plan import compiled as plan_module

    real, calls = plan_module.compile_plan, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("no arena today")
        return real(*args)

    monkeypatch.setattr(plan_module, "compile_plan", flaky)
    sess = opforge.InferenceSession(relu_model())
    feed = {"x": np.array([[-1.0, 2.0, -3.0]], np.float32)}
    for _ in range(4):
        np.testing.assert_array_equal(sess.run(None, feed)[0], [[0.0, 2.0, 0.0]])
    assert len(calls) == 2 and sess.memory_plan(feed) is not None


def batch_norm_training_model():
    """BatchNormalization with training_mode=1 (the native kernel refuses it: the reference
    provider runs those calls) feeding a Relu that stays native."""
    c = 3
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, c).astype(np.float32), "scale"),
             numpy_helper.from_array(np.zeros(c, np.float32), "bias"),
             numpy_helper.from_array(np.zeros(c, np.float32), "mean"),
             numpy_helper.from_array(np.ones(c, np.float32), "var")]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                              ["bn", "running_mean", "running_var"], training_mode=1),
             helper.make_node("Relu", ["bn"], ["y"])]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 4])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    return m


def test_kernels_do_not_change_while_threads_run_them():
    """A native kernel that hands some calls to the reference keeps no state of it: threads see
    the same kernels, providers and results before, during and after."""
    m = batch_norm_training_model()
    sess = opforge.InferenceSession(m)
    xs = [np.random.default_rng(i).standard_normal((2, 3, 4)).astype(np.float32) for i in range(4)]
    # numpy is the oracle: onnxruntime's training-mode BatchNormalization is 5% off the spec's
    # batch statistics here
    scale = np.linspace(0.5, 1.5, 3).astype(np.float32)[None, :, None]
    wants = [np.maximum((x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-5)
                        * scale, 0) for x in xs]
    kernels = [step.kernel for step in sess._executor.steps]
    before = [(k.provider, {n: v for n, v in vars(k).items() if n != "_reference"}) for k in kernels]
    providers = sess.node_providers()
    errors = []

    def work(i):
        try:
            for _ in range(20):
                np.testing.assert_allclose(sess.run(None, {"x": xs[i]})[0], wants[i], rtol=1e-5, atol=1e-6)
        except Exception as exc:  # reported below, with the thread's input
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    after = [(k.provider, {n: v for n, v in vars(k).items() if n != "_reference"}) for k in kernels]
    assert after == before and sess.node_providers() == providers


def test_a_sequence_keeps_its_values_when_their_arena_blocks_are_reused():
    """SequenceConstruct holds Relu's output, whose arena block Neg's output reuses later in the
    same run: the sequence must own a copy, not a view of the arena."""
    from onnx import TensorProto, helper

    F = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("SequenceConstruct", ["a"], ["s"]),
             helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Abs", ["b"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["d"]),
             helper.make_node("SequenceAt", ["s", "zero"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [64])],
                              [helper.make_tensor_value_info("y", F, [64]), helper.make_tensor_value_info("d", F, [64])],
                              [helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = opforge.InferenceSession(model.SerializeToString())
    x = np.linspace(-3, 3, 64).astype(np.float32)
    for _ in range(3):   # recorded, then the compiled plan twice
        y, d = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        np.testing.assert_allclose(d, 1 / (1 + np.exp(-np.abs(x))), rtol=1e-6)
