"""If, Loop, Scan, SequenceMap: kernels that run their subgraphs with the session's own kernels."""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable, Protocol

import numpy as np

from opforge.runtime.errors import GraphError, KernelError, RunCancelledError
from opforge.runtime.graph.graph import Graph, Node
from opforge.runtime.providers.registry import CPU


class SubgraphRunner(Protocol):
    """A compiled subgraph: ``run(env)`` takes its inputs and the ``outer_refs`` by name."""

    graph: Graph
    outer_refs: list[str]

    def run(self, env: dict[str, Any], run_options=None) -> list[Any]:
        """Run the subgraph on ``env``; return its outputs in order."""


RUN_OPTIONS: ContextVar = ContextVar("opforge_run_options", default=None)
"""The RunOptions of the run in progress on this thread (set by the session), so that a loop
stops between iterations when its ``terminate`` is set, as the executor does between nodes."""


def run_body(body: SubgraphRunner, env: dict[str, Any], node: Node, iteration: int,
             key: tuple | None = None) -> list[Any]:
    """One iteration of a loop's body; RunCancelledError first if the run was cancelled. ``key``:
    env's plan signature, when the caller has computed it (a body run through compiled plans)."""
    options = RUN_OPTIONS.get()
    if options is not None and options.terminate:
        raise RunCancelledError(f"run cancelled (RunOptions.terminate) at iteration {iteration} of "
                                f"{node.label}")
    return body.run(env, options) if key is None else body.run(env, options, key=key)


Compile = Callable[[Graph], SubgraphRunner]

CONTROL_FLOW_OPS = ("If", "Loop", "Scan", "SequenceMap")


def is_control_flow(node: Node) -> bool:
    """Whether the executor runs ``node`` itself (If, Loop, Scan, SequenceMap of ai.onnx)."""
    return node.domain == "" and node.op_type in CONTROL_FLOW_OPS


def hoist_outer_constants(graph: Graph, constants: dict[str, np.ndarray] | None = None) -> int:
    """Gives every subgraph the outer constants it reads as initializers of its own (the same
    arrays, not copies), as onnxruntime's subgraph session state does, so a body's weights are
    constants of its compiled plan instead of values its node hands over on every run; the
    nodes' implicit inputs shrink to the values that really vary. ``constants``: the enclosing
    graph's initializers that no feed can replace. Returns how many values were hoisted."""
    hoisted = 0
    for node in graph.nodes:
        subgraphs = node.subgraphs()
        if not subgraphs:
            continue
        for body in subgraphs:
            for name in body.outer_refs():
                if name in (constants or {}):
                    body.initializers[name] = constants[name]
                    hoisted += 1
            hoisted += hoist_outer_constants(body, {**(constants or {}), **body.initializers})
        node.implicit_inputs = list(dict.fromkeys(n for body in subgraphs for n in body.outer_refs()))
    if hoisted and constants:
        _drop_unread(graph, constants)
    return hoisted


def _drop_unread(graph: Graph, constants: dict) -> None:
    """Removes the constants that only subgraphs read from ``graph`` itself: its plan would
    otherwise set each of them up on every run for no reader."""
    read = {n for node in graph.nodes for n in node.inputs + node.implicit_inputs}
    read.update(v.name for v in graph.outputs)
    for name in [n for n in graph.initializers if n in constants and n not in read]:
        del graph.initializers[name]


def bind_control_flow(node: Node, opset: int, compile_graph: Compile):
    """The kernel for a control-flow node, its subgraphs compiled with ``compile_graph``."""
    if node.op_type == "If":
        return IfKernel(node, compile_graph)
    if node.op_type == "Loop":
        return LoopKernel(node, compile_graph)
    if node.op_type == "SequenceMap":
        return SequenceMapKernel(node, compile_graph)
    return ScanKernel(node, opset, compile_graph)


def _check_body_inputs(node: Node, body_inputs: list, expected: int, what: str) -> None:
    """A body takes one input per value the node hands it: refused when the node is bound."""
    if len(body_inputs) != expected:
        raise GraphError(f"{node.label}: its body takes {len(body_inputs)} input(s) {body_inputs}, but the "
                         f"node gives it {expected}: {what}")


