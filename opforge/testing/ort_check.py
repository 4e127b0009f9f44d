"""check_op's cases run again in onnxruntime through the op's onnxruntime library (a one-node
model per case, a session per signature: dtypes, ranks, attributes), compared with opforge's."""
from __future__ import annotations

import os

import numpy as np

from opforge.testing.compare import mismatch, tolerance

# dtypes onnxruntime's Python API feeds and returns as numpy arrays (bfloat16, the float8 and
# 4-bit types have no numpy type there; custom ops get no complex tensors)
ORT_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64"}
# attribute kinds onnxruntime hands to custom ops (see opforge/interop/ort_adapter/attributes.cpp)
ORT_ATTRIBUTES = {"float", "int", "str", "floats", "ints", "strs", "tensor"}
AI_ONNX_OPSET, IR_VERSION = 17, 8   # what the one-node models import: read by onnxruntime >= 1.17


class OrtUnavailable(Exception):
    """onnxruntime cannot run the op: the reason, a note in the report; `kind` the error it
    becomes when the comparison was required."""

    def __init__(self, reason: str, kind: type = ValueError):
        super().__init__(reason)
        self.kind = kind


class OrtRunner:
    """One op in onnxruntime, with its onnxruntime custom-op library registered."""

    def __init__(self, library_path: str, schema: dict, opset: int):
        import onnxruntime

        self.ort, self.path, self.schema, self.opset = onnxruntime, library_path, schema, opset
        self.kinds = {a["name"]: a["type"] for a in schema["attributes"]}
        self.sessions: dict = {}

    def cannot_run(self, case) -> "str | None":
        """Why onnxruntime cannot express `case` (a dtype or attribute kind it lacks), or None."""
        lacking = sorted({d for d in case.dtypes if d is not None and d not in ORT_DTYPES})
        if lacking:
            return f"dtype {', '.join(lacking)}"
        kinds = sorted({self.kinds.get(name, "?") for name in case.attrs} - ORT_ATTRIBUTES)
        return f"attributes of kind {', '.join(kinds)}" if kinds else None

    def run(self, case, inputs: list, declared: list) -> list:
        """The op's outputs in onnxruntime for `case` (non-contiguous inputs copied); None for
        an output infer left out. Raises onnxruntime's own exceptions."""
        present = [k for k, a in enumerate(inputs) if a is not None]
        ranks = tuple(None if a is None else a.ndim for a in inputs)
        outputs = tuple(None if d is None else d[0] for d in declared)
        attributes = [_attribute(name, self.kinds[name], value) for name, value in case.attrs.items()]
        key = (tuple(case.dtypes), ranks, outputs, tuple(a.SerializeToString() for a in attributes))
        session = self.sessions.get(key)
        if session is None:
            session = self.sessions[key] = self._session(case.dtypes, ranks, outputs, attributes)
        feeds = {f"input{k}": np.array(inputs[k], order="C") for k in present}   # numpy scalars too
        results = iter(session.run(None, feeds))
        return [None if d is None else next(results) for d in declared]

    def _session(self, dtypes: list, ranks: tuple, outputs: tuple, attributes: list):
        options = self.ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        options.register_custom_ops_library(self.path)
        model = self._model(dtypes, ranks, outputs, attributes).SerializeToString()
        return self.ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def _model(self, dtypes: list, ranks: tuple, outputs: tuple, attributes: list):
        """One node of the op: each input of its dtype and rank (named dimensions, so a session
        serves every shape of that rank), each output of the dtype infer declared."""
        from onnx import helper

        names = [f"input{k}" if r is not None else "" for k, r in enumerate(ranks)]
        values = [helper.make_tensor_value_info(f"input{k}", helper.np_dtype_to_tensor_dtype(np.dtype(d)),
                                                [f"d{k}_{a}" for a in range(r)])
                  for k, (d, r) in enumerate(zip(dtypes, ranks)) if r is not None]
        results = [helper.make_tensor_value_info(f"output{k}", code, None)
                   for k, code in enumerate(outputs) if code is not None]
        node = helper.make_node(self.schema["name"], names,
                                [f"output{k}" if c is not None else "" for k, c in enumerate(outputs)],
                                domain=self.schema["domain"])
        node.attribute.extend(attributes)
        graph = helper.make_graph([node], "check_op", values, results)
        imports = [helper.make_opsetid("", AI_ONNX_OPSET), helper.make_opsetid(self.schema["domain"], self.opset)]
        model = helper.make_model(graph, opset_imports=imports)
        model.ir_version = IR_VERSION
        return model


