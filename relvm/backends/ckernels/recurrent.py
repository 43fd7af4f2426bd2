"""C kernels for nn.lstm, nn.gru and nn.rnn: one C call per direction runs the whole sequence,
on relvm's GEMM; constant weights are packed for it once per VM."""

from __future__ import annotations

import numpy as np

from ...ops import recurrent as recurrent_ops
from . import kernel
from .common import attrs_of, check, library, remember, shape_error

_DEFAULTS = {"nn.lstm": ("sigmoid", "tanh", "tanh"), "nn.gru": ("sigmoid", "tanh"),
             "nn.rnn": ("tanh",)}
#: Per op: its C cell and number of gates.
_CELLS = {"nn.lstm": ("RELVM_CELL_LSTM", 4), "nn.gru": ("RELVM_CELL_GRU", 3),
          "nn.rnn": ("RELVM_CELL_RNN", 1)}


def _activations(lib, attrs, op: str, d: int):
    """Per gate group of direction d: (C code, alpha, beta), as the reference picks them."""
    per = len(_DEFAULTS[op])
    names = attrs.activations or _DEFAULTS[op] * (2 if attrs.direction == "bidirectional" else 1)
    out = []
    for k in range(per):
        i = per * d + k
        alpha, beta = recurrent_ops.ACTIVATION_DEFAULTS.get(names[i], (0.0, 0.0))
        if attrs.activation_alpha is not None:
            alpha = attrs.activation_alpha[i]
        if attrs.activation_beta is not None:
            beta = attrs.activation_beta[i]
        out.append((getattr(lib, "RELVM_ACT_" + names[i].upper()), float(alpha), float(beta)))
    return out + [(0, 0.0, 0.0)] * (3 - per)


def _plan(ffi, lib, attrs, op: str, shapes, out_shapes):
    """Per direction, the C struct; checks the shapes as the reference's type relation does."""
    lstm, (cell, gates) = op == "nn.lstm", _CELLS[op]
    x, w, r, b, lens, h0 = shapes[:6]
    dirs, hidden = (2 if attrs.direction == "bidirectional" else 1), attrs.hidden_size
    if len(x) != 3:
        raise shape_error(f"{op}: data must be (seq, batch, input)", data=x)
    seq, batch, width = x
    want = {"weight_ih": (w, (dirs, gates * hidden, width)),
            "weight_hh": (r, (dirs, gates * hidden, hidden)),
            "bias": (b, (dirs, 2 * gates * hidden))}
    if lstm:
        want["peephole"] = (shapes[7], (dirs, 3 * hidden))
    for name, (got, shape) in want.items():
        if got != shape:
            raise ValueError(f"{name} {got} must be {shape}")
    if lens not in ((0,), (batch,)):
        raise ValueError(f"sequence_lens {lens} must be (batch,) = ({batch},)")
    states = [h0, shapes[6]] if lstm else [h0]
    for name, s in zip(("initial_h", "initial_c"), states):
        if s not in ((dirs, batch, hidden), (dirs, 1, hidden)):
            raise ValueError(f"{name} {s} must be ({dirs}, {batch} or 1, {hidden})")
    expected = [(seq, dirs, batch, hidden)] + [(dirs, batch, hidden)] * len(states)
    if list(out_shapes) != expected:
        raise shape_error(f"{op}: wrong output shapes", data=x)
    plans = []
    for d in range(dirs):
        acts = _activations(lib, attrs, op, d)
        plans.append(ffi.new("struct relvm_rnn *", dict(
            seq=seq, batch=batch, input=width, hidden=hidden, dirs=dirs, dir=d,
            cell=getattr(lib, cell),
            reverse=int(attrs.direction == "reverse" or d == 1),
            input_forget=int(bool(attrs.get("input_forget", False))),
            linear_before_reset=int(bool(attrs.get("linear_before_reset", False))),
            has_clip=int(attrs.clip is not None), clip=float(attrs.clip or 0.0),
            act=[a[0] for a in acts], alpha=[a[1] for a in acts], beta=[a[2] for a in acts],
            h0_stride=hidden if h0[1] == batch else 0,
            c0_stride=hidden if lstm and shapes[6][1] == batch else 0)))
    return plans


