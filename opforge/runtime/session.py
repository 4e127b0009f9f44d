"""InferenceSession: onnxruntime's Python API over opforge's load -> graph -> passes -> execute."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from opforge import _core
from opforge.runtime.custom_ops import collect as custom_ops_of
from opforge.runtime import providers as _providers  # noqa: F401  (registers the reference kernels)
from opforge.runtime.errors import ConfigEntryError, FeedError
from opforge.runtime.execute.control_flow import RUN_OPTIONS, hoist_outer_constants
from opforge.runtime.execute.executor import Dispatcher, Executor
from opforge.runtime.execute.feeds import FeedChecker, as_output, on_device, to_host
from opforge.runtime.graph.graph import Graph, ValueInfo, build_graph, sort_graph, topological_order
from opforge.runtime.graph.shapes import InferredTypes, infer_types
from opforge.runtime.graph.validation import check_graph
from opforge.runtime.load.constants import constants_to_initializers
from opforge.runtime.load.functions import inline_local_functions
from opforge.runtime.load.graph_attribute_ops import expand_graph_attribute_ops
from opforge.runtime.load.mapping import apply_mappings
from opforge.runtime.load.model import ModelSource, load_model
from opforge.runtime.options import RunOptions, SessionOptions
from opforge.runtime.passes import PassContext, run_layout_passes, run_passes
from opforge.runtime.plan.compiled import PlannedExecutor
from opforge.runtime.plan.partition import KEEP_ON_DEVICE, partition, read_on_host
from opforge.runtime.providers import custom
from opforge.runtime.providers.cpu import library as native
from opforge.runtime.providers.cpu.python import ml_encoders, ml_labels, ml_maps, optional, sequence, strings  # noqa: F401  (registers the built-in Python kernels)
from opforge.runtime.providers.native import register_library
from opforge.runtime.providers.registry import CPU, CUDA, PROVIDERS, REFERENCE, KernelRegistry, default_registry
from opforge.runtime.session_extras import SessionExtras

logger = logging.getLogger("opforge.runtime")
DISABLE_SYNCHRONIZE = "disable_synchronize_execution_providers"   # onnxruntime's run config key


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: name, type string, shape list."""

    name: str
    type: str
    shape: list


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata, with onnxruntime's attribute names."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


