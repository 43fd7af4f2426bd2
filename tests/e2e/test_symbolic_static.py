"""A symbolic build of a program that computes shapes from shapes (as exported transformers do)
compiles to what its static build compiles to: the same kernels, no fresh buffers, a replay.

The attention block below splits heads with ``dyn.reshape`` to a shape gathered from the input's
(``Shape -> Gather -> Concat -> Reshape``), reshapes the mask the same way and merges the heads
back. Without symbolic values each of those reshapes gave fresh ``?`` dims: the residual add
and the mask add no longer fused into their products, every tensor after them got a buffer of
its own per call, and the entry could not be replayed.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.runtime.bytecode.opcodes import Opcode
from relvm.runtime.vm import replay

BLOCK = """def @main(%x: Tensor[(B, N, 8), float32], %mask: Tensor[(B, N), float32],
          %wq: Tensor[(8, 8), float32], %wk: Tensor[(8, 8), float32],
          %wv: Tensor[(8, 8), float32], %wo: Tensor[(8, 8), float32], %bo: Tensor[(8), float32]) {
  %s = shape_of(%x, dtype="int64");
  %b = strided_slice(%s, begin=[0], end=[1]);
  %n = strided_slice(%s, begin=[1], end=[2]);
  %heads = concatenate((%b, %n, expand_dims(2i64, axis=0), expand_dims(4i64, axis=0)));
  %q = transpose(dyn.reshape(nn.dense(%x, %wq), %heads), axes=[0, 2, 1, 3]);
  %k = transpose(dyn.reshape(nn.dense(%x, %wk), %heads), axes=[0, 2, 3, 1]);
  %v = transpose(dyn.reshape(nn.dense(%x, %wv), %heads), axes=[0, 2, 1, 3]);
  %one = expand_dims(1i64, axis=0);
  %m = dyn.reshape(multiply(subtract(1f, %mask), -10000f), concatenate((%b, %one, %one, %n)));
  %scores = add(multiply(nn.batch_matmul(%q, %k, transpose_b=False), 0.5f), %m);
  %p = nn.softmax(%scores, axis=3);
  %o = transpose(nn.batch_matmul(%p, %v, transpose_b=False), axes=[0, 2, 1, 3]);
  %merged = dyn.reshape(%o, concatenate((%b, %n, expand_dims(8i64, axis=0))));
  add(add(nn.dense(%merged, %wo), %bo), %x)
}"""

B, N = 2, 5


def params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    p = {k: (rng.standard_normal((8, 8)) / 3).astype(np.float32) for k in ("wq", "wk", "wv", "wo")}
    p["bo"] = rng.standard_normal(8).astype(np.float32)
    return p


def numpy_block(x, mask, p):
    def heads(t):
        return t.reshape(B, N, 2, 4)
    q = heads(x @ p["wq"].T).transpose(0, 2, 1, 3)
    k = heads(x @ p["wk"].T).transpose(0, 2, 3, 1)
    v = heads(x @ p["wv"].T).transpose(0, 2, 1, 3)
    scores = q @ k * 0.5 + ((1 - mask) * -10000).reshape(B, 1, 1, N)
    e = np.exp(scores - scores.max(axis=3, keepdims=True))
    o = (e / e.sum(axis=3, keepdims=True)) @ v
    return o.transpose(0, 2, 1, 3).reshape(B, N, 8) @ p["wo"].T + p["bo"] + x


def build(static: bool):
    text = BLOCK.replace("(B, N", f"({B}, {N}") if static else BLOCK
    return relvm.build(relvm.parse(text), params=params())


def kernels_of(exe) -> list[str]:
    fn = exe.function("main")
    return [exe.kernels[i[1]].name for i in fn.instructions if i[0] == Opcode.InvokePacked]


@pytest.mark.e2e
def test_symbolic_build_emits_the_static_builds_kernels() -> None:
    symbolic, static = build(False), build(True)
    assert kernels_of(symbolic) == kernels_of(static)
    # the residual add and the mask add sit in their products' groups
    assert any(k.startswith("fused_dense_add_add") for k in kernels_of(symbolic))
    assert any(k.startswith("fused_batch_matmul_multiply_add") for k in kernels_of(symbolic))
    assert "?" not in symbolic.bytecode  # no dim is learnt from values at run time


@pytest.mark.e2e
def test_symbolic_build_pools_replays_and_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, N, 8)).astype(np.float32)
    mask = np.ones((B, N), np.float32)
    mask[1, 3:] = 0
    want = numpy_block(x, mask, params())
    for static in (False, True):
        exe = build(static)
        assert replay.plan(exe.function("main"), exe.dim_programs) is not None
        vm = relvm.VirtualMachine(exe)
        first = vm.invoke("main", x, mask)
        np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-5)
        out = np.empty_like(first)
        vm.invoke_with_outputs("main", [x, mask], [out])
        np.testing.assert_array_equal(out, first)
        assert vm.stats.allocations == 0  # every intermediate in a pooled buffer


@pytest.mark.e2e
def test_symbolic_and_static_builds_give_identical_numbers() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((B, N, 8)).astype(np.float32)
    mask = (rng.random((B, N)) > 0.3).astype(np.float32)
    got = [relvm.VirtualMachine(build(s)).invoke("main", x, mask) for s in (False, True)]
    np.testing.assert_array_equal(got[0], got[1])
