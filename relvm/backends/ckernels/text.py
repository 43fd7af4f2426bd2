"""C kernel of tfidf_vectorizer: the pool's n-grams are sorted into one table per size when
the kernel is made (from the attributes), so C finds each n-gram of the input by a binary
search."""

from __future__ import annotations

import numpy as np

from ...ops import text as text_ops
from . import kernel
from .common import CODE, attrs_of, check, library, shape_error


def _tables(attrs):
    """(min_n, max_n, grams, starts, counts, firsts, columns): the counted n-grams of each size
    from min_n to max_n, sorted, as relvm_tfidf_vectorizer reads them."""
    table = text_ops.pool_table(attrs)
    lo = attrs.min_gram_length
    # No n-gram is longer than the pool's longest size: the tables stop there.
    hi = max(lo, min(attrs.max_gram_length, len(attrs.ngram_counts)))
    grams, starts, counts, firsts, columns = [], [], [], [], []
    for k in range(lo, hi + 1):
        rows = sorted(g for g in table if len(g) == k)
        starts.append(sum(len(g) for g in grams))
        firsts.append(len(columns))
        counts.append(len(rows))
        grams += rows
        columns += [table[g] for g in rows]
    flat = np.array([t for g in grams for t in g] or [0], np.int64)
    as64 = [np.array(v or [0], np.int64) for v in (starts, counts, firsts, columns)]
    return lo, hi, flat, *as64


@kernel("tfidf_vectorizer", dtypes=("int64", "int32"))
def make_tfidf_vectorizer(entry):
    ffi, lib = library()
    attrs = attrs_of(entry)
    lo, hi, *arrays = _tables(attrs)
    width = max(attrs.ngram_indexes) + 1
    weights = np.array(attrs.weights[:width], np.float64) if attrs.weights else None
    keep = arrays + ([weights] if weights is not None else [])
    ptr = ffi.from_buffer
    grams, starts, counts, firsts, columns = (ffi.cast("int64_t *", ptr(a)) for a in arrays)
    w = ffi.cast("double *", ptr(weights)) if weights is not None else ffi.NULL
    mode = getattr(lib, f"RELVM_TFIDF_{attrs.mode}")
    dt, vectorize, name = CODE[entry.inputs[0]], lib.relvm_tfidf_vectorizer, entry.name

    def run(x, out):
        if x.ndim not in (1, 2) or out.shape != x.shape[:-1] + (width,):
            raise shape_error(f"{name}: data must be (C,) or (B, C) and the output "
                              f"(..., {width})", data=x.shape, output=out.shape)
        rows = x.shape[0] if x.ndim == 2 else 1
        status = vectorize(dt, rows, x.shape[-1], ptr(x), mode, lo, hi, attrs.max_skip_count,
                           grams, starts, counts, firsts, columns, w, width,
                           ffi.cast("float *", ptr(out)))
        if status:
            check(status, f"{name} {x.shape}")
    run.keep = keep  # the tables C reads live as long as the kernel
    return run
