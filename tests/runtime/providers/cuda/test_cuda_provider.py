"""The CUDA provider without a GPU: partitioning and copy insertion with a stand-in device whose
values are marked wrappers; the provider's kernels, its session glue and fallbacks with a
stand-in GPU made of numpy; availability and the CPU fallback warning. Tests marked `cuda` run
the real provider on a GPU."""
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import opforge
from tests.support import fake_cupy
from tests.support.cuda_support import cupy_gpu, numpy_gpu  # noqa: F401  (the stand-in GPU fixtures)
from opforge.runtime.execute.executor import Dispatcher, Executor
from opforge.runtime.graph.graph import build_graph, topological_order
from opforge.runtime.graph.shapes import infer_types
from opforge.runtime.plan.partition import COPY_DOMAIN, partition
from opforge.runtime.providers.registry import CPU, CUDA, REFERENCE, KernelRegistry, default_registry

F = TensorProto.FLOAT


class Marked:
    """A value in the stand-in device's memory: host kernels cannot read it by mistake."""

    def __init__(self, array):
        self.array = array


class StandInDevice:
    name, provider = "standin:0", CUDA

    def __init__(self):
        self.uploads, self.downloads = [], []

    def upload(self, value):
        self.uploads.append(np.asarray(value).shape)
        return Marked(np.array(value))

    def download(self, value):
        assert isinstance(value, Marked), f"download of a host value {type(value)}"
        self.downloads.append(value.array.shape)
        return value.array


class StandInKernel:
    """Claims an op for the stand-in device; checks each input is where it should be."""

    provider = CUDA

    def __init__(self, node, opset, device, fn, host_inputs=(), host_outputs=()):
        self.device, self.fn = device, fn
        self.host_inputs, self.host_outputs = host_inputs, host_outputs

    def run(self, inputs):
        for index, value in enumerate(inputs):
            on_device = isinstance(value, Marked)
            assert on_device != (index in self.host_inputs), f"input #{index} on the wrong side"
        outputs = self.fn(*[v.array if isinstance(v, Marked) else v for v in inputs])
        return [o if i in self.host_outputs else Marked(o) for i, o in enumerate(outputs)]


def standin_registry(device) -> KernelRegistry:
    registry = KernelRegistry(parent=default_registry)   # the reference provider for the rest

    def claim(op, fn, **where):
        registry.register("", op, 1, CUDA, lambda node, opset: StandInKernel(node, opset, device, fn, **where))

    claim("Relu", lambda x: [np.maximum(x, 0)])
    claim("Add", lambda a, b: [a + b])
    claim("Reshape", lambda x, shape: [x.reshape(shape)], host_inputs=(1,))
    claim("Shape", lambda x: [np.array(x.shape, np.int64)], host_outputs=(0,))
    return registry


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def partitioned(model, device):
    graph = build_graph(model.graph)
    types = infer_types(graph, {"": 17})
    dispatcher = Dispatcher(standin_registry(device), [CUDA, REFERENCE], {"": 17}, types)
    kernels = partition(graph, {n: dispatcher.bind(n) for n in topological_order(graph)})
    return Executor(graph, kernels.__getitem__)


def chain_model():
    """x -> Relu (device) -> Add W (device) -> Softmax (host) -> Relu (device) -> y, and the
    first Relu's output also read by a host Neg -> z."""
    w = helper.make_tensor("W", F, [4], [1.0, -2.0, 3.0, -4.0])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu1"),
             helper.make_node("Add", ["a", "W"], ["b"], name="add"),
             helper.make_node("Softmax", ["b"], ["c"], name="softmax"),
             helper.make_node("Relu", ["c"], ["y"], name="relu2"),
             helper.make_node("Neg", ["a"], ["z"], name="neg")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 4])],
                      [helper.make_tensor_value_info("y", F, [2, 4]),
                       helper.make_tensor_value_info("z", F, [2, 4])], [w])


