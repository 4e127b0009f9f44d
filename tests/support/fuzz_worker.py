"""A fuzz worker: runs the cases tests/support/fuzzing.py sends on stdin through opforge (and, with
--ort, onnxruntime) and writes each outcome back, so that a crash or hang ends only this process.

Each case: create an InferenceSession with the case's options, then run it once per feed dict of
``case.runs`` (later runs use the compiled plan). Outcomes: "ran"; "refused", an opforge error;
"bare", any other exception escaping opforge's public API; "internal", an opforge error that wraps
another exception raised inside a kernel (a TypeError or IndexError from code that a bad value
reached: a finding, not a refusal); "slow", a run that was still going
after RUN_BUDGET seconds and stopped when its RunOptions.terminate was set (a run that does not
stop is the caller's "hang"). Memory is capped so that a huge allocation fails instead of
exhausting the machine.
"""
from __future__ import annotations

import logging
import os
import resource
import sys
import warnings
from pathlib import Path

from tests.support.fuzzing import Outcome, read_frame, write_frame

MEMORY_LIMIT = 8 << 30   # bytes of address space
RUN_BUDGET = 10.0        # seconds a run may take before it is cancelled


def run_opforge(case) -> Outcome:
    import opforge
    from opforge.errors import OpforgeError

    options = opforge.SessionOptions()
    options.disable_reference_fallback = not case.options.get("fallback", True)
    if not case.options.get("optimize", True):
        options.graph_optimization_level = opforge.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = opforge.InferenceSession(case.model, options)
        for feeds in case.runs:
            if _run_within_budget(session, feeds):
                return Outcome("slow", "", f"a run took over {RUN_BUDGET:.0f}s and stopped when cancelled")
    except OpforgeError as exc:
        inner = _foreign_cause(exc)
        if inner is not None:
            return Outcome("internal", f"{type(exc).__name__} from {type(inner).__name__}",
                           _where(inner) + str(exc)[:500])
        return Outcome("refused", type(exc).__name__, str(exc)[:500])
    except Exception as exc:  # anything else escaping the public API is a finding
        return Outcome("bare", type(exc).__name__, _where(exc) + str(exc)[:500])
    return Outcome("ran")


def _run_within_budget(session, feeds) -> bool:
    """Run once; True if the run was cancelled for going over RUN_BUDGET."""
    import threading

    from opforge.runtime import RunCancelledError, RunOptions

    options = RunOptions()
    watchdog = threading.Timer(RUN_BUDGET, setattr, (options, "terminate", True))
    watchdog.start()
    try:
        session.run(None, feeds, options)
    except RunCancelledError:
        if options.terminate:
            return True
        raise
    finally:
        watchdog.cancel()
    return False


def run_ort(case) -> Outcome:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    if not case.options.get("optimize", True):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(case.model, options, providers=["CPUExecutionProvider"])
        for feeds in case.runs:
            session.run(None, feeds)
    except Exception as exc:  # every refusal of onnxruntime's counts the same
        return Outcome("refused", type(exc).__name__, str(exc)[:500])
    return Outcome("ran")


def _foreign_cause(exc: BaseException) -> "BaseException | None":
    """The first exception in ``exc``'s chain of causes that is not one of opforge's own (its
    errors name what is wrong; a bare TypeError inside a kernel says a bad value got through)."""
    from opforge.errors import OpforgeError

    seen = set()
    cause = exc.__cause__   # the executor chains what a kernel raised (an `except` that
    while cause is not None and id(cause) not in seen:   # translates an error sets no cause)
        seen.add(id(cause))
        if not isinstance(cause, OpforgeError):
            return cause
        cause = cause.__cause__
    return None


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame that raised, to tell bare exceptions apart."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    return f"[{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}] "


def main() -> None:
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                      # whatever prints goes to stderr, not into the frames
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # a crash is expected here: no core files
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    compare_ort = "--ort" in sys.argv
    import opforge  # noqa: F401  (imports before "ready", so they do not count against a case)
    from opforge.runtime.providers.cpu import library as native

    native.cpu_kernels()
    if compare_ort:
        import onnxruntime  # noqa: F401
    write_frame(results, "ready")
    while True:
        case = read_frame(sys.stdin.buffer)
        if case is None:
            return
        with np_quiet():
            write_frame(results, ("opforge", run_opforge(case)))
            if compare_ort:
                write_frame(results, ("ort", run_ort(case)))


def np_quiet():
    import numpy as np

    return np.errstate(all="ignore")


if __name__ == "__main__":
    main()