def _lengths(lens: np.ndarray, seq: int, batch: int) -> np.ndarray:
    if lens.size == 0:
        return np.full(batch, seq, np.int64)
    if not ((lens >= 0) & (lens <= seq)).all():
        raise ValueError(f"sequence_lens {lens.tolist()} must lie in [0, {seq}]")
    return lens.astype(np.int64)


def _aligned(count: int) -> np.ndarray:
    """``count`` float32s starting on a 64-byte boundary (the GEMM reads packed weights with
    aligned vector loads)."""
    buf = np.empty(max(count, 1) + 16, np.float32)
    start = (-buf.ctypes.data % 64) // 4
    return buf[start:start + max(count, 1)]


def _packing(ffi, lib, gates: int, w: np.ndarray, r: np.ndarray):
    """Every direction's w and r packed for the GEMM: [(w pointer, r pointer)] per direction
    (the arrays are kept alive by the list they come in)."""
    dirs, _, width = w.shape
    hidden = r.shape[2]
    sizes = ffi.new("int64_t[2]")
    lib.relvm_rnn_packed_sizes(gates, width, hidden, sizes, sizes + 1)
    keep, pointers = [], []
    ptr = ffi.from_buffer
    for d in range(dirs):
        wp, rp = _aligned(sizes[0]), _aligned(sizes[1])
        lib.relvm_rnn_pack(gates, width, hidden, ffi.cast("float *", ptr(w[d])),
                           ffi.cast("float *", ptr(r[d])), ffi.cast("float *", ptr(wp)),
                           ffi.cast("float *", ptr(rp)))
        keep += [wp, rp]
        pointers.append((ffi.cast("float *", ptr(wp)), ffi.cast("float *", ptr(rp))))
    return keep, pointers


def make_recurrent(entry, constants=None):
    ffi, lib = library()
    attrs, op = attrs_of(entry), entry.op
    lstm, gates = op == "nn.lstm", _CELLS[op][1]
    n_in = len(entry.inputs)
    run_direction, ptr, plans = lib.relvm_rnn_direction, ffi.from_buffer, {}
    fptr = lambda a, offset=0: ptr("float[]", a) + offset  # noqa: E731
    null = ffi.NULL
    full_lengths: dict[tuple[int, int], np.ndarray] = {}  # every sequence full: (seq, batch)

    def packed(w: np.ndarray, r: np.ndarray):
        """Per direction (w, r) packed, when both are the VM's constants (packed once per VM,
        shared by every thread); else None: each call packs them."""
        if constants is None or not (constants.holds(w) and constants.holds(r)):
            return None
        return constants.prepared(w, ("rnn", id(r), gates),
                                  lambda: _packing(ffi, lib, gates, w, r))[1]

    def run(*args):
        ins, outs = args[:n_in], args[n_in:]
        key = tuple(a.shape for a in ins) + tuple(o.shape for o in outs)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _plan(ffi, lib, attrs, op, key[:n_in], key[n_in:]))
        x, w, r, b, lens, h0 = ins[:6]
        seq, batch = x.shape[:2]
        if lens.size:
            lengths = _lengths(lens, seq, batch)
        else:
            lengths = full_lengths.get((seq, batch))
            if lengths is None:
                lengths = remember(full_lengths, (seq, batch), _lengths(lens, seq, batch))
        lens_ptr = ptr("int64_t[]", lengths)
        pack = packed(w, r)
        for d, s in enumerate(plan):
            state = h0.shape[1] * h0.shape[2]
            status = run_direction(
                s, fptr(x), fptr(w, d * w[0].size), fptr(r, d * r[0].size), fptr(b, d * b[0].size),
                lens_ptr, fptr(h0, d * state),
                fptr(ins[6], d * ins[6].shape[1] * ins[6].shape[2]) if lstm else null,
                fptr(ins[7], d * ins[7].shape[1]) if lstm else null,
                fptr(outs[0]), fptr(outs[1], d * batch * s.hidden),
                fptr(outs[2], d * batch * s.hidden) if lstm else null,
                *(pack[d] if pack else (null, null)))
            check(status, f"{entry.name} {key}")
    return run


kernel("nn.lstm", dtypes=("float32",), with_constants=True)(make_recurrent)
kernel("nn.gru", dtypes=("float32",), with_constants=True)(make_recurrent)
kernel("nn.rnn", dtypes=("float32",), with_constants=True)(make_recurrent)
