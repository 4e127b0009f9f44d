"""The real-model families bench_models --families times (tests/support/model_families.py) give
onnxruntime's outputs, every node on a native kernel."""
import pytest

from tests.support.model_check import assert_all_native, compare_with_onnxruntime
from tests.support.model_families import FAMILIES


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_model_family_matches_onnxruntime(name):
    model, feed = FAMILIES[name]()
    sess = compare_with_onnxruntime(model, feed)
    assert_all_native(sess)
