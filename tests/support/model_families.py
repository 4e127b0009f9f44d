"""Real-model families for bench_models --families, built here node by node (no downloads, no
torch) the way their exporters write them, each with a seeded feed:

- transformer_encoder: a BERT-style encoder as torch.onnx.export writes one (opset 17): embedding
  Gather, per layer Q/K/V MatMul+Add, Reshape/Transpose into heads, QK^T / sqrt(d) + mask, Softmax,
  context MatMul, LayerNormalization, erf-GELU feed-forward; a Gemm+Tanh pooler.
- lstm_tagger: two stacked LSTM nodes (the first bidirectional, as torch writes nn.LSTM layers)
  over a sequence, and a MatMul+Add head on every step.
- vad_if: a voice-activity model with an If at the top (as silero-style VAD models ship): the
  sample rate picks one of two branches, each a strided Conv front end, an LSTM step that carries
  the state, and a Sigmoid speech probability.
- greedy_decoder: a Loop at the top (as torch.jit.script exports a generation loop): an RNN cell
  fed the embedding of the last token, logits, ArgMax for the next token; the tokens are the
  loop's scan output.
- mobile_se_cnn: MobileNetV3-Small as torch.onnx.export writes it in eval mode (batch norms folded
  into the convs): 1x1 expansions, depthwise 3x3 and 5x5 convs at strides 1 and 2, squeeze-excite
  blocks (GlobalAveragePool, two 1x1 convs, HardSigmoid, Mul), HardSwish, residual Adds, a Gemm head.
- crnn: a text-line recognizer (CRNN): a VGG-style conv stack with MaxPools down to a row of
  features, reshaped into a sequence for a bidirectional LSTM, per-step class scores and
  LogSoftmax (what CTC decoding reads).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Weights:
    """Seeded initializers, named and collected as they are made."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.tensors: list[onnx.TensorProto] = []

    def random(self, name: str, *shape, scale: float = 0.1) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def gain(self, name: str, size: int) -> str:
        """A scale near 1 (LayerNormalization's gamma)."""
        return self.const(name, (1 + self.rng.standard_normal(size) * 0.1).astype(np.float32))

    def const(self, name: str, value) -> str:
        self.tensors.append(numpy_helper.from_array(np.asarray(value), name))
        return name


