/* image.col2im (relvm/ops/image.py): sliding blocks summed back into an image. */
#ifndef RELVM_COL2IM_H
#define RELVM_COL2IM_H
#include <stdint.h>

/* y (planes, image[0], ..., image[k-1]) = the sum of the blocks of x (planes, prod(block),
 * prod(blocks)): entry (p, o, l) of x, o a block offset (row-major over block) and l a block
 * (row-major over blocks), adds to the image at l_i * stride_i - pad_i + o_i * dilation_i
 * per axis, where that lies inside. 1 <= k <= 8; float32 (summed in float32, in order of the
 * offsets then the blocks) or float64. */
int relvm_col2im(int dtype, int64_t planes, int k, const int64_t *image, const int64_t *block,
                 const int64_t *blocks, const int64_t *dilation, const int64_t *pad,
                 const int64_t *stride, const void *x, void *y);
#endif
