"""MatMul followed by Add of a bias becomes one Gemm."""
from __future__ import annotations

from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.passes.rewrite import Uses, can_bind, static_shape


def fuse_matmul_add(graph: Graph, context) -> int:
    """Fuses Add(MatMul(A, B), C) into Gemm(A, B, C) when A and B are 2-D, the product has no
    other reader, and C has a static shape Gemm broadcasts to (M, N) the way Add does (a
    scalar, (N), (1, N), (M, 1) or (M, N)). Returns how many were fused."""
    uses = Uses(graph)
    fused_count = 0
    for matmul in list(graph.nodes):
        if matmul.op_type != "MatMul" or matmul.domain != "" or len(matmul.inputs) != 2:
            continue
        add = uses.only_reader(matmul.outputs[0])
        if add is None or add.op_type != "Add" or add.domain != "":
            continue
        c = add.inputs[1] if add.inputs[0] == matmul.outputs[0] else add.inputs[0]
        if not _gemm_shapes(context, matmul.inputs[0], matmul.inputs[1], c):
            continue
        gemm = Node(matmul.name, "Gemm", "", [matmul.inputs[0], matmul.inputs[1], c], [add.outputs[0]])
        if can_bind(context, gemm):
            uses.replace([matmul, add], gemm)
            fused_count += 1
    return fused_count


def _gemm_shapes(context, a: str, b: str, c: str) -> bool:
    sa, sb, sc = static_shape(context, a), static_shape(context, b), static_shape(context, c)
    if sa is None or sb is None or sc is None or len(sa) != 2 or len(sb) != 2 or len(sc) > 2:
        return False
    types = [context.types.get(n) for n in (a, b, c)]
    if len({t.dtype for t in types}) != 1 or types[0].dtype.kind != "f":
        return False
    m, n = sa[0], sb[1]
    full = (1,) * (2 - len(sc)) + sc
    return full[0] in (1, m) and full[1] in (1, n)