def _attribute(name: str, kind: str, value):
    """The node attribute of a value given as check_op's attrs give it (a number where the op
    declares a float takes the float kind; a list may be empty; a tensor may be a numpy array)."""
    from onnx import AttributeProto, helper, numpy_helper

    if kind == "tensor":
        tensor = value if hasattr(value, "raw_data") else numpy_helper.from_array(np.asarray(value))
        return helper.make_attribute(name, tensor)
    lists = {"floats": (float, AttributeProto.FLOATS), "ints": (int, AttributeProto.INTS),
             "strs": (str, AttributeProto.STRINGS)}
    if kind in lists:
        convert, kind_code = lists[kind]
        return helper.make_attribute(name, [convert(v) for v in value], attr_type=kind_code)
    return helper.make_attribute(name, {"float": float, "int": int, "str": str}[kind](value))


def ort_runner(op, schema: dict, setting) -> OrtRunner:
    """The runner check_op compares with: `setting` is True (required) or None (where it can),
    or the path of a built onnxruntime library of the op. Raises OrtUnavailable naming why not."""
    if schema["backend"] != "CPU":
        raise OrtUnavailable(f"a {schema['backend']} op is not run in onnxruntime here")
    if not schema["domain"]:
        raise OrtUnavailable("an op of the ai.onnx domain runs as onnxruntime's own kernel there")
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise OrtUnavailable(f"the onnxruntime package is not installed ({exc})", ImportError) from None
    if isinstance(setting, (str, os.PathLike)):
        path = os.fspath(setting)
    else:
        library = getattr(op, "library", None)
        if library is None or getattr(library, "build_spec", None) is None:
            raise OrtUnavailable("the op's library was not built from sources here (give onnxruntime= the path "
                                 "of its onnxruntime library)")
        from opforge.errors import BuildError
        from opforge.interop.ort_build import sources_changed

        if sources_changed(library):
            raise OrtUnavailable(f"the sources of library '{library.__name__}' changed since it was loaded (its "
                                 "onnxruntime library would run other code): reload() it first")
        try:
            path = library.onnxruntime_library()
        except BuildError as exc:
            raise OrtUnavailable(f"its onnxruntime library did not build: {str(exc).splitlines()[0]}") from exc
    return OrtRunner(path, schema, _opset(op, schema))


def _opset(op, schema: dict) -> int:
    """The domain's opset the model imports: the op object's (OpLibrary.op(version=)), else the
    newest one its handle covers, so attributes and dtypes added after its since-version exist."""
    if getattr(op, "opset", 0):
        return op.opset
    if schema.get("until_version"):
        return schema["until_version"]
    since = [schema["since_version"]] + [a.get("since_version", 0) for a in schema["attributes"]]
    since += [v for p in schema["inputs"] for v in p.get("dtype_since", {}).values()]
    return max(since)


def check_onnxruntime(runner: OrtRunner, case, names: list, inputs: list, declared: list, outs: list,
                      written: list, report, atol, rtol) -> None:
    """onnxruntime's results for `case` against opforge's `outs` (GuardedOutputs; the elements
    in `written`, never written by compute, left out): dtypes and shapes equal, values within
    the dtype's tolerance (integers and booleans exactly). A case onnxruntime cannot express is
    counted in report.ort_skipped."""
    why = runner.cannot_run(case)
    if why is not None:
        report.ort_skipped.append((case, why))
        return
    report.note_case("onnxruntime", case)
    try:
        results = runner.run(case, inputs, declared)
    except Exception as exc:   # onnxruntime's own error types (Fail, InvalidArgument...)
        first = (str(exc).strip().splitlines() or [""])[0]
        report.fail("onnxruntime", case, f"onnxruntime raised where opforge computed: {type(exc).__name__}: {first}")
        return
    for name, out, got, skip in zip(names, outs, results, written):
        if out is None or got is None:
            continue
        ours = out.array
        if got.dtype != ours.dtype or got.shape != ours.shape:
            report.fail("onnxruntime", case, f"output '{name}' is {got.dtype}{list(got.shape)} in onnxruntime, "
                        f"{ours.dtype}{list(ours.shape)} in opforge")
            return
        got = got.copy()
        got.reshape(-1)[skip] = ours.reshape(-1)[skip]
        bad = mismatch(got, ours, *tolerance(ours.dtype, atol, rtol))
        if bad is not None:
            report.fail("onnxruntime", case, f"onnxruntime's results differ from opforge's (got: onnxruntime's, "
                        f"expected: opforge's): {bad.describe(name)}")
            return
