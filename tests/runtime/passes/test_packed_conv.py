"""Conv and FusedConv on weights packed at session creation (com.opforge PackedConv,
pack_conv_weights) against onnxruntime: output channels that leave a panel part-full, output rows
cut into several row blocks, strides, asymmetric pads, dilation, non-square kernels, batches,
maps cut into several tasks, every fused activation with and without Z, two threads, and the
convs that must stay unpacked."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxruntime as ort
import opforge
from tests.support.kernel_variants import assert_path, build_isa, paths_taken
from tests.support.numeric import assert_close, assert_would_catch, scaled_atol
from tests.support.onnx_builders import tensor
from tests.support.optimized import ops, session

LEVEL = opforge.GraphOptimizationLevel
RTOL, ATOL = 1e-5, 1e-5
rng = np.random.default_rng(0)
ISAS = ("avx512", "avx2")   # the instruction sets PackedConv has tiles for (conv_packed.cpp)


@pytest.fixture(autouse=True)
def _kernels_with_tiles():
    if build_isa() not in ISAS:
        pytest.skip(f"PackedConv has tiles for {ISAS} only; this kernel build is {build_isa()}")


def conv_model(x_shape, w_shape, op="Conv", z=False, **attrs):
    """x -> Conv or com.microsoft FusedConv (w, b[, z]) -> y, with fan-in scaled weights so the
    clipping activations see both sides."""
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    names, inputs = ["x", "w", "b"], [tensor("x", list(x_shape))]
    if z:
        names.append("z")
        inputs.append(tensor("z", out_shape(x_shape, w_shape, attrs)))
    domain = "com.microsoft" if op == "FusedConv" else ""
    node = helper.make_node(op, names, ["y"], name="conv", domain=domain, **attrs)
    graph = helper.make_graph([node], "g", inputs, [tensor("y", None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def check(model, feeds, threads=1, packed=True):
    sess = session(model, threads)
    assert ops(sess) == (["PackedConv"] if packed else [model.graph.node[0].op_type])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with paths_taken() as taken:
        for _ in range(2):   # the first run records, the second runs the compiled plan
            got = sess.run(None, feeds)[0]
            assert_close(got, want, RTOL, scaled_atol(want, ATOL), "PackedConv vs onnxruntime")
    assert_would_catch(got, want, RTOL, scaled_atol(want, ATOL), "PackedConv vs onnxruntime")
    if packed:
        assert_path(taken, "conv.packed", ISAS)


def feeds(x_shape, y_shape=None):
    out = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if y_shape is not None:
        out["z"] = rng.standard_normal(y_shape).astype(np.float32)
    return out


# (X shape, W shape, attributes): all convs that pack_conv_weights packs
CASES = {
    "3x3_k432": ((1, 48, 13, 13), (50, 48, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 56 outputs: a full panel and one of 24; rows of 29 in blocks of 10, 10 and 9
    "3x3": ((1, 64, 29, 29), (56, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    "stride2_pads": ((2, 60, 17, 15), (52, 60, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 2])),
    "dilation": ((1, 64, 16, 16), (32, 64, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "5x3": ((1, 40, 12, 14), (48, 40, 5, 3), dict(pads=[2, 1, 2, 1])),
    "1x1_long_sum": ((1, 1024, 7, 7), (90, 1024, 1, 1), {}),
    "1x1_stride2_small_map": ((1, 512, 13, 13), (60, 512, 1, 1), dict(strides=[2, 2])),
    "1x1_short_sum": ((1, 16, 20, 20), (64, 16, 1, 1), {}),
    # 1600 positions: the map is cut into tasks of at most 1024 even on one thread
    "large_map": ((1, 64, 40, 40), (30, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
}


def out_shape(x_shape, w_shape, attrs):
    pads, strides, dil = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    return [x_shape[0], w_shape[0]] + [
        (x_shape[2 + i] + pads[i] + pads[i + 2] - dil[i] * (w_shape[2 + i] - 1) - 1) // strides[i] + 1 for i in range(2)]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_conv_matches_onnxruntime(case, threads):
    x_shape, w_shape, attrs = CASES[case]
    check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), threads)


ACTIVATIONS = [("", []), ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.1]),
               ("Clip", [-0.4, 0.6]), ("HardSigmoid", [0.3, 0.5])]


@pytest.mark.parametrize("act,params", ACTIVATIONS)
@pytest.mark.parametrize("z", [False, True])
def test_fused_conv_epilogue(act, params, z):
    x_shape, w_shape, attrs = CASES["stride2_pads"]
    if act:   # onnxruntime refuses an empty activation
        attrs = dict(attrs, activation=act, **({"activation_params": params} if params else {}))
    model = conv_model(x_shape, w_shape, op="FusedConv", z=z, **attrs)
    check(model, feeds(x_shape, out_shape(x_shape, w_shape, attrs) if z else None), threads=2)


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 3, 32, 32), (64, 3, 3, 3), dict(pads=[1, 1, 1, 1])),     # 3 input channels: read in place
    ((1, 128, 27, 27), (16, 128, 1, 1), {}),                      # 1x1, M = 16: half a panel
    ((1, 512, 13, 13), (48, 512, 1, 1), {}),                      # 1x1, M = 48: a third of a panel empty
    ((1, 32, 14, 14), (128, 32, 1, 1), {}),                       # 1x1, K = 32 and M = 128
    ((1, 40, 12, 14), (20, 40, 3, 3), dict(pads=[1, 1, 1, 1])),   # 3x3, M = 20
])
def test_convs_that_pack_on_avx2_only(x_shape, w_shape, attrs):
    """conv_gemm_f32's AVX-512 tiles beat packing on these; AVX2 builds have no such tiles, and
    packing beat OpenBLAS on each."""
    check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), packed=build_isa() == "avx2")


# panels of 16 channels or fewer (AVX2: 6 positions x 16 channels a tile), their positions taken
# across output rows: 7 x 9 = 63 positions (tiles of 6 and a last of 3), a batch of 2, padding
# (the source a copy with its own row pitch), 48 = a full panel and a half, strides, and groups
# of 16; K past one block of 128 where the panels are few (else row tiles take them)
HALF_PANEL = {
    "1x1_m16": ((1, 160, 7, 9), (16, 160, 1, 1), {}),
    "3x3_m48_batch": ((2, 24, 11, 5), (48, 24, 3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_stride2_m48": ((1, 20, 15, 13), (48, 20, 3, 3), dict(strides=[2, 2], pads=[1, 1, 0, 0])),
    "1x1_groups_of_16": ((1, 288, 10, 10), (32, 144, 1, 1), dict(group=2)),
}


# panels of 8 channels or fewer (AVX2: 12 positions x 8 channels): 1x1 convs of 4 groups of 34
# output channels, a full panel and 2 channels each; a 3x3 of 40 = 32 + 8 (K past 128 again)
QUARTER_PANEL = {
    "1x1_groups_of_34": ((1, 544, 9, 11), (136, 136, 1, 1), dict(group=4)),
    "3x3_m40_stride2": ((1, 16, 17, 19), (40, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
}


@pytest.mark.parametrize("case", list(HALF_PANEL) + list(QUARTER_PANEL))
@pytest.mark.parametrize("threads", [1, 2])
def test_narrow_panels(case, threads):
    x_shape, w_shape, attrs = {**HALF_PANEL, **QUARTER_PANEL}[case]
    with paths_taken() as taken:
        check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), threads)
    path = "conv.packed.panel_of_16" if case in HALF_PANEL else "conv.packed.panel_of_8"
    assert_path(taken, path, ("avx2",))


@pytest.mark.parametrize("threads", [1, 2])
def test_panels_of_24(threads):
    """M = 24: 4 positions x 24 channels a tile on AVX2 (K = 144; shufflenet's first conv, of
    K = 27, runs row tiles)."""
    x_shape, w_shape, attrs = (1, 16, 23, 29), (24, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])
    with paths_taken() as taken:
        check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), threads)
    assert_path(taken, "conv.packed.panel_of_24", ("avx2",))


# row tiles (AVX2: one K block, at most 3 panels a group, output rows of 8 or more): vectors of
# output positions along Y's rows. First convs of 3 channels (strided, padded: the source a copy
# whose rows are the output rows, 15 = 8 + a vector shifted back over it), 1x1s read in place
# (a plane is one segment across its rows), 4 groups of 34 (a panel of 32 and one of 2), rows
# of exactly 8, K = 128, a batch of 2
ROW_TILES = {
    "first_conv_m24": ((1, 3, 29, 29), (24, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "first_conv_m64_no_pads": ((2, 3, 33, 31), (64, 3, 3, 3), dict(strides=[2, 2])),
    "1x1_m16_k64": ((1, 64, 7, 9), (16, 64, 1, 1), {}),
    "1x1_groups_of_34": ((1, 136, 9, 11), (136, 34, 1, 1), dict(group=4)),
    "3x3_rows_of_8": ((2, 8, 10, 8), (40, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    "1x1_k128_m96": ((1, 128, 6, 13), (96, 128, 1, 1), {}),
}


@pytest.mark.parametrize("act,params", ACTIVATIONS)
def test_row_tiles_epilogue(act, params):
    """Z and every activation (Tanh and Sigmoid after the tiles), over tasks that end inside an
    output row on 2 threads (segments narrower than a vector: masked)."""
    x_shape, w_shape, attrs = (1, 3, 21, 23), (24, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])
    if act:
        attrs = dict(attrs, activation=act, **({"activation_params": params} if params else {}))
    model = conv_model(x_shape, w_shape, op="FusedConv", z=True, **attrs)
    with paths_taken() as taken:
        check(model, feeds(x_shape, out_shape(x_shape, w_shape, attrs)), threads=2)
    assert_path(taken, "conv.packed.row_tiles", ("avx2",))


# grouped convs: each group's output channels in panels of their own, its input channels read
GROUPED = {
    "3x3_two_groups": ((1, 64, 14, 14), (64, 32, 3, 3), dict(pads=[1, 1, 1, 1], group=2)),
    # shufflenet's 1x1 of 4 groups: 34 outputs per group, a full panel and one of 2
    "1x1_four_groups": ((2, 136, 9, 11), (136, 34, 1, 1), dict(group=4)),
    "1x1_short_groups_stride2": ((1, 24, 17, 17), (112, 6, 1, 1), dict(group=4, strides=[2, 2])),
}


@pytest.mark.parametrize("case", list(GROUPED))
@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_convs_pack_on_avx2_only(case, threads):
    """conv_gemm_f32's AVX-512 tiles run grouped convs; AVX2 builds pack them."""
    x_shape, w_shape, attrs = GROUPED[case]
    check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), threads, packed=build_isa() == "avx2")