def _model(nodes, inputs, outputs, weights: _Weights, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, weights.tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _encoder_layer(i: int, x: str, mask: str, hidden: int, heads: int, ffn: int, w: _Weights) -> tuple[list, str]:
    """One post-norm encoder layer over x [batch, seq, hidden]; returns its nodes and output."""
    n, p, head = helper.make_node, f"l{i}_", hidden // heads
    nodes = []

    def linear(src: str, name: str, k: int, m: int) -> str:
        nodes.extend([n("MatMul", [src, w.random(p + name + "_w", k, m)], [p + name + "_mm"]),
                      n("Add", [p + name + "_mm", w.random(p + name + "_b", m)], [p + name])])
        return p + name

    split = w.const(p + "split", np.array([0, 0, heads, head], np.int64))
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [n("Reshape", [linear(x, name, hidden, hidden), split], [p + name + "_h"]),
                  n("Transpose", [p + name + "_h"], [p + name + "_t"], perm=perm)]
    nodes += [
        n("MatMul", [p + "q_t", p + "k_t"], [p + "qk"]),
        n("Div", [p + "qk", w.const(p + "scale", np.float32(np.sqrt(head)))], [p + "qk_s"]),
        n("Add", [p + "qk_s", mask], [p + "qk_m"]),
        n("Softmax", [p + "qk_m"], [p + "probs"], axis=-1),
        n("MatMul", [p + "probs", p + "v_t"], [p + "ctx_t"]),
        n("Transpose", [p + "ctx_t"], [p + "ctx_h"], perm=[0, 2, 1, 3]),
        n("Reshape", [p + "ctx_h", w.const(p + "merge", np.array([0, 0, hidden], np.int64))], [p + "ctx"]),
    ]
    nodes += [n("Add", [linear(p + "ctx", "o", hidden, hidden), x], [p + "res1"]),
              n("LayerNormalization", [p + "res1", w.gain(p + "g1", hidden), w.random(p + "b1n", hidden)],
                [p + "ln1"], axis=-1, epsilon=1e-5)]
    # torch's exact GELU: x * 0.5 * (1 + erf(x / sqrt(2)))
    up = linear(p + "ln1", "up", hidden, ffn)
    nodes += [n("Div", [up, w.const(p + "sqrt2", np.float32(np.sqrt(2.0)))], [p + "g_div"]),
              n("Erf", [p + "g_div"], [p + "g_erf"]),
              n("Add", [p + "g_erf", w.const(p + "one", np.float32(1.0))], [p + "g_add"]),
              n("Mul", [up, p + "g_add"], [p + "g_mul"]),
              n("Mul", [p + "g_mul", w.const(p + "half", np.float32(0.5))], [p + "gelu"])]
    nodes += [n("Add", [linear(p + "gelu", "down", ffn, hidden), p + "ln1"], [p + "res2"]),
              n("LayerNormalization", [p + "res2", w.gain(p + "g2", hidden), w.random(p + "b2n", hidden)],
                [p + "out"], axis=-1, epsilon=1e-5)]
    return nodes, p + "out"


def transformer_encoder(layers: int = 4, hidden: int = 256, heads: int = 4, ffn: int = 1024, seq: int = 128,
                        vocab: int = 2000, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """A BERT-style encoder over input_ids and attention_mask [1, seq] (int64)."""
    w, n = _Weights(seed), helper.make_node
    nodes = [
        n("Gather", [w.random("emb", vocab, hidden), "input_ids"], ["tok"], axis=0),
        n("Add", ["tok", w.random("pos", seq, hidden)], ["x0"]),
        # the additive mask [batch, 1, 1, seq]: 0 where attended, -10000 where padded
        n("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        n("Sub", [w.const("one_f", np.float32(1.0)), "mask_f"], ["mask_inv"]),
        n("Mul", ["mask_inv", w.const("neg", np.float32(-10000.0))], ["mask_neg"]),
        n("Unsqueeze", ["mask_neg", w.const("mask_axes", np.array([1, 2], np.int64))], ["mask"]),
    ]
    x = "x0"
    for i in range(layers):
        layer, x = _encoder_layer(i, x, "mask", hidden, heads, ffn, w)
        nodes += layer
    nodes += [n("Gather", [x, w.const("first", np.int64(0))], ["cls"], axis=1),
              n("Gemm", ["cls", w.random("pool_w", hidden, hidden), w.random("pool_b", hidden)], ["pooled_mm"]),
              n("Tanh", ["pooled_mm"], ["pooled"])]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])]
    outputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, hidden]),
               helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, hidden])]
    rng = np.random.default_rng(seed + 1)
    mask = np.ones((1, seq), np.int64)
    mask[0, seq * 3 // 4:] = 0   # a padded tail
    feed = {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64), "attention_mask": mask}
    return _model(nodes, inputs, outputs, w, "transformer_encoder"), feed


def _lstm(w: _Weights, name: str, x: str, inputs: int, hidden: int, directions: int, batch: int) -> list:
    """An LSTM node as torch writes nn.LSTM's layers: weights, biases and zero initial states."""
    zeros = np.zeros((directions, batch, hidden), np.float32)
    return [helper.make_node(
        "LSTM", [x, w.random(name + "_W", directions, 4 * hidden, inputs),
                 w.random(name + "_R", directions, 4 * hidden, hidden),
                 w.random(name + "_B", directions, 8 * hidden), "",
                 w.const(name + "_h0", zeros), w.const(name + "_c0", zeros)],
        [name + "_Y", name + "_Yh", name + "_Yc"], hidden_size=hidden,
        direction="bidirectional" if directions == 2 else "forward")]


