"""Detection ops: ``vision.non_max_suppression`` (ONNX NonMaxSuppression).

Semantics fixed here, which the C kernel (``kernels/vision.c``) follows -- ONNX Runtime's CPU
kernel, step for step:

* ``boxes`` (B, N, 4) and ``scores`` (B, C, N), float32. A box is ``[y1, x1, y2, x2]`` (either
  corner first: each pair is ordered by min/max) or, with ``center_point_box``, ``[x_c, y_c,
  w, h]``.
* For each batch b and class c, the candidates are the boxes whose score is above
  ``score_threshold`` (strictly), visited best score first, equal scores lower index first. A
  candidate is kept unless its IoU with a box already kept for (b, c) is above
  ``iou_threshold`` (strictly); a pair that does not overlap, or a box of no area, never
  suppresses. At most ``max_output_boxes_per_class`` are kept per (b, c) (0 or less: none).
  IoU is computed in float32 as ONNX Runtime computes it.
* The result is every kept ``[b, c, box index]`` in order of b, then c, then keeping order.

The op's outputs have a static shape: ``selected`` (B*C*N, 3) int64 holds the kept triples in
its first ``count`` rows (the rest are -1), and ``count`` is a 0-d int64. The ONNX importer
takes the first ``count`` rows (``arange`` + ``take``), the run-time length relvm's other
data-dependent ops have: the suppression runs once, in C, where a dim program would have run
it a second time to size the result.

``max_output_boxes_per_class`` (int64), ``iou_threshold`` and ``score_threshold`` (float32)
are tensors of one element (0-d or 1-d), so they may come from the running program; an
``iou_threshold`` outside [0, 1] is a run-time error, as in ONNX Runtime.
"""

from __future__ import annotations

import numpy as np

from ..ir import dims as D
from ..ir.types import TensorType, TupleType
from .common import check_dtype, differ, fmt_shape, require, tensor_arg
from .registry import BOOL, OPAQUE, OpTypeError, attr, register


def _one_element(t: TensorType, name: str, dtypes: tuple[str, ...]) -> None:
    check_dtype(t, name, dtypes, "dtype " + " or ".join(dtypes))
    if t.ndim > 1 or (t.ndim == 1 and not D.equal_or_assumed(t.shape[0], 1)):
        raise OpTypeError(f"{name} must hold one value (a scalar or shape (1,)), got "
                          f"{fmt_shape(t.shape)}")


def _nms_type(attrs, boxes, scores, max_output, iou_threshold, score_threshold):
    b, s = tensor_arg(boxes, "boxes"), tensor_arg(scores, "scores")
    check_dtype(b, "boxes", ("float32",), "dtype float32")
    check_dtype(s, "scores", ("float32",), "dtype float32")
    if b.ndim != 3 or differ(b.shape[2], 4):
        raise OpTypeError(f"boxes must have shape (batch, boxes, 4), got {fmt_shape(b.shape)}")
    if s.ndim != 3:
        raise OpTypeError(f"scores must have shape (batch, classes, boxes), got "
                          f"{fmt_shape(s.shape)}")
    for bi, si, what in ((0, 0, "batch"), (1, 2, "box")):
        if differ(b.shape[bi], s.shape[si]):
            raise OpTypeError(f"boxes {fmt_shape(b.shape)} and scores {fmt_shape(s.shape)} "
                              f"differ in their {what} count")
    _one_element(tensor_arg(max_output, "max_output_boxes_per_class"),
                 "max_output_boxes_per_class", ("int64",))
    _one_element(tensor_arg(iou_threshold, "iou_threshold"), "iou_threshold", ("float32",))
    _one_element(tensor_arg(score_threshold, "score_threshold"), "score_threshold",
                 ("float32",))
    rows = s.shape[0] * s.shape[1] * s.shape[2]
    return TupleType((TensorType((rows, 3), "int64"), TensorType((), "int64")))


