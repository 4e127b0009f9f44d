"""Output buffers for a checked call: poisoned contents between guard bytes, and what a call
left in them (elements never written, bytes written outside)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GUARD = 256            # bytes of guard at least on each side of every output and of the workspace
GUARD_BYTE = 0xE7      # the guards' pattern (the core's workspace guards use it too)
POISONS = (0xA5, 0x5A)  # the two fillings an unwritten element keeps in two calls


@dataclass
class GuardedOutput:
    """An output array inside a larger byte buffer, filled with a poison byte before the call,
    with guards on each side as large as the array (at least GUARD bytes), so that compute
    writing twice the bytes infer declared (another dtype) stays inside them."""

    raw: np.ndarray
    array: np.ndarray
    nbytes: int
    guard: int

    @classmethod
    def make(cls, dtype: np.dtype, shape: tuple, poison: "int | None", guard: "int | None" = None) -> "GuardedOutput":
        """`guard` bytes on each side (default guard_for the array's bytes); the array filled
        with `poison`, or left as it comes (None)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        guard = guard_for(nbytes) if guard is None else guard
        raw = np.empty(guard + nbytes + guard, dtype=np.uint8)
        raw[:guard] = GUARD_BYTE
        raw[guard + nbytes:] = GUARD_BYTE
        if poison is not None:
            raw[guard:guard + nbytes] = poison
        array = np.ndarray(shape, dtype, buffer=raw, offset=guard)   # (a slice of no bytes would
        return cls(raw, array, nbytes, guard)                           # point at raw's start)

    def damage(self) -> tuple:
        """(bytes written before the array: the furthest one's distance, bytes written past
        its end: the furthest one's distance); 0 when the guard is intact."""
        front = np.flatnonzero(self.raw[:self.guard] != GUARD_BYTE)
        back = np.flatnonzero(self.raw[self.guard + self.nbytes:] != GUARD_BYTE)
        return (int(self.guard - front[0]) if front.size else 0, int(back[-1] + 1) if back.size else 0)

    def element_bytes(self) -> np.ndarray:
        """The array's bytes, one row per element."""
        itemsize = max(self.array.dtype.itemsize, 1)
        return self.raw[self.guard:self.guard + self.nbytes].reshape(-1, itemsize)


def guard_for(nbytes: int) -> int:
    """Guard bytes on each side of a buffer of `nbytes`: as many, at least GUARD, in 64s."""
    return (max(GUARD, nbytes) + 63) // 64 * 64


def unwritten(first: GuardedOutput, second: GuardedOutput) -> np.ndarray:
    """Flat indices of elements that kept the poison in both calls (filled with POISONS[0],
    then POISONS[1]): never written by compute."""
    a, b = first.element_bytes(), second.element_bytes()
    return np.flatnonzero(np.all(a == POISONS[0], axis=1) & np.all(b == POISONS[1], axis=1))


def differing(first: np.ndarray, second: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """Flat indices where two results of one dtype and shape differ bit for bit (elements in
    `skip`, the unwritten ones, left out)."""
    itemsize = max(first.dtype.itemsize, 1)
    a = np.ascontiguousarray(first).view(np.uint8).reshape(-1, itemsize)
    b = np.ascontiguousarray(second).view(np.uint8).reshape(-1, itemsize)
    diff = np.any(a != b, axis=1)
    diff[skip] = False
    return np.flatnonzero(diff)


def index_of(flat: int, shape: tuple) -> list:
    """An element's index as a list, e.g. [2, 4] (an empty list for a scalar)."""
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []
