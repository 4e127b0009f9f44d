"""Op definitions over opset ranges: .since()/.until(), attributes and dtypes added in a later
opset, and two definitions claiming the same opset."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import opforge
from opforge.runtime.errors import KernelNotFoundError

# Scale: y = x * factor + offset. Opset 2 adds 'offset', opset 3 float64; opset 5 redefines the
# op as y = -x (a different compute, so a test sees which definition ran).
VERSIONED = """#include <opforge/op.h>

template <class T> static void scale(opforge::KernelContext& ctx) {
  const opforge::Tensor x = ctx.input(0);
  const T f = T(ctx.attr<float>("factor")), o = T(ctx.attr<float>("offset"));
  const T* xp = x.data<T>();
  T* yp = ctx.output(0).data<T>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] * f + o;
}
static void scale_run(opforge::KernelContext& ctx) {
  if (ctx.input(0).dtype() == opforge::f64) scale<double>(ctx); else scale<float>(ctx);
}
static void negate_run(opforge::KernelContext& ctx) {
  const float* xp = ctx.input(0).data<float>();
  float* yp = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) yp[i] = -xp[i];
}

OPFORGE_OP(Scale)
    .domain("com.versions")
    .since(1)
    .input("X", {opforge::f32}).dtypes_since(3, {opforge::f64})
    .output("Y")
    .attr("factor", 2.0f)
    .attr("offset", 0.0f).attr_versions(2)
    .infer(opforge::same_as_input0)
    .compute(scale_run);

OPFORGE_OP(Scale)
    .domain("com.versions")
    .since(5)
    .input("X", {opforge::f32})
    .output("Y")
    .infer(opforge::same_as_input0)
    .compute(negate_run);

OPFORGE_OP(Capped)
    .domain("com.versions")
    .since(1)
    .until(2)
    .input("X", {opforge::f32})
    .output("Y")
    .infer(opforge::same_as_input0)
    .compute(negate_run);
"""


@pytest.fixture(scope="module")
def versioned(tmp_path_factory):
    src = tmp_path_factory.mktemp("versions") / "scale.cpp"
    src.write_text(VERSIONED)
    return opforge.CustomOpBuilder("versioned_scale", [src]).load()


def scale_model(version, dtype=TensorProto.FLOAT, op="Scale", **attrs):
    node = helper.make_node(op, ["x"], ["y"], domain="com.versions", **attrs)
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", dtype, [4])],
                              [helper.make_tensor_value_info("y", dtype, [4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.versions", version)])
    m.ir_version = 8
    return m


def run(lib, model, dtype=np.float32):
    x = np.array([1.0, -2.0, 3.5, 0.25], dtype)
    return x, opforge.InferenceSession(model, custom_ops=[lib]).run(None, {"x": x})[0]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_the_first_definition_serves_until_the_next_begins(versioned, version):
    x, y = run(versioned, scale_model(version, factor=3.0))
    np.testing.assert_array_equal(y, x * 3.0)


def test_the_later_definition_serves_from_its_since(versioned):
    x, y = run(versioned, scale_model(5))
    np.testing.assert_array_equal(y, -x)


def test_a_definition_is_never_used_past_its_until(versioned):
    x, y = run(versioned, scale_model(2, op="Capped"))
    np.testing.assert_array_equal(y, -x)
    with pytest.raises(KernelNotFoundError, match=r"no kernel for .*Capped, domain 'com.versions'\) at opset 3"):
        run(versioned, scale_model(3, op="Capped"))


def test_an_attribute_counts_from_the_opset_that_added_it(versioned):
    x, y = run(versioned, scale_model(2, factor=3.0, offset=1.0))
    np.testing.assert_array_equal(y, x * 3.0 + 1.0)
    with pytest.raises(KernelNotFoundError, match=r"attribute 'offset' exists in opsets 2 on only; this node is of opset 1"):
        run(versioned, scale_model(1, factor=3.0, offset=1.0))


def test_a_dtype_counts_from_the_opset_that_added_it(versioned):
    x, y = run(versioned, scale_model(3, TensorProto.DOUBLE, factor=3.0), np.float64)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, x * 3.0)
    with pytest.raises(KernelNotFoundError, match=r"(?s)does not take float64 for input 'X' at opset 2"):
        run(versioned, scale_model(2, TensorProto.DOUBLE), np.float64)


def test_help_names_each_definitions_range(versioned):
    ranges = sorted((s["since_version"], s["until_version"]) for s in
                    (h.schema() for h in versioned.op_table if h.name == "Scale"))
    assert ranges == [(1, 4), (5, 0)]


@pytest.mark.parametrize("second, shared", [
    (".since(1)", "(opsets 1 on) and at"),    # the same since
    (".since(3)", "(opsets 1-4) and at"),     # an explicit until past the next one's since
])
def test_two_definitions_of_one_opset_are_refused_naming_both(cache_dir, tmp_path, second, shared):
    first = ".since(1).until(4)" if second == ".since(3)" else ".since(1)"
    src = tmp_path / "twice.cpp"
    src.write_text(
        "#include <opforge/op.h>\n"
        "static void run(opforge::KernelContext&) {}\n"
        f'OPFORGE_OP(twice){first}.input("X").output("Y").infer(opforge::same_as_input0).compute(run);\n'
        f'OPFORGE_OP(twice){second}.input("X").output("Y").infer(opforge::same_as_input0).compute(run);\n')
    with pytest.raises(ValueError) as info:
        opforge.CustomOpBuilder("twice", [src]).load()
    message = str(info.value)
    assert "op 'twice'" in message and "defined twice for the same opsets" in message
    assert f"{src.name}:3" in message and f"{src.name}:4" in message, message
    assert shared in message, message
