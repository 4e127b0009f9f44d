"""The executor: value lifetimes, cancellation between nodes, and errors naming the node."""
import numpy as np
import pytest
from onnx import helper

from tests.support.onnx_builders import chain_model, model, tensor
from opforge.runtime import KernelError, RunCancelledError, RunOptions
from opforge.runtime.execute.executor import Executor
from opforge.runtime.graph.graph import build_graph
from opforge.runtime.providers.registry import CPU


class Recording:
    """A kernel that negates its input, calling ``on_run(node)`` first if given."""

    provider = CPU

    def __init__(self, node, on_run=None):
        self.node, self.on_run = node, on_run

    def run(self, inputs):
        if self.on_run:
            self.on_run(self.node)
        return [-inputs[0]]


def test_values_are_freed_after_their_last_use():
    executor = Executor(build_graph(chain_model().graph), Recording)
    assert [step.frees for step in executor.steps] == [["x"], ["r"], ["n"]]


def test_a_value_read_twice_lives_until_its_last_reader():
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="first"),
             helper.make_node("Neg", ["a"], ["b"], name="second"),
             helper.make_node("Add", ["a", "b"], ["y"], name="third")]
    graph = build_graph(model(nodes, [tensor("x", [1])], [tensor("y", [1])]).graph)
    executor = Executor(graph, Recording)
    assert [sorted(step.frees) for step in executor.steps] == [["x"], [], ["a", "b"]]


def test_terminate_set_during_a_run_stops_before_the_next_node():
    options = RunOptions()
    ran = []

    def bind(node):
        def on_run(n):
            ran.append(n.name)
            options.terminate = True
        return Recording(node, on_run=on_run)

    executor = Executor(build_graph(chain_model().graph), bind)
    with pytest.raises(RunCancelledError, match="before node 'b'"):
        executor.run({"x": np.ones((1, 3), np.float32)}, options)
    assert ran == ["a"]


def test_a_failing_kernel_is_reported_with_its_node_and_inputs():
    class Broken(Recording):
        def run(self, inputs):
            raise ValueError("bad things")

    executor = Executor(build_graph(chain_model().graph), Broken)
    with pytest.raises(KernelError, match=r"node 'a' \(Relu, domain 'ai.onnx'\) failed on "
                                          r"CPUExecutionProvider with inputs \(float32\[1, 3\]\): "
                                          r"ValueError: bad things"):
        executor.run({"x": np.ones((1, 3), np.float32)})


def test_a_kernel_result_of_more_than_16_dimensions_is_refused():
    class Deep(Recording):
        def run(self, inputs):
            return [np.zeros([1] * 17, np.float32)]

    executor = Executor(build_graph(chain_model().graph), Deep)
    with pytest.raises(KernelError, match="node 'a' \\(Relu.*output 'r' of shape .*at most 16 dimensions"):
        executor.run({"x": np.ones((2, 3), np.float32)})
