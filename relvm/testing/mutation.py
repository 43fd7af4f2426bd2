"""Mutation fuzzing of program text: every mutant is a program or a relvm error, in bounded time.

:func:`mutant` derives one mutant from seed programs and an index, deterministically (so a
finding is reproduced from its index alone). :func:`check` runs one mutant through the front end
and the compiler -- ``relvm.parse``, then ``relvm.build(fuse=False)`` if it type-checks, and on
request the default fused build and one VM invoke on inputs matching its signature -- and says
how it ended. :func:`campaign` checks a range of mutants in worker processes, so that a crash
(a segfault in a kernel) or a hang costs one mutant, not the run::

    report = campaign(seeds, count=10_000)
    assert not report.findings, report.describe()

A *finding* is an exception outside :class:`relvm.RelvmError`, a crash, or a mutant over the
time limit.
"""

from __future__ import annotations

import math
import multiprocessing
import random
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

#: Tokens of the text format, roughly as the lexer sees them.
TOKEN = re.compile(r'"[^"\n]*"|%[A-Za-z0-9_]+|@[A-Za-z_]\w*|\.[0-9]+|[0-9]+(?:\.[0-9]+)?'
                   r'(?:[eE][+-]?[0-9]+)?[A-Za-z0-9]*|[A-Za-z_][\w.]*|->|\S')
NUMBER = re.compile(r"(?<![%\w.])[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[A-Za-z0-9]*")
ATTRIBUTE = re.compile(r"\b([a-z_]+)=")
ATTRIBUTE_VALUE = re.compile(r"\b[a-z_]+=(\[[^\[\]]*\]|\"[^\"]*\"|[^,)\s]+)")
DTYPE = re.compile(r"\b(float32|float64|float16|int64|int32|int8|uint8|bool)\b")
SHAPE = re.compile(r"Tensor\[\(([^()]*)\)")
OP_CALL = re.compile(r"\b([a-z_][a-z0-9_]*(?:\.[a-z_0-9]+)*)\(")
BRACKET = re.compile(r"[()\[\]{}]")
EXPRESSION = re.compile(r"%[A-Za-z0-9_]+|\b[0-9]+(?:\.[0-9]+)?f\b")

NUMBERS = ("0", "1", "-1", "-7", "2147483648", "4294967296", "281474976710657",
           "9223372036854775808", "99999999999999999999", "9" * 400, "0.5", "-0.5", "1e400",
           "1e-400", "inf", "-inf", "nan", "3.7f", "1i64", "255u8", "-128i8", "65536",
           "1e308", "0f", "7f16", "2f64")
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool", "int16",
          "Tensor", "fn")
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


# --- checking one mutant -------------------------------------------------------------------------

#: A mutant is run only if its inputs and every value it computes are no larger (a mutant may
#: ask for terabytes).
MAX_INPUT_ELEMENTS = 100_000


@dataclass
class Outcome:
    """How one mutant ended: ``stage`` reached (parse, build, fused, run) and the error, if any."""

    index: int
    stage: str
    error: str | None = None      # the relvm error class that ended it
    finding: str | None = None    # an exception outside the family: its traceback
    elapsed: float = 0.0          # in all, less the fused build
    compiling: float = 0.0        # the fused build: mostly the C compiler, timed apart


def check(text: str, constants: Any = None, fused: bool = False, run: bool = False) -> Outcome:
    """Run one mutant; exceptions outside relvm's family become a finding (never raised)."""
    import relvm

    outcome = Outcome(-1, "parse")
    start = time.perf_counter()
    try:
        module = relvm.parse(text, constants=constants)
        outcome.stage = "build"
        exe = relvm.build(module, fuse=False)
        if fused:
            outcome.stage = "fused"
            began = time.perf_counter()
            exe = relvm.build(module)
            outcome.compiling = time.perf_counter() - began
        if run:
            inputs = _inputs(module)
            if inputs is not None:
                outcome.stage = "run"
                name = "main" if "main" in module.functions else next(iter(module.functions))
                relvm.VirtualMachine(exe).invoke(name, *inputs)
        outcome.stage = "done"
    except relvm.RelvmError as e:
        outcome.error = type(e).__name__
    except BaseException as e:  # noqa: BLE001  (the point: anything else is a finding)
        if isinstance(e, KeyboardInterrupt):
            raise
        outcome.finding = "".join(traceback.format_exception(type(e), e, e.__traceback__,
                                                             limit=-12))
    outcome.elapsed = time.perf_counter() - start - outcome.compiling
    return outcome


