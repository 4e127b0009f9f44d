"""Structurally fuzzed models (tests/fuzzing.py): whatever the mutation, a session refuses with an
opforge error or runs; it never crashes, hangs or lets another exception escape.

Each case runs in a worker process, so a crash or a hang is caught as a verdict. benchmarks/fuzz.py
runs the same cases by the tens of thousands and saves reproducers.
"""
import collections

import pytest

from fuzzing import MUTATIONS, make_case, node_seeds, run_cases, zoo_seeds
from opforge.runtime.providers.cpu import library as native

SEED, CASES = 7, 400
FINDINGS = ("crash", "hang", "bare")


@pytest.fixture(scope="module")
def outcomes():
    native.cpu_kernels()   # built once here; the workers load it from the cache
    seeds, zoo = node_seeds(), zoo_seeds()
    cases = (make_case(seeds, zoo, SEED, i) for i in range(CASES))
    return list(run_cases(cases, workers=2, timeout=60))


def test_fuzzed_models_never_crash_hang_or_raise_a_bare_exception(outcomes):
    findings = [f"{case.name} ({case.detail}): {o.verdict} {o.error} {o.message[:200]}"
                for case, results in outcomes for o in [results["opforge"]] if o.verdict in FINDINGS]
    assert not findings, "\n".join(findings)


def test_the_cases_exercise_every_mutation_and_both_verdicts(outcomes):
    assert len(outcomes) == CASES
    verdicts = collections.Counter(results["opforge"].verdict for _, results in outcomes)
    mutations = {case.mutation for case, _ in outcomes}
    assert verdicts["ran"] >= CASES // 20 and verdicts["refused"] >= CASES // 2, verdicts
    assert mutations == set(MUTATIONS), sorted(set(MUTATIONS) - mutations)
