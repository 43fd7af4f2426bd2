"""Hypothesis strategies for relvm: random well-typed programs with symbolic dims, values for
those dims, and input arrays. Use them in your own tests to check that one executable is right
for every shape.

* :func:`programs` -- random programs over the op registry, as readable Relay text
  (:class:`GeneratedProgram`); :func:`program_texts` gives the text alone.
* :func:`dim_assignments` -- values for the symbolic dims of a program or of any function
  (one name, one value; within bounds; 0 where the program allows it).
* :func:`input_arrays` -- input arrays for a signature under such an assignment;
  :func:`signature_inputs` draws both.

The module needs hypothesis (``pip install "relvm[test]"``). Inputs are multiples of 1/4 in
[-2, 2] (ints in [-4, 4], bools at random), so sums and products of a few of them are exact in
float32 and every correct backend computes the same bits for them, whatever its order of
accumulation.

Examples
--------
>>> import relvm
>>> from hypothesis import given, strategies as st
>>> from relvm.testing import strategies as rst
>>> from relvm.testing.reference import evaluate
>>> @given(rst.programs(), st.data())
... def test_vm_matches_reference(program, data):
...     mod = program.parse()
...     vm = relvm.VirtualMachine(relvm.build(mod))
...     for _ in range(3):
...         dims, inputs = data.draw(rst.signature_inputs(program))
...         want = evaluate(mod, *inputs)
...         got = vm.invoke("main", *inputs)   # compare got with want
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from hypothesis import assume, strategies as st

from ..ir import dims as D
from ..ir.types import TensorType, TupleType, Type
from ._control import FORMS as _FORMS, generate
from ._gen import Broadcastable, Config, Gen, Param, bare_symbol, evaluate, holds, sym_key

#: The program forms :func:`programs` can generate, simplest first.
FORMS: tuple[str, ...] = tuple(_FORMS)

__all__ = ["FORMS", "GeneratedProgram", "programs", "program_texts", "dim_assignments",
           "input_arrays", "signature_inputs", "make_inputs"]


@dataclass(frozen=True, repr=False)
class GeneratedProgram:
    """A generated program: its text and what is needed to run it at any legal shape.

    Attributes
    ----------
    text : str
        Relay text: ``def @main(...)`` and possibly ``def @f(...)``.
    params : tuple of Param
        ``@main``'s parameters, with symbolic shapes (``Param.shape``) and dtypes.
    lower : mapping of str to int
        The least legal value of each symbolic dim (0 unless an op needs more).
    constraints : tuple
        Further conditions on the dims (windows that must fit, dims that must broadcast).
    max_value : int
        The largest value :func:`dim_assignments` gives a dim.
    rtol : float
        The relative tolerance for float results (looser after dense, conv and reductions).
    forms : frozenset of str
        The forms (:data:`FORMS`) the program uses.
    """

    text: str
    params: tuple[Param, ...]
    lower: Mapping[str, int]
    constraints: tuple[Any, ...]
    max_value: int
    rtol: float
    forms: frozenset

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"GeneratedProgram('''\n{self.text}''')"

    @property
    def symbols(self) -> tuple[D.Sym, ...]:
        """The symbols of ``@main``'s signature, in order of first appearance."""
        return _symbols(TensorType(p.shape, p.dtype) for p in self.params)

    @property
    def upper_bounds(self) -> dict[str, int]:
        """``{name: max_value}`` for each named dim: for ``relvm.build(upper_bounds=...)``."""
        return {s.name: self.max_value for s in self.symbols if not s.anonymous}

    @classmethod
    def from_text(cls, text: str, *, max_value: int = 8, rtol: float = 1e-5,
                  lower: Mapping[str, int] | None = None) -> "GeneratedProgram":
        """A program written by hand (a regression case), run like a generated one.

        ``@main``'s params must be tensors; ``lower`` gives dims that must not be 0.

        Examples
        --------
        >>> p = GeneratedProgram.from_text("def @main(%x: Tensor[(n), float32]) { %x }")
        >>> [s.name for s in p.symbols]
        ['n']
        """
        import relvm
        fn = relvm.parse(text).functions["main"]
        params = []
        for p in fn.params:
            t = p.checked_type or p.type_annotation
            if not isinstance(t, TensorType):
                raise TypeError(f"%{p.name} has type {t}; from_text takes tensor params only")
            params.append(Param(p.name, t.shape, t.dtype))
        return cls(text, tuple(params), dict(lower or {}), (), max_value, rtol, frozenset())

    def parse(self):
        """The program as a type-checked :class:`relvm.ir.Module` (``relvm.parse(text)``)."""
        import relvm
        return relvm.parse(self.text)

    def satisfied_by(self, dims: Mapping[str, int]) -> bool:
        """True if ``dims`` is a legal assignment for this program."""
        return all(dims[sym_key(s)] >= self.lower.get(sym_key(s), 0) for s in self.symbols) \
            and all(holds(c, dims) for c in self.constraints)


