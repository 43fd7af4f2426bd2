/* NonMaxSuppression (vision.h). ONNX Runtime's CPU kernel step for step: each box's corners
 * and area in float32 as it computes them (no contraction of a product into a sum, which would
 * round once where it rounds twice), candidates ordered by score then index, kept greedily. */
#include "vision.h"

#include <stdlib.h>

#include "relvm_config.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

typedef struct {
    float score;
    int64_t index;
} candidate;

/* Best first: higher score, then lower index. */
static int by_score(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static inline void min_max(float a, float b, float *lo, float *hi) {
    if (a >= b) {
        *lo = b;
        *hi = a;
    } else {
        *lo = a;
        *hi = b;
    }
}

/* corners (y_min, x_min, y_max, x_max) of box b. */
static void corners(const float *b, int center, float *c) {
    if (center) {
        float half_w = b[2] / 2.0f, half_h = b[3] / 2.0f;
        c[1] = b[0] - half_w;
        c[3] = b[0] + half_w;
        c[0] = b[1] - half_h;
        c[2] = b[1] + half_h;
    } else {
        min_max(b[0], b[2], &c[0], &c[2]);
        min_max(b[1], b[3], &c[1], &c[3]);
    }
}

static int suppresses(const float *a, const float *b, float iou_threshold) {
    float iy0 = a[0] > b[0] ? a[0] : b[0], iy1 = a[2] < b[2] ? a[2] : b[2];
    float ix0 = a[1] > b[1] ? a[1] : b[1], ix1 = a[3] < b[3] ? a[3] : b[3];
    if (!(iy1 > iy0) || !(ix1 > ix0)) return 0;
    float inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0.0f) return 0;
    float area_a = (a[3] - a[1]) * (a[2] - a[0]), area_b = (b[3] - b[1]) * (b[2] - b[0]);
    float uni = area_a + area_b - inter;
    if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return 0;
    return inter / uni > iou_threshold;
}

RELVM_EXPORT int relvm_nms(int center, int64_t batches, int64_t classes, int64_t n,
                           const float *boxes, const float *scores, int64_t max_output,
                           float iou_threshold, float score_threshold, int64_t *selected,
                           int64_t *count) {
    if (!(iou_threshold >= 0.0f && iou_threshold <= 1.0f)) return RELVM_UNSUPPORTED;
    int64_t total = batches * classes * n, k = 0;
    candidate *cand = malloc((size_t)(n ? n : 1) * sizeof *cand);
    float *box = malloc((size_t)(n ? n : 1) * 4 * sizeof *box);
    int64_t *kept = malloc((size_t)(n ? n : 1) * sizeof *kept);
    if (!cand || !box || !kept) {
        free(cand);
        free(box);
        free(kept);
        return RELVM_NO_MEMORY;
    }
    for (int64_t b = 0; b < batches && max_output > 0; b++) {
        for (int64_t i = 0; i < n; i++) corners(boxes + (b * n + i) * 4, center, box + i * 4);
        for (int64_t c = 0; c < classes; c++) {
            const float *s = scores + (b * classes + c) * n;
            int64_t m = 0, nkept = 0;
            for (int64_t i = 0; i < n; i++)
                if (s[i] > score_threshold) cand[m++] = (candidate){s[i], i};
            qsort(cand, (size_t)m, sizeof *cand, by_score);
            for (int64_t j = 0; j < m && nkept < max_output; j++) {
                const float *a = box + cand[j].index * 4;
                int keep = 1;
                for (int64_t q = 0; q < nkept && keep; q++)
                    if (suppresses(a, box + kept[q] * 4, iou_threshold)) keep = 0;
                if (!keep) continue;
                kept[nkept++] = cand[j].index;
                selected[k * 3] = b;
                selected[k * 3 + 1] = c;
                selected[k * 3 + 2] = cand[j].index;
                k++;
            }
        }
    }
    for (int64_t r = k * 3; r < total * 3; r++) selected[r] = -1;
    *count = k;
    free(cand);
    free(box);
    free(kept);
    return RELVM_OK;
}
