"""Mutations of program text for fuzzing: :func:`mutant` derives one mutant from seed programs
and an index, deterministically, so a finding is reproduced from its index alone.

Text edits flip characters, delete, duplicate, swap or insert tokens, make numbers huge,
negative or fractional, change dtypes, attribute names and values, dims and op names, delete
brackets and nest operands hundreds deep; IR edits (printed back to text) retarget an op call
to another op of as many inputs, or set an attribute to an edge value of its kind.
``relvm.testing.campaign`` checks the mutants.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Sequence

#: Tokens of the text format, roughly as the lexer sees them.
TOKEN = re.compile(r'"[^"\n]*"|%[A-Za-z0-9_]+|@[A-Za-z_]\w*|\.[0-9]+|[0-9]+(?:\.[0-9]+)?'
                   r'(?:[eE][+-]?[0-9]+)?[A-Za-z0-9]*|[A-Za-z_][\w.]*|->|\S')
NUMBER = re.compile(r"(?<![%\w.])[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[A-Za-z0-9]*")
ATTRIBUTE = re.compile(r"\b([a-z_]+)=")
ATTRIBUTE_VALUE = re.compile(r"\b[a-z_]+=(\[[^\[\]]*\]|\"[^\"]*\"|[^,)\s]+)")
DTYPE = re.compile(r"\b(float32|float64|float16|int64|int32|int8|uint8|bool|int16|uint16|uint32|"
                   r"uint64)\b")
SHAPE = re.compile(r"Tensor\[\(([^()]*)\)")
OP_CALL = re.compile(r"\b([a-z_][a-z0-9_]*(?:\.[a-z_0-9]+)*)\(")
BRACKET = re.compile(r"[()\[\]{}]")
EXPRESSION = re.compile(r"%[A-Za-z0-9_]+|\b[0-9]+(?:\.[0-9]+)?f\b")

NUMBERS = ("0", "1", "-1", "-7", "2147483648", "4294967296", "281474976710657",
           "9223372036854775808", "99999999999999999999", "9" * 400, "0.5", "-0.5", "1e400",
           "1e-400", "inf", "-inf", "nan", "3.7f", "1i64", "255u8", "-128i8", "65536",
           "1e308", "0f", "7f16", "2f64")
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool", "int16",
          "uint16", "uint32", "uint64", "int128", "Tensor", "fn")
ATTRIBUTES = ("axis", "axes", "newshape", "shape", "dtype", "strides", "padding", "units",
              "a_min", "a_max", "alpha", "num_newaxis", "indices_or_sections", "keepdims",
              "exclude", "begin", "end", "pool_size", "groups", "channels", "kernel_size",
              "dilation", "layout", "data_layout", "epsilon", "reps", "repeats", "k", "depth",
              "out_dtype", "transpose_b", "allowzero", "mode", "method", "size", "scale")
VALUES = ("0", "1", "-1", "99999999", "9" * 40, "1e400", "nan", "inf", "[]", "[0]", "[-1]",
          "[1, 2, 3]", "[99999999, 99999999]", "[0, 0, 0, 0]", "[[1, 2], [3, 4]]", '"NCHW"',
          '"float32"', '"int64"', '""', "None", "True", "False", "n", "[n, 2]", "?", "[1.5]",
          "[" * 20 + "]" * 20, "-inf", "[-9223372036854775808]", "0.0")
DIMS = ("n", "m", "?", "0", "1", "2", "n*2", "n+1", "n-5", "n/0", "n%3", "max(n, 3)",
        "99999999999", "281474976710656", "2147483648", "n*n*n*n", "(n+1)*(m+1)", "-1")
VOCABULARY = ("(", ")", "{", "}", "[", "]", ",", ";", "=", "->", ".0", ".7", "%0", "%zz",
              "@main", "@f", "fn", "if", "else", "let", "def", "meta", "True", "None", "?",
              "Tensor", "-", "*", "/", "%", "/*", "*/", "//", "\0", "\udcff", "\u00e9",
              "meta[relay.Constant][0]", "meta[relay.Constant][99999999999]",
              '#[version = "0.0.5"]', "#[metadata]", "x" * 300)
NESTINGS = ("({})", "({},)", "{{ {} }}", "nn.relu({})", "exp({})", "({}, {}).0",
            "if (True) {{ {} }} else {{ {} }}", "fn () {{ {} }}()", "let %q = {}; %q",
            "add({}, {})", "reshape({}, newshape=[-1])", "cast({}, dtype=\"int8\")")


#: Characters a nesting may grow an operand to: the parser reads some 20,000 tokens a second, so
#: a mutant stays well inside the time limit unless something is wrong.
MAX_GROWTH = 4_000


def _ops() -> tuple[str, ...]:
    from ..ops import OPS

    return tuple(sorted(OPS))


# --- mutations: each takes the text and a Random, returns the new text ----------------------------

def _spans(pattern: re.Pattern, text: str, group: int = 0) -> list[tuple[int, int]]:
    return [m.span(group) for m in pattern.finditer(text)]


def _replace_one(text: str, rng: random.Random, pattern: re.Pattern, choices: Sequence[str],
                 group: int = 0) -> str:
    spans = _spans(pattern, text, group)
    if not spans:
        return text
    a, b = rng.choice(spans)
    return text[:a] + rng.choice(choices) + text[b:]


def flip_character(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text))
    code = ord(text[i]) ^ (1 << rng.randrange(8 if rng.random() < 0.9 else 16))
    return text[:i] + chr(code) + text[i + 1:]


def delete_token(text: str, rng: random.Random) -> str:
    a, b = rng.choice(_spans(TOKEN, text))
    return text[:a] + text[b:]


def duplicate_token(text: str, rng: random.Random) -> str:
    a, b = rng.choice(_spans(TOKEN, text))
    return text[:b] + " " + text[a:b] + text[b:]


def swap_tokens(text: str, rng: random.Random) -> str:
    spans = _spans(TOKEN, text)
    (a, b), (c, d) = sorted(rng.sample(spans, 2)) if len(spans) > 1 else (spans[0], spans[0])
    if b > c:
        return text
    return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]


def insert_token(text: str, rng: random.Random) -> str:
    a, _ = rng.choice(_spans(TOKEN, text))
    return text[:a] + rng.choice(VOCABULARY) + " " + text[a:]


def replace_number(text: str, rng: random.Random) -> str:
    return _replace_one(text, rng, NUMBER, NUMBERS)


def change_dtype(text: str, rng: random.Random) -> str:
    return _replace_one(text, rng, DTYPE, DTYPES)


def change_attribute_name(text: str, rng: random.Random) -> str:
    return _replace_one(text, rng, ATTRIBUTE, ATTRIBUTES, group=1)


def change_attribute_value(text: str, rng: random.Random) -> str:
    return _replace_one(text, rng, ATTRIBUTE_VALUE, VALUES, group=1)


def change_dim(text: str, rng: random.Random) -> str:
    spans = _spans(SHAPE, text, 1)
    if not spans:
        return text
    a, b = rng.choice(spans)
    dims = [d.strip() for d in text[a:b].split(",") if d.strip()]
    how = rng.randrange(3)
    if how == 0 or not dims:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(DIMS))
    elif how == 1:
        dims.pop(rng.randrange(len(dims)))
    else:
        dims[rng.randrange(len(dims))] = rng.choice(DIMS)
    return text[:a] + ", ".join(dims) + text[b:]


def replace_op(text: str, rng: random.Random) -> str:
    return _replace_one(text, rng, OP_CALL, _ops(), group=1)


def delete_bracket(text: str, rng: random.Random) -> str:
    spans = _spans(BRACKET, text)
    if not spans:
        return text
    a, b = rng.choice(spans)
    return text[:a] + text[b:]


def nest(text: str, rng: random.Random) -> str:
    """Wrap one operand in a construct, once or many times over."""
    spans = _spans(EXPRESSION, text)
    if not spans:
        return text
    a, b = rng.choice(spans)
    inner = text[a:b]
    form = rng.choice(NESTINGS)
    for _ in range(rng.choice((1, 1, 2, 5, 40, 300))):
        inner = form.format(inner, inner) if form.count("{}") == 2 else form.format(inner)
        if len(inner) > MAX_GROWTH:
            break
    return text[:a] + inner + text[b:]


def repeat_line(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    how = rng.randrange(3)
    if how == 0:
        lines.insert(i, lines[i])
    elif how == 1:
        lines.pop(i)
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


# --- mutations of the IR: other ops and attribute values, printed back to text --------------------

#: Attribute values to try; each attribute takes those its kind accepts (``AttrKind.convert``).
CANDIDATES = (0, 1, -1, 2, 3, 4, 7, -2, 2**31, 2**40, 2**62, 0.5, -1.5, 1e30, math.nan, math.inf,
              -math.inf, True, False, None, "", "NCHW", "NHWC", "OIHW", "float32", "int64",
              "int8", "bool", [], [0], [1], [-1], [2], [1, 2], [2, 2], [0, 1], [1, 0], [3, 3],
              [0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [-1, 0], [0, -1], [2**40], [1, 2, 3],
              [[0, 1], [1, 0]], [[0, 0], [0, 0], [1, 1], [1, 1]], [[1, 1]], [0.5], [2.0, 2.0],
              ["sigmoid", "tanh", "tanh"])


def _attr_values(kind) -> list:
    options = re.findall(r"'([^']*)'", kind.name) if kind.name.startswith("one of") else []
    out = []
    for v in list(CANDIDATES) + options:
        try:
            kind.convert(v)
        except (ValueError, TypeError):
            continue
        out.append(v)
    return out


def _calls(module) -> list:
    from ..ir.nodes import Call, post_order
    from ..ops.registry import Op

    return [n for fn in module.functions.values() for n in post_order(fn.body, True)
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name != "fused"]


def _replaced(module, target, make) -> str:
    """The text of ``module`` with the call ``target`` replaced by ``make(call)`` (the call with
    its arguments already rewritten)."""
    from .. import print_module
    from ..passes.rewrite import Rewriter, rewrite_module

    class Replace(Rewriter):
        def visit_Call(self, call):
            new = super().visit_Call(call)
            return make(new) if call is target else new

    return print_module(rewrite_module(module, Replace))


def retarget_op(module, rng: random.Random) -> str | None:
    """One op call becomes another op of as many inputs, with attributes its kinds accept."""
    from ..ir.nodes import Call
    from ..ops import OPS

    calls = _calls(module)
    if not calls:
        return None
    target = rng.choice(calls)
    ops = [op for op in OPS.values() if len(op.inputs) == len(target.args) and op.name != "fused"]
    op = rng.choice(ops)
    given = {}
    for spec in op.attrs:
        values = _attr_values(spec.kind)
        if values and (spec.required or rng.random() < 0.3):
            given[spec.name] = rng.choice(values)
    return _replaced(module, target, lambda c: Call(op, c.args, op.make_attrs(given),
                                                    span=c.span))


def tweak_attribute(module, rng: random.Random) -> str | None:
    """One attribute of one call takes another value of its kind."""
    from ..ir.nodes import Call

    calls = [c for c in _calls(module) if c.op.attrs]
    if not calls:
        return None
    target = rng.choice(calls)
    spec = rng.choice(target.op.attrs)
    values = _attr_values(spec.kind)
    if not values:
        return None
    given = dict(target.attrs)
    given[spec.name] = rng.choice(values)
    return _replaced(module, target, lambda c: Call(c.op, c.args, c.op.make_attrs(given),
                                                    span=c.span))


IR_MUTATIONS = (retarget_op, tweak_attribute, tweak_attribute)

MUTATIONS = (flip_character, delete_token, duplicate_token, swap_tokens, insert_token,
             replace_number, replace_number, change_dtype, change_attribute_name,
             change_attribute_value, change_attribute_value, change_dim, change_dim, replace_op,
             replace_op, delete_bracket, nest, repeat_line)


@dataclass(frozen=True)
class Seed:
    """A program to mutate: its text and the values of its ``meta[relay.Constant][k]``."""

    name: str
    text: str
    constants: Any = None


_parsed: dict = {}


def _module(base: Seed):
    """The seed's module, parsed once per process."""
    import relvm

    key = (base.name, base.text)
    if key not in _parsed:
        _parsed[key] = relvm.parse(base.text, constants=base.constants)
    return _parsed[key]


def mutant(seeds: Sequence[Seed], index: int, seed: int = 0) -> tuple[Seed, str, list[str]]:
    """Mutant ``index``: (the seed it came from, its text, the mutations applied).

    A third of the mutants first change the seed's IR (another op, another attribute value)
    and print it; then one to three edits of the text follow (none, for some IR mutants).
    """
    rng = random.Random(f"{seed}:{index}")
    base = seeds[index % len(seeds)]
    text, applied = base.text, []
    edits = rng.choice((1, 1, 1, 2, 2, 3))
    if rng.random() < 0.35:
        mutation = rng.choice(IR_MUTATIONS)
        changed = mutation(_module(base), rng)
        if changed is not None:
            text = changed
            applied.append(mutation.__name__)
            edits = rng.choice((0, 0, 0, 1))
    for _ in range(edits):
        if not text.strip():
            break
        mutation = rng.choice(MUTATIONS)
        text = mutation(text, rng)
        applied.append(mutation.__name__)
    return base, text, applied
