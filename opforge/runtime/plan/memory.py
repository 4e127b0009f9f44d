"""The memory plan: value lifetimes, one arena, offsets reused, in-place where an op allows it,
and the inputs of a Concat written by their producers straight into its output."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from opforge import tables

ALIGNMENT = 64


@dataclass
class PlanStep:
    """What the planner needs of one node: its values, in-place rights and scratch bytes."""

    name: str
    inputs: list          # value names ("" for absent)
    outputs: list
    inplace: list = field(default_factory=list)   # per output: the input index it may overwrite, or -1
    workspace: int = 0
    # per input: the byte offset in output 0 the op copies it to whole (Concat), or -1
    places: list = field(default_factory=list)


@dataclass
class Block:
    """One value's place in the arena, alive from step `start` to step `end` inclusive."""

    name: str
    size: int
    start: int
    end: int
    kind: str = "allocate"      # allocate | reuse | inplace | workspace | part
    offset: int = -1
    alias_of: str = ""


@dataclass
class MemoryPlan:
    """Offsets of every planned value in one arena; `dump()` prints it."""

    blocks: dict
    arena_bytes: int
    lower_bound: int
    steps: list

    def offset(self, name: str) -> int:
        return self.blocks[name].offset

    def workspace_name(self, step: int) -> str:
        return f"<workspace {self.steps[step].name}>"

    def dump(self) -> str:
        """A readable table: each value's size, offset, lifetime and allocation kind."""
        lines = [self.title(),
                 f"{'value':<32}{'bytes':>12}{'offset':>12}  {'steps':<11}kind"]
        for b in self._ordered():
            alias = f" of {b.alias_of}" if b.alias_of else ""
            lines.append(f"{b.name[:31]:<32}{b.size:>12}{b.offset:>12}  {f'{b.start}-{b.end}':<11}"
                         f"{b.kind}{alias}")
        return "\n".join(lines)

    def title(self) -> str:
        return (f"memory plan: arena {self.arena_bytes} bytes, liveness lower bound "
                f"{self.lower_bound} bytes (ratio {self.ratio:.3f})")

    def html(self) -> str:
        """The dump's table as HTML, for a notebook."""
        rows = [[b.name, b.size, b.offset, f"{b.start}-{b.end}",
                 b.kind + (f" of {b.alias_of}" if b.alias_of else "")] for b in self._ordered()]
        return tables.html_table(["value", "bytes", "offset", "steps", "kind"], rows, self.title())

    def _repr_html_(self) -> str:
        return self.html()

    def _ordered(self) -> list:
        return sorted(self.blocks.values(), key=lambda b: (b.start, b.offset))

    @property
    def ratio(self) -> float:
        return self.arena_bytes / self.lower_bound if self.lower_bound else 1.0


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def lifetimes(steps: list, sizes: dict, external: set) -> tuple:
    """Blocks for planned values (not in `external`), with in-place outputs merged into inputs.

    Returns (blocks by name, alias map output -> the value whose memory it takes).
    """
    blocks, alias = {}, {}
    last_use = {}
    for i, step in enumerate(steps):
        for name in step.inputs:
            last_use[name] = i
    for i, step in enumerate(steps):
        for name in step.inputs:
            root = alias.get(name, name)
            if root in blocks:
                blocks[root].end = max(blocks[root].end, i)
        for k, name in enumerate(step.outputs):
            if not name or name in external or name not in sizes:
                continue
            j = step.inplace[k] if k < len(step.inplace) else -1
            src = step.inputs[j] if 0 <= j < len(step.inputs) else ""
            root = alias.get(src, src)
            if root in blocks and blocks[root].end <= i and last_use.get(src) == i \
                    and sizes.get(src) == sizes[name] and root not in external:
                alias[name] = root
                blocks[root].end = i
                continue
            blocks[name] = Block(name, sizes[name], i, i)
        if step.workspace > 0:
            ws = f"<workspace {step.name}>"
            blocks[ws] = Block(ws, step.workspace, i, i, kind="workspace")
    for name, root in alias.items():
        blocks[root].end = max(blocks[root].end, last_use.get(name, -1))
    return blocks, alias


