"""The reference provider: onnx.reference one node at a time, with its gaps and errors fixed."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support.onnx_builders import assert_same, model, onnxruntime_outputs, tensor
from opforge.runtime import InferenceSession

REFERENCE = "ReferenceExecutionProvider"


def reference_session(proto) -> InferenceSession:
    """A session on the reference provider alone, checked to run every node there (several of
    these ops also have native kernels, which would otherwise take them)."""
    session = InferenceSession(proto, providers=[REFERENCE])
    elsewhere = [(name, op, p) for name, op, p in session.node_providers() if p != REFERENCE]
    assert not elsewhere, f"nodes not on {REFERENCE}: {elsewhere}"
    return session


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [None, 0, 2, -1])
def test_softmax_family_before_opset_13_flattens_like_onnxruntime(op, axis):
    attrs = {} if axis is None else {"axis": axis}
    proto = model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", [2, 3, 4])],
                  [tensor("y", [2, 3, 4])], opset=11)
    feed = {"x": np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)}
    assert_same(reference_session(proto).run(None, feed), onnxruntime_outputs(proto, feed))


def test_scatter_from_opset_10_runs_as_scatter_elements():
    proto = model([helper.make_node("Scatter", ["data", "indices", "updates"], ["y"], axis=1)],
                  [tensor("data", [2, 3]), tensor("indices", [2, 1], TensorProto.INT64),
                   tensor("updates", [2, 1])], [tensor("y", [2, 3])], opset=10)
    feed = {"data": np.zeros((2, 3), np.float32), "indices": np.array([[2], [0]], np.int64),
            "updates": np.array([[5.0], [7.0]], np.float32)}
    assert_same(reference_session(proto).run(None, feed), onnxruntime_outputs(proto, feed))


def test_context_dependent_function_ops_expand_at_run_time():
    proto = model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
                  [tensor("x", [4])], [tensor("y", [4])], opset=20)
    feed = {"x": np.array([-2.0, -0.5, 0.5, 2.0], np.float32)}
    assert_same(reference_session(proto).run(None, feed), onnxruntime_outputs(proto, feed))


def test_ml_domain_ops_run():
    proto = model([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)],
                  [tensor("x", [3])], [tensor("y", [3])])
    proto.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    feed = {"x": np.array([0.2, 0.5, 0.9], np.float32)}
    assert_same(reference_session(proto).run(None, feed), onnxruntime_outputs(proto, feed))


# Each guard is checked where it is: in the native kernel (the default session) and in the
# reference provider's own wrapper of onnx.reference (a session on that provider alone).
GUARDED = pytest.mark.parametrize("providers", [None, [REFERENCE]], ids=["native", "reference"])


def guarded_session(proto, providers) -> InferenceSession:
    return InferenceSession(proto) if providers is None else reference_session(proto)


@GUARDED
def test_topk_with_a_negative_k_is_refused_like_onnxruntime(providers):
    from opforge.runtime import KernelError

    proto = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top")],
                  [tensor("x", [2, 3]), tensor("k", [1], TensorProto.INT64)],
                  [tensor("v", None), tensor("i", None)])
    with pytest.raises(KernelError, match="node 'top' \\(TopK.*k = -1|k = -1 must be in"):
        guarded_session(proto, providers).run(None, {"x": np.ones((2, 3), np.float32), "k": np.array([-1], np.int64)})


@GUARDED
def test_gather_elements_with_an_index_out_of_range_is_refused_quickly(providers):
    from opforge.runtime import KernelError

    proto = model([helper.make_node("GatherElements", ["x", "i"], ["y"], name="g", axis=1)],
                  [tensor("x", [2, 3]), tensor("i", [2, 2], TensorProto.INT64)], [tensor("y", None)])
    index = np.array([[0, 1], [2, -2**40]], np.int64)   # onnx.reference alone takes minutes on it
    with pytest.raises(KernelError, match="node 'g' \\(GatherElements"):
        guarded_session(proto, providers).run(None, {"x": np.ones((2, 3), np.float32), "i": index})


def cyclic_tree_model(op: str, true_ids: list):
    """One tree of three nodes (a branch on feature 0 and two leaves) whose true child ids are
    ``true_ids``: [0, 0, 0] makes the branch its own child."""
    leaves = {"TreeEnsembleClassifier": dict(class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 1],
                                             class_weights=[1.0, 1.0], classlabels_int64s=[0, 1]),
              "TreeEnsembleRegressor": dict(target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
                                            target_weights=[1.0, 2.0], n_targets=1)}[op]
    outputs = ["label", "scores"] if op == "TreeEnsembleClassifier" else ["scores"]
    node = helper.make_node(op, ["x"], outputs, name="forest", domain="ai.onnx.ml", nodes_treeids=[0, 0, 0],
                            nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0, 0],
                            nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=true_ids,
                            nodes_falsenodeids=[2, 0, 0], **leaves)
    proto = model([node], [tensor("x", [2, 2])], [tensor(o, None) for o in outputs])
    proto.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return proto


@pytest.mark.parametrize("op", ["TreeEnsembleClassifier", "TreeEnsembleRegressor"])
def test_a_tree_that_leads_back_to_itself_is_refused_not_walked_forever(op):
    """onnx.reference's walk never ends on it (onnxruntime refuses it at load)."""
    from opforge.runtime import KernelError

    proto = cyclic_tree_model(op, [0, 0, 0])
    x = {"x": np.zeros((2, 2), np.float32)}
    with pytest.raises(KernelError, match=f"node 'forest' \\({op}.*node 0 of tree 0 leads back to itself"):
        InferenceSession(proto, providers=[REFERENCE]).run(None, x)
    with pytest.raises(KernelError, match=f"'forest'|\\({op}"):   # the native kernel's refusal stands
        InferenceSession(proto).run(None, x)


