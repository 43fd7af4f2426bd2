"""The grammar of the text format, the lark parser built from it, and its error messages.

The grammar is ``grammar/relay.lark`` in the source tree, installed as
``relvm/grammar/relay.lark``. This is the only module that sees lark's exceptions:
:func:`parse_tree` turns each of them into a :class:`~relvm.errors.RelvmSyntaxError` that says,
in the text format's own terms, what was found and what was expected::

    unexpected ')'; expected an expression at line 2, column 10
        add(%x, )
                ^
"""

from __future__ import annotations

import functools
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import (LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                             UnexpectedToken)

from ..errors import RelvmSyntaxError

GRAMMAR_FILE = "relay.lark"


def grammar_path() -> Path:
    """Where the grammar file is: installed package data first, then the source tree."""
    here = Path(__file__).resolve()
    candidates = (here.parents[1] / "grammar" / GRAMMAR_FILE,
                  here.parents[2] / "grammar" / GRAMMAR_FILE)
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"relvm's grammar {GRAMMAR_FILE} is missing; looked in "
                            + ", ".join(str(p.parent) for p in candidates))


def grammar_text() -> str:
    """The text of the lark grammar."""
    return grammar_path().read_text(encoding="utf-8")


@functools.cache
def lark_parser() -> Lark:
    """The LALR parser, built once per process."""
    return Lark(grammar_text(), parser="lalr", propagate_positions=True, maybe_placeholders=True)


def parse_tree(text: str) -> Tree:
    """Parse ``text`` into lark's tree.

    Raises
    ------
    RelvmSyntaxError
        For any text the grammar rejects; never a lark exception.
    """
    try:
        return lark_parser().parse(text)
    except UnexpectedInput as e:
        raise _Describer(lark_parser(), text).error(e) from None
    except LarkError:
        raise RelvmSyntaxError("malformed program", None, None, text) from None


# --- error messages ---------------------------------------------------------------------------

#: How messages name the terminals that are patterns rather than fixed strings.
_PATTERN_WORDS = {
    "LOCAL": "a %variable",
    "GLOBAL": "an @function",
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": 'a "string"',
    "PROJ": "a projection like .0",
    "VERSION": "the version header",
    "$END": "the end of the input",
}

#: When every marker of a group is expected, its members are summed up by one phrase.
#: Entries are terminal names (upper case) or the fixed strings of anonymous terminals.
_GROUPS = (
    ("an expression", {"LOCAL", "GLOBAL"},
     {"LOCAL", "GLOBAL", "NUMBER", "NAME", "(", "-", "{", "True", "False", "meta", "if", "fn"}),
    ("a type", {"Tensor"}, {"NAME", "Tensor", "(", "fn"}),
    ("a dimension", {"?"}, {"NUMBER", "NAME", "?", "(", "-"}),
    ("an attribute value", {"STRING"},
     {"NUMBER", "-", "STRING", "True", "False", "None", "NAME", "[", "?", "("}),
)


