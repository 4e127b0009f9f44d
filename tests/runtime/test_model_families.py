"""The real-model families bench_models --families times (benchmarks/model_families.py) give
onnxruntime's outputs, every node on a native kernel."""
import sys
from pathlib import Path

import pytest

from test_models import assert_all_native, compare_with_onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from model_families import FAMILIES  # noqa: E402


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_model_family_matches_onnxruntime(name):
    model, feed = FAMILIES[name]()
    sess = compare_with_onnxruntime(model, feed)
    assert_all_native(sess)
