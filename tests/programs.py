"""The shared table of test programs: Relay text, inputs, and an independent NumPy expectation.

Used by the front-end tests (round trip, reference interpreter) and, later, by the VM and
executable tests (same programs, same expectations). Expectations are written directly in NumPy,
never through relvm's op references, so they check the references too.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np


@dataclass
class Case:
    name: str
    text: str
    #: make(n, rng) -> list of input arrays; called once per size in ``sizes``.
    make: Callable[[int, np.random.Generator], list]
    expect: Callable[..., Any]
    sizes: Sequence[int] = (1, 3, 7)
    params: dict | None = None
    constants: Any = None
    func: str = "main"
    result_type: str | None = None
    rtol: float = 1e-5
    tags: set = field(default_factory=set)

    def input_sets(self):
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        for n in self.sizes:
            yield self.make(n, rng)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _sigmoid(x):
    return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _conv2d(x, w, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """Naive NCHW/OIHW convolution, loops over output pixels (independent of relvm)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pad[0] + pad[2], wd + pad[1] + pad[3]), x.dtype)
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // groups
    for g in range(groups):
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg,
                           i * stride[0]:i * stride[0] + dil[0] * (kh - 1) + 1:dil[0],
                           j * stride[1]:j * stride[1] + dil[1] * (kw - 1) + 1:dil[1]]
                out[:, g * og:(g + 1) * og, i, j] = np.einsum(
                    "nchw,ochw->no", patch, w[g * og:(g + 1) * og])
    return out.astype(x.dtype)


def _pool(x, k, s, reduce):
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


T = "float32"
CASES: list[Case] = []


def case(name: str, text: str, make, expect, **kw) -> None:
    CASES.append(Case(name, text, make, expect, **kw))


# --- grammar forms ------------------------------------------------------------------------------

case("add_scalar_literal", """
def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
  add(%x, 1f)
}""", lambda n, r: [f32(r, n, 4)], lambda x: x + np.float32(1),
     result_type="Tensor[(n, 4), float32]")

case("version_header_and_comments", """#[version = "0.0.5"]
// a line comment
/* a block
   comment */
def @main(%x: Tensor[(n), float32] /* inline */) {
  %0 = multiply(%x, 2f); /* ty=Tensor[(n), float32] */
  subtract(%0, 0.5f) // trailing
}""", lambda n, r: [f32(r, n)], lambda x: x * np.float32(2) - np.float32(0.5),
     result_type="Tensor[(n), float32]")

