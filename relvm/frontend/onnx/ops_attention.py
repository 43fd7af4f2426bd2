"""Attention (opsets 23-25) and RotaryEmbedding (opset 23).

Attention is two ``nn.batch_matmul``s (relvm's batched GEMM) around one
``nn.attention_softmax``, which applies the scale, the softcap, the mask, the causal and
sliding-window frames and the padding of ``nonpad_kv_seqlen`` in the same pass as the softmax.
Grouped-query attention never repeats K and V: Q's heads are viewed as (kv heads, group) and
the products broadcast K and V over the group. float16 runs in float32.
"""

from __future__ import annotations

import numpy as np

from ...ir import dims as D
from .converters import converter, make_tuple
from .importer import Node

#: "every key is valid" in nn.attention_softmax's positions
_ALL_KEYS = 2 ** 62


def _heads(n: Node, rank: int):
    """(q heads, kv heads, group): group is None when the head counts are symbolic and may
    differ (then known only at run time)."""
    if rank == 3:
        q_heads, kv_heads = n.attr("q_num_heads"), n.attr("kv_num_heads")
        if q_heads is None or kv_heads is None:
            raise n.fail("3-d Q, K and V need the q_num_heads and kv_num_heads attributes")
        q_heads, kv_heads = int(q_heads), int(kv_heads)
    else:
        q_heads, kv_heads = n.shape(0)[1], n.shape(1)[1]
    if isinstance(q_heads, int) and isinstance(kv_heads, int):
        if kv_heads < 1 or q_heads % kv_heads:
            raise n.fail(f"the {q_heads} query heads must be a multiple of the {kv_heads} "
                         f"key/value heads")
        return q_heads, kv_heads, q_heads // kv_heads
    return q_heads, kv_heads, 1 if D.prove_equal(q_heads, kv_heads) else None


def _split_heads(n: Node, x, heads: int):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    return n.call("transpose", n.call("reshape", x, newshape=[0, 0, heads, -1]),
                  axes=[0, 2, 1, 3])


def _grouped(n: Node, a, b, group, kv_heads, transpose_b: bool):
    """a (batch, kv_heads * group, m, k) times b (batch, kv_heads, ., .) per head group: a's
    heads viewed as (kv_heads, group), b broadcast over the group (never repeated)."""
    if group == 1:
        return n.call("nn.batch_matmul", a, b, transpose_b=transpose_b)
    if group is None:  # symbolic head counts: the group is a run-time value
        shape = n.call("concatenate", make_tuple([
            _dims(n, a, 0, 1), _dims(n, b, 1, 2), n.constant(np.array([-1], np.int64)),
            _dims(n, a, 2, 4)]), axis=0)
        a = n.call("dyn.reshape", a, shape)
    else:
        a = n.call("reshape", a, newshape=[0, -4, kv_heads, group, 0, 0])
    b = n.call("expand_dims", b, axis=2)
    y = n.call("nn.batch_matmul", a, b, transpose_b=transpose_b)
    return n.call("reshape", y, newshape=[0, -3, 0, 0])


def _dims(n: Node, x, begin: int, end: int):
    """x's dims begin..end as an int64 tensor (a constant when static)."""
    dims = x.checked_type.shape[begin:end]
    if all(isinstance(d, int) for d in dims):
        return n.constant(np.array(dims, np.int64))
    return n.call("strided_slice", n.call("shape_of", x, dtype="int64"), begin=[begin],
                  end=[end])


def _positions(n: Node, q, past_key):
    """nn.attention_softmax's (offset, valid keys) rows: per batch with nonpad_kv_seqlen."""
    if n.has(6):
        if past_key is not None:
            raise n.fail("nonpad_kv_seqlen cannot be combined with past_key and past_value")
        if n.rank(6) != 1:
            raise n.fail(f"nonpad_kv_seqlen must be 1-d (batch,), got rank {n.rank(6)}")
        valid = n.x(6)
        if n.dtype(6) != "int64":
            valid = n.call("cast", valid, dtype="int64")
        offset = n.call("subtract", valid, _dims(n, q, 2, 3))
        return n.call("concatenate", make_tuple([n.call("expand_dims", v, axis=1)
                                                 for v in (offset, valid)]), axis=1)
    if past_key is None:
        return n.constant(np.array([[0, _ALL_KEYS]], np.int64))
    both = n.call("concatenate", make_tuple([_dims(n, past_key, 2, 3),
                                             n.constant(np.array([_ALL_KEYS], np.int64))]),
                  axis=0)
    return n.call("reshape", both, newshape=[1, 2])


def _bias(n: Node, dtype: str):
    """The additive mask: attn_mask (booleans become 0 / -inf), or a scalar 0."""
    if not n.has(3):
        return n.constant(np.zeros((), dtype))
    mask = n.x(3)
    if n.dtype(3) == "bool":
        return n.call("where", mask, n.constant(np.zeros((), dtype)),
                      n.constant(np.array(-np.inf, dtype)))
    if n.dtype(3) != dtype:
        mask = n.call("cast", mask, dtype=dtype)
    if n.rank(3) > 4:
        raise n.fail(f"attn_mask must have rank <= 4, got rank {n.rank(3)}")
    return mask


@converter("Attention", composed="`nn.batch_matmul` (Q K^T), `nn.attention_softmax` (softcap, "
           "mask, causal and window frames, valid keys), `nn.batch_matmul` (P V); GQA views Q's "
           "heads as (kv heads, group) and broadcasts K and V, never repeating them")
