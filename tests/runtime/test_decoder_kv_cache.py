"""A GPT-style decoder with a key/value cache, written the way onnxruntime-genai's model builder
writes one (GroupQueryAttention with rotary caches, seqlens_k and total_sequence_length computed
from attention_mask, SimplifiedLayerNormalization in the default domain (onnxruntime's, outside the
ONNX standard) before attention and SkipSimplifiedLayerNormalization after it, SiLU MLP, opset 21),
run for a prompt and then two generated tokens by opforge and by onnxruntime, each feeding back its
own present key/values."""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import opforge
from tests.support.numeric import assert_close, assert_would_catch

MS = "com.microsoft"
HIDDEN, HEADS, KV_HEADS, HEAD, FFN, VOCAB, MAX_POSITIONS = 64, 4, 2, 16, 96, 40, 32


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def decoder(seed=0):
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.standard_normal(shape) * 0.15).astype(np.float32)  # noqa: E731
    half = HEAD // 2
    angles = np.arange(MAX_POSITIONS)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None, :]
    inits = [_init("embed", w(VOCAB, HIDDEN)), _init("norm1", 1 + w(HIDDEN)), _init("norm2", 1 + w(HIDDEN)),
             _init("norm_final", 1 + w(HIDDEN)), _init("wq", w(HIDDEN, HEADS * HEAD)),
             _init("wk", w(HIDDEN, KV_HEADS * HEAD)), _init("wv", w(HIDDEN, KV_HEADS * HEAD)),
             _init("wo", w(HEADS * HEAD, HIDDEN)), _init("w_gate", w(HIDDEN, FFN)), _init("w_up", w(HIDDEN, FFN)),
             _init("w_down", w(FFN, HIDDEN)), _init("lm_head", w(HIDDEN, VOCAB)),
             _init("cos_cache", np.cos(angles).astype(np.float32)), _init("sin_cache", np.sin(angles).astype(np.float32)),
             _init("one", np.array([1], np.int64)), _init("axis1", np.array([1], np.int64))]
    n = helper.make_node
    nodes = [
        # the builder's attention-mask subgraph: seqlens_k = sum(mask) - 1, total = mask's length
        n("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], keepdims=0),
        n("Sub", ["mask_sum", "one"], ["seqlens_i64"]), n("Cast", ["seqlens_i64"], ["seqlens_k"], to=TensorProto.INT32),
        n("Shape", ["attention_mask"], ["mask_shape"]), n("Gather", ["mask_shape", "one"], ["total_1d"], axis=0),
        n("Squeeze", ["total_1d"], ["total_i64"]), n("Cast", ["total_i64"], ["total_seq_len"], to=TensorProto.INT32),
        n("Gather", ["embed", "input_ids"], ["x0"], axis=0),
        n("SimplifiedLayerNormalization", ["x0", "norm1"], ["h1"], axis=-1, epsilon=1e-5, stash_type=1),
        n("MatMul", ["h1", "wq"], ["q"]), n("MatMul", ["h1", "wk"], ["k"]), n("MatMul", ["h1", "wv"], ["v"]),
        n("GroupQueryAttention", ["q", "k", "v", "past_key_values.0.key", "past_key_values.0.value", "seqlens_k",
                                  "total_seq_len", "cos_cache", "sin_cache"],
          ["attn", "present.0.key", "present.0.value"], domain=MS, num_heads=HEADS, kv_num_heads=KV_HEADS,
          scale=float(1 / np.sqrt(HEAD)), do_rotary=1, rotary_interleaved=0, local_window_size=-1, softcap=0.0),
        n("MatMul", ["attn", "wo"], ["o"]),
        n("SkipSimplifiedLayerNormalization", ["o", "x0", "norm2"], ["h2", "", "", "r1"], domain=MS, epsilon=1e-5),
        n("MatMul", ["h2", "w_gate"], ["gate"]), n("Sigmoid", ["gate"], ["gate_sig"]),
        n("Mul", ["gate", "gate_sig"], ["silu"]), n("MatMul", ["h2", "w_up"], ["up"]),
        n("Mul", ["silu", "up"], ["act"]), n("MatMul", ["act", "w_down"], ["down"]),
        n("SkipSimplifiedLayerNormalization", ["down", "r1", "norm_final"], ["h3"], domain=MS, epsilon=1e-5),
        n("MatMul", ["h3", "lm_head"], ["logits"]),
    ]
    cache = ["batch", KV_HEADS, "past_sequence_length", HEAD]
    present = ["batch", KV_HEADS, "total_sequence_length", HEAD]
    graph = helper.make_graph(
        nodes, "decoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence_length"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_sequence_length"]),
         helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, cache),
         helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, cache)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence_length", VOCAB]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, present),
         helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, present)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model.SerializeToString()


def test_prompt_then_two_generated_tokens_match_onnxruntime():
    model = decoder()
    ours, theirs = opforge.InferenceSession(model), ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert {p for _, _, p in ours.node_providers()} == {"CPUExecutionProvider"}, ours.node_providers()
    batch, prompt = 2, 6
    ids = np.random.default_rng(1).integers(0, VOCAB, (batch, prompt)).astype(np.int64)
    empty = np.zeros((batch, KV_HEADS, 0, HEAD), np.float32)
    caches = {"ours": (empty, empty), "theirs": (empty, empty)}
    length = prompt
    for step in range(3):
        mask = np.ones((batch, length), np.int64)
        outs = {}
        for who, sess in (("ours", ours), ("theirs", theirs)):
            feeds = {"input_ids": ids, "attention_mask": mask, "past_key_values.0.key": caches[who][0],
                     "past_key_values.0.value": caches[who][1]}
            outs[who] = sess.run(None, feeds)
            caches[who] = (outs[who][1], outs[who][2])
        for name, got, want in zip(("logits", "present key", "present value"), outs["ours"], outs["theirs"]):
            where = f"step {step}: {name}"
            assert got.shape == want.shape == ((batch, ids.shape[1], VOCAB) if name == "logits" else
                                               (batch, KV_HEADS, length, HEAD)), where
            assert_close(got, want, 1e-4, 1e-5, where)
            assert_would_catch(got, want, 1e-4, 1e-5, where)
        ids = outs["theirs"][0][:, -1].argmax(-1)[:, None].astype(np.int64)  # greedy, the same token for both
        length += 1
