"""Optional ops; an empty optional is None, a full one is just its value (no wrapper)."""
from __future__ import annotations

import numpy as np

from opforge.runtime.errors import KernelError
from opforge.runtime.providers.registry import kernel


class _OptionalKernel:
    provider = "CPUExecutionProvider"

    def __init__(self, node, opset: int):
        self.node = node


@kernel("Optional", since=15)
class Optional(_OptionalKernel):
    """Wraps its input, if any; with none, the optional is empty."""

    def run(self, inputs: list) -> list:
        """The input itself, or None."""
        return [inputs[0] if inputs else None]


@kernel("OptionalHasElement", since=15)
class OptionalHasElement(_OptionalKernel):
    """Whether the input holds a value (an absent input counts as empty)."""

    def run(self, inputs: list) -> list:
        """A boolean scalar."""
        return [np.array(bool(inputs) and inputs[0] is not None)]


@kernel("OptionalGetElement", since=15)
class OptionalGetElement(_OptionalKernel):
    """The value inside the optional; an error for an empty one."""

    def run(self, inputs: list) -> list:
        """The value held; KernelError if there is none."""
        if not inputs or inputs[0] is None:
            raise KernelError(f"{self.node.label}: the optional input holds no value")
        return [inputs[0]]
