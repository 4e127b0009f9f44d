"""Running a graph: bound kernels in topological order, each value freed after its last use."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from opforge.runtime.errors import GraphError, KernelError, KernelNotFoundError, RunCancelledError
from opforge.runtime.execute.control_flow import bind_control_flow, is_control_flow
from opforge.runtime.graph.graph import Graph, Node, topological_order
from opforge.runtime.graph.types import MAX_RANK
from opforge.runtime.providers.registry import BoundKernel, KernelRegistry

BindKernel = Callable[[Node], BoundKernel]

# How a missing kernel is supplied, from Python (the command line says it its own way).
CUSTOM_OPS_ADVICE = ("Supply one with InferenceSession(..., custom_ops=[...]): a C++ op library "
                     "(opforge.CustomOpBuilder / load_dir, or a path to its sources), a Python op "
                     "(@opforge.custom_op), or an opforge.OpMapping to existing ops")


class Dispatcher:
    """Chooses each node's kernel: the one place that decides what code runs a node.

    If, Loop and Scan run here (their bodies compiled with this same dispatcher); every other
    node gets the factory of the first provider, in ``providers`` order, that the registry has
    one for. A factory that raises KernelNotFoundError passes the node to the next provider.
    """

    def __init__(self, registry: KernelRegistry, providers: Sequence[str], opsets: dict[str, int],
                 types=None, subgraphs: "Dispatcher | None" = None):
        self.registry = registry
        self.providers = list(providers)
        self.opsets = opsets
        self.types = types   # InferredTypes: kernels may decline dtypes they do not implement
        self.subgraphs = subgraphs  # binds the nodes of If/Loop/Scan bodies (default: this one)
        self.plan_body: "Callable[[Executor], Any] | None" = None   # wraps a body in compiled plans

    def opset(self, node: Node) -> int:
        """The model's version of the node's domain (1 for a custom domain it does not import)."""
        return self.opsets.get(node.domain, 1)

    def bind(self, node: Node) -> BoundKernel:
        """A kernel bound to ``node``; raises KernelNotFoundError naming the node if none fits."""
        opset = self.opset(node)
        if self.types is not None and not node.input_types:
            node.input_types = [self.types.get(name) if name else None for name in node.inputs]
        if self.types is not None and not node.output_types:
            node.output_types = [self.types.get(name) if name else None for name in node.outputs]
        if self.types is not None and not node.input_kinds:
            node.input_kinds = [self.types.kind(name) if name else None for name in node.inputs]
        if is_control_flow(node):
            return bind_control_flow(node, opset, self.compile)
        reasons = []
        for provider in self.providers:
            factory = self.registry.resolve(node.domain, node.op_type, opset, [provider])
            if factory is None:
                continue
            try:
                return factory(node, opset)
            except KernelNotFoundError as exc:
                reasons.append(f"{provider}: {exc}")
        detail = "; ".join(reasons) or "none of them registers this op"
        raise KernelNotFoundError(
            f"no kernel for {node.label} at opset {opset} in providers {self.providers}: {detail}. "
            + CUSTOM_OPS_ADVICE)

    def compile(self, graph: Graph) -> "Executor":
        """An executor for ``graph`` (a subgraph), bound by ``subgraphs`` or this dispatcher.
        Bodies run on the host: their values come from the enclosing node's host inputs. With
        ``plan_body`` set (by the session), bodies run as compiled plans too, as the graph does."""
        executor = Executor(graph, (self.subgraphs or self).bind)
        return self.plan_body(executor) if self.plan_body is not None else executor


@dataclass
class Recording:
    """What a recorded run saw, for the memory planner: each value a node produced as
    (dtype, shape), or None for a value that is not an array; and, per step index of a native
    kernel, the workspace bytes it asked for, or None when the call went to the reference."""

    values: dict = field(default_factory=dict)
    workspace: dict = field(default_factory=dict)


@dataclass
class Step:
    """One node to run: its kernel, where its inputs come from, what to free after it."""

    node: Node
    kernel: BoundKernel
    inputs: list[str]
    outputs: list[str]
    frees: list[str]
    named_outputs: int = field(init=False)   # how many results the kernel must hand back

    def __post_init__(self):
        self.named_outputs = sum(1 for name in self.outputs if name)


class Executor:
    """Runs ``graph`` with a kernel bound to each node by ``bind``, in topological order."""

    def __init__(self, graph: Graph, bind: BindKernel):
        self.graph = graph
        self.output_names = [v.name for v in graph.outputs]
        self.outer_refs = graph.outer_refs()
        self.profile: list | None = None   # (step, start, seconds) per node run, when profiling
        nodes = topological_order(graph)
        self.steps = [Step(node, bind(node), node.inputs + node.implicit_inputs,
                           node.outputs, []) for node in nodes]
        self._plan_frees()

    def _plan_frees(self) -> None:
        """After each step, drop the values no later step reads and no output needs."""
        last_use: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            for name in step.inputs + step.outputs:
                if name:
                    last_use[name] = index
        keep = set(self.output_names)
        for name, index in last_use.items():
            if name not in keep:
                self.steps[index].frees.append(name)

    def run(self, env: dict[str, Any], run_options=None, record: Recording | None = None,
            observe: "dict | None" = None) -> list[Any]:
        """Run with ``env`` (graph inputs and outer-scope values by name); return the outputs.

        With ``record``, what the memory planner needs is noted there (see Recording). With
        ``observe`` ({value name: callable}), each callable gets its value right after the step
        that makes it (InferenceSession.run_observed).
        """
        values = dict(self.graph.initializers)
        values.update(env)
        values[""] = None
        for index, step in enumerate(self.steps):
            if run_options is not None and run_options.terminate:
                raise RunCancelledError(f"run cancelled (RunOptions.terminate) before "
                                        f"{step.node.label}")
            try:
                args = [values[name] for name in step.inputs]
            except KeyError as exc:
                raise GraphError(f"{step.node.label} reads {exc.args[0]!r}, which has no value "
                                 "at this point of the run") from None
            started = time.perf_counter() if self.profile is not None else 0.0
            if record is not None and hasattr(step.kernel, "run_traced"):
                results, record.workspace[index] = _run_kernel(step, args, step.kernel.run_traced)
            else:
                results = _run_kernel(step, args)
            if self.profile is not None:
                self.profile.append((step, started, time.perf_counter() - started))
            for name, value in zip(step.outputs, results):
                if name:
                    values[name] = value
                    if record is not None:
                        record.values[name] = (value.dtype, value.shape) if hasattr(value, "dtype") else None
                    if observe is not None and name in observe:
                        observe[name](value)
            for name in step.frees:
                values.pop(name, None)
        return [values[name] for name in self.output_names]

    def providers_by_node(self) -> list[tuple[Node, str]]:
        """Each node with the provider its kernel runs on, in execution order."""
        return [(step.node, step.kernel.provider) for step in self.steps]


def _run_kernel(step: Step, args: list[Any], call=None) -> Any:
    """``step``'s kernel on ``args`` (through ``call`` when given: a traced run returns
    (results, trace)), with failures raised as KernelError naming the node."""
    try:
        outcome = (call or step.kernel.run)(args)
    except (KernelError, RunCancelledError):
        raise
    except Exception as exc:
        shapes = ", ".join(_describe(v) for v in args)
        raise KernelError(f"{step.node.label} failed on {step.kernel.provider} with inputs "
                          f"({shapes}): {type(exc).__name__}: {exc}") from exc
    results = outcome[0] if call is not None else outcome
    if len(results) < step.named_outputs:
        raise KernelError(f"{step.node.label} returned {len(results)} values for "
                          f"{len(step.outputs)} outputs")
    for index, value in enumerate(results):   # on every Python step of every plan: kept lean
        if getattr(value, "ndim", 0) > MAX_RANK:
            name = step.outputs[index] if index < len(step.outputs) else f"#{index}"
            raise KernelError(f"{step.node.label} made output {name!r} of shape "
                              f"{list(value.shape)}; opforge takes tensors of at most {MAX_RANK} "
                              "dimensions")
    return outcome


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list):
        return f"sequence of {len(value)}"
    shape = getattr(value, "shape", None)
    kind = getattr(value, "dtype", type(value).__name__)
    return f"{kind}{list(shape)}" if shape is not None else str(kind)