class InferenceSession(SessionExtras):
    """Load a model once, then ``run`` it many times; a drop-in for onnxruntime's session.

    ``path_or_bytes``: a model path, its bytes, or an onnx.ModelProto. ``providers``: names (or
    ``(name, options)`` pairs) in priority order, default CPU; the reference provider is added
    last unless ``sess_options.disable_reference_fallback``. ``custom_ops``: op libraries whose
    kernels join this session's registry (stored; not yet wired). ``base_dir=`` (keyword) is
    where external data lives when the model is given as bytes. Raises ModelLoadError,
    GraphError or KernelNotFoundError, each naming the file or node at fault.
    """

    def __init__(self, path_or_bytes: ModelSource, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None,
                 provider_options: Sequence[dict] | None = None,
                 custom_ops: Sequence[Any] | None = None, **kwargs: Any):
        self._source, self._custom_ops_given, self._kwargs = path_or_bytes, custom_ops, kwargs
        self._sess_options = sess_options or SessionOptions()
        self._providers, self._provider_options, self._asked_providers = _provider_list(
            providers, provider_options, self._sess_options.disable_reference_fallback)
        self._custom = custom_ops_of(custom_ops)
        self._pool = _core.ThreadPool(self._sess_options.intra_op_num_threads or os.cpu_count() or 1)
        self.device = _cuda_device(self._providers, self._provider_options)
        # libraries built from sources may be reloaded: the session then binds their new build
        self._reloadable = [lib for lib in self._custom.libraries if getattr(lib, "builder", None) is not None]
        generations = [lib.generation for lib in self._reloadable]
        self._assemble(path_or_bytes, kwargs.get("base_dir"))
        self._profile_start_ns = 0
        if self._sess_options.enable_profiling:
            self._profile_start = time.perf_counter()
            self._profile_start_ns = time.time_ns()
        for library in self._reloadable:
            library.sessions.add(self)
        if [lib.generation for lib in self._reloadable] != generations:   # reloaded meanwhile
            self._install_reload(self._prepare_reload())
        self._report_fallback()

    def _assemble(self, source: ModelSource, base_dir) -> None:
        """Loads, checks, types, optimizes and binds the model with this session's kernels: at
        creation, and again on a reloaded library's new build (on a shadow session)."""
        self.registry = self._kernel_registry()
        graph = self._load(source, base_dir)
        check_graph(graph, self._opsets, self._custom.op_types() | self._ort_op_types())
        self.types: InferredTypes = infer_types(
            graph, self._opsets, custom.make_custom_infer(self.registry, self._providers, self._opsets))
        for warning in self.types.warnings:
            logger.warning("%s", warning)
        host = [p for p in self._providers if p != CUDA]
        self.host_dispatcher = Dispatcher(self.registry, host, self._opsets, self.types)
        self.dispatcher = (self.host_dispatcher if self.device is None else
                           Dispatcher(self.registry, self._providers, self._opsets, self.types,
                                      subgraphs=self.host_dispatcher))
        for dispatcher in {self.host_dispatcher, self.dispatcher}:
            dispatcher.plan_body = self._plan_body
        self._optimize(graph)
        inputs = {v.name for v in graph.inputs}
        hoist_outer_constants(graph, {n: a for n, a in graph.initializers.items() if n not in inputs})
        self._executor = Executor(graph, self._partition(graph).__getitem__)
        profiling = self._sess_options.enable_profiling
        if profiling:
            self._executor.profile = []
        # profiling times each step of the compiled plans (and of the recording runs)
        self._runner = PlannedExecutor(self._executor, self._pool, self._sess_options.enable_mem_pattern,
                                       self._sess_options.plan_cache_size, profile=profiling)

    def _prepare_reload(self, library=None, op_table=None) -> "InferenceSession":
        """A shadow of this session assembled with `op_table` as `library`'s ops (and the
        current ops of its other libraries): the model checked, typed and bound again. Raises
        what session creation raises (naming the node) when the graph cannot use them."""
        shadow = object.__new__(type(self))
        shadow.__dict__.update({name: self.__dict__[name] for name in _CONFIGURATION})
        shadow._custom = dataclasses.replace(self._custom, libraries=[
            _NewBuild(op_table) if lib is library else lib for lib in self._custom.libraries])
        shadow._assemble(self._pristine, None)
        return shadow

    def _install_reload(self, shadow: "InferenceSession") -> None:
        """Takes the kernels `shadow` bound. Runs started before keep the runner they took."""
        if shadow._executor.profile is not None:
            shadow._executor.profile = self._executor.profile
        for dispatcher in {shadow.host_dispatcher, shadow.dispatcher}:
            dispatcher.plan_body = self._plan_body   # the shadow goes; no cycle keeps old kernels alive
        for name in _ASSEMBLED:   # the runner last: a run that takes it finds the rest in place
            setattr(self, name, getattr(shadow, name))

    def _kernel_registry(self) -> KernelRegistry:
        """Layers over the default registry: built-in native CPU kernels, then custom ops (which
        override built-ins of the same domain and op type)."""
        builtin = KernelRegistry(parent=default_registry)
        if CPU in self._providers and native.kernel_sources():
            for depth, library in enumerate(native.kernel_layers()):
                builtin = KernelRegistry(parent=builtin) if depth else builtin
                register_library(builtin, library, CPU, self._pool)
        if self.device is not None:
            from opforge.runtime.providers import cuda

            cuda.register(builtin, self.device)
        session = KernelRegistry(parent=builtin)
        custom.register(session, self._custom, self._pool, self.device)
        if self._sess_options.custom_op_libraries:
            from opforge.interop import ort_library

            ort_library.register(session, self._sess_options.custom_op_libraries, self._pool)
        return session

    def _ort_op_types(self) -> set:
        """(domain, op type) of the ops of the onnxruntime custom-op libraries registered."""
        return {t for library in self._sess_options.custom_op_libraries for t in library.op_types()}

    def _plan_body(self, executor: Executor) -> PlannedExecutor:
        """An If/Loop/Scan body run through compiled plans, as the graph is: a signature gets
        its plan on its second run, so a loop whose shapes change every iteration makes none."""
        return PlannedExecutor(executor, self._pool, self._sess_options.enable_mem_pattern,
                               self._sess_options.plan_cache_size, record_after=1)

    def _partition(self, graph: Graph) -> dict:
        """Each node's kernel, chosen once, with copies inserted where values cross devices."""
        with self._on_device():
            kernels = partition(graph, {node: self.dispatcher.bind(node) for node in topological_order(graph)})
            self._read_on_host = read_on_host(graph, kernels)
            return kernels

    def _on_device(self):
        """The session's GPU, stream and memory pool made current (nothing without CUDA)."""
        return self.device.active() if self.device is not None else contextlib.nullcontext()

    def _load(self, source: ModelSource, base_dir) -> Graph:
        """Load, expand local functions (and ops whose graph attributes no kernel takes), apply op
        mappings, build the graph in topological order."""
        loaded = load_model(source, base_dir)
        if self._reloadable and not hasattr(self, "_pristine"):   # what a reload assembles from again
            self._pristine = onnx.ModelProto()
            self._pristine.CopyFrom(loaded.proto)
        self._model = expand_graph_attribute_ops(inline_local_functions(loaded.proto))
        self._opsets = loaded.opsets
        self.mapped_nodes = apply_mappings(self._model, self._custom.mappings, self._opsets)
        constants_to_initializers(self._model.graph)
        graph = build_graph(self._model.graph)
        sort_graph(graph)
        if self._model.ir_version < 4:
            # Before IR 4 every initializer had to be listed as an input too; such models mean
            # them as constants (onnxruntime reads them so), so they neither need feeding nor
            # block constant folding.
            graph.inputs = [v for v in graph.inputs if v.name not in graph.initializers]
        self._required = [v for v in graph.inputs if v.name not in graph.initializers]
        self._overridable = [v for v in graph.inputs if v.name in graph.initializers]
        self._outputs = list(graph.outputs)
        self._output_names = [v.name for v in graph.outputs]
        self._known_outputs = set(self._output_names)
        self._feeds = FeedChecker(self._required, self._overridable)
        return graph

    def _optimize(self, graph: Graph) -> None:
        """Run the passes of the session's optimization level; save the result if asked."""
        level = self._sess_options.graph_optimization_level
        context = PassContext(self.host_dispatcher.bind, self.types, on_device=self.device is not None)
        self.pass_stats = run_passes(graph, level, context)
        if self._sess_options.optimized_model_filepath:
            onnx.save(self._optimized_model(graph), self._sess_options.optimized_model_filepath)
        self.pass_stats.update(run_layout_passes(graph, level, context))

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Run the model on ``input_feed`` ({input name: value}); return the named outputs
        (all when ``output_names`` is None), in that order. Raises FeedError for a bad feed,
        KernelError naming the node that failed, RunCancelledError if ``terminate`` was set."""
        return _as_outputs(self._run(output_names, input_feed, run_options))

    def run_observed(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                     observe: Mapping[str, Any], run_options: RunOptions | None = None) -> list[Any]:
        """``run``, calling ``observe[name](value)`` right after the node that makes each named
        value, on the graph as the session runs it (fused and planned: nothing is changed to
        expose the values). The value handed over is valid during the call only (copy it to
        keep it); an edit made to it in place is what later nodes read, which is how tests plant
        a wrong number inside a fused kernel's output. ``observable_values()`` lists the names.
        Raises FeedError for a name the session does not compute."""
        known = set(self.observable_values())
        unknown = [name for name in observe if name not in known]
        if unknown:
            raise FeedError(f"values {unknown} are not computed by this session's graph (fused away, "
                            "or not in the model); observable_values() lists those that are")
        return _as_outputs(self._run(output_names, input_feed, run_options, observe=dict(observe)))

    def observable_values(self) -> list[str]:
        """The values the session's nodes compute, in execution order (after optimization)."""
        return [name for step in self._executor.steps for name in step.outputs if name]

    def _run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
             run_options: RunOptions | None = None, keep_on_device: bool = False,
             observe: "dict | None" = None) -> list[Any]:
        """``run``, with feeds that may be in device memory (cupy) and, with ``keep_on_device``,
        outputs left where the graph made them (io_binding's device outputs); ``observe``: see
        run_observed."""
        names = list(output_names) if output_names else self._output_names
        for name in names:
            if name not in self._known_outputs:
                raise FeedError(f"unknown output {name!r}; the model's outputs are "
                                f"{sorted(self._known_outputs)}")
        env, key = self._feeds.check(input_feed)
        runner = self._runner   # the kernels of this run, whatever a reload installs meanwhile
        if self.device is not None:
            outputs = self._run_on_device(runner, env, run_options, key, keep_on_device, observe)
        else:
            if key is None:
                env = self._feeds_in_place(env)
            if run_options is None and observe is None and RUN_OPTIONS.get() is None and not KEEP_ON_DEVICE.get():
                # a host session's plain run: nothing for the context to carry (a batch-1 model's
                # whole run is a few microseconds, and setting and resetting them costs ~0.5)
                outputs = runner.run(env, None, key)
            else:
                outputs = self._run_in_context(runner, env, run_options, key, keep_on_device, observe)
        if names is self._output_names and runner.executor.output_names == names:
            return list(outputs)
        values = dict(zip(runner.executor.output_names, outputs))
        return [values[name] for name in names]

    def _run_on_device(self, runner, env: dict, run_options, key, keep_on_device: bool, observe=None) -> list[Any]:
        """A run of a CUDA session: ordered after the work queued on the caller's stream, and
        complete when it returns unless the run options say not to wait (onnxruntime's
        "disable_synchronize_execution_providers": "1"; the caller's stream still waits)."""
        with self.device.run(synchronize=_synchronizes(run_options)):
            if key is None:
                env = self._feeds_in_place(env)
            return self._run_in_context(runner, env, run_options, key, keep_on_device, observe)

    def _run_in_context(self, runner, env: dict, run_options, key, keep_on_device: bool,
                        observe=None) -> list[Any]:
        """The run with its options visible to loops inside it, and the session's device current."""
        token = RUN_OPTIONS.set(run_options)   # loops inside the run watch it too
        kept = KEEP_ON_DEVICE.set(keep_on_device and self.device is not None)
        try:
            with self._on_device():
                return runner.run(env, run_options, key, observe)
        finally:
            KEEP_ON_DEVICE.reset(kept)
            RUN_OPTIONS.reset(token)

    def _feeds_in_place(self, env: dict) -> dict:
        """Feeds given in device memory stay there when only device kernels read them (the copy
        to the device then passes them through); the others are copied to the host."""
        for name, value in env.items():
            if on_device(value) and (self.device is None or name in self._read_on_host):
                env[name] = to_host(value) if self.device is None else self.device.download(value)
        return env

    def get_inputs(self) -> list[NodeArg]:
        """The inputs a caller must feed (initializers that are also inputs left out)."""
        return [_node_arg(v) for v in self._required]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Initializers that are also graph inputs, which a feed may replace."""
        return [_node_arg(v) for v in self._overridable]

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, as declared."""
        return [_node_arg(v) for v in self._outputs]

    def get_modelmeta(self) -> ModelMetadata:
        """The model's producer, names, descriptions, version and custom metadata."""
        model = self._model
        return ModelMetadata(model.producer_name, model.graph.name, model.domain, model.doc_string,
                             model.graph.doc_string, model.model_version,
                             {p.key: p.value for p in model.metadata_props})

    def get_providers(self) -> list[str]:
        """The providers this session uses, in priority order, as onnxruntime lists them: those
        asked for that are available (the CPU provider too when CUDA was asked for); the
        reference fallback shows only when it was asked for by name."""
        return list(self._asked_providers)

    def get_provider_options(self) -> dict[str, dict]:
        """The options given for each provider."""
        return dict(self._provider_options)

    def get_session_options(self) -> SessionOptions:
        """The options this session was created with."""
        return self._sess_options

    def memory_plan(self, input_feed: Mapping[str, Any]):
        """The compiled plan for this feed's input signature (after one run with it), or None.

        ``memory_plan(feed).dump()`` prints each value's size, arena offset, lifetime and kind.
        """
        return self._runner.plan_for(self._feeds.check(input_feed)[0])

    def end_profiling(self) -> str:
        """Writes the profile of the runs so far as chrome-trace JSON; returns the file name.

        Node events are laid out as onnxruntime's ('<node>_kernel_time', args op_name and provider),
        so tools that read its profiles read these; args.op_type repeats op_name."""
        if self._executor.profile is None:
            return ""
        events = [{"name": f"{step.node.name or step.node.outputs[0]}_kernel_time", "cat": "Node", "ph": "X",
                   "ts": (start - self._profile_start) * 1e6, "dur": seconds * 1e6, "pid": os.getpid(),
                   "tid": 0, "args": {"op_name": step.node.op_type, "op_type": step.node.op_type,
                                      "provider": step.kernel.provider}}
                  for step, start, seconds in sorted(self._executor.profile + self._runner.take_profile(),
                                                     key=lambda event: event[1])]
        path = f"{self._sess_options.profile_file_prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        with open(path, "w") as f:
            json.dump(events, f)
        self._executor.profile = []
        return path

    def describe(self) -> str:
        """A report for people: inputs, outputs, opsets, op histogram, each node's kernel."""
        from collections import Counter

        lines = ["inputs:"] + [f"  {a.name}: {a.type} {a.shape}" for a in self.get_inputs()]
        lines += ["outputs:"] + [f"  {a.name}: {a.type} {a.shape}" for a in self.get_outputs()]
        lines.append("opsets: " + ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(self._opsets.items())))
        nodes = self.node_providers()
        histogram = Counter(op for _, op, _ in nodes)
        lines.append(f"ops ({len(nodes)} nodes after optimization):")
        lines += [f"  {op:<28}{n:>6}" for op, n in histogram.most_common()]
        by_provider = Counter(p for _, _, p in nodes)
        lines.append("kernels: " + ", ".join(f"{n} on {p}" for p, n in by_provider.most_common()))
        for node, provider in self._executor.providers_by_node():
            name = node.name or f"-> {node.outputs[0] if node.outputs else '?'}"
            lines.append(f"  {name[:40]:<42}{node.op_type:<24}{provider}")
        return "\n".join(lines)

    def node_providers(self) -> list[tuple[str, str, str]]:
        """``(node name, op type, provider)`` for every node the session runs, in order."""
        return [(node.name, node.op_type, provider)
                for node, provider in self._executor.providers_by_node()]

    def _report_fallback(self) -> None:
        fallback = [n.label for n, p in self._executor.providers_by_node() if p == REFERENCE]
        if fallback:
            logger.info("%d of %d nodes run on %s: %s", len(fallback),
                        len(self._executor.steps), REFERENCE, ", ".join(fallback))

    def _optimized_model(self, graph: Graph) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(self._model)
        model.graph.CopyFrom(graph.to_proto())
        imported = {o.domain for o in model.opset_import}
        for domain in sorted({n.domain for n in graph.nodes} - imported - {"ai.onnx"}):
            model.opset_import.append(onnx.helper.make_opsetid(domain, 1))  # added by a fusion
        return model


