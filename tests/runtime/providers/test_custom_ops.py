"""Custom ops in sessions: C++ libraries, source paths and folders, Python ops, mappings."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import opforge
from tests.support.helpers import EXAMPLES
from opforge.runtime.errors import KernelNotFoundError


def model(nodes, inputs, outputs, opsets, initializers=()):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    m.ir_version = 8
    return m


def tensor(name, shape=None, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture(scope="module")
def example_ops():
    return opforge.load_dir(EXAMPLES / "ops")


def leaky_model():
    return model([helper.make_node("Relu", ["x"], ["r"]),
                  helper.make_node("leaky_relu", ["x"], ["l"], domain="com.example", alpha=0.3),
                  helper.make_node("add_n", ["r", "l", "x"], ["y"], domain="com.example")],
                 [tensor("x", [3, 4])], [tensor("y", [3, 4])], {"": 17, "com.example": 1})


def expected_leaky(x):
    return np.maximum(x, 0) + np.where(x > 0, x, 0.3 * x) + x


@pytest.mark.parametrize("how", ["library", "folder", "source"])
def test_cpp_ops_from_a_library_a_folder_or_a_source(example_ops, how):
    entry = {"library": example_ops, "folder": EXAMPLES / "ops",
             "source": None}[how]
    custom = [entry] if how != "source" else [str(EXAMPLES / "ops" / "activations.cpp"),
                                              str(EXAMPLES / "ops" / "add_n.cpp")]
    sess = opforge.InferenceSession(leaky_model(), custom_ops=custom)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for _ in range(3):  # first run records, later runs use the compiled plan
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected_leaky(x), rtol=1e-6)
    assert ("", "leaky_relu", "CPUExecutionProvider") in sess.node_providers()


def test_custom_op_shapes_flow_into_type_inference(example_ops):
    sess = opforge.InferenceSession(leaky_model(), custom_ops=[example_ops])
    assert sess.types.get("l").shape == (3, 4)
    assert sess.types.get("y").dtype == np.float32


def test_python_op_with_schema_and_shape_function():
    @opforge.custom_op("Swish", domain="com.py", attrs={"beta": 1.0}, infer=lambda x, beta: [x])
    def swish(x, beta=1.0):
        return x / (1 + np.exp(-beta * x))

    m = model([helper.make_node("Swish", ["x"], ["s"], domain="com.py", beta=2.0),
               helper.make_node("Relu", ["s"], ["y"])],
              [tensor("x", [5])], [tensor("y", [5])], {"": 17, "com.py": 1})
    sess = opforge.InferenceSession(m, custom_ops=[swish])
    x = np.linspace(-2, 2, 5, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x / (1 + np.exp(-2 * x)), 0),
                                   rtol=1e-6)
    assert sess.types.get("y").shape == (5,)
    assert swish(np.zeros(1, np.float32))[0] == 0.0   # eager call


def test_mapping_one_to_one_renames_attributes():
    m = model([helper.make_node("VendorLeaky", ["x"], ["y"], domain="com.vendor", slope=0.5)],
              [tensor("x", [4])], [tensor("y", [4])], {"": 17, "com.vendor": 1})
    mapping = opforge.OpMapping("com.vendor::1::VendorLeaky", target="LeakyRelu", attrs={"slope": "alpha"})
    sess = opforge.InferenceSession(m, custom_ops=[mapping])
    x = np.array([-2, -1, 1, 2], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], [-1, -0.5, 1, 2])
    assert sess.mapped_nodes == 1


def test_mapping_one_to_many_builds_a_subgraph():
    def scaled_add(n):
        return [helper.make_node("Mul", [n.inputs[1], n.constant("alpha", np.float32(n.attrs["alpha"]))],
                                 [n.temp("scaled")]),
                helper.make_node("Add", [n.inputs[0], n.temp("scaled")], n.outputs)]

    m = model([helper.make_node("ScaledAdd", ["a", "b"], ["y"], domain="com.vendor", alpha=3.0)],
              [tensor("a", [3]), tensor("b", [3])], [tensor("y", [3])], {"": 17, "com.vendor": 1})
    sess = opforge.InferenceSession(m, custom_ops=[opforge.OpMapping("com.vendor::1::ScaledAdd",
                                                                     subgraph=scaled_add)])
    a, b = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(sess.run(None, {"a": a, "b": b})[0], a + 3 * b)


def test_mapping_source_must_be_well_formed():
    with pytest.raises(ValueError, match="domain::version::OpType"):
        opforge.OpMapping("AddN", target="Sum")


def test_custom_op_overrides_a_builtin():
    @opforge.custom_op("Relu", domain="")
    def fake_relu(x):
        return np.full_like(x, 7.0)

    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])], {"": 17})
    sess = opforge.InferenceSession(m, custom_ops=[fake_relu])
    assert sess.run(None, {"x": np.zeros(2, np.float32)})[0].tolist() == [7.0, 7.0]


def test_missing_kernel_error_names_node_and_says_how_to_fix():
    m = model([helper.make_node("Mystery", ["x"], ["y"], name="the_node", domain="com.unknown")],
              [tensor("x", [2])], [tensor("y", [2])], {"": 17, "com.unknown": 3})
    with pytest.raises(KernelNotFoundError) as info:
        opforge.InferenceSession(m)
    text = str(info.value)
    for part in ("the_node", "Mystery", "com.unknown", "opset 3", "custom_ops=", "CustomOpBuilder",
                 "opforge.custom_op", "OpMapping"):
        assert part in text, part


def test_bad_custom_ops_entry_is_named():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])], {"": 17})
    with pytest.raises(TypeError, match="custom_ops entry 42 is not an op library"):
        opforge.InferenceSession(m, custom_ops=[42])


def test_failing_custom_op_names_the_node(example_ops):
    m = model([helper.make_node("softmax_rows", ["x"], ["y"], name="sm", domain="com.example",
                                temperature=-1.0)],
              [tensor("x", [2, 2])], [tensor("y", [2, 2])], {"": 17, "com.example": 1})
    sess = opforge.InferenceSession(m, custom_ops=[example_ops])
    for _ in range(2):
        with pytest.raises(opforge.OpError, match="sm.*temperature must be positive"):
            sess.run(None, {"x": np.ones((2, 2), np.float32)})


CHECKED_OPS = r"""
#include <cstring>
#include <opforge/op.h>

