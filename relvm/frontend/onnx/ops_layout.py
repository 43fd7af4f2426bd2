"""Ops that move entries between axes or to a new extent: SpaceToDepth, DepthToSpace (a
reshape, a transpose and a reshape: exact over symbolic dims, since the reshapes only split a
dim by the block size and merge dims), CenterCropPad (a slice and a pad; over a symbolic dim,
whether it is cropped or padded depends on its size, so both are computed at run time) and
AffineGrid (a constant grid of coordinates times each theta).
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import check_made_size, converter, norm_axes, scalar
from .importer import Node
from .ops_shape import fit_at_run_time


def _blocksize(n: Node) -> int:
    if n.rank(0) != 4:
        raise n.fail(f"input must be 4-d (N, C, H, W), got {D.shape_str(n.shape(0))}")
    b = int(n.required("blocksize"))
    if b < 1:
        raise n.fail(f"blocksize must be positive, got {b}")
    return b


def _mode(n: Node) -> str:
    mode = n.attr("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("DCR", "CRD"):
        raise n.fail(f"mode must be DCR or CRD, got {mode!r}")
    return mode


@converter("SpaceToDepth")
def space_to_depth(n: Node):
    """DCR (the default): the output channels are (b, b, C); CRD: (C, b, b)."""
    b = _blocksize(n)
    x = n.call("reshape", n.x(0), newshape=[0, 0, -4, -1, b, -4, -1, b])  # N C H/b b W/b b
    dcr = _mode(n) == "DCR"
    x = n.call("transpose", x, axes=[0, 3, 5, 1, 2, 4] if dcr else [0, 1, 3, 5, 2, 4])
    x = n.call("reshape", x, newshape=[0, -3, -2])
    return n.call("reshape", x, newshape=[0, -3, -2])


@converter("DepthToSpace")
def depth_to_space(n: Node):
    b = _blocksize(n)
    x = n.x(0)
    if _mode(n) == "DCR":  # C = (b, b, C/b^2)
        x = n.call("reshape", x, newshape=[0, -4, b, -1, -2])
        x = n.call("reshape", x, newshape=[0, 0, -4, b, -1, -2])
        x = n.call("transpose", x, axes=[0, 3, 4, 1, 5, 2])
    else:  # C = (C/b^2, b, b)
        x = n.call("reshape", x, newshape=[0, -4, -1, b * b, -2])
        x = n.call("reshape", x, newshape=[0, 0, -4, b, b, -2])
        x = n.call("transpose", x, axes=[0, 1, 4, 2, 5, 3])
    return n.call("reshape", x, newshape=[0, 0, -3, -3])  # N C/b^2 H*b W*b


@converter("CenterCropPad")
def center_crop_pad(n: Node):
    rank, shape = n.rank(0), n.shape(0)
    target = n.ints(1, "shape")
    axes = list(range(rank)) if n.attr("axes") is None else \
        norm_axes(n, list(n.attr("axes")), rank)
    if len(target) != len(axes):
        raise n.fail(f"shape {target} must have one entry per axis {axes}")
    x = n.x(0)
    crop: list[tuple[int, int, int]] = []
    widths = [[0, 0] for _ in range(rank)]
    for a, t in zip(axes, target):
        d = shape[a]
        if t < 0:
            raise n.fail(f"shape {target} holds a negative size")
        if not isinstance(d, int):
            # the middle min(d, t), then the shortfall split, the smaller half before
            x = fit_at_run_time(n, x, a, t, smaller_first=True, split_pad=True)
            continue
        if t < d:
            begin = (d - t) // 2
            crop.append((a, begin, begin + t))
        elif t > d:
            before = (t - d) // 2
            widths[a] = [before, t - d - before]
    if crop:
        x = n.call("strided_slice", x, begin=[c[1] for c in crop], end=[c[2] for c in crop],
                   axes=[c[0] for c in crop])
    if any(max(w) for w in widths):
        fill = False if n.dtype(0) == "bool" else 0
        x = n.call("nn.pad", x, scalar(n, fill, n.dtype(0)), pad_width=widths)
    return x


@converter("AffineGrid")
def affine_grid(n: Node):
    """theta (N, k, k+1) applied to the homogeneous coordinates of every output position,
    [x, y, (z,) 1], each in [-1, 1] (a constant grid of the size input): one batch_matmul."""
    size = n.ints(1, "size")
    spatial = len(size) - 2
    if spatial not in (2, 3) or any(s < 1 for s in size):
        raise n.fail(f"size {size} must be (N, C, H, W) or (N, C, D, H, W) of positive sizes")
    theta_shape, dtype = n.shape(0), n.dtype(0)
    if len(theta_shape) != 3 or any(isinstance(d, int) and d != want for d, want in
                                    zip(theta_shape[1:], (spatial, spatial + 1))):
        raise n.fail(f"theta must be (N, {spatial}, {spatial + 1}) for size {size}, got "
                     f"{D.shape_str(theta_shape)}")
    if dtype not in ("float32", "float64"):
        raise n.fail(f"theta must be float32 or float64, got {dtype}")
    align = bool(n.attr("align_corners", 0))

    def coordinates(count: int) -> np.ndarray:
        i = np.arange(count, dtype=np.float64)
        if align:
            return -1 + 2 * i / (count - 1) if count > 1 else np.full(1, -1.0)
        return (2 * i + 1) / count - 1

    dims = size[2:]
    check_made_size(n, int(np.prod(dims, dtype=object)) * (spatial + 1), "the grid")
    axes = np.meshgrid(*[coordinates(d) for d in dims], indexing="ij")  # (z,) y, x
    columns = [a.reshape(-1) for a in reversed(axes)] + [np.ones(int(np.prod(dims)))]
    base = n.constant(np.stack(columns, axis=1)[None].astype(dtype))  # (1, S, k + 1)
    grid = n.call("nn.batch_matmul", base, n.x(0), transpose_b=True)  # (N, S, k)
    return n.call("reshape", grid, newshape=[0, *dims, spatial])
