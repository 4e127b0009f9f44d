"""How ops, libraries, sessions and plans show themselves: help(op), printed tables, notebook HTML."""
import pydoc

import numpy as np
import pytest
from onnx import TensorProto, helper

import opforge

SOURCE = r"""
#include <opforge/op.h>
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  float scale = ctx.attr<float>("scale");
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = scale * x[i];
}
OPFORGE_OP(Scale).domain("com.example").input("X", {opforge::f32}).output("Y")
    .attr("scale", 2.0f).optional_attr("note", opforge::AttrType::String)
    .infer(opforge::same_as_input0).compute(run);
OPFORGE_OP(Tag_1).domain("com.example").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(run);
"""


@pytest.fixture(scope="module")
def library():
    return opforge.load_inline("display_ops", cpp_source=SOURCE.replace("Tag_1", "Tag<b>"))


def test_help_shows_the_schema_and_no_python_machinery(library):
    text = pydoc.render_doc(library.Scale, renderer=pydoc.plaintext)
    for expected in ("Scale(X, /, *, scale=2.0, note=None)", "domain 'com.example', since version 1",
                     "Inputs:\n      X: float32", "Outputs:\n      Y", "scale: float = 2.0", "note: str (optional)"):
        assert expected in text, text
    for noise in ("__call__", "__weakref__", "Method resolution order", "__init__", "handle"):
        assert noise not in text, text
    assert library.Scale(np.ones(3, np.float32)).tolist() == [2.0, 2.0, 2.0]   # still callable


def test_op_table_and_library_print_as_tables(library):
    rows = repr(library.op_table).splitlines()
    assert rows[0].split() == ["op", "domain", "since", "backend", "inputs", "outputs", "attributes"]
    assert rows[1].split() == ["Scale", "com.example", "1", "CPU", "X:", "float32", "Y", "scale=2.0,", "note"]
    assert rows[2].split()[:2] == ["Tag<b>", "com.example"] and len(rows) == 3
    text = repr(library)
    assert text.startswith("opforge library 'display_ops' (2 ops) from ") and text.endswith(rows[2])
    html = library._repr_html_()
    assert "<td>Scale</td>" in html and "Tag&lt;b&gt;" in html and "Tag<b>" not in html   # escaped


def test_library_of_builtin_kernels_prints_every_version():
    from opforge.runtime.providers.cpu.library import cpu_kernels

    text = repr(cpu_kernels().op_table)
    softmax = [line.split()[:3] for line in text.splitlines() if line.startswith("Softmax ")]
    assert ["Softmax", "ai.onnx", "1"] in softmax and ["Softmax", "ai.onnx", "13"] in softmax


def _model():
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Scale", ["h"], ["y"], domain="com.example")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def test_session_shows_inputs_outputs_and_providers(library):
    sess = opforge.InferenceSession(_model(), custom_ops=[library])
    lines = repr(sess).splitlines()
    assert lines[0] == "opforge InferenceSession"
    assert lines[2].split() == ["input", "x", "tensor(float)", "['n',", "3]"]
    assert lines[3].split() == ["output", "y", "tensor(float)", "['n',", "3]"]
    assert ["provider", "CPUExecutionProvider", "2", "nodes"] in [line.split() for line in lines]
    html = sess._repr_html_()
    assert html.startswith("<table><caption>opforge InferenceSession</caption>")
    assert "<td>input</td><td>x</td><td>tensor(float)</td>" in html and "CPUExecutionProvider" in html


def test_plan_dump_prints_and_shows_as_html(library):
    sess = opforge.InferenceSession(_model(), custom_ops=[library])
    feed = {"x": np.array([[-1.0, 2.0, 3.0]], np.float32)}
    for _ in range(2):
        y, = sess.run(None, feed)
    np.testing.assert_array_equal(y, [[0.0, 4.0, 6.0]])
    plan = sess.memory_plan(feed)
    assert repr(plan) == plan.dump() and "memory plan: arena" in repr(plan)
    html = plan._repr_html_()
    assert html.startswith("<p>2 steps</p><table><caption>memory plan: arena")
    assert "<th>offset</th>" in html and "<td>h</td>" in html
