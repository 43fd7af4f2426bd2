"""C kernel of vision.non_max_suppression (``kernels/vision.c``)."""

from __future__ import annotations

import numpy as np

from . import kernel
from .common import attrs_of, check, library, shape_error


def _one(a, what: str, name: str):
    a = np.asarray(a)
    if a.size != 1:
        raise ValueError(f"{name}: {what} must hold one value, got shape {a.shape}")
    return a.reshape(-1)[0]


@kernel("vision.non_max_suppression", dtypes=("float32",),
        accepts=lambda e: e.inputs[1:] == ("float32", "int64", "float32", "float32"))
def make_nms(entry):
    ffi, lib = library()
    center, name, nms = int(attrs_of(entry).center_point_box), entry.name, lib.relvm_nms
    ptr = ffi.from_buffer

    def run(boxes, scores, max_output, iou_threshold, score_threshold, selected, count):
        batches, classes, n = scores.shape
        if boxes.shape != (batches, n, 4):
            raise ValueError(f"{name}: boxes {boxes.shape} and scores {scores.shape} do not "
                             "agree (boxes (batch, boxes, 4), scores (batch, classes, boxes))")
        if selected.shape != (batches * classes * n, 3) or count.shape != ():
            raise shape_error(f"{name}: wrong output shapes", selected=selected.shape,
                              count=count.shape)
        iou = float(_one(iou_threshold, "iou_threshold", name))
        if not 0.0 <= iou <= 1.0:
            raise ValueError(f"{name}: iou_threshold {iou} must be in [0, 1]")
        check(nms(center, batches, classes, n, ffi.cast("float *", ptr(boxes)),
                  ffi.cast("float *", ptr(scores)),
                  int(_one(max_output, "max_output_boxes_per_class", name)), iou,
                  float(_one(score_threshold, "score_threshold", name)),
                  ffi.cast("int64_t *", ptr(selected)), ffi.cast("int64_t *", ptr(count))),
              f"{name} of {boxes.shape}, {scores.shape}")
    return run