def test_copies_are_inserted_where_values_cross_devices():
    device = StandInDevice()
    executor = partitioned(chain_model(), device)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    y, z = executor.run({"x": x})
    a = np.maximum(x, 0)
    b = a + np.array([1, -2, 3, -4], np.float32)
    e = np.exp(b - b.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(z, -a)
    assert isinstance(y, np.ndarray) and isinstance(z, np.ndarray)   # outputs come home
    placed = [(n.op_type, p) for n, p in executor.providers_by_node()]
    assert placed.count(("MemcpyFromHost", CUDA)) == 2   # x in, softmax's output back in
    assert placed.count(("MemcpyToHost", CUDA)) == 3     # a (read twice on the host: once), b, y
    assert ("Softmax", REFERENCE) in placed and ("Neg", REFERENCE) in placed
    assert placed.count(("Relu", CUDA)) == 2 and ("Add", CUDA) in placed
    copies = [n for n, _ in executor.providers_by_node() if n.domain == COPY_DOMAIN]
    assert len({tuple(n.inputs) for n in copies}) == len(copies)   # each value copied once per side


def test_initializers_move_to_the_device_once_at_session_creation():
    device = StandInDevice()
    executor = partitioned(chain_model(), device)
    assert isinstance(executor.graph.initializers["W@standin:0"], Marked)
    assert device.uploads == [(4,)]
    executor.run({"x": np.ones((2, 4), np.float32)})
    executor.run({"x": np.ones((2, 4), np.float32)})
    assert device.uploads.count((4,)) == 1


def test_host_inputs_and_outputs_stay_on_the_host():
    """Reshape reads its shape on the host, Shape writes on the host: no copies for them."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Shape", ["a"], ["s"]),
             helper.make_node("Reshape", ["a", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3, 2])],
                       [helper.make_tensor_value_info("y", F, [3, 2])])
    device = StandInDevice()
    executor = partitioned(model, device)
    x = np.arange(6, dtype=np.float32).reshape(3, 2) - 2
    np.testing.assert_allclose(executor.run({"x": x})[0], np.maximum(x, 0))
    copies = [n.op_type for n, _ in executor.providers_by_node() if n.domain == COPY_DOMAIN]
    assert copies == ["MemcpyFromHost", "MemcpyToHost"]   # only x in and y out


def test_a_graph_on_the_host_is_left_alone():
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                       [helper.make_tensor_value_info("y", F, [2])])
    executor = partitioned(model, StandInDevice())
    assert [n.op_type for n, _ in executor.providers_by_node()] == ["Neg"]


def test_cuda_is_listed_only_when_usable(monkeypatch):
    from opforge.runtime.providers import cuda

    monkeypatch.setattr(cuda, "available", lambda: False)
    assert opforge.get_available_providers() == [CPU, REFERENCE]
    monkeypatch.setattr(cuda, "available", lambda: True)
    assert opforge.get_available_providers() == [CUDA, CPU, REFERENCE]


def test_asking_for_cuda_without_it_warns_and_runs_on_cpu(monkeypatch):
    from opforge.runtime.providers import cuda

    monkeypatch.setattr(cuda, "unavailable_reason", lambda: "no GPU in this test")
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                       [helper.make_tensor_value_info("y", F, [2])])
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider is not available \\(no GPU in this test\\)"):
        sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    assert sess.get_providers()[0] == CPU
    assert sess.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0].tolist() == [0.0, 2.0]


def cnn_model():
    rng = np.random.default_rng(1)

    def init(name, *shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], strides=[2, 2], group=2, auto_pad="SAME_UPPER"),
             helper.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["p2", "s", "bb", "m", "v"], ["n2"]),
             helper.make_node("GlobalAveragePool", ["n2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1, alpha=0.5),
             helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 6, 4, 3, 3), init("s", 6), init("bb", 6),
             init("m", 6), onnx.numpy_helper.from_array(np.abs(rng.standard_normal(6)).astype(np.float32) + 0.5, "v"),
             init("wf", 5, 6), init("bf", 5)]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 16, 16])],
                      [helper.make_tensor_value_info("y", F, ["N", 5])], inits)


def attention_model():
    rng = np.random.default_rng(2)
    wq = onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "wq")
    gamma = onnx.numpy_helper.from_array(np.ones(8, np.float32), "gamma")
    beta = onnx.numpy_helper.from_array(np.zeros(8, np.float32), "beta")
    heads = onnx.numpy_helper.from_array(np.array([0, 0, 2, 4], np.int64), "heads")
    axes = onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")
    starts, ends = (onnx.numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("st", 1), ("en", 3)))
    idx = onnx.numpy_helper.from_array(np.array([2, -1], np.int64), "idx")
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "wq"], ["q"]),
             helper.make_node("Reshape", ["q", "heads"], ["qh"]),
             helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["qt", "qt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
             helper.make_node("ReduceMean", ["attn"], ["red"], axes=[-1], keepdims=1),
             helper.make_node("Sub", ["attn", "red"], ["centred"]),
             helper.make_node("Slice", ["centred", "st", "en", "axes"], ["sl"]),
             helper.make_node("Gather", ["sl", "idx"], ["ga"], axis=2),
             helper.make_node("Shape", ["ga"], ["shp"]),
             helper.make_node("Cast", ["shp"], ["shpf"], to=F),
             helper.make_node("ReduceSum", ["ga", "axes"], ["rs"], keepdims=0),
             helper.make_node("Concat", ["rs", "rs"], ["y"], axis=0)]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 4, 8])],
                      [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("shpf", F, None)],
                      [wq, gamma, beta, heads, axes, starts, ends, idx], opset=17)


@pytest.mark.parametrize("model, feed", [
    (cnn_model, lambda rng: {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}),
    (attention_model, lambda rng: {"x": rng.standard_normal((2, 4, 8)).astype(np.float32)}),
])
def test_cuda_kernels_match_onnxruntime(numpy_gpu, model, feed):
    ort = pytest.importorskip("onnxruntime")
    proto = model().SerializeToString()
    inputs = feed(np.random.default_rng(3))
    expected = ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(None, inputs)
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"])
    for _ in range(2):   # the first run records, the second runs the compiled plan
        got = sess.run(None, inputs)
        for g, e in zip(got, expected):
            assert type(g) is np.ndarray
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    placed = sess.node_providers()
    standard = [(op, p) for _, op, p in placed if op not in ("MemcpyFromHost", "MemcpyToHost")]
    assert all(p == CUDA for _, p in standard), standard
    assert numpy_gpu.entered >= 3   # session creation and each run use the GPU's context


def test_nodes_without_a_cuda_kernel_run_on_cpu_with_copies(numpy_gpu):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Atan", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])])
    sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    assert [(op, p) for _, op, p in sess.node_providers()] == [
        ("MemcpyFromHost", CUDA), ("Relu", CUDA), ("MemcpyToHost", CUDA), ("Atan", CPU),
        ("MemcpyFromHost", CUDA), ("Relu", CUDA), ("MemcpyToHost", CUDA)]
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], [0.0, np.arctan(0.5), np.arctan(2.0)], rtol=1e-6)
    steps = sess.memory_plan({"x": x}).dump().splitlines()[1:8]   # the compiled plan shows the same
    assert [line.split()[-2:] for line in steps] == [[op, p] for _, op, p in sess.node_providers()]


def string_model():
    """A string tensor through every data-movement op the CUDA provider has, and Where; its
    Shape too."""
    def ints(name, values):
        return onnx.numpy_helper.from_array(np.array(values, np.int64), name)

    S = TensorProto.STRING
    nodes = [helper.make_node("Reshape", ["x", "to32"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"]),
             helper.make_node("Concat", ["t", "x"], ["c"], axis=0),
             helper.make_node("Gather", ["c", "rows"], ["g"], axis=0),
             helper.make_node("Slice", ["g", "zero", "two", "one"], ["s"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["u"]),
             helper.make_node("Squeeze", ["u", "zero"], ["q"]),
             helper.make_node("Expand", ["q", "to222"], ["e"]),
             helper.make_node("Flatten", ["e"], ["f"]),
             helper.make_node("Where", ["keep", "f", "f"], ["y"]),
             helper.make_node("Shape", ["x"], ["shape"])]
    inits = [ints("to32", [3, 2]), ints("rows", [0, 3]), ints("zero", [0]), ints("one", [1]), ints("two", [2]),
             ints("to222", [2, 2, 2])]
    return make_model(nodes, [helper.make_tensor_value_info("x", S, [2, 3]),
                              helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 4])],
                      [helper.make_tensor_value_info("y", S, None),
                       helper.make_tensor_value_info("shape", TensorProto.INT64, None)], inits)


@pytest.mark.parametrize("gpu", ["numpy_gpu", "cupy_gpu"])
def test_string_tensors_stay_on_the_cpu(request, gpu):
    """cupy arrays hold numbers and booleans (a string array is refused at upload): nodes on
    string tensors run on the CPU, even those whose CUDA kernel moves data of any dtype."""
    request.getfixturevalue(gpu)
    sess = opforge.InferenceSession(string_model().SerializeToString(), providers=["CUDAExecutionProvider"])
    assert [(op, p) for _, op, p in sess.node_providers() if p == CUDA] == []
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    keep = np.ones((2, 4), bool)
    y, shape = sess.run(None, {"x": x, "keep": keep})
    c = np.concatenate([x.reshape(3, 2).T, x])
    assert y.tolist() == np.broadcast_to(c[[0, 3]][:, :2], (2, 2, 2)).reshape(2, 4).tolist()
    assert shape.tolist() == [2, 3]


def test_bfloat16_stays_on_the_cpu(cupy_gpu):
    """Nor do cupy arrays hold bfloat16: an Add of bfloat16 values runs on the CPU."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    model = make_model([helper.make_node("Add", ["a", "a"], ["y"])],
                       [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])])
    sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    assert [p for _, op, p in sess.node_providers() if op == "Add"] != [CUDA]
    a = np.array([1.5, -2.0, 3.0], ml_dtypes.bfloat16)
    assert sess.run(None, {"a": a})[0].astype(np.float32).tolist() == [3.0, -4.0, 6.0]