# What a shadow session needs of the session it stands for (see _prepare_reload), and what
# _assemble makes, which a reload installs.
_CONFIGURATION = ("_source", "_custom_ops_given", "_kwargs", "_sess_options", "_providers", "_provider_options",
                  "_asked_providers", "_pool", "device", "_reloadable", "_pristine")
_ASSEMBLED = ("registry", "_model", "_opsets", "mapped_nodes", "_required", "_overridable", "_outputs",
              "_output_names", "_known_outputs", "_feeds", "types", "host_dispatcher", "dispatcher",
              "pass_stats", "_read_on_host", "_executor", "_runner")


@dataclasses.dataclass
class _NewBuild:
    """A library's new build, as a shadow session registers it."""

    op_table: list


def _as_outputs(outputs: list) -> list:
    """Run results as onnxruntime hands them out: host arrays, strings as objects."""
    for index, value in enumerate(outputs):
        if type(value) is not np.ndarray or value.dtype.kind in "US":
            outputs[index] = as_output(to_host(value) if on_device(value) else value)
    return outputs


def _synchronizes(run_options: RunOptions | None) -> bool:
    """Whether a run waits for its GPU work before returning: unless its options set
    onnxruntime's "disable_synchronize_execution_providers" to "1"."""
    try:
        return run_options is None or run_options.get_run_config_entry(DISABLE_SYNCHRONIZE) != "1"
    except ConfigEntryError:
        return True