def join_parts(steps: list, blocks: dict, alias: dict, sizes: dict) -> dict:
    """Moves the inputs of ops that copy each input whole into their output (PlanStep.places)
    into that output's block, at the offset the op copies them to: the producers write there
    and the copy finds each input already in place (the Concat kernel then skips it). An input
    moves, with the values that took its memory in place, when the op is its only reader and the
    last of its group, when it is not a graph input, output or initializer, and when the offset
    keeps ALIGNMENT. The output's block then starts at the first such producer. An output that
    moves into another op's output (nested Concats) takes its parts along.

    Removes the moved blocks from ``blocks``; returns {root: (output, byte offset)}."""
    uses = Counter(name for step in steps for name in step.inputs if name)
    parts = {}
    for i, step in enumerate(steps):
        whole = step.outputs[0] if step.places and step.outputs else ""
        if whole not in blocks or blocks[whole].kind != "allocate":
            continue   # not planned here, or not its own block (workspace)
        for name, at in zip(step.inputs, step.places):
            root = alias.get(name, name)
            part = blocks.get(root)
            if (at < 0 or at % ALIGNMENT or uses[name] != 1 or part is None or part.kind != "allocate"
                    or root == whole or part.end != i or at + sizes.get(name, -1) > blocks[whole].size):
                continue
            parts[root] = (whole, at)
            del blocks[root]
            blocks[whole].start = min(blocks[whole].start, part.start)
    return parts


def lower_bound(blocks: dict, num_steps: int) -> int:
    """The most bytes alive at any one step: no plan can use less."""
    live = [0] * max(num_steps, 1)
    for b in blocks.values():
        for i in range(b.start, b.end + 1):
            live[i] += _align(b.size)
    return max(live) if live else 0


# Orders in which blocks are placed; the plan keeps whichever gives the smallest arena.
_ORDERS = (
    lambda b: (-b.size, b.start, b.name),                          # largest first
    lambda b: (-b.size * (b.end - b.start + 1), b.start, b.name),  # biggest area first
    lambda b: (b.start, -b.size, b.name),                          # in execution order
    lambda b: (-(b.end - b.start), -b.size, b.name),               # longest-lived first
)


def _place(blocks: list, order, best_fit: bool) -> "tuple[int, dict]":
    """Each block, in `order`, takes a gap free during its lifetime: the smallest that fits
    (best fit) or the lowest (first fit); else the top of the arena."""
    placed, offsets, arena = [], {}, 0
    for b in sorted(blocks, key=order):
        need = _align(b.size)
        busy = sorted((offsets[p.name], offsets[p.name] + _align(p.size)) for p in placed
                      if p.start <= b.end and b.start <= p.end)
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= need and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
                if not best_fit:
                    break
            cursor = max(cursor, hi)
        offsets[b.name] = cursor if best is None else best
        placed.append(b)
        arena = max(arena, offsets[b.name] + need)
    return arena, offsets


def assign_offsets(blocks: dict) -> int:
    """Sets each block's offset so blocks alive at the same time never overlap; returns the
    arena size. Several placement orders are tried (for graphs of moderate size) and the
    smallest arena wins."""
    values = list(blocks.values())
    orders = _ORDERS if len(values) <= 3000 else _ORDERS[:1]
    arena, offsets = min((_place(values, order, fit) for order in orders for fit in (True, False)),
                         key=lambda r: r[0])
    for b in values:
        b.offset = offsets[b.name]
    if len(values) <= 3000:  # label blocks that take memory an earlier value used (for dump)
        for b in values:
            if b.kind == "allocate" and any(
                    p.start < b.start and p.offset < b.offset + b.size and b.offset < p.offset + p.size
                    for p in values):
                b.kind = "reuse"
    return arena


def plan_memory(steps: list, sizes: dict, external: set) -> MemoryPlan:
    """Plans one arena for every value in `sizes` that is not `external` (graph inputs,
    initializers and graph outputs live outside the arena)."""
    blocks, alias = lifetimes(steps, sizes, external)
    every = dict(blocks)
    parts = join_parts(steps, blocks, alias, sizes)
    bound = lower_bound(blocks, len(steps))
    arena = assign_offsets(blocks)

    def place(root: str) -> int:   # a part's offset, through the outputs it nests in
        if root not in parts:
            return blocks[root].offset
        whole, at = parts[root]
        return place(whole) + at

    for root, (whole, _) in parts.items():
        every[root].kind, every[root].offset, every[root].alias_of = "part", place(root), whole
    for root in parts:
        blocks[root] = every[root]
    for name, root in alias.items():
        blocks[name] = Block(name, sizes[name], blocks[root].start, blocks[root].end, "inplace",
                             blocks[root].offset, alias_of=root)
    return MemoryPlan(blocks, arena, bound, steps)
