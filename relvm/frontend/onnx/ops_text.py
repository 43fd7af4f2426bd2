"""TfIdfVectorizer over integer tokens (relvm has no string dtype: a pool of strings is refused
by name)."""

from __future__ import annotations

from .converters import converter
from .importer import Node


@converter("TfIdfVectorizer")
def tfidf_vectorizer(n: Node):
    """``tfidf_vectorizer``, whose type relation checks the pool against its counts and
    columns."""
    if n.attr("pool_strings", None) is not None:
        raise n.fail("pool_strings: relvm has no string dtype (only int64 and int32 tokens)")
    if n.dtype(0) not in ("int64", "int32"):
        raise n.fail(f"the input must be int64 or int32 tokens, got {n.dtype(0)}")
    return n.call("tfidf_vectorizer", n.x(0), mode=n.required("mode"),
                  min_gram_length=int(n.required("min_gram_length")),
                  max_gram_length=int(n.required("max_gram_length")),
                  max_skip_count=int(n.required("max_skip_count")),
                  ngram_counts=[int(c) for c in n.required("ngram_counts")],
                  ngram_indexes=[int(c) for c in n.required("ngram_indexes")],
                  pool=[int(t) for t in n.attr("pool_int64s", [])],
                  weights=[float(w) for w in n.attr("weights", [])])