def attention(n: Node):
    rank = n.rank(0)
    if rank not in (3, 4) or n.rank(1) != rank or n.rank(2) != rank:
        raise n.fail(f"Q, K and V must all be 3-d or all 4-d, got ranks {n.rank(0)}, "
                     f"{n.rank(1)} and {n.rank(2)}")
    dtype = n.dtype(0)
    if dtype not in ("float32", "float64", "float16"):
        raise n.fail(f"Q must be float32, float64 or float16, got {dtype}")
    work = "float32" if dtype == "float16" else dtype

    def load(i):
        x = n.x(i)
        return n.call("cast", x, dtype=work) if n.dtype(i) != work else x

    q_heads, kv_heads, group = _heads(n, rank)
    q, k, v = load(0), load(1), load(2)
    if rank == 3:
        q, k, v = _split_heads(n, q, q_heads), _split_heads(n, k, kv_heads), \
            _split_heads(n, v, kv_heads)
    if n.has(4) != n.has(5):
        raise n.fail("past_key and past_value must be given together")
    past_key = None
    if n.has(4):
        past_key = load(4)
        k = n.call("concatenate", make_tuple([past_key, k]), axis=2)
        v = n.call("concatenate", make_tuple([load(5), v]), axis=2)
    scale = _scale(n, q)
    if scale is None:  # 1 / sqrt(a symbolic head size): scale Q, a run-time value
        q = n.call("multiply", q, n.call("rsqrt", n.call("cast", _dims(n, q, 3, 4), dtype=work)))
        scale = 1.0
    scores = _grouped(n, q, k, group, kv_heads, transpose_b=True)
    frame = dict(scale=scale, causal=bool(n.attr("is_causal", 0)),
                 softcap=float(n.attr("softcap", 0.0)),
                 left_window=int(n.attr("left_window_size", -1)),
                 right_window=int(n.attr("right_window_size", -1)))
    bias, positions = _bias(n, work), _positions(n, q, past_key)
    probs = n.call("nn.attention_softmax", scores, bias, positions, **frame)
    y = _grouped(n, probs, v, group, kv_heads, transpose_b=False)
    if rank == 3:
        y = n.call("reshape", n.call("transpose", y, axes=[0, 2, 1, 3]), newshape=[0, 0, -1])
    outs = [y, k, v, _qk_output(n, scores, bias, positions, probs, frame, work)]
    if work != dtype:
        outs = [o if o is None else n.call("cast", o, dtype=dtype) for o in outs]
    return [o for i, o in enumerate(outs) if i < len(n.outputs)]


def _scale(n: Node, q) -> float | None:
    """The scale attribute, or 1 / sqrt(head size); None when the head size is symbolic."""
    scale = n.attr("scale")
    head = q.checked_type.shape[3]
    if scale is not None:
        return float(scale)
    return 1 / float(np.sqrt(head)) if isinstance(head, int) else None


def _qk_output(n: Node, scores, bias, positions, probs, frame, work):
    """qk_matmul_output as ONNX's reference gives it: the scaled (and capped) scores for
    modes 0 and 1, those plus the masks for 2, the probabilities for 3."""
    if not n.wants(3):
        return None
    mode = int(n.attr("qk_matmul_output_mode", 0))
    if mode == 3:
        return probs
    if mode == 2:
        return n.call("nn.attention_softmax", scores, bias, positions, logits=True, **frame)
    if mode not in (0, 1):
        raise n.fail(f"qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}")
    if frame["softcap"] <= 0 and frame["scale"] == 1:
        return scores
    return n.call("nn.attention_softmax", scores, n.constant(np.zeros((), work)),
                  n.constant(np.array([[0, _ALL_KEYS]], np.int64)), logits=True,
                  scale=frame["scale"], softcap=frame["softcap"])


@converter("RotaryEmbedding")
def rotary_embedding(n: Node):
    rank = n.rank(0)
    if rank not in (3, 4):
        raise n.fail(f"input must be 3-d (batch, seq, hidden) or 4-d (batch, heads, seq, "
                     f"head), got rank {rank}")
    dtype = n.dtype(0)
    work = "float32" if dtype == "float16" else dtype
    x, cos, sin = (n.x(i) if n.dtype(i) == work else n.call("cast", n.x(i), dtype=work)
                   for i in range(3))
    if n.has(3):
        if n.rank(1) != 2 or n.rank(2) != 2:
            raise n.fail("with position_ids, cos_cache and sin_cache must be 2-d "
                         f"(max_position, rotary_dim/2), got ranks {n.rank(1)} and {n.rank(2)}")
        ids = n.x(3)
        cos, sin = (n.call("take", c, ids, axis=0, mode="fast") for c in (cos, sin))
    elif n.rank(1) != 3 or n.rank(2) != 3:
        raise n.fail("without position_ids, cos_cache and sin_cache must be 3-d (batch, seq, "
                     f"rotary_dim/2), got ranks {n.rank(1)} and {n.rank(2)}")
    attrs = dict(interleaved=bool(n.attr("interleaved", 0)),
                 rotary_dim=int(n.attr("rotary_embedding_dim", 0)))
    if rank == 4:
        y = n.call("nn.rotary_embedding", x, cos, sin, layout="BHSD", **attrs)
    else:
        heads = n.attr("num_heads")
        if heads is None or int(heads) < 1:
            raise n.fail("a 3-d input needs a positive num_heads attribute")
        x4 = n.call("reshape", x, newshape=[0, 0, int(heads), -1])
        y = n.call("reshape_like", n.call("nn.rotary_embedding", x4, cos, sin, layout="BSHD",
                                          **attrs), x)
    return y if work == dtype else n.call("cast", y, dtype=dtype)
