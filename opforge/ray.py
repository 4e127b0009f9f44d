"""Batch inference on Ray Data with custom ops built once, on the driver, and shipped to workers.

    import opforge.ray
    out = opforge.ray.predict(dataset, "model.onnx", custom_ops=["ops/"], batch_size=64)

`predict` builds every custom op library on the driver, puts the model and the built libraries
(with their manifests: cache key, sha256, compiler, platform) in Ray's object store once, and maps
the dataset's batches through `Predictor` actors, each holding one session. A worker installs the
shipped libraries into its own opforge cache with the same integrity checks as a local build and
loads them, so it needs no compiler and builds nothing; a worker whose platform differs from the
driver's rebuilds from the shipped sources (or says why it cannot). Ray is imported only here
(`pip install opforge[ray]`).
"""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from opforge.errors import OpforgeError


class ShippedLibrary(NamedTuple):
    """A built op library as it travels to workers."""

    name: str
    manifest: dict          # the cache entry's manifest: key, artifact name, size, sha256, ...
    artifact: bytes
    platform: str           # what must match for the binary to load (see platform_tag)
    sources: tuple          # ((file name, text), ...) to rebuild from where the platform differs


def platform_tag() -> str:
    """What a built library's loadability depends on: OS, machine, C library, Python ABI."""
    libc = "-".join(platform.libc_ver())
    return f"{sys.platform}-{platform.machine()}-{libc}-{sys.implementation.cache_tag}"


def ship(library) -> ShippedLibrary:
    """A loaded op library (from CustomOpBuilder, load_inline or load_dir) packed for workers."""
    artifact = Path(library.__file__)
    manifest_path = artifact.parent / "manifest.json"
    if not manifest_path.is_file():
        raise OpforgeError(f"op library '{library.__name__}' ({artifact}) is not a cache entry of "
                           "opforge's builder; pass its sources instead so workers can get it")
    manifest = json.loads(manifest_path.read_text())
    files = manifest.get("sources", []) + manifest.get("headers", [])   # headers it read, too
    sources = tuple((Path(f).name, Path(f).read_text()) for f in files if Path(f).is_file())
    return ShippedLibrary(library.__name__, manifest, artifact.read_bytes(), platform_tag(), sources)


def install(shipped: ShippedLibrary):
    """The shipped library, installed in this process's opforge cache (once) and loaded.

    The bytes are checked against the manifest's size and sha256 before anything is written,
    published with one atomic rename as a local build is, and loaded through the same loader.
    Where this platform differs from the driver's, the library is rebuilt from its sources.
    """
    if shipped.platform != platform_tag():
        return _rebuild(shipped, f"this worker is {platform_tag()}, the driver {shipped.platform}")
    from opforge.builder.loader import load_entry
    import hashlib

    from opforge.cache import cache_root, find_entry, key_lock, publish, write_atomic

    manifest = shipped.manifest

    if (len(shipped.artifact) != manifest.get("size")
            or hashlib.sha256(shipped.artifact).hexdigest() != manifest.get("sha256")):
        raise OpforgeError(f"op library '{shipped.name}' arrived damaged: its bytes do not match "
                           "the size and sha256 its driver recorded")
    root = cache_root()
    final = root / "libs" / f"{manifest['name']}-{manifest['key'][:20]}"
    entry = find_entry(final)
    if entry is None:
        with key_lock(root / "locks" / f"shipped-{final.name}.lock"):
            entry = find_entry(final)
            if entry is None:
                import tempfile

                staging = Path(tempfile.mkdtemp(prefix=f"{shipped.name}-", dir=root / "tmp"))
                (staging / manifest["artifact"]).write_bytes(shipped.artifact)
                write_atomic(staging / "manifest.json", json.dumps(manifest, indent=1))
                entry = find_entry(publish(staging, final))   # verified again, as any entry
    if entry is None:
        raise OpforgeError(f"op library '{shipped.name}' could not be installed in {root}")
    return load_entry(entry, shipped.name)


