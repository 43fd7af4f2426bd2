"""``tfidf_vectorizer``: counts of the n-grams of a pool in rows of integer tokens, as ONNX
TfIdfVectorizer.

``data`` is ``(C,)`` or ``(B, C)`` int64 or int32 tokens; the result is float32 ``(O,)`` or
``(B, O)``, ``O = max(ngram_indexes) + 1``. ``pool`` holds the n-grams (ONNX's
``pool_int64s``), by size: ``ngram_counts[k - 1]`` is where the n-grams of k tokens begin (the
next entry, or the pool's end, where they end), and ``ngram_indexes[i]`` is the output column
of the pool's i-th n-gram. Only sizes in ``[min_gram_length, max_gram_length]`` are counted.

An n-gram of k tokens with skip ``s`` (0 to ``max_skip_count``) is ``x[i], x[i + s + 1], ...,
x[i + (k - 1)(s + 1)]``, within one row. Each is counted once per skip, except unigrams, counted
once (at skip 0): as onnx's reference and ONNX Runtime count. An n-gram the pool holds twice
counts in the later one's column. ``mode`` weighs the counts ``f``: ``TF`` gives ``f``, ``IDF``
``weights[c]`` where ``f > 0`` (1 without weights) and 0 elsewhere, ``TFIDF`` ``weights[c] * f``
(``f`` without weights); ``weights`` is indexed by the output column ``c``, as onnx's
reference does.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .common import fmt_shape, require, tensor_arg
from .registry import FLOAT_LIST, INT, INTS, OPAQUE, OpTypeError, attr, choice, register

MODES = ("TF", "IDF", "TFIDF")


def pool_table(attrs) -> dict[tuple[int, ...], int]:
    """The counted n-grams (tuples of tokens) -> their output column; raises OpTypeError for
    attributes that do not describe a pool."""
    lo, hi, counts = attrs.min_gram_length, attrs.max_gram_length, attrs.ngram_counts
    pool, indexes = attrs.pool, attrs.ngram_indexes
    if not 1 <= lo <= hi:
        raise OpTypeError(f"min_gram_length {lo} and max_gram_length {hi} must satisfy "
                          "1 <= min <= max")
    if attrs.max_skip_count < 0:
        raise OpTypeError(f"max_skip_count must be >= 0, got {attrs.max_skip_count}")
    if not counts or counts[0] != 0 or any(b < a for a, b in zip(counts, counts[1:])) \
            or counts[-1] > len(pool):
        raise OpTypeError(f"ngram_counts must start at 0 and rise to at most the pool's "
                          f"{len(pool)} tokens, got {list(counts)}")
    if not indexes or min(indexes) < 0:
        raise OpTypeError("ngram_indexes must be one or more columns >= 0, got "
                          f"{list(indexes)}")
    table, number = {}, 0
    for k, begin in enumerate(counts, start=1):
        end = counts[k] if k < len(counts) else len(pool)
        if (end - begin) % k:
            raise OpTypeError(f"the pool's {k}-grams span {end - begin} tokens, not a multiple "
                              f"of {k}")
        for start in range(begin, end, k):
            if number >= len(indexes):
                raise OpTypeError(f"ngram_indexes has {len(indexes)} columns, fewer than the "
                                  "pool's n-grams")
            if lo <= k <= hi:
                table[tuple(pool[start:start + k])] = indexes[number]
            number += 1
    if number != len(indexes):
        raise OpTypeError(f"ngram_indexes has {len(indexes)} columns but the pool holds "
                          f"{number} n-grams")
    width = max(indexes) + 1
    if attrs.weights and len(attrs.weights) < width:
        raise OpTypeError(f"weights has {len(attrs.weights)} entries, fewer than the "
                          f"{width} output columns")
    return table


def _tfidf_type(attrs, d):
    data = tensor_arg(d, "data")
    if data.dtype not in ("int64", "int32"):
        raise OpTypeError(f"data must be int64 or int32 tokens, got {data.dtype}")
    if data.ndim not in (1, 2):
        raise OpTypeError(f"data must be (C,) or (B, C), got {fmt_shape(data.shape)}")
    pool_table(attrs)
    return TensorType(tuple(data.shape[:-1]) + (max(attrs.ngram_indexes) + 1,), "float32")


def _tfidf_ref(attrs, x):
    require(x.ndim in (1, 2), f"tfidf_vectorizer: data must be (C,) or (B, C), got {x.shape}")
    table = pool_table(attrs)
    width = max(attrs.ngram_indexes) + 1
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], width), np.int64)
    lo, hi = attrs.min_gram_length, attrs.max_gram_length
    for r, row in enumerate(rows.tolist()):
        for step in range(1, attrs.max_skip_count + 2):
            first = lo if step == 1 else max(lo, 2)  # unigrams at skip 0 only
            for start in range(len(row)):
                for k in range(first, hi + 1):
                    if start + (k - 1) * step >= len(row):
                        break
                    column = table.get(tuple(row[start:start + (k - 1) * step + 1:step]))
                    if column is not None:
                        counts[r, column] += 1
            if step >= len(row):  # wider skips fit no n-gram of two tokens
                break
    w = np.asarray(attrs.weights[:width], np.float64) if attrs.weights else None
    if attrs.mode == "TF":
        out = counts.astype(np.float64)
    elif attrs.mode == "IDF":
        out = np.where(counts > 0, 1.0 if w is None else w, 0.0)
    else:
        out = counts * (1.0 if w is None else w)
    return out.astype(np.float32).reshape(x.shape[:-1] + (width,))


register("tfidf_vectorizer", inputs=("data",), infer=_tfidf_type, reference=_tfidf_ref,
         pattern=OPAQUE,
         attrs=[attr("mode", choice(*MODES), required=True),
                attr("min_gram_length", INT, required=True),
                attr("max_gram_length", INT, required=True),
                attr("max_skip_count", INT, required=True),
                attr("ngram_counts", INTS, required=True),
                attr("ngram_indexes", INTS, required=True),
                attr("pool", INTS, required=True),
                attr("weights", FLOAT_LIST, ())],
         doc="counts (TF), weights of the present (IDF) or weighted counts (TFIDF) of a pool's "
             "n-grams, with skips, in (C,) or (B, C) integer tokens, as ONNX TfIdfVectorizer")
