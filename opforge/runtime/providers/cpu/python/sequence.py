"""Sequence ops: a sequence is a Python list of arrays, built and taken apart here.

Identity is here too, for the sequences and optionals its C kernel cannot take (the native
kernel hands such calls to this one).
"""
from __future__ import annotations

import numpy as np

from opforge.runtime.errors import KernelError
from opforge.runtime.providers.registry import kernel


class _SequenceKernel:
    provider = "CPUExecutionProvider"

    def __init__(self, node, opset: int):
        self.node = node
        self.attrs = node.attrs

    def position(self, value, length: int, allow_end: bool) -> int:
        """A position input as an index into a sequence of ``length`` (negative counts from the
        end; ``allow_end`` admits ``length`` itself, for inserting at the back)."""
        value = np.asarray(value)
        if value.size != 1 or value.dtype.kind not in "iu":
            raise KernelError(f"{self.node.label}: input 'position' must be one integer, "
                              f"got {value.dtype}{list(value.shape)}")
        at = int(value.reshape(()))
        top = length if allow_end else length - 1
        if not -length <= at <= top:
            raise KernelError(f"{self.node.label}: position {at} is outside [{-length}, {top}] "
                              f"for a sequence of {length}")
        return at + length if at < 0 else at

    def sequence(self, value) -> list:
        """Input 0 as a sequence; KernelError naming the node when it is not one."""
        if not isinstance(value, list):
            raise KernelError(f"{self.node.label}: input 0 must be a sequence, got "
                              f"{type(value).__name__}")
        return value


@kernel("SequenceEmpty", since=11)
class SequenceEmpty(_SequenceKernel):
    """An empty sequence (its 'dtype' attribute only types the graph)."""

    def run(self, inputs: list) -> list:
        return [[]]


@kernel("SequenceConstruct", since=11)
class SequenceConstruct(_SequenceKernel):
    """A sequence of the inputs, which must share one dtype."""

    def run(self, inputs: list) -> list:
        kinds = {np.asarray(x).dtype for x in inputs}
        if len(kinds) > 1:
            raise KernelError(f"{self.node.label}: the inputs have different dtypes "
                              f"{sorted(str(k) for k in kinds)}")
        return [list(inputs)]


@kernel("SequenceInsert", since=11)
class SequenceInsert(_SequenceKernel):
    """A new sequence with the tensor inserted at 'position' (default: at the back)."""

    def run(self, inputs: list) -> list:
        seq = self.sequence(inputs[0])
        tensor = inputs[1]
        if seq and np.asarray(seq[0]).dtype != np.asarray(tensor).dtype:
            raise KernelError(f"{self.node.label}: inserting {np.asarray(tensor).dtype} into a "
                              f"sequence of {np.asarray(seq[0]).dtype}")
        at = len(seq) if len(inputs) < 3 or inputs[2] is None else self.position(inputs[2], len(seq), True)
        return [seq[:at] + [tensor] + seq[at:]]


@kernel("SequenceErase", since=11)
class SequenceErase(_SequenceKernel):
    """A new sequence without the tensor at 'position' (default: the last)."""

    def run(self, inputs: list) -> list:
        seq = self.sequence(inputs[0])
        if not seq:
            raise KernelError(f"{self.node.label}: cannot erase from an empty sequence")
        at = len(seq) - 1 if len(inputs) < 2 or inputs[1] is None else self.position(inputs[1], len(seq), False)
        return [seq[:at] + seq[at + 1:]]


@kernel("SequenceAt", since=11)
class SequenceAt(_SequenceKernel):
    """The tensor at 'position'."""

    def run(self, inputs: list) -> list:
        seq = self.sequence(inputs[0])
        return [seq[self.position(inputs[1], len(seq), False)]]


@kernel("SequenceLength", since=11)
class SequenceLength(_SequenceKernel):
    """The number of tensors, as an int64 scalar."""

    def run(self, inputs: list) -> list:
        return [np.array(len(self.sequence(inputs[0])), dtype=np.int64)]


@kernel("SplitToSequence", since=11)
class SplitToSequence(_SequenceKernel):
    """The input cut along 'axis': into pieces of the sizes in 'split' (a scalar: equal pieces,
    the last shorter), or without 'split' into pieces of 1, squeezed unless 'keepdims'."""

    def run(self, inputs: list) -> list:
        x = np.asarray(inputs[0])
        axis = int(self.attrs.get("axis", 0))
        if not -x.ndim <= axis < x.ndim:
            raise KernelError(f"{self.node.label}: axis {axis} is out of range for rank {x.ndim}")
        axis %= x.ndim
        length = x.shape[axis]
        split = inputs[1] if len(inputs) > 1 else None
        if split is None:
            pieces = [np.take(x, [i], axis=axis) for i in range(length)]
            if not int(self.attrs.get("keepdims", 1)):
                pieces = [np.squeeze(p, axis=axis) for p in pieces]
            return [pieces]
        split = np.asarray(split)
        if split.ndim == 0:
            size = int(split)
            if size <= 0:
                raise KernelError(f"{self.node.label}: input 'split' = {size} must be positive")
            sizes = [size] * (length // size) + ([length % size] if length % size else [])
        else:
            sizes = [int(s) for s in split]
            if any(s < 0 for s in sizes) or sum(sizes) != length:
                raise KernelError(f"{self.node.label}: input 'split' {sizes} does not add up to "
                                  f"the axis length {length}")
        bounds = np.cumsum([0] + sizes)
        return [[np.take(x, range(lo, hi), axis=axis) for lo, hi in zip(bounds[:-1], bounds[1:])]]


@kernel("ConcatFromSequence", since=11)
class ConcatFromSequence(_SequenceKernel):
    """The tensors joined along 'axis', or stacked on a new axis with 'new_axis' = 1."""

    def run(self, inputs: list) -> list:
        seq = self.sequence(inputs[0])
        if not seq:
            raise KernelError(f"{self.node.label}: cannot concatenate an empty sequence")
        axis = int(self.attrs["axis"])
        new_axis = int(self.attrs.get("new_axis", 0))
        rank = np.ndim(seq[0]) + new_axis
        if not -rank <= axis < rank:
            raise KernelError(f"{self.node.label}: axis {axis} is out of range for rank {rank}")
        try:
            joined = np.stack(seq, axis=axis) if new_axis else np.concatenate(seq, axis=axis)
        except ValueError as exc:
            raise KernelError(f"{self.node.label}: the tensors do not join: {exc}") from None
        return [joined]


@kernel("Identity", since=1)
class Identity(_SequenceKernel):
    """The input itself: a tensor, a sequence, or an optional (None when empty)."""

    def run(self, inputs: list) -> list:
        return [inputs[0]]