def test_python_ops_keep_working_in_cuda_sessions(numpy_gpu):
    @opforge.custom_op("Twice", domain="com.test")
    def twice(x):
        assert type(x) is np.ndarray   # a Python op gets host arrays
        return x * 2

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Twice", ["a"], ["y"], domain="com.test")]
    model = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                                                [helper.make_tensor_value_info("y", F, [2])]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.test", 1)])
    sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"],
                                    custom_ops=[twice])
    assert sess.run(None, {"x": np.array([-1.0, 3.0], np.float32)})[0].tolist() == [0.0, 6.0]


def twice_model():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Twice", ["a"], ["b"], domain="com.test"),
             helper.make_node("Relu", ["b"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                                               [helper.make_tensor_value_info("y", F, [2])]),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.test", 1)])


def test_python_op_declaring_gpu_sees_device_arrays(numpy_gpu):
    """gpu=True: in a CUDA session the op gets and returns device arrays, with no copies around
    it; its infer still types its output; in a CPU session it gets numpy."""
    from tests.support.cuda_support import OnDevice

    seen = []

    @opforge.custom_op("Twice", domain="com.test", gpu=True, infer=lambda x: [x])
    def twice(x):
        seen.append(type(x))
        return x * 2

    proto = twice_model().SerializeToString()
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"], custom_ops=[twice])
    assert [(op, p) for _, op, p in sess.node_providers()] == [
        ("MemcpyFromHost", CUDA), ("Relu", CUDA), ("Twice", CUDA), ("Relu", CUDA), ("MemcpyToHost", CUDA)]
    assert sess.types.get("b").dtype == np.float32   # the op's infer, asked in a CUDA session
    x = np.array([-1.0, 3.0], np.float32)
    for _ in range(2):   # the recording run, then the compiled plan
        assert sess.run(None, {"x": x})[0].tolist() == [0.0, 6.0]
    assert seen == [OnDevice, OnDevice]
    host = opforge.InferenceSession(proto, custom_ops=[twice])
    assert host.run(None, {"x": x})[0].tolist() == [0.0, 6.0] and seen[-1] is np.ndarray


def test_python_op_result_in_host_memory_is_moved_to_the_device(numpy_gpu):
    @opforge.custom_op("Twice", domain="com.test", gpu=True)
    def twice(x):
        return np.asarray(x) * 2   # a numpy result from a gpu=True op

    sess = opforge.InferenceSession(twice_model().SerializeToString(), providers=["CUDAExecutionProvider"],
                                    custom_ops=[twice])
    uploads = numpy_gpu.uploads
    assert sess.run(None, {"x": np.array([-1.0, 3.0], np.float32)})[0].tolist() == [0.0, 6.0]
    assert numpy_gpu.uploads == uploads + 2   # x, and the op's result


def test_mappings_keep_working_in_cuda_sessions(numpy_gpu):
    """A vendor op mapped to a standard one (one-to-one) and to a subgraph (one-to-many) before
    partitioning: the ops it becomes run on the GPU."""
    def scaled_add(n):
        return [helper.make_node("Mul", [n.inputs[1], n.constant("alpha", np.float32(n.attrs["alpha"]))],
                                 [n.temp("scaled")]),
                helper.make_node("Add", [n.inputs[0], n.temp("scaled")], n.outputs)]

    nodes = [helper.make_node("VendorLeaky", ["a"], ["l"], domain="com.vendor", slope=0.5),
             helper.make_node("ScaledAdd", ["l", "b"], ["y"], domain="com.vendor", alpha=3.0)]
    model = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, [3]) for n in "ab"],
                                                [helper.make_tensor_value_info("y", F, [3])]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.vendor", 1)])
    mappings = [opforge.OpMapping("com.vendor::1::VendorLeaky", target="LeakyRelu", attrs={"slope": "alpha"}),
                opforge.OpMapping("com.vendor::1::ScaledAdd", subgraph=scaled_add)]
    sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"],
                                    custom_ops=mappings)
    placed = [(op, p) for _, op, p in sess.node_providers() if not op.startswith("Memcpy")]
    assert placed == [("LeakyRelu", CUDA), ("Mul", CUDA), ("Add", CUDA)]
    a, b = np.array([-2.0, 1.0, 2.0], np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(sess.run(None, {"a": a, "b": b})[0], np.where(a > 0, a, 0.5 * a) + 3 * b)


def test_control_flow_bodies_run_on_the_host(numpy_gpu):
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    model = make_model(nodes, [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("x", F, [2])],
                       [helper.make_tensor_value_info("y", F, [2])])
    sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    x = np.array([-1.0, 2.0], np.float32)
    assert sess.run(None, {"cond": np.array(True), "x": x})[0].tolist() == [0.0, 2.0]


@pytest.mark.cuda
def test_cnn_on_the_gpu_matches_the_cpu():
    proto = cnn_model().SerializeToString()
    x = np.random.default_rng(4).standard_normal((4, 3, 16, 16)).astype(np.float32)
    expected = opforge.InferenceSession(proto).run(None, {"x": x})[0]
    sess = opforge.InferenceSession(proto, providers=[("CUDAExecutionProvider", {"device_id": 0})])
    for _ in range(2):
        got = sess.run(None, {"x": x})[0]
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)


