"""The light_* model-zoo graphs from the onnx wheel, with seeded random weights instead of constants.

Every weight in those graphs is one repeated value made by a ConstantOfShape node, so their outputs
ignore the input and a comparison of outputs checks almost nothing. `light_model` keeps each graph
and replaces every float weight (ConstantOfShape output or initializer) by a seeded random
initializer of the same shape, scaled by the role its consumer gives it (He-scaled convolution and
dense weights, BatchNormalization statistics with positive variances, small biases), so that
activations stay in range and the output depends on the input. Also used by benchmarks/.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

# Nodes a weight passes through unchanged on its way to the node that gives it a role.
_PASS_THROUGH = {"Unsqueeze", "Reshape", "Squeeze", "Identity", "Flatten"}


def light_model_names() -> list[str]:
    """The names of the light models (``light_resnet50`` ...); raises if the wheel has none."""
    names = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
    if not names:
        raise FileNotFoundError(f"no light_*.onnx models in {LIGHT}: the installed onnx wheel "
                                "does not ship the light model zoo the model tests need")
    return names


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The light model ``name`` with seeded random weights of the original shapes."""
    model = onnx.load(str(LIGHT / f"{name}.onnx"))
    randomize_weights(model, np.random.default_rng(seed))
    return model


def randomize_weights(model: onnx.ModelProto, rng: np.random.Generator) -> None:
    """Replace, in place, every float constant of ``model.graph`` by a random initializer."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    consumers = _consumers(graph)
    weights = {}
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and _is_float_fill(node) and node.input[0] in inits:
            shape = numpy_helper.to_array(inits[node.input[0]]).astype(np.int64).tolist()
            weights[node.output[0]] = shape
    for tensor in graph.initializer:
        if tensor.data_type == TensorProto.FLOAT and tensor.name in consumers:
            weights[tensor.name] = list(tensor.dims)
    kept = [n for n in graph.node if not (n.op_type == "ConstantOfShape" and n.output[0] in weights)]
    new = {name: numpy_helper.from_array(_random(shape, _role(name, consumers), rng), name)
           for name, shape in weights.items()}
    used = {i for n in kept for i in n.input} | set(new)
    keep_init = [t for t in graph.initializer if t.name in used and t.name not in new]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(keep_init + list(new.values()))
    inputs = [v for v in graph.input if v.name in used or v.name not in inits]
    del graph.input[:]
    graph.input.extend(inputs)


def _is_float_fill(node: onnx.NodeProto) -> bool:
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    return value is None or value.data_type == TensorProto.FLOAT


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    found: dict[str, list] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            found.setdefault(name, []).append((node, index))
    return found


def _role(name: str, consumers: dict) -> tuple[str, int, dict]:
    """(op type, input index, attributes) of the first node that uses ``name`` as more than a
    reshaped copy of itself; attributes gain ``residual`` when that node's output is summed
    with another branch."""
    for _ in range(4):
        uses = consumers.get(name, [])
        if not uses:
            return ("", 0, {})
        node, index = uses[0]
        if node.op_type not in _PASS_THROUGH or index != 0:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs["residual"] = any(user.op_type in ("Sum", "Add")
                                    for user, _ in consumers.get(node.output[0], []))
            return node.op_type, index, attrs
        name = node.output[0]
    return ("", 0, {})


def _random(shape: list[int], role: tuple, rng: np.random.Generator) -> np.ndarray:
    op, index, attrs = role
    normal = lambda std: rng.standard_normal(shape) * std  # noqa: E731
    if op == "Conv" and index == 1:
        fan_in = int(np.prod(shape[1:])) or 1
        values = normal(np.sqrt(2.0 / fan_in))
    elif op == "Gemm" and index == 1:
        fan_in = shape[1] if attrs.get("transB", 0) else shape[0]
        values = normal(np.sqrt(2.0 / max(fan_in, 1)))
    elif op == "BatchNormalization":
        # a residual branch's last scale is small, so the sum of branches does not double
        # the activations at every block (the "zero-init residual" habit, not quite zero)
        scale = rng.uniform(0.1, 0.3, shape) if attrs["residual"] else rng.uniform(0.8, 1.2, shape)
        values = {1: scale, 2: normal(0.1), 3: normal(0.1),
                  4: rng.uniform(0.5, 1.5, shape)}.get(index, normal(0.1))
    elif op == "Mul":
        values = rng.uniform(0.8, 1.2, shape)
    else:   # biases and anything else: small values around zero
        values = normal(0.05)
    return np.asarray(values, np.float32).reshape(shape)
