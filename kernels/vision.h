/* Detection ops (relvm/ops/vision.py): ONNX NonMaxSuppression as ONNX Runtime computes it. */
#ifndef RELVM_VISION_H
#define RELVM_VISION_H
#include <stdint.h>

/* boxes (batches, n, 4) and scores (batches, classes, n), float32. For each batch and class,
 * the boxes scoring above score_threshold, best first (equal scores: lower index first), each
 * kept unless a box kept before it in its class overlaps it with IoU above iou_threshold; at
 * most max_output per class (0 or less: none). center: boxes are [x_c, y_c, w, h], else
 * [y1, x1, y2, x2] with either corner first. selected (batches * classes * n, 3) gets the kept
 * [batch, class, box] triples in that order, then -1 in every other row; *count their number.
 * RELVM_UNSUPPORTED for an iou_threshold outside [0, 1]; RELVM_NO_MEMORY. */
int relvm_nms(int center, int64_t batches, int64_t classes, int64_t n, const float *boxes,
              const float *scores, int64_t max_output, float iou_threshold,
              float score_threshold, int64_t *selected, int64_t *count);
#endif