@pytest.mark.cuda
def test_gpu_memory_limit_is_honoured():
    proto = cnn_model().SerializeToString()
    sess = opforge.InferenceSession(proto, providers=[("CUDAExecutionProvider", {"gpu_mem_limit": 1 << 30})])
    assert sess.device.pool.get_limit() == 1 << 30
    sess.run(None, {"x": np.ones((1, 3, 16, 16), np.float32)})
    assert 0 < sess.device.pool.total_bytes() <= 1 << 30


def test_no_gpu_machine_lists_no_cuda():
    from tests.support.cuda_support import gpu_unavailable

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        listed = CUDA in opforge.get_available_providers()
    assert listed == (not gpu_unavailable())


TWIN = """
#include <opforge/op.h>
static void scale(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  float alpha = ctx.attr<float>("alpha");
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = alpha * x[i];
}
OPFORGE_OP(scale).domain("com.example").input("X", {opforge::f32, opforge::f64}).output("Y")
    .attr("alpha", 1.0f).infer(opforge::same_as_input0).compute(scale);
"""


def scale_model():
    node = helper.make_node("scale", ["x"], ["y"], domain="com.example", alpha=3.0)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), node], "g",
                              [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])])
    graph.node[1].input[0] = "r"
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example", 1)]).SerializeToString()


