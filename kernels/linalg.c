/* Determinants (linalg.h): each matrix copied to float64, factored in place by Gaussian
 * elimination with partial pivoting (the largest magnitude in the column below the diagonal),
 * the determinant the product of the pivots, its sign flipped per row swap. Matrices are
 * threaded over. */
#include "linalg.h"

#include <math.h>
#include <stdlib.h>

#include "relvm_config.h"
#include "threads.h"

struct det_args {
    int dtype;
    int64_t m;
    const void *x;
    void *out;
    int failed;
};

static double det_of(double *a, int64_t m) {
    double det = 1.0;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = k;
        double best = fabs(a[k * m + k]);
        for (int64_t i = k + 1; i < m; i++)
            if (fabs(a[i * m + k]) > best) {
                best = fabs(a[i * m + k]);
                p = i;
            }
        if (p != k) {
            for (int64_t j = 0; j < m; j++) {
                double t = a[k * m + j];
                a[k * m + j] = a[p * m + j];
                a[p * m + j] = t;
            }
            det = -det;
        }
        double pivot = a[k * m + k];
        det *= pivot;
        if (pivot == 0.0) return det * 0.0; /* singular (NaN stays NaN) */
        for (int64_t i = k + 1; i < m; i++) {
            double f = a[i * m + k] / pivot;
            for (int64_t j = k + 1; j < m; j++) a[i * m + j] -= f * a[k * m + j];
        }
    }
    return det;
}

static void det_range(void *ctx, int64_t begin, int64_t end) {
    struct det_args *g = ctx;
    int64_t m = g->m, mm = m * m;
    double *a = malloc((size_t)(mm ? mm : 1) * sizeof *a);
    if (!a) {
        g->failed = 1;
        return;
    }
    for (int64_t b = begin; b < end; b++) {
        if (g->dtype == RELVM_FLOAT32) {
            const float *x = (const float *)g->x + b * mm;
            for (int64_t i = 0; i < mm; i++) a[i] = x[i];
            ((float *)g->out)[b] = (float)det_of(a, m);
        } else {
            const double *x = (const double *)g->x + b * mm;
            for (int64_t i = 0; i < mm; i++) a[i] = x[i];
            ((double *)g->out)[b] = det_of(a, m);
        }
    }
    free(a);
}

RELVM_EXPORT int relvm_det(int dtype, int64_t batch, int64_t m, const void *x, void *out) {
    if (dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) return RELVM_UNSUPPORTED;
    struct det_args g = {dtype, m, x, out, 0};
    int64_t work = m * m * m + 1;
    relvm_parallel_for(batch, RELVM_GRAIN / work + 1, det_range, &g);
    return g.failed ? RELVM_NO_MEMORY : RELVM_OK;
}
