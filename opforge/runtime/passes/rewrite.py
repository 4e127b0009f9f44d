"""What the rewriting passes share: who reads a value, constants, and swapping nodes in place."""
from __future__ import annotations

import itertools
from typing import Iterable

import numpy as np

from opforge.runtime.errors import KernelNotFoundError
from opforge.runtime.graph import Graph, Node

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
    """Whether the session has a kernel for ``node`` (so a rewrite to it may run)."""
    try:
        context.bind(node)
    except KernelNotFoundError:
        return False
    return True


def static_shape(context, name: str) -> tuple | None:
    """``name``'s inferred shape when every dim is a known int, else None."""
    known = context.types.get(name)
    if known is None or known.shape is None or not all(isinstance(d, int) for d in known.shape):
        return None
    return tuple(known.shape)


def attribute(node: Node, name: str, default):
    """``node``'s attribute ``name``, or ``default``."""
    return node.attrs.get(name, default)
