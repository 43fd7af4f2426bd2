/* Loop nests over broadcast or strided operands. A nest has ndim dims (the last innermost) and
 * up to NEST_MAX_OPS operands, each a base pointer with a byte stride per dim (0 broadcasts).
 * Kernels visit it row by row, a row being the innermost dim at one position of the others,
 * so rows can be split among threads. Internal: not cdef. */
#ifndef RELVM_INTERNAL_NEST_H
#define RELVM_INTERNAL_NEST_H
#include <stdint.h>
#include "../threads.h"

#define NEST_MAX_OPS 4
#define NEST_MAX_DIMS 64 /* the Python side refuses more (NumPy's own limit) */

struct nest {
    int ndim, nops;
    int64_t shape[NEST_MAX_DIMS];
    char *base[NEST_MAX_OPS];
    int64_t stride[NEST_MAX_OPS][NEST_MAX_DIMS]; /* bytes */
};

typedef void (*nest_row_fn)(void *ctx, char *const *ptrs, int64_t n);

/* Operand `op` walks `elem_strides` (in elements of `itemsize` bytes), or is contiguous. */
static inline void nest_operand(struct nest *t, int op, const void *base, int64_t itemsize,
                                const int64_t *elem_strides) {
    t->base[op] = (char *)base;
    int64_t contiguous = itemsize;
    for (int d = t->ndim - 1; d >= 0; --d) {
        t->stride[op][d] = elem_strides ? elem_strides[d] * itemsize : contiguous;
        contiguous *= t->shape[d];
    }
}

/* Merges the nest of `nops` operands over `shape` (ndim dims; st: each operand's element
 * strides per dim) into *nd dims: dims of 1 dropped, each dim merged into the one before it
 * where every operand's strides line up (a contiguous run, or a broadcast along both). At
 * least one dim. The same as ckernels.common.merge_dims. */
static inline void nest_merge(int nops, int ndim, const int64_t *shape,
                              int64_t (*st)[NEST_MAX_DIMS], int *nd, int64_t *merged,
                              int64_t (*strides)[NEST_MAX_DIMS]) {
    int n = 0;
    for (int d = 0; d < ndim; ++d) {
        const int64_t len = shape[d];
        if (len == 1) continue;
        int merge = n > 0;
        for (int i = 0; merge && i < nops; ++i) merge = strides[i][n - 1] == st[i][d] * len;
        if (merge) {
            merged[n - 1] *= len;
        } else {
            merged[n] = len;
            ++n;
        }
        for (int i = 0; i < nops; ++i) strides[i][n - 1] = st[i][d];
    }
    if (n == 0) {
        merged[0] = 1;
        for (int i = 0; i < nops; ++i) strides[i][0] = 1;
        n = 1;
    }
    *nd = n;
}

/* The loop nest of `nin` inputs broadcast (NumPy's rule) to a contiguous output: writes its
 * ndim, shape and each input's element strides (0 where it broadcasts), merged (nest_merge).
 * With `exact`, the output's shape must be exactly the inputs' broadcast (its rank the largest
 * input's: a binary op's); without, it may be larger (broadcast_to's). -1 where it does not
 * fit. What a kernel computes from the shapes of the call in front of it, so a call on shapes
 * never seen before plans nothing in Python. `strides` has nin + 1 rows: the output's last. */
