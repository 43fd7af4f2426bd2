"""vision.non_max_suppression: its type relation over symbolic dims, its errors, the text round
trip with the run-time checks, and the reference against a plain greedy suppression written
from ONNX's definition (IoU in float64 on boxes whose float32 IoU is exact enough)."""

import numpy as np
import pytest

import relvm
from relvm.ir.dims import Sym
from ophelpers import T, infer, run

b, c, n = Sym("b"), Sym("c"), Sym("n")
RNG = np.random.default_rng(19)
OP = "vision.non_max_suppression"
ONE = (T((), "int64"), T((1,)), T(()))


def test_types_over_symbolic_dims():
    sel, count = infer(OP, T((b, n, 4)), T((b, c, n)), *ONE).fields
    assert sel == T((b * c * n, 3), "int64") and count == T((), "int64")
    assert infer(OP, T((2, 5, 4)), T((2, 3, 5)), T((1,), "int64"), T(()), T((1,)),
                 center_point_box=True).fields[0] == T((30, 3), "int64")


@pytest.mark.parametrize("types, message", [
    ((T((2, 5, 3)), T((2, 3, 5))), r"boxes must have shape \(batch, boxes, 4\), got \(2, 5, 3\)"),
    ((T((2, 5, 4)), T((2, 5))), r"scores must have shape \(batch, classes, boxes\)"),
    ((T((2, 5, 4)), T((3, 3, 5))), r"boxes \(2, 5, 4\) and scores \(3, 3, 5\) differ in their "
                                   r"batch count"),
    ((T((2, 5, 4)), T((2, 3, 6))), r"differ in their box count"),
    ((T((2, 5, 4), "float64"), T((2, 3, 5))), r"boxes must have dtype float32, got float64"),
])
def test_type_errors(types, message):
    with pytest.raises(relvm.ops.registry.OpTypeError, match=message):
        infer(OP, *types, *ONE)


def test_threshold_type_errors():
    with pytest.raises(relvm.ops.registry.OpTypeError,
                       match=r"max_output_boxes_per_class must have dtype int64, got int32"):
        infer(OP, T((1, 5, 4)), T((1, 3, 5)), T((), "int32"), T(()), T(()))
    with pytest.raises(relvm.ops.registry.OpTypeError,
                       match=r"iou_threshold must hold one value \(a scalar or shape \(1,\)\), "
                             r"got \(2\)"):
        infer(OP, T((1, 5, 4)), T((1, 3, 5)), T((), "int64"), T((2,)), T(()))


def _iou(p, q, center):
    def corners(v):
        if center:
            x, y, w, h = v
            return y - h / 2, x - w / 2, y + h / 2, x + w / 2
        return min(v[0], v[2]), min(v[1], v[3]), max(v[0], v[2]), max(v[1], v[3])
    a, e = corners([float(t) for t in p]), corners([float(t) for t in q])
    h = min(a[2], e[2]) - max(a[0], e[0])
    w = min(a[3], e[3]) - max(a[1], e[1])
    if h <= 0 or w <= 0:
        return 0.0
    inter = h * w
    area_a, area_e = (a[2] - a[0]) * (a[3] - a[1]), (e[2] - e[0]) * (e[3] - e[1])
    return inter / (area_a + area_e - inter)


def _greedy(boxes, scores, max_out, iou, score, center):
    out = []
    for bi in range(scores.shape[0]):
        for ci in range(scores.shape[1]):
            order = sorted((i for i in range(scores.shape[2]) if scores[bi, ci, i] > score),
                           key=lambda i: (-scores[bi, ci, i], i))
            kept = []
            for i in order:
                if len(kept) < max_out and all(
                        _iou(boxes[bi, i], boxes[bi, j], center) <= iou for j in kept):
                    kept.append(i)
            out += [(bi, ci, i) for i in kept]
    return np.array(out, np.int64).reshape(-1, 3)


def _random_boxes(shape_b, center):
    """Integer coordinates (IoUs far from ties in float32), some with the corners flipped."""
    boxes = RNG.integers(0, 12, shape_b).astype(np.float32)
    if center:
        boxes[..., 2:] = RNG.integers(1, 6, boxes[..., 2:].shape)
    return boxes


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("max_out, iou, score", [(3, 0.5, 0.0), (100, 0.3, -np.inf),
                                                 (0, 0.5, 0.0), (2, 0.0, 0.4), (5, 1.0, 0.2)])
def test_reference_against_a_plain_greedy(center, max_out, iou, score):
    for _ in range(10):
        boxes = _random_boxes((2, 9, 4), center)
        scores = RNG.integers(0, 5, (2, 3, 9)).astype(np.float32) / 4  # ties
        sel, count = run(OP, boxes, scores, np.array(max_out), np.float32(iou),
                         np.float32(score), center_point_box=center)
        want = _greedy(boxes, scores, max_out, iou, score, center)
        assert count == len(want) and sel.shape == (54, 3)
        np.testing.assert_array_equal(sel[:count], want)
        assert (sel[count:] == -1).all()


def test_ties_keep_the_lower_index_and_empty_boxes_never_suppress():
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 5]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.9, 0.5]]], np.float32)
    sel, count = run(OP, boxes, scores, np.array([10]), np.array([0.5], np.float32),
                     np.array([0.0], np.float32))
    # box 2 (flipped corners of box 0) first; it suppresses 0 and 1; box 3 has no area.
    np.testing.assert_array_equal(sel[:count], [[0, 0, 2], [0, 0, 3]])


def test_text_round_trip_and_run_time_checks():
    text = """
    def @main(%boxes: Tensor[(b, n, 4), float32], %scores: Tensor[(b, c, n), float32],
              %k: Tensor[(1), int64], %iou: Tensor[(1), float32], %s: Tensor[(), float32]) {
      %0 = vision.non_max_suppression(%boxes, %scores, %k, %iou, %s, center_point_box=True);
      %1 = arange(0i64, %0.1, 1i64);
      take(%0.0, %1, axis=0)
    }"""
    mod = relvm.parse(text)
    assert relvm.parse(relvm.print_module(mod)) == mod
    vm = relvm.VirtualMachine(relvm.build(mod, backend="numpy"))
    boxes = _random_boxes((1, 6, 4), True)
    scores = RNG.random((1, 2, 6)).astype(np.float32)
    got = vm.invoke("main", boxes, scores, np.array([3]), np.array([0.4], np.float32),
                    np.float32(0.1))
    np.testing.assert_array_equal(got, _greedy(boxes, scores, 3, 0.4, 0.1, True))
    with pytest.raises(relvm.RelvmRuntimeError, match=r"vision.non_max_suppression: "
                                                      r"iou_threshold 1.5 must be in \[0, 1\]"):
        vm.invoke("main", boxes, scores, np.array([3]), np.array([1.5], np.float32),
                  np.float32(0.1))
