/* tfidf_vectorizer. The pool's n-grams come sorted, one table per size, so each n-gram of the
 * input is found by a binary search: rows x starts x skips x sizes searches of log2(pool)
 * comparisons. Rows are independent and run on the thread pool. */
#include <stdint.h>
#include <string.h>
#include "relvm_config.h"
#include "text.h"
#include "threads.h"

struct tfidf_job {
    int dtype, mode;
    int64_t cols, min_n, max_n, max_skip, width;
    const void *x;
    const int64_t *grams, *start, *count, *first, *columns;
    const double *weights;
    float *y;
};

static int64_t token(const struct tfidf_job *j, int64_t i) {
    return j->dtype == RELVM_INT32 ? (int64_t)((const int32_t *)j->x)[i]
                                   : ((const int64_t *)j->x)[i];
}

/* -1, 0 or 1 as the n-gram of k tokens at at, at + step, ... compares with gram. */
static int compare(const struct tfidf_job *j, int64_t at, int64_t step, int64_t k,
                   const int64_t *gram) {
    for (int64_t t = 0; t < k; ++t) {
        int64_t v = token(j, at + t * step);
        if (v != gram[t]) return v < gram[t] ? -1 : 1;
    }
    return 0;
}

/* The column of the n-gram of k tokens at at (every step-th token), or -1 if not in the pool. */
static int64_t find(const struct tfidf_job *j, int64_t at, int64_t step, int64_t k) {
    int64_t s = k - j->min_n, lo = 0, hi = j->count[s];
    const int64_t *table = j->grams + j->start[s];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = compare(j, at, step, k, table + mid * k);
        if (c == 0) return j->columns[j->first[s] + mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return -1;
}

static void tfidf_rows(void *ctx, int64_t begin, int64_t end) {
    const struct tfidf_job *j = ctx;
    int64_t n = j->cols;
    for (int64_t r = begin; r < end; ++r) {
        float *y = j->y + r * j->width;
        int64_t base = r * n;
        memset(y, 0, (size_t)j->width * sizeof(float));
        /* A skip past n - 1 fits no n-gram of two tokens: steps stop at max(n - 1, 1). */
        int64_t last = j->max_skip < n - 1 ? j->max_skip + 1 : (n > 1 ? n - 1 : 1);
        for (int64_t step = 1; step <= last; ++step) {
            int64_t first = step == 1 || j->min_n > 1 ? j->min_n : 2; /* unigrams once */
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t k = first; k <= j->max_n; ++k) {
                    if ((k - 1) > (n - 1 - i) / step) break; /* its last token is past the row */
                    int64_t c = find(j, base + i, step, k);
                    if (c >= 0) y[c] += 1.0f;
                }
            }
        }
        if (j->mode == RELVM_TFIDF_TF) continue;
        for (int64_t c = 0; c < j->width; ++c) {
            double w = j->weights ? j->weights[c] : 1.0;
            if (j->mode == RELVM_TFIDF_IDF) y[c] = y[c] > 0.0f ? (float)w : 0.0f;
            else y[c] = (float)(w * (double)y[c]);
        }
    }
}

RELVM_EXPORT int relvm_tfidf_vectorizer(int dtype, int64_t rows, int64_t cols, const void *x,
                                        int mode, int64_t min_n, int64_t max_n,
                                        int64_t max_skip, const int64_t *grams,
                                        const int64_t *table_start, const int64_t *table_count,
                                        const int64_t *table_first, const int64_t *columns,
                                        const double *weights, int64_t width, float *y) {
    if ((dtype != RELVM_INT64 && dtype != RELVM_INT32) || rows < 0 || cols < 0 || width < 1 ||
        min_n < 1 || max_n < min_n || max_skip < 0 || mode < RELVM_TFIDF_TF ||
        mode > RELVM_TFIDF_TFIDF)
        return RELVM_UNSUPPORTED;
    struct tfidf_job j = {dtype, mode, cols, min_n, max_n, max_skip, width, x, grams,
                          table_start, table_count, table_first, columns, weights, y};
    if (rows > 0) relvm_parallel_for(rows, 1, tfidf_rows, &j);
    return RELVM_OK;
}
