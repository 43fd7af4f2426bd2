/* image.grid_sample: channels-first data sampled at the points of a grid, as ONNX GridSample
 * (relvm/ops/grid_sample.py gives the rules; this kernel follows them number for number). */
#ifndef RELVM_GRID_SAMPLE_H
#define RELVM_GRID_SAMPLE_H
#include <stdint.h>

enum relvm_grid_method { RELVM_GRID_NEAREST, RELVM_GRID_LINEAR, RELVM_GRID_CUBIC };
enum relvm_grid_padding { RELVM_GRID_ZEROS, RELVM_GRID_BORDER, RELVM_GRID_REFLECTION };

/* y (batch, channels, points) = x (batch, channels, in[0], ..., in[rank - 1]) sampled at grid
 * (batch, points, rank): point p of batch n reads its coordinates innermost axis first
 * (grid[n, p, 0] is along in[rank - 1]). rank is 1, 2 or 3; dtype (x and y) and grid_dtype
 * are float32 or float64 (relvm_dtype codes); positions are computed in grid_dtype, weights
 * and sums in float64. Threaded over blocks of points, each block's taps computed once for
 * every channel. */
int relvm_grid_sample(int dtype, int grid_dtype, int method, int padding, int align_corners,
                      int rank, int64_t batch, int64_t channels, const int64_t *in,
                      int64_t points, const void *x, const void *grid, void *y);
#endif