def test_roi_align_with_a_huge_sampling_ratio_is_refused_not_sampled_for_hours():
    from opforge.runtime import KernelError

    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], name="align", sampling_ratio=2**40,
                            output_height=2, output_width=2)
    proto = model([node], [tensor("x", [1, 1, 6, 6]), tensor("rois", [1, 4]), tensor("batch", [1], TensorProto.INT64)],
                  [tensor("y", None)])
    feed = {"x": np.ones((1, 1, 6, 6), np.float32), "rois": np.array([[0, 0, 5, 5]], np.float32),
            "batch": np.zeros(1, np.int64)}
    with pytest.raises(KernelError, match="node 'align' \\(RoiAlign.*sampling_ratio = 1099511627776"):
        InferenceSession(proto, providers=[REFERENCE]).run(None, feed)
    with pytest.raises(KernelError, match="node 'align' \\(RoiAlign.*samples"):   # the native refusal stands
        InferenceSession(proto).run(None, feed)


def test_a_string_tensor_where_the_op_takes_integers_is_refused_by_name():
    """The type check comes before the value guards (GatherElements compares its indices with
    the axis size, which a string tensor cannot do): the error names the input and the types."""
    from opforge.runtime import KernelError

    proto = model([helper.make_node("GatherElements", ["x", "i"], ["y"], name="g", axis=1)],
                  [tensor("x", [2, 3]), tensor("i", [2, 2], TensorProto.STRING)], [tensor("y", None)])
    session = InferenceSession(proto, providers=[REFERENCE])
    feed = {"x": np.ones((2, 3), np.float32), "i": np.array([["0", "1"], ["2", "0"]], object)}
    with pytest.raises(KernelError, match=r"input #1 'indices' is tensor\(string\); the op takes "
                                          r"tensor\(int32\), tensor\(int64\)") as caught:
        session.run(None, feed)
    assert not isinstance(caught.value.__cause__, TypeError)
