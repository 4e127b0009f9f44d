"""Execution plans: per input-shape signature, the graph compiled to flat steps over one arena.

The first run of a new signature goes through the Python executor and records every value's
dtype and shape; from those the memory planner lays out one arena (offsets reused, in-place
where a kernel allows it) and the steps become a `_core.Plan` whose loop calls native kernels
through the C ABI with no Python in between. A value whose size differs at run time from the
plan (a data-dependent shape) gets memory of its own, so a plan is never wrong, only slower.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from opforge import _core
from opforge.runtime import memory
from opforge.runtime.executor import Executor, _run_kernel
from opforge.runtime.providers.native import NativeKernel

logger = logging.getLogger("opforge.runtime")

ARENA, OUTPUT, CONSTANT, FEED, DYNAMIC = 1, 2, 3, 4, 0


def signature(env: dict) -> tuple:
    """What a plan depends on: every fed value's name, dtype and shape."""
    return tuple(sorted((name, str(getattr(v, "dtype", type(v).__name__)), getattr(v, "shape", None))
                        for name, v in env.items()))


@dataclass
class CompiledPlan:
    """A `_core.Plan` with the slot numbers it was built with, and its memory plan."""

    core: object
    slots: dict
    outputs: list
    memory: memory.MemoryPlan

    def run(self, env: dict, run_options=None) -> list:
        feeds = [(self.slots[name], value if not isinstance(value, np.ndarray)
                  else np.asarray(value, order="C")) for name, value in env.items() if name in self.slots]
        return self.core.run(feeds, [self.slots[n] for n in self.outputs], run_options)

    def dump(self) -> str:
        """The memory plan as a table, and the step count."""
        return f"{self.core.num_steps} steps\n{self.memory.dump()}"


def _is_native(step) -> bool:
    return isinstance(step.kernel, NativeKernel) and step.kernel.fallback is None


def _sizes(executor: Executor, record: dict) -> dict:
    """Bytes of every value a native kernel writes (others live in Python objects)."""
    sizes = {}
    for step in executor.steps:
        if _is_native(step):
            for name in step.outputs:
                info = record.get(name)
                if name and info is not None:
                    sizes[name] = int(np.prod(info[1], dtype=np.int64)) * np.dtype(info[0]).itemsize
    return sizes


def plan_memory(executor: Executor, record: dict, external: set) -> memory.MemoryPlan:
    """The arena layout for the recorded run."""
    steps = []
    for step in executor.steps:
        native = _is_native(step)
        steps.append(memory.PlanStep(
            step.node.name or step.node.outputs[0], list(step.inputs), list(step.outputs),
            list(step.kernel.inplace) if native else [], step.kernel.workspace if native else 0))
    return memory.plan_memory(steps, _sizes(executor, record), external)


def compile_plan(executor: Executor, record: dict, env: dict, pool) -> CompiledPlan:
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
    for index, step in enumerate(executor.steps):
        _add_step(core, step, slots, mem, index)
    return CompiledPlan(core, slots, outputs, mem)


def _add_step(core, step, slots: dict, mem: memory.MemoryPlan, index: int) -> None:
    ins = [slots[n] if n else -1 for n in step.inputs]
    outs = [slots[n] if n else -1 for n in step.outputs]
    release = [slots[n] for n in step.frees if n in slots]
    if _is_native(step):
        ws = mem.blocks.get(mem.workspace_name(index))
        core.add_native(step.node.label, step.kernel.handle, step.kernel.attrs, ins, outs, release,
                        ws.offset if ws else -1, ws.size if ws else 0)
    else:
        core.add_python(step.node.label, lambda args, step=step: _run_kernel(step, list(args)),
                        ins, outs, release)


class PlannedExecutor:
    """Runs an Executor's graph, through a compiled plan per input signature once recorded."""

    def __init__(self, executor: Executor, pool, enabled: bool = True):
        self.executor, self.pool, self.enabled = executor, pool, enabled
        self.plans: dict = {}

    def run(self, env: dict, run_options=None) -> list:
        if not self.enabled:
            return self.executor.run(env, run_options)
        key = signature(env)
        plan = self.plans.get(key)
        if plan:
            return plan.run(env, run_options)
        if plan is False:
            return self.executor.run(env, run_options)
        record: dict = {}
        outputs = self.executor.run(env, run_options, record=record)
        try:
            self.plans[key] = compile_plan(self.executor, record, env, self.pool)
        except Exception as exc:  # a plan is an optimisation: without one, runs stay correct
            logger.warning("no execution plan for this input signature (%s: %s); its runs stay "
                           "on the Python executor", type(exc).__name__, exc)
            self.plans[key] = False
        return outputs

    def plan_for(self, env: dict) -> "CompiledPlan | None":
        """The compiled plan of `env`'s signature, if a run with it has happened."""
        return self.plans.get(signature(env)) or None