@pytest.fixture(scope="module")
def cuda_lib():
    from tests.support.cuda_support import nvcc_path

    if nvcc_path() is None:
        pytest.skip("needs nvcc (the CUDA compiler)")
    from tests.support.cuda_support import build_test_library

    return build_test_library()


def test_cuda_op_without_the_cuda_provider_says_why(cuda_lib):
    with pytest.raises(opforge.runtime.KernelNotFoundError,
                       match="scale is a CUDA op and this session runs without the CUDA provider"):
        opforge.InferenceSession(scale_model(), custom_ops=[cuda_lib])


def test_cpu_twin_runs_the_model_where_cuda_is_not(cuda_lib):
    twin = opforge.load_inline("scale_twin", TWIN)
    for libraries in ([cuda_lib, twin], [twin, cuda_lib]):
        sess = opforge.InferenceSession(scale_model(), custom_ops=libraries)
        assert sess.node_providers()[-1][1:] == ("scale", CPU)
        assert sess.run(None, {"x": np.array([-1.0, 1.0, 2.0], np.float32)})[0].tolist() == [0.0, 3.0, 6.0]


@pytest.mark.skipif(not __import__("tests.support.cuda_support", fromlist=["x"]).gpu_unavailable(), reason="this machine has a GPU")
def test_cuda_op_in_a_cuda_session_is_launched_through_its_library(numpy_gpu, cuda_lib, monkeypatch):
    """Up to the launch: outputs come from (a stand-in) cupy, then the library finds no GPU."""
    import sys

    from tests.support import fake_cupy
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.module())
    sess = opforge.InferenceSession(scale_model(), providers=["CUDAExecutionProvider"], custom_ops=[cuda_lib])
    assert ("scale", CUDA) in [(op, p) for _, op, p in sess.node_providers()]
    with pytest.raises(opforge.runtime.KernelError, match="scale: no CUDA device is available"):
        sess.run(None, {"x": np.ones(3, np.float32)})