class _Describer:
    """Turns one lark exception into a RelvmSyntaxError for ``text``."""

    def __init__(self, parser: Lark, text: str):
        self.text = text
        # Terminal name -> its fixed string, for anonymous terminals like LPAR -> "(".
        self.strings = {t.name: t.pattern.value for t in parser.terminals
                        if t.pattern.type == "str"}

    def error(self, e: UnexpectedInput) -> RelvmSyntaxError:
        comment = self.unclosed_comment(getattr(e, "pos_in_stream", None))
        if comment is not None:
            return self.located("unterminated block comment: no closing */", *comment)
        if isinstance(e, UnexpectedToken):
            return self.unexpected_token(e)
        if isinstance(e, UnexpectedCharacters):
            return self.unexpected_characters(e)
        if isinstance(e, UnexpectedEOF):
            line, column = self.end_of_text()
            return self.located("unexpected end of input" + self.expecting(e.expected),
                                line, column)
        return self.located("malformed program", getattr(e, "line", None),
                            getattr(e, "column", None))

    def located(self, message: str, line: int | None, column: int | None) -> RelvmSyntaxError:
        if line is not None and line < 1:
            line = column = None
        return RelvmSyntaxError(message, line, column, self.text)

    def unexpected_token(self, e: UnexpectedToken) -> RelvmSyntaxError:
        token = e.token
        if token.type == "$END":
            # lark places the end at the last token; point just past it, where input is missing.
            line, column = (token.end_line, token.end_column) if token.end_line \
                else self.end_of_text()
            return self.located("unexpected end of input" + self.expecting(self.accepted(e)),
                                line, column)
        message = f"unexpected {self.describe_token(token)}" + self.expecting(self.accepted(e))
        return self.located(message + self.missing_semicolon(e), token.line, token.column)

    def unexpected_characters(self, e: UnexpectedCharacters) -> RelvmSyntaxError:
        if self.text.startswith('"', e.pos_in_stream):
            message = "unterminated string: no closing \" on this line"
        else:
            message = f"unexpected character {e.char!r}" + self.expecting(self.accepted(e))
        return self.located(message, e.line, e.column)

    @staticmethod
    def accepted(e: UnexpectedInput) -> set[str]:
        """The terminals the parser would have taken where it stopped.

        lark's own ``expected`` is the LALR lookahead set, which state merging makes too wide
        (and keywords are missing from it); replaying each terminal gives the exact set.
        """
        fallback = getattr(e, "expected", None) or getattr(e, "allowed", None) or set()
        parser = getattr(e, "interactive_parser", None)
        if parser is None:
            return set(fallback)
        try:
            return set(parser.accepts())
        except LarkError:
            return set(fallback)

    def unclosed_comment(self, pos: int | None) -> tuple[int, int] | None:
        """Line and column of a ``/*`` at or before ``pos`` that nothing closes, if any.

        The lexer skips closed comments, so such an opener is what went wrong, even when lark
        stumbled later (``n /* ...`` lexes as a division, then fails at ``*``).
        """
        end = len(self.text) if pos is None else pos + 2
        start = self.text.rfind("/*", 0, end)
        if start == -1 or self.text.find("*/", start + 2) != -1:
            return None
        line_start = self.text.rfind("\n", 0, start) + 1
        return self.text.count("\n", 0, start) + 1, start - line_start + 1

    def end_of_text(self) -> tuple[int, int]:
        lines = self.text.split("\n")
        return len(lines), len(lines[-1]) + 1

    def describe_token(self, token: Token) -> str:
        if token.type in self.strings:
            return f"'{token.value}'"
        if token.type in ("LOCAL", "GLOBAL"):
            return str(token.value)
        if token.type == "NAME":
            return f"name '{token.value}'"
        if token.type == "NUMBER":
            return f"number {token.value}"
        if token.type == "STRING":
            return f"string {token.value}"
        if token.type == "PROJ":
            return f"projection '{token.value}'"
        return _PATTERN_WORDS.get(token.type, repr(str(token.value)))

    def expecting(self, expected) -> str:
        """'; expected an expression or ')'' for a set of terminal names, or ''."""
        keys = {self.strings.get(name, name) for name in expected}
        phrases: list[str] = []
        for phrase, markers, members in _GROUPS:
            if markers <= keys:
                phrases.append(phrase)
                keys -= members
        phrases += sorted(f"'{k}'" if k not in _PATTERN_WORDS else _PATTERN_WORDS[k]
                          for k in keys)
        if not phrases:
            return ""
        if len(phrases) > 6:
            phrases = phrases[:6] + ["..."]
        text = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " or " + phrases[-1]
        return "; expected " + text

    def missing_semicolon(self, e: UnexpectedToken) -> str:
        """A hint when a binding's ';' is likely missing at the end of the previous line."""
        history = getattr(e, "token_history", None) or ()
        if ";" not in {self.strings.get(name) for name in self.accepted(e)} or not history:
            return ""
        previous = history[-1]
        if previous.end_line and e.token.line and previous.end_line < e.token.line:
            return f" (missing ';' at the end of line {previous.end_line}?)"
        return ""