@pytest.mark.parametrize("act,params", [("Relu", []), ("HardSigmoid", [0.3, 0.5])])
def test_grouped_fused_conv_epilogue(act, params):
    x_shape, w_shape, attrs = GROUPED["1x1_four_groups"]
    attrs = dict(attrs, activation=act, **({"activation_params": params} if params else {}))
    model = conv_model(x_shape, w_shape, op="FusedConv", z=True, **attrs)
    check(model, feeds(x_shape, out_shape(x_shape, w_shape, attrs)), threads=2, packed=build_isa() == "avx2")


# convs whose input has a symbolic batch, height and width (as exporters write detection and OCR
# models): they pack, and one session runs maps of each size, a 1x1 map and a batch of 3 among them
SYMBOLIC = {
    "3x3": ((64, 56, 3, 3), dict(pads=[1, 1, 1, 1])),
    "1x1_position_rows_stride2": ((128, 96, 1, 1), dict(strides=[2, 2])),
    "1x1_row_tiles": ((64, 32, 1, 1), {}),
}


@pytest.mark.parametrize("case", list(SYMBOLIC))
def test_convs_over_symbolic_maps_pack(case):
    w_shape, attrs = SYMBOLIC[case]
    c = w_shape[1]
    model = conv_model(("N", c, "H", "W"), w_shape, **attrs)
    sess = session(model)
    assert ops(sess) == ["PackedConv"]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x_shape in [(1, c, 20, 30), (3, c, 13, 8), (1, c, 1, 1), (2, c, 56, 9)]:
        x = feeds(x_shape)
        want = theirs.run(None, x)[0]
        got = sess.run(None, x)[0]
        assert got.shape == want.shape
        assert_close(got, want, RTOL, scaled_atol(want, ATOL), f"{case} {x_shape}")
        assert_would_catch(got, want, RTOL, scaled_atol(want, ATOL), f"{case} {x_shape}")


