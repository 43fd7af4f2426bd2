"""Bind parameters of @main to constants (the weights given to ``relvm.build(params=...)``)."""

from __future__ import annotations

import numpy as np

from ..ir.nodes import Constant, Expr, Function, Module, Var
from .rewrite import Rewriter


class _Bind(Rewriter):
    def __init__(self, values: dict[int, np.ndarray]):
        super().__init__()
        self.values = values

    def visit_Var(self, v: Var) -> Expr:
        if id(v) in self.values:
            return Constant(self.values[id(v)], span=v.span)
        return v


def bind_params(module: Module, values: dict[int, np.ndarray]) -> Module:
    """A module whose @main takes only the unbound parameters; ``values``: id(Var) -> array."""
    if not values:
        return module
    main = module.functions["main"]
    body = _Bind(values)(main.body)
    params = tuple(p for p in main.params if id(p) not in values)
    functions = dict(module.functions)
    functions["main"] = Function(params, body, main.ret_type, span=main.span,
                                 attrs=main.attrs)
    return Module(functions, module.source, module.io_names)
