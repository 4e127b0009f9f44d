"""Kernel registry: version resolution, provider priority, overrides, and the decorator."""
import numpy as np
import pytest

from tests.support.onnx_builders import chain_model
from opforge.runtime import KernelNotFoundError, KernelRegistry, default_registry, kernel
from opforge.runtime.execute.executor import Dispatcher, Executor
from opforge.runtime.graph.graph import build_graph
from opforge.runtime.providers.registry import ANY_OP, CPU, CUDA, REFERENCE


def factory(tag):
    def make(node, opset):
        return tag
    make.tag = tag
    return make


def test_resolve_picks_newest_since_version_not_above_the_opset():
    registry = KernelRegistry()
    for since in (1, 6, 13):
        registry.register("", "Relu", since, CPU, factory(since))
    assert registry.resolve("", "Relu", 5, [CPU]).tag == 1
    assert registry.resolve("ai.onnx", "Relu", 12, [CPU]).tag == 6
    assert registry.resolve("", "Relu", 21, [CPU]).tag == 13
    assert registry.resolve("", "Relu", 21, [CUDA]) is None
    assert registry.resolve("", "Gelu", 21, [CPU]) is None


def test_first_provider_in_priority_order_wins():
    registry = KernelRegistry()
    registry.register("", "Relu", 6, CPU, factory("cpu"))
    registry.register("", "Relu", 14, CUDA, factory("cuda"))
    assert registry.resolve("", "Relu", 17, [CUDA, CPU]).tag == "cuda"
    assert registry.resolve("", "Relu", 13, [CUDA, CPU]).tag == "cpu"
    assert registry.lookup("", "Relu", 17, [CPU, CUDA]).provider == CPU


def test_child_registry_overrides_parent_and_wildcards_come_last():
    parent = KernelRegistry()
    parent.register("", ANY_OP, 1, REFERENCE, factory("reference"))
    parent.register("", "Relu", 6, CPU, factory("builtin"))
    child = KernelRegistry(parent)
    assert child.resolve("", "Relu", 17, [CPU]).tag == "builtin"
    child.register("", "Relu", 1, CPU, factory("custom"))
    assert child.resolve("", "Relu", 17, [CPU]).tag == "custom"
    assert child.resolve("", "Anything", 17, [CPU, REFERENCE]).tag == "reference"


def test_decorator_registers_where_the_kernel_is_written():
    registry = KernelRegistry()

    @kernel("Relu", since=6, registry=registry)
    class Relu:
        provider = CPU

        def __init__(self, node, opset):
            self.node = node

        def run(self, inputs):
            return [np.maximum(inputs[0], 0)]

    assert registry.resolve("", "Relu", 17, [CPU]) is Relu


def test_dispatcher_binds_by_provider_priority_and_falls_back_to_reference():
    calls = []

    class Negate:
        provider = CPU

        def __init__(self, node, opset):
            calls.append((node.name, opset))

        def run(self, inputs):
            return [-inputs[0]]

    registry = KernelRegistry(parent=default_registry)
    registry.register("", "Neg", 1, CPU, Negate)
    graph = build_graph(chain_model().graph)
    executor = Executor(graph, Dispatcher(registry, [CPU, REFERENCE], {"": 17}).bind)
    assert calls == [("b", 17)]
    assert [p for _, p in executor.providers_by_node()] == [REFERENCE, CPU, REFERENCE]
    y, = executor.run({"x": np.array([[-1.0, 2.0, -3.0]], np.float32)})
    np.testing.assert_array_equal(y, [[0.0, 2.0, 0.0]])


def test_dispatcher_without_reference_names_the_node():
    graph = build_graph(chain_model().graph)
    with pytest.raises(KernelNotFoundError, match=r"node 'a' \(Relu, domain 'ai.onnx'\) at opset 17"):
        Executor(graph, Dispatcher(KernelRegistry(), [CPU], {"": 17}).bind)
