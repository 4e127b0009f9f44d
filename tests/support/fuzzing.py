"""Seeded structural fuzzing of whole models: cases made from ONNX node tests and light zoo graphs,
run by worker processes so that a crash or a hang is a verdict, not the end of the run.

A case is a seed model (an ONNX node test case, or a model: a light model-zoo graph with seeded
random weights, or one of tests/support/fuzz_seeds.py's hand-built models of ops no node test covers) with
one mutation of tests/support/fuzz_mutations.py applied, and the feeds of each run (the
same signature each time: the second run and later ones go through the compiled plan). Case
``i`` of seed ``s`` depends only on (s, i), so any case can be made again. Used by the fuzz test
and benchmarks/fuzz.py; only the workers (tests/support/fuzz_worker.py) import opforge.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tests.support.fuzz_mutant import Mutant, random_value
from tests.support.fuzz_mutations import STRUCTURE
from tests.support.fuzz_values import VALUES

MUTATIONS = {**STRUCTURE, **VALUES}
"""Every mutation, by name: function(mutant) -> description, or None when it cannot apply."""

WORKER = "tests.support.fuzz_worker"   # run with -m, the project root on the path
MODEL_SHARE = 0.1   # of cases mutate a zoo or hand-built model (a zoo model is slower to run)


@dataclass
class Seed:
    """A model to mutate and the feeds it runs with."""

    name: str
    model: onnx.ModelProto
    feeds: dict


@dataclass
class Case:
    """One fuzz case: a mutated model (bytes), the feeds of each run, session options."""

    name: str
    mutation: str
    detail: str
    model: bytes
    runs: list
    ops: tuple = ()
    options: dict = field(default_factory=dict)


@dataclass
class Outcome:
    """What a runtime did with a case: ran, refused (an error of its own), bare (an exception
    that is not opforge's), internal (an error of its own wrapping one that is not, raised
    inside a kernel), crash, hang; with the error type and message."""

    verdict: str
    error: str = ""
    message: str = ""


def node_seeds() -> list[Seed]:
    """Every ONNX node test case (generated in memory), with its first data set's inputs."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    seeds = []
    for case in cases:
        names = [v.name for v in case.model.graph.input]
        inputs = case.data_sets[0][0] if case.data_sets else []
        seeds.append(Seed(case.name, case.model, dict(zip(names, map(_as_value, inputs)))))
    return seeds


def zoo_seeds(names=("light_squeezenet", "light_shufflenet", "light_inception_v1")) -> list[Seed]:
    """Light model-zoo graphs (tests/support/zoo.py) with seeded weights and a random input each."""
    from tests.support.zoo import light_model

    seeds = []
    for name in names:
        model = light_model(name, seed=0)
        constants = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(0)
        feeds = {v.name: random_value(v, rng) for v in model.graph.input if v.name not in constants}
        seeds.append(Seed(name, model, feeds))
    return seeds


def model_seeds() -> list[Seed]:
    """The light zoo's graphs and tests/support/fuzz_seeds.py's hand-built models."""
    from tests.support.fuzz_seeds import op_models

    return zoo_seeds() + [Seed(name, model, feeds) for name, (model, feeds) in op_models().items()]


def _as_value(value):
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return [_as_value(v) for v in value]
    return value


def make_case(seeds: list[Seed], models: list[Seed], seed: int, index: int) -> Case:
    """Case ``index`` of ``seed``: a seed model picked at random (from ``models`` for a share
    MODEL_SHARE of cases, else from ``seeds``) with one mutation applied."""
    rng = np.random.default_rng([seed, index])
    pool = models if models and rng.random() < MODEL_SHARE else seeds
    base = pool[int(rng.integers(len(pool)))]
    kinds = sorted(MUTATIONS)
    kind, detail = "none", "no mutation applies"
    for _ in range(20):
        mutant = Mutant(_copy(base.model), dict(base.feeds), rng)
        kind = kinds[int(rng.integers(len(kinds)))]
        with np.errstate(all="ignore"):
            detail = MUTATIONS[kind](mutant)
        if detail is not None:
            break
    runs = mutant.runs or [mutant.complete_feeds()] * 2
    draw = rng.random()
    options = {"fallback": draw >= 0.1, "optimize": not 0.1 <= draw < 0.2}
    return Case(f"{base.name}/{kind}#{seed}.{index}", kind, detail, mutant.model.SerializeToString(),
                runs, tuple(sorted(mutant.touched)), options)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def write_frame(stream, value) -> None:
    """One pickled value, length-prefixed."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_frame(stream):
    """The next value written by ``write_frame``, or None at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))