@pytest.mark.cuda
def test_custom_cuda_op_in_a_gpu_session(cuda_lib):
    twin = opforge.load_inline("scale_twin", TWIN)
    x = np.array([-1.0, 1.0, 2.0], np.float32)
    sess = opforge.InferenceSession(scale_model(), providers=["CUDAExecutionProvider"], custom_ops=[cuda_lib, twin])
    assert ("scale", CUDA) in [(op, p) for _, op, p in sess.node_providers()]
    assert sess.run(None, {"x": x})[0].tolist() == [0.0, 3.0, 6.0]


def on_device(array):
    from tests.support.cuda_support import OnDevice

    return np.array(array).view(OnDevice)


def test_io_binding_keeps_device_values_on_the_device(numpy_gpu):
    """A feed bound in device memory is read where it is and the bound device output is handed
    back without the copy home: no copy in either direction during the run."""
    proto = cnn_model().SerializeToString()
    x = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = opforge.InferenceSession(proto).run(None, {"x": x})[0]
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", opforge.OrtValue(on_device(x), "cuda", 0))
    binding.bind_output("y", "cuda")
    for _ in range(2):   # the recording run, then the compiled plan
        uploads, downloads = numpy_gpu.uploads, numpy_gpu.downloads
        sess.run_with_iobinding(binding)
        assert (numpy_gpu.uploads, numpy_gpu.downloads) == (uploads, downloads)
        (out,) = binding.get_outputs()
        assert out.device_name() == "cuda" and hasattr(out.value(), "__cuda_array_interface__")
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
        assert type(binding.copy_outputs_to_cpu()[0]) is np.ndarray
    assert type(sess.run(None, {"x": on_device(x)})[0]) is np.ndarray   # plain run: numpy out


def test_device_feeds_reach_host_kernels_as_host_arrays(numpy_gpu):
    """x is read by a CUDA Relu and directly by a CPU Atan: the CPU kernel gets host memory."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Atan", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])])
    sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    want = np.maximum(x, 0) + np.arctan(x)
    downloads = numpy_gpu.downloads
    got = sess.run_with_ort_values(None, {"x": opforge.OrtValue(on_device(x), "cuda", 0)})
    assert numpy_gpu.downloads == downloads + 1   # x, for Atan; the output stays on the device
    assert got[0].device_name() == "cuda"
    np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-6)
    host = opforge.InferenceSession(model.SerializeToString())   # a CPU session copies it in
    np.testing.assert_allclose(host.run(None, {"x": on_device(x)})[0], want, rtol=1e-6)


def test_io_binding_device_output_written_into_a_bound_buffer(numpy_gpu):
    proto = cnn_model().SerializeToString()
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"])
    target = opforge.OrtValue(on_device(np.zeros((1, 5), np.float32)), "cuda", 0)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_ortvalue_output("y", target)
    sess.run_with_iobinding(binding)
    assert binding.get_outputs()[0] is target
    np.testing.assert_allclose(target.numpy(), opforge.InferenceSession(proto).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_io_binding_with_cupy_in_and_out():
    import cupy

    proto = cnn_model().SerializeToString()
    x = np.random.default_rng(7).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = opforge.InferenceSession(proto).run(None, {"x": x})[0]
    sess = opforge.InferenceSession(proto, providers=["CUDAExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", opforge.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    binding.bind_output("y", "cuda")
    for _ in range(2):
        sess.run_with_iobinding(binding)
        out = binding.get_outputs()[0]
        assert isinstance(out.value(), cupy.ndarray) and out.device_name() == "cuda"
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)
    got = sess.run_with_ort_values(None, {"x": opforge.OrtValue(cupy.asarray(x), "cuda", 0)})[0]
    assert isinstance(got.value(), cupy.ndarray)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.fixture
def stand_in_cupy(monkeypatch):
    import sys

    from tests.support import fake_cupy
    cp = fake_cupy.module()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp


def test_provider_options_pick_the_gpu_stream_and_memory_limit(stand_in_cupy):
    """device_id, gpu_mem_limit and user_compute_stream, as onnxruntime names them, on the
    provider's device object (with a stand-in cupy: the device is made without a GPU)."""
    from opforge.runtime.providers.cuda.device import CudaDevice

    device = CudaDevice({"device_id": 1, "gpu_mem_limit": 1 << 20})
    assert (device.id, device.name) == (1, "cuda:1")
    with stand_in_cupy.cuda.Device(1):
        assert device.pool.get_limit() == 1 << 20   # a pool's limit is per device, as in cupy
    assert device.pool.get_limit() == 0             # device 0's, which the session does not use
    assert device.stream.non_blocking and device.stream_ptr not in (0, None)
    with device.active():
        assert stand_in_cupy.cuda.Device().id == 1
        assert stand_in_cupy.cuda.get_current_stream() is device.stream
    assert stand_in_cupy.allocators == [device.pool.malloc]
    assert stand_in_cupy.cuda.Device().id == 0   # restored after the block
    caller = CudaDevice({"user_compute_stream": str(0x4660)})   # onnxruntime passes it as text too
    assert caller.stream_ptr == 0x4660 and caller.id == 0 and caller.pool.get_limit() == 0
    value = device.upload(np.arange(3, dtype=np.float32))
    assert hasattr(value, "__cuda_array_interface__") and value.device.id == 1
    assert device.download(value).tolist() == [0.0, 1.0, 2.0]


