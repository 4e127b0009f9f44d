"""FlexAttention with score_mod / prob_mod subgraphs: attention in numpy around the subgraphs,
which run on the session's own kernels (as a loop body does). Without those subgraphs the node
goes to the C kernel (ops/cpu/attention_flex.cpp)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from opforge.runtime.control_flow import FLEX_MODS as MODS, _ControlFlowKernel, run_body
from opforge.runtime.errors import KernelError
from opforge.runtime.graph import Node

_PRECISION = {int(TensorProto.FLOAT): "float32", int(TensorProto.DOUBLE): "float64",
              int(TensorProto.FLOAT16): "float16", int(TensorProto.BFLOAT16): "bfloat16"}


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class FlexAttentionKernel(_ControlFlowKernel):
    """Scores Q K^T (Q and K each scaled by sqrt(scale) in their own type), score_mod, softmax,
    prob_mod, times V: the steps and roundings of onnx's reference, the subgraphs on the
    session's kernels."""

    def __init__(self, node: Node, compile_graph):
        super().__init__(node)
        self.mods = {name: compile_graph(node.attrs[name]) for name in MODS if name in node.attrs}

    def run(self, inputs: list) -> list:
        q, k, v = (np.asarray(x) for x in inputs[:3])
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
            raise KernelError(f"{self.node.label}: Q {list(q.shape)}, K {list(k.shape)} and V "
                              f"{list(v.shape)} must be rank 4 with Q's heads a multiple of K's")
        repeat = q.shape[1] // k.shape[1]
        k, v_all = np.repeat(k, repeat, axis=1), np.repeat(v, repeat, axis=1)
        scale = self.node.attrs.get("scale", 1.0 / np.sqrt(q.shape[-1]))
        root = np.array(np.sqrt(np.float32(scale)), dtype=q.dtype)
        compute = self._compute_dtype(q.dtype)
        scores = np.matmul(q * root, np.swapaxes(k * root, -1, -2)).astype(compute)
        scores = self._mod("score_mod", scores, compute, inputs)
        exp = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
        probs = self._mod("prob_mod", exp / np.sum(exp, axis=-1, keepdims=True), compute, inputs)
        return [np.matmul(probs, v_all.astype(compute)).astype(v.dtype)]

    def _compute_dtype(self, dtype: np.dtype) -> np.dtype:
        precision = self.node.attrs.get("softmax_precision")
        if precision is not None:
            if int(precision) not in _PRECISION:
                raise KernelError(f"{self.node.label}: softmax_precision = {precision} is not a float type")
            return _dtype(_PRECISION[int(precision)])
        return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)

    def _mod(self, name: str, values: np.ndarray, compute: np.dtype, inputs: list) -> np.ndarray:
        body = self.mods.get(name)
        if body is None:
            return values
        env = self.outer_env(inputs, body)
        env[body.graph.inputs[0].name] = values
        out = run_body(body, env, self.node, 0)
        if len(out) != 1:
            raise KernelError(f"{self.node.label}: {name} must have one output, it has {len(out)}")
        return np.asarray(out[0], dtype=compute)
