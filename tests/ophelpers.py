"""Helpers shared by the op tests: build types, infer through a type relation, run a reference."""

from relvm.ir.types import TensorType
from relvm.ops import OPS


def T(shape, dtype="float32"):
    return TensorType(tuple(shape), dtype)


def infer(name, *types, **attrs):
    op = OPS[name]
    return op.infer(op.make_attrs(attrs), *types)


def run(name, *arrays, **attrs):
    op = OPS[name]
    return op.reference(op.make_attrs(attrs), *arrays)