def lstm_tagger(seq: int = 100, batch: int = 1, features: int = 64, hidden: int = 128, tags: int = 16,
                seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """A bidirectional LSTM, a second LSTM over its outputs, and per-step tag scores."""
    w, n = _Weights(seed), helper.make_node
    nodes = _lstm(w, "lstm1", "x", features, hidden, 2, batch)
    nodes += [  # [seq, 2, batch, hidden] -> [seq, batch, 2 * hidden], as torch reshapes it
        n("Transpose", ["lstm1_Y"], ["lstm1_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["lstm1_t", w.const("merge_dirs", np.array([0, 0, -1], np.int64))], ["h1"]),
    ]
    nodes += _lstm(w, "lstm2", "h1", 2 * hidden, hidden, 1, batch)
    nodes += [n("Squeeze", ["lstm2_Y", w.const("dir_axis", np.array([1], np.int64))], ["h2"]),
              n("MatMul", ["h2", w.random("tag_w", hidden, tags)], ["tag_mm"]),
              n("Add", ["tag_mm", w.random("tag_b", tags)], ["scores"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, features])]
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [seq, batch, tags])]
    feed = {"x": np.random.default_rng(seed + 1).standard_normal((seq, batch, features)).astype(np.float32)}
    return _model(nodes, inputs, outputs, w, "lstm_tagger"), feed


def _vad_branch(w: _Weights, tag: str, kernel: int, stride: int, hidden: int) -> onnx.GraphProto:
    """One sample rate's network over the outer `x` [1, samples] and `state` [2, 1, hidden]:
    Conv front end, LSTM step from the state, speech probability; outputs (prob, new state)."""
    n, p = helper.make_node, tag + "_"
    nodes = [
        n("Unsqueeze", ["x", "axis1"], [p + "x3"]),
        n("Conv", [p + "x3", w.random(p + "c1w", hidden, 1, kernel), w.random(p + "c1b", hidden)], [p + "c1"],
          kernel_shape=[kernel], strides=[stride]),
        n("Relu", [p + "c1"], [p + "r1"]),
        n("Conv", [p + "r1", w.random(p + "c2w", hidden, hidden, 3, scale=0.05), w.random(p + "c2b", hidden)],
          [p + "c2"], kernel_shape=[3], pads=[1, 1]),
        n("Relu", [p + "c2"], [p + "r2"]),
        n("ReduceMean", [p + "r2"], [p + "feat"], axes=[2], keepdims=0),        # [1, hidden]
        n("Unsqueeze", [p + "feat", "axis0"], [p + "step"]),                     # [1, 1, hidden]
        n("Split", ["state", "halves"], [p + "h0", p + "c0"], axis=0),
    ]
    nodes += [helper.make_node(
        "LSTM", [p + "step", w.random(p + "W", 1, 4 * hidden, hidden), w.random(p + "R", 1, 4 * hidden, hidden),
                 w.random(p + "B", 1, 8 * hidden), "", p + "h0", p + "c0"],
        [p + "Y", p + "Yh", p + "Yc"], hidden_size=hidden)]
    nodes += [n("Concat", [p + "Yh", p + "Yc"], [p + "state_out"], axis=0),
              n("Squeeze", [p + "Yh", "axis0"], [p + "h"]),                        # [1, hidden]
              n("Gemm", [p + "h", w.random(p + "ow", 1, hidden), w.random(p + "ob", 1)], [p + "logit"], transB=1),
              n("Sigmoid", [p + "logit"], [p + "prob"])]
    return helper.make_graph(nodes, tag, [], [
        helper.make_tensor_value_info(p + "prob", TensorProto.FLOAT, [1, 1]),
        helper.make_tensor_value_info(p + "state_out", TensorProto.FLOAT, [2, 1, hidden])])


def vad_if(samples: int = 512, hidden: int = 128, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """If (sr == 16000) at the top, each branch its own network over one chunk of audio."""
    w = _Weights(seed)
    w.const("axis0", np.array([0], np.int64))
    w.const("axis1", np.array([1], np.int64))
    w.const("halves", np.array([1, 1], np.int64))
    then_branch = _vad_branch(w, "sr16k", kernel=64, stride=32, hidden=hidden)
    else_branch = _vad_branch(w, "sr8k", kernel=32, stride=16, hidden=hidden)
    nodes = [helper.make_node("Equal", ["sr", w.const("sr16k_rate", np.int64(16000))], ["is16k"]),
             helper.make_node("If", ["is16k"], ["prob", "state_out"], then_branch=then_branch,
                              else_branch=else_branch)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, samples]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, []),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, hidden])]
    outputs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
               helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, 1, hidden])]
    rng = np.random.default_rng(seed + 1)
    feed = {"x": rng.standard_normal((1, samples)).astype(np.float32), "sr": np.array(16000, np.int64),
            "state": (rng.standard_normal((2, 1, hidden)) * 0.5).astype(np.float32)}
    return _model(nodes, inputs, outputs, w, "vad_if"), feed


