"""onnxruntime as an exact oracle for 8-bit integer products, whatever the CPU.

On x86 CPUs without AVX-512 VNNI or AVX-VNNI, onnxruntime's uint8 x int8 kernels (MLAS's U8S8
GEMM: MatMulInteger, QLinearMatMul, QLinearConv, DynamicQuantizeMatMul, DynamicQuantizeLSTM ...)
add pairs of products in saturating 16-bit lanes (vpmaddubsw): 255 * 127 * 2 overflows, and the
integers come out wrong (measured: 223 of 315 elements of a full-range MatMulInteger). Its
uint8 x uint8 and int8 x int8 kernels are exact. Its optimizer also turns int8 QDQ activations
into uint8 ones on x86, so a model with int8 activations and weights meets the same kernels.

`exact_form` rewrites a model into one with the same products that onnxruntime computes exactly:
every int8 operand that can meet a uint8 one (the weight side of those ops, and the int8 tensors
DequantizeLinear reads) is re-encoded as uint8, value + 128 with its zero point + 128, which
changes no product (b - zb is the same number). opforge is then compared with that model's
results, so a test asks for exact integer arithmetic, not for onnxruntime's overflow.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"

# (domain, op) -> per product: (index of its A operand or None when the op quantizes a float A
# to uint8 itself, index of the int8 operand B, of B's zero point, of B's scale (the shape an
# absent zero point takes; None: a scalar))
PRODUCTS = {
    ("", "MatMulInteger"): [(0, 1, 3, None)],
    ("", "ConvInteger"): [(0, 1, 3, None)],
    ("", "QLinearMatMul"): [(0, 3, 5, 4)],
    ("", "QLinearConv"): [(0, 3, 5, 4)],
    (MS, "MatMulIntegerToFloat"): [(0, 1, 5, 3)],
    (MS, "DynamicQuantizeMatMul"): [(None, 1, 3, 2)],
    (MS, "QGemm"): [(0, 3, 5, 4)],
    (MS, "QAttention"): [(0, 1, 7, 4)],
    (MS, "DynamicQuantizeLSTM"): [(None, 1, 9, 8), (None, 2, 11, 10)],
}


# float ops that onnxruntime's QDQ fusion turns into 8-bit products of their DequantizeLinear inputs
QDQ_PRODUCTS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Attention"}


def exact_form(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its int8 product operands re-encoded as uint8 (see the module's docstring):
    initializers as new initializers, other values (graph inputs, computed ones) through
    Cast/Add/Cast nodes inserted before their reader."""
    rewriter = _Rewriter(model)
    for node in list(rewriter.graph.node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        for a, b, zero, scale in PRODUCTS.get((domain, node.op_type), ()):
            if a is not None and rewriter.elem_type(_input(node, a)) != TensorProto.UINT8:
                continue
            if rewriter.elem_type(_input(node, b)) == TensorProto.INT8:
                rewriter.to_uint8(node, b, zero, scale)
        if node.op_type == "DequantizeLinear" and domain == "" and node.input[0] in rewriter.inits \
                and rewriter.elem_type(node.input[0]) == TensorProto.INT8 and rewriter.feeds_a_product(node):
            rewriter.to_uint8(node, 0, 2, 1)
    return rewriter.model


def _value_types(model: onnx.ModelProto) -> tuple[dict, dict]:
    """({value: element type}, {value: shape where fully known}) of every value of ``model``,
    as onnxruntime infers them (onnx's shape inference stops at contrib ops)."""
    import onnxruntime as ort

    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    listed = {v.name for v in probed.graph.output}
    probed.graph.output.extend(onnx.ValueInfoProto(name=o) for n in probed.graph.node for o in n.output
                               if o and o not in listed)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    types, shapes = {}, {}
    for value in [*session.get_inputs(), *session.get_outputs()]:
        if value.type.startswith("tensor("):
            types[value.name] = TensorProto.DataType.Value(value.type[7:-1].upper())
            if value.shape is not None and all(isinstance(d, int) for d in value.shape):
                shapes[value.name] = list(value.shape)
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return types, shapes


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


class _Rewriter:
    """The model being rewritten, what types its values have, and the names made so far."""

    def __init__(self, model: onnx.ModelProto):
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        self.graph = self.model.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.types, self.shapes = _value_types(self.model)
        self.done: dict[str, str] = {}   # int8 value -> its uint8 re-encoding

    def feeds_a_product(self, node: onnx.NodeProto) -> bool:
        """Whether a node's output is read by a MatMul, Gemm or Conv (which QDQ fusion makes an
        8-bit product); other readers keep the int8 value, so fusions stay as they were."""
        return any(reader.op_type in QDQ_PRODUCTS and set(reader.input) & set(node.output)
                   for reader in self.graph.node)

    def elem_type(self, name: str) -> int:
        return self.types.get(name, TensorProto.UNDEFINED) if name else TensorProto.UNDEFINED

    def to_uint8(self, node: onnx.NodeProto, b: int, zero: int, scale: "int | None") -> None:
        """Re-encodes ``node``'s input ``b`` and its zero point (made, as 128, if absent)."""
        node.input[b] = self._shifted(node, node.input[b])
        while len(node.input) <= zero:
            node.input.append("")
        if node.input[zero]:
            node.input[zero] = self._shifted(node, node.input[zero])
        else:
            shape = self._shape_of(_input(node, scale)) if scale is not None else []
            name = f"{node.input[b]}/zero_point"
            self._add_initializer(np.full(shape, 128, np.uint8), name)
            node.input[zero] = name

    def _shifted(self, reader: onnx.NodeProto, name: str) -> str:
        if name in self.done:
            return self.done[name]
        target = f"{name}/as_uint8"
        if name in self.inits:
            values = numpy_helper.to_array(self.inits[name]).astype(np.int16) + 128
            self._add_initializer(values.astype(np.uint8), target)
        else:   # Cast to int32, add 128, Cast to uint8, right before its reader
            offset = f"{target}/128"
            self._add_initializer(np.array(128, np.int32), offset)
            nodes = [helper.make_node("Cast", [name], [f"{target}/i32"], to=TensorProto.INT32),
                     helper.make_node("Add", [f"{target}/i32", offset], [f"{target}/sum"]),
                     helper.make_node("Cast", [f"{target}/sum"], [target], to=TensorProto.UINT8)]
            at = list(self.graph.node).index(reader)
            for k, made in enumerate(nodes):
                self.graph.node.insert(at + k, made)
        self.types[target] = TensorProto.UINT8
        self.done[name] = target
        return target

    def _shape_of(self, name: str) -> list:
        if name in self.inits:
            return list(self.inits[name].dims)
        shape = self.shapes.get(name)
        return shape if shape is not None else []

    def _add_initializer(self, values: np.ndarray, name: str) -> None:
        tensor = numpy_helper.from_array(values, name)
        self.graph.initializer.append(tensor)
        self.inits[name] = tensor
        self.types[name] = tensor.data_type
