"""Parser fuzzing: generated programs survive print -> parse, and mutated program text (tokens
deleted, inserted, swapped or replaced) is either still a program or a relvm syntax or type
error -- never another exception."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relvm
from relvm.errors import RelvmCompileError, RelvmSyntaxError, RelvmTypeError
from relvm.testing import strategies as rst

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])

#: Tokens of the text format, roughly as the lexer sees them (strings, locals, globals,
#: numbers with suffixes, dotted names, the arrow, and any other single character).
TOKEN = re.compile(r'"[^"\n]*"|%[A-Za-z0-9_]+|@[A-Za-z_]\w*|\.[0-9]+|[0-9]+(?:\.[0-9]+)?'
                   r'(?:[eE][+-]?[0-9]+)?[A-Za-z0-9]*|[A-Za-z_][\w.]*|->|\S')

#: Extra tokens to insert: grammar punctuation and keywords, and literals at the edges.
VOCABULARY = ("(", ")", "{", "}", "[", "]", ",", ";", "=", "->", ".0", ".7", "%0", "%zz",
              "@main", "@f", "@nowhere", "fn", "if", "else", "let", "def", "meta", "True",
              "None", "?", "Tensor", "float32", "bool", "-", "*", "/", "%", "-1", "0", "1f",
              "1e999f", "99999999999999999999", "0i64", "3u8", "n", "axis=1", "\"NCHW\"",
              "nn.dense", "add", "/*", "*/", "//", '#[version = "0.0.5"]', "#[metadata]")


@FUZZ
@given(rst.programs())
def test_print_parse_round_trip(program) -> None:
    module = relvm.parse(program.text)
    printed = relvm.print_module(module)
    again = relvm.parse(printed)
    assert again == module, printed
    assert relvm.print_module(again) == printed


@st.composite
def mutated_texts(draw) -> str:
    """A generated program with one to three token edits."""
    text = draw(rst.program_texts(max_ops=4))
    for _ in range(draw(st.integers(1, 3))):
        spans = [m.span() for m in TOKEN.finditer(text)]
        tokens = [text[a:b] for a, b in spans]
        i = draw(st.integers(0, len(spans) - 1))
        a, b = spans[i]
        edit = draw(st.sampled_from(["delete", "insert", "replace", "swap"]))
        if edit == "delete":
            text = text[:a] + text[b:]
        elif edit in ("insert", "replace"):
            new = draw(st.sampled_from(VOCABULARY + tuple(tokens)))
            text = text[:a] + new + (" " + text[a:] if edit == "insert" else text[b:])
        else:
            j = draw(st.integers(0, len(spans) - 1))
            (a, b), (c, d) = sorted([spans[i], spans[j]])
            if b <= c:
                text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    return text


@FUZZ
@given(mutated_texts())
def test_mutated_text_is_a_program_or_a_relvm_error(text: str) -> None:
    try:
        module = relvm.parse(text)
    except (RelvmSyntaxError, RelvmTypeError) as e:
        assert str(e), "an error without a message"
        return
    # Still a well-typed program: it builds, or the compiler says why it cannot.
    try:
        relvm.build(module, backend="numpy")
    except RelvmCompileError:
        pass