def greedy_decoder(steps: int = 32, hidden: int = 128, vocab: int = 256, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """Loop(steps) at the top: h = tanh(h @ Wh + emb[token]), token = argmax(h @ Wo); the tokens
    (int64 [steps, 1]) and the last state are the outputs."""
    w = _Weights(seed)
    n = helper.make_node
    body_nodes = [n("Gather", [w.random("emb", vocab, hidden, scale=0.5), "tok_in"], ["e"]),    # [1, hidden]
                  n("MatMul", ["h_in", w.random("Wh", hidden, hidden, scale=1.0 / np.sqrt(hidden))], ["hh"]),
                  n("Add", ["hh", "e"], ["pre"]), n("Tanh", ["pre"], ["h_out"]),
                  n("MatMul", ["h_out", w.random("Wo", hidden, vocab, scale=1.0 / np.sqrt(hidden))], ["logits"]),
                  n("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),                        # [1]
                  n("Identity", ["cond_in"], ["cond_out"]), n("Identity", ["tok_out"], ["scan_tok"])]
    body = helper.make_graph(body_nodes, "step", [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, hidden]),
        helper.make_tensor_value_info("tok_in", TensorProto.INT64, [1])], [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, hidden]),
        helper.make_tensor_value_info("tok_out", TensorProto.INT64, [1]),
        helper.make_tensor_value_info("scan_tok", TensorProto.INT64, [1])])
    nodes = [n("Loop", [w.const("steps", np.int64(steps)), "", "h0", "bos"], ["h", "last", "tokens"], body=body)]
    inputs = [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, hidden]),
              helper.make_tensor_value_info("bos", TensorProto.INT64, [1])]
    outputs = [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, hidden]),
               helper.make_tensor_value_info("last", TensorProto.INT64, [1]),
               helper.make_tensor_value_info("tokens", TensorProto.INT64, [steps, 1])]
    rng = np.random.default_rng(seed + 1)
    feed = {"h0": rng.standard_normal((1, hidden)).astype(np.float32), "bos": np.array([1], np.int64)}
    return _model(nodes, inputs, outputs, w, "greedy_decoder"), feed


