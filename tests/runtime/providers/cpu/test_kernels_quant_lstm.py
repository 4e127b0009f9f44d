"""com.microsoft's DynamicQuantizeLSTM against onnxruntime's CPU kernel, run single-threaded: with
more threads onnxruntime splits the batch into chunks whose hidden states it quantizes apart, a
thread-count artefact this kernel does not copy."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxruntime as ort
import opforge
from tests.support.exact_integers import exact_form
from tests.support.numeric import assert_close, assert_would_catch

MS = "com.microsoft"
RNG = np.random.default_rng(0)
# The quantization is the same (X and every hidden state get onnxruntime's scale and zero point,
# the int32 sums are exact); what differs is float rounding in the gates (opforge's SIMD sigmoid
# and tanh against MLAS's, a bias added in another order), a few 1e-7, which reach the next
# step's quantization only where a hidden value sits on a rounding boundary.
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def reseed():
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state


def one_node_model(inputs, attrs, outputs):
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node("DynamicQuantizeLSTM", names, list(outputs), domain=MS, **attrs)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                         for n, x in zip(names, inputs) if x is not None],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model.SerializeToString(), {n: x for n, x in zip(names, inputs) if x is not None}


def quantized(dirs, rows, cols, dtype, per_channel):
    """8-bit weights (dirs, rows, cols) with their scales and zero points, as quantize_dynamic
    writes them: int8 symmetric; uint8 with a zero point per direction, or one for all columns."""
    shape = (dirs, cols) if per_channel else (dirs,)
    scale = RNG.uniform(0.002, 0.01, shape).astype(np.float32)
    if dtype == np.int8:
        return RNG.integers(-127, 128, (dirs, rows, cols)).astype(np.int8), scale, np.zeros(shape, np.int8)
    zero = (np.full(shape, RNG.integers(100, 156)) if per_channel else RNG.integers(100, 156, shape)).astype(np.uint8)
    return RNG.integers(0, 256, (dirs, rows, cols)).astype(np.uint8), scale, zero


def lstm_inputs(dirs, dtype, per_channel, seq=6, batch=3, inp=20, hidden=16, lens=None, states=True, peep=False):
    w, ws, wz = quantized(dirs, inp, 4 * hidden, dtype, per_channel)
    r, rs, rz = quantized(dirs, hidden, 4 * hidden, dtype, per_channel)
    state = lambda: RNG.standard_normal((dirs, batch, hidden)).astype(np.float32) if states else None  # noqa: E731
    return [RNG.standard_normal((seq, batch, inp)).astype(np.float32), w, r,
            (RNG.standard_normal((dirs, 8 * hidden)) * 0.3).astype(np.float32),
            None if lens is None else np.array(lens, np.int32), state(), state(),
            (RNG.standard_normal((dirs, 3 * hidden)) * 0.3).astype(np.float32) if peep else None,
            ws, wz, rs, rz]


def check(inputs, attrs, outputs=("Y", "Y_h", "Y_c")):
    """Asserts that opforge's session runs the node on its CPU provider and that the outputs named
    in `outputs` ('' for one left out) equal onnxruntime's."""
    model, feeds = one_node_model(inputs, attrs, outputs)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    oracle = exact_form(onnx.load_from_string(model)).SerializeToString()   # int8 weights: exact integers
    want = ort.InferenceSession(oracle, options, providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = opforge.InferenceSession(model)
    assert [p for _, _, p in sess.node_providers()] == ["CPUExecutionProvider"]
    for name, g, w in zip([o for o in outputs if o], sess.run(None, feeds), want):
        assert_close(g, w, RTOL, ATOL, f"DynamicQuantizeLSTM {name}")
        assert_would_catch(g, w, RTOL, ATOL, f"DynamicQuantizeLSTM {name}")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_directions_dtypes_and_scales(direction, dtype, per_channel):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = lstm_inputs(dirs, dtype, per_channel, lens=[6, 3, 5])
    check(inputs, {"hidden_size": 16, "direction": direction})


@pytest.mark.parametrize("outputs", [("Y", "Y_h", "Y_c"), ("", "Y_h", "Y_c")])
def test_peepholes_and_finished_sequences(outputs):
    """Without Y, onnxruntime's recurrent GEMM sees a finished sequence's last state, not zeros:
    a different scale for the rows still running."""
    inputs = lstm_inputs(2, np.int8, True, seq=8, batch=4, lens=[8, 2, 5, 7], peep=True)
    check(inputs, {"hidden_size": 16, "direction": "bidirectional"}, outputs)


def test_long_sequence_without_states():
    inputs = lstm_inputs(1, np.uint8, False, seq=40, batch=2, inp=32, hidden=48, states=False)
    check(inputs, {"hidden_size": 48})


def test_activations_clip_and_coupled_gates():
    inputs = lstm_inputs(1, np.int8, True, peep=True)
    check(inputs, {"hidden_size": 16, "clip": 2.5, "input_forget": 1,
                            "activations": ["HardSigmoid", "Tanh", "Softsign"], "activation_alpha": [0.3],
                            "activation_beta": [0.4]})


def test_refuses_varying_uint8_zero_points(kernels):
    inputs = lstm_inputs(1, np.uint8, True)
    inputs[9] = inputs[9].copy()
    inputs[9][0, 3] += 1
    with pytest.raises(Exception, match="zero points"):
        kernels.op("DynamicQuantizeLSTM", domain=MS)(*inputs, hidden_size=16)