static void copy_x(opforge::KernelContext& ctx) {
  std::memcpy(ctx.output(0).raw(), ctx.input(0).raw(), size_t(ctx.input(0).nbytes()));
}
static void dtype_1000(opforge::InferContext& ctx) { ctx.set_output(0, int32_t(1000), ctx.input(0).sizes()); }
static void first_only(opforge::InferContext& ctx) { ctx.set_output_like(0, 0); }

OPFORGE_OP(bad_dtype).domain("com.checked").input("X", {opforge::f32}).output("Y")
    .infer(dtype_1000).compute(copy_x);
OPFORGE_OP(maybe_two).domain("com.checked").input("X", {opforge::f32}).output("Y").optional_output("Z")
    .infer(first_only).compute(copy_x);
OPFORGE_OP(pair).domain("com.checked").input("A", {opforge::f32}).input("B", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(copy_x);
"""


@pytest.fixture(scope="module")
def checked_ops():
    return opforge.load_inline("checked_ops", CHECKED_OPS)


def checked_model(op_type, inputs, outputs):
    node = helper.make_node(op_type, inputs, outputs, name="n", domain="com.checked")
    return model([node], [tensor("x", [2, 3])], [tensor(o, None) for o in outputs if o],
                 {"": 17, "com.checked": 1})


def test_custom_infer_declaring_an_unknown_dtype_is_refused_naming_the_op(checked_ops):
    sess = opforge.InferenceSession(checked_model("bad_dtype", ["x"], ["y"]), custom_ops=[checked_ops])
    with pytest.raises(opforge.OpError, match="node 'n' \\(bad_dtype.*the unknown dtype 1000"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})


def test_an_output_the_node_names_but_the_op_leaves_unset_is_refused(checked_ops):
    sess = opforge.InferenceSession(checked_model("maybe_two", ["x"], ["y", "z"]), custom_ops=[checked_ops])
    with pytest.raises(opforge.OpError, match="node 'n' \\(maybe_two.*reads output 'Z' \\(#1\\), which infer did not make"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    sess = opforge.InferenceSession(checked_model("maybe_two", ["x"], ["y", ""]), custom_ops=[checked_ops])
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


@pytest.mark.parametrize("op_type, inputs, outputs, says", [
    ("bad_dtype", ["x"], ["y", "z"], "bad_dtype has 1 output\\(s\\), the node names 2"),
    ("pair", ["x"], ["y"], "pair takes 2 inputs, the node gives 1"),
    ("pair", ["x", ""], ["y"], "pair's input #1 'B' is required, the node leaves it out"),
    ("bad_dtype", ["x", "x"], ["y"], "bad_dtype takes 1 input, the node gives 2"),
])
def test_a_node_its_custom_op_cannot_serve_is_refused_at_session_creation(checked_ops, op_type, inputs,
                                                                          outputs, says):
    with pytest.raises(KernelNotFoundError, match=f"node 'n' \\({op_type}.*{says}"):
        opforge.InferenceSession(checked_model(op_type, inputs, outputs), custom_ops=[checked_ops])


def python_op_model():
    return model([helper.make_node("Twice", ["x"], ["y"], name="t", domain="com.py")],
                 [tensor("x", [2, 3])], [tensor("y", None)], {"": 17, "com.py": 1})


@pytest.mark.parametrize("result, says", [
    (lambda x: (2 * x).astype(np.float64), "returned float64\\[2, 3\\] for output 'y'; its infer says float32"),
    (lambda x: np.concatenate([x, x]), "returned float32\\[4, 3\\] for output 'y'; its infer says float32\\[2, 3\\]"),
    (lambda x: None, "returned None for output 'y'"),
])
def test_a_python_op_result_unlike_its_infer_is_refused(result, says):
    op = opforge.custom_op("Twice", domain="com.py", infer=lambda x: [x])(result)
    sess = opforge.InferenceSession(python_op_model(), custom_ops=[op])
    with pytest.raises(opforge.runtime.KernelError, match=f"node 't' \\(Twice.*{says}"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})


def test_a_python_op_infer_that_returns_no_types_is_refused_naming_the_node():
    op = opforge.custom_op("Twice", domain="com.py", infer=lambda x: [("no such dtype", [2])])(lambda x: 2 * x)
    with pytest.raises(opforge.runtime.GraphError, match="node 't' \\(Twice.*infer of Python op Twice returned"):
        opforge.InferenceSession(python_op_model(), custom_ops=[op])


def test_a_python_op_string_attribute_that_is_not_utf8_is_refused_naming_the_node():
    op = opforge.custom_op("Twice", domain="com.py", attrs={"mode": "a"})(lambda x, mode: 2 * x)
    proto = python_op_model()
    proto.graph.node[0].attribute.append(helper.make_attribute("mode", b"\xff"))
    with pytest.raises(opforge.runtime.KernelError, match="node 't' \\(Twice.*not UTF-8"):
        opforge.InferenceSession(proto, custom_ops=[op]).run(None, {"x": np.ones((2, 3), np.float32)})
