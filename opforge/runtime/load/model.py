"""Loading an ONNX model from a path, bytes or a ModelProto, with checked external data."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple, Union

import onnx
from google.protobuf.message import DecodeError

from opforge.runtime.errors import ModelLoadError

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto]

logger = logging.getLogger("opforge.runtime")


class LoadedModel(NamedTuple):
    """A parsed model, its opset map ``{domain: version}`` ("ai.onnx" read as "") and its folder."""

    proto: onnx.ModelProto
    opsets: dict[str, int]
    base_dir: Path | None


def load_model(source: ModelSource, base_dir: str | os.PathLike | None = None) -> LoadedModel:
    """Parse ``source`` (a path, serialized bytes or a ModelProto) and check it.

    External data is read from ``base_dir`` (the model file's folder for a path) and may not
    point outside it. A ModelProto that is passed in is copied, never modified.
    Raises ModelLoadError naming the file and what is wrong with it.
    """
    proto, origin, folder = _parse(source)
    if base_dir is not None:
        folder = Path(base_dir)
    opsets = check_model(proto, origin)
    if not any(entry.domain in ("", "ai.onnx") for entry in proto.opset_import):
        proto.opset_import.add(domain="", version=opsets[""])   # what shape inference reads too
    load_external_data(proto, folder, origin)
    return LoadedModel(proto, opsets, folder)


def _parse(source: ModelSource) -> tuple[onnx.ModelProto, str, Path | None]:
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
        return proto, "the ModelProto given", None
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _decode(bytes(source), "the model bytes given"), "the model bytes given", None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelLoadError(f"cannot read model file '{path}': {exc.strerror or exc}") from exc
        return _decode(data, f"model file '{path}'"), f"model file '{path}'", path.parent
    raise ModelLoadError(
        f"a model must be a path, bytes or an onnx.ModelProto, not {type(source).__name__}")


def _decode(data: bytes, origin: str) -> onnx.ModelProto:
    if not data:
        raise ModelLoadError(f"{origin} is empty")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelLoadError(
            f"{origin} is not a valid ONNX model: the protobuf is truncated or corrupt "
            f"({len(data)} bytes; {exc})") from exc
    return proto


def check_model(proto: onnx.ModelProto, origin: str) -> dict[str, int]:
    """Check the IR version, graph and opset imports; return the opset map."""
    if proto.ir_version <= 0:
        raise ModelLoadError(f"{origin} has no ir_version: it is not an ONNX model, "
                             "or it is truncated")
    if proto.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(f"{origin} has IR version {proto.ir_version}; this runtime reads "
                             f"up to {onnx.IR_VERSION}")
    if not proto.HasField("graph") or not proto.graph.output:
        raise ModelLoadError(f"{origin} has no graph outputs: it is empty or truncated")
    return opset_map(proto.opset_import, origin)


def opset_map(imports, origin: str) -> dict[str, int]:
    """``{domain: version}`` from OperatorSetIdProtos, with "ai.onnx" read as "".

    A model that does not import the default domain gets the newest opset this runtime knows,
    as onnxruntime does (not opset 1)."""
    if not imports:
        raise ModelLoadError(f"{origin} imports no operator set (opset_import is empty)")
    newest = onnx.defs.onnx_opset_version()
    opsets: dict[str, int] = {}
    for entry in imports:
        domain = "" if entry.domain == "ai.onnx" else entry.domain
        if domain in opsets and opsets[domain] != entry.version:
            raise ModelLoadError(f"{origin} imports domain {domain or 'ai.onnx'!r} twice, "
                                 f"as versions {opsets[domain]} and {entry.version}")
        if domain == "" and not 1 <= entry.version <= newest:
            raise ModelLoadError(f"{origin} imports ai.onnx opset {entry.version}; "
                                 f"this runtime supports 1 to {newest}")
        opsets[domain] = entry.version
    if "" not in opsets:
        logger.warning("%s does not import the ai.onnx domain; its standard ops are read at the "
                       "newest opset, %d", origin, newest)
        opsets[""] = newest
    return opsets


def _all_tensors(graph: onnx.GraphProto):
    """Every TensorProto held by ``graph``: initializers, tensor attributes, subgraphs' too."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    yield from _node_tensors(graph.node)


def _node_tensors(nodes):
    """Every TensorProto in the attributes of ``nodes`` and of the subgraphs they hold."""
    for node in nodes:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def model_tensors(proto: onnx.ModelProto):
    """Every TensorProto of the model: its graph's, and those inside its local functions."""
    yield from _all_tensors(proto.graph)
    for function in proto.functions:
        yield from _node_tensors(function.node)


def load_external_data(proto: onnx.ModelProto, folder: Path | None, origin: str) -> None:
    """Read every externally stored tensor into ``raw_data``; paths may not leave ``folder``.

    Every tensor goes through the same check, wherever it sits: graph, subgraph or function."""
    for tensor in model_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            _load_tensor_data(tensor, folder, origin)


def _load_tensor_data(tensor: onnx.TensorProto, folder: Path | None, origin: str) -> None:
    info = {entry.key: entry.value for entry in tensor.external_data}
    where = f"tensor {tensor.name!r} in {origin}"
    location = info.get("location", "")
    if folder is None:
        raise ModelLoadError(f"{where} keeps its data in external file {location!r}, but the "
                             "model was not loaded from a path: pass base_dir")
    path = external_path(location, folder, where)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError as exc:
        raise ModelLoadError(f"{where} has a malformed external data offset/length: {exc}") from exc
    size = path.stat().st_size
    end = size if length is None else offset + length
    if offset < 0 or end > size:
        raise ModelLoadError(f"{where} reads bytes {offset}..{end} of '{path}', "
                             f"which holds only {size} bytes (truncated external data?)")
    with open(path, "rb") as handle:
        handle.seek(offset)
        tensor.raw_data = handle.read(end - offset)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT


def external_path(location: str, folder: Path, where: str) -> Path:
    """Resolve an external data ``location`` inside ``folder``; reject any path that escapes it."""
    if not location:
        raise ModelLoadError(f"{where} is marked external but names no location")
    relative = Path(location)
    if relative.is_absolute() or relative.drive or ".." in relative.parts or "\\" in location:
        raise ModelLoadError(f"{where} names external data file {location!r}, which is not a "
                             "plain relative path inside the model's folder; refusing to read it")
    root = folder.resolve()
    path = (root / relative).resolve()
    if root != path and root not in path.parents:
        raise ModelLoadError(f"{where} names external data file {location!r}, which resolves "
                             f"to '{path}', outside the model's folder '{root}'")
    if not path.is_file():
        raise ModelLoadError(f"{where} names external data file '{path}', which does not exist")
    return path