class _ControlFlowKernel:
    provider = CPU

    def __init__(self, node: Node):
        self.node = node
        self._explicit = len(node.inputs)

    def outer_env(self, inputs: list, runner: SubgraphRunner) -> dict[str, Any]:
        """The outer-scope values ``runner``'s graph reads, from the implicit inputs."""
        implicit = dict(zip(self.node.implicit_inputs, inputs[self._explicit:]))
        return {name: implicit[name] for name in runner.outer_refs if name in implicit}


class IfKernel(_ControlFlowKernel):
    """Runs ``then_branch`` or ``else_branch`` on the value of the one-element condition."""

    def __init__(self, node: Node, compile_graph: Compile):
        super().__init__(node)
        self.then_branch = compile_graph(node.attrs["then_branch"])
        self.else_branch = compile_graph(node.attrs["else_branch"])

        # (outer name, index in the node's inputs) of what each branch reads, worked out once:
        # a model with an If at the top pays this on every run
        self._then = self.then_branch, self._outer_positions(self.then_branch)
        self._else = self.else_branch, self._outer_positions(self.else_branch)

    def _outer_positions(self, branch: SubgraphRunner) -> list[tuple[str, int]]:
        position = {name: self._explicit + i for i, name in enumerate(self.node.implicit_inputs)}
        return [(name, position[name]) for name in branch.outer_refs if name in position]

    def run(self, inputs: list) -> list:
        """Run the branch the condition picks; return its outputs."""
        cond = inputs[0]
        if type(cond) is not np.ndarray:
            cond = np.asarray(cond)
        if cond.size != 1:
            raise KernelError(f"{self.node.label}: the condition must hold one element, "
                              f"got shape {cond.shape}")
        branch, reads = self._then if cond.reshape(-1)[0] else self._else
        return branch.run({name: inputs[i] for name, i in reads})


class LoopKernel(_ControlFlowKernel):
    """ONNX Loop: a trip count and/or condition, loop-carried values, stacked scan outputs."""

    def __init__(self, node: Node, compile_graph: Compile):
        super().__init__(node)
        self.body = compile_graph(node.attrs["body"])
        self.body_inputs = [v.name for v in self.body.graph.inputs]
        self.carried = len(node.inputs) - 2
        _check_body_inputs(node, self.body_inputs, 2 + self.carried,
                           f"the iteration number, the condition and {self.carried} loop-carried value(s)")

    def run(self, inputs: list) -> list:
        """Iterate the body; return the final loop-carried values, then the scan outputs."""
        trip, cond, carried = inputs[0], inputs[1], list(inputs[2:self._explicit])
        limit = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
        keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        outer = self.outer_env(inputs, self.body)
        scans: list[list] | None = None
        iteration = 0
        plan_for = getattr(self.body, "plan_for", None)   # a body run through compiled plans
        while keep_going and (limit is None or iteration < limit):
            env = dict(outer)
            env[self.body_inputs[0]] = np.array(iteration, dtype=np.int64)
            env[self.body_inputs[1]] = np.array(keep_going)
            env.update(zip(self.body_inputs[2:], carried))
            key = self.body.key(env) if plan_for is not None else None
            plan = plan_for(env, key) if key is not None and all(isinstance(v, np.ndarray) for v in carried) else None
            if plan is not None:
                # the body has a plan for these values: the iterations run in C++ while the
                # carried values keep their dtypes and shapes
                iteration, keep_going, carried, collected, finished = plan.run_loop(
                    outer, self.body_inputs[:2], self.body_inputs[2:], carried, [], [], [], iteration, limit,
                    keep_going, RUN_OPTIONS.get())
                scans = collected if scans is None else [a + b for a, b in zip(scans, collected)]
                if finished:
                    break
                continue
            outputs = run_body(self.body, env, self.node, iteration, key)
            keep_going = bool(np.asarray(outputs[0]).reshape(-1)[0])
            carried = outputs[1:1 + self.carried]
            if scans is None:
                scans = [[] for _ in outputs[1 + self.carried:]]
            for collected, value in zip(scans, outputs[1 + self.carried:]):
                collected.append(value)
            iteration += 1
        first_scan = 1 + self.carried
        stacked = [_stack(values, self.body.graph, first_scan + k, self.node)
                   for k, values in enumerate(scans or [[]] * self._scan_count())]
        return carried + stacked

    def _scan_count(self) -> int:
        return len(self.body.graph.outputs) - 1 - self.carried


