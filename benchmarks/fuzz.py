"""Structural fuzzing at scale: mutated node tests and models through opforge, in workers.

    python -m benchmarks.fuzz --cases 20000 --seed 1 [--workers 2] [--timeout 30] [--ort]
                              [--save FOLDER] [--replay FOLDER/CASE]

Prints how many cases ran, were refused with an opforge error, were cancelled after running
too long ("slow"), escaped as another exception ("bare"), were refused with an opforge error
wrapping another exception raised inside a kernel ("internal"), crashed the worker or hung (did
not stop even when cancelled), with the crashes, hangs, bare and internal exceptions by mutation
and by error. ``--save`` writes a reproducer for each of those (model.onnx, runs.pkl with the
feeds of each run, verdict.txt); ``--replay`` runs one in this process. ``--ort`` also runs each
case on onnxruntime and lists where the two disagree on refusing a case. Cases come from
tests/support/fuzzing.py; target (DESIGN.md): 0 crashes, 0 bare or internal exceptions (and no hangs).
"""
import argparse
import collections
import os
import pickle
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from tests.support.fuzzing import make_case, model_seeds, node_seeds, run_cases  # noqa: E402

FINDINGS = ("crash", "hang", "bare", "internal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a case is a hang")
    parser.add_argument("--ort", action="store_true", help="compare refusals with onnxruntime")
    parser.add_argument("--save", type=Path, help="folder for reproducers of crashes, hangs, bare exceptions")
    parser.add_argument("--replay", type=Path, help="run one saved reproducer in this process")
    parser.add_argument("--node-tests-only", action="store_true",
                        help="mutate ONNX node tests only (no zoo or hand-built models)")
    args = parser.parse_args()
    if args.replay:
        replay(args.replay)
        return
    start = time.perf_counter()
    seeds, models = node_seeds(), [] if args.node_tests_only else model_seeds()
    cases = (make_case(seeds, models, args.seed, i) for i in range(args.cases))
    log = subprocess.DEVNULL
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        log = open(args.save / "workers.log", "ab")   # the workers' stderr: crash messages
    tally = Tally()
    for case, outcomes in run_cases(cases, args.workers, args.timeout, args.ort, log):
        tally.add(case, outcomes)
        if args.save and outcomes["opforge"].verdict in FINDINGS:
            save(args.save, case, outcomes)
        if tally.total % 1000 == 0:
            print(f"  {tally.total} cases, {time.perf_counter() - start:.0f}s: {dict(tally.verdicts)}", flush=True)
    tally.report(args, time.perf_counter() - start)


class Tally:
    """Counts of verdicts, findings by mutation and by error, and disagreements with ORT."""

    def __init__(self):
        self.total = 0
        self.verdicts = collections.Counter()
        self.by_mutation = collections.Counter()
        self.by_error = collections.Counter()
        self.examples: dict = {}
        self.disagree = collections.Counter()
        self.disagree_examples: dict = {}
        self.ort = collections.Counter()

    def add(self, case, outcomes: dict) -> None:
        self.total += 1
        mine = outcomes["opforge"]
        self.verdicts[mine.verdict] += 1
        if mine.verdict in FINDINGS:
            key = (mine.verdict, f"{mine.error} {_shape(mine.message)}")
            self.by_mutation[(mine.verdict, case.mutation)] += 1
            self.by_error[key] += 1
            self.examples.setdefault(key, f"{case.name}: {case.detail}")
        theirs = outcomes.get("ort")
        if theirs is not None:
            self.ort[theirs.verdict] += 1
            if (mine.verdict == "ran") != (theirs.verdict == "ran"):
                ops = ",".join(case.ops) or "-"
                key = (f"opforge {mine.verdict}, ort {theirs.verdict}", case.mutation, ops)
                self.disagree[key] += 1
                self.disagree_examples.setdefault(
                    key, f"{case.name}: {case.detail} | opforge: {mine.error} {mine.message[:150]} "
                         f"| ort: {theirs.error} {theirs.message[:150]}")

    def report(self, args, seconds: float) -> None:
        print(f"{self.total} cases (seed {args.seed}) in {seconds:.0f}s on {args.workers} workers, "
              f"load average {os.getloadavg()[0]:.2f}")
        for verdict in ("ran", "refused", "slow") + FINDINGS:
            print(f"  {verdict:<8}{self.verdicts[verdict]:>8}")
        for title, counter in (("findings by mutation", self.by_mutation), ("findings by error", self.by_error)):
            if counter:
                print(title + ":")
                for key, count in counter.most_common():
                    example = f"\n      e.g. {self.examples[key]}" if key in self.examples else ""
                    print(f"  {count:>6}  {' / '.join(key)}{example}")
        if self.ort:
            print(f"onnxruntime: {dict(self.ort)}; cases where one runs what the other refuses:")
            for key, count in self.disagree.most_common():
                print(f"  {count:>6}  {' / '.join(key)}\n      e.g. {self.disagree_examples[key]}")


def _shape(message: str) -> str:
    """A message with numbers and quoted names blanked, so that like findings group together."""
    text = re.sub(r"'[^']*'", "'_'", message)
    return re.sub(r"\d+", "N", text)[:120]


def save(folder: Path, case, outcomes: dict) -> None:
    """A reproducer: the model, the feeds of each run and the verdict."""
    where = folder / re.sub(r"[^A-Za-z0-9_.#-]", "_", case.name)
    where.mkdir(parents=True, exist_ok=True)
    (where / "model.onnx").write_bytes(case.model)
    with open(where / "runs.pkl", "wb") as f:
        pickle.dump({"runs": case.runs, "options": case.options}, f)
    lines = [case.name, case.detail] + [f"{k}: {o.verdict} {o.error} {o.message}" for k, o in outcomes.items()]
    (where / "verdict.txt").write_text("\n".join(lines) + "\n")


def replay(where: Path) -> None:
    """Runs a saved reproducer here (a crash then shows its own stack)."""
    from tests.support import fuzz_worker
    from tests.support.fuzzing import Case

    saved = pickle.loads((where / "runs.pkl").read_bytes())
    case = Case(where.name, "replay", "", (where / "model.onnx").read_bytes(), saved["runs"],
                options=saved["options"])
    print(fuzz_worker.run_opforge(case))


if __name__ == "__main__":
    main()
