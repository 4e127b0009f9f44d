"""check_op: one call that exercises an op the way its schema says it can be called."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from opforge.testing import buffers
from opforge.testing.buffers import POISONS, GuardedOutput, differing, index_of, unwritten
from opforge.testing.cases import Case, generate, make_inputs, numpy_dtype
from opforge.testing.compare import mismatch, reference_outputs, tolerance
from opforge.testing.ort_check import OrtUnavailable, check_onnxruntime, ort_runner
from opforge.testing.report import CheckReport, OpCheckError
from opforge.testing.shrink import SHRINK_CALLS, shrink

_REFUSALS = (TypeError, ValueError, RuntimeError)   # what infer raises for a call it does not take
_CONCURRENT_REPEATS = 4
CONCURRENT_SIZE = 1 << 21   # input elements (at most) of the case run on many threads at once


@dataclass
class _Checker:
    """What every per-case check needs: the op, its reference, tolerances and the hosts it runs on."""

    handle: object
    schema: dict
    pools: dict
    reference: object
    atol: object
    rtol: object
    ort: object   # an OrtRunner, or None


def check_op(op, reference=None, *, attrs=None, dtypes=None, atol=None, rtol=None, seed=0,
             threads=8, sample=None, onnxruntime=None, shrink_calls=SHRINK_CALLS, raises=True) -> CheckReport:
    """Exercises `op` (an op of a built library, e.g. ``ops.leaky_relu``) on cases made from its
    schema and reports every disagreement as a table.

    Cases: every dtype the op allows (or `dtypes`), shapes from scalars and empty tensors to
    non-contiguous views and broadcastable ranks, optional inputs present and absent, 1 to 3
    variadic inputs, attributes at their defaults and, one at a time, at edge values (or the
    values in `attrs` {name: [values]}, required for attributes without a default). A case
    whose infer raises is counted as refused, not failed.

    Checks, per case: outputs are poisoned and surrounded by guard bytes, as is the workspace,
    so compute leaving an element unwritten or writing outside its outputs or workspace is
    found; two calls agree bit for bit; 1 and 4 threads agree; and, with `reference` (a numpy
    function taking the inputs positionally and the attributes as keywords, returning the
    outputs; or an onnx FunctionProto), infer's dtypes and shapes are the reference's and the
    values agree within `atol` / `rtol` (numbers or {dtype name: number}; by default per dtype,
    see opforge.testing.compare.TOLERANCES). Then the largest cases run on `threads` threads at
    once. `sample(index, dtype, shape, rng)` may give an input's values (None: random).

    `onnxruntime`: each case also runs as a one-node model in onnxruntime with the op's
    onnxruntime library (OpLibrary.onnxruntime_library, built once) and must give opforge's
    dtypes, shapes and values (within the same tolerances). None: where the onnxruntime package
    imports and the library builds (else a note says why not); True: required; False: never; a
    path: that built onnxruntime library of the op. Cases onnxruntime cannot express (bfloat16,
    float8, attribute kinds it does not hand to custom ops) are counted as skipped.

    The smallest failing case of each check is shrunk (fewer variadic inputs, attributes at
    their defaults, contiguous inputs, fewer and shorter axes) within `shrink_calls` candidate
    cases (0: not shrunk); the table shows the smallest case that still fails.

    Returns a CheckReport (a table when printed or shown in a notebook). Raises OpCheckError
    (an AssertionError whose message is the table) when a check fails, unless `raises` is false;
    ImportError or ValueError when onnxruntime=True and the op cannot run there.
    """
    handle = getattr(op, "handle", op)
    schema = handle.schema()
    report = CheckReport(schema["name"], seed, schema)
    rng = np.random.default_rng(seed)
    from opforge import _core

    checker = _Checker(handle, schema, {"many": _core.ThreadPool(4), "one": _core.ThreadPool(1)}, reference,
                       atol, rtol, _onnxruntime(op, schema, onnxruntime, report))
    taken = []
    for case in generate(schema, dtypes, attrs):
        inputs = make_inputs(case, rng, sample)
        if _check_case(checker, case, inputs, report):
            taken.append((case, inputs))
    report.cases = len(taken) + len(report.refused)
    if not taken:
        report.fail("compute", Case([], []), "infer refused every case; give attrs=, dtypes= or sample= "
                    "values the op takes")
    _check_concurrent(handle, taken, report, threads, atol, rtol)
    if shrink_calls:
        _shrink_failures(checker, taken, report, shrink_calls)
    if raises and not report.ok:
        raise OpCheckError(report)
    return report


def _onnxruntime(op, schema, setting, report):
    """The OrtRunner for `setting` (see check_op), or None with the reason in the report."""
    if setting is False:
        return None
    try:
        return ort_runner(op, schema, None if setting is True else setting)
    except OrtUnavailable as exc:
        if setting is True:
            raise exc.kind(f"check_op({schema['name']}, onnxruntime=True): {exc}") from exc
        report.ort_unavailable = str(exc)
        return None


def _check_case(checker: _Checker, case: Case, inputs: list, report: CheckReport) -> bool:
    """Runs every per-case check; false when the op refused the case."""
    from opforge import _core
    from opforge.errors import OpError

    handle, schema, pools = checker.handle, checker.schema, checker.pools
    atol, rtol = checker.atol, checker.rtol
    try:
        pack = handle.attrs(case.attrs)
        metas = [None if a is None else (_code(a.dtype), list(a.shape)) for a in inputs]
        declared = handle.infer(metas, pack, len(schema["outputs"]), True)
    except _REFUSALS as exc:
        report.refused.append((case, str(exc)))
        return False
    names = [p["name"] for p in schema["outputs"]]
    names += [f"#{k}" for k in range(len(names), len(declared))]
    expected = _reference_outputs(schema, case, inputs, declared, report, checker.reference)
    if expected is not None:
        _check_declared(case, names, declared, expected, report)
    calls = []
    report.note_case("compute", case)
    for poison, pool in ((POISONS[0], pools["many"]), (POISONS[1], pools["many"]), (0, pools["one"])):
        outs = [None if d is None else GuardedOutput.make(np.dtype(_core_dtype(d[0])), tuple(d[1]), poison)
                for d in declared]
        try:
            workspace = handle.run_guarded(tuple(inputs), [None if o is None else o.array for o in outs], pack,
                                           pool, buffers.guard_for(_workspace(handle, metas, pack)),
                                           poison)
        except OpError as exc:
            report.fail("compute", case, f"compute failed after infer accepted the inputs: {exc}")
            return True
        calls.append((outs, workspace))
    in_bounds = _check_bounds(case, names, calls, report)
    written = _check_unwritten(case, names, calls, report)
    _check_agreement(case, names, calls, written, report, atol, rtol)
    if expected is not None:
        _check_values(case, names, calls[1][0], expected, report, atol, rtol)
    if checker.ort is not None and in_bounds:   # a write out of bounds there would corrupt the process
        check_onnxruntime(checker.ort, case, names, inputs, declared, calls[1][0], written, report, atol, rtol)
    return True


def _shrink_failures(checker: _Checker, taken: list, report: CheckReport, budget: int) -> None:
    """Shrinks the smallest failing case of each per-case check (report.shrunk); the case
    found, or the one it started from, is shown with its values when they are few."""
    inputs_of = {id(case): inputs for case, inputs in taken}
    for check, failing in list(report.failures.items()):
        start = report.smallest(check)[0] if failing else None
        if start is None or id(start) not in inputs_of or check == "concurrent calls":
            continue

        def fails(case, inputs, check=check):
            scratch = CheckReport(report.op_name, report.seed)
            _check_case(checker, case, inputs, scratch)
            return scratch.failures[check][0][1] if scratch.failures.get(check) else None

        report.shrunk[check] = shrink(checker.schema, start, inputs_of[id(start)], fails, budget)


def _workspace(handle, metas, pack) -> int:
    try:
        return max(int(handle.workspace_size(metas, pack)), 0)
    except _REFUSALS:
        return 0


def _check_bounds(case, names, calls, report) -> bool:
    """False when compute wrote outside an output or its workspace (reported)."""
    report.note_case("output bounds", case)
    report.note_case("workspace bounds", case)
    for outs, (ws, before, after) in calls:
        for name, out in zip(names, outs):
            if out is None:
                continue
            front, back = out.damage()
            if back:
                report.fail("output bounds", case, _past_end(name, out, back))
                return False
            if front:
                report.fail("output bounds", case, f"compute wrote {front} bytes before the start of output "
                            f"'{name}' ({out.array.dtype}{list(out.array.shape)}): a negative index?")
                return False
        if after or before:
            where = (f"{after} bytes past the end" if after else f"{before} bytes before the start")
            report.fail("workspace bounds", case, f"compute wrote {where} of its workspace ({ws} bytes, as the "
                        "op's workspace function declares): declare more, or fix the index")
            return False
    return True


def _past_end(name: str, out: GuardedOutput, back: int) -> str:
    size = max(out.array.dtype.itemsize, 1)
    what = f"output '{name}' ({out.array.dtype}{list(out.array.shape)}, {out.nbytes} bytes)"
    if out.nbytes and back >= out.nbytes // 2:
        cause = (f"compute writes more than infer declares: does infer declare the dtype and shape compute "
                 f"writes (it declares {out.array.dtype})?")
    else:
        n = -(-back // size)
        cause = f"a loop bound {n} element{'s' if n > 1 else ''} past the end?"
    return f"compute wrote {back} bytes past the end of {what}: {cause}"


def _check_unwritten(case, names, calls, report) -> list:
    """Flat indices of unwritten elements per output (reported once, for the first output)."""
    report.note_case("unwritten", case)
    found, reported = [], False
    for k, (first, second) in enumerate(zip(calls[0][0], calls[1][0])):
        missing = unwritten(first, second) if first is not None else np.array([], dtype=np.int64)
        found.append(missing)
        if missing.size and not reported:
            reported = True
            shape, total = first.array.shape, first.array.size
            last = missing[-1] == total - 1
            if missing.size == 1 and last:
                text = (f"the last element {index_of(int(missing[0]), shape)} of output '{names[k]}' is never "
                        "written: a loop bound one short (i < n - 1)?")
            else:
                text = (f"{missing.size} of {total} elements of output '{names[k]}' are never written (first at "
                        f"{index_of(int(missing[0]), shape)}{', the last one among them' if last else ''})")
            report.fail("unwritten", case, text)
    return found


def _check_agreement(case, names, calls, written, report, atol, rtol) -> None:
    report.note_case("repeatable", case)
    report.note_case("thread counts", case)
    for k, name in enumerate(names):
        first, second, lone = (calls[i][0][k] for i in range(3))
        if first is None:
            continue
        diff = differing(first.array, second.array, written[k])
        if diff.size:
            at = int(diff[0])
            report.fail("repeatable", case, f"two calls on the same inputs differ in output '{name}' at "
                        f"{index_of(at, first.array.shape)} ({first.array.reshape(-1)[at]!r} then "
                        f"{second.array.reshape(-1)[at]!r}): a race, or reads of memory not written first")
            return
        got, alone = second.array.copy(), lone.array.copy()
        alone.reshape(-1)[written[k]] = got.reshape(-1)[written[k]]
        bad = mismatch(got, alone, *tolerance(got.dtype, atol, rtol))
        if bad is not None:
            report.fail("thread counts", case, f"results on 4 threads and on 1 differ: {bad.describe(name)}: "
                        "parallel_for chunks share memory (a race)?")
            return


def _reference_outputs(schema, case, inputs, declared, report, reference) -> "list | None":
    """The reference's outputs for the case (attributes with their defaults filled in), or
    None without a reference or when it raised (noted in the report, not a failure)."""
    if reference is None:
        return None
    values = {a["name"]: a["default"] for a in schema["attributes"] if a["has_default"]}
    values.update(case.attrs)
    try:
        return reference_outputs(reference, [None if a is None else a.copy() for a in inputs], values,
                                 len(declared))
    except Exception as exc:   # the reference's own limits: noted, not the op's failure
        report.reference_refused.append((case, f"{type(exc).__name__}: {exc}"))
        return None


def _check_declared(case, names, declared, expected, report) -> None:
    """Infer's dtype and shape of each output against the reference's."""
    report.note_case("infer vs reference", case)
    for name, decl, want in zip(names, declared, expected):
        if want is None or decl is None:
            continue
        dtype, shape = _core_dtype(decl[0]), tuple(decl[1])
        if dtype != want.dtype or shape != want.shape:
            report.fail("infer vs reference", case, f"infer declares {dtype}{list(shape)} for output '{name}'; "
                        f"the reference gives {want.dtype}{list(want.shape)}")
            return


def _check_values(case, names, outs, expected, report, atol, rtol) -> None:
    report.note_case("values", case)
    for name, out, want in zip(names, outs, expected):
        if want is None or out is None or out.array.dtype != want.dtype or out.array.shape != want.shape:
            continue
        bad = mismatch(out.array, want, *tolerance(want.dtype, atol, rtol))
        if bad is not None:
            report.fail("values", case, bad.describe(name))
            return


def _check_concurrent(handle, taken, report, threads, atol, rtol) -> None:
    """Per dtype, a large case (of at most CONCURRENT_SIZE input elements) on `threads` threads
    at once, each with a pool of its own (a pool runs one call's chunks at a time) and inputs of
    its own (a race between calls on equal inputs writes equal values), each result compared
    with a lone call's on the same inputs."""
    if threads < 2 or any(report.failures.get(c) for c in ("output bounds", "workspace bounds", "unwritten")):
        return   # its outputs get small guards and no poison: found out already
    from opforge import _core

    pools = [_core.ThreadPool(1) for _ in range(threads)]
    chosen = {}
    for case, inputs in taken:
        best = chosen.get(case.dtype)
        if not case.attrs and case.size <= CONCURRENT_SIZE and (best is None or case.size > best[0].size):
            chosen[case.dtype] = (case, inputs)
    names = [p["name"] for p in handle.schema()["outputs"]]
    for case, inputs in chosen.values():
        report.note_case("concurrent calls", case)
        feeds = [inputs] + [[None if a is None else np.roll(a, k) for a in inputs] for k in range(1, threads)]
        alone = [_guarded_call(handle, case, own, pools[0]) for own in feeds]
        if any(result is None for result in alone):   # compute failed: reported by the per-case checks
            continue
        results, start = [None] * threads, threading.Barrier(threads)

        def work(slot: int) -> None:
            start.wait()
            results[slot] = [_guarded_call(handle, case, feeds[slot], pools[slot]) for _ in range(_CONCURRENT_REPEATS)]

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        found = [(name, bad) for slot, runs in enumerate(results) for got in runs or [] if got is not None
                 for name, a, b in zip(names, got, alone[slot])
                 if a is not None and (bad := mismatch(a, b, *tolerance(a.dtype, atol, rtol))) is not None]
        if found:
            name, bad = found[0]
            report.fail("concurrent calls", case, f"{threads} calls at once disagree with lone calls: "
                        f"{bad.describe(name)}: state shared between calls (a static buffer?)")


def _guarded_call(handle, case, inputs, pool) -> "list | None":
    """The case's outputs, computed into guarded buffers (an op that writes out of bounds
    cannot corrupt the process's memory); None when the op fails."""
    from opforge.errors import OpError

    pack = handle.attrs(case.attrs)
    metas = [None if a is None else (_code(a.dtype), list(a.shape)) for a in inputs]
    declared = handle.infer(metas, pack, len(handle.schema()["outputs"]), True)
    outs = [None if d is None else GuardedOutput.make(np.dtype(_core_dtype(d[0])), tuple(d[1]), None, buffers.GUARD)
            for d in declared]
    try:
        handle.run_guarded(tuple(inputs), [None if o is None else o.array for o in outs], pack, pool,
                           buffers.guard_for(_workspace(handle, metas, pack)), 0)
    except OpError:
        return None
    return [None if o is None else o.array for o in outs]


def _code(dtype: np.dtype) -> int:
    from opforge import _core

    codes = {name: code for code, name in _core.DTYPE_NAMES.items()}
    return codes[np.dtype(dtype).name]


def _core_dtype(code: int) -> np.dtype:
    from opforge import _core

    return numpy_dtype(_core.DTYPE_NAMES[code])
