"""Sessions of a model at an optimization level, and the op types its nodes run as: what the
tests of the packing passes (PackedConv, PackedLSTM ...) look at."""
import opforge

LEVEL = opforge.GraphOptimizationLevel


def session(model, threads=1, level=LEVEL.ORT_ENABLE_ALL):
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = level
    return opforge.InferenceSession(model.SerializeToString(), options)


def ops(sess) -> list:
    return [op for _, op, _ in sess.node_providers()]
