"""Compiled operand checks refuse exactly what the type relations refuse (issue 42).

A kernel's operand check no longer runs the op's type relation on IR types for every new shape
set: the relation is run once on symbolic dims and becomes an integer program over the
operands' shapes (``runtime/vm/operands.py``). That program must never accept what the relation
refuses -- a gather's indices longer than its data, a window wider than its padded input -- or a
kernel would get arrays its entry does not describe. These tests build programs over the ops
whose relations bound one dim by another, run them once, and compare the compiled check with the
relation on every operand's dims moved up, down, to 0, 1 and beyond.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.runtime.bytecode.dimprog import DimError
from relvm.runtime.vm import operands

F = "float32"

#: (name, program, inputs): each op with a relation that bounds or ties its operands' dims.
PROGRAMS = [
    ("dense", "def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(m, 8), float32]) "
              "{ nn.relu(nn.dense(%x, %w)) }", [(3, 8), (5, 8)]),
    ("batch_matmul", "def @main(%a: Tensor[(b, n, k), float32], %c: Tensor[(b, m, k), float32]) "
                     "{ nn.batch_matmul(%a, %c) }", [(2, 3, 4), (2, 5, 4)]),
    ("broadcast", "def @main(%x: Tensor[(n, m), float32], %y: Tensor[(m), float32]) "
                  "{ tanh(add(%x, %y)) }", [(3, 4), (4,)]),
    ("gather", "def @main(%x: Tensor[(n, m), float32], %i: Tensor[(n, k), int64]) "
               "{ gather(%x, %i, axis=1) }", [(3, 5), ("i", 3, 2, 5)]),
    ("conv_valid", "def @main(%x: Tensor[(1, 2, h, w), float32], %k: Tensor[(4, 2, 3, 3), float32]) "
                   "{ nn.conv2d(%x, %k, kernel_size=[3, 3]) }", [(1, 2, 6, 7), (4, 2, 3, 3)]),
    ("pool", "def @main(%x: Tensor[(1, 2, h, w), float32]) "
             "{ nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2]) }", [(1, 2, 7, 9)]),
    ("pad_reflect", "def @main(%x: Tensor[(n, m), float32], %p: float32) "
                    "{ nn.pad(%x, %p, pad_width=[[0, 0], [1, 2]], pad_mode=\"reflect\") }",
     [(2, 5), ()]),
    ("split", "def @main(%x: Tensor[(n, m), float32]) "
              "{ %0 = split(%x, indices_or_sections=[1, 3], axis=1); (%0.0, %0.1, %0.2) }",
     [(2, 6)]),
    ("topk", "def @main(%x: Tensor[(n, m), float32]) { topk(%x, k=3, axis=1) }", [(2, 6)]),
    ("broadcast_to", "def @main(%x: Tensor[(n, 3), float32]) "
                     "{ broadcast_to(%x, shape=[2, 1, 1, 3]) }", [(1, 3)]),
    ("layer_norm", "def @main(%x: Tensor[(n, m), float32], %g: Tensor[(m), float32], "
                   "%b: Tensor[(m), float32]) { nn.layer_norm(%x, %g, %b) }",
     [(3, 4), (4,), (4,)]),
    ("concat", "def @main(%x: Tensor[(n, m), float32], %y: Tensor[(n, k), float32]) "
               "{ exp(concatenate((%x, %y), axis=1)) }", [(2, 3), (2, 4)]),
    ("attention_softmax", "def @main(%s: Tensor[(b, h, q, k), float32], "
                          "%m: Tensor[(q, k), float32], %p: Tensor[(b, 2), int64]) "
                          "{ nn.attention_softmax(%s, %m, %p) }",
     [(1, 2, 3, 4), (3, 4), ("i", 1, 2, 3)]),
    ("rotary_embedding", "def @main(%x: Tensor[(b, h, s, 8), float32], %c: Tensor[(p, s, 2), float32], "
                         "%n: Tensor[(q, s, 2), float32]) "
                         "{ nn.rotary_embedding(%x, %c, %n, rotary_dim=4) }",
     [(1, 3, 9, 8), (1, 9, 2), (1, 9, 2)]),
    ("conv2d_integer", "def @main(%x: Tensor[(1, 1, h, w), uint8], %k: Tensor[(o, 1, 1, 1), uint8], "
                       "%xz: uint8, %kz: Tensor[(z), uint8]) "
                       "{ nn.conv2d_integer(%x, %k, %xz, %kz) }",
     [("u8", 1, 1, 7, 7), ("u8", 1, 1, 1, 1), ("u8",), ("u8", 1)]),
    ("tensor_scatter", "def @main(%d: Tensor[(b, n, 4), float32], %u: Tensor[(b, m, 4), float32], "
                       "%w: Tensor[(b), int64]) { tensor_scatter(%d, %u, %w, axis=1) }",
     [(2, 5, 4), (2, 2, 4), ("i", 2, 3)]),
]


def _inputs(specs, rng):
    arrays = []
    for spec in specs:
        if spec and spec[0] == "i":
            *shape, high = spec[1:]
            arrays.append(rng.integers(0, high, shape).astype(np.int64))
        elif spec and spec[0] == "u8":
            arrays.append(rng.integers(0, 255, spec[1:]).astype(np.uint8))
        else:
            arrays.append(rng.standard_normal(spec).astype(F) if spec else np.float32(0.5))
    return arrays


def _checked(text: str, specs) -> list[tuple]:
    """(entry, operand shapes) of every kernel call of one run of ``text``."""
    exe = relvm.build(relvm.parse(text))
    vm = relvm.VirtualMachine(exe)
    vm.invoke("main", *_inputs(specs, np.random.default_rng(0)))
    calls = []
    for k, entry in enumerate(exe.kernels):
        for shapes in vm.operand_check(k).seen:
            calls.append((entry, shapes))
    assert calls
    return calls


def _variants(shapes: tuple):
    yield shapes
    for i, shape in enumerate(shapes):
        for axis, d in enumerate(shape):
            for v in {0, 1, d - 1, d + 1, 2 * d + 3} - {d, -1}:
                moved = list(shapes)
                moved[i] = shape[:axis] + (v,) + shape[axis + 1:]
                yield tuple(moved)


def _exact_accepts(entry, shapes) -> bool:
    n_in = len(entry.inputs)
    want = operands._relation(entry)(list(shapes[:n_in]))
    return not isinstance(want, str) and all(
        len(w) == len(o) and all(not isinstance(a, int) or a == b for a, b in zip(w, o))
        for w, o in zip(want, shapes[n_in:]))


@pytest.mark.parametrize("name,text,specs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_the_compiled_check_refuses_what_the_relation_refuses(name, text, specs) -> None:
    for entry, shapes in _checked(text, specs):
        compiled = operands.compiled_relation(entry)
        assert compiled is not None, f"{entry.name}: no compiled check"
        for moved in _variants(shapes):
            arrays = [np.empty(s, np.float32) for s in moved]
            try:
                compiled(None, arrays)
                accepted = True
            except DimError:
                accepted = False
            exact = _exact_accepts(entry, moved)
            assert accepted == exact, (f"{entry.name} on {moved}: compiled "
                                       f"{'accepts' if accepted else 'refuses'}, the relation "
                                       f"{'accepts' if exact else 'refuses'}")


def test_new_shapes_use_the_compiled_check_and_keep_the_relations_message() -> None:
    """A lying allocation is refused on every new shape set, with the message of the relation."""
    from relvm.runtime.bytecode import make
    from relvm.runtime.bytecode.opcodes import BY_NUMBER

    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 8), float32], "
                                  "%w: Tensor[(16, 8), float32]) { nn.relu(nn.dense(%x, %w)) }"))
    fn = exe.function("main")
    pc = next(pc for pc, ins in enumerate(fn.instructions)
              if BY_NUMBER[ins[0]].name == "AllocTensor")
    _, dst, storage, offset, shape, dtype = fn.instructions[pc]
    fn.instructions[pc] = make("AllocTensor", dst, storage, offset, (shape[0], 8), dtype)
    vm = relvm.VirtualMachine(exe)
    w = np.ones((16, 8), np.float32)
    for n in (2, 3, 5):
        with pytest.raises(relvm.RelvmRuntimeError, match=rf"refused its operands: for inputs "
                           rf"\[{n}, 8\], \[16, 8\] the result is \[{n}, 16\], but output 0 is "
                           rf"\[{n}, 8\]"):
            vm.invoke("main", np.ones((n, 8), np.float32), w)
    assert operands.compiled_relation(exe.kernels[0]) is not None
