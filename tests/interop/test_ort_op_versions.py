"""Per-version op definitions in plain onnxruntime (opforge/interop/ort_adapter/register.cpp).
onnxruntime gives every node of a custom op the kernel of its first registration, whatever the
model's opset, and does not tell a kernel its node's opset: the newest definition of each op is
registered, from its since-version, and its attributes and dtypes of some versions are taken as
an eager call without a version takes them."""
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import opforge
from tests.support.ort_interop import ort_session

# Scale: y = x * factor + offset + bias: 'offset' from opset 2, float64 from 3, 'bias' (required)
# from 4; opset 6 redefines it as y = -x. Shift: one definition, y = x + by (by from opset 3).
VERSIONED = r"""#include <opforge/op.h>

template <class T> static void scale(opforge::KernelContext& ctx) {
  const opforge::Tensor x = ctx.input(0);
  const T f = T(ctx.attr<float>("factor")), o = T(ctx.attr<float>("offset"));
  const T b = ctx.has_attr("bias") ? T(ctx.attr<float>("bias")) : T(0);
  const T* xp = x.data<T>();
  T* yp = ctx.output(0).data<T>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] * f + o + b;
}
static void scale_run(opforge::KernelContext& ctx) {
  if (ctx.input(0).dtype() == opforge::f64) scale<double>(ctx); else scale<float>(ctx);
}
static void negate_run(opforge::KernelContext& ctx) {
  const float* xp = ctx.input(0).data<float>();
  float* yp = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) yp[i] = -xp[i];
}

OPFORGE_OP(Scale).domain("com.versions").since(1)
    .input("X", {opforge::f32}).dtypes_since(3, {opforge::f64})
    .output("Y")
    .attr("factor", 2.0f)
    .attr("offset", 0.0f).attr_versions(2)
    .required_attr("bias", opforge::AttrType::Float).attr_versions(4)
    .infer(opforge::same_as_input0)
    .compute(scale_run);

OPFORGE_OP(Scale).domain("com.versions").since(6)
    .input("X", {opforge::f32})
    .output("Y")
    .infer(opforge::same_as_input0)
    .compute(negate_run);

OPFORGE_OP(Shift).domain("com.versions").since(1)
    .input("X", {opforge::f32}).dtypes_since(3, {opforge::f64})
    .output("Y")
    .attr("factor", 2.0f)
    .attr("offset", 0.0f).attr_versions(2)
    .required_attr("bias", opforge::AttrType::Float).attr_versions(4)
    .infer(opforge::same_as_input0)
    .compute(scale_run);
"""

X = np.array([1.0, -2.0, 3.5, 0.25])


@pytest.fixture(scope="module")
def versioned(shared_cache, tmp_path_factory):
    src = tmp_path_factory.mktemp("ort_versions") / "scale.cpp"
    src.write_text(VERSIONED)
    return opforge.CustomOpBuilder("ort_versioned_scale", [src]).load()


@pytest.fixture(scope="module")
def ort_lib(versioned):
    return versioned.onnxruntime_library()


def scale_model(version: int, elem=T.FLOAT, op="Scale", **attrs):
    node = helper.make_node(op, ["x"], ["y"], domain="com.versions", **attrs)
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", elem, [4])],
                              [helper.make_tensor_value_info("y", elem, [4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.versions", version)])
    proto.ir_version = 8
    return proto


@pytest.mark.parametrize("version", [6, 7])
def test_the_newest_definition_runs_from_its_since_version(versioned, ort_lib, version):
    x = X.astype(np.float32)
    got = ort_session(scale_model(version), ort_lib).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, versioned.op("Scale", version=version)(x))
    np.testing.assert_array_equal(got, -x)


def test_an_older_opset_is_refused_rather_than_run_as_another_version(ort_lib):
    with pytest.raises(Exception, match=r"com.versions:Scale.* is not a registered"):
        ort_session(scale_model(3, factor=3.0), ort_lib)


@pytest.mark.parametrize("version, attrs, want", [
    (1, dict(factor=3.0), X * 3.0),
    (2, dict(factor=3.0, offset=1.0), X * 3.0 + 1.0),
    (5, dict(offset=1.0, bias=0.5), X * 2.0 + 1.5),
])
def test_attributes_of_some_versions_are_read_as_an_unversioned_eager_call_reads_them(versioned, ort_lib, version,
                                                                                       attrs, want):
    x = X.astype(np.float32)
    got = ort_session(scale_model(version, op="Shift", **attrs), ort_lib).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, versioned.Shift(x, **attrs))
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_dtypes_of_some_versions_are_taken(ort_lib):
    x = X.astype(np.float64)
    got = ort_session(scale_model(1, T.DOUBLE, op="Shift", factor=3.0), ort_lib).run(None, {"x": x})[0]
    assert got.dtype == np.float64 and got.tolist() == (x * 3.0).tolist()
