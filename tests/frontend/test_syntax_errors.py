"""Bad programs: each error has the right class, line and column, a caret under the source, and
no lark exception ever reaches the caller."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from relvm.errors import RelvmError, RelvmSyntaxError, RelvmTypeError
from relvm.frontend.parser import parse

CONV = ("def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {\n"
        "  nn.conv2d(%x, %w, stride=[2, 2])\n}")

#: (name, text, class, line, column, a fragment of the message)
ERRORS = [
    ("unexpected_token", "def @main(%x: float32) {\n  add(%x, )\n}",
     RelvmSyntaxError, 2, 11, "unexpected ')'; expected an expression"),
    ("unexpected_keyword", "def @main(%x: float32) {\n  let = exp(%x);\n  %x\n}",
     RelvmSyntaxError, 2, 7, "unexpected '='; expected a %variable"),
    ("missing_type", "def @main(%x: ) { %x }",
     RelvmSyntaxError, 1, 15, "expected a type"),
    ("missing_dim", "def @main(%x: Tensor[(3 + ), float32]) { %x }",
     RelvmSyntaxError, 1, 27, "expected a dimension"),
    ("missing_semicolon", "def @main(%x: float32) {\n  %0 = exp(%x)\n  %0\n}",
     RelvmSyntaxError, 3, 3, "missing ';' at the end of line 2"),
    ("top_level_garbage", "hello", RelvmSyntaxError, 1, 1, "unexpected name 'hello'"),
    ("unexpected_character", "def @main(%x: float32) {\n  add(%x, $)\n}",
     RelvmSyntaxError, 2, 11, "unexpected character '$'"),
    ("unexpected_eof", "def @main(%x: float32) {\n  add(%x, %x)\n",
     RelvmSyntaxError, 2, 14, "unexpected end of input; expected '(', '}'"),
    ("unterminated_block_comment", "def @main(%x: float32) {\n  /* never closed\n  %x\n}",
     RelvmSyntaxError, 2, 3, "unterminated block comment"),
    ("unterminated_comment_in_dims", "def @main(%x: Tensor[(n /* oops, 3), float32]) { %x }",
     RelvmSyntaxError, 1, 25, "unterminated block comment"),
    ("unterminated_string", 'def @main(%x: float32) {\n  cast(%x, dtype="float32)\n}',
     RelvmSyntaxError, 2, 18, "unterminated string"),
    ("unknown_op", "def @main(%x: float32) {\n  nn.rleu(%x)\n}",
     RelvmSyntaxError, 2, 3, "unknown op 'nn.rleu'; did you mean nn.relu"),
    ("unknown_variable_near", "def @main(%x: float32, %input: float32) {\n  add(%x, %inptu)\n}",
     RelvmSyntaxError, 2, 11, "unknown variable %inptu; did you mean %input?"),
    ("unknown_variable_in_scope", "def @main(%x: float32) {\n  add(%x, %y)\n}",
     RelvmSyntaxError, 2, 11, "unknown variable %y; in scope: %x"),
    ("let_cannot_see_itself", "def @main(%x: float32) {\n  let %z = exp(%z);\n  %z\n}",
     RelvmSyntaxError, 2, 16, "unknown variable %z"),
    ("unknown_global", "def @main(%x: float32) {\n  @mian(%x)\n}\ndef @maim(%x: float32) { %x }",
     RelvmSyntaxError, 2, 3, "unknown global function @mian; did you mean @main"),
    ("duplicate_def", "def @f(%x: float32) { %x }\ndef @f(%x: float32) { %x }",
     RelvmSyntaxError, 2, 5, "@f is defined twice (first at line 1)"),
    ("duplicate_param", "def @f(%x: float32, %x: float32) { %x }",
     RelvmSyntaxError, 1, 21, "parameter %x of @f is declared twice"),
    ("unknown_dtype", "def @main(%x: Tensor[(3), flaot32]) { %x }",
     RelvmSyntaxError, 1, 27, "unknown dtype 'flaot32'; did you mean float32? relvm supports"),
    ("unknown_scalar_dtype", "def @main(%x: int128) { %x }",
     RelvmSyntaxError, 1, 15, "unknown dtype 'int128'"),
    ("attribute_name_typo", CONV,
     RelvmTypeError, 2, 21, "nn.conv2d has no attribute 'stride'; did you mean 'strides'?"),
    ("attribute_wrong_type", 'def @main(%x: float32) {\n  clip(%x, a_min="zero", a_max=1f)\n}',
     RelvmTypeError, 2, 12, "attribute 'a_min' expects a number"),
    ("attribute_missing", "def @main(%x: float32) {\n  clip(%x, a_max=1f)\n}",
     RelvmTypeError, 2, 3, "clip needs attribute 'a_min'"),
    ("attribute_unquoted_string", "def @main(%x: float32) {\n  cast(%x, dtype=int8)\n}",
     RelvmTypeError, 2, 12, 'strings are written in double quotes: "int8"'),
    ("attribute_given_twice", "def @main(%x: float32) {\n  nn.leaky_relu(%x, alpha=1, alpha=2)\n}",
     RelvmSyntaxError, 2, 30, "attribute alpha is given twice"),
    ("positional_after_attribute", "def @main(%x: float32) {\n  nn.softmax(axis=0, %x)\n}",
     RelvmSyntaxError, 2, 22, "positional argument after attributes"),
    ("attributes_on_function_call", "def @f(%x: float32) { %x }\ndef @main(%x: float32) {\n"
     "  @f(%x, a=1)\n}", RelvmSyntaxError, 3, 10, "only op calls take attributes"),
    ("op_arity", "def @main(%x: float32) {\n  add(%x)\n}",
     RelvmTypeError, 2, 3, "add takes 2 input(s) (lhs, rhs), got 1"),
    ("missing_param_annotation", "def @main(%x) {\n  %x\n}",
     RelvmSyntaxError, 1, 11, "parameter %x of @main needs a type annotation"),
    ("missing_closure_param_annotation", "def @main(%x: float32) {\n  %0 = fn (%y) { %y };\n"
     "  %0(%x)\n}", RelvmSyntaxError, 2, 12, "parameter %y of fn needs a type annotation"),
    ("unknown_literal_suffix", "def @main(%x: float32) { add(%x, 1i128) }",
     RelvmSyntaxError, 1, 34, "unknown literal suffix 'i128'"),
    ("literal_out_of_range", "def @main(%x: int8) {\n  add(%x, 300i8)\n}",
     RelvmSyntaxError, 2, 11, "literal 300i8 is out of range for int8"),
    ("negative_literal_out_of_range", "def @main(%x: uint8) {\n  add(%x, -1u8)\n}",
     RelvmSyntaxError, 2, 11, "literal -1u8 is out of range for uint8"),
    ("float_literal_overflow", "def @main(%x: float16) { add(%x, 1e6f16) }",
     RelvmSyntaxError, 1, 34, "out of range for float16"),
    ("integer_with_fraction", "def @main(%x: int64) { add(%x, 1.5i64) }",
     RelvmSyntaxError, 1, 32, "cannot have a fraction"),
    ("meta_kind", "def @main(%x: float32) { meta[relay.Var][0] }",
     RelvmSyntaxError, 1, 31, "only meta[relay.Constant][k] is supported"),
    ("negative_dim", "def @main(%x: Tensor[(-3), float32]) { %x }",
     RelvmSyntaxError, 1, 23, "dimension -3 is negative"),
    ("dim_divided_by_zero", "def @main(%x: Tensor[(n/0), float32]) { %x }",
     RelvmSyntaxError, 1, 23, "dimension divided by zero"),
    ("fractional_dim", "def @main(%x: Tensor[(2.5), float32]) { %x }",
     RelvmSyntaxError, 1, 23, "expected an integer for a dimension, got 2.5"),
    ("unknown_dim_function", "def @main(%x: Tensor[(avg(n, 2)), float32]) { %x }",
     RelvmSyntaxError, 1, 23, "unknown dimension function avg"),
    ("type_mismatch", "def @main(%x: Tensor[(3), float32], %y: Tensor[(4), float32]) {\n"
     "  add(%x, %y)\n}", RelvmTypeError, 2, 3, "shapes do not broadcast"),
]


def _caret(text: str, line: int, column: int) -> str:
    source_line = text.splitlines()[line - 1].expandtabs(1)
    return f"\n    {source_line}\n    {' ' * (column - 1)}^"


@pytest.mark.parametrize("name,text,cls,line,column,fragment", ERRORS, ids=[e[0] for e in ERRORS])
def test_error(name, text, cls, line, column, fragment):
    with pytest.raises(RelvmError) as info:
        parse(text)
    err = info.value
    assert type(err) is cls, str(err)
    assert (err.line, err.column) == (line, column), str(err)
    assert fragment in err.message
    assert _caret(text, line, column) in str(err)
    assert f"at line {line}, column {column}" in str(err)


def test_messages_never_show_lark_internals():
    for _, text, *_ in ERRORS:
        with pytest.raises(RelvmError) as info:
            parse(text)
        assert not re.search(r"Token\(|\b(RPAR|LPAR|__ANON|\$END|LOCAL|NAME)\b", str(info.value))


def test_errors_are_builtin_subclasses_too():
    with pytest.raises(ValueError):
        parse("def @main(%x: float32) { %y }")
    with pytest.raises(TypeError):
        parse("def @main(%x: float32) { add(%x) }")


# --- fuzzing: mutations of a valid program fail only with relvm errors ------------------------

VALID = """#[version = "0.0.5"]
def @main(%x: Tensor[(n, 4), float32], %w: Tensor[(8, 4), float32],
          %c: bool) -> Tensor[(n, 8), float32] {
  %0 = nn.dense(%x, %w, units=8); /* ty=Tensor[(n, 8), float32] */
  let %y: Tensor[(n, 8), float32] = nn.relu(%0);
  %1 = (%y, %0);
  %2 = fn (%a: Tensor[(n, 8), float32]) { multiply(%a, -1.5f) };
  if (%c) { %1.0 } else { %3 = %2(%1.1); add(%3, meta[relay.Constant][0]) }
}
def @f(%i: int64) -> int64 {
  if (equal(%i, 0i64)) { 1i64 } else { multiply(%i, @f(subtract(%i, 1i64))) } // recursion
}
"""

_TOKEN = re.compile(r'\s+|/\*.*?\*/|//[^\n]*|"[^"]*"|[%@]?[A-Za-z_0-9.]+|->|.', re.S)
_INSERTS = ["(", ")", "{", "}", "[", "]", ",", ";", "=", ".0", "%x", "%zz", "@f", "@nope", "let",
            "fn", "if", "else", "def", "-", "?", "*", "/", "%", "1f", "2i8", "True", "None",
            "meta", "Tensor", "float32", "nn.relu", "\"s\"", "/*", "*/", "#", "\n", "1e999f",
            "99999999999999999999999", "..", "'", "\\", "\x00", "é"]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _mutate(tokens: list[str], rng: random.Random) -> str:
    tokens = list(tokens)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(tokens))
        kind = rng.choice(["delete", "insert", "swap", "duplicate", "replace", "truncate"])
        if kind == "delete":
            del tokens[i]
        elif kind == "insert":
            tokens.insert(i, rng.choice(_INSERTS))
        elif kind == "swap" and i + 1 < len(tokens):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        elif kind == "duplicate":
            tokens.insert(i, tokens[i])
        elif kind == "replace":
            tokens[i] = rng.choice(_INSERTS + tokens)
        elif kind == "truncate":
            tokens = tokens[:i]
        if not tokens:
            tokens = [rng.choice(_INSERTS)]
    return "".join(tokens)


CONSTANTS = [np.ones(8, "float32")]


def test_the_fuzzed_program_is_valid():
    parse(VALID, constants=CONSTANTS)


def _parse_or_relvm_error(text: str) -> bool:
    """True if ``text`` was rejected; anything but a RelvmError propagates and fails the test."""
    try:
        parse(text, constants=CONSTANTS)
    except RelvmError as e:
        assert e.line is None or e.line >= 1
        return True
    return False


@pytest.mark.parametrize("seed", range(4))
def test_token_mutations_raise_only_relvm_errors(seed):
    rng = random.Random(seed)
    tokens = _tokens(VALID)
    assert "".join(tokens) == VALID
    rejected = sum(_parse_or_relvm_error(_mutate(tokens, rng)) for _ in range(150))
    assert rejected > 100  # the mutations do reach the error paths


def test_character_mutations_raise_only_relvm_errors():
    rng = random.Random(1234)
    alphabet = "(){}[],;:=.%@-+*/?#\"\n abcfin019_"
    for _ in range(300):
        i = rng.randrange(len(VALID))
        text = VALID[:i] + rng.choice(["", rng.choice(alphabet)]) + VALID[i + 1:]
        _parse_or_relvm_error(text)