def test_session_passes_provider_options_to_its_gpu(stand_in_cupy, monkeypatch):
    from opforge.runtime import session as session_module

    monkeypatch.setattr(session_module, "_cuda_usable", lambda: True)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                       [helper.make_tensor_value_info("y", F, [2])])
    options = {"device_id": 1, "gpu_mem_limit": 4096, "user_compute_stream": 0x77}
    sess = opforge.InferenceSession(model.SerializeToString(), providers=[("CUDAExecutionProvider", options)])
    assert (sess.device.id, sess.device.stream_ptr) == (1, 0x77)
    with stand_in_cupy.cuda.Device(1):
        assert sess.device.pool.get_limit() == 4096


def test_gpu_mem_limit_caps_the_memory_of_the_sessions_gpu(cupy_gpu):
    """gpu_mem_limit with device_id 1: what the session allocates on GPU 1 is capped."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, ["N"])],
                       [helper.make_tensor_value_info("y", F, ["N"])])
    options = {"device_id": 1, "gpu_mem_limit": 4096}
    sess = opforge.InferenceSession(model.SerializeToString(), providers=[("CUDAExecutionProvider", options)])
    assert sess.run(None, {"x": -np.ones(16, np.float32)})[0].tolist() == [0.0] * 16
    with pytest.raises(opforge.runtime.KernelError, match="Out of memory allocating 8,192 bytes .* limit set "
                                                          "to: 4,096 bytes"):
        sess.run(None, {"x": np.ones(2048, np.float32)})


@pytest.mark.parametrize("missing", [None, "libnvrtc.so.13", "libcublas.so.13"])
def test_cuda_is_listed_only_where_cupy_runs_kernels(stand_in_cupy, monkeypatch, missing):
    """A GPU that cupy sees is not enough: without NVRTC cupy compiles no kernel, without
    cuBLAS it multiplies no matrix. CUDA is then not listed, and a session asking for it warns
    why (and what to install) and runs on the CPU."""
    from opforge.builder import cuda_driver

    def fails(*args, **kwargs):
        raise RuntimeError(f"{missing}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("90",), ""))
    if missing == "libnvrtc.so.13":
        monkeypatch.setattr(stand_in_cupy, "arange", fails)   # cupy's first kernel compile
    elif missing == "libcublas.so.13":
        monkeypatch.setattr(fake_cupy.ndarray, "__matmul__", fails)
    assert (CUDA in opforge.get_available_providers()) == (missing is None)
    if missing is not None:
        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                           [helper.make_tensor_value_info("y", F, [2])])
        with pytest.warns(RuntimeWarning, match=f"cupy cannot run kernels on the GPU \\(RuntimeError: {missing}.*"
                                                "cupy-cuda13x\\[ctk\\]"):
            sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
        assert sess.get_providers()[0] == CPU and sess.device is None


def test_gpu_that_cupy_cannot_use_means_cpu_with_a_warning(stand_in_cupy, monkeypatch):
    """The driver sees a GPU but is older than cupy's CUDA runtime: no CUDA provider, the
    session warns with cupy's reason and runs on the CPU."""
    from opforge.builder import cuda_driver

    def too_old():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("80",), ""))
    monkeypatch.setattr(stand_in_cupy.cuda.runtime, "getDeviceCount", too_old)
    assert CUDA not in opforge.get_available_providers()
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
                       [helper.make_tensor_value_info("y", F, [2])])
    with pytest.warns(RuntimeWarning, match="cupy cannot use the GPU .*InsufficientDriver"):
        sess = opforge.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    assert sess.get_providers()[0] == CPU and sess.device is None


