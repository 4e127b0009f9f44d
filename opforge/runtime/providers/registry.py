"""Kernel registry: which kernel runs a node, by (domain, op type, opset version, provider).

The kernel protocol
-------------------
A kernel *factory* is any callable ``factory(node: Node, opset: int) -> BoundKernel``. It is
called once per node when a session is prepared, with ``opset`` the model's version of the
node's domain; it reads the node's attributes then, and may raise KernelNotFoundError to say
"not this node after all" (the next provider is tried). The *BoundKernel* it returns has

- ``provider: str``, the execution provider it runs on;
- ``run(inputs: list) -> list``, called once per execution. ``inputs`` holds the values of
  ``node.inputs`` (None for an absent optional input) followed by those of
  ``node.implicit_inputs`` (outer-scope values read by the node's subgraphs). It returns one
  value per entry of ``node.outputs`` (whatever it returns for an absent output is dropped).
  Values are numpy arrays, lists of arrays (sequences), dicts (maps) or None (an empty
  optional). A kernel never modifies its inputs in place.

Providers, in their default priority: CUDAExecutionProvider, CPUExecutionProvider,
ReferenceExecutionProvider. A factory registered for op type ``"*"`` serves every op of its
domain that has no more specific factory for that provider.

A built-in Python kernel registered here for an op that also has a native kernel serves the
calls the native one cannot take (strings, sequences). One whose factory is marked
``wraps_native`` is offered each node first, with a third argument that binds a node (a
rewritten copy) to the native kernel, and declines the nodes it does not need to wrap
(``providers/cpu/ml_labels.py``: classifiers with string class labels).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
REFERENCE = "ReferenceExecutionProvider"
PROVIDERS = (CUDA, CPU, REFERENCE)
ANY_OP = "*"


class BoundKernel(Protocol):
    """A kernel bound to one node: see the module docstring."""

    provider: str

    def run(self, inputs: list[Any]) -> list[Any]:
        """Compute the node's outputs from its inputs (see the module docstring)."""


KernelFactory = Callable[[Any, int], BoundKernel]


@dataclass(frozen=True)
class KernelEntry:
    """One registration: ``factory`` serves ``op_type`` of ``domain`` for the opsets
    ``since_version`` to ``until_version`` (0: every later one)."""

    domain: str
    op_type: str
    since_version: int
    provider: str
    factory: KernelFactory
    until_version: int = 0

    def serves(self, version: int) -> bool:
        return self.since_version <= version and (not self.until_version or version <= self.until_version)


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


class KernelRegistry:
    """Kernel factories by (domain, op type, provider), each with its since-versions.

    A registry may sit on a ``parent``: its own entries win over the parent's for the same
    (domain, op type, provider), which is how custom ops override built-ins for one session.
    """

    def __init__(self, parent: KernelRegistry | None = None):
        self.parent = parent
        self._entries: dict[tuple[str, str, str], list[KernelEntry]] = {}

    def register(self, domain: str, op_type: str, since_version: int, provider: str,
                 factory: KernelFactory, until: int = 0) -> None:
        """Add ``factory`` for the opsets ``since_version`` to ``until`` (0: no end); one
        registered again for the same since-version replaces the old."""
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r}; expected one of {PROVIDERS}")
        key = (_domain(domain), op_type, provider)
        entries = [e for e in self._entries.get(key, []) if e.since_version != since_version]
        entries.append(KernelEntry(key[0], op_type, since_version, provider, factory, until))
        entries.sort(key=lambda e: e.since_version)
        self._entries[key] = entries

    def lookup(self, domain: str, op_type: str, opset_version: int,
               providers: Iterable[str]) -> KernelEntry | None:
        """The entry for the first provider that has one: newest since-version <= opset."""
        for provider in providers:
            entry = self._lookup_provider(_domain(domain), op_type, opset_version, provider)
            if entry is not None:
                return entry
        return None

    def resolve(self, domain: str, op_type: str, opset_version: int,
                providers: Iterable[str]) -> KernelFactory | None:
        """Like ``lookup``, returning just the factory (None if no provider has one)."""
        entry = self.lookup(domain, op_type, opset_version, providers)
        return None if entry is None else entry.factory

    def _lookup_provider(self, domain: str, op_type: str, version: int,
                         provider: str) -> KernelEntry | None:
        for name in (op_type, ANY_OP):
            entry = self._newest(self._entries.get((domain, name, provider), ()), version)
            if entry is not None:
                return entry
            if self.parent is not None:
                entry = self.parent._lookup_provider(domain, name, version, provider)
                if entry is not None and entry.op_type == name:
                    return entry
        return None

    @staticmethod
    def _newest(entries, version: int) -> KernelEntry | None:
        """The entry of the newest since-version not above ``version`` that still serves it (a
        kernel is never used past its range's end)."""
        found = None
        for entry in entries:
            if entry.since_version <= version:
                found = entry
        return found if found is not None and found.serves(version) else None


default_registry = KernelRegistry()
"""The registry built-in kernels add themselves to with ``@kernel``."""


def kernel(op_type: str, since: int = 1, domain: str = "", provider: str = CPU,
           registry: KernelRegistry | None = None):
    """Decorator registering a kernel factory where it is written.

    ``@kernel("Relu", since=6)`` on a class whose ``__init__(node, opset)`` reads attributes and
    whose ``run(inputs)`` computes; registers into ``default_registry`` unless told otherwise.
    """

    def register(factory: KernelFactory) -> KernelFactory:
        """Register ``factory`` and hand it back unchanged."""
        (registry or default_registry).register(domain, op_type, since, provider, factory)
        return factory

    return register
