"""A small CNN whose activation is a custom op, Swish, written in CUDA (swish.cu) with a CPU twin
(swish_cpu.cpp). On a machine with a GPU (nvcc, cupy) the model runs on the CUDA provider with
the CUDA kernel; elsewhere the same model runs on the CPU with the twin.

    python examples/cuda/swish_model.py
"""
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import opforge

HERE = Path(__file__).resolve().parent


def build_model(seed: int = 0) -> onnx.ModelProto:
    """x -> Conv -> Swish -> Conv -> Swish -> GlobalAveragePool -> Flatten -> Gemm -> y."""
    rng = np.random.default_rng(seed)
    weights = {"w1": (16, 3, 3, 3), "w2": (32, 16, 3, 3), "wf": (10, 32)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n) for n, s in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Swish", ["c1"], ["s1"], domain="com.example", beta=1.0),
             helper.make_node("Conv", ["s1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Swish", ["c2"], ["s2"], domain="com.example", beta=1.5),
             helper.make_node("GlobalAveragePool", ["s2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "swish_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def libraries() -> list:
    """The CPU twin always; the CUDA op too where a GPU can run it."""
    found = [opforge.CustomOpBuilder("swish_cpu", [HERE / "swish_cpu.cpp"]).load()]
    if "CUDAExecutionProvider" in opforge.get_available_providers():
        found.insert(0, opforge.CustomOpBuilder("swish_cuda", [HERE / "swish.cu"]).load())
    return found


def main() -> None:
    model = build_model().SerializeToString()
    x = np.random.default_rng(1).standard_normal((4, 3, 32, 32)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # without a GPU the session says it runs on the CPU
        sess = opforge.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
                                        custom_ops=libraries())
    y, = sess.run(None, {"x": x})
    reference, = opforge.InferenceSession(model, custom_ops=[libraries()[-1]]).run(None, {"x": x})
    for name, op_type, provider in sess.node_providers():
        print(f"  {op_type:<20}{provider}")
    print("output", y.shape, "max |GPU or CPU run - CPU run| =", float(np.abs(y - reference).max()))
    assert np.allclose(y, reference, rtol=1e-3, atol=1e-4)


if __name__ == "__main__":
    main()