case("graph_bindings_share_nodes", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = exp(%x);
  %1 = add(%0, %0);
  multiply(%1, %0)
}""", lambda n, r: [f32(r, n, 3)], lambda x: (np.exp(x) + np.exp(x)) * np.exp(x))

case("nested_calls", """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(4), float32]) {
  nn.relu(add(%x, negative(%y)))
}""", lambda n, r: [f32(r, n, 4), f32(r, 4)], lambda x, y: np.maximum(x - y, 0),
     result_type="Tensor[(n, 4), float32]")

case("let_binding", """
def @main(%x: Tensor[(n, 2), float32]) {
  let %y = multiply(%x, 3f);
  add(%y, %y)
}""", lambda n, r: [f32(r, n, 2)], lambda x: x * 3 + x * 3)

case("let_with_annotation", """
def @main(%x: Tensor[(n, 2), float32]) -> Tensor[(n, 2), float32] {
  let %y: Tensor[(n, 2), float32] = tanh(%x);
  let %z: Tensor[(?, 2), float32] = sigmoid(%y);
  %z
}""", lambda n, r: [f32(r, n, 2)], lambda x: _sigmoid(np.tanh(x)))

case("let_shadowing", """
def @main(%x: Tensor[(n), float32]) {
  let %x = add(%x, 1f);
  let %x = multiply(%x, 2f);
  %x
}""", lambda n, r: [f32(r, n)], lambda x: (x + 1) * 2)

case("tuple_and_projection", """
def @main(%x: Tensor[(n), float32], %y: Tensor[(n), float32]) {
  %0 = (%x, %y);
  %1 = %0.1;
  subtract(%0.0, %1)
}""", lambda n, r: [f32(r, n), f32(r, n)], lambda x, y: x - y)

case("single_field_tuple", """
def @main(%x: Tensor[(n), float32]) {
  %0 = (%x,);
  abs(%0.0)
}""", lambda n, r: [f32(r, n)], lambda x: np.abs(x))

case("tuple_result", """
def @main(%x: Tensor[(n, 3), float32]) -> (Tensor[(n, 3), float32], Tensor[(n, 3), float32]) {
  (exp(%x), negative(%x))
}""", lambda n, r: [f32(r, n, 3)], lambda x: (np.exp(x), -x),
     result_type="(Tensor[(n, 3), float32], Tensor[(n, 3), float32])")

case("nested_tuple_result", """
def @main(%x: Tensor[(n), float32]) {
  ((%x, abs(%x)), sqrt(abs(%x)))
}""", lambda n, r: [f32(r, n)], lambda x: ((x, np.abs(x)), np.sqrt(np.abs(x))))

case("tuple_parameter", """
def @main(%t: (Tensor[(n), float32], Tensor[(n), float32])) {
  maximum(%t.0, %t.1)
}""", lambda n, r: [(f32(r, n), f32(r, n))], lambda t: np.maximum(t[0], t[1]))

case("if_else_on_input", """
def @main(%c: bool, %x: Tensor[(n), float32]) {
  if (%c) {
    %0 = exp(%x);
    add(%0, 1f)
  } else {
    negative(%x)
  }
}""", lambda n, r: [np.array(n % 2 == 1), f32(r, n)],
     lambda c, x: np.exp(x) + 1 if c else -x, sizes=(1, 2, 3, 4))

case("if_on_computed_condition", """
def @main(%x: Tensor[(n, 2), float32]) {
  %0 = sum(%x);
  %1 = greater(%0, 0f);
  if (%1) { %x } else { multiply(%x, -1f) }
}""", lambda n, r: [f32(r, n, 2)], lambda x: x if x.sum() > 0 else -x, sizes=(1, 2, 3, 5, 8))

case("closure_captures_variable", """
def @main(%x: Tensor[(n, 4), float32], %b: Tensor[(4), float32]) {
  let %f = fn (%y: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
    add(%y, %b)
  };
  %0 = %f(%x);
  %f(%0)
}""", lambda n, r: [f32(r, n, 4), f32(r, 4)], lambda x, b: x + b + b)

case("closure_returned_and_applied", """
def @main(%x: Tensor[(n), float32]) {
  %0 = fn (%s: float32) {
    fn (%v: Tensor[(n), float32]) { multiply(%v, %s) }
  };
  %1 = %0(3f);
  %1(%x)
}""", lambda n, r: [f32(r, n)], lambda x: x * np.float32(3))

case("function_typed_parameter", """
def @apply(%f: fn (Tensor[(m), float32]) -> Tensor[(m), float32], %v: Tensor[(m), float32]) {
  %f(%v)
}
def @main(%x: Tensor[(n), float32]) {
  @apply(fn (%y: Tensor[(n), float32]) { exp(%y) }, %x)
}""", lambda n, r: [f32(r, n)], lambda x: np.exp(x))

case("global_call_instantiates_dims", """
def @double(%v: Tensor[(k, 3), float32]) -> Tensor[(k, 3), float32] {
  add(%v, %v)
}
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = concatenate((%x, %x), axis=0);
  @double(%0)
}""", lambda n, r: [f32(r, n, 3)], lambda x: np.concatenate([x, x]) * 2,
     result_type="Tensor[(n*2, 3), float32]")

case("non_main_function", """
def @main(%x: Tensor[(n), float32]) { %x }
def @helper(%a: Tensor[(n), float32], %b: Tensor[(n), float32]) {
  minimum(%a, %b)
}""", lambda n, r: [f32(r, n), f32(r, n)], lambda a, b: np.minimum(a, b), func="helper")

case("recursion_counts", """
def @count(%i: int32, %acc: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = less(%i, 10);
  if (%0) {
    @count(add(%i, 1), add(%acc, 1f))
  } else {
    %acc
  }
}
def @main(%x: Tensor[(4), float32]) {
  @count(0, %x)
}""", lambda n, r: [f32(r, 4)], lambda x: x + np.float32(10), sizes=(1,))

case("mutual_recursion", """
def @is_even(%i: int64) -> bool {
  if (equal(%i, 0i64)) { True } else { @is_odd(subtract(%i, 1i64)) }
}
def @is_odd(%i: int64) -> bool {
  if (equal(%i, 0i64)) { False } else { @is_even(subtract(%i, 1i64)) }
}
def @main(%i: int64) { @is_even(%i) }""",
     lambda n, r: [np.array(n, np.int64)], lambda i: np.array(i % 2 == 0), sizes=(0, 1, 6, 9))

case("recursive_rnn_over_symbolic_length", """
def @rnn(%xs: Tensor[(t, 4), float32], %h: Tensor[(4), float32], %i: int64) -> Tensor[(4), float32] {
  %0 = shape_of(%xs, dtype="int64");
  %1 = take(%0, 0i64);
  if (less(%i, %1)) {
    %2 = take(%xs, %i, axis=0);
    %3 = add(multiply(%h, 0.5f), %2);
    @rnn(%xs, tanh(%3), add(%i, 1i64))
  } else {
    %h
  }
}
def @main(%xs: Tensor[(t, 4), float32]) {
  @rnn(%xs, zeros(shape=[4], dtype="float32"), 0i64)
}""", lambda n, r: [f32(r, n, 4)],
     lambda xs: _rnn(xs), sizes=(1, 5, 200))


def _rnn(xs):
    h = np.zeros(4, np.float32)
    for x in xs:
        h = np.tanh(h * np.float32(0.5) + x)
    return h


case("literals_of_every_kind", """
def @main(%x: Tensor[(n), float32]) {
  %0 = add(%x, cast(3i64, dtype="float32"));
  %1 = multiply(%0, cast(2, dtype="float32"));
  %2 = add(%1, cast(1f64, dtype="float32"));
  %3 = add(%2, cast(2f16, dtype="float32"));
  %4 = add(%3, cast(5i8, dtype="float32"));
  %5 = add(%4, cast(7u8, dtype="float32"));
  %6 = logical_and(True, logical_not(False));
  %7 = add(%5, cast(%6, dtype="float32"));
  add(%7, -0.25f)
}""", lambda n, r: [f32(r, n)],
     lambda x: (x + 3) * 2 + 1 + 2 + 5 + 7 + 1 - np.float32(0.25))

case("float_literal_forms", """
def @main(%x: Tensor[(n), float32]) {
  %0 = multiply(%x, 1e-05f);
  %1 = add(%0, 0.5);
  add(%1, 2.5e+2f)
}""", lambda n, r: [f32(r, n)], lambda x: x * np.float32(1e-05) + np.float32(0.5) + np.float32(250))

case("meta_constants", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = add(%x, meta[relay.Constant][0]);
  multiply(%0, meta[relay.Constant][1])
}""", lambda n, r: [f32(r, n, 3)],
     lambda x: (x + np.arange(3, dtype=np.float32)) * np.float32(2),
     constants=[np.arange(3, dtype=np.float32), np.full((1, 3), 2, np.float32)])