class ScanKernel(_ControlFlowKernel):
    """ONNX Scan: opset 9+ axes and directions per input and output; opset 8's batch axis."""

    def __init__(self, node: Node, opset: int, compile_graph: Compile):
        super().__init__(node)
        self.body = compile_graph(node.attrs["body"])
        self.opset = opset
        self.scan_count = int(node.attrs["num_scan_inputs"])
        self.body_inputs = [v.name for v in self.body.graph.inputs]
        given = len(node.inputs) - (0 if opset >= 9 else 1)   # opset 8's first input: sequence lengths
        if not 1 <= self.scan_count <= given:
            raise GraphError(f"{node.label}: num_scan_inputs = {self.scan_count}, but the node has {given} "
                             "state and scan input(s)")
        _check_body_inputs(node, self.body_inputs, given,
                           f"{given - self.scan_count} state value(s) and {self.scan_count} scan input(s)")

    def run(self, inputs: list) -> list:
        """Scan the body over the inputs; return the final states, then the scan outputs."""
        outer = self.outer_env(inputs, self.body)
        if self.opset >= 9:
            explicit = inputs[:self._explicit]
            states = explicit[:len(explicit) - self.scan_count]
            return self._scan(states, explicit[len(states):], outer, self.node.attrs)
        return self._scan_batched(inputs[:self._explicit], outer)

    def _scan(self, states: list, scanned: list, outer: dict, attrs: dict) -> list:
        in_axes = _normalized(attrs.get("scan_input_axes"), [np.ndim(x) for x in scanned])
        in_dirs = attrs.get("scan_input_directions") or attrs.get("directions") or []
        lengths = {x.shape[axis] for x, axis in zip(scanned, in_axes)}
        if len(lengths) != 1:
            raise KernelError(f"{self.node.label}: scan inputs have different lengths {lengths}")
        length = lengths.pop()
        per_step: list[list] = []
        plan_for = getattr(self.body, "plan_for", None)   # a body run through compiled plans
        reverse = [_reverse(in_dirs, j) for j in range(len(scanned))]
        moved = None   # the scanned inputs with their scan axis first, for the C++ loop
        step = 0
        while step < length:
            # np.asarray: a slice of a 1-D input is a numpy scalar, which kernels do not take
            slices = [np.asarray(np.take(x, length - 1 - step if back else step, axis=axis))
                      for x, axis, back in zip(scanned, in_axes, reverse)]
            env = dict(outer)
            env.update(zip(self.body_inputs, list(states) + slices))
            key = self.body.key(env) if plan_for is not None else None
            plan = plan_for(env, key) if key is not None and all(isinstance(v, np.ndarray) for v in states) else None
            if plan is not None:
                # the body has a plan for these values: the steps run in C++ while the states
                # keep their dtypes and shapes
                if moved is None:
                    moved = [np.ascontiguousarray(np.moveaxis(np.asarray(x), axis, 0))
                             for x, axis in zip(scanned, in_axes)]
                count = len(states)
                step, _, states, collected, finished = plan.run_loop(
                    outer, [], self.body_inputs[:count], states, self.body_inputs[count:], moved, reverse,
                    step, length, True, RUN_OPTIONS.get())
                per_step.extend(list(outputs) for outputs in zip(*collected))
                if finished:
                    break
                continue
            outputs = run_body(self.body, env, self.node, step, key)
            states = outputs[:len(states)]
            per_step.append(outputs[len(states):])
            step += 1
        return list(states) + self._scan_outputs(per_step, len(states), attrs)

    def _scan_outputs(self, per_step: list[list], first: int, attrs: dict) -> list:
        count = len(self.body.graph.outputs) - first
        out_dirs = attrs.get("scan_output_directions") or []
        results = []
        for k in range(count):
            values = [outputs[k] for outputs in per_step]
            if _reverse(out_dirs, k):
                values.reverse()
            stacked = _stack(values, self.body.graph, first + k, self.node)
            axis = _normalized(attrs.get("scan_output_axes"), [stacked.ndim] * count)[k]
            results.append(np.moveaxis(stacked, 0, axis))
        return results

    def _scan_batched(self, inputs: list, outer: dict) -> list:
        """Opset 8: input 0 is optional sequence lengths; every other input has a batch axis."""
        lengths, rest = inputs[0], inputs[1:]
        state_count = len(rest) - self.scan_count
        batch = rest[0].shape[0]
        per_batch = []
        for b in range(batch):
            scanned = [np.asarray(x[b]) for x in rest[state_count:]]
            if lengths is not None:
                scanned = [x[:int(lengths[b])] for x in scanned]
            per_batch.append(self._scan([np.asarray(s[b]) for s in rest[:state_count]], scanned, outer,
                                        self.node.attrs))
        return [_pad_stack([r[i] for r in per_batch]) for i in range(len(per_batch[0]))]


