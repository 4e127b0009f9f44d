"""The quickstart demo: build C++ ops from examples/ops, call one eagerly, then run an ONNX model
that uses them on opforge's runtime and check the result against numpy.

    python examples/demo.py
"""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opforge

HERE = Path(__file__).resolve().parent


def build_model() -> onnx.ModelProto:
    """x -> MatMul(w) -> com.example::leaky_relu -> com.example::softmax_rows -> y."""
    w = np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("leaky_relu", ["h"], ["a"], domain="com.example", alpha=0.1),
        helper.make_node("softmax_rows", ["a"], ["y"], domain="com.example", temperature=0.5),
    ]
    graph = helper.make_graph(nodes, "demo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example", 1)])


def numpy_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w = numpy_helper.to_array(model.graph.initializer[0])
    h = x @ w
    a = np.where(h > 0, h, 0.1 * h)
    e = np.exp((a - a.max(-1, keepdims=True)) / 0.5)
    return e / e.sum(-1, keepdims=True)


def main() -> None:
    ops = opforge.load_dir(HERE / "ops")                 # every .cpp in the folder, one cached library
    print(ops)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    print("eager leaky_relu:", ops.leaky_relu(x[0, :4], alpha=0.1))

    model = build_model()
    sess = opforge.InferenceSession(model, custom_ops=[ops])
    print("kernels:", ", ".join(f"{op} on {provider}" for _, op, provider in sess.node_providers()))
    y, = sess.run(None, {"x": x})
    y_again, = sess.run(None, {"x": x})               # the second run goes through the compiled plan
    expected = numpy_reference(model, x)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_again, expected, rtol=1e-5, atol=1e-6)
    print("model output (first row):", np.round(y[0], 4))
    print("checked against a numpy implementation of the same model: max abs error "
          f"{np.abs(y - expected).max():.2e}")


if __name__ == "__main__":
    main()
