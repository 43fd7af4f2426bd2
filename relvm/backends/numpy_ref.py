"""The NumPy reference backend: every kernel is its op's NumPy reference, in DPS form.

It exists for tests and as the living definition of each op; compiled C kernels replace it for
speed. It reads the op registry (relvm.ops), which is pure Python and imports neither lark nor
the compiler.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import RelvmFormatError
from ..ir.nodes import Attrs
from .. import ops as _ops  # noqa: F401  (registers every op)
from ..ops.fused import run_steps, steps_from_json
from ..ops.registry import OPS, AttrError


def make_kernel(entry, constants=None) -> Callable[..., None]:
    """The reference kernel for ``entry`` (``constants`` is unused: nothing to prepare)."""
    if entry.op == "fused":
        try:
            steps = steps_from_json(entry.attrs["steps"])
        except (KeyError, ValueError, TypeError, AttrError) as e:
            raise RelvmFormatError(f"fused kernel {entry.name!r} is malformed: {e}",
                                   section="kernels") from None
        attrs = Attrs()
        reference = lambda attrs, *inputs: run_steps(steps, inputs)  # noqa: E731
    else:
        op = OPS.get(entry.op)
        if op is None:
            raise RelvmFormatError(f"kernel {entry.name!r} needs op {entry.op!r}, which this "
                                   f"relvm does not have", section="kernels")
        attrs = Attrs({k: _freeze(v) for k, v in entry.attrs.items()})
        reference = op.reference
    n_in = len(entry.inputs)
    groups = entry.groups or (-1,) * n_in

    def kernel(*args: Any) -> None:
        with np.errstate(all="ignore"):
            result = reference(attrs, *_regroup(args[:n_in], groups))
        _write(result, args[n_in:])
    kernel.__name__ = entry.name
    return kernel


def _regroup(flat: tuple, groups: tuple[int, ...]) -> list:
    """Rebuild the op's inputs from flattened tensors: tuple inputs become tuples again."""
    out, i = [], 0
    for g in groups:
        if g < 0:
            out.append(flat[i])
            i += 1
        else:
            out.append(tuple(flat[i:i + g]))
            i += g
    return out


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _write(result: Any, outs: tuple) -> None:
    leaves = list(_flatten(result))
    if len(leaves) != len(outs):
        raise RuntimeError(f"kernel produced {len(leaves)} results for {len(outs)} outputs")
    for r, out in zip(leaves, outs):
        if r.shape != out.shape:
            raise RuntimeError(f"kernel result of shape {r.shape} does not match its output "
                               f"of shape {out.shape}")
        np.copyto(out, r, casting="unsafe")


def _flatten(v: Any):
    if isinstance(v, tuple):
        for x in v:
            yield from _flatten(x)
    else:
        yield np.asarray(v)
