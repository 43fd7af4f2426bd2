"""C kernels of the detection ops: vision.non_max_suppression (``kernels/vision.c``),
vision.roi_align and vision.max_roi_pool (``kernels/roi.c``)."""

from __future__ import annotations

import numpy as np

from ...ops import roi as roi_ops
from . import kernel
from .common import CODE, attrs_of, check, library, shape_error


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


# --- vision.roi_align, vision.max_roi_pool (kernels/roi.c) ---------------------------------------

def _roi_failure(lib, status: int, bad, what: str, raise_for_roi) -> None:
    """Raise for a roi kernel's status: for the roi C names, the reference's own error."""
    if status in (lib.RELVM_BAD_INDEX, lib.RELVM_TOO_LARGE):
        raise_for_roi(int(bad[0]))
    check(status, what)


@kernel("vision.roi_align", dtypes=("float32", "float64"),
        accepts=lambda e: e.inputs[1:] == (e.inputs[0], "int64") and e.outputs[0] == e.inputs[0])
def make_roi_align(entry):
    ffi, lib = library()
    attrs, name = attrs_of(entry), entry.name
    fixed = (CODE[entry.inputs[0]], int(attrs.mode == "max"),
             int(attrs.coordinate_transformation_mode == "half_pixel"))
    sizes = (attrs.output_height, attrs.output_width, attrs.sampling_ratio,
             float(np.float32(attrs.spatial_scale)), roi_ops.MAX_GRID)
    align, ptr, bad = lib.relvm_roi_align, ffi.from_buffer, ffi.new("int64_t[1]")

    def run(x, rois, batch, out):
        k = rois.shape[0] if rois.ndim == 2 else -1
        if x.ndim != 4 or rois.shape != (k, 4) or batch.shape != (k,):
            raise shape_error(f"{name}: data must be (N, C, H, W), rois (num_rois, 4) and "
                              "batch_indices (num_rois,)", data=x.shape, rois=rois.shape,
                              batch_indices=batch.shape)
        if out.shape != (k, x.shape[1], attrs.output_height, attrs.output_width):
            raise shape_error(f"{name}: wrong output shape", data=x.shape, rois=rois.shape,
                              output=out.shape)

        def raise_for_roi(i):
            roi_ops.check_batch_indices("vision.roi_align", batch, x.shape[0])
            roi_ops.roi_geometry(attrs, rois[i], i)
            raise AssertionError(f"{name}: C refused roi {i}, the reference did not")

        status = align(*fixed, *x.shape, k, *sizes, ptr(x), ptr(rois),
                       ffi.cast("int64_t *", ptr(batch)), ptr(out), bad)
        if status:
            _roi_failure(lib, status, bad, f"{name} of {x.shape}, {rois.shape}", raise_for_roi)
    return run


@kernel("vision.max_roi_pool", dtypes=("float32",),
        accepts=lambda e: e.inputs[1] == "float32" and e.outputs[0] == "float32")
def make_max_roi_pool(entry):
    ffi, lib = library()
    attrs, name = attrs_of(entry), entry.name
    ph, pw = attrs.pooled_shape
    scale = float(np.float32(attrs.spatial_scale))
    pool, ptr, bad = lib.relvm_max_roi_pool, ffi.from_buffer, ffi.new("int64_t[1]")

    def run(x, rois, out):
        k = rois.shape[0] if rois.ndim == 2 else -1
        if x.ndim != 4 or rois.shape != (k, 5):
            raise shape_error(f"{name}: data must be (N, C, H, W) and rois (num_rois, 5)",
                              data=x.shape, rois=rois.shape)
        if out.shape != (k, x.shape[1], ph, pw):
            raise shape_error(f"{name}: wrong output shape", data=x.shape, rois=rois.shape,
                              output=out.shape)

        def raise_for_roi(i):
            roi_ops.max_roi_pool_batch("vision.max_roi_pool", rois[i, 0], i, x.shape[0])
            raise AssertionError(f"{name}: C refused roi {i}, the reference did not")

        status = pool(*x.shape, k, ph, pw, scale, roi_ops.CLAMP,
                      ffi.cast("float *", ptr(x)), ffi.cast("float *", ptr(rois)),
                      ffi.cast("float *", ptr(out)), bad)
        if status:
            _roi_failure(lib, status, bad, f"{name} of {x.shape}, {rois.shape}", raise_for_roi)
    return run