class SequenceMapKernel(_ControlFlowKernel):
    """ONNX SequenceMap: the body runs once per sequence element; outputs are sequences.

    Additional inputs that are sequences are indexed alongside; tensors are passed whole.
    """

    def __init__(self, node: Node, compile_graph: Compile):
        super().__init__(node)
        self.body = compile_graph(node.attrs["body"])
        self.body_inputs = [v.name for v in self.body.graph.inputs]

    def run(self, inputs: list) -> list:
        """Run the body per element; return one sequence per body output."""
        explicit = inputs[:self._explicit]
        outer = self.outer_env(inputs, self.body)
        results: list[list] = [[] for _ in self.body.graph.outputs]
        for index in range(len(explicit[0])):
            env = dict(outer)
            env.update((name, value[index] if isinstance(value, list) else value)
                       for name, value in zip(self.body_inputs, explicit))
            for collected, value in zip(results, run_body(self.body, env, self.node, index)):
                collected.append(value)
        return results


def _reverse(directions, index: int) -> bool:
    return index < len(directions) and directions[index] == 1


def _normalized(axes, ranks: list[int]) -> list[int]:
    axes = list(axes or [])
    return [(axes[i] if i < len(axes) else 0) % max(rank, 1) for i, rank in enumerate(ranks)]


def _stack(values: list, body: Graph, output_index: int, node: Node) -> np.ndarray:
    """Per-iteration values stacked on a new axis 0; zero iterations give a (0, ...) array.
    Arrays are stacked by np.array, in one pass: np.stack expands each one first (8.6 us for a
    32-step decoder's tokens where np.array takes 3.3); values of differing shapes fail either."""
    if values:
        arrays = [np.asarray(v) for v in values]
        try:
            if arrays[0].dtype.kind != "O":
                stacked = np.array(arrays)
                if stacked.shape == (len(arrays),) + arrays[0].shape:
                    return stacked
            return np.stack(arrays)
        except ValueError:
            changed = next((i for i, a in enumerate(arrays) if a.shape != arrays[0].shape), None)
            detail = (f"{list(arrays[0].shape)} at iteration 0, {list(arrays[changed].shape)} at iteration {changed}"
                      if changed is not None else f"values of dtype {arrays[0].dtype} that do not stack")
            raise KernelError(f"{node.label}: scan output {output_index} changes shape between "
                              f"iterations: {detail}") from None
    declared = body.outputs[output_index].tensor_type
    if declared is None:
        return np.empty((0,), dtype=np.float32)
    shape = declared.shape or ()
    dims = tuple(d if isinstance(d, int) else 0 for d in shape)
    return np.empty((0,) + dims, dtype=declared.dtype)


def _pad_stack(values: list[np.ndarray]) -> np.ndarray:
    """Stack per-batch results, zero-padding axis 0 where sequence lengths differ (opset 8)."""
    if all(np.shape(v) == np.shape(values[0]) for v in values):
        return np.stack(values)
    longest = max(v.shape[0] for v in values)
    padded = [np.concatenate([v, np.zeros((longest - v.shape[0],) + v.shape[1:], v.dtype)])
              for v in values]
    return np.stack(padded)
