"""C kernel of tfidf_vectorizer against its reference: pools of every shape, skips, modes,
int32 and int64 tokens, empty rows, repeated n-grams."""

import numpy as np
import pytest

# --- tfidf_vectorizer ----------------------------------------------------------------------------


def random_pool(rng, vocab, sizes):
    """A pool holding ``sizes[k - 1]`` random n-grams of k tokens (repeats allowed)."""
    pool, counts = [], []
    for k, m in enumerate(sizes, start=1):
        counts.append(len(pool))
        for _ in range(m):
            pool += [int(v) for v in rng.integers(0, vocab, k)]
    return pool, counts


@pytest.mark.parametrize("shape", [(12,), (2, 6), (3, 17), (1, 0), (0,), (5, 1), (64, 40)],
                         ids=str)
@pytest.mark.parametrize("lo,hi,skip", [(1, 1, 0), (1, 2, 0), (2, 2, 5), (1, 3, 2), (2, 3, 40),
                                        (3, 9, 1), (1, 2, 2**62)], ids=str)
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_tfidf_counts(check, rng, shape, lo, hi, skip, dtype):
    pool, counts = random_pool(rng, 4, [3, 6, 5])
    total = 14
    x = rng.integers(0, 5, shape).astype(dtype)
    for mode, weights in (("TF", []), ("IDF", []), ("TFIDF", list(rng.uniform(0, 3, 20)))):
        indexes = [int(i) for i in rng.permutation(20)[:total]]
        check("tfidf_vectorizer", dict(mode=mode, min_gram_length=lo, max_gram_length=hi,
                                       max_skip_count=skip, ngram_counts=counts,
                                       ngram_indexes=indexes, pool=pool, weights=weights), [x])


def test_tfidf_repeated_and_empty_levels(check, rng):
    """A pool that holds an n-gram twice (the later column counts), a level with no n-grams,
    tokens past int32 in an int64 pool, and the ONNX example."""
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=3,
                 ngram_counts=[0, 3, 3], ngram_indexes=[0, 1, 2, 3],
                 pool=[7, 7, 2**40, 7, 2**40, 7])
    check("tfidf_vectorizer", attrs, [np.array([7, 2**40, 7, 7, 2**40, 1], np.int64)])
    onnx_example = dict(mode="TF", min_gram_length=2, max_gram_length=2, max_skip_count=0,
                        ngram_counts=[0, 0], ngram_indexes=[0, 1, 2], pool=[5, 6, 7, 8, 6, 7])
    check("tfidf_vectorizer", onnx_example,
          [np.array([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], np.int64)])


def test_tfidf_wrong_output_shape(c_kernel):
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
                 ngram_counts=[0], ngram_indexes=[0, 1], pool=[1, 2])
    kernel = c_kernel("tfidf_vectorizer", attrs, ["int64"], ["float32"])
    with pytest.raises(ValueError, match=r"the output \(\.\.\., 2\)"):
        kernel(np.zeros((2, 3), np.int64), np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"data must be \(C,\) or \(B, C\)"):
        kernel(np.zeros((1, 2, 3), np.int64), np.zeros((1, 2, 2), np.float32))
