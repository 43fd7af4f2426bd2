"""Dim programs: the run-time half of symbolic shapes.

The compiler knows every shape as an expression over a function's symbols (``n``, ``n*3``,
``(h + 1)/2``). A *dim program* computes the values a frame needs into its dims vector (a Python
list of ints), reading the shapes -- or, for data-dependent ops like ``argwhere``, the values --
of the tensors passed to ``ComputeDims``. It also checks what the type checker could not decide
statically (two inputs declared with ``n`` agree; a dim lies within its upper bound).

A program is plain data -- nested tuples of strings and ints -- so executables store it without
pickle. :func:`compile_program` turns it into a Python closure once, at load; nothing from a file
is ever evaluated as code.

Expressions::

    ("const", c)            ("slot", k)              ("shape", arg, axis)
    ("value", arg)          # an int scalar tensor's value
    ("item", arg, index)    # entry ``index`` of a 1-d int tensor (a run-time size list)
    (op, a, b)              # op in add sub mul floordiv mod max min bcast
    ("nonzero", arg)        # number of non-zero elements (argwhere's row count)
    ("unique", arg, axis)   # number of distinct entries (axis -1) or slices along axis
    ("arange_len", start, stop, step)   # args holding scalar tensors

Statements::

    ("set", slot, expr)
    ("check", expr_a, expr_b, message)  # a == b, else DimError(message with {a} and {b})
    ("broadcast", expr_a, expr_b, message)  # a == b or either is 1, else DimError(...)
    ("le", expr_a, expr_b, message)     # a <= b, else DimError(...)
    ("bound", expr, limit, message)     # 0 <= expr <= limit
    ("reshape", data_arg, shape_arg, first_slot)   # dyn.reshape: resolve 0 (copy) and -1
    ("reshape_allowzero", data_arg, shape_arg, first_slot)   # the same with 0 meaning 0
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


class DimError(Exception):
    """A run-time shape check failed; the VM reports it with the function and pc."""


Program = tuple  # tuple of statements
Compiled = Callable[[list, Sequence[Any]], None]


def _bcast(a: int, b: int) -> int:
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    raise DimError(f"dims {a} and {b} do not broadcast")


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise DimError("dim divided by zero")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise DimError("dim modulo zero")
    return a % b


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": _floordiv,
    "mod": _mod,
    "max": max,
    "min": min,
    "bcast": _bcast,
}


#: The grammar, once: tag -> operand kinds. "e" is a nested expression, "arg" an index into
#: ComputeDims' args, "slot" a dims slot, "int" any integer, "message:a,b" a check's message
#: and the fields it may use. The verifier checks files against it; a test checks every tag
#: compiles.
EXPRESSIONS: dict[str, tuple[str, ...]] = {
    "const": ("int",), "slot": ("slot",), "shape": ("arg", "int"), "value": ("arg",),
    "item": ("arg", "int"), "nonzero": ("arg",), "unique": ("arg", "int"),
    "arange_len": ("arg", "arg", "arg"),
    **{op: ("e", "e") for op in BINARY},
}
STATEMENTS: dict[str, tuple[str, ...]] = {
    "set": ("slot", "e"), "check": ("e", "e", "message:a,b"),
    "broadcast": ("e", "e", "message:a,b"), "le": ("e", "e", "message:a,b"),
    "bound": ("e", "int", "message:value,limit"), "reshape": ("arg", "arg", "slot"),
    "reshape_allowzero": ("arg", "arg", "slot"),
}
#: Tags that read tensor values, not only shapes: a program using one depends on data.
READS_VALUES = frozenset({"value", "item", "nonzero", "unique", "arange_len", "reshape",
                          "reshape_allowzero"})


def written_slots(program: Sequence[Any]) -> list[int]:
    """The dims slots a program's statements write, in order."""
    return [s[1] if s[0] == "set" else s[3] for s in program if s[0] in ("set", "reshape",
                                                                         "reshape_allowzero")]


def reads_values(node: Any) -> bool:
    """Whether a dim program (or statement, or expression) reads tensor values."""
    if isinstance(node, (tuple, list)):
        if node and isinstance(node[0], str) and node[0] in READS_VALUES:
            return True
        return any(reads_values(x) for x in node)
    return False


