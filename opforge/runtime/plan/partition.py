"""Partitioning: where each value lives, and the copies where a value crosses devices.

Decided once, when a session is created, as onnxruntime's graph partitioner does: every node
keeps the kernel the dispatcher chose for it, and a kernel on a device (the CUDA provider's)
reads and writes that device's memory, except for the inputs it reads on the host (a Reshape's
shape, a Slice's starts) and the outputs it gives there (a Shape). Where a value is read on
another side than the one it lives on, a copy node is inserted before its first reader
(MemcpyFromHost / MemcpyToHost, onnxruntime's names, in the com.opforge domain). Initializers
read on a device are copied there once, now, instead of on every run; graph inputs arrive and
graph outputs leave in host memory (numpy), except in a run under ``KEEP_ON_DEVICE`` (an
io_binding whose outputs are bound to the device), where the copies home are skipped.

A device is an object with ``name``, ``provider``, ``upload(value)`` and ``download(value)``;
a kernel on one has ``device`` set and may list ``host_inputs`` / ``host_outputs`` (indices).
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from opforge.runtime.graph.graph import Graph, Node

# Set for a run whose caller takes the graph outputs on the device (io_binding, OrtValues).
KEEP_ON_DEVICE: ContextVar = ContextVar("opforge_keep_on_device", default=False)

HOST = "host"
COPY_DOMAIN = "com.opforge"
TO_DEVICE, TO_HOST = "MemcpyFromHost", "MemcpyToHost"


class CopyKernel:
    """Moves one value between host memory and a device (the kernel of a copy node)."""

    def __init__(self, device, to_device: bool, graph_output: bool = False):
        self.device, self.to_device, self.graph_output = device, to_device, graph_output
        self.provider = device.provider
        self.host_inputs = () if to_device else (0,)
        self.host_outputs = (0,) if not to_device else ()

    def run(self, inputs: list) -> list:
        value = inputs[0]
        if self.graph_output and KEEP_ON_DEVICE.get():
            return [value]
        return [self.device.upload(value) if self.to_device else self.device.download(value)]


def side_of(kernel: Any) -> str:
    """The memory a kernel works in: its device's name, or HOST."""
    device = getattr(kernel, "device", None)
    return device.name if device is not None else HOST


def partition(graph: Graph, kernels: dict) -> dict:
    """Inserts copy nodes into `graph` (and device copies of initializers) so that every node
    reads its inputs where its kernel works. `kernels` maps each node, in execution order, to its
    kernel; returns that map with the copy nodes' kernels added. A graph on the host only is
    left as it is."""
    devices = {side_of(k): k.device for k in kernels.values() if side_of(k) != HOST}
    if not devices:
        return dict(kernels)
    placer = _Placer(graph, devices)
    placer.keep_outputs_on_host(kernels)
    for node, kernel in list(kernels.items()):
        placer.place_inputs(node, kernel)
        placer.record_outputs(node, kernel)
    placer.copy_outputs_home()
    return {**kernels, **placer.copies}


class _Placer:
    """The walk over nodes in order: where each value is, and the copies made so far."""

    def __init__(self, graph: Graph, devices: dict):
        self.graph, self.devices = graph, devices
        self.where = {name: HOST for name in list(graph.initializers) + [v.name for v in graph.inputs]}
        self.where.update({name: HOST for name in graph.outer_names})
        self.copies: dict = {}       # copy node -> kernel
        self.copied: dict = {}       # (value, side) -> name of the copy there
        self.renamed: dict = {}      # graph output -> the name its producer writes on a device

    def keep_outputs_on_host(self, kernels: dict) -> None:
        """A graph output made on a device is written under another name and copied home."""
        outputs = {v.name for v in self.graph.outputs}
        for node, kernel in kernels.items():
            side = side_of(kernel)
            for index, name in enumerate(node.outputs):
                if name in outputs and side != HOST and index not in _host_outputs(kernel):
                    device_name = f"{name}@{side}"
                    node.outputs[index] = device_name
                    self.renamed[name] = device_name
        for node in kernels:
            node.inputs = [self.renamed.get(n, n) for n in node.inputs]
            node.implicit_inputs = [self.renamed.get(n, n) for n in node.implicit_inputs]

    def place_inputs(self, node: Node, kernel) -> None:
        side = side_of(kernel)
        host = _host_inputs(kernel)
        node.inputs = [self._at(name, HOST if i in host else side) if name else name
                       for i, name in enumerate(node.inputs)]
        node.implicit_inputs = [self._at(name, HOST) for name in node.implicit_inputs]

    def record_outputs(self, node: Node, kernel) -> None:
        side, host = side_of(kernel), _host_outputs(kernel)
        for index, name in enumerate(node.outputs):
            if name:
                self.where[name] = HOST if index in host else side

    def copy_outputs_home(self) -> None:
        for name, device_name in self.renamed.items():
            self._copy(device_name, name, self.devices[self.where[device_name]], to_device=False,
                       graph_output=True)

    def _at(self, name: str, side: str) -> str:
        """The name under which value `name` can be read on `side` (a copy made if needed)."""
        have = self.where.get(name, HOST)
        if have == side:
            return name
        if (name, side) in self.copied:
            return self.copied[(name, side)]
        target = f"{name}@{side}"
        if side != HOST and name in self.graph.initializers:
            self.graph.initializers[target] = self.devices[side].upload(self.graph.initializers[name])
        elif side != HOST:
            self._copy(name, target, self.devices[side], to_device=True)
        else:
            self._copy(name, target, self.devices[have], to_device=False)
        self.copied[(name, side)] = target
        self.where[target] = side
        return target

    def _copy(self, source: str, target: str, device, to_device: bool, graph_output: bool = False) -> None:
        op = TO_DEVICE if to_device else TO_HOST
        node = Node(f"{op}_{source}", op, COPY_DOMAIN, [source], [target])
        self.graph.nodes.append(node)
        self.copies[node] = CopyKernel(device, to_device, graph_output)
        self.where[target] = device.name if to_device else HOST


def read_on_host(graph: Graph, kernels: dict) -> set:
    """The graph inputs some host kernel reads as they are (not through a copy): a feed given
    in device memory must be brought to the host for these."""
    inputs = {v.name for v in graph.inputs}
    read = set()
    for node, kernel in kernels.items():
        if side_of(kernel) == HOST:
            read.update(n for n in node.inputs + node.implicit_inputs if n in inputs)
        else:
            read.update(node.inputs[i] for i in _host_inputs(kernel)
                        if i < len(node.inputs) and node.inputs[i] in inputs)
    return read


def _host_inputs(kernel) -> tuple:
    return tuple(getattr(kernel, "host_inputs", ()))


def _host_outputs(kernel) -> tuple:
    return tuple(getattr(kernel, "host_outputs", ()))