static inline int nest_broadcast(int nin, const int *ndims, const int64_t *const *shapes,
                                 int ndim_out, const int64_t *out_shape, int exact, int *ndim,
                                 int64_t *shape, int64_t (*strides)[NEST_MAX_DIMS]) {
    if (nin < 1 || nin >= NEST_MAX_OPS || ndim_out < 0 || ndim_out > NEST_MAX_DIMS) return -1;
    int64_t st[NEST_MAX_OPS][NEST_MAX_DIMS]; /* inputs, then the output; per output dim */
    int widest = 0;
    for (int i = 0; i < nin; ++i) {
        if (ndims[i] < 0 || ndims[i] > ndim_out) return -1;
        if (ndims[i] > widest) widest = ndims[i];
    }
    if (exact && widest != ndim_out) return -1;
    for (int d = 0; d < ndim_out; ++d) {
        int64_t want = 1;
        if (out_shape[d] < 0) return -1;
        for (int i = 0; i < nin; ++i) {
            const int at = d - (ndim_out - ndims[i]);
            const int64_t n = at >= 0 ? shapes[i][at] : 1;
            if (n < 0 || (n != 1 && n != out_shape[d])) return -1;
            if (n != 1) want = n;
        }
        if (exact && want != out_shape[d]) return -1;
    }
    for (int i = 0; i <= nin; ++i) {
        int64_t run = 1;
        for (int d = ndim_out - 1; d >= 0; --d) {
            const int at = i == nin ? d : d - (ndim_out - ndims[i]);
            const int64_t n = at >= 0 ? (i == nin ? out_shape[d] : shapes[i][at]) : 1;
            st[i][d] = n == 1 && i < nin ? 0 : run;
            run *= n;
        }
    }
    nest_merge(nin + 1, ndim_out, out_shape, st, ndim, shape, strides);
    return 0;
}

static inline int64_t nest_rows(const struct nest *t) {
    int64_t rows = 1;
    for (int d = 0; d < t->ndim - 1; ++d) rows *= t->shape[d];
    return rows;
}

/* row(ctx, ptrs, n) for rows [begin, end), ptrs[op] pointing at each operand's row start. */
static inline void nest_walk(const struct nest *t, int64_t begin, int64_t end, nest_row_fn row,
                             void *ctx) {
    const int outer = t->ndim - 1;
    int64_t idx[NEST_MAX_DIMS];
    char *p[NEST_MAX_OPS];
    for (int op = 0; op < t->nops; ++op) p[op] = t->base[op];
    int64_t r = begin;
    for (int d = outer - 1; d >= 0; --d) {
        idx[d] = r % t->shape[d];
        r /= t->shape[d];
        for (int op = 0; op < t->nops; ++op) p[op] += idx[d] * t->stride[op][d];
    }
    for (int64_t i = begin; i < end; ++i) {
        row(ctx, p, t->shape[outer]);
        for (int d = outer - 1; d >= 0; --d) {
            for (int op = 0; op < t->nops; ++op) p[op] += t->stride[op][d];
            if (++idx[d] < t->shape[d]) break;
            for (int op = 0; op < t->nops; ++op) p[op] -= t->stride[op][d] * t->shape[d];
            idx[d] = 0;
        }
    }
}
struct nest_job {
    const struct nest *t;
    nest_row_fn row;
    void *ctx;
};

/* A chunk of rows; a one-dim nest is one long row, split by elements instead. */
static inline void nest_job_range(void *arg, int64_t begin, int64_t end) {
    const struct nest_job *j = arg;
    if (j->t->ndim > 1) {
        nest_walk(j->t, begin, end, j->row, j->ctx);
        return;
    }
    char *p[NEST_MAX_OPS];
    for (int op = 0; op < j->t->nops; ++op) p[op] = j->t->base[op] + begin * j->t->stride[op][0];
    j->row(j->ctx, p, end - begin);
}

/* Visit the whole nest on the thread pool, about `grain` elements per chunk at least. */
static inline void nest_run(const struct nest *t, nest_row_fn row, void *ctx, int64_t grain) {
    struct nest_job j = {t, row, ctx};
    if (t->ndim == 1) {
        relvm_parallel_for(t->shape[0], grain, nest_job_range, &j);
        return;
    }
    const int64_t len = t->shape[t->ndim - 1] > 0 ? t->shape[t->ndim - 1] : 1;
    relvm_parallel_for(nest_rows(t), grain / len > 0 ? grain / len : 1, nest_job_range, &j);
}
#endif