def _arange_len(start: Any, stop: Any, step: Any) -> int:
    start, stop, step = (np.asarray(v).item() for v in (start, stop, step))
    if step == 0:
        raise DimError("arange: step must not be zero")
    n = -((start - stop) // step) if isinstance(step, int) and isinstance(start, int) \
        and isinstance(stop, int) else int(np.ceil((stop - start) / step))
    return max(int(n), 0)


def unique_count(x: Any, axis: int) -> int:
    """How many distinct entries (``axis`` -1) or slices along ``axis`` ``x`` holds, as the
    ``unique`` op counts them: by value, every NaN equal to every other, -0.0 equal to 0.0."""
    x = np.asarray(x)
    if axis >= x.ndim or axis < -1:
        raise DimError(f"unique: axis {axis} is out of range for rank {x.ndim}")
    if x.size == 0:  # no entries; or slices that are all empty, so all one
        return 0 if axis == -1 or x.shape[axis] == 0 else 1
    rows = x.reshape(-1, 1) if axis == -1 else np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
    if rows.dtype.kind == "f":  # one bit pattern per value: +0.0 for both zeros, one NaN
        rows = np.where(rows == 0, rows.dtype.type(0), rows)
        rows = np.where(np.isnan(rows), rows.dtype.type(np.nan), rows)
    rows = np.ascontiguousarray(rows)
    return len(np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))))


def _item(x: Any, index: int) -> int:
    flat = np.asarray(x).reshape(-1)
    if not 0 <= index < flat.size:
        raise DimError(f"entry {index} of a size list of {flat.size} entries")
    return int(flat[index])


def compile_expr(e: tuple) -> Callable[[list, Sequence[Any]], int]:
    """A closure ``f(dims, args) -> int`` evaluating expression ``e``."""
    tag = e[0]
    if tag == "const":
        c = int(e[1])
        return lambda dims, args: c
    if tag == "slot":
        k = int(e[1])
        return lambda dims, args: dims[k]
    if tag == "shape":
        i, axis = int(e[1]), int(e[2])
        return lambda dims, args: args[i].shape[axis]
    if tag == "value":
        i = int(e[1])
        return lambda dims, args: int(np.asarray(args[i]).item())
    if tag == "item":
        i, index = int(e[1]), int(e[2])
        return lambda dims, args: _item(args[i], index)
    if tag == "nonzero":
        i = int(e[1])
        return lambda dims, args: int(np.count_nonzero(args[i]))
    if tag == "unique":
        i, axis = int(e[1]), int(e[2])
        return lambda dims, args: unique_count(args[i], axis)
    if tag == "arange_len":
        a, b, c = (int(x) for x in e[1:4])
        return lambda dims, args: _arange_len(args[a], args[b], args[c])
    if tag in BINARY:
        fn = BINARY[tag]
        left, right = compile_expr(e[1]), compile_expr(e[2])
        return lambda dims, args: fn(left(dims, args), right(dims, args))
    raise ValueError(f"unknown dim expression {tag!r}")


def _reshape_dims(data: np.ndarray, shape: np.ndarray, allowzero: bool = False) -> list[int]:
    """Resolve the 0 (copy the input dim, unless ``allowzero``) and -1 (infer) codes of a
    run-time reshape target, as ONNX Reshape and Relay's dyn.reshape do.

    The -1 dim is the product of the input dims no 0 copied over the product of the other
    output dims, so copied dims cancel even when they are 0 (the reference's rule).
    """
    codes = [int(v) for v in np.asarray(shape).reshape(-1)]
    if allowzero and -1 in codes and 0 in codes:
        raise DimError(f"dyn.reshape: with allowzero, 0 and -1 cannot both appear in {codes}")
    if codes.count(-1) > 1 or any(c < -1 for c in codes):
        raise DimError(f"dyn.reshape: invalid target shape {codes}")
    copied = set() if allowzero else {i for i, c in enumerate(codes) if c == 0}
    if any(i >= data.ndim for i in copied):
        raise DimError(f"dyn.reshape: 0 at position {max(copied)} of {codes} has no input dim "
                       f"to copy in {data.shape}")
    out = [data.shape[i] if i in copied else c for i, c in enumerate(codes)]
    rest_in = int(np.prod([d for i, d in enumerate(data.shape) if i not in copied],
                          dtype=np.int64))
    rest_out = int(np.prod([c for i, c in enumerate(out) if c != -1 and i not in copied],
                           dtype=np.int64))
    if -1 in out:
        if rest_out == 0 or rest_in % rest_out:
            raise DimError(f"dyn.reshape: cannot reshape {data.shape} into {codes}")
        out[out.index(-1)] = rest_in // rest_out
    elif rest_in != rest_out:
        raise DimError(f"dyn.reshape: cannot reshape {data.shape} into {codes}")
    return out


