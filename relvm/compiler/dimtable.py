"""Symbolic dims -> dims slots and dim programs, for one VM function being compiled.

Each symbol a function knows (from its parameters' shapes, from a data-dependent op, from a
callee's result) and each derived dim it needs (``n*3``, a storage size) gets a slot of the
frame's dims vector. Slot assignments made inside an ``if`` branch are forgotten when the branch
ends, because the other branch never computed them.
"""

from __future__ import annotations

from ..errors import RelvmCompileError
from ..ir import dims as D
from ..ir.dims import Dim


class DimTable:
    def __init__(self, func_name: str):
        self.func_name = func_name
        self.num_slots = 0
        self.names: list[str] = []
        self._scopes: list[dict[str, int]] = [{}]  # dim key -> slot
        self.symbols: list[D.Sym] = []  # every symbol given a slot, in order

    # --- scoping --------------------------------------------------------------------------------
    def push(self) -> None:
        self._scopes.append({})

    def pop(self) -> None:
        self._scopes.pop()

    def slot_of(self, d: Dim) -> int | None:
        key = D.dim_key(d)
        for scope in reversed(self._scopes):
            if key in scope:
                return scope[key]
        return None

    def new_slot(self, d: Dim) -> int:
        k = self.num_slots
        self.num_slots += 1
        self.names.append(D.dim_str(d) if D.is_expressible(d) else f"?{k}")
        self._scopes[-1][D.dim_key(d)] = k
        if _bare(d):
            self.symbols.append(next(iter(D.free_symbols(d))))
        return k

    def knows(self, s: D.Sym) -> bool:
        return self.slot_of(D.as_expr(s)) is not None

    # --- expressions ------------------------------------------------------------------------------
    def expr(self, d: Dim, symbols_only: bool = False) -> tuple:
        """The dim-program expression computing ``d`` from known slots.

        With ``symbols_only`` it reads only the slots of bare symbols, never a derived dim's
        slot (for code placed before the instruction that computed that slot).
        """
        def known(x: Dim) -> tuple | None:
            k = self.slot_of(x)
            return ("slot", k) if k is not None and (not symbols_only or _bare(x)) else None
        try:
            return D.program_expr(d, known)
        except D.NotInProgram as e:
            raise RelvmCompileError(f"@{self.func_name}: dim {e} is not known at this point "
                                    f"of the program") from None

    def expr_from_symbols(self, d: Dim) -> tuple:
        return self.expr(d, symbols_only=True)

    def ensure(self, dims: list[Dim], statements: list[tuple]) -> None:
        """Give every dim in ``dims`` a slot, appending the statements that compute new ones."""
        for d in dims:
            if isinstance(d, int) or self.slot_of(d) is not None:
                continue
            e = self.expr(d)
            if e[0] == "slot":
                continue
            statements.append(("set", self.new_slot(d), e))

    def operand(self, d: Dim) -> int:
        """The dim operand of an instruction: a literal, or ``-(slot+1)``. ``d`` must be known."""
        if isinstance(d, int):
            return d
        k = self.slot_of(d)
        assert k is not None, f"dim {d} has no slot"
        return -k - 1


def _bare(d: Dim) -> bool:
    """True if ``d`` is exactly one symbol."""
    return (isinstance(d, D.DimExpr) and len(d.terms) == 1 and d.terms[0][1] == 1
            and len(d.terms[0][0]) == 1 and isinstance(d.terms[0][0][0], D.Sym))
