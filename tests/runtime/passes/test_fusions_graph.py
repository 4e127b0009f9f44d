"""Graph rewrites beyond convolutions: MatMul+Add -> Gemm, GELU and LayerNorm patterns, Cast
elimination, Transpose cancellation and Reshape merging (see fusion_check for the checks)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.fusion_check import LEVEL, check_fusion, rng, session
from tests.support.onnx_builders import tensor


def build(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(np.asarray(v), n)
                                                             for n, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def const(value, dtype=np.float32):
    return np.asarray(value, dtype)


def ops(sess):
    return [op for _, op, _ in sess.node_providers()]


# ---- MatMul + Add -> Gemm ----

@pytest.mark.parametrize("c_shape", [[5], [1, 5], [3, 5], [3, 1], []])
def test_matmul_add_becomes_gemm(tmp_path, c_shape):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]), helper.make_node("Add", ["p", "c"], ["y"])]
    inits = [("b", rng.standard_normal((4, 5)).astype(np.float32)),
             ("c", rng.standard_normal(c_shape).astype(np.float32))]
    model = build(nodes, [tensor("a", [3, 4])], [tensor("y", None)], inits)
    check_fusion(model, tmp_path, ["Gemm"], "fuse_matmul_add", level=LEVEL.ORT_ENABLE_BASIC)


def test_batched_matmul_add_is_not_a_gemm():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]), helper.make_node("Add", ["p", "c"], ["y"])]
    inits = [("b", const(rng.standard_normal((4, 5)))), ("c", const(rng.standard_normal(5)))]
    # at the basic level: from the extended level on, pack_matmul_weights takes both nodes
    sess = session(build(nodes, [tensor("a", [2, 3, 4])], [tensor("y", None)], inits), LEVEL.ORT_ENABLE_BASIC)
    assert ops(sess) == ["MatMul", "Add"] and sess.pass_stats["fuse_matmul_add"] == 0


# ---- GELU ----

def gelu_nodes(variant):
    if variant == "div_then_half":   # x * (1 + erf(x / sqrt2)) * 0.5
        return [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
                helper.make_node("Mul", ["m", "half"], ["y"])]
    return [helper.make_node("Mul", ["x", "inv_sqrt2"], ["d"]), helper.make_node("Mul", ["x", "half"], ["h"]),
            helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["one", "e"], ["a"]),
            helper.make_node("Mul", ["h", "a"], ["y"])]


GELU_CONSTANTS = [("sqrt2", const(np.sqrt(2))), ("inv_sqrt2", const(1 / np.sqrt(2))), ("one", const(1.0)),
                  ("half", const(0.5))]


@pytest.mark.parametrize("variant", ["div_then_half", "half_first"])
@pytest.mark.parametrize("opset,domain", [(17, "com.microsoft"), (20, "")])
def test_gelu_pattern_becomes_gelu(tmp_path, variant, opset, domain):
    model = build(gelu_nodes(variant), [tensor("x", [4, 33])], [tensor("y", None)], GELU_CONSTANTS, opset)
    sess = check_fusion(model, tmp_path, ["Gelu"], "fuse_gelu")
    assert [d for d in (n.domain for n in sess._executor.graph.nodes)] == [domain]


def test_gelu_with_an_inner_value_read_elsewhere_stays():
    model = build(gelu_nodes("div_then_half"), [tensor("x", [4, 8])], [tensor("y", None), tensor("e", None)],
                  GELU_CONSTANTS)
    assert session(model).pass_stats["fuse_gelu"] == 0


# ---- LayerNorm ----

def layernorm_nodes(opset, square="Pow", affine=True):
    axes = {"axes": [-1]} if opset < 18 else {}
    mean_in = ["x"] if opset < 18 else ["x", "axes"]
    nodes = [helper.make_node("ReduceMean", mean_in, ["mean"], **axes),
             helper.make_node("Sub", ["x", "mean"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]) if square == "Pow" else helper.make_node("Mul", ["d", "d"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"] + mean_in[1:], ["var"], **axes),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["std"]),
             helper.make_node("Div", ["d", "std"], ["n" if affine else "y"])]
    if affine:
        nodes += [helper.make_node("Mul", ["n", "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"])]
    return nodes


def layernorm_constants():
    return [("two", const(2.0)), ("eps", const(1e-5)), ("axes", np.array([-1], np.int64)),
            ("gamma", const(rng.uniform(0.5, 1.5, 24))), ("beta", const(rng.standard_normal(24)))]


@pytest.mark.parametrize("opset,square,affine", [(17, "Pow", True), (18, "Pow", True), (17, "Mul", True),
                                                  (17, "Pow", False)])
def test_layernorm_pattern_becomes_layernormalization(tmp_path, opset, square, affine):
    model = build(layernorm_nodes(opset, square, affine), [tensor("x", [2, 5, 24])], [tensor("y", None)],
                  layernorm_constants(), opset)
    check_fusion(model, tmp_path, ["LayerNormalization"], "fuse_layernorm")


def test_layernorm_before_opset_17_stays_unfused():
    model = build(layernorm_nodes(13), [tensor("x", [2, 24])], [tensor("y", None)], layernorm_constants(), 13)
    sess = session(model)
    assert sess.pass_stats["fuse_layernorm"] == 0 and "LayerNormalization" not in ops(sess)


# ---- Cast elimination ----

def cast(src, dst, to):
    return helper.make_node("Cast", [src], [dst], to=to)


def test_cast_to_the_same_type_goes(tmp_path):
    nodes = [cast("x", "c", TensorProto.FLOAT), helper.make_node("Relu", ["c"], ["y"])]
    check_fusion(build(nodes, [tensor("x", [3, 4])], [tensor("y", None)]), tmp_path, ["Relu"], "eliminate_casts",
                 level=LEVEL.ORT_ENABLE_BASIC)


def test_lossless_round_trip_goes(tmp_path):
    nodes = [cast("x", "d", TensorProto.DOUBLE), cast("d", "f", TensorProto.FLOAT), helper.make_node("Relu", ["f"], ["y"])]
    check_fusion(build(nodes, [tensor("x", [3, 4])], [tensor("y", None)]), tmp_path, ["Relu"], "eliminate_casts",
                 count=2, level=LEVEL.ORT_ENABLE_BASIC)


def test_lossy_round_trip_and_graph_outputs_stay():
    nodes = [cast("x", "i", TensorProto.INT32), cast("i", "f", TensorProto.FLOAT), cast("f", "y", TensorProto.FLOAT)]
    sess = session(build(nodes, [tensor("x", [3, 4])], [tensor("y", None)]))
    assert ops(sess) == ["Cast", "Cast", "Cast"] and sess.pass_stats["eliminate_casts"] == 0


def test_float8_round_trip_through_float16_stays():
    # float8_e5m2 -> float16 -> float8_e5m2 keeps every value but inf: the saturating cast back
    # clips it to the largest finite value, so the casts must stay
    import ml_dtypes

    nodes = [cast("x", "h", TensorProto.FLOAT16), cast("h", "e", TensorProto.FLOAT8E5M2),
             cast("e", "y", TensorProto.FLOAT)]
    sess = session(build(nodes, [tensor("x", [3], TensorProto.FLOAT8E5M2)], [tensor("y", None)]))
    assert sess.pass_stats["eliminate_casts"] == 0
    x = np.array([np.inf, -1.5, 2.0], np.float32).astype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.array([57344.0, -1.5, 2.0], np.float32))


# ---- Transpose cancellation and Reshape merging ----

def test_transposes_that_undo_each_other_go(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]), helper.make_node("Relu", ["t2"], ["y"])]
    check_fusion(build(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)]), tmp_path, ["Relu"],
                 "cancel_transposes", count=2, level=LEVEL.ORT_ENABLE_BASIC)


def test_two_transposes_merge_into_one(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 2, 1])]
    check_fusion(build(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)]), tmp_path, ["Transpose"],
                 "cancel_transposes", level=LEVEL.ORT_ENABLE_BASIC)


def test_a_transpose_read_twice_is_kept_for_its_other_reader(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]), helper.make_node("Relu", ["t2"], ["y"]),
             helper.make_node("Neg", ["t1"], ["n"])]
    check_fusion(build(nodes, [tensor("x", [3, 4])], [tensor("y", None), tensor("n", None)]), tmp_path,
                 ["Transpose", "Relu", "Neg"], "cancel_transposes", level=LEVEL.ORT_ENABLE_BASIC)


def test_reshape_of_a_reshape_reads_the_original(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]), helper.make_node("Reshape", ["r1", "s2"], ["y"])]
    inits = [("s1", np.array([6, 4], np.int64)), ("s2", np.array([4, -1], np.int64))]
    check_fusion(build(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], inits), tmp_path, ["Reshape"],
                 "merge_reshapes", level=LEVEL.ORT_ENABLE_BASIC)


def test_reshape_to_its_own_shape_goes(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    check_fusion(build(nodes, [tensor("x", [2, 6])], [tensor("y", None)], [("s", np.array([2, -1], np.int64))]),
                 tmp_path, ["Relu"], "merge_reshapes", level=LEVEL.ORT_ENABLE_BASIC)


def test_identity_and_inference_dropout_go(tmp_path):
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Dropout", ["b", "r"], ["c"], seed=3), helper.make_node("Neg", ["c"], ["y"])]
    check_fusion(build(nodes, [tensor("x", [3, 4])], [tensor("y", None)], [("r", const(0.3))]), tmp_path,
                 ["Relu", "Neg"], "eliminate_identities", count=2, level=LEVEL.ORT_ENABLE_BASIC)


def test_an_identity_to_a_graph_output_has_its_producer_write_there(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"]),
             helper.make_node("Neg", ["x"], ["n"])]
    check_fusion(build(nodes, [tensor("x", [3, 4])], [tensor("y", None), tensor("n", None)]), tmp_path,
                 ["Relu", "Neg"], "eliminate_identities", level=LEVEL.ORT_ENABLE_BASIC)


@pytest.mark.parametrize("also", ["read by another node", "a graph output itself"])
def test_an_identity_to_a_graph_output_of_a_value_needed_elsewhere_stays(tmp_path, also):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    outputs = [tensor("y", None), tensor("r", None)]
    if also == "read by another node":
        nodes.append(helper.make_node("Neg", ["r"], ["n"]))
        outputs[1] = tensor("n", None)
    check_fusion(build(nodes, [tensor("x", [3, 4])], outputs), tmp_path, [n.op_type for n in nodes],
                 "eliminate_identities", count=0, level=LEVEL.ORT_ENABLE_BASIC)


def test_dropout_in_training_with_a_read_mask_or_as_a_graph_output_stays():
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["a"], seed=1), helper.make_node("Relu", ["a"], ["y1"]),
             helper.make_node("Dropout", ["x"], ["b", "mask"]), helper.make_node("Relu", ["b"], ["y2"]),
             helper.make_node("Identity", ["x"], ["y"])]
    outputs = [tensor("y1", None), tensor("y2", None), tensor("mask", None, TensorProto.BOOL), tensor("y", None)]
    sess = session(build(nodes, [tensor("x", [3, 4])], outputs, [("r", const(0.5)), ("t", np.array(True))]))
    assert sorted(ops(sess)) == ["Dropout", "Dropout", "Identity", "Relu", "Relu"]
    assert sess.pass_stats["eliminate_identities"] == 0
