"""C kernels for attention's masked softmax and rotary embeddings (``kernels/attention.c``)."""

from __future__ import annotations

from . import kernel
from .common import CODE, FLOATS, attrs_of, broadcast_strides, check, library, remember, \
    shape_error


def _softmax_plan(ffi, attrs, name, scores, bias, positions, out):
    if len(scores) != 4 or out != scores:
        raise shape_error(f"{name}: scores must be 4-d and the output its shape", scores=scores,
                          output=out)
    batch, heads, q, kv = scores
    if len(positions) != 2 or positions[1] != 2 or positions[0] not in (1, batch):
        raise shape_error(f"{name}: positions must be (1, 2) or ({batch}, 2)",
                          positions=positions)
    lead = bias[:-1]
    if len(bias) > 4 or any(d not in (1, w) for d, w in zip(lead, scores[3 - len(lead):3])) \
            or (bias and bias[-1] > kv):
        raise shape_error(f"{name}: bias does not broadcast over (batch, heads, q) of the "
                          f"scores with at most {kv} keys", bias=bias, scores=scores)
    rows = (1,) * (3 - len(lead)) + lead
    steps = broadcast_strides(rows, scores[:3]) if bias else (0, 0, 0)
    row = bias[-1] if bias else 1
    return ffi.new("struct relvm_attention_shape *", dict(
        batch=batch, heads=heads, q=q, kv=kv, bias_batch=steps[0] * row,
        bias_head=steps[1] * row, bias_row=steps[2] * row, bias_len=bias[-1] if bias else -1,
        positions_batch=2 if positions[0] > 1 else 0, left=attrs.left_window,
        right=attrs.right_window, has_bias=1, causal=int(attrs.causal),
        logits=int(attrs.logits), scale=float(attrs.scale), softcap=float(attrs.softcap)))


@kernel("nn.attention_softmax", dtypes=FLOATS)
def make_attention_softmax(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    softmax, ptr, name, plans = lib.relvm_attention_softmax, ffi.from_buffer, entry.name, {}

    def run(scores, bias, positions, out):
        key = (scores.shape, bias.shape, positions.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _softmax_plan(ffi, attrs, name, *key))
        check(softmax(dt, plan, ptr(scores), ptr(bias),
                      ffi.cast("const int64_t *", ptr(positions)), ptr(out)), name)
    return run


_AXES = {"BHSD": (0, 2, 1), "BSHD": (0, 1, 2)}  # batch, seq, heads


def _rotary_plan(ffi, attrs, name, x, cos, sin, out):
    if len(x) != 4 or out != x:
        raise shape_error(f"{name}: data must be 4-d and the output its shape", data=x,
                          output=out)
    axes = _AXES[attrs.layout]
    batch, seq, heads = (x[a] for a in axes)
    head = x[3]
    rotary = attrs.rotary_dim or head
    if rotary > head or rotary % 2:
        raise ValueError(f"{name}: rotary_dim {rotary} must be even and at most the head size "
                         f"{head} of data {x}")
    for what, t in (("cos", cos), ("sin", sin)):
        if len(t) != 3 or t[0] not in (1, batch) or t[1:] != (seq, rotary // 2):
            raise shape_error(f"{name}: {what} must be ({batch} or 1, {seq}, {rotary // 2})",
                              data=x, **{what: t})
    strides = (x[1] * x[2] * head, x[2] * head, head)
    return ffi.new("struct relvm_rotary_shape *", dict(
        batch=batch, seq=seq, heads=heads, head=head, rotary=rotary,
        stride_batch=strides[axes[0]], stride_seq=strides[axes[1]],
        stride_head=strides[axes[2]], cos_batch=seq if cos[0] > 1 else 0,
        interleaved=int(attrs.interleaved)))


@kernel("nn.rotary_embedding", dtypes=FLOATS)
def make_rotary_embedding(entry):
    ffi, lib = library()
    attrs, dt = attrs_of(entry), CODE[entry.inputs[0]]
    rotary, ptr, name, plans = lib.relvm_rotary_embedding, ffi.from_buffer, entry.name, {}

    def run(x, cos, sin, out):
        key = (x.shape, cos.shape, sin.shape, out.shape)
        plan = plans.get(key)
        if plan is None:
            plan = remember(plans, key, _rotary_plan(ffi, attrs, name, *key))
        check(rotary(dt, plan, ptr(x), ptr(cos), ptr(sin), ptr(out)), name)
    return run
