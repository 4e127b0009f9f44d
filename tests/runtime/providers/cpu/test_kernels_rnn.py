"""RNN, GRU and LSTM kernels checked against onnxruntime on torch-like shapes."""
import numpy as np
import pytest

import opforge
from tests.support.kernel_check import check, run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch

RNG = np.random.default_rng(0)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def layer_inputs(op, seq=7, batch=3, inp=16, hidden=32, dirs=1, batch_first=False, lens=None, states=True):
    """X, W, R, B, sequence_lens, initial_h (and initial_c, P for LSTM), scaled like torch's init."""
    g = GATES[op] * hidden
    k = 1 / np.sqrt(hidden)
    x = RNG.standard_normal((batch, seq, inp) if batch_first else (seq, batch, inp)).astype(np.float32)
    u = lambda *shape: RNG.uniform(-k, k, shape).astype(np.float32)  # noqa: E731
    state_shape = (batch, dirs, hidden) if batch_first else (dirs, batch, hidden)
    inputs = [x, u(dirs, g, inp), u(dirs, g, hidden), u(dirs, 2 * g),
              None if lens is None else np.array(lens, np.int32),
              RNG.standard_normal(state_shape).astype(np.float32) if states else None]
    if op == "LSTM":
        inputs += [RNG.standard_normal(state_shape).astype(np.float32) if states else None, u(dirs, 3 * hidden)]
    return inputs


def check_layer(kernels, op, inputs, attrs, opset=14):
    outs = 3 if op == "LSTM" else 2
    ours = check(kernels, op, inputs, attrs, opset=opset, num_outputs=outs, rtol=1e-4, atol=1e-5)
    want = run_onnxruntime(op, inputs, attrs, opset, outs)
    for got, expected in zip(ours, want):
        assert_would_catch(got, expected, 1e-4, 1e-5, op)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_layer_directions_and_sequence_lens(kernels, op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = layer_inputs(op, dirs=dirs, lens=[7, 4, 1])
    check_layer(kernels, op, inputs, {"hidden_size": 32, "direction": direction})


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_as_torch_writes_it(kernels, direction):
    """No peepholes, clip or custom activations: the vectorised cell (lstm_row_plain), over a
    sequence long enough for its errors to compound, a hidden size that is not a multiple of 16."""
    dirs = 2 if direction == "bidirectional" else 1
    inputs = layer_inputs("LSTM", seq=60, batch=2, inp=24, hidden=70, dirs=dirs, lens=[60, 33])[:7]
    check_layer(kernels, "LSTM", inputs, {"hidden_size": 70, "direction": direction})


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layer_batch_first_matches_time_first(kernels, op):
    """onnxruntime refuses layout=1, so the batch-first run is compared with its time-first one."""
    inputs = layer_inputs(op, dirs=2, lens=[7, 2, 5])
    attrs = {"hidden_size": 32, "direction": "bidirectional"}
    outs = 3 if op == "LSTM" else 2
    want = run_onnxruntime(op, inputs, attrs, 14, outs)
    swapped = [inputs[0].transpose(1, 0, 2)] + inputs[1:5] + [x.transpose(1, 0, 2) for x in inputs[5:7]] + inputs[7:]
    ours = kernels.op(op, domain="", version=14)(*swapped, layout=1, **attrs)
    assert_close(ours[0], want[0].transpose(2, 0, 1, 3), 1e-4, 1e-5, f"{op} Y")
    for k in range(1, outs):
        assert_close(ours[k], want[k].transpose(1, 0, 2), 1e-4, 1e-5, f"{op} state {k}")
    assert_would_catch(ours[0], want[0].transpose(2, 0, 1, 3), 1e-4, 1e-5, op)


def test_gru_linear_before_reset_as_torch_exports_it(kernels):
    inputs = layer_inputs("GRU", seq=9, batch=2, inp=24, hidden=40)
    check_layer(kernels, "GRU", inputs, {"hidden_size": 40, "linear_before_reset": 1})


@pytest.mark.parametrize("op,acts", [("RNN", ["Relu"]), ("GRU", ["HardSigmoid", "Softsign"]),
                                     ("LSTM", ["HardSigmoid", "Tanh", "Softsign"])])
def test_layer_clip_and_activations(kernels, op, acts):
    inputs = layer_inputs(op, hidden=8, inp=4)
    inputs[0] *= 3
    check_layer(kernels, op, inputs, {"hidden_size": 8, "clip": 0.7, "activations": acts,
                                      "activation_alpha": [0.3], "activation_beta": [0.4]})


def test_lstm_input_forget(kernels):
    inputs = layer_inputs("LSTM", hidden=8, inp=4)
    check_layer(kernels, "LSTM", inputs, {"hidden_size": 8, "input_forget": 1})


def test_bad_layers_give_clear_errors(kernels):
    inputs = layer_inputs("LSTM", hidden=8, inp=4)
    lstm = kernels.op("LSTM", domain="", version=14)
    with pytest.raises(opforge.OpError, match="direction"):
        lstm(*inputs, hidden_size=8, direction="sideways")
    with pytest.raises(opforge.OpError, match="W must be"):
        lstm(inputs[0], inputs[1][:, :8], *inputs[2:], hidden_size=8)
    with pytest.raises(opforge.OpError, match="unknown function"):
        lstm(*inputs, hidden_size=8, activations=["Sigmoid", "Tanh", "Cube"])
    lens = np.array([9, 1, 1], np.int32)
    with pytest.raises(opforge.OpError, match="sequence_lens"):
        lstm(inputs[0], inputs[1], inputs[2], inputs[3], lens, *inputs[5:], hidden_size=8)
