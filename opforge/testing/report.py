"""What check_op found, as a table for people: each check with how many cases it ran and, when
it failed, the smallest failing case (shrunk where a smaller one still fails) and a message
pointing at the cause."""
from __future__ import annotations

from collections import defaultdict

from opforge import tables
from opforge.testing.shrink import preview

# The checks, in the order the table lists them.
CHECKS = {
    "compute": "compute runs where infer accepts the inputs",
    "output bounds": "compute writes nothing outside its outputs",
    "workspace bounds": "compute writes nothing outside its workspace",
    "unwritten": "compute writes every output element",
    "repeatable": "two calls on the same inputs agree bit for bit",
    "thread counts": "1 and 4 threads agree",
    "concurrent calls": "calls on several threads at once agree with a lone call",
    "infer vs reference": "infer declares the reference's dtypes and shapes",
    "values": "results within tolerance of the reference",
    "onnxruntime": "the op's onnxruntime library gives opforge's results in onnxruntime",
}
HEADERS = ["check", "cases", "result", "smallest failing case"]


class OpCheckError(AssertionError):
    """check_op found a problem; the message is the report's table, `.report` the report."""

    def __init__(self, report: "CheckReport"):
        super().__init__("\n" + str(report))
        self.report = report


class CheckReport:
    """The outcome of check_op: per check, the cases run and the failures found; the cases the
    op refused (infer raised: not a failure, shown as a count and a few reasons)."""

    def __init__(self, op_name: str, seed: int, schema: "dict | None" = None):
        self.op_name, self.seed, self.schema = op_name, seed, schema
        self.runs: dict = defaultdict(int)
        self.failures: dict = defaultdict(list)   # check -> [(case, message)]
        self.refused: list = []                   # (case, reason)
        self.reference_refused: list = []         # (case, reason): the reference could not take it
        self.shrunk: dict = {}                    # check -> Shrunk: its smallest failing case, shrunk
        self.ort_unavailable = None               # why the cases were not run in onnxruntime
        self.ort_skipped: list = []               # (case, reason): cases onnxruntime cannot express
        self.cases = 0
        self.dtypes_run: dict = defaultdict(set)   # check -> dtypes of the cases it ran on
        self.broadcasts_run: dict = defaultdict(int)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not any(self.failures.values())

    def fail(self, check: str, case, message: str) -> None:
        self.failures[check].append((case, message))

    def smallest(self, check: str) -> tuple:
        """(case, message) of the smallest failing case of `check` (the case with the fewest
        input elements: the easiest to reproduce)."""
        return min(self.failures[check], key=lambda item: item[0].size)

    def _hint(self, check: str) -> str:
        """Which kind of case fails when only one kind does: one dtype, broadcasting, a layout."""
        failing = self.failures[check]
        dtypes = {case.dtype for case, _ in failing}
        tried = self.dtypes_run.get(check, set())
        if len(dtypes) == 1 and len(tried) > 1:
            return f" [fails for {next(iter(dtypes))} only; {', '.join(sorted(tried - dtypes))} pass]"
        if all(case.broadcasts for case, _ in failing) and self.broadcasts_run.get(check, 0) < self.runs[check]:
            return " [fails only where inputs broadcast]"
        layouts = {case.layout for case, _ in failing}
        if layouts and "contiguous" not in layouts:
            return f" [fails only for {'/'.join(sorted(layouts))} inputs]"
        return ""

    def note_case(self, check: str, case) -> None:
        """Counts a case `check` ran on, by dtype and broadcasting (for the hints)."""
        self.runs[check] += 1
        self.dtypes_run[check].add(case.dtype)
        self.broadcasts_run[check] += bool(case.broadcasts)

    def rows(self) -> list:
        rows = []
        for check in CHECKS:
            if not self.runs.get(check):
                continue
            failing = self.failures.get(check)
            if not failing:
                rows.append([check, self.runs[check], "ok", ""])
                continue
            case, message = self.smallest(check)
            more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
            where = case.describe()
            shrunk = self.shrunk.get(check)
            if shrunk is not None:
                values = preview(self.schema, shrunk.inputs) if self.schema else ""
                where = f"{shrunk.case.describe()}{' ' + values if values else ''}"
                if shrunk.smaller:
                    message = shrunk.message
                    where += f"; shrunk from {case.describe()} in {shrunk.calls} tries"
            rows.append([check, self.runs[check], f"FAIL{more}: {message}{self._hint(check)}", where])
        return rows

    def title(self) -> str:
        failed = sum(1 for v in self.failures.values() if v)
        verdict = "all checks pass" if self.ok else f"{failed} check{'s' if failed > 1 else ''} FAILED"
        return (f"check_op({self.op_name}, seed={self.seed}): {self.cases} cases, "
                f"{len(self.refused)} refused by infer; {verdict}")

    def notes(self) -> list:
        lines = []
        reasons = list(dict.fromkeys(reason.splitlines()[0] for _, reason in self.refused))
        if reasons:
            lines.append("refused (infer raised, not a failure): " + "; ".join(reasons[:3])
                         + (f"; and {len(reasons) - 3} more reasons" if len(reasons) > 3 else ""))
        if self.reference_refused:
            case, reason = self.reference_refused[0]
            lines.append(f"the reference raised on {len(self.reference_refused)} case(s) the op took, "
                         f"e.g. {case.describe()}: {reason}")
        if self.ort_unavailable:
            lines.append(f"not compared with onnxruntime: {self.ort_unavailable}")
        if self.ort_skipped:
            reasons = ", ".join(dict.fromkeys(reason for _, reason in self.ort_skipped))
            lines.append(f"onnxruntime skipped {len(self.ort_skipped)} case(s) it cannot express ({reasons})")
        return lines

    def __str__(self) -> str:
        return "\n".join([tables.text_table(HEADERS, self.rows(), self.title())] + self.notes())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        import html

        notes = "".join(f"<p>{html.escape(line)}</p>" for line in self.notes())
        return tables.html_table(HEADERS, self.rows(), self.title()) + notes