# --- programs -------------------------------------------------------------------------------------


def programs(*, forms: Sequence[str] | None = None, max_ops: int = 8, max_value: int = 8,
             symbols: Sequence[str] = ("n", "m", "k"),
             dtypes: Sequence[str] = ("float32", "int32")) -> st.SearchStrategy[GeneratedProgram]:
    """Random well-typed programs with symbolic dims, over the op registry.

    ``@main`` takes one to three inputs whose dims are small numbers, symbols (``n``, shared
    between inputs), ``?`` or ``n*2``; its body applies up to ``max_ops`` forms: elementwise
    ops with broadcasting (also against a symbolic dim, decided at run time), comparisons and
    ``where``, casts, dense/matmul/batch_matmul, conv2d with random strides, padding, dilation
    and groups, pooling, softmax, norms, pad, reshape with Relay's codes (0, -1, -2, -3, -4),
    transpose, expand_dims/squeeze, concatenate/split, strided_slice, take, reductions,
    constants, argwhere/arange/dyn.reshape, tuples, ``if`` and calls to a second global
    function ``@f``; and one elementwise chain repeated at several places, on values of other
    ranks, operands of other broadcasts (a scalar, ``(4,)``, ``(n, 1)``, a bias after a dense
    or conv2d) and literals on either side (``x - 1`` beside ``1 - x``), which fused kernels
    must not confuse. Weights, biases and indices become further inputs.

    Parameters
    ----------
    forms : sequence of str, optional
        The forms to draw from (see :data:`FORMS`); all by default.
    max_ops : int
        The most forms in ``@main`` (``@f`` has up to three more).
    max_value : int
        The largest value a symbolic dim takes in :func:`dim_assignments`.
    symbols : sequence of str
        Names of ``@main``'s symbolic dims.
    dtypes : sequence of str
        Dtypes of the data inputs (weights follow the data they meet).

    Returns
    -------
    SearchStrategy of GeneratedProgram
        Shrinks toward fewer, simpler ops on rank-1 float32 inputs.

    Examples
    --------
    >>> from relvm.testing.strategies import programs
    >>> print(programs(forms=["binary", "reduce"]).example())  # doctest: +SKIP
    def @main(%p0: Tensor[(n, 3), float32], %p1: Tensor[(3), float32]) {
      %0 = add(%p0, %p1);
      %1 = sum(%0, axis=[1]);
      %1
    }
    """
    chosen = tuple(forms) if forms is not None else FORMS
    unknown = [f for f in chosen if f not in _FORMS]
    if unknown or not chosen:
        raise ValueError(f"unknown forms {unknown}; relvm.testing.strategies has {FORMS}")
    config = Config(chosen, max_ops, max_value, tuple(symbols), tuple(dtypes))
    return _programs(config)


@st.composite
def _programs(draw, config: Config) -> GeneratedProgram:
    gen = Gen(draw, config)
    text, main = generate(gen)
    return GeneratedProgram(
        text=text, params=tuple(main.params),
        lower={sym_key(s): v for s, v in main.lower.items() if v},
        constraints=tuple(dict.fromkeys(main.constraints)), max_value=config.max_value,
        rtol=1e-4 if gen.accumulates else 1e-5, forms=frozenset(gen.forms_used))