def _inputs(module) -> list | None:
    """Arrays matching the entry's parameter types, each symbol 1..3; None if none fit."""
    from ..ir import dims as D
    from ..ir.nodes import post_order
    from ..ir.types import TensorType, TupleType, tensor_types

    if not module.functions:
        return None
    name = "main" if "main" in module.functions else next(iter(module.functions))
    fn = module.functions[name]
    values: dict = {}
    rng = np.random.default_rng(0)

    def dim(d) -> int:
        for s in D.free_symbols(d):
            values.setdefault(s, 1 + len(values) % 3)
        v = D.substitute(d, values) if not isinstance(d, int) else d
        if not isinstance(v, int) or v < 0:
            raise ValueError(d)
        return v

    def make(t) -> Any:
        if isinstance(t, TupleType):
            return tuple(make(f) for f in t.fields)
        if not isinstance(t, TensorType):
            raise ValueError(t)
        shape = tuple(dim(d) for d in t.shape)
        if np.prod(shape, dtype=float) > MAX_INPUT_ELEMENTS:
            raise ValueError(shape)
        if t.dtype == "bool":
            return rng.integers(0, 2, shape).astype(bool)
        if t.dtype.startswith("float"):
            return rng.standard_normal(shape).astype(t.dtype)
        return rng.integers(0 if t.dtype == "uint8" else -5, 6, shape).astype(t.dtype)

    try:
        inputs = [make(p.checked_type) for p in fn.params]
        # A legal program may still compute on gigabytes (zeros(shape=[2147483648, 2])): it
        # would take minutes, not find a bug. Every typed node must be small at these dims.
        for f in module.functions.values():
            for node in post_order(f.body, into_functions=True):
                for t in tensor_types(node.checked_type) if node.checked_type else ():
                    shape = [D.substitute(d, values) if not isinstance(d, int) else d
                             for d in t.shape]
                    known = [d for d in shape if isinstance(d, int)]
                    if np.prod(known, dtype=float) > MAX_INPUT_ELEMENTS:
                        return None
        return inputs
    except (ValueError, OverflowError):
        return None


# --- a campaign over worker processes -------------------------------------------------------------

#: A fused build runs the system C compiler (several ISAs, -O3): its own, looser time limit.
COMPILE_LIMIT = 30.0

@dataclass
class Report:
    """What a campaign saw: counts per stage, the slowest mutant, and every finding."""

    count: int = 0
    elapsed: float = 0.0
    stages: dict = field(default_factory=dict)
    slowest: tuple[float, int] = (0.0, -1)
    slowest_compile: tuple[float, int] = (0.0, -1)
    findings: list[str] = field(default_factory=list)

    def add(self, o: Outcome, limit: float, seeds: Sequence[Seed], seed: int) -> None:
        self.count += 1
        key = o.stage if o.error is None else f"{o.stage}:{o.error}"
        self.stages[key] = self.stages.get(key, 0) + 1
        self.slowest = max(self.slowest, (o.elapsed, o.index))
        self.slowest_compile = max(self.slowest_compile, (o.compiling, o.index))
        slow = o.elapsed > limit or o.compiling > COMPILE_LIMIT
        if o.finding or slow:
            what = o.finding or (f"took {o.elapsed:.2f} s (limit {limit} s) and "
                                 f"{o.compiling:.2f} s in the fused build (limit "
                                 f"{COMPILE_LIMIT} s), in {o.stage}")
            self.findings.append(_describe(seeds, seed, o.index, what))

    def describe(self) -> str:
        lines = [f"{self.count} mutants in {self.elapsed:.1f} s; slowest: mutant "
                 f"{self.slowest[1]} in {self.slowest[0]:.2f} s (fused builds apart: mutant "
                 f"{self.slowest_compile[1]} in {self.slowest_compile[0]:.2f} s); outcomes: "
                 f"{self.stages}"]
        return "\n".join(lines + [f"finding {i + 1}:\n{f}" for i, f in enumerate(self.findings)])