def _rebuild(shipped: ShippedLibrary, why: str):
    import tempfile

    import opforge

    if not shipped.sources:
        raise OpforgeError(f"op library '{shipped.name}' cannot run here ({why}) and its sources "
                           "were not shipped with it")
    folder = Path(tempfile.mkdtemp(prefix=f"opforge-{shipped.name}-"))
    for file_name, text in shipped.sources:
        (folder / file_name).write_text(text)
    try:
        return opforge.load_dir(folder, name=shipped.name)
    except OpforgeError as exc:
        raise OpforgeError(f"op library '{shipped.name}' cannot run here ({why}) and rebuilding it "
                           f"from its sources failed: {exc}") from exc


def _prepare_ops(custom_ops: Sequence[Any]) -> list:
    """Libraries and paths become ShippedLibrary; Python ops and mappings travel as they are."""
    from opforge.runtime.custom_ops import collect

    found = collect(custom_ops)
    return [ship(lib) for lib in found.libraries] + list(found.python_ops) + list(found.mappings)


class Predictor:
    """A Ray Data callable class: one session per actor, a batch (dict of columns) per call.

    ``input_columns``: {model input: column} (default: inputs take the column of their name; a
    single-input model takes the only column). ``output_columns``: {model output: column}
    (default: the output's name); columns the model does not read (ids, labels) pass through.
    A model whose inputs have a fixed batch dimension of 1 runs a batch row by row. Numeric
    columns are cast to the dtype the model declares (a table holds Python floats as float64).
    Model and libraries come through Ray's object store. ``threads``: the session's threads
    when ``session_options`` is not given (predict passes the actor's CPU reservation).
    """

    def __init__(self, model: bytes, custom_ops: Sequence[Any] = (), input_columns=None,
                 output_columns=None, providers=None, session_options=None, threads: int | None = None):
        import opforge

        model, custom_ops = _resolve(model), _resolve(custom_ops)
        ops = [install(op) if isinstance(op, ShippedLibrary) else op for op in custom_ops]
        if session_options is None and threads:   # the CPUs this actor reserved, not every core
            session_options = opforge.SessionOptions()
            session_options.intra_op_num_threads = threads
        self.session = opforge.InferenceSession(model, session_options, providers=providers, custom_ops=ops)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.dtypes = {i.name: _declared_dtype(i.type) for i in self.session.get_inputs()}
        # a model exported with a fixed batch of 1 (common) runs a batch one row at a time
        self.one_row = bool(self.inputs) and all(i.shape[:1] == [1] for i in self.session.get_inputs())
        self.input_columns = dict(input_columns or {})
        self.output_columns = dict(output_columns or {})
        self.batches = 0
        self._used: set = set()   # columns fed to the model; the others pass through

    def _feed(self, batch: dict) -> dict:
        columns = list(batch)
        feed = {}
        for name in self.inputs:
            column = self.input_columns.get(name, name if name in batch else None)
            if column is None and len(self.inputs) == 1 and len(columns) == 1:
                column = columns[0]
            if column not in batch:
                raise OpforgeError(f"model input {name!r} has no column: the batch has {columns}; "
                                   "map it with input_columns={input: column}")
            feed[name] = _as_input(_stacked(batch[column]), self.dtypes[name])
            self._used.add(column)
        return feed

    def __call__(self, batch: dict) -> dict:
        self.batches += 1
        rows = len(next(iter(batch.values()))) if batch else 0
        try:
            feed = self._feed(batch)
            if self.one_row and rows > 1:
                each = [self.session.run(None, {n: v[i:i + 1] for n, v in feed.items()}) for i in range(rows)]
                outputs = [np.concatenate(parts) for parts in zip(*each)]
            else:
                outputs = self.session.run(None, feed)
        except OpforgeError as exc:
            raise type(exc)(f"batch {self.batches} of this worker (pid {os.getpid()}, {rows} rows): {exc}") from exc
        names = [o.name for o in self.session.get_outputs()]
        result = {column: values for column, values in batch.items() if column not in self._used}
        result.update({self.output_columns.get(n, n): v for n, v in zip(names, outputs)})
        return result


