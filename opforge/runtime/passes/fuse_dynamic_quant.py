"""quantize_dynamic's MatMul chains become one node, as onnxruntime's optimizer makes them:
MatMulInteger -> Cast -> Mul(a_scale * b_scale) [-> Add(bias)] becomes com.microsoft's
MatMulIntegerToFloat, and DynamicQuantizeMatMul when the DynamicQuantizeLinear in front feeds
nothing else."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import MICROSOFT, Uses, can_bind, constant, producer_map


def fuse_dynamic_quant(graph: Graph, context) -> int:
    """Fuses each MatMulInteger whose int32 product is cast to float and scaled by
    Mul(a_scale, b_scale) (b's scale and zero point constant), with a following Add of a constant
    bias of N values when there is one. Returns how many were fused."""
    uses = Uses(graph)
    producers = producer_map(graph)
    fused_count = 0
    for mmi in list(graph.nodes):
        match = _match(graph, uses, producers, mmi)
        if match is None:
            continue
        nodes, a_scale, b_scale, bias, output = match
        quantizer = producers.get(mmi.inputs[0])
        a_zp = mmi.inputs[2] if len(mmi.inputs) > 2 else ""
        b_zp = mmi.inputs[3] if len(mmi.inputs) > 3 else ""
        whole = _only_feeds(uses, quantizer, nodes)
        if whole:  # the quantizer goes too: the fused op quantizes A itself
            fused = Node(mmi.name, "DynamicQuantizeMatMul", MICROSOFT,
                         [quantizer.inputs[0], mmi.inputs[1], b_scale, b_zp, bias], [output])
        else:
            fused = Node(mmi.name, "MatMulIntegerToFloat", MICROSOFT,
                         [mmi.inputs[0], mmi.inputs[1], a_scale, b_scale, a_zp, b_zp, bias], [output])
        while fused.inputs and not fused.inputs[-1]:
            fused.inputs.pop()
        if not can_bind(context, fused):
            continue
        uses.replace(nodes + ([quantizer] if whole else []), fused)
        fused_count += 1
        scale_mul = producers.get(nodes[2].inputs[1] if nodes[2].inputs[0] == nodes[1].outputs[0] else nodes[2].inputs[0])
        if scale_mul is not None and uses.unread(scale_mul.outputs[0]) and any(n is scale_mul for n in graph.nodes):
            uses.remove(scale_mul)
    return fused_count


def _match(graph: Graph, uses: Uses, producers: dict, mmi: Node):
    """(nodes to replace, a_scale, b_scale, bias, output name) for a fusable chain, else None."""
    if mmi.op_type != "MatMulInteger" or mmi.domain != "" or constant(graph, mmi.inputs[1]) is None:
        return None
    if len(mmi.inputs) > 3 and mmi.inputs[3] and constant(graph, mmi.inputs[3]) is None:
        return None
    cast = uses.only_reader(mmi.outputs[0])
    if cast is None or cast.op_type != "Cast" or cast.attrs.get("to") != TensorProto.FLOAT:
        return None
    mul = uses.only_reader(cast.outputs[0])
    if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2:
        return None
    scale_mul = producers.get(mul.inputs[1] if mul.inputs[0] == cast.outputs[0] else mul.inputs[0])
    quantizer = producers.get(mmi.inputs[0])
    if scale_mul is None or scale_mul.op_type != "Mul" or quantizer is None or quantizer.op_type != "DynamicQuantizeLinear":
        return None
    a_scale = quantizer.outputs[1]
    if a_scale not in scale_mul.inputs or (len(mmi.inputs) > 2 and mmi.inputs[2] not in ("", quantizer.outputs[2])):
        return None
    b_scale = next((n for n in scale_mul.inputs if n != a_scale), a_scale)
    if constant(graph, b_scale) is None:
        return None
    nodes, output, bias = [mmi, cast, mul], mul.outputs[0], ""
    add = uses.only_reader(output)
    if add is not None and add.op_type == "Add" and len(add.inputs) == 2:
        other = add.inputs[1] if add.inputs[0] == output else add.inputs[0]
        value, b = constant(graph, other), constant(graph, mmi.inputs[1])
        if value is not None and value.dtype == np.float32 and value.shape == (b.shape[-1],):
            nodes, output, bias = nodes + [add], add.outputs[0], other
    return nodes, a_scale, b_scale, bias, output


def _only_feeds(uses: Uses, quantizer: Node, nodes: list) -> bool:
    """Whether the quantizer's outputs are read by these nodes and the scale product alone."""
    for name in quantizer.outputs:
        readers = uses.readers.get(name, [])
        if name in uses.outputs or name in uses.implicit:
            return False
        if name == quantizer.outputs[1]:
            if len(readers) != 1 or readers[0].op_type != "Mul":
                return False
        elif any(all(r is not n for n in nodes) for r in readers):
            return False
    return True
