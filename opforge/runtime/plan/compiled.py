"""Execution plans: per input-shape signature, the graph compiled to flat steps over one arena.

The first run of a new signature goes through the Python executor and records every value's
dtype and shape; from those the memory planner lays out one arena (offsets reused, in-place
where a kernel allows it) and the steps become a `_core.Plan` whose loop calls native kernels
through the C ABI with no Python in between. A value whose size differs at run time from the
plan (a data-dependent shape) gets memory of its own, so a plan is never wrong, only slower.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from opforge import _core
from opforge.runtime.execute.executor import Executor, Recording, _run_kernel
from opforge.runtime.plan import memory
from opforge.runtime.providers.registry import CPU

logger = logging.getLogger("opforge.runtime")

ARENA, OUTPUT = _core.SLOT_KINDS["arena"], _core.SLOT_KINDS["output"]


def signature(env: dict) -> tuple:
    """What a plan depends on: every fed value's name, dtype and shape (a non-array's type),
    in name order (names are unique, so dtype objects are compared only for equality). This
    runs before every run of the graph and of every loop body iteration."""
    key = []
    for name in sorted(env):
        value = env[name]
        if type(value) is np.ndarray:
            key.append((name, value.dtype, value.shape))
        else:
            dtype = getattr(value, "dtype", None)
            key.append((name, type(value) if dtype is None else dtype, getattr(value, "shape", None)))
    return tuple(key)


@dataclass
class CompiledPlan:
    """A `_core.Plan` with the slot numbers it was built with, and its memory plan."""

    core: object
    slots: dict
    outputs: list
    memory: memory.MemoryPlan
    steps: list = field(default_factory=list)   # (node name, op type, provider) per step

    def __post_init__(self):
        self._output_slots = [self.slots[n] for n in self.outputs]

    def run(self, env: dict, run_options=None, observe: "dict | None" = None) -> list:
        """The plan's outputs for ``env`` (arrays in any layout: the core makes C-ordered copies
        of those that are not); the core reads the values it was told the names of. ``observe``:
        {value name: callable}, see Executor.run."""
        if observe is None:
            return self.core.run_env(env, run_options)
        return self.core.run_env(env, run_options, {self.slots[name]: fn for name, fn in observe.items()})

    def run_loop(self, outer: dict, counters: list, carried_names: list, carried: list, scanned_names: list,
                 scanned: list, reverse: list, start: int, limit: "int | None", condition: bool = True,
                 run_options=None) -> tuple:
        """Iterations of a Loop or Scan body in C++ through this plan, from iteration ``start``
        (csrc/loop.h): ``counters`` names a Loop's iteration-number and condition inputs (empty
        for a Scan); ``scanned`` arrays have their scan axis first, C-contiguous. Returns
        (iterations done, condition, carried values, scan outputs per iteration, finished)."""
        slots = self.slots   # (Plan::run makes C-ordered copies of feeds that are not)
        fixed = [(slots[name], value) for name, value in outer.items() if name in slots]
        return _core.run_loop(self.core, fixed, slots[counters[0]] if counters else -1,
                              slots[counters[1]] if counters else -1, [slots[name] for name in carried_names],
                              list(carried),
                              [slots[name] for name in scanned_names], list(scanned), list(reverse),
                              [slots[name] for name in self.outputs], start, -1 if limit is None else limit,
                              condition, run_options)

    def dump(self) -> str:
        """The steps with the provider each runs on (copies between devices included), then
        the memory plan as a table."""
        alone = set(self.core.alone_steps)
        lines = [f"{self.core.num_steps} steps" + (f" ({len(alone)} measured faster without the pool's "
                                                    "workers, marked 'alone')" if alone else "")]
        lines += [f"  {label[:40]:<42}{op:<24}{provider}" + ("  alone" if i in alone else "")
                  for i, (label, op, provider) in enumerate(self.steps)]
        return "\n".join(lines + [self.memory.dump()])

    def __repr__(self) -> str:
        return self.dump()

    def _repr_html_(self) -> str:
        return f"<p>{self.core.num_steps} steps</p>{self.memory.html()}"


def _native_steps(record: Recording) -> dict:
    """{step index: workspace bytes} of the steps whose recorded call ran a native kernel."""
    return {index: ws for index, ws in record.workspace.items() if ws is not None}


def _sizes(executor: Executor, record: Recording, native: dict) -> dict:
    """Bytes of every value a native kernel writes (others live in Python objects)."""
    sizes = {}
    for index in native:
        for name in executor.steps[index].outputs:
            info = record.values.get(name)
            if name and info is not None:
                sizes[name] = int(np.prod(info[1], dtype=np.int64)) * np.dtype(info[0]).itemsize
    return sizes


def _places(step, record: Recording, constants: dict) -> list:
    """Per input of a CPU Concat whose output is one run per input (every dimension before the
    axis is 1): the byte offset in the output it is copied to (memory.join_parts); else []."""
    node = step.node
    if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or step.kernel.provider != CPU:
        return []
    shapes = [record.values.get(name) if name not in constants else (constants[name].dtype, constants[name].shape)
              for name in step.inputs]
    out = record.values.get(step.outputs[0]) if step.outputs else None
    if out is None or any(info is None for info in shapes):
        return []
    axis = node.attrs.get("axis", 0)
    rank = len(out[1])
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or int(np.prod(out[1][:axis], dtype=np.int64)) != 1:
        return []
    places, at = [], 0
    for dtype, shape in shapes:
        places.append(at)
        at += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return places


def plan_memory(executor: Executor, record: Recording, external: set) -> memory.MemoryPlan:
    """The arena layout for the recorded run."""
    native = _native_steps(record)
    steps = []
    for index, step in enumerate(executor.steps):
        is_native = index in native
        steps.append(memory.PlanStep(
            step.node.name or step.node.outputs[0], list(step.inputs), list(step.outputs),
            list(step.kernel.inplace) if is_native else [], native.get(index, 0),
            _places(step, record, executor.graph.initializers) if is_native else []))
    return memory.plan_memory(steps, _sizes(executor, record, native), external)


def compile_plan(executor: Executor, record: Recording, env: dict, pool) -> CompiledPlan:
    """Builds the `_core.Plan` for the signature `record` was taken with."""
    graph = executor.graph
    names = list(dict.fromkeys(list(env) + list(graph.initializers) +
                               [n for s in executor.steps for n in s.inputs + s.outputs if n]))
    slots = {name: i for i, name in enumerate(names)}
    outputs = executor.output_names
    external = set(env) | set(graph.initializers) | set(outputs)
    mem = plan_memory(executor, record, external)
    core = _core.Plan(len(slots), mem.arena_bytes, pool)
    for name, value in graph.initializers.items():
        if name not in env:
            core.set_constant(slots[name], value)
    for name, block in mem.blocks.items():
        if name in slots:
            core.set_slot(slots[name], ARENA, block.offset, block.size)
    for name in outputs:
        if name in slots and name not in env and name not in graph.initializers:
            core.set_slot(slots[name], OUTPUT, -1, 0)
    native = _native_steps(record)
    for index, step in enumerate(executor.steps):
        _add_step(core, step, slots, mem, index, index in native)
    for name in env:
        core.set_feed(slots[name], name)
    steps = [(step.node.name or f"-> {step.node.outputs[0] if step.node.outputs else '?'}", step.node.op_type,
              step.kernel.provider) for step in executor.steps]
    plan = CompiledPlan(core, slots, outputs, mem, steps)
    core.set_outputs(plan._output_slots)
    return plan


def _add_step(core, step, slots: dict, mem: memory.MemoryPlan, index: int, native: bool) -> None:
    ins = [slots[n] if n else -1 for n in step.inputs]
    outs = [slots[n] if n else -1 for n in step.outputs]
    release = [slots[n] for n in step.frees if n in slots]
    if native:
        ws = mem.blocks.get(mem.workspace_name(index))
        core.add_native(step.node.label, step.kernel.handle, step.kernel.attrs, ins, outs, release,
                        ws.offset if ws else -1, ws.size if ws else 0)
    elif getattr(step.kernel, "core_step", None) and len(ins) == 1 and len(outs) == 1:
        kind, table, size = step.kernel.core_step   # the core runs the usual inputs itself
        core.add_core_step(step.node.label, functools.partial(_run_kernel, step), _core.CORE_STEPS[kind],
                           table, size, ins[0], outs[0], release)
    else:
        core.add_python(step.node.label, functools.partial(_run_kernel, step),
                        ins, outs, release)


class PlannedExecutor:
    """Runs an Executor's graph, through a compiled plan per input signature once recorded.

    Plans live in a bounded LRU cache shared by every thread running the session; the lock
    guards only the cache itself. A signature whose plan failed to compile runs on the Python
    executor and is tried again after 1, 2, 4, ... further runs (up to every 64th)."""

    def __init__(self, executor: Executor, pool, enabled: bool = True, capacity: int = 32,
                 profile: bool = False, record_after: int = 0):
        self.executor, self.pool, self.enabled, self.profile = executor, pool, enabled, profile
        self.capacity = max(1, capacity)
        self.record_after = record_after   # runs of a signature on the Python executor before a plan
        self._plans: OrderedDict = OrderedDict()   # signature -> CompiledPlan, _Failure or _Seen
        self._lock = threading.Lock()

    @property
    def graph(self):
        return self.executor.graph

    @property
    def outer_refs(self) -> list:
        return self.executor.outer_refs

    def run(self, env: dict, run_options=None, key: tuple | None = None, observe: "dict | None" = None) -> list:
        """The graph's outputs for ``env``; ``key``: its signature when the caller has it;
        ``observe``: {value name: callable}, see Executor.run."""
        if not self.enabled:
            return self.executor.run(env, run_options, observe=observe)
        if key is None:
            key = signature(env)
        entry = self._get(key)
        if isinstance(entry, CompiledPlan):
            return entry.run(env, run_options, observe)
        if isinstance(entry, _Failure) and not entry.due():
            return self.executor.run(env, run_options, observe=observe)
        if self.record_after and not isinstance(entry, _Failure):
            seen = entry if isinstance(entry, _Seen) else _Seen()
            if seen.count() <= self.record_after:
                self._put(key, seen)
                return self.executor.run(env, run_options, observe=observe)
        record = Recording()
        outputs = self.executor.run(env, run_options, record=record, observe=observe)
        try:
            plan = compile_plan(self.executor, record, env, self.pool)
            plan.core.set_profiling(self.profile)
            self._put(key, plan)
        except Exception as exc:  # a plan is an optimisation: without one, runs stay correct
            failure = entry.next() if isinstance(entry, _Failure) else _Failure()
            logger.warning("no execution plan for this input signature (%s: %s); its runs stay on "
                           "the Python executor, next try in %d runs", type(exc).__name__, exc,
                           failure.wait)
            self._put(key, failure)
        return outputs

    def take_profile(self) -> list:
        """(step, start, seconds) of every step the compiled plans ran since the last call."""
        with self._lock:
            plans = [p for p in self._plans.values() if isinstance(p, CompiledPlan)]
        steps = self.executor.steps
        return [(steps[i], start, seconds) for plan in plans for i, start, seconds in plan.core.take_profile()]

    key = staticmethod(signature)   # a caller that both looks for a plan and runs computes it once

    def plan_for(self, env: dict, key: tuple | None = None) -> "CompiledPlan | None":
        """The compiled plan of `env`'s signature (``key`` when the caller has it), if a run with
        it has made one."""
        entry = self._get(signature(env) if key is None else key)
        return entry if isinstance(entry, CompiledPlan) else None

    def __len__(self) -> int:
        return len(self._plans)

    def _get(self, key):
        if len(self._plans) <= 1:   # nothing to keep in LRU order: a lock-free read (500 ns less)
            return self._plans.get(key)
        with self._lock:
            entry = self._plans.get(key)
            if entry is not None:
                self._plans.move_to_end(key)
            return entry

    def _put(self, key, entry) -> None:
        with self._lock:
            self._plans[key] = entry
            self._plans.move_to_end(key)
            if len(self._plans) > self.capacity and self.record_after:
                # a body that meets more shapes than the cache holds (a loop whose values grow)
                # would record and compile on every iteration: it stays on the Python executor
                logger.debug("%d input signatures for one body; it runs without plans", len(self._plans))
                self.enabled = False
                self._plans.clear()
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)


class _Seen:
    """A signature run without a plan so far, and how often (a loop body whose shapes change
    every iteration is not worth a plan per iteration)."""

    def __init__(self):
        self.runs = 0
        self._lock = threading.Lock()

    def count(self) -> int:
        with self._lock:
            self.runs += 1
            return self.runs


class _Failure:
    """A signature whose plan did not compile: how many runs to wait before trying again."""

    def __init__(self, wait: int = 1):
        self.wait, self._runs = wait, 0
        self._lock = threading.Lock()

    def due(self) -> bool:
        """Counts a run; true once ``wait`` runs have passed since the failure."""
        with self._lock:
            self._runs += 1
            return self._runs > self.wait

    def next(self) -> "_Failure":
        return _Failure(min(self.wait * 2, 64))