def predict(dataset, model, *, custom_ops: Sequence[Any] = (), input_columns=None, output_columns=None,
            batch_size: int | None = 256, concurrency: int | tuple = 1, providers=None,
            session_options=None, **map_batches_args):
    """``dataset`` mapped through ``model`` (a path, bytes or ModelProto) by `Predictor` actors.

    Custom ops are built here, once; the model and the built libraries are put in the object
    store once and read by each actor. ``concurrency``: how many actors (an int, or Ray's
    (min, max) range); each reserves ``num_cpus`` (default 1) and its session runs on that many
    threads unless ``session_options`` says otherwise, so N actors fill a cluster of N CPUs
    without oversubscribing it. GPU workers (``num_gpus=1`` in ``map_batches_args``) run the
    CUDA provider first unless ``providers`` says otherwise. Returns the mapped
    ray.data.Dataset.
    """
    import ray

    if providers is None and map_batches_args.get("num_gpus"):
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    model_bytes = _model_bytes(model)
    ops = _prepare_ops(custom_ops)
    dataset = _spread(dataset, concurrency)
    threads = max(1, int(map_batches_args.get("num_cpus") or 1))
    return dataset.map_batches(
        Predictor, batch_size=batch_size, batch_format="numpy", **_actors(concurrency),
        fn_constructor_args=(ray.put(model_bytes), ray.put(ops)),
        fn_constructor_kwargs=dict(input_columns=input_columns, output_columns=output_columns,
                                   providers=providers, session_options=session_options, threads=threads),
        **map_batches_args)


def _actors(concurrency) -> dict:
    """How map_batches is told the actor pool's size: ``compute=ActorPoolStrategy`` where this
    Ray deprecates ``concurrency`` (it warns on every call there), ``concurrency`` where it is
    the way."""
    import ray.data

    doc = ray.data.Dataset.map_batches.__doc__ or ""
    if "concurrency: This argument is deprecated" not in " ".join(doc.split()):
        return {"concurrency": concurrency}
    if isinstance(concurrency, tuple):
        return {"compute": ray.data.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[-1])}
    return {"compute": ray.data.ActorPoolStrategy(size=concurrency)}


def _spread(dataset, concurrency):
    """``dataset`` in enough blocks for every worker to get batches. Ray Data hands a worker whole
    blocks, and ``from_numpy(array)`` or a small ``from_items`` is a single block, which would keep
    every other worker idle. A materialized dataset with fewer than two blocks per worker is split
    (in order, without a shuffle) here, before the actors start: split while they run, the split's
    tasks would wait for a CPU that N actors on N CPUs never free. A lazy one is left as its reads
    will block it."""
    from ray.data.dataset import MaterializedDataset

    workers = max(concurrency) if isinstance(concurrency, tuple) else concurrency
    if not isinstance(dataset, MaterializedDataset) or not isinstance(workers, int) or workers < 2:
        return dataset
    if dataset.num_blocks() >= 2 * workers:
        return dataset
    return dataset.repartition(2 * workers, shuffle=False).materialize()


def _declared_dtype(type_string: str) -> "np.dtype | None":
    """The numpy dtype of a 'tensor(float)'-style type string; None for other kinds."""
    import onnx

    from opforge.runtime.graph.types import elem_dtype

    if not type_string.startswith("tensor("):
        return None
    try:
        return elem_dtype(onnx.TensorProto.DataType.Value(type_string[7:-1].upper()))
    except ValueError:
        return None


def _stacked(values) -> np.ndarray:
    """A column as one array: Ray hands tensor columns over as arrays, or as object arrays of
    per-row arrays (then stacked)."""
    column = np.asarray(values)
    if column.dtype == object and column.size and isinstance(column.flat[0], np.ndarray):
        return np.stack(list(column))
    return column


def _as_input(column: np.ndarray, declared: "np.dtype | None") -> np.ndarray:
    """A numeric column in the dtype the model declares (tables hold Python floats as float64)."""
    if declared is None or column.dtype == declared or column.dtype.kind not in "biuf" or declared.kind not in "biuf":
        return column
    return column.astype(declared)


def _resolve(value):
    """A value from the object store (Ray passes some constructor arguments as references)."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def _model_bytes(model) -> bytes:
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        return Path(model).read_bytes()
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise TypeError(f"model must be a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