def _statement(s: tuple) -> Compiled:
    tag = s[0]
    if tag == "set":
        k, f = int(s[1]), compile_expr(s[2])

        def run_set(dims: list, args: Sequence[Any]) -> None:
            dims[k] = f(dims, args)
        return run_set
    if tag == "check":
        fa, fb, message = compile_expr(s[1]), compile_expr(s[2]), str(s[3])

        def run_check(dims: list, args: Sequence[Any]) -> None:
            a, b = fa(dims, args), fb(dims, args)
            if a != b:
                raise DimError(message.format(a=a, b=b))
        return run_check
    if tag == "broadcast":
        fa, fb, message = compile_expr(s[1]), compile_expr(s[2]), str(s[3])

        def run_broadcast(dims: list, args: Sequence[Any]) -> None:
            a, b = fa(dims, args), fb(dims, args)
            if a != b and a != 1 and b != 1:
                raise DimError(message.format(a=a, b=b))
        return run_broadcast
    if tag == "le":
        fa, fb, message = compile_expr(s[1]), compile_expr(s[2]), str(s[3])

        def run_le(dims: list, args: Sequence[Any]) -> None:
            a, b = fa(dims, args), fb(dims, args)
            if a > b:
                raise DimError(message.format(a=a, b=b))
        return run_le
    if tag == "bound":
        f, limit, message = compile_expr(s[1]), int(s[2]), str(s[3])

        def run_bound(dims: list, args: Sequence[Any]) -> None:
            v = f(dims, args)
            if not 0 <= v <= limit:
                raise DimError(message.format(value=v, limit=limit))
        return run_bound
    if tag in ("reshape", "reshape_allowzero"):
        data_i, shape_i, first = int(s[1]), int(s[2]), int(s[3])
        allowzero = tag == "reshape_allowzero"

        def run_reshape(dims: list, args: Sequence[Any]) -> None:
            for j, v in enumerate(_reshape_dims(args[data_i], args[shape_i], allowzero)):
                dims[first + j] = v
        return run_reshape
    raise ValueError(f"unknown dim statement {tag!r}")


#: How many input signatures a memoized program remembers (then it starts again).
MEMO_ENTRIES = 64


def compile_program(program: Program) -> Compiled:
    """A closure ``run(dims, args)`` executing every statement of ``program`` in order.

    A program that reads no tensor values computes the same dims, and passes the same checks,
    whenever the slots and shapes it reads are the same: it is memoized on them (the storage
    sizes a symbolic model's memory plan computes on every call are a long expression; a
    function with control flow is not replayed, so it would evaluate them call after call).
    """
    steps = tuple(_statement(s) for s in program)
    if len(steps) == 1:
        run = steps[0]
    else:
        def run(dims: list, args: Sequence[Any]) -> None:
            for step in steps:
                step(dims, args)
    if reads_values(program):
        return run
    return _memoized(run, program)


def _memoized(run: Compiled, program: Program) -> Compiled:
    slots, shapes = _inputs(program)
    written = tuple(written_slots(program))
    memo: dict[tuple, tuple] = {}  # shared by threads: each entry is written whole, once

    def run_memoized(dims: list, args: Sequence[Any]) -> None:
        key = (tuple([dims[k] for k in slots]),
               tuple([args[i].shape[axis] for i, axis in shapes]))
        known = memo.get(key)
        if known is None:
            run(dims, args)  # raises before anything is remembered if a check fails
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            memo[key] = tuple([dims[k] for k in written])
            return
        for k, v in zip(written, known):
            dims[k] = v
    return run_memoized


def _inputs(program: Program) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """The slots a program reads before writing them, and the (arg, axis) shapes it reads."""
    slots: list[int] = []
    shapes: list[tuple[int, int]] = []
    done: set[int] = set()

    def walk(e: Any) -> None:
        if not isinstance(e, tuple) or not e or not isinstance(e[0], str):
            return
        if e[0] == "slot" and e[1] not in done and e[1] not in slots:
            slots.append(int(e[1]))
        elif e[0] == "shape" and (e[1], e[2]) not in shapes:
            shapes.append((int(e[1]), int(e[2])))
        elif e[0] in BINARY:
            walk(e[1])
            walk(e[2])

    for s in program:
        for operand in s[1:]:
            walk(operand)
        if s[0] == "set":
            done.add(int(s[1]))
    return tuple(slots), tuple(shapes)


def format_expr(e: tuple, slot_names: Sequence[str] = ()) -> str:
    """Human-readable text of an expression (for the disassembler)."""
    tag = e[0]
    if tag == "const":
        return str(e[1])
    if tag == "slot":
        k = e[1]
        return slot_names[k] if k < len(slot_names) else f"d{k}"
    if tag == "shape":
        return f"shape(${e[1]})[{e[2]}]"
    if tag in ("value", "nonzero"):
        return f"{tag}(${e[1]})"
    if tag == "item":
        return f"item(${e[1]})[{e[2]}]"
    if tag == "arange_len":
        return "arange_len(" + ", ".join(f"${a}" for a in e[1:4]) + ")"
    sym = {"add": "+", "sub": "-", "mul": "*", "floordiv": "/", "mod": "%"}.get(tag)
    a, b = format_expr(e[1], slot_names), format_expr(e[2], slot_names)
    return f"({a} {sym} {b})" if sym else f"{tag}({a}, {b})"