def relu_atan_model():
    """x read on the GPU (Relu, then Add) and on the CPU (Atan)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Atan", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                      [helper.make_tensor_value_info("y", F, [3])]).SerializeToString()


X = np.array([-1.0, 0.5, 2.0], np.float32)
WANT = (np.maximum(X, 0) + np.arctan(X)).tolist()


def test_runs_wait_for_the_callers_stream_and_end_complete(cupy_gpu):
    """Feeds written on the caller's stream (a non-blocking one) are read on the session's
    stream, by its kernels and by the copy for the CPU's Atan, only after that work; outputs
    left on the GPU can be read on any stream when the run returns (onnxruntime waits at the
    end of Run). The stand-in cupy raises UnorderedRead for a read that is not ordered so."""
    cp = cupy_gpu
    sess = opforge.InferenceSession(relu_atan_model(), providers=["CUDAExecutionProvider"])
    caller, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with caller:
        feed = opforge.OrtValue.ortvalue_from_numpy(X, "cuda", 0)   # copied on the caller's stream
        y = sess.run_with_ort_values(None, {"x": feed})[0]
        np.testing.assert_allclose(y.numpy(), WANT, rtol=1e-6)
        feed.update_inplace(-X)
        y = sess.run_with_ort_values(None, {"x": feed})[0]
    np.testing.assert_allclose(cp.asnumpy(y.value(), stream=other), np.maximum(-X, 0) + np.arctan(-X), rtol=1e-6)
    with caller:
        assert np.allclose(sess.run(None, {"x": cp.asarray(X)})[0], WANT)


def test_io_binding_on_the_callers_stream(cupy_gpu):
    """Inputs bound on the caller's stream, outputs given back in device memory and copied
    into a bound device buffer, all read there after the run."""
    cp = cupy_gpu
    sess = opforge.InferenceSession(relu_atan_model(), providers=["CUDAExecutionProvider"])
    caller = cp.cuda.Stream(non_blocking=True)
    with caller:
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", opforge.OrtValue(cp.asarray(X), "cuda", 0))
        target = opforge.OrtValue.ortvalue_from_shape_and_type([3], np.float32, "cuda", 0)
        binding.bind_ortvalue_output("y", target)
        sess.run_with_iobinding(binding)
        np.testing.assert_allclose(target.numpy(), WANT, rtol=1e-6)
        binding.bind_output("y", "cuda")
        sess.run_with_iobinding(binding)
        np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], WANT, rtol=1e-6)


def test_io_binding_synchronize_calls_wait_for_the_gpu(cupy_gpu):
    """synchronize_inputs waits for the writes of bound inputs; after a run that does not wait
    at its end (disable_synchronize_execution_providers), the caller's stream may read the
    outputs, and synchronize_outputs lets any stream read them."""
    cp = cupy_gpu
    sess = opforge.InferenceSession(relu_atan_model(), providers=["CUDAExecutionProvider"])
    writer, reader = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with writer:
        x = cp.asarray(X)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", opforge.OrtValue(x, "cuda", 0))
    binding.synchronize_inputs()
    assert cp.asnumpy(x, stream=reader).tolist() == X.tolist()
    options = opforge.RunOptions()
    options.add_run_config_entry("disable_synchronize_execution_providers", "1")
    binding.bind_output("y", "cuda")
    sess.run_with_iobinding(binding, options)
    y = binding.get_outputs()[0].value()
    np.testing.assert_allclose(cp.asnumpy(y), WANT, rtol=1e-6)    # on the caller's (null) stream
    with pytest.raises(fake_cupy.UnorderedRead):
        cp.asnumpy(sess.run_with_ort_values(None, {"x": opforge.OrtValue(x, "cuda", 0)}, options)[0].value(),
                   stream=reader)
    binding.synchronize_outputs()
    np.testing.assert_allclose(cp.asnumpy(y, stream=reader), WANT, rtol=1e-6)


@pytest.mark.cuda
def test_user_compute_stream_from_a_cupy_stream():
    """The session launches on the caller's cupy stream: the caller's work before and after a
    run is ordered with it without a host wait in between."""
    import cupy

    proto = cnn_model().SerializeToString()
    x = np.random.default_rng(8).standard_normal((8, 3, 16, 16)).astype(np.float32)
    expected = opforge.InferenceSession(proto).run(None, {"x": x})[0]
    stream = cupy.cuda.Stream(non_blocking=True)
    options = {"user_compute_stream": str(stream.ptr)}
    sess = opforge.InferenceSession(proto, providers=[("CUDAExecutionProvider", options)])
    assert sess.device.stream_ptr == stream.ptr
    with stream:
        x_gpu = cupy.asarray(x) * 1   # queued on the stream, as the run is
        y = sess.run_with_ort_values(None, {"x": opforge.OrtValue(x_gpu, "cuda", 0)})[0].value() * 2
    stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(y), 2 * expected, rtol=1e-3, atol=1e-5)