def _corners(box: np.ndarray, center: bool) -> tuple:
    """(y_min, x_min, y_max, x_max) of one box, in float32 as ONNX Runtime computes them."""
    f = np.float32
    if center:
        xc, yc, w, h = (f(v) for v in box)
        half_w, half_h = f(w / f(2)), f(h / f(2))
        return f(yc - half_h), f(xc - half_w), f(yc + half_h), f(xc + half_w)
    y1, x1, y2, x2 = (f(v) for v in box)
    return min(y1, y2), min(x1, x2), max(y1, y2), max(x1, x2)


def suppresses(a: np.ndarray, b: np.ndarray, center: bool, iou_threshold: np.float32) -> bool:
    """Whether kept box ``b`` suppresses candidate ``a``: IoU above the threshold."""
    f = np.float32
    ay0, ax0, ay1, ax1 = _corners(a, center)
    by0, bx0, by1, bx1 = _corners(b, center)
    iy0, iy1, ix0, ix1 = max(ay0, by0), min(ay1, by1), max(ax0, bx0), min(ax1, bx1)
    if iy1 <= iy0 or ix1 <= ix0:
        return False
    inter = f(f(ix1 - ix0) * f(iy1 - iy0))
    if inter <= 0:
        return False
    area_a, area_b = f(f(ax1 - ax0) * f(ay1 - ay0)), f(f(bx1 - bx0) * f(by1 - by0))
    union = f(f(area_a + area_b) - inter)
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(f(inter / union) > iou_threshold)


def nms_select(boxes, scores, max_output: int, iou_threshold, score_threshold,
               center: bool) -> np.ndarray:
    """The kept [b, c, i] triples, (k, 3) int64, in ONNX Runtime's order."""
    iou_threshold, score_threshold = np.float32(iou_threshold), np.float32(score_threshold)
    require(0 <= iou_threshold <= 1, f"vision.non_max_suppression: iou_threshold "
            f"{float(iou_threshold)} must be in [0, 1]")
    out = []
    batches, classes, n = scores.shape
    with np.errstate(all="ignore"):
        for b in range(batches):
            for c in range(classes):
                s = scores[b, c]
                candidates = [i for i in range(n) if s[i] > score_threshold]
                candidates.sort(key=lambda i: (-s[i], i))  # best first, ties by index
                kept: list[int] = []
                for i in candidates:
                    if len(kept) >= max_output:
                        break
                    if not any(suppresses(boxes[b, i], boxes[b, j], center, iou_threshold)
                               for j in kept):
                        kept.append(i)
                        out.append((b, c, i))
    return np.array(out, np.int64).reshape(-1, 3)


def _one(v, name: str):
    a = np.asarray(v)
    require(a.size == 1, f"vision.non_max_suppression: {name} must hold one value, got shape "
            f"{a.shape}")
    return a.reshape(-1)[0]


def _nms_ref(attrs, boxes, scores, max_output, iou_threshold, score_threshold):
    require(boxes.ndim == 3 and scores.ndim == 3 and boxes.shape[2] == 4
            and boxes.shape[0] == scores.shape[0] and boxes.shape[1] == scores.shape[2],
            f"vision.non_max_suppression: boxes {boxes.shape} and scores {scores.shape} do not "
            "agree (boxes (batch, boxes, 4), scores (batch, classes, boxes))")
    kept = nms_select(boxes, scores, int(_one(max_output, "max_output_boxes_per_class")),
                      _one(iou_threshold, "iou_threshold"),
                      _one(score_threshold, "score_threshold"), attrs.center_point_box)
    selected = np.full((scores.size, 3), -1, np.int64)
    selected[:len(kept)] = kept
    return selected, np.array(len(kept), np.int64)


register("vision.non_max_suppression",
         inputs=("boxes", "scores", "max_output_boxes_per_class", "iou_threshold",
                 "score_threshold"),
         infer=_nms_type, reference=_nms_ref, pattern=OPAQUE,
         attrs=[attr("center_point_box", BOOL, False)],
         doc="ONNX NonMaxSuppression as ONNX Runtime computes it: (selected (B*C*N, 3) int64, "
             "its first count rows the kept [batch, class, box] triples, the rest -1; count, a "
             "0-d int64)")
