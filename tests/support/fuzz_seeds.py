"""Hand-built seed models for the fuzzer (tests/support/fuzzing.py) covering kernels that no ONNX node test
exercises: ai.onnx.ml classifiers, regressors and feature ops, com.microsoft CropAndResize and
attention, PackedMatMul (written directly, and made by the packing pass from MatMul), random ops,
and float16/bfloat16/float8/int4 arithmetic and casts. Each is small and runs on onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ML, MS, OPFORGE = "ai.onnx.ml", "com.microsoft", "com.opforge"
F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32


def op_models() -> dict:
    """{name: (model, feeds)} for every hand-built seed."""
    rng = np.random.default_rng(0)
    return {f"op_{name}": build(rng) for name, build in sorted(_BUILDERS.items())}


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                             ir_version=9)


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _x(rng, shape=(3, 4)) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def ml_classifiers(rng):
    """Scaler -> Normalizer -> LinearClassifier, and a TreeEnsembleClassifier and an
    SVMClassifier on the same features."""
    nodes = [
        helper.make_node("Scaler", ["x"], ["scaled"], domain=ML, offset=[0.1] * 4, scale=[2.0] * 4),
        helper.make_node("Normalizer", ["scaled"], ["normal"], domain=ML, norm="L2"),
        helper.make_node("LinearClassifier", ["normal"], ["label", "proba"], domain=ML,
                         coefficients=rng.standard_normal(12).round(2).tolist(),
                         intercepts=[0.1, -0.2, 0.05], classlabels_ints=[0, 1, 2],
                         post_transform="SOFTMAX"),
        helper.make_node("TreeEnsembleClassifier", ["x"], ["tree_label", "tree_proba"], domain=ML,
                         nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
                         nodes_featureids=[0, 0, 0, 2, 0, 0], nodes_values=[0.0, 0, 0, 0.5, 0, 0],
                         nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2,
                         nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
                         class_treeids=[0, 0, 1, 1], class_nodeids=[1, 2, 1, 2], class_ids=[0, 1, 0, 1],
                         class_weights=[0.7, 0.4, 0.2, 0.9], classlabels_int64s=[10, 20],
                         post_transform="LOGISTIC"),
        helper.make_node("SVMClassifier", ["x"], ["svm_label", "svm_scores"], domain=ML,
                         classlabels_ints=[0, 1], coefficients=[0.5, -0.5, 1.0], kernel_type="RBF",
                         kernel_params=[0.3, 0.0, 3.0], rho=[0.1],
                         support_vectors=rng.standard_normal(12).round(2).tolist(),
                         vectors_per_class=[2, 1]),
    ]
    outputs = [_info("label", I64, [3]), _info("proba", F, [3, 3]), _info("tree_label", I64, [3]),
               _info("tree_proba", F, [3, 2]), _info("svm_label", I64, [3]), _info("svm_scores", F, [3, 2])]
    model = _model(nodes, [_info("x", F, [3, 4])], outputs, opsets=(("", 17), (ML, 3)))
    return model, {"x": _x(rng)}


def ml_regressors(rng):
    """TreeEnsembleRegressor, SVMRegressor and LinearRegressor, then Binarizer, Imputer,
    ArrayFeatureExtractor and FeatureVectorizer."""
    nodes = [
        helper.make_node("TreeEnsembleRegressor", ["x"], ["tree"], domain=ML, n_targets=1,
                         nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0],
                         nodes_values=[0.2, 0, 0], nodes_modes=["BRANCH_LT", "LEAF", "LEAF"],
                         nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                         target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
                         target_weights=[1.5, -0.5], aggregate_function="SUM"),
        helper.make_node("SVMRegressor", ["x"], ["svm"], domain=ML, coefficients=[0.4, -0.6],
                         kernel_type="POLY", kernel_params=[0.5, 1.0, 2.0], n_supports=2, rho=[0.2],
                         support_vectors=rng.standard_normal(8).round(2).tolist()),
        helper.make_node("LinearRegressor", ["x"], ["linear"], domain=ML,
                         coefficients=[0.5, -1.0, 0.25, 2.0], intercepts=[0.3], targets=1),
        helper.make_node("Binarizer", ["x"], ["binary"], domain=ML, threshold=0.1),
        helper.make_node("Imputer", ["x"], ["imputed"], domain=ML, imputed_value_floats=[0.0] * 4,
                         replaced_value_float=0.0),
        helper.make_node("ArrayFeatureExtractor", ["x", "columns"], ["picked"], domain=ML),
        helper.make_node("FeatureVectorizer", ["picked", "binary"], ["features"], domain=ML,
                         inputdimensions=[2, 4]),
    ]
    outputs = [_info("tree", F, [3, 1]), _info("svm", F, [3, 1]), _info("linear", F, [3, 1]),
               _info("imputed", F, [3, 4]), _info("features", F, [3, 6])]
    columns = numpy_helper.from_array(np.array([0, 3], np.int64), "columns")
    model = _model(nodes, [_info("x", F, [3, 4])], outputs, [columns], opsets=(("", 17), (ML, 3)))
    return model, {"x": _x(rng)}


def detection(rng):
    """com.microsoft CropAndResize on a feature map, its boxes fed."""
    node = helper.make_node("CropAndResize", ["x", "rois", "batch", "size"], ["crops"], domain=MS,
                            mode="bilinear", extrapolation_value=0.5)
    size = numpy_helper.from_array(np.array([3, 3], np.int32), "size")
    inputs = [_info("x", F, [2, 3, 8, 8]), _info("rois", F, [4, 4]), _info("batch", I32, [4])]
    model = _model([node], inputs, [_info("crops", F, [4, 3, 3, 3])], [size],
                   opsets=(("", 17), (MS, 1)))
    rois = np.sort(rng.random((4, 2, 2)), axis=1).reshape(4, 4)[:, [0, 1, 2, 3]].astype(np.float32)
    return model, {"x": _x(rng, (2, 3, 8, 8)), "rois": rois, "batch": np.array([0, 1, 1, 0], np.int32)}


def attention(rng):
    """com.microsoft Attention (packed QKV weights) and MultiHeadAttention on its output."""
    weights = numpy_helper.from_array(_x(rng, (8, 24)) * 0.3, "qkv")
    bias = numpy_helper.from_array(_x(rng, (24,)) * 0.1, "qkv_bias")
    nodes = [
        helper.make_node("Attention", ["x", "qkv", "qkv_bias"], ["attended"], domain=MS, num_heads=2),
        helper.make_node("MultiHeadAttention", ["attended", "x", "x"], ["y"], domain=MS, num_heads=2),
    ]
    model = _model(nodes, [_info("x", F, [2, 5, 8])], [_info("y", F, [2, 5, 8])], [weights, bias],
                   opsets=(("", 17), (MS, 1)))
    return model, {"x": _x(rng, (2, 5, 8))}


def matmul_weights(rng):
    """MatMul + Add + Relu on constant weights: the packing pass makes a PackedMatMul of it."""
    inits = [numpy_helper.from_array(_x(rng, (8, 40)), "w"), numpy_helper.from_array(_x(rng, (40,)), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["product"]),
             helper.make_node("Add", ["product", "b"], ["biased"]),
             helper.make_node("Relu", ["biased"], ["y"])]
    model = _model(nodes, [_info("x", F, [6, 8])], [_info("y", F, [6, 40])], inits)
    return model, {"x": _x(rng, (6, 8))}


def packed_matmul(rng):
    """com.opforge PackedMatMul written directly, with its packed weights and bias (opforge's
    own op: onnxruntime refuses it)."""
    w = _x(rng, (8, 40))
    inits = [numpy_helper.from_array(_panels(w), "w_packed"), numpy_helper.from_array(_x(rng, (40,)), "b")]
    node = helper.make_node("PackedMatMul", ["x", "w_packed", "b"], ["y"], domain=OPFORGE, N=40,
                            activation="Gelu", isa="auto")
    model = _model([node], [_info("x", F, [6, 8])], [_info("y", F, [6, 40])], inits,
                   opsets=(("", 17), (OPFORGE, 1)))
    return model, {"x": _x(rng, (6, 8))}


def _panels(w: np.ndarray) -> np.ndarray:
    """W (K, N) in PackedMatMul's layout: (ceil(N / 32), K, 32), zero past column N."""
    k, n = w.shape
    padded = np.zeros((k, -(-n // 32) * 32), np.float32)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, -1, 32).transpose(1, 0, 2))


def random_ops(rng):
    """RandomNormal, RandomUniformLike and Bernoulli with seeds, and Dropout in training mode."""
    ratio = numpy_helper.from_array(np.array(0.3, np.float32), "ratio")
    training = numpy_helper.from_array(np.array(True), "training")
    nodes = [
        helper.make_node("RandomNormal", [], ["normal"], shape=[3, 4], seed=1.0, mean=0.5, scale=2.0),
        helper.make_node("RandomUniformLike", ["x"], ["uniform"], seed=2.0, low=0.0, high=1.0),
        helper.make_node("Bernoulli", ["uniform"], ["coin"], seed=3.0),
        helper.make_node("Add", ["x", "normal"], ["noisy"]),
        helper.make_node("Dropout", ["noisy", "ratio", "training"], ["dropped", "mask"], seed=4),
    ]
    outputs = [_info("coin", F, [3, 4]), _info("dropped", F, [3, 4]), _info("mask", TensorProto.BOOL, [3, 4])]
    model = _model(nodes, [_info("x", F, [3, 4])], outputs, [ratio, training])
    return model, {"x": _x(rng)}


def narrow_floats(rng):
    """float16 arithmetic, MatMul and Softmax, and casts through float8 and int4."""
    nodes = [
        helper.make_node("Cast", ["x"], ["half"], to=TensorProto.FLOAT16),
        helper.make_node("Mul", ["half", "half"], ["square"]),
        helper.make_node("Transpose", ["half"], ["half_t"]),
        helper.make_node("MatMul", ["square", "half_t"], ["gram"]),
        helper.make_node("Softmax", ["gram"], ["soft"], axis=-1),
        helper.make_node("Cast", ["x"], ["eight"], to=TensorProto.FLOAT8E4M3FN),
        helper.make_node("Cast", ["eight"], ["back"], to=F),
        helper.make_node("Cast", ["x"], ["nibble"], to=TensorProto.INT4),
        helper.make_node("Cast", ["nibble"], ["wide"], to=I32),
    ]
    outputs = [_info("soft", TensorProto.FLOAT16, [3, 3]), _info("back", F, [3, 4]), _info("wide", I32, [3, 4])]
    return _model(nodes, [_info("x", F, [3, 4])], outputs, opsets=(("", 21),)), {"x": _x(rng) * 3}


def bfloat16(rng):
    """bfloat16 arithmetic and a reduction (onnxruntime's CPU provider has no kernels for them)."""
    nodes = [
        helper.make_node("Cast", ["x"], ["brain"], to=TensorProto.BFLOAT16),
        helper.make_node("Add", ["brain", "brain"], ["twice"]),
        helper.make_node("Mul", ["twice", "brain"], ["product"]),
        helper.make_node("ReduceSum", ["product"], ["total"], keepdims=1),
    ]
    outputs = [_info("total", TensorProto.BFLOAT16, [1, 1])]
    return _model(nodes, [_info("x", F, [3, 4])], outputs, opsets=(("", 21),)), {"x": _x(rng)}


_BUILDERS = {"ml_classifiers": ml_classifiers, "ml_regressors": ml_regressors, "detection": detection,
             "attention": attention, "matmul_weights": matmul_weights, "packed_matmul": packed_matmul,
             "random_ops": random_ops, "narrow_floats": narrow_floats, "bfloat16": bfloat16}
