"""TfIdfVectorizer over integer tokens against onnxruntime."""
import numpy as np
import pytest

from tests.support.kernel_check import check

RNG = np.random.default_rng(21)
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5]   # unigrams 2 3 5 4, bigrams (5,6) (7,8) (6,7), trigram (2,3,5)
BASE = dict(ngram_counts=[0, 4, 10], ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7], pool_int64s=POOL)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams", [(1, 1), (1, 3), (2, 2), (2, 3)])
@pytest.mark.parametrize("max_skip", [0, 1, 3])
def test_tfidf_counts_and_weights(kernels, mode, grams, max_skip):
    x = RNG.integers(2, 9, size=(3, 12)).astype(np.int64)
    x[0, :3] = [2, 3, 5]
    attrs = dict(BASE, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=max_skip)
    check(kernels, "TfIdfVectorizer", [x], attrs, opset=9, rtol=0, atol=0)
    check(kernels, "TfIdfVectorizer", [x[1].astype(np.int32)], attrs, opset=9, rtol=0, atol=0)
    weighted = dict(attrs, weights=[0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 4.0, 1.25])
    check(kernels, "TfIdfVectorizer", [x], weighted, opset=9, rtol=0, atol=0)
