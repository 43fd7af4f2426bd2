/* Col2Im (col2im.h): per plane, the image zeroed, then each block offset's row of x added
 * where it lands, walking the blocks with an odometer over the spatial axes. Planes are
 * threaded over. */
#include "col2im.h"

#include <string.h>

#include "relvm_config.h"
#include "internal/types.h"
#include "threads.h"

#define MAX_AXES 8

struct col2im_job {
    int dtype, k;
    int64_t image[MAX_AXES], block[MAX_AXES], blocks[MAX_AXES], dil[MAX_AXES], pad[MAX_AXES],
        stride[MAX_AXES], image_size, block_size, count;
    const void *x;
    void *y;
};

#define COL2IM_PLANE(T)                                                                       \
    static void plane_##T(const struct col2im_job *j, const T *x, T *y) {                    \
        const int k = j->k;                                                                   \
        memset(y, 0, (size_t)j->image_size * sizeof(T));                                     \
        int64_t off[MAX_AXES] = {0};                                                          \
        for (int64_t o = 0; o < j->block_size; ++o) {                                         \
            const T *row = x + o * j->count;                                                  \
            int64_t at[MAX_AXES] = {0};                                                       \
            for (int64_t l = 0; l < j->count; ++l) {                                          \
                int64_t pos = 0, inside = 1;                                                  \
                for (int a = 0; a < k; ++a) {                                                 \
                    int64_t p = at[a] * j->stride[a] - j->pad[a] + off[a] * j->dil[a];        \
                    if (p < 0 || p >= j->image[a]) {                                          \
                        inside = 0;                                                           \
                        break;                                                                \
                    }                                                                         \
                    pos = pos * j->image[a] + p;                                              \
                }                                                                             \
                if (inside) y[pos] += row[l];                                                 \
                for (int a = k - 1; a >= 0; --a) { /* next block */                           \
                    if (++at[a] < j->blocks[a]) break;                                        \
                    at[a] = 0;                                                                \
                }                                                                             \
            }                                                                                 \
            for (int a = k - 1; a >= 0; --a) { /* next offset */                              \
                if (++off[a] < j->block[a]) break;                                            \
                off[a] = 0;                                                                   \
            }                                                                                 \
        }                                                                                     \
    }

COL2IM_PLANE(float)
COL2IM_PLANE(double)

static void col2im_planes(void *ctx, int64_t begin, int64_t end) {
    const struct col2im_job *j = ctx;
    const int64_t in = j->block_size * j->count;
    for (int64_t p = begin; p < end; ++p) {
        if (j->dtype == RELVM_FLOAT32)
            plane_float(j, (const float *)j->x + p * in, (float *)j->y + p * j->image_size);
        else
            plane_double(j, (const double *)j->x + p * in, (double *)j->y + p * j->image_size);
    }
}

RELVM_EXPORT int relvm_col2im(int dtype, int64_t planes, int k, const int64_t *image,
                              const int64_t *block, const int64_t *blocks,
                              const int64_t *dilation, const int64_t *pad,
                              const int64_t *stride, const void *x, void *y) {
    if ((dtype != RELVM_FLOAT32 && dtype != RELVM_FLOAT64) || k < 1 || k > MAX_AXES ||
        planes < 0)
        return RELVM_UNSUPPORTED;
    struct col2im_job j = {.dtype = dtype, .k = k, .image_size = 1, .block_size = 1, .count = 1,
                           .x = x, .y = y};
    for (int a = 0; a < k; ++a) {
        if (image[a] < 0 || block[a] < 1 || blocks[a] < 0 || dilation[a] < 1 || stride[a] < 1)
            return RELVM_UNSUPPORTED;
        j.image[a] = image[a];
        j.block[a] = block[a];
        j.blocks[a] = blocks[a];
        j.dil[a] = dilation[a];
        j.pad[a] = pad[a];
        j.stride[a] = stride[a];
        j.image_size *= image[a];
        j.block_size *= block[a];
        j.count *= blocks[a];
    }
    const int64_t work = relvm_max64(1, j.block_size * j.count + j.image_size);
    relvm_parallel_for(planes, relvm_max64(1, RELVM_GRAIN / work), col2im_planes, &j);
    return RELVM_OK;
}
