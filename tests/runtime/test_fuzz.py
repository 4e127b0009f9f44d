"""Structurally fuzzed models (tests/support/fuzzing.py): whatever the mutation, a session refuses with an
opforge error or runs; it never crashes, hangs or lets another exception escape.

Each case runs in a worker process, so a crash or a hang is caught as a verdict. benchmarks/fuzz.py
runs the same cases by the tens of thousands and saves reproducers.
"""
import collections

import pytest

from tests.support.fuzz_seeds import op_models
from tests.support.fuzzing import MUTATIONS, make_case, model_seeds, node_seeds, run_cases
from opforge.runtime.providers.cpu import library as native

SEED, CASES = 7, 1000
FINDINGS = ("crash", "hang", "bare", "internal")


@pytest.fixture(scope="module")
def outcomes():
    native.cpu_kernels()   # built once here; the workers load it from the cache
    seeds, models = node_seeds(), model_seeds()
    cases = (make_case(seeds, models, SEED, i) for i in range(CASES))
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


def test_the_cases_mutate_every_hand_built_model(outcomes):
    """The models of ops no node test covers (tests/support/fuzz_seeds.py) are all in the batch."""
    mutated = {case.name.split("/")[0] for case, _ in outcomes}
    assert not set(op_models()) - mutated, sorted(set(op_models()) - mutated)
