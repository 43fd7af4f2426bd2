"""The typed IR: symbolic dims, types, expression nodes, modules, the text printer."""

from .dims import Sym
from .nodes import (Attrs, Call, Constant, Expr, Function, GlobalVar, If, Let, Module, Span,
                    Tuple, TupleGetItem, Var, post_order, structural_equal)
from .types import FuncType, TensorType, TupleType, Type

__all__ = ["Attrs", "Call", "Constant", "Expr", "Function", "FuncType", "GlobalVar", "If", "Let",
           "Module", "Span", "Sym", "TensorType", "Tuple", "TupleGetItem", "TupleType", "Type",
           "Var", "post_order", "structural_equal"]
