"""KernelContext::state: what an op makes from a node's attributes once and keeps for the node's
life (one per node in a session, one per call when eager), released with the node."""
import gc

import numpy as np
import pytest
from onnx import TensorProto, helper

import opforge

SOURCE = r"""
#include <opforge/op.h>
#include <atomic>
#include <memory>

static std::atomic<int64_t> made{0}, live{0};

/// Counts the states alive: one Token per state, moved along with it.
struct Token {
  Token() { ++live; }
  ~Token() { --live; }
};

struct Kept {
  int64_t k, serial;
  std::unique_ptr<Token> token;
};

/// y = (k, serial of the state this call read, states alive now)
static void kept(opforge::KernelContext& ctx) {
  const Kept& s = ctx.state<Kept>([&] {
    return Kept{ctx.attr<int64_t>("k"), ++made, std::make_unique<Token>()};
  });
  double* y = ctx.output(0).data<double>();
  y[0] = double(s.k), y[1] = double(s.serial), y[2] = double(live.load());
}

static void three(opforge::InferContext& ctx) { ctx.set_output(0, opforge::f64, {3}); }

OPFORGE_OP(kept).domain("com.example").input("x").output("y").attr("k", int64_t(0)).infer(three).compute(kept);
"""


@pytest.fixture(scope="module")
def lib(shared_cache):
    return opforge.load_inline("op_state", SOURCE)


def two_node_model() -> bytes:
    nodes = [helper.make_node("kept", ["x"], [f"y{k}"], domain="com.example", k=k) for k in (5, 7)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(f"y{k}", TensorProto.DOUBLE, [3]) for k in (5, 7)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                             ir_version=8).SerializeToString()


def test_a_session_makes_each_nodes_state_once_and_releases_it_with_the_session(lib):
    x = np.zeros(1, np.float32)
    sess = opforge.InferenceSession(two_node_model(), custom_ops=[lib])
    runs = [sess.run(None, {"x": x}) for _ in range(4)]   # the Python executor, then the compiled plan
    first5, first7 = runs[0]
    assert first5[0] == 5 and first7[0] == 7 and first5[1] != first7[1]
    for y5, y7 in runs[1:]:
        np.testing.assert_array_equal(y5[:2], first5[:2])   # the same state, never made again
        np.testing.assert_array_equal(y7[:2], first7[:2])
    alive = runs[-1][0][2]
    del sess, runs
    gc.collect()
    assert lib.kept(x, k=1)[2] == alive - len([5, 7]) + 1   # the session's two states are gone


def test_eager_calls_make_state_per_call(lib):
    x = np.zeros(1, np.float32)
    first, second = lib.kept(x, k=3), lib.kept(x, k=3)
    assert first[0] == second[0] == 3 and second[1] == first[1] + 1
