"""What the rewriting passes share: who reads a value, constants, and swapping nodes in place."""
from __future__ import annotations

import itertools
from typing import Iterable

import numpy as np

from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.providers.registry import REFERENCE

MICROSOFT = "com.microsoft"


class Uses:
    """Who reads each value of a graph: its consumer nodes, and whether the graph or a subgraph
    (an outer-scope read) needs it. Passes keep it current with ``replace``."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.outputs = {v.name for v in graph.outputs}
        self.readers: dict[str, list[Node]] = {}
        self.implicit: set[str] = set()
        for node in graph.nodes:
            self._add(node)

    def _add(self, node: Node) -> None:
        for name in node.inputs:
            if name:
                self.readers.setdefault(name, []).append(node)
        self.implicit.update(node.implicit_inputs)

    def only_reader(self, name: str) -> Node | None:
        """The one node reading ``name`` (once), if nothing else needs the value: not the
        graph's output, not a subgraph, not a second input slot."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or name in self.outputs or name in self.implicit:
            return None
        node = readers[0]
        return node if node.inputs.count(name) == 1 else None

    def replace(self, old: Iterable[Node], new: Node) -> None:
        """Puts ``new`` where the last of ``old`` stood in the graph and forgets ``old``."""
        old = list(old)
        gone = set(map(id, old))
        last = max(i for i, n in enumerate(self.graph.nodes) if id(n) in gone)
        nodes = self.graph.nodes
        self.graph.nodes = [n for n in nodes[:last] if id(n) not in gone] + [new] + nodes[last + 1:]
        for name in {name for node in old for name in node.inputs if name}:
            self.readers[name] = [n for n in self.readers[name] if id(n) not in gone]
        self._add(new)

    def remove(self, node: Node) -> None:
        """Drops ``node`` from the graph (its outputs must have no readers left)."""
        self.graph.nodes = [n for n in self.graph.nodes if n is not node]
        for name in set(node.inputs) - {""}:
            self.readers[name] = [n for n in self.readers[name] if n is not node]

    def unread(self, name: str) -> bool:
        """Whether nothing reads ``name`` any more: no node, no subgraph, not the graph."""
        return not self.readers.get(name) and name not in self.outputs and name not in self.implicit

    def rename(self, old: str, new: str) -> bool:
        """Makes every reader of ``old`` read ``new`` instead; refuses (False) when a graph
        output or a subgraph names ``old``."""
        if old in self.outputs or old in self.implicit:
            return False
        for node in self.readers.pop(old, []):
            node.inputs = [new if name == old else name for name in node.inputs]
            self.readers.setdefault(new, []).append(node)
        return True


def constant(graph: Graph, name: str) -> np.ndarray | None:
    """The value of ``name`` if it is an initializer a feed cannot replace."""
    if not name or name not in graph.initializers or any(v.name == name for v in graph.inputs):
        return None
    return graph.initializers[name]


def new_initializer(graph: Graph, base: str, value: np.ndarray) -> str:
    """Adds ``value`` under a fresh name made from ``base``; returns the name."""
    taken = graph.defined_names() | graph.outer_names
    name = next(n for n in itertools.chain([base], (f"{base}_{i}" for i in itertools.count(1)))
                if n not in taken)
    graph.initializers[name] = value
    return name


def can_bind(context, node: Node) -> bool:
    """Whether the session has a kernel for ``node`` other than the reference fallback (a rewrite
    to it must not trade native kernels for onnx.reference, nor make a model invalid at its
    opset)."""
    try:
        return context.bind(node).provider != REFERENCE
    except KernelNotFoundError:
        return False


def static_shape(context, name: str) -> tuple | None:
    """``name``'s inferred shape when every dim is a known int, else None."""
    known = context.types.get(name)
    if known is None or known.shape is None or not all(isinstance(d, int) for d in known.shape):
        return None
    return tuple(known.shape)


def attribute(node: Node, name: str, default):
    """``node``'s attribute ``name``, or ``default``."""
    return node.attrs.get(name, default)


def scalar(graph: Graph, name: str) -> float | None:
    """The value of a constant holding exactly one number, else None."""
    value = constant(graph, name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 and value.dtype.kind in "fiu" else None


def producer_map(graph: Graph) -> dict[str, Node]:
    """value name -> the node that writes it."""
    return {name: node for node in graph.nodes for name in node.outputs if name}
