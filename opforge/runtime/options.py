"""Session and run options, named and valued as onnxruntime names them."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from opforge.runtime.errors import ConfigEntryError


class GraphOptimizationLevel(enum.IntEnum):
    """How much the graph is rewritten before it runs (values as in onnxruntime)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Whether independent nodes may run at the same time (values as in onnxruntime)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class _ConfigEntries:
    """onnxruntime's free-form "key": "value" configuration entries of an options object."""

    def _entries(self) -> dict:
        if "_config_entries" not in self.__dict__:
            self.__dict__["_config_entries"] = {}
        return self.__dict__["_config_entries"]

    def _add_entry(self, key: str, value: str) -> None:
        self._entries()[str(key)] = str(value)

    def _get_entry(self, key: str, kind: str) -> str:
        try:
            return self._entries()[key]
        except KeyError:
            raise ConfigEntryError(f"{kind} does not have configuration with key: {key}") from None


@dataclass
class SessionOptions(_ConfigEntries):
    """Options fixed when a session is created.

    ``optimized_model_filepath``: where to save the graph after its passes ("" for nowhere).
    ``disable_reference_fallback``: never run a node through onnx.reference; a node with no
    native kernel is then an error when the session is created.
    ``enable_mem_pattern``: after the first run of an input signature, run it through a
    compiled plan with a planned arena (as onnxruntime's memory pattern).
    """

    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
    enable_profiling: bool = False
    profile_file_prefix: str = "opforge_profile"
    optimized_model_filepath: str = ""
    log_severity_level: int = 2
    disable_reference_fallback: bool = False
    enable_mem_pattern: bool = True
    """Compile a plan per input-shape signature: one arena, native kernels in a C++ loop."""
    plan_cache_size: int = 32
    """Compiled plans kept per session, the least recently used dropped first (each holds an
    arena per concurrent run; a model fed many shapes would otherwise grow without bound)."""

    def register_custom_ops_library(self, library_path: str) -> None:
        """Loads an onnxruntime custom-op library (one that exports RegisterCustomOps, as
        onnxruntime's function of this name takes) for the sessions made with these options:
        its ops run on opforge's host for them (opforge.interop.ort_library). Raises
        FileNotFoundError, or ImportError naming what failed."""
        from opforge.interop.ort_library import load_ort_library

        self.custom_op_libraries.append(load_ort_library(library_path))

    @property
    def custom_op_libraries(self) -> list:
        """The onnxruntime custom-op libraries registered with these options."""
        return self.__dict__.setdefault("_custom_op_libraries", [])

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Sets a session configuration entry (onnxruntime's free-form "key": "value" options;
        opforge keeps them for the caller and reads none yet)."""
        self._add_entry(key, value)

    def get_session_config_entry(self, key: str) -> str:
        """A session configuration entry; ConfigEntryError (a RuntimeError) when it was never set."""
        return self._get_entry(key, "SessionOptions")


@dataclass
class RunOptions(_ConfigEntries):
    """Options for one ``run``; setting ``terminate`` (from another thread) stops the run
    before its next node with RunCancelledError."""

    terminate: bool = False
    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    only_execute_path_to_fetches: bool = False

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Sets a run configuration entry (onnxruntime's free-form "key": "value" options)."""
        self._add_entry(key, value)

    def get_run_config_entry(self, key: str) -> str:
        """A run configuration entry; ConfigEntryError (a RuntimeError) when it was never set."""
        return self._get_entry(key, "RunOptions")