def _provider_list(providers, provider_options, no_reference: bool):
    """(providers the session runs, in priority order; their options; the providers it shows as
    asked for). As onnxruntime does, an unknown provider name is warned about and left out, CUDA
    without a usable GPU falls back to the CPU, and CUDA alone gets the CPU after it."""
    names, options, cpu_after_cuda = [], {}, False
    given = [e[0] if isinstance(e, (tuple, list)) else e for e in providers or [CPU]]
    for index, entry in enumerate(providers or [CPU]):
        name, opts = (entry[0], dict(entry[1])) if isinstance(entry, (tuple, list)) else (entry, {})
        if provider_options and index < len(provider_options):
            opts.update(provider_options[index])
        if name not in PROVIDERS:
            warnings.warn(f"Specified provider {name!r} is not in available provider names. "
                          f"Available providers: {', '.join(PROVIDERS)}", UserWarning, stacklevel=4)
            continue
        if name == CUDA and CPU not in given:
            cpu_after_cuda = True   # as in onnxruntime, nodes without a CUDA kernel run on the CPU
        if name == CUDA and not _cuda_usable():
            continue
        if name not in names:
            names.append(name)
            options[name] = opts
    if cpu_after_cuda or not names:
        names.insert(names.index(CUDA) + 1 if CUDA in names else len(names), CPU)
        options[CPU] = {}
    asked = list(names)
    if no_reference:
        names = [n for n in names if n != REFERENCE]
    elif REFERENCE not in names:
        names.append(REFERENCE)
        options[REFERENCE] = {}
    return names, options, asked


def _cuda_usable() -> bool:
    """Whether CUDA can run here; if not, warn (as onnxruntime does) and say why."""
    from opforge.runtime.providers.cuda import unavailable_reason

    why = unavailable_reason()
    if why:
        warnings.warn(f"{CUDA} is not available ({why}); this session runs on "
                      f"{CPU}", RuntimeWarning, stacklevel=4)
    return not why


def _cuda_device(providers: list, options: dict):
    """The session's GPU when CUDA is among its providers, else None."""
    if CUDA not in providers:
        return None
    from opforge.runtime.providers.cuda.device import CudaDevice

    return CudaDevice(options.get(CUDA, {}))


def _node_arg(value: ValueInfo) -> NodeArg:
    tensor = value.tensor_type
    shape = list(tensor.shape) if tensor is not None and tensor.shape is not None else []
    return NodeArg(value.name, value.type_string, shape)