class Worker:
    """One tests/support/fuzz_worker.py process: cases in on stdin, outcomes back on stdout."""

    def __init__(self, compare_ort: bool, stderr):
        self.proc = subprocess.Popen([sys.executable, "-m", WORKER] + (["--ort"] if compare_ort else []),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     env=_worker_env())
        self.buffer = b""
        self.case: Case | None = None
        self.phase = "start"     # start | opforge | ort, what the worker is doing now
        self.results: dict = {}
        self.deadline = time.monotonic() + 120   # imports and the first kernel load

    def send(self, case: Case, timeout: float) -> None:
        self.case, self.phase, self.results = case, "opforge", {}
        self.deadline = time.monotonic() + timeout
        write_frame(self.proc.stdin, case)

    def frames(self) -> list:
        """Frames that arrived (call when select says stdout is readable); [None] at EOF."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        if not chunk:
            return [None]
        self.buffer += chunk
        found = []
        while len(self.buffer) >= 8:
            (size,) = struct.unpack("<Q", self.buffer[:8])
            if len(self.buffer) < 8 + size:
                break
            found.append(pickle.loads(self.buffer[8:8 + size]))
            self.buffer = self.buffer[8 + size:]
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:  # a dead worker's pipe
                pass


def _worker_env() -> dict:
    """This environment, with the opforge this process would import first on the path, and the
    project root the worker module (tests.support.fuzz_worker) is found from."""
    spec = importlib.util.find_spec("opforge")
    env = dict(os.environ)
    roots = [str(Path(__file__).resolve().parents[2])]
    if spec is not None and spec.origin:
        roots.insert(0, str(Path(spec.origin).resolve().parent.parent))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(roots + [p for p in [env.get("PYTHONPATH")] if p]))
    return env


def run_cases(cases, workers: int = 2, timeout: float = 30.0, compare_ort: bool = False,
              stderr=subprocess.DEVNULL):
    """Runs ``cases`` on ``workers`` worker processes; yields (case, {runtime: Outcome}).

    A worker that dies gives its case the verdict "crash" (with the signal), one that takes
    longer than ``timeout`` seconds on a case "hang"; either way it is replaced by a new one.
    With ``compare_ort``, each case also runs on onnxruntime after opforge, in the same worker.
    """
    cases = iter(cases)
    expected = ("opforge", "ort") if compare_ort else ("opforge",)
    pool = [Worker(compare_ort, stderr) for _ in range(workers)]
    try:
        while pool:
            readable = _wait(pool)
            for worker in pool:
                done = _advance(worker, worker in readable, expected)
                if done is not None:
                    yield done
            pool = _refill(pool, cases, timeout, compare_ort, stderr)
    finally:
        for worker in pool:
            worker.stop()


def _refill(pool: list, cases, timeout: float, compare_ort: bool, stderr) -> list:
    """Replaces dead workers and gives idle ones the next case; drops them when none is left."""
    kept = []
    for worker in pool:
        if worker.phase == "dead":
            worker = Worker(compare_ort, stderr)
        if worker.phase in ("idle", "ready"):
            case = next(cases, None)
            if case is None:
                worker.stop()
                continue
            worker.send(case, timeout)
        kept.append(worker)
    return kept


def _wait(pool: list) -> set:
    soonest = min(w.deadline for w in pool) - time.monotonic()
    readable, _, _ = select.select([w.proc.stdout for w in pool], [], [], max(0.0, min(soonest, 1.0)))
    return {w for w in pool if w.proc.stdout in readable}


def _advance(worker: Worker, readable: bool, expected: tuple):
    """Reads what ``worker`` sent; returns (case, outcomes) once its case is decided."""
    frames = worker.frames() if readable else []
    for frame in frames:
        if frame is None:
            return _lost(worker, expected, "crash", _signal_name(worker))
        if frame == "ready":
            worker.phase = "ready"
            continue
        runtime, outcome = frame
        worker.results[runtime] = outcome
        worker.phase = "ort" if runtime == "opforge" and len(expected) > 1 else worker.phase
        if len(worker.results) == len(expected):
            worker.phase = "idle"
            return worker.case, worker.results
    if worker.phase in ("start",) + expected and time.monotonic() > worker.deadline:
        return _lost(worker, expected, "hang", "no answer within the time limit")
    return None


def _lost(worker: Worker, expected: tuple, verdict: str, why: str):
    case, phase = worker.case, worker.phase
    worker.stop()
    worker.phase = "dead"
    if case is None or phase not in expected:
        raise RuntimeError(f"a fuzz worker failed before taking a case ({why})")
    results = dict(worker.results)
    results[phase] = Outcome(verdict, why, "")
    return case, results


def _signal_name(worker: Worker) -> str:
    code = worker.proc.wait()
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