def _conv(w: _Weights, name: str, x: str, cin: int, cout: int, kernel: int, stride: int = 1, group: int = 1) -> list:
    """A Conv with a bias (a batch norm folded in), He-scaled weights, padding kernel // 2."""
    fan_in = cin // group * kernel * kernel
    return [helper.make_node(
        "Conv", [x, w.random(name + "_w", cout, cin // group, kernel, kernel, scale=float(np.sqrt(2.0 / fan_in))),
                 w.random(name + "_b", cout, scale=0.05)], [name],
        kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[kernel // 2] * 4, group=group)]


def _activation(kind: str, x: str, out: str) -> list:
    return [helper.make_node("Relu" if kind == "RE" else "HardSwish", [x], [out])]


# MobileNetV3-Small's blocks: kernel, expansion, output channels, squeeze-excite, activation, stride
_MOBILENET_V3_SMALL = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
                       (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
                       (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
                       (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]


def mobile_se_cnn(resolution: int = 224, classes: int = 1000, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """MobileNetV3-Small over an image [1, 3, resolution, resolution]: class scores."""
    w, n = _Weights(seed), helper.make_node
    nodes = _conv(w, "stem", "image", 3, 16, 3, 2) + _activation("HS", "stem", "stem_act")
    x, channels = "stem_act", 16
    for i, (kernel, expand, out, se, act, stride) in enumerate(_MOBILENET_V3_SMALL):
        p, h = f"b{i}_", x
        if expand != channels:
            nodes += _conv(w, p + "expand", x, channels, expand, 1) + _activation(act, p + "expand", p + "expand_act")
            h = p + "expand_act"
        nodes += _conv(w, p + "dw", h, expand, expand, kernel, stride, group=expand)
        nodes += _activation(act, p + "dw", p + "dw_act")
        h = p + "dw_act"
        if se:  # torchvision's SqueezeExcitation: squeeze to a multiple of 8 near a quarter
            squeeze = max(8, (expand // 4 + 4) // 8 * 8)
            nodes += [n("GlobalAveragePool", [h], [p + "se_pool"])]
            nodes += _conv(w, p + "se_fc1", p + "se_pool", expand, squeeze, 1)
            nodes += [n("Relu", [p + "se_fc1"], [p + "se_relu"])]
            nodes += _conv(w, p + "se_fc2", p + "se_relu", squeeze, expand, 1)
            nodes += [n("HardSigmoid", [p + "se_fc2"], [p + "se_gate"], alpha=1.0 / 6, beta=0.5),
                      n("Mul", [h, p + "se_gate"], [p + "se_out"])]
            h = p + "se_out"
        nodes += _conv(w, p + "project", h, expand, out, 1)
        if stride == 1 and channels == out:
            nodes += [n("Add", [p + "project", x], [p + "out"])]
            x = p + "out"
        else:
            x = p + "project"
        channels = out
    nodes += _conv(w, "last", x, channels, 576, 1) + _activation("HS", "last", "last_act")
    nodes += [n("GlobalAveragePool", ["last_act"], ["pooled"]),
              n("Flatten", ["pooled"], ["features"], axis=1),
              n("Gemm", ["features", w.random("fc1_w", 1024, 576, scale=float(np.sqrt(2 / 576))),
                         w.random("fc1_b", 1024, scale=0.05)], ["fc1"], transB=1),
              n("HardSwish", ["fc1"], ["fc1_act"]),
              n("Gemm", ["fc1_act", w.random("fc2_w", classes, 1024, scale=float(np.sqrt(1 / 1024))),
                         w.random("fc2_b", classes, scale=0.05)], ["logits"], transB=1)]
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, resolution, resolution])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])]
    feed = {"image": np.random.default_rng(seed + 1).standard_normal((1, 3, resolution, resolution)).astype(np.float32)}
    return _model(nodes, inputs, outputs, w, "mobile_se_cnn"), feed


def crnn(height: int = 32, width: int = 128, hidden: int = 128, classes: int = 37, seed: int = 0) \
        -> tuple[onnx.ModelProto, dict]:
    """A CRNN over a grayscale text line [1, 1, height, width]: per-column log-probabilities
    [width / 4, 1, classes] for CTC decoding."""
    w, n = _Weights(seed), helper.make_node
    nodes, x = [], "line"
    for i, (cin, cout, pool) in enumerate(((1, 64, (2, 2)), (64, 128, (2, 2)), (128, 256, (2, 1)), (256, 256, (2, 1)))):
        nodes += _conv(w, f"c{i}", x, cin, cout, 3) + [n("Relu", [f"c{i}"], [f"r{i}"]),
                                                      n("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=list(pool),
                                                        strides=list(pool))]
        x = f"p{i}"
    rows, steps = height // 16, width // 4
    features = 256 * rows
    nodes += [  # [1, 256, rows, steps] -> [steps, 1, 256 * rows], as torch's permute and view write it
        n("Reshape", [x, w.const("to_rows", np.array([1, features, steps], np.int64))], ["cols"]),
        n("Transpose", ["cols"], ["seq"], perm=[2, 0, 1]),
    ]
    nodes += _lstm(w, "rnn", "seq", features, hidden, 2, 1)
    nodes += [n("Transpose", ["rnn_Y"], ["rnn_t"], perm=[0, 2, 1, 3]),
              n("Reshape", ["rnn_t", w.const("merge_dirs", np.array([0, 0, -1], np.int64))], ["states"]),
              n("MatMul", ["states", w.random("cls_w", 2 * hidden, classes)], ["cls_mm"]),
              n("Add", ["cls_mm", w.random("cls_b", classes)], ["scores"]),
              n("LogSoftmax", ["scores"], ["log_probs"], axis=-1)]
    inputs = [helper.make_tensor_value_info("line", TensorProto.FLOAT, [1, 1, height, width])]
    outputs = [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [steps, 1, classes])]
    feed = {"line": np.random.default_rng(seed + 1).standard_normal((1, 1, height, width)).astype(np.float32)}
    return _model(nodes, inputs, outputs, w, "crnn"), feed


FAMILIES = {"transformer_encoder": transformer_encoder, "lstm_tagger": lstm_tagger, "vad_if": vad_if,
            "greedy_decoder": greedy_decoder, "mobile_se_cnn": mobile_se_cnn, "crnn": crnn}
