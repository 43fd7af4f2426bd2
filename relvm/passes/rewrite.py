"""A memoized expression rewriter: the base of every IR-to-IR pass.

Subclasses override ``rewrite_call`` (or other ``rewrite_<Node>`` hooks); every node is rebuilt
only if one of its children changed, so untouched subgraphs keep their identity (and sharing).
Nodes are visited children first from an explicit stack, so the depth of a program costs no
Python recursion here.
"""

from __future__ import annotations

from ..ir.nodes import (Call, Constant, Expr, Function, GlobalVar, If, Let, Module, Tuple,
                        TupleGetItem, Var, children)


class Rewriter:
    def __init__(self) -> None:
        self.memo: dict[int, Expr] = {}

    def __call__(self, e: Expr) -> Expr:
        done = self.memo.get(id(e))
        if done is not None:
            return done
        # Children first, from an explicit stack: each visit then finds the children it asks
        # for already done, so a chain of 100,000 calls recurses no deeper than one.
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in self.memo:
                continue
            if ready:
                self.memo[id(node)] = getattr(self, "visit_" + type(node).__name__)(node)
                continue
            stack.append((node, True))
            kids = children(node) + ((node.body,) if isinstance(node, Function) else ())
            stack.extend((k, False) for k in reversed(kids) if id(k) not in self.memo)
        return self.memo[id(e)]

    # Leaves stay as they are unless a subclass says otherwise.
    def visit_Var(self, v: Var) -> Expr:
        return v

    def visit_GlobalVar(self, g: GlobalVar) -> Expr:
        return g

    def visit_Constant(self, c: Constant) -> Expr:
        return c

    def visit_Call(self, call: Call) -> Expr:
        op = call.op if not isinstance(call.op, Expr) else self(call.op)
        args = tuple(self(a) for a in call.args)
        if op is not call.op or any(a is not b for a, b in zip(args, call.args)):
            call = self.rebuilt(call, Call(op, args, call.attrs, span=call.span))
        return self.rewrite_call(call)

    def rebuilt(self, old: Call, new: Call) -> Call:
        """Hook: ``new``, the call ``old`` with its rewritten children, before rewrite_call."""
        return new

    def rewrite_call(self, call: Call) -> Expr:
        """Hook: the call with its children already rewritten."""
        return call

    def visit_Let(self, let: Let) -> Expr:
        value, body = self(let.value), self(let.body)
        if value is let.value and body is let.body:
            return let
        return Let(let.var, value, body, span=let.span)

    def visit_Tuple(self, t: Tuple) -> Expr:
        fields = tuple(self(f) for f in t.fields)
        if all(a is b for a, b in zip(fields, t.fields)):
            return t
        return Tuple(fields, span=t.span)

    def visit_TupleGetItem(self, g: TupleGetItem) -> Expr:
        value = self(g.tuple_value)
        new = g if value is g.tuple_value else TupleGetItem(value, g.index, span=g.span)
        return self.rewrite_get_item(new)

    def rewrite_get_item(self, g: TupleGetItem) -> Expr:
        """Hook: the projection with its tuple already rewritten."""
        return g

    def visit_If(self, node: If) -> Expr:
        cond, then, other = self(node.cond), self(node.then_branch), self(node.else_branch)
        if cond is node.cond and then is node.then_branch and other is node.else_branch:
            return node
        return If(cond, then, other, span=node.span)

    def visit_Function(self, fn: Function) -> Expr:
        body = self(fn.body)
        if body is fn.body:
            return fn
        return Function(fn.params, body, fn.ret_type, span=fn.span, attrs=fn.attrs)


def rewrite_module(module: Module, make: "type[Rewriter]", **kw) -> Module:
    """A new module with every function's body rewritten by a fresh ``make(**kw)``."""
    functions = {}
    for name, fn in module.functions.items():
        body = make(**kw)(fn.body)
        functions[name] = fn if body is fn.body else Function(fn.params, body, fn.ret_type,
                                                               span=fn.span, attrs=fn.attrs)
    return Module(functions, module.source, module.io_names)
