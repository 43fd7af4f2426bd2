"""tfidf_vectorizer: its type relation over symbolic dims, its errors, the text round trip,
and the reference against counts written out by hand."""

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from relvm.ops.registry import AttrError, OpTypeError
from ophelpers import T, infer, run

c, b = Sym("c"), Sym("b")

# --- tfidf_vectorizer ----------------------------------------------------------------------------

#: ONNX's example pool: unigrams 2 3 5 4, bigrams (5 6) (7 8) (6 7), columns 0 to 6.
POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
            pool=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])
X = np.array([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], np.int64)


def tfidf(x, mode="TF", lo=1, hi=2, skip=0, **extra):
    return run("tfidf_vectorizer", x, mode=mode, min_gram_length=lo, max_gram_length=hi,
               max_skip_count=skip, **{**POOL, **extra})


def test_tfidf_types_over_symbolic_dims():
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0, **POOL)
    assert infer("tfidf_vectorizer", T((c,), "int64"), **attrs) == T((7,))
    assert infer("tfidf_vectorizer", T((b, c), "int32"), **attrs) == T((b, 7))
    assert infer("tfidf_vectorizer", T((b, c), "int64"),
                 **{**attrs, "ngram_indexes": [0, 1, 2, 3, 9, 5, 6]}) == T((b, 10))


def test_tfidf_counts_by_hand():
    # Unigrams: 3 three times (column 1), 5 once (2); bigrams at skip 0: (7 8) once (5),
    # (6 7) once (6), (5 6) once (4).
    np.testing.assert_array_equal(tfidf(X), [0, 3, 1, 0, 1, 1, 1])
    np.testing.assert_array_equal(tfidf(X, lo=2), [0, 0, 0, 0, 1, 1, 1])
    # With skips up to 5 a bigram is every pair x[i], x[i + s + 1] with s <= 5.
    want = np.zeros(7)
    for (first, second), col in {(5, 6): 4, (7, 8): 5, (6, 7): 6}.items():
        want[col] = sum(X[i] == first and X[i + s + 1] == second
                        for s in range(6) for i in range(len(X) - s - 1))
    np.testing.assert_array_equal(tfidf(X, lo=2, skip=5), want)
    # Unigrams are counted once, not once per skip.
    np.testing.assert_array_equal(tfidf(X, skip=5)[:4], [0, 3, 1, 0])


def test_tfidf_modes_and_batches():
    weights = [0.5, 2.0, 3.0, 1.0, 4.0, 1.5, 0.25]
    tf = tfidf(X)
    np.testing.assert_allclose(tfidf(X, "IDF"), (tf > 0).astype(np.float32))
    np.testing.assert_allclose(tfidf(X, "IDF", weights=weights), np.where(tf > 0, weights, 0))
    np.testing.assert_allclose(tfidf(X, "TFIDF", weights=weights), tf * np.float32(weights))
    np.testing.assert_allclose(tfidf(X, "TFIDF"), tf)
    batch = X.reshape(2, 6)
    got = tfidf(batch, skip=5)
    assert got.shape == (2, 7)
    for r in range(2):  # rows are counted apart: no n-gram spans two
        np.testing.assert_array_equal(got[r], tfidf(batch[r], skip=5))
    assert tfidf(np.zeros((3, 0), np.int64)).shape == (3, 7)
    assert not tfidf(np.zeros((0,), np.int64)).any()


def test_tfidf_text_round_trip():
    text = ('def @main(%x: Tensor[(b, c), int64]) { tfidf_vectorizer(%x, mode="TFIDF", '
            "min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 2], "
            "ngram_indexes=[0, 1, 2], pool=[4, 5, 4, 5], weights=[0.5f, 1f, 2f]) }")
    mod = relvm.parse(text)
    assert str(mod["main"].checked_type.ret) == "Tensor[(b, 3), float32]"
    assert relvm.parse(relvm.print_module(mod)) == mod


@pytest.mark.parametrize("attrs, message", [
    (dict(min_gram_length=0), r"min_gram_length 0 and max_gram_length 2 must satisfy"),
    (dict(min_gram_length=3), r"min_gram_length 3 and max_gram_length 2"),
    (dict(max_skip_count=-1), r"max_skip_count must be >= 0, got -1"),
    (dict(ngram_counts=[1, 4]), r"ngram_counts must start at 0 and rise"),
    (dict(ngram_counts=[0, 11]), r"rise to at most the pool's 10 tokens"),
    (dict(ngram_counts=[0, 5]), r"the pool's 2-grams span 5 tokens, not a multiple of 2"),
    (dict(ngram_indexes=[0, 1, 2]), r"ngram_indexes has 3 columns, fewer than the pool's"),
    (dict(ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7]), r"has 8 columns but the pool holds 7"),
    (dict(ngram_indexes=[0, 1, 2, 3, 4, 5, -1]), r"columns >= 0"),
    (dict(weights=[1.0, 2.0]), r"weights has 2 entries, fewer than the 7 output columns"),
])
def test_tfidf_attribute_errors(attrs, message):
    full = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0, **POOL)
    with pytest.raises(OpTypeError, match=message):
        infer("tfidf_vectorizer", T((c,), "int64"), **{**full, **attrs})


def test_tfidf_input_errors():
    full = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0, **POOL)
    with pytest.raises(OpTypeError, match="data must be int64 or int32 tokens, got float32"):
        infer("tfidf_vectorizer", T((c,)), **full)
    with pytest.raises(OpTypeError, match=r"data must be \(C,\) or \(B, C\), got \(2, 3, c\)"):
        infer("tfidf_vectorizer", T((2, 3, c), "int64"), **full)
    with pytest.raises(AttrError, match="mode"):
        infer("tfidf_vectorizer", T((c,), "int64"), **{**full, "mode": "BM25"})