def test_depthwise_convs_stay_unpacked():
    x_shape, w_shape, attrs = (1, 12, 10, 10), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=12)
    check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), packed=False)


def test_weights_fed_at_run_time_and_other_settings_stay_unpacked(monkeypatch):
    x_shape, w_shape, attrs = CASES["3x3"]
    model = conv_model(x_shape, w_shape, **attrs)
    assert ops(session(model, level=LEVEL.ORT_ENABLE_BASIC)) == ["Conv"]
    monkeypatch.setenv("OPFORGE_GEMM_ISA", "blas")
    assert ops(session(model)) == ["Conv"]
    monkeypatch.delenv("OPFORGE_GEMM_ISA")
    model.graph.input.append(tensor("w", list(w_shape)))
    model.graph.initializer.pop(0)
    assert ops(session(model)) == ["Conv"]


# AVX2 1x1 convs of 4 panels or more a group read their input packed position-major, once per
# chunk of positions on each thread: K a multiple of 8 or not (the transposing pack's tail),
# positions not a multiple of 8, 56x56 maps cut into several chunks, a strided copy as source,
# pads, groups with a batch of 2 (one packed chunk per image and group), weight-heavy convs
POSITION_ROWS = {
    "1x1_96_to_128_56x56": ((1, 96, 56, 56), (128, 96, 1, 1), {}),
    "1x1_k13_m130": ((1, 13, 9, 11), (130, 13, 1, 1), {}),
    "1x1_stride2": ((1, 20, 17, 17), (128, 20, 1, 1), dict(strides=[2, 2])),
    "1x1_pads": ((1, 24, 6, 10), (160, 24, 1, 1), dict(pads=[1, 0, 2, 1])),
    "1x1_groups_batch": ((2, 40, 7, 7), (256, 20, 1, 1), dict(group=2)),
    # weights 8x the maps (other convs go panel by panel there; position rows chunk by chunk)
    "1x1_weights_outweigh_maps": ((1, 256, 5, 5), (200, 256, 1, 1), {}),
}


