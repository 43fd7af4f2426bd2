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