case("named_params_bound_by_name", """
def @main(%x: Tensor[(n, 8), float32], %w1: Tensor[(16, 8), float32], %b1: Tensor[(16), float32],
          %w2: Tensor[(4, 16), float32]) -> Tensor[(n, 4), float32] {
  %0 = nn.dense(%x, %w1, units=16);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  nn.dense(%2, %w2)
}""", lambda n, r: [f32(r, n, 8)],
     lambda x, w1, b1, w2: np.maximum(x @ w1.T + b1, 0) @ w2.T,
     params={"w1": np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32),
             "b1": np.random.default_rng(1).standard_normal(16).astype(np.float32),
             "w2": np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)},
     result_type="Tensor[(n, 4), float32]", rtol=1e-4)

case("dim_expressions_in_annotations", """
def @main(%x: Tensor[(n*2, 3), float32]) -> Tensor[(n, 6), float32] {
  reshape(%x, newshape=[-1, 6])
}""", lambda n, r: [f32(r, 2 * n, 3)], lambda x: x.reshape(-1, 6),
     result_type="Tensor[(n, 6), float32]")

case("symbolic_arithmetic_simplifies", """
def @main(%x: Tensor[(n, 12), float32]) {
  %0 = reshape(%x, newshape=[-1, 4]);
  %1 = transpose(%0, axes=[1, 0]);
  reshape(%1, newshape=[0, -1, 3])
}""", lambda n, r: [f32(r, n, 12)], lambda x: x.reshape(-1, 4).T.reshape(4, -1, 3),
     result_type="Tensor[(4, n, 3), float32]")