def _describe(seeds: Sequence[Seed], seed: int, index: int, what: str) -> str:
    base, text, applied = mutant(seeds, index, seed)
    shown = text if len(text) <= 3000 else text[:3000] + f"... ({len(text)} characters)"
    return (f"mutant {index} of seed program {base.name!r} ({', '.join(applied)}):\n{what}\n"
            f"--- text ---\n{shown}\n")


def _worker(conn, seeds: Sequence[Seed], seed: int, indices: Sequence[int], fused_every: int,
            run_every: int) -> None:
    """Check ``indices`` in order, telling the parent before each starts and when it ends."""
    import relvm

    # Workers share the machine's cores: a kernel's threads waiting on a descheduled sibling
    # would make the timings measure the machine, not relvm.
    relvm.set_num_threads(1)
    # A mutant may recurse forever (@f calling @f with the argument that stopped it changed):
    # the VM's call-depth error then comes after 1,000 frames, not a million.
    from ..runtime import vm

    vm.MAX_FRAMES = 1_000
    for i in indices:
        conn.send(("start", i))
        _, text, _ = mutant(seeds, i, seed)
        base = seeds[i % len(seeds)]
        o = check(text, base.constants, fused=fused_every > 0 and i % fused_every == 0,
                  run=run_every > 0 and i % run_every == 0)
        o.index = i
        conn.send(("done", o))
    conn.send(("end", None))


def campaign(seeds: Sequence[Seed], count: int, seed: int = 0, workers: int = 2,
             limit: float = 2.0, hard_limit: float = 60.0, fused_every: int = 0,
             run_every: int = 0) -> Report:
    """Check mutants ``0 .. count-1`` in ``workers`` processes; a worker that dies or takes
    ``hard_limit`` seconds on one mutant is replaced, and that mutant is a finding.

    ``fused_every=k`` also builds every k-th mutant with fusion (compiling generated C: slow);
    ``run_every=k`` runs every k-th mutant once on the VM.
    """
    context = multiprocessing.get_context("spawn")
    report = Report()
    start = time.perf_counter()
    queues = [list(range(w, count, workers)) for w in range(workers)]
    running: list[Any] = [None] * workers

    def launch(w: int) -> None:
        parent, child = context.Pipe()
        p = context.Process(target=_worker, args=(child, list(seeds), seed, queues[w],
                                                  fused_every, run_every), daemon=True)
        p.start()
        child.close()
        running[w] = [p, parent, None, time.perf_counter()]  # process, pipe, current, since

    for w in range(workers):
        if queues[w]:
            launch(w)
    while any(r is not None for r in running):
        for w, r in enumerate(running):
            if r is None:
                continue
            p, conn, current, since = r
            if conn.poll(0.05):
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    kind, value = "died", None
            elif not p.is_alive() and not conn.poll(0):
                kind, value = "died", None
            elif current is not None and time.perf_counter() - since > hard_limit:
                p.kill()
                kind, value = "hung", None
            else:
                continue
            if kind == "start":
                r[2], r[3] = value, time.perf_counter()
            elif kind == "done":
                report.add(value, limit, seeds, seed)
                queues[w].remove(value.index)
                r[2] = None
            elif kind == "end":
                p.join()
                running[w] = None
            else:  # died or hung: that mutant is a finding; the rest go to a new worker
                p.join()
                if current is not None:
                    what = ("the worker process died (a crash)" if kind == "died"
                            else f"still running after {hard_limit} s (a hang)")
                    report.count += 1
                    report.findings.append(_describe(seeds, seed, current, what))
                    queues[w].remove(current)
                running[w] = None
                if queues[w]:
                    launch(w)
    report.elapsed = time.perf_counter() - start
    return report
