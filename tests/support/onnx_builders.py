"""Small ONNX models for the runtime tests, and an onnxruntime oracle to compare against."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17


def tensor(name: str, shape, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, initializers=(), opset=OPSET, functions=(), **kwargs):
    """A model with the given nodes and value infos, importing ai.onnx at ``opset``."""
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs),
                              initializer=list(initializers))
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(d, 1) for d in sorted({f.domain for f in functions})]
    proto = helper.make_model(graph, opset_imports=imports, functions=list(functions), **kwargs)
    proto.ir_version = 9
    return proto


def chain_model() -> onnx.ModelProto:
    """x -> Relu -> Neg -> Abs -> y, with nodes named a, b, c."""
    return model([helper.make_node("Relu", ["x"], ["r"], name="a"),
                  helper.make_node("Neg", ["r"], ["n"], name="b"),
                  helper.make_node("Abs", ["n"], ["y"], name="c")],
                 [tensor("x", ["N", 3])], [tensor("y", ["N", 3])])


def onnxruntime_outputs(proto: onnx.ModelProto, feed: dict) -> list:
    """The oracle: what onnxruntime computes for ``proto`` on ``feed``."""
    import onnxruntime

    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def assert_same(actual: list, expected: list) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
        assert np.asarray(a).dtype == np.asarray(e).dtype
