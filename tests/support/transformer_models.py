"""Transformer encoders built node by node the way torch.onnx.export writes them (so tests and
benchmarks need no torch)."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


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


def packed_qkv_encoder(hidden=32, heads=4, ffn=64, vocab=50, seed=1):
    """The encoder a torch module with one packed QKV Linear, ``masked_fill`` and ``nn.GELU``
    exports to at opset 17 (torch.onnx.export, TorchScript path): Linear as MatMul + Add, the
    packed projection split by Reshape to (b, s, 3, heads, head), Transpose(2, 0, 3, 1, 4) and a
    Gather per part, K transposed on its own, the mask as Equal(mask, 0) feeding Where, Softmax,
    LayerNormalization, and erf-GELU. Built here so the test needs no torch."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.standard_normal(shape) * 0.1).astype(np.float32)  # noqa: E731
    head = hidden // heads
    inits = [_init("emb", w(vocab, hidden)), _init("w_qkv", w(hidden, 3 * hidden)), _init("b_qkv", w(3 * hidden)),
             _init("w_o", w(hidden, hidden)), _init("b_o", w(hidden)), _init("w1", w(hidden, ffn)),
             _init("b1", w(ffn)), _init("w2", w(ffn, hidden)), _init("b2", w(hidden)),
             _init("g1", 1 + w(hidden)), _init("be1", w(hidden)), _init("g2", 1 + w(hidden)), _init("be2", w(hidden)),
             _init("i0", np.int64(0)), _init("i1", np.int64(1)), _init("i2", np.int64(2)),
             _init("ax0", np.array([0], np.int64)), _init("ax12", np.array([1, 2], np.int64)),
             _init("packed", np.array([3, heads, head], np.int64)), _init("hid", np.array([hidden], np.int64)),
             _init("scale", np.float32(np.sqrt(head))), _init("zero_mask", np.int64(0)),
             _init("neg", np.float32(-1e4)), _init("half", np.float32(0.5)),
             _init("sqrt2", np.float32(np.sqrt(2.0))), _init("onef", np.float32(1.0))]
    n = helper.make_node
    nodes = [
        n("Gather", ["emb", "ids"], ["x"], axis=0),
        n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i0"], ["b"], axis=0), n("Gather", ["xs", "i1"], ["s"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["b1d"]), n("Unsqueeze", ["s", "ax0"], ["s1d"]),
        n("MatMul", ["x", "w_qkv"], ["qkv0"]), n("Add", ["qkv0", "b_qkv"], ["qkv"]),
        n("Concat", ["b1d", "s1d", "packed"], ["qkv_shape"], axis=0),
        n("Reshape", ["qkv", "qkv_shape"], ["qkv5"]), n("Transpose", ["qkv5"], ["qkvt"], perm=[2, 0, 3, 1, 4]),
        n("Gather", ["qkvt", "i0"], ["q"], axis=0), n("Gather", ["qkvt", "i1"], ["k"], axis=0),
        n("Gather", ["qkvt", "i2"], ["v"], axis=0), n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["scores0"]), n("Div", ["scores0", "scale"], ["scores"]),
        n("Unsqueeze", ["mask", "ax12"], ["mask4"]), n("Equal", ["mask4", "zero_mask"], ["masked_out"]),
        n("Where", ["masked_out", "neg", "scores"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1), n("MatMul", ["probs", "v"], ["ctx4"]),
        n("Transpose", ["ctx4"], ["ctxt"], perm=[0, 2, 1, 3]),
        n("Concat", ["b1d", "s1d", "hid"], ["merge_shape"], axis=0), n("Reshape", ["ctxt", "merge_shape"], ["ctx"]),
        n("MatMul", ["ctx", "w_o"], ["o0"]), n("Add", ["o0", "b_o"], ["o"]), n("Add", ["x", "o"], ["r1"]),
        n("LayerNormalization", ["r1", "g1", "be1"], ["h1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f"]),
        n("Div", ["f", "sqrt2"], ["gd"]), n("Erf", ["gd"], ["ge"]), n("Add", ["ge", "onef"], ["ga"]),
        n("Mul", ["f", "ga"], ["gm"]), n("Mul", ["gm", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["m0"]), n("Add", ["m0", "b2"], ["m"]), n("Add", ["h1", "m"], ["r2"]),
        n("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1, epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes, "torch_jit",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    return model
