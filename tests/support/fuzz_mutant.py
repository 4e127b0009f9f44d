"""The model a fuzz mutation edits (tests/support/fuzz_mutations.py, tests/support/fuzz_values.py), its feeds,
and the seeded rng every choice comes from."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


class Mutant:
    """A model being mutated, its feeds, and the rng every choice comes from.

    ``runs``, when a mutation sets it, lists the feeds of each run; otherwise the case runs the
    completed feeds twice. ``touched`` collects the op types a mutation changed, for reports.
    """

    def __init__(self, model: onnx.ModelProto, feeds: dict, rng: np.random.Generator):
        self.model, self.feeds, self.rng = model, feeds, rng
        self.runs: list = []
        self.touched: set = set()

    def choice(self, items):
        """One of ``items`` (a sequence), or None when it is empty."""
        items = list(items)
        return items[int(self.rng.integers(len(items)))] if items else None

    def nodes(self) -> list:
        """Every node, those of subgraphs included."""
        found = []
        stack = [self.model.graph]
        while stack:
            graph = stack.pop()
            for node in graph.node:
                found.append(node)
                for attr in node.attribute:
                    stack.extend([attr.g] if attr.HasField("g") else list(attr.graphs))
        return found

    def node(self, where=lambda n: True):
        """A random node satisfying ``where``, noted as touched; None if there is none."""
        node = self.choice([n for n in self.nodes() if where(n)])
        if node is not None:
            self.touched.add(node.op_type)
        return node

    def values(self) -> list:
        """Names of the values of the main graph: inputs, initializers, node outputs."""
        graph = self.model.graph
        names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
        names += [o for n in graph.node for o in n.output if o]
        return list(dict.fromkeys(names))

    def fed_input(self):
        """A graph input that has a tensor feed, or None."""
        graph = self.model.graph
        return self.choice([v for v in graph.input
                            if isinstance(self.feeds.get(v.name), np.ndarray)])

    def initializer(self, where=lambda t: True):
        """A random initializer satisfying ``where``; when there is none, a fed input that
        would satisfy it becomes one (node tests feed what real models keep as weights)."""
        graph = self.model.graph
        found = self.choice([t for t in graph.initializer if where(t)])
        if found is not None:
            return found
        fed = [v for v in graph.input if isinstance(self.feeds.get(v.name), np.ndarray)
               and self.feeds[v.name].dtype != object]
        info = self.choice([v for v in fed if where(numpy_helper.from_array(self.feeds[v.name], v.name))])
        if info is None:
            return None
        graph.initializer.append(numpy_helper.from_array(self.feeds.pop(info.name), info.name))
        graph.input.remove(info)
        return graph.initializer[len(graph.initializer) - 1]

    def complete_feeds(self) -> dict:
        """Feeds for every graph input that is not an initializer: the given one where its
        name is fed, else random values of the declared type."""
        graph = self.model.graph
        constants = {t.name for t in graph.initializer}
        return {v.name: self.feeds[v.name] if v.name in self.feeds else random_value(v, self.rng)
                for v in graph.input if v.name not in constants or v.name in self.feeds}


def random_value(info: onnx.ValueInfoProto, rng: np.random.Generator):
    """A random value of ``info``'s declared type (float32 [2, 3] when it declares none)."""
    kind = info.type.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        inner = getattr(info.type, kind).elem_type
        value = random_value(onnx.ValueInfoProto(name=info.name, type=inner), rng)
        return [value, value] if kind == "sequence_type" else value
    tensor = info.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor.elem_type else np.float32
    shape = [2, 3]
    if tensor.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
    return random_array(shape, np.dtype(dtype), rng)


def random_array(shape, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Small random values of ``dtype`` (short strings for the object dtype)."""
    if dtype == object:
        return np.array(rng.choice(["a", "bc", ""], size=shape), dtype=object)
    if dtype == bool:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 3, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def label(node) -> str:
    """``Relu 'name'`` (or the first output when unnamed), for mutation descriptions."""
    return f"{node.op_type} {node.name or (node.output[0] if node.output else '?')!r}"