def program_texts(**kwargs: Any) -> st.SearchStrategy[str]:
    """The text of :func:`programs` (same arguments): readable Relay, ready for relvm.parse.

    Examples
    --------
    >>> import relvm
    >>> from relvm.testing.strategies import program_texts
    >>> text = program_texts(forms=["reshape"]).example()  # doctest: +SKIP
    >>> module = relvm.parse(text)                          # doctest: +SKIP
    """
    return programs(**kwargs).map(str)


# --- signatures: dims and inputs ------------------------------------------------------------------


@dataclass(frozen=True)
class _Signature:
    params: tuple[tuple[str, Type, bool], ...]  # name, type, inputs drawn > 0
    symbols: tuple[D.Sym, ...]
    lower: Mapping[str, int]
    upper: Mapping[str, int]
    constraints: tuple[Any, ...]


def _symbols(types) -> tuple[D.Sym, ...]:
    seen: dict[str, D.Sym] = {}
    for t in types:
        for tensor in _tensor_types(t):
            for d in tensor.shape:
                for s in sorted(D.free_symbols(d), key=lambda s: s.key):
                    seen.setdefault(sym_key(s), s)
    return tuple(seen.values())


def _tensor_types(t: Type):
    if isinstance(t, TensorType):
        yield t
    elif isinstance(t, TupleType):
        for f in t.fields:
            yield from _tensor_types(f)
    else:
        raise TypeError(f"cannot make inputs of type {t}")


def _function(target: Any, func: str):
    if isinstance(target, str):
        import relvm
        target = relvm.parse(target)
    if hasattr(target, "functions"):  # a Module
        target = target.functions[func]
    return target


def _signature(target: Any, min_value: int, max_value: int | None,
               upper_bounds: Mapping[str, int] | None, func: str) -> _Signature:
    """What :func:`dim_assignments` and :func:`input_arrays` need to know about ``target``."""
    if isinstance(target, GeneratedProgram):
        params = tuple((p.name, TensorType(p.shape, p.dtype), p.positive) for p in target.params)
        lower, constraints = target.lower, target.constraints
        top = target.max_value if max_value is None else max_value
    else:
        fn = _function(target, func)
        params = tuple((p.name, p.checked_type or p.type_annotation, False) for p in fn.params)
        lower, constraints, top = {}, (), 8 if max_value is None else max_value
    symbols = _symbols(t for _, t, _ in params)
    keys = [sym_key(s) for s in symbols]
    upper = {k: (upper_bounds or {}).get(k, top) for k in keys}
    low = {k: max(lower.get(k, 0), min_value) for k in keys}
    return _Signature(params, symbols, low, upper, tuple(constraints))


def dim_assignments(target: Any, *, min_value: int = 0, max_value: int | None = None,
                    upper_bounds: Mapping[str, int] | None = None,
                    func: str = "main") -> st.SearchStrategy[dict[str, int]]:
    """Values for the symbolic dims of a signature: one value per name, within bounds.

    Parameters
    ----------
    target : GeneratedProgram, Module, Function or str
        A generated program (its lower bounds and constraints are respected, so dims are 0
        wherever the program allows it), or any function (a module's ``func``, or text).
    min_value, max_value : int
        The range of every dim (``max_value`` defaults to the program's, else 8). Use
        ``min_value=1`` for a hand-written function that cannot take empty inputs.
    upper_bounds : mapping of str to int, optional
        Per-name maxima, as passed to ``relvm.build(upper_bounds=...)``.

    Returns
    -------
    SearchStrategy of dict
        ``{"n": 3, "m": 0}``; an anonymous ``?`` dim is keyed ``"?<id>"``.

    Examples
    --------
    >>> import relvm
    >>> m = relvm.parse("def @main(%x: Tensor[(n, 4), float32]) { nn.relu(%x) }")
    >>> dim_assignments(m, max_value=16).example()  # doctest: +SKIP
    {'n': 13}
    """
    sig = _signature(target, min_value, max_value, upper_bounds, func)
    return _assignments(sig)