# each AVX2 way of reading the input, with the cases that must take it
READ_PATHS = {"conv.packed.row_tiles": ROW_TILES, "conv.packed.position_rows": POSITION_ROWS}


@pytest.mark.parametrize("path,case", [(path, case) for path, cases in READ_PATHS.items() for case in cases])
@pytest.mark.parametrize("threads", [1, 2])
def test_avx2_read_paths(path, case, threads):
    x_shape, w_shape, attrs = READ_PATHS[path][case]
    with paths_taken() as taken:
        check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), threads)
    assert_path(taken, path, ("avx2",))


def test_position_rows_with_residual_and_activation():
    x_shape, w_shape = (1, 36, 10, 12), (128, 36, 1, 1)
    attrs = dict(activation="LeakyRelu", activation_params=[0.1])
    model = conv_model(x_shape, w_shape, op="FusedConv", z=True, **attrs)
    with paths_taken() as taken:
        check(model, feeds(x_shape, out_shape(x_shape, w_shape, attrs)), threads=2)
    assert_path(taken, "conv.packed.position_rows", ("avx2",))


def test_small_1x1_convs_read_in_place():
    """Two panels (M = 64): packing the rows cost more than it saved."""
    x_shape, w_shape = (1, 64, 14, 14), (64, 64, 1, 1)
    with paths_taken() as taken:
        check(conv_model(x_shape, w_shape), feeds(x_shape))
    assert not any(path.startswith("conv.packed.position_rows") for path in taken), sorted(taken)


