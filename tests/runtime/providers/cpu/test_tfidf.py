"""TfIdfVectorizer (native for integer tokens, the reference provider for strings): a huge max_skip_count cannot hang a session, and
gives onnxruntime's counts; counts the spec forbids are refused when the session is made."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import opforge
from tests.support.helpers import run_python
from tests.support.numeric import assert_close

POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]   # unigrams 2..5 and 4, then bigrams (5,6) (7,8) (6,7)


def tfidf_model(max_skip_count: int, rank: int = 2, **attrs) -> bytes:
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", mode="TF", min_gram_length=1,
                            max_gram_length=2, max_skip_count=max_skip_count, ngram_counts=[0, 4],
                            ngram_indexes=list(range(7)), pool_int64s=POOL, **attrs)
    shape = ["n", "c"] if rank == 2 else ["c"]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=8).SerializeToString()


ROWS = np.array([[2, 3, 5, 6, 7, 8, 7, 6], [5, 4, 6, 9, 7, 5, 8, 6]], np.int64)


@pytest.mark.parametrize("x", [ROWS, ROWS[0]], ids=["rows", "one row"])
def test_a_huge_max_skip_count_counts_as_onnxruntime_does_with_the_longest_useful_skip(x):
    got, = opforge.InferenceSession(tfidf_model(2**62, x.ndim)).run(None, {"x": x})
    longest = x.shape[-1] - 1   # a skip of a whole row gathers nothing more
    expected, = ort.InferenceSession(tfidf_model(longest, x.ndim)).run(None, {"x": x})
    assert_close(got, expected, rtol=0, atol=0, where="TfIdfVectorizer, max_skip_count 2**62")
    assert expected.sum() > x.shape[0] if x.ndim == 2 else expected.sum() > 1   # bigrams were found


def test_a_huge_max_skip_count_finishes_quickly():
    done = run_python(f"""
        import numpy as np, opforge
        sess = opforge.InferenceSession({tfidf_model(2**63 - 1)!r})
        x = np.array([[2, 9, 3, 9], [5, 9, 9, 6], [7, 7, 9, 8]], np.int64)   # (5, 6) once, (7, 8) twice, far apart
        y = sess.run(None, {{"x": x}})[0]
        print(y.shape, int(y[:, 4:].sum()))
    """, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "(3, 7) 3", done.stderr[-2000:]


@pytest.mark.parametrize("attrs, says", [
    ({"max_skip_count": -1}, "'max_skip_count' = -1 must not be negative"),
    ({"max_skip_count": 0, "min_gram_length": 0}, "'min_gram_length' = 0 must be positive"),
])
def test_counts_outside_the_spec_are_refused_naming_the_node(attrs, says):
    model = onnx.load_from_string(tfidf_model(0))
    for name, value in attrs.items():
        next(a for a in model.graph.node[0].attribute if a.name == name).i = value
    with pytest.raises(opforge.runtime.GraphError, match=f"node 'tfidf' \\(TfIdfVectorizer.*{says}"):
        opforge.InferenceSession(model.SerializeToString())