@st.composite
def _assignments(draw, sig: _Signature) -> dict[str, int]:
    env = {k: draw(st.integers(sig.lower[k], max(sig.lower[k], sig.upper[k])))
           for k in sig.lower}
    for c in sig.constraints:
        if isinstance(c, Broadcastable) and not holds(c, env):
            _repair_broadcast(draw, c, env, sig)
    assume(all(holds(c, env) for c in sig.constraints))
    return env


def _repair_broadcast(draw, c: Broadcastable, env: dict, sig: _Signature) -> None:
    """Make the dims of ``c`` broadcast by setting its bare symbol to 1 or to the other dim."""
    for this, other in ((c.b, c.a), (c.a, c.b)):
        sym = bare_symbol(this)
        if sym is None or sym_key(sym) not in env:
            continue
        key = sym_key(sym)
        try:
            options = [v for v in (1, evaluate(other, env))
                       if sig.lower[key] <= v <= max(sig.upper[key], 1)]
        except (KeyError, ValueError, ZeroDivisionError):
            continue
        if options:
            env[key] = draw(st.sampled_from(options))
            return


def make_inputs(target: Any, dims: Mapping[str, int], seed: int = 0, *,
                func: str = "main") -> list:
    """Input arrays for ``target``'s signature under ``dims`` (deterministic in ``seed``).

    Examples
    --------
    >>> import relvm
    >>> m = relvm.parse("def @main(%x: Tensor[(n, 2), float32]) { %x }")
    >>> make_inputs(m, {"n": 1})
    [array([[1.5, 0.5]], dtype=float32)]
    """
    sig = _signature(target, 0, None, None, func)
    rng = np.random.default_rng(seed)
    return [_array(rng, t, dims, positive) for _, t, positive in sig.params]


def _array(rng: np.random.Generator, t: Type, dims: Mapping[str, int], positive: bool):
    if isinstance(t, TupleType):
        return tuple(_array(rng, f, dims, positive) for f in t.fields)
    shape = tuple(evaluate(d, dims) for d in t.shape)
    if t.dtype == "bool":
        return rng.random(shape) < 0.5
    if t.dtype.startswith(("int", "uint")):
        return rng.integers(1 if positive else -4, 5, shape).astype(t.dtype)
    return (rng.integers(1 if positive else -8, 9, shape) / 4).astype(t.dtype)


def input_arrays(target: Any, dims: Mapping[str, int], *,
                 func: str = "main") -> st.SearchStrategy[list]:
    """Input arrays for ``target``'s signature under ``dims`` (see :func:`make_inputs`).

    Examples
    --------
    >>> from hypothesis import given, strategies as st
    >>> text = "def @main(%x: Tensor[(n, 4), float32]) { nn.relu(%x) }"
    >>> @given(st.data())
    ... def test_relu(data):
    ...     dims = data.draw(dim_assignments(text))
    ...     (x,) = data.draw(input_arrays(text, dims))
    ...     assert x.shape == (dims["n"], 4)
    >>> test_relu()
    """
    return st.integers(0, 2**32 - 1).map(lambda seed: make_inputs(target, dims, seed, func=func))


@st.composite
def signature_inputs(draw, target: Any, **kwargs: Any) -> tuple[dict[str, int], list]:
    """An assignment of ``target``'s dims (``kwargs`` as for :func:`dim_assignments`) and
    input arrays for it.

    Examples
    --------
    >>> text = "def @main(%x: Tensor[(n, 4), float32]) { nn.relu(%x) }"
    >>> dims, (x,) = signature_inputs(text, min_value=1).example()  # doctest: +SKIP
    >>> x.shape == (dims["n"], 4)  # doctest: +SKIP
    True
    """
    dims = draw(dim_assignments(target, **kwargs))
    return dims, draw(input_arrays(target, dims, func=kwargs.get("func", "main")))