def test_weight_heavy_convs_split_by_panel():
    """Where a conv's weights outweigh its maps each thread takes whole panels (it streams only
    its own weights), except over position rows (each thread would pack every position); the
    sums are those of a split by positions."""
    x_shape, w_shape = (1, 256, 4, 9), (200, 256, 3, 3)
    model = conv_model(x_shape, w_shape, pads=[1, 1, 1, 1])
    with paths_taken() as taken:
        check(model, feeds(x_shape), threads=2)
    assert_path(taken, "conv.packed.by_panel", ISAS)
    x_shape, w_shape, attrs = POSITION_ROWS["1x1_weights_outweigh_maps"]
    with paths_taken() as taken:
        check(conv_model(x_shape, w_shape, **attrs), feeds(x_shape), threads=2)
    if build_isa() == "avx2":
        assert not any(path.startswith("conv.packed.by_panel") for path in taken), sorted(taken)


def with_hard_swish(model, also_output=False):
    """``model`` with a HardSwish reading its conv's output y (which stays a graph output too
    where ``also_output``)."""
    graph = model.graph
    graph.node[0].output[0] = "c"
    graph.node.append(helper.make_node("HardSwish", ["c"], ["y"]))
    if also_output:
        graph.output.append(tensor("c", None))
    return model


# one case per AVX2 way of reading the input (position tiles, row tiles, position rows), and a
# strided one with Z and two threads
HARD_SWISH = {
    "position_tiles": (CASES["3x3"], "Conv", False),
    "row_tiles": (ROW_TILES["1x1_m16_k64"], "Conv", False),
    "position_rows_z": (POSITION_ROWS["1x1_pads"], "FusedConv", True),
    "stride2_pads_z": (CASES["stride2_pads"], "FusedConv", True),
}


@pytest.mark.parametrize("case", list(HARD_SWISH))
@pytest.mark.parametrize("threads", [1, 2])
def test_hard_swish_becomes_the_packed_conv_activation(case, threads):
    """MobileNetV3's convs end in HardSwish, which onnxruntime's FusedConv lacks: PackedConv
    takes it as its activation (x * clip(x / 6 + 1/2, 0, 1)), in registers on each read path."""
    (x_shape, w_shape, attrs), op, z = HARD_SWISH[case]
    model = with_hard_swish(conv_model(x_shape, w_shape, op=op, z=z, **attrs))
    feed = feeds(x_shape, out_shape(x_shape, w_shape, attrs) if z else None)
    sess = session(model, threads)
    assert ops(sess) == ["PackedConv"]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert (want < 0).any() and (want > 0).any() and (want == 0).sum() < want.size // 2  # both sides of the knee
    for _ in range(2):
        got = sess.run(None, feed)[0]
        assert_close(got, want, RTOL, scaled_atol(want, ATOL), "PackedConv + HardSwish vs onnxruntime")
    assert_would_catch(got, want, RTOL, scaled_atol(want, ATOL), "PackedConv + HardSwish vs onnxruntime")


def test_hard_swish_stays_where_its_input_is_needed_or_activated():
    x_shape, w_shape, attrs = CASES["3x3"]
    # the conv's own output is a graph output too: the HardSwish runs on its own
    model = with_hard_swish(conv_model(x_shape, w_shape, **attrs), also_output=True)
    assert ops(session(model)) == ["PackedConv", "HardSwish"]
    y, c = session(model).run(None, feeds(x_shape))
    want = c * np.clip(c / 6 + 0.5, 0, 1)   # ONNX's HardSwish of the conv's own output
    assert_close(y, want, RTOL, scaled_atol(want, ATOL), "HardSwish after PackedConv")
    assert_would_catch(y, want, RTOL, scaled_atol(want, ATOL), "HardSwish after PackedConv")
    # a conv fused with Relu first keeps it; the HardSwish after it stays
    model = with_hard_swish(conv_model(x_shape, w_shape, op="FusedConv", activation="Relu", **attrs))
    assert ops(session(model)) == ["PackedConv", "HardSwish"]


def test_fused_conv_has_no_hard_swish():
    """com.microsoft FusedConv keeps onnxruntime's activations (HardSwish is PackedConv's alone)."""
    x_shape, w_shape, attrs = CASES["3x3"]
    model = conv_model(x_shape, w_shape, op="FusedConv", activation="HardSwish", **attrs)
    with pytest.raises(opforge.OpforgeError, match="HardSigmoid, got 'HardSwish'"):
        session(model, level=LEVEL.ORT_DISABLE_ALL).run(None, feeds(x_shape))