case("anonymous_dims", """
def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(?, 4), float32]) {
  %0 = exp(%x);
  concatenate((%0, %y), axis=0)
}""", lambda n, r: [f32(r, n, 4), f32(r, n + 1, 4)],
     lambda x, y: np.concatenate([np.exp(x), y]), result_type="Tensor[(?, 4), float32]")

case("broadcasting_symbolic", """
def @main(%x: Tensor[(n, 1, 4), float32], %y: Tensor[(3, 1), float32]) {
  add(%x, %y)
}""", lambda n, r: [f32(r, n, 1, 4), f32(r, 3, 1)], lambda x, y: x + y,
     result_type="Tensor[(n, 3, 4), float32]")

# --- ops ----------------------------------------------------------------------------------------

case("unary_math", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = sigmoid(%x);
  %1 = tanh(%0);
  %2 = exp(%1);
  %3 = log(%2);
  %4 = sqrt(abs(%3));
  %5 = rsqrt(add(%4, 1f));
  %6 = erf(%5);
  %7 = floor(multiply(%6, 10f));
  %8 = ceil(%7);
  %9 = round(multiply(%x, 2f));
  add(add(%8, %9), sign(%x))
}""", lambda n, r: [f32(r, n, 3)], lambda x: _unary_expect(x))


def _unary_expect(x):
    v = np.log(np.exp(np.tanh(_sigmoid(x))))
    v = 1 / np.sqrt(np.sqrt(np.abs(v)) + 1)
    v = np.vectorize(math.erf)(v.astype(np.float64)).astype(np.float32)
    v = np.ceil(np.floor(v * 10))
    return v + np.round(x * 2) + np.sign(x)


case("comparisons_and_where", """
def @main(%x: Tensor[(n), float32], %y: Tensor[(n), float32]) {
  %0 = greater_equal(%x, %y);
  %1 = logical_or(%0, less(%x, -1f));
  where(%1, %x, %y)
}""", lambda n, r: [f32(r, n), f32(r, n)],
     lambda x, y: np.where((x >= y) | (x < -1), x, y))

case("integer_arithmetic", """
def @main(%a: Tensor[(n), int32], %b: Tensor[(n), int32]) {
  %0 = divide(%a, %b);
  %1 = multiply(%0, 3);
  (%1, maximum(%a, %b), equal(%a, %b))
}""", lambda n, r: [r.integers(-20, 20, n).astype(np.int32),
                    r.integers(1, 5, n).astype(np.int32)],
     lambda a, b: ((np.trunc(a / b).astype(np.int32) * 3).astype(np.int32), np.maximum(a, b),
                   a == b))

case("clip_leaky_relu_power", """
def @main(%x: Tensor[(n, 5), float32]) {
  %0 = clip(%x, a_min=-0.5f, a_max=0.5f);
  %1 = nn.leaky_relu(%x, alpha=0.1f);
  add(%0, power(abs(%1), 2f))
}""", lambda n, r: [f32(r, n, 5)],
     lambda x: np.clip(x, -0.5, 0.5) + np.abs(np.where(x > 0, x, x * np.float32(0.1))) ** 2)

case("cast_float_to_int", """
def @main(%x: Tensor[(n), float32]) {
  cast(multiply(%x, 10f), dtype="int32")
}""", lambda n, r: [f32(r, n)], lambda x: np.trunc(x * 10).astype(np.int32))

case("dense_softmax", """
def @main(%x: Tensor[(n, 6), float32], %w: Tensor[(5, 6), float32]) -> Tensor[(n, 5), float32] {
  %0 = nn.dense(%x, %w, units=5);
  nn.softmax(%0, axis=1)
}""", lambda n, r: [f32(r, n, 6), f32(r, 5, 6)], lambda x, w: _softmax(x @ w.T, 1), rtol=1e-4)

case("log_softmax", """
def @main(%x: Tensor[(n, 7), float32]) {
  nn.log_softmax(%x, axis=-1)
}""", lambda n, r: [f32(r, n, 7)], lambda x: np.log(_softmax(x, -1)), rtol=1e-4)

case("batch_matmul", """
def @main(%a: Tensor[(n, 3, 4), float32], %b: Tensor[(n, 5, 4), float32]) {
  nn.batch_matmul(%a, %b)
}""", lambda n, r: [f32(r, n, 3, 4), f32(r, n, 5, 4)],
     lambda a, b: a @ b.transpose(0, 2, 1), rtol=1e-4)

case("attention_products_over_symbolic_heads_and_tokens", """
def @main(%q: Tensor[(n, h, t, 8), float32], %k: Tensor[(n, h, t, 8), float32],
          %v: Tensor[(n, h, t, 8), float32]) {
  %0 = multiply(nn.batch_matmul(%q, %k), 0.35f);
  %1 = nn.softmax(%0, axis=-1);
  nn.batch_matmul(%1, %v, transpose_b=False)
}""", lambda n, r: [f32(r, n, 2, n + 3, 8) for _ in range(3)],
     lambda q, k, v: _softmax(q @ k.transpose(0, 1, 3, 2) * np.float32(0.35), -1) @ v,
     rtol=1e-4, result_type="Tensor[(n, h, t, 8), float32]")

case("batch_matmul_broadcast_batch_dims", """
def @main(%a: Tensor[(n, 1, 5, 4), float32], %b: Tensor[(1, 3, 4, 6), float32]) {
  nn.batch_matmul(%a, %b, transpose_b=False)
}""", lambda n, r: [f32(r, n, 1, 5, 4), f32(r, 1, 3, 4, 6)], lambda a, b: a @ b, rtol=1e-4,
     result_type="Tensor[(n, 3, 5, 6), float32]")

case("matmul", """
def @main(%a: Tensor[(n, 3), float32], %b: Tensor[(3, 2), float32]) {
  nn.matmul(%a, %b)
}""", lambda n, r: [f32(r, n, 3), f32(r, 3, 2)], lambda a, b: a @ b, rtol=1e-4)

case("conv2d_strided_padded", """
def @main(%x: Tensor[(n, 3, 9, 9), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3])
}""", lambda n, r: [f32(r, n, 3, 9, 9), f32(r, 4, 3, 3, 3)],
     lambda x, w: _conv2d(x, w, (2, 2), (1, 1, 1, 1)), rtol=1e-4,
     result_type="Tensor[(n, 4, 5, 5), float32]")

case("conv2d_depthwise_dilated", """
def @main(%x: Tensor[(n, 4, 8, h), float32], %w: Tensor[(4, 1, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[2, 2], dilation=[2, 2], groups=4)
}""", lambda n, r: [f32(r, n, 4, 8, n + 6), f32(r, 4, 1, 3, 3)],
     lambda x, w: _conv2d(x, w, pad=(2, 2, 2, 2), dil=(2, 2), groups=4), rtol=1e-4,
     result_type="Tensor[(n, 4, 8, h), float32]")

case("pooling", """
def @main(%x: Tensor[(n, 2, 6, 6), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
  %1 = nn.avg_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
  add(%0, %1)
}""", lambda n, r: [f32(r, n, 2, 6, 6)],
     lambda x: _pool(x, 2, 2, np.max) + _pool(x, 2, 2, np.mean), rtol=1e-5)

case("small_convnet", """
def @main(%x: Tensor[(n, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %d: Tensor[(2, 4), float32]) -> Tensor[(n, 2), float32] {
  %0 = nn.conv2d(%x, %w, padding=[1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.global_avg_pool2d(%1);
  %3 = nn.batch_flatten(%2);
  nn.dense(%3, %d)
}""", lambda n, r: [f32(r, n, 3, 8, 8), f32(r, 4, 3, 3, 3), f32(r, 2, 4)],
     lambda x, w, d: np.maximum(_conv2d(x, w, pad=(1, 1, 1, 1)), 0).mean(axis=(2, 3)) @ d.T,
     rtol=1e-4)

case("batch_norm_tuple", """
def @main(%x: Tensor[(n, 3, 2, 2), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32],
          %m: Tensor[(3), float32], %v: Tensor[(3), float32]) {
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.001f);
  %0.0
}""", lambda n, r: [f32(r, n, 3, 2, 2), f32(r, 3), f32(r, 3), f32(r, 3),
                    np.abs(f32(r, 3)) + np.float32(0.5)],
     lambda x, g, b, m, v: ((x - m[:, None, None]) / np.sqrt(v[:, None, None] + np.float32(1e-3))
                            * g[:, None, None] + b[:, None, None]), rtol=1e-4)

case("layer_norm_and_dropout", """
def @main(%x: Tensor[(n, 6), float32], %g: Tensor[(6), float32], %b: Tensor[(6), float32]) {
  %0 = nn.layer_norm(%x, %g, %b, axis=-1, epsilon=1e-05f);
  %1 = nn.dropout(%0, rate=0.1f);
  %1.0
}""", lambda n, r: [f32(r, n, 6), f32(r, 6), f32(r, 6)],
     lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
     * g + b, rtol=1e-4)

case("reductions", """
def @main(%x: Tensor[(n, 4, 3), float32]) {
  %0 = sum(%x, axis=[1], keepdims=True);
  %1 = mean(%x, axis=[0, 2]);
  %2 = max(%x, axis=-1);
  %3 = min(%x);
  %4 = prod(%x, axis=1, exclude=True);
  (%0, %1, %2, %3, %4, argmax(%x, axis=1), argmin(%x, axis=2))
}""", lambda n, r: [f32(r, n, 4, 3)],
     lambda x: (x.sum(1, keepdims=True), x.mean((0, 2)), x.max(-1), x.min(), x.prod((0, 2)),
                x.argmax(1).astype(np.int32), x.argmin(2).astype(np.int32)), rtol=1e-4)

case("concatenate_and_split", """
def @main(%x: Tensor[(n, 6), float32], %y: Tensor[(n, 2), float32]) {
  %0 = concatenate((%x, %y), axis=1);
  %1 = split(%0, indices_or_sections=[3, 5], axis=1);
  %2 = split(%x, indices_or_sections=2, axis=1);
  (%1.0, %1.2, %2.1)
}""", lambda n, r: [f32(r, n, 6), f32(r, n, 2)],
     lambda x, y: (np.concatenate([x, y], 1)[:, :3], np.concatenate([x, y], 1)[:, 5:], x[:, 3:]))

case("squeeze_expand_dims_broadcast_to", """
def @main(%x: Tensor[(n, 1, 3), float32], %b: Tensor[(1, 3), float32]) {
  %0 = squeeze(%x, axis=[1]);
  %1 = expand_dims(%0, axis=0, num_newaxis=2);
  %2 = broadcast_to(%b, shape=[2, 1, 1, 3]);
  add(%1, %2)
}""", lambda n, r: [f32(r, n, 1, 3), f32(r, 1, 3)],
     lambda x, b: x[:, 0][None, None] + np.broadcast_to(b, (2, 1, 1, 3)),
     result_type="Tensor[(2, 1, n, 3), float32]")

case("strided_slice", """
def @main(%x: Tensor[(n, 10), float32]) {
  %0 = strided_slice(%x, begin=[0, 1], end=[2147483647, 9], strides=[1, 2]);
  %1 = strided_slice(%x, begin=[-1], end=[-11], strides=[-3], axes=[1]);
  (%0, %1)
}""", lambda n, r: [f32(r, n, 10)], lambda x: (x[:, 1:9:2], x[:, -1:-11:-3]))

case("take_gather", """
def @main(%x: Tensor[(n, 5), float32], %i: Tensor[(3), int64]) {
  take(%x, %i, axis=1)
}""", lambda n, r: [f32(r, n, 5), np.array([4, 0, 2], np.int64)], lambda x, i: x[:, i])

case("reshape_like_and_pad", """
def @main(%x: Tensor[(n, 6), float32], %y: Tensor[(n, 2, 3), float32]) {
  %0 = reshape_like(%x, %y);
  nn.pad(%0, 0f, pad_width=[[0, 0], [1, 1], [0, 2]])
}""", lambda n, r: [f32(r, n, 6), f32(r, n, 2, 3)],
     lambda x, y: np.pad(x.reshape(-1, 2, 3), ((0, 0), (1, 1), (0, 2))))

case("zeros_ones_full_like", """
def @main(%x: Tensor[(n, 2), float32]) {
  %0 = add(zeros_like(%x), ones_like(%x));
  %1 = full(3f, shape=[2], dtype="float32");
  %2 = add(%0, %1);
  add(%2, add(zeros(shape=[1, 2], dtype="float32"), ones(shape=[2], dtype="float32")))
}""", lambda n, r: [f32(r, n, 2)], lambda x: np.full(x.shape, 5, np.float32))

case("shape_of", """
def @main(%x: Tensor[(n, 3), float32]) {
  shape_of(%x)
}""", lambda n, r: [f32(r, n, 3)], lambda x: np.array(x.shape, np.int32),
     result_type="Tensor[(2), int32]")

case("arange_data_dependent", """
def @main(%k: int64) {
  %0 = arange(0i64, %k, 1i64);
  multiply(%0, 2i64)
}""", lambda n, r: [np.array(n, np.int64)], lambda k: np.arange(k, dtype=np.int64) * 2,
     sizes=(0, 1, 5), result_type="Tensor[(?), int64]")

case("argwhere_data_dependent", """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = greater(%x, 0f);
  argwhere(%0)
}""", lambda n, r: [f32(r, n, 3)], lambda x: np.argwhere(x > 0).astype(np.int32),
     result_type="Tensor[(?, 2), int32]")

case("dyn_reshape", """
def @main(%x: Tensor[(n, 6), float32], %s: Tensor[(3), int64]) {
  dyn.reshape(%x, %s)
}""", lambda n, r: [f32(r, n, 6), np.array([-1, 3, 2], np.int64)],
     lambda x, s: x.reshape(-1, 3, 2), result_type="Tensor[(?, ?, ?), float32]")


# --- fused kernels shared between groups that differ (issue 15) --------------------------------
# Each pair of groups has the same op chain but other ranks, broadcasts or scalar positions;
# one generated kernel (and its loop plan) must never serve both.

case("fused_same_chain_other_operand", """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, 4), float32]) {
  %0 = tanh(add(multiply(%x, 2f), %y));
  %1 = tanh(add(multiply(%x, 2f), 1f));
  (%0, %1)
}""", lambda n, r: [f32(r, n, 4), f32(r, n, 4)],
     lambda x, y: (np.tanh(x * 2 + y), np.tanh(x * 2 + np.float32(1))))

case("fused_swish_two_ranks", """
def @main(%a: Tensor[(n, 3, 4, 5), float32], %b: Tensor[(n, 6, 7), float32]) {
  %0 = multiply(%a, sigmoid(%a));
  %1 = multiply(%b, sigmoid(%b));
  (%0, %1)
}""", lambda n, r: [f32(r, n, 3, 4, 5), f32(r, n, 6, 7)],
     lambda a, b: (a * _sigmoid(a), b * _sigmoid(b)), rtol=1e-5)

case("fused_scalar_on_either_side", """
def @main(%x: Tensor[(n, 5), float32]) {
  %0 = nn.relu(subtract(%x, 1f));
  %1 = nn.relu(subtract(1f, %x));
  (%0, %1)
}""", lambda n, r: [f32(r, n, 5)],
     lambda x: (np.maximum(x - np.float32(1), 0), np.maximum(np.float32(1) - x, 0)))

case("fused_same_chain_other_broadcast", """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(4), float32], %z: Tensor[(n, 1), float32]) {
  %0 = exp(add(%x, %y));
  %1 = exp(add(%x, %z));
  (%0, %1)
}""", lambda n, r: [f32(r, n, 4), f32(r, 4), f32(r, n, 1)],
     lambda x, y, z: (np.exp(x + y), np.exp(x + z)))


# --- closures whose result mixes their own ? dims with captured ones (issue 15) ----------------

case("closure_result_mixes_own_and_captured_any_dims", """
def @main(%x: Tensor[(?), float32], %y: Tensor[(?), float32]) {
  %f = fn (%a: Tensor[(?), float32]) { concatenate((%a, %x)) };
  %g = %f(%y);
  add(%f(%g), 1f)
}""", lambda n, r: [f32(r, n + 1), f32(r, 2 * n)],
     lambda x, y: np.concatenate([y, x, x]) + np.float32(1))

case("function_result_dim_nothing_else_determines", """
def @f(%a: Tensor[(m), float32]) -> Tensor[(m*2 + k), float32] {
  concatenate((%a, %a, %a))
}
def @main(%x: Tensor[(n), float32]) {
  %0 = @f(%x);
  add(%0, %0)
}""", lambda n, r: [f32(r, n)], lambda x: np.concatenate([x, x, x]) * np.float32(2))


# --- every integer dtype: wrapping, division by zero, shifts past the width, casts -------------
# The expectations compute in Python ints, one element at a time, and wrap the result into the
# dtype: independent of NumPy's integer rules as of relvm's.

def _wrapped(values, dtype: str) -> np.ndarray:
    """Python ints wrapped into ``dtype`` (modulo 2^bits, then read with its sign)."""
    dt = np.dtype(dtype)
    bits = dt.itemsize * 8
    return np.array([v % 2**bits for v in values], f"u{dt.itemsize}").view(dt)


def _truncated(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


def _int_ops(dtype: str):
    bits = np.dtype(dtype).itemsize * 8

    def expect(a, b, s, f):
        A, B, S = a.tolist(), b.tolist(), s.tolist()
        w = lambda vs: _wrapped(vs, dtype)  # noqa: E731
        v = lambda x: _wrapped([x], dtype).item()  # noqa: E731  (one value, wrapped)
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -5), min(info.max, 1000)  # clip(a_min=-5.5f, a_max=1000.5f)
        cast = []  # cast(f, dtype): truncated; out of range (or the NaN) gives 0
        for x in f.tolist():
            cast.append(math.trunc(x) if math.isfinite(x) and info.min <= x <= info.max else 0)
        return (
            w([x * y + (x - y) for x, y in zip(A, B)]),
            w([0 if y == 0 else _truncated(x, y) for x, y in zip(A, B)]),
            w([0 if y == 0 else x - y * _truncated(x, y) for x, y in zip(A, B)]),
            w([0 if y == 0 else x % y for x, y in zip(A, B)]),
            w([max(x, y) if x > y else min(v(-x), v(abs(y))) for x, y in zip(A, B)]),
            w([(0 if k < 0 or k >= bits else x << k) ^ ~(y >> k if 0 <= k < bits
                                                        else -1 if y < 0 else 0)
               for x, y, k in zip(A, B, S)]),
            w([min(max(x, lo), hi) for x in A]),
            w([(x > 0) - (x < 0) + max(x, 0) for x in A]),
            np.array([x <= y for x, y in zip(A, B)]),
            w(cast))
    return expect


def _int_inputs(dtype: str):
    info = np.iinfo(dtype)
    bits = info.bits
    edges = [info.min, info.max, 0, 1, 2, 7, info.max // 2 + 1, info.max - 1, 3]
    if info.min < 0:
        edges += [-1, -7, info.min + 1]
    counts = [0, 1, 3, bits - 1, bits, bits + 5] + ([-1, -bits] if info.min < 0 else [])
    floats = [0.5, -0.6, 7.9, -7.9, 1e30, -1e30, np.nan, float(info.max), 1e4, 40000.5]

    def pick(values, n, r, dtype):  # not r.choice: it would read uint64's max as a float
        return np.array([values[i] for i in r.integers(0, len(values), n)], dtype)

    def make(n, r):
        return [pick(edges, n, r, dtype), pick(edges, n, r, dtype), pick(counts, n, r, dtype),
                pick(floats, n, r, np.float64)]
    return make


for _dt in ("int16", "uint16", "uint32", "uint64"):
    case(f"integer_ops_{_dt}", f"""
def @main(%a: Tensor[(n), {_dt}], %b: Tensor[(n), {_dt}], %s: Tensor[(n), {_dt}],
          %f: Tensor[(n), float64]) {{
  %0 = add(multiply(%a, %b), subtract(%a, %b));
  %1 = where(greater(%a, %b), maximum(%a, %b), minimum(negative(%a), abs(%b)));
  %2 = bitwise_xor(left_shift(%a, %s), bitwise_not(right_shift(%b, %s)));
  %3 = add(sign(%a), nn.relu(%a));
  (%0, divide(%a, %b), mod(%a, %b), floor_mod(%a, %b), %1, %2,
   clip(%a, a_min=-5.5f, a_max=1000.5f), %3, less_equal(%a, %b), cast(%f, dtype="{_dt}"))
}}""", _int_inputs(_dt), _int_ops(_dt), sizes=(1, 9, 64))
