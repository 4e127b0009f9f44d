"""Transformer encoders against onnxruntime: graphs written the way torch.onnx.export writes them."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_models import compare_with_onnxruntime


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def encoder_layer(hidden=32, heads=4, ffn=64, vocab=50, seed=0):
    """A BERT-style encoder layer written the way torch.onnx.export writes one: embedding Gather,
    shape arithmetic with Shape/Gather/Unsqueeze/Concat/Reshape, attention with MatMul/Div/Add
    and a Where mask, Softmax, LayerNormalization, erf-GELU, Expand and Cast."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.standard_normal(shape) * 0.1).astype(np.float32)  # noqa: E731
    head = hidden // heads
    inits = [_init("emb", w(vocab, hidden)), _init("pos", w(16, hidden)),
             _init("wq", w(hidden, hidden)), _init("wk", w(hidden, hidden)), _init("wv", w(hidden, hidden)),
             _init("wo", w(hidden, hidden)), _init("w1", w(hidden, ffn)), _init("b1", w(ffn)),
             _init("w2", w(ffn, hidden)), _init("b2", w(hidden)), _init("g1", 1 + w(hidden)),
             _init("be1", w(hidden)), _init("g2", 1 + w(hidden)), _init("be2", w(hidden)),
             _init("scale", np.float32(np.sqrt(head))), _init("zero", np.int64(0)), _init("one", np.int64(1)),
             _init("heads", np.array([heads], np.int64)), _init("head", np.array([head], np.int64)),
             _init("hid", np.array([hidden], np.int64)), _init("start", np.array([0], np.int64)),
             _init("ax0", np.array([0], np.int64)), _init("neg", np.float32(-1e4)),
             _init("half", np.float32(0.5)), _init("sqrt2", np.float32(np.sqrt(2.0))), _init("onef", np.float32(1.0))]
    n = helper.make_node
    nodes = [
        n("Shape", ["ids"], ["ids_shape"]), n("Gather", ["ids_shape", "zero"], ["b"], axis=0),
        n("Gather", ["ids_shape", "one"], ["s"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["b1d"]), n("Unsqueeze", ["s", "ax0"], ["s1d"]),
        n("Gather", ["emb", "ids"], ["tok"], axis=0),
        n("Slice", ["pos", "start", "s1d", "ax0"], ["pos_s"]), n("Add", ["tok", "pos_s"], ["x0"]),
        n("MatMul", ["x0", "wq"], ["q"]), n("MatMul", ["x0", "wk"], ["k"]), n("MatMul", ["x0", "wv"], ["v"]),
        n("Concat", ["b1d", "s1d", "heads", "head"], ["split_shape"], axis=0),
        n("Reshape", ["q", "split_shape"], ["q4"]), n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Reshape", ["k", "split_shape"], ["k4"]), n("Transpose", ["k4"], ["kh"], perm=[0, 2, 3, 1]),
        n("Reshape", ["v", "split_shape"], ["v4"]), n("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qh", "kh"], ["scores"]), n("Div", ["scores", "scale"], ["scaled"]),
        n("Cast", ["mask"], ["maskb"], to=TensorProto.BOOL),
        n("Unsqueeze", ["maskb", "ax12"], ["mask4"]),
        n("Shape", ["scaled"], ["score_shape"]), n("Expand", ["mask4", "score_shape"], ["mask_full"]),
        n("Where", ["mask_full", "scaled", "neg"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1), n("MatMul", ["probs", "vh"], ["ctx4"]),
        n("Transpose", ["ctx4"], ["ctxt"], perm=[0, 2, 1, 3]),
        n("Concat", ["b1d", "s1d", "hid"], ["merge_shape"], axis=0),
        n("Reshape", ["ctxt", "merge_shape"], ["ctx"]), n("MatMul", ["ctx", "wo"], ["attn"]),
        n("Add", ["x0", "attn"], ["r1"]),
        n("LayerNormalization", ["r1", "g1", "be1"], ["h1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h1", "w1"], ["f1"]), n("Add", ["f1", "b1"], ["f1b"]),
        n("Div", ["f1b", "sqrt2"], ["gd"]), n("Erf", ["gd"], ["ge"]), n("Add", ["ge", "onef"], ["ga"]),
        n("Mul", ["f1b", "ga"], ["gm"]), n("Mul", ["gm", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["f2"]), n("Add", ["f2", "b2"], ["f2b"]), n("Add", ["h1", "f2b"], ["r2"]),
        n("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1, epsilon=1e-5),
    ]
    inits.append(_init("ax12", np.array([1, 2], np.int64)))
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("batch, seq", [(1, 7), (3, 12), (2, 16)])
def test_transformer_encoder_matches_onnxruntime(batch, seq):
    rng = np.random.default_rng(batch * seq)
    ids = rng.integers(0, 50, (batch, seq)).astype(np.int64)
    mask = (rng.random((batch, seq)) > 0.2).astype(np.int64)
    sess = compare_with_onnxruntime(encoder_layer(), {"ids": ids, "mask": mask}, rtol=1e-4, atol=1e-5)
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"


def test_torch_exported_transformer_matches_onnxruntime(tmp_path):
    torch = pytest.importorskip("torch")

    class Encoder(torch.nn.Module):
        """Embedding, masked multi-head attention, LayerNorm and a GELU MLP, in plain torch."""

        def __init__(self, vocab=50, hidden=32, heads=4):
            super().__init__()
            self.heads = heads
            self.emb = torch.nn.Embedding(vocab, hidden)
            self.qkv = torch.nn.Linear(hidden, 3 * hidden)
            self.out = torch.nn.Linear(hidden, hidden)
            self.norm1, self.norm2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden, 64), torch.nn.GELU(), torch.nn.Linear(64, hidden))

        def forward(self, ids, mask):
            x = self.emb(ids)
            b, s, h = x.shape
            q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (h // self.heads) ** 0.5
            scores = scores.masked_fill(mask[:, None, None, :] == 0, -1e4)
            ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
            x = self.norm1(x + self.out(ctx))
            return self.norm2(x + self.mlp(x))

    torch.manual_seed(0)
    ids, mask = torch.randint(0, 50, (2, 9)), (torch.rand(2, 9) > 0.2).long()
    path = tmp_path / "encoder.onnx"
    torch.onnx.export(Encoder().eval(), (ids, mask), str(path), input_names=["ids", "mask"],
                      output_names=["y"], opset_version=17, dynamo=False,
                      dynamic_axes={"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}})
    feeds = {"ids": np.random.default_rng(1).integers(0, 50, (3, 11)).astype(np.int64),
             "mask": (np.random.default_rng(2).random((3, 11)) > 0.2).astype(np.int64)}
    sess = compare_with_onnxruntime(path, feeds, rtol=1e-4, atol=1e-5)
    fallback = [(n, op) for n, op, p in sess.node_providers() if p != "CPUExecutionProvider"]
    assert not fallback, f"nodes on the reference fallback: {fallback}"
    assert {"MatMul", "Softmax", "LayerNormalization", "Gather"} <= {op for _, op, _ in sess.node_providers()}
