/* conv2d_transpose: OpenBLAS's sgemm gives every input pixel's contribution through every tap
 * (W^T x), then col2im adds them into the output. */
#include <string.h>
#include "relvm_config.h"
#include "blas.h"
#include "conv.h"
#include "internal/conv_shared.h"
#include "internal/types.h"
#include "threads.h"

/* Outputs ox in [*lo, *hi) read inside [0, size) at ox * stride + offset; the rest read padding. */
static inline void inside_range(int64_t offset, int64_t stride, int64_t size, int64_t count,
                                int64_t *lo, int64_t *hi) {
    int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t end = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
    if (first > count) first = count;
    if (end > count) end = count;
    if (end < first) end = first;
    *lo = first;
    *hi = end;
}

struct col2im {
    const struct relvm_conv2d_shape *s;
    const float *col; /* (opg * kh * kw) x (h * w) */
    float *y;         /* the group's first output channel */
};

/* Output channel o gathers its rows (o, i, j) of col: channels never share a write. */
static void col2im_channels(void *ctx, int64_t begin, int64_t end) {
    const struct col2im *j = ctx;
    const struct relvm_conv2d_shape *s = j->s;
    const int64_t plane = s->h * s->w;
    for (int64_t o = begin; o < end; ++o) {
        float *out = j->y + o * s->oh * s->ow;
        memset(out, 0, (size_t)(s->oh * s->ow) * sizeof(float));
        for (int64_t i = 0; i < s->kh; ++i) {
            int64_t ylo, yhi;
            inside_range(i * s->dh - s->pt, s->sh, s->oh, s->h, &ylo, &yhi);
            for (int64_t jj = 0; jj < s->kw; ++jj) {
                const int64_t offset = jj * s->dw - s->pl;
                int64_t xlo, xhi;
                inside_range(offset, s->sw, s->ow, s->w, &xlo, &xhi);
                const float *col = j->col + ((o * s->kh + i) * s->kw + jj) * plane;
                for (int64_t y = ylo; y < yhi; ++y) {
                    float *row = out + (y * s->sh + i * s->dh - s->pt) * s->ow + offset;
                    const float *src = col + y * s->w;
                    if (s->sw == 1) {
                        for (int64_t x = xlo; x < xhi; ++x) row[x] += src[x];
                    } else {
                        for (int64_t x = xlo; x < xhi; ++x) row[x * s->sw] += src[x];
                    }
                }
            }
        }
    }
}

static int conv_transpose_f32(const struct relvm_conv2d_shape *s, const float *x,
                              const float *w, float *y) {
    const int64_t icg = s->c / s->groups, ocg = s->oc / s->groups;
    const int64_t rows = ocg * s->kh * s->kw, plane = s->h * s->w;
    float *col = relvm_conv_scratch_floats((size_t)(rows * plane));
    if (!col) return RELVM_NO_MEMORY;
    for (int64_t n = 0; n < s->n; ++n) {
        for (int64_t g = 0; g < s->groups; ++g) {
            /* col = W_g^T x_g: W_g is stored icg x rows. */
            relvm_sgemm_batch(1, 0, 1, rows, plane, icg, w + g * icg * rows, 0,
                              x + (n * s->c + g * icg) * plane, 0, col);
            struct col2im j = {s, col, y + (n * s->oc + g * ocg) * s->oh * s->ow};
            const int64_t work = relvm_max64(1, s->kh * s->kw * plane);
            relvm_parallel_for(ocg, relvm_max64(1, RELVM_GRAIN / work), col2im_channels, &j);
        }
    }
    return RELVM_OK;
}

RELVM_EXPORT int relvm_conv2d_transpose(int dtype, const struct relvm_conv2d_shape *s,
                                        const void *x, const void *w, void *y) {
    if (dtype != RELVM_FLOAT32 || !valid_shape(s)) return RELVM_UNSUPPORTED;
    const int64_t total = s->n * s->oc * s->oh * s->ow;
    if (total == 0) return RELVM_OK;
    if (s->c == 0 || s->h * s->w == 0) { /* nothing to scatter: all zeros */
        memset(y, 0, (size_t)total * sizeof(float));
        return RELVM_OK;
    }
    if (!relvm_blas_ready()) return RELVM_NO_BLAS;
    const int64_t rows = s->oc / s->groups * s->kh * s->kw;
    if (rows > INT32_MAX || s->h * s->w > INT32_MAX || s->c > INT32_MAX) return RELVM_TOO_LARGE;
    return conv_transpose_f32(s, x, w, y);
}
