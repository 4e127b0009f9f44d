"""The rest of onnxruntime's session API (OrtValues, I/O binding, providers, profiling start)
and a session's face in a notebook.

A mixin of InferenceSession, kept apart so session.py stays the pipeline it describes.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from opforge import tables
from opforge.runtime.execute.feeds import as_output, on_device
from opforge.runtime.execute.ortvalue import IOBinding, OrtValue


class SessionExtras:
    """onnxruntime's InferenceSession methods beyond run/get_inputs/get_outputs."""

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: Mapping[str, OrtValue], run_options=None) -> list:
        """``run`` with OrtValues in and out; outputs stay where the session made them (on the
        GPU for a CUDA session's device outputs), as onnxruntime's do."""
        feed = {name: value.value() if isinstance(value, OrtValue) else value
                for name, value in input_dict_ort_values.items()}
        device_id = getattr(self.device, "id", 0)
        return [OrtValue(v, "cuda", device_id) if on_device(v) else OrtValue(as_output(v))
                for v in self._run(output_names, feed, run_options, keep_on_device=True)]

    def io_binding(self) -> IOBinding:
        """A new binding of inputs and outputs for ``run_with_iobinding``."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options=None) -> None:
        """Runs with the binding's inputs; its outputs are then in ``iobinding.get_outputs()``."""
        iobinding._run(run_options)

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (time.time_ns()), 0 when the session does not profile."""
        return self._profile_start_ns

    def set_providers(self, providers: Sequence[Any] | None = None,
                      provider_options: Sequence[dict] | None = None) -> None:
        """Rebuilds the session for ``providers`` (the model, options and custom ops kept)."""
        self.__init__(self._source, self._sess_options, providers, provider_options,
                      custom_ops=self._custom_ops_given, **self._kwargs)

    def _summary(self) -> "tuple[list, list]":
        """(headers, rows) of a session's inputs, outputs and providers, for its reprs."""
        from collections import Counter

        rows = [["input", a.name, a.type, a.shape] for a in self.get_inputs()]
        rows += [["output", a.name, a.type, a.shape] for a in self.get_outputs()]
        nodes = Counter(provider for _, _, provider in self.node_providers())
        rows += [["provider", p, f"{nodes.get(p, 0)} nodes", ""] for p in self._providers
                 if p in self.get_providers() or nodes.get(p)]
        return ["", "name", "type", "shape"], rows

    def __repr__(self) -> str:
        return tables.text_table(*self._summary(), title="opforge InferenceSession")

    def _repr_html_(self) -> str:
        return tables.html_table(*self._summary(), title="opforge InferenceSession")
