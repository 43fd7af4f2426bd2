"""Kernel entries, checked at load before any backend sees them.

A backend trusts its kernel entries: the C backend binds an entry's dtypes into the calls it
makes (a binary op reads both operands with its first input's element size), a fused entry's
steps become a chain of kernels, and its plan lays out the loop of a generated kernel. So each
entry must be one the compiler could have written:

* its op exists and its attributes fit the op's schema (``Op.make_attrs``);
* its dtypes and ranks follow the op's type relation: with each argument a tensor of its
  declared dtype and rank (every dim a symbol of its own: any size), the relation accepts
  the inputs and gives the declared outputs. Ranks are the ones the file records or, for
  files that record none, the ones each call passes (``regtypes.check_types`` proves them);
* a fused entry's steps (``attrs["steps"]``, see ``relvm/ops/fused.py``) are registry ops
  with valid attributes, each reading the entry's inputs or earlier steps; the last gives
  the entry's one output;
* a fused entry's plan (``attrs["plan"]``, ``FusedPlan.to_json`` in the compiler) names a
  generated kernel as ``relvm_fused_<digits>`` -- a name nothing but relvm's generated
  library defines, checked before any symbol is looked up -- and lays out a loop the
  generated code can run: at most ``MAX_OPERANDS`` operands, each an input that exists (or
  -1, the anchor's result) with its declared dtype, ``col_dims`` within the output's rank and
  at most ``MAX_ROW_DIMS`` row dims. The generated code itself says what it was compiled for;
  ``backends/fused.py`` compares that with the plan and checks shapes when it runs.

Failures are RelvmFormatErrors naming ``meta`` and the kernel.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from ... import dtypes
from ... import ops as _ops  # noqa: F401  (registers every op)
from ...backends.fused import MAX_OPERANDS, MAX_ROW_DIMS, SYMBOL
from ...errors import RelvmFormatError
from ...ir import dims as D
from ...ir.types import TensorType, TupleType, tensor_types
from ...ops.registry import OPS, OUT_FUSABLE, AttrError, Op
from ..executable import Executable, KernelEntry
from ..file.meta import MAX_RANK

MAX_STEPS = 256
FUSED_ATTRS = frozenset({"steps", "plan"})
PLAN_KEYS = frozenset({"symbol", "col_dims", "operands"})


class Bad(Exception):
    """What is wrong with one kernel entry (the caller names the entry)."""


def check_kernels(exe: Executable) -> None:
    """Check every kernel entry's attributes, steps and plan, and its types where the file
    records ranks."""
    for k, entry in enumerate(exe.kernels):
        if entry.op == "external":
            with _naming(k, entry):
                _check_artifact(exe, entry)
        ranks = ([(entry.input_ranks, entry.output_ranks)]
                 if entry.input_ranks or entry.output_ranks or _no_args(entry) else [])
        key = _content_key(entry, ranks)
        if key is not None and key in _checked:
            continue
        with _naming(k, entry):
            check_entry(entry, ranks)
        if key is not None:
            if len(_checked) >= MAX_CHECKED:
                _checked.clear()
            _checked.add(key)


#: Entries that passed :func:`check_entry`, by content: the check is a function of the entry's
#: op, attributes, dtypes, groups and ranks alone, and models repeat entries (every dense layer
#: with a bias and relu), so a process that loads many files checks each kind once.
_checked: set = set()
MAX_CHECKED = 4096


def _content_key(entry: KernelEntry, ranks: list) -> tuple | None:
    """Everything :func:`check_entry` reads, or None when the attributes are not plain JSON
    (JSON turns a tuple into a list, which the checks tell apart: such an entry is checked
    every time)."""
    try:
        attrs = json.dumps(entry.attrs, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None
    if json.loads(attrs) != entry.attrs:
        return None
    return (entry.op, attrs, tuple(entry.inputs), tuple(entry.outputs), tuple(entry.groups),
            tuple((tuple(i), tuple(o)) for i, o in ranks))


def check_calls(exe: Executable, call_ranks: dict[int, set[tuple[int, ...]]]) -> None:
    """Check the types of entries without recorded ranks, with the ranks each call passes."""
    for k, seen in sorted(call_ranks.items()):
        entry = exe.kernels[k]
        n_in = len(entry.inputs)
        with _naming(k, entry):
            check_entry(entry, [(r[:n_in], r[n_in:]) for r in sorted(seen)])


def _no_args(entry: KernelEntry) -> bool:
    return not entry.inputs and not entry.outputs


class _naming:
    """Turns a Bad (or an op's own error) into a RelvmFormatError naming kernel ``k``."""

    def __init__(self, k: int, entry: KernelEntry):
        self.where = f"kernel {entry.name!r}#{k} ({entry.op})"

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, e, tb) -> bool:
        if kind is not None and issubclass(kind, (Bad, AttrError)):
            raise RelvmFormatError(f"{self.where}: {e}", section="meta") from None
        return False


def check_entry(entry: KernelEntry, ranks: list[tuple[tuple[int, ...], tuple[int, ...]]]
                ) -> None:
    """Check one entry; ``ranks`` lists (input ranks, output ranks) to check its types with."""
    if entry.op == "external":
        steps, outputs = _region(entry)
        for in_ranks, out_ranks in ranks:
            _check_fused_types(entry, steps, in_ranks, out_ranks, outputs)
        return
    if entry.op == "fused":
        steps = _steps(entry)
        plan = _plan(entry)
        for in_ranks, out_ranks in ranks:
            anchor = _check_fused_types(entry, steps, in_ranks, out_ranks)
            if plan is not None:
                _check_plan_fits(entry, steps, plan, anchor, in_ranks, out_ranks)
        return
    op = OPS.get(entry.op)
    if op is None:
        raise Bad(f"unknown op {entry.op!r}")
    attrs = op.make_attrs(entry.attrs)
    for in_ranks, out_ranks in ranks:
        args = symbolic_args(entry.inputs, in_ranks, entry.groups)
        got = list(tensor_types(_infer(op, attrs, args)))
        _same_outputs(entry, got, out_ranks)


# --- types ----------------------------------------------------------------------------------------

_TYPES: dict[tuple[int, int, str], TensorType] = {}


def _type(i: int, rank: int, dtype: str) -> TensorType:
    """Argument ``i``: a tensor of ``rank`` dims, each a symbol of its own (made once)."""
    t = _TYPES.get((i, rank, dtype))
    if t is None:
        shape = tuple(D.as_expr(D.Sym(f"arg{i}.{a}")) for a in range(rank))
        t = _TYPES[(i, rank, dtype)] = TensorType(shape, dtype)
    return t


def symbolic_args(dts: Iterable[str], ranks: Iterable[int], groups: tuple[int, ...]) -> list:
    """A kernel entry's arguments with every dim a symbol of its own (any size): argument
    ``i``'s dim ``a`` is ``arg{i}.{a}`` (inputs flattened, as the kernel takes them)."""
    return grouped(_types(dts, ranks), groups)


def _types(dts: Iterable[str], ranks: Iterable[int]) -> list[TensorType]:
    return [_type(i, r, dt) for i, (dt, r) in enumerate(zip(dts, ranks))]


def grouped(types: list[TensorType], groups: tuple[int, ...]) -> list:
    """The op's arguments: tuple inputs rebuilt from the flattened tensors."""
    out, i = [], 0
    for g in groups or (-1,) * len(types):
        if g < 0:
            out.append(types[i])
            i += 1
        else:
            out.append(TupleType(tuple(types[i:i + g])))
            i += g
    return out


def _infer(op: Op, attrs: Any, args: list) -> Any:
    try:
        return op.infer(attrs, *args)
    except RecursionError:
        raise Bad(f"{op.name}: its type relation recursed too deeply") from None
    except Exception as e:  # an op's relation rejects these types, however it says so
        text = ", ".join(str(a) for a in args)
        raise Bad(f"{op.name} does not accept ({text}): {type(e).__name__}: {e}") from None


def _same_outputs(entry: KernelEntry, got: list, out_ranks: tuple[int, ...]) -> None:
    want = list(zip(entry.outputs, out_ranks))
    if [(t.dtype, t.ndim) for t in got] != want:
        found = ", ".join(f"{t.dtype} of rank {t.ndim}" for t in got)
        declared = ", ".join(f"{dt} of rank {r}" for dt, r in want)
        raise Bad(f"its op gives ({found}), but the entry declares ({declared})")


# --- fused entries: steps ---------------------------------------------------------------------------

def _steps(entry: KernelEntry) -> list[tuple[Op, Any, tuple[tuple[str, int], ...]]]:
    extra = set(entry.attrs) - FUSED_ATTRS
    if extra:
        raise Bad(f"a fused entry's attrs are steps and plan, not {sorted(extra)[0]!r}")
    if len(entry.outputs) != 1:
        raise Bad(f"a fused entry has one output, not {len(entry.outputs)}")
    return _step_list(entry, entry.attrs.get("steps"), ("op", "attrs", "args"))


def _step_list(entry: KernelEntry, data: Any, keys: tuple[str, ...]
               ) -> list[tuple[Op, Any, tuple[tuple[str, int], ...]]]:
    if type(data) is not list or not 0 < len(data) <= MAX_STEPS:
        raise Bad(f"attrs.steps: expected a list of 1 to {MAX_STEPS} steps")
    if any(g >= 0 for g in entry.groups):
        raise Bad(f"a {entry.op} entry's inputs are tensors, not tuples (its groups are -1)")
    steps = []
    for j, s in enumerate(data):
        if type(s) is not dict or set(s) != set(keys):
            raise Bad(f"step {j}: expected an object with {', '.join(keys[:-1])} and "
                      f"{keys[-1]}")
        op = OPS.get(s["op"]) if type(s["op"]) is str else None
        if op is None:
            raise Bad(f"step {j}: unknown op {s['op']!r}")
        if type(s["attrs"]) is not dict:
            raise Bad(f"step {j}: attrs must be an object")
        try:
            attrs = op.make_attrs(s["attrs"])
        except AttrError as e:
            raise Bad(f"step {j}: {e}") from None
        steps.append((op, attrs, _refs(s["args"], j, len(entry.inputs))))
    return steps


def _refs(args: Any, j: int, n_inputs: int) -> tuple[tuple[str, int], ...]:
    """A step's arguments: ("in", i) an entry input, ("step", k) an earlier step."""
    if type(args) is not list:
        raise Bad(f"step {j}: args must be a list")
    out = []
    for a in args:
        if type(a) is not list or len(a) != 2 or a[0] not in ("in", "step") \
                or type(a[1]) is not int:
            raise Bad(f"step {j}: an argument is [\"in\", i] or [\"step\", k], not {a!r:.40}")
        limit = n_inputs if a[0] == "in" else j
        if not 0 <= a[1] < limit:
            raise Bad(f"step {j}: argument {a} outside "
                      f"{'the entry inputs' if a[0] == 'in' else 'the earlier steps'} "
                      f"(0..{limit - 1})")
        out.append((a[0], a[1]))
    return tuple(out)


def _check_fused_types(entry: KernelEntry, steps: list, in_ranks: tuple[int, ...],
                       out_ranks: tuple[int, ...], outputs: list[int] | None = None
                       ) -> TensorType:
    """Run the steps' type relations; the last (or the ``outputs`` steps) must give the
    entry's outputs. Returns the first step's type (a plan's anchor)."""
    inputs = _types(entry.inputs, in_ranks)
    results: list[TensorType] = []
    for j, (op, attrs, refs) in enumerate(steps):
        args = [inputs[i] if kind == "in" else results[i] for kind, i in refs]
        t = _infer(op, attrs, args)
        if not isinstance(t, TensorType):
            raise Bad(f"step {j}: {op.name} gives {t}, not a tensor")
        results.append(t)
    _same_outputs(entry, results[-1:] if outputs is None else [results[j] for j in outputs],
                  out_ranks)
    return results[0]


# --- external entries --------------------------------------------------------------------------

EXTERNAL_ATTRS = {"compiler", "symbol", "region"}
REGION_KEYS = {"name", "inputs", "constant", "steps", "outputs"}


def _region(entry: KernelEntry) -> tuple[list, list[int]]:
    """An external entry's region: its steps (checked as a fused entry's, each with a
    ``type``) and the steps it returns, one per output."""
    if set(entry.attrs) != EXTERNAL_ATTRS:
        raise Bad("an external entry's attrs are compiler, symbol and region")
    for key in ("compiler", "symbol"):
        if type(entry.attrs[key]) is not str or not entry.attrs[key]:
            raise Bad(f"attrs.{key} must be a non-empty string")
    region = entry.attrs["region"]
    if type(region) is not dict or set(region) != REGION_KEYS:
        raise Bad("attrs.region: expected an object with " + ", ".join(sorted(REGION_KEYS)))
    steps = _step_list(entry, region["steps"], ("op", "attrs", "args", "type"))
    refs = region["outputs"]
    if type(refs) is not list or len(refs) != len(entry.outputs):
        raise Bad(f"attrs.region.outputs: expected {len(entry.outputs)} references")
    outputs = [j for kind, j in _refs(refs, len(steps), 0)]
    if len(set(outputs)) != len(outputs):
        raise Bad("attrs.region.outputs: a step is returned twice")
    return steps, outputs


def _check_artifact(exe: Executable, entry: KernelEntry) -> None:
    artifact = exe.externals.get(entry.attrs.get("symbol"))
    if artifact is None:
        raise Bad(f"no artifact {entry.attrs.get('symbol')!r:.60} in the extern section")
    if artifact.compiler != entry.attrs.get("compiler"):
        raise Bad(f"artifact {entry.attrs['symbol']!r} is for {artifact.compiler!r}, not "
                  f"{entry.attrs.get('compiler')!r:.60}")


# --- fused entries: the plan of a generated kernel ---------------------------------------------------

def _plan(entry: KernelEntry) -> dict | None:
    plan = entry.attrs.get("plan")
    if plan is None:
        return None
    if type(plan) is not dict or set(plan) != PLAN_KEYS:
        raise Bad("attrs.plan: expected an object with symbol, col_dims and operands")
    symbol = plan["symbol"]
    if type(symbol) is not str or not SYMBOL.fullmatch(symbol):
        raise Bad(f"attrs.plan.symbol {symbol!r:.60} is not relvm_fused_<digits>")
    if type(plan["col_dims"]) is not int or not 0 <= plan["col_dims"] <= MAX_RANK:
        raise Bad(f"attrs.plan.col_dims: expected an integer 0..{MAX_RANK}")
    operands = plan["operands"]
    if type(operands) is not list or not 0 < len(operands) <= MAX_OPERANDS:
        raise Bad(f"attrs.plan.operands: expected a list of 1 to {MAX_OPERANDS} operands")
    for k, o in enumerate(operands):
        _operand(entry, k, o)
    return plan


def _operand(entry: KernelEntry, k: int, o: Any) -> None:
    """``[input, dtype, trailing_ones, contiguous]``: input -1 is the anchor's result."""
    where = f"attrs.plan.operands[{k}]"
    if type(o) is not list or len(o) != 4:
        raise Bad(f"{where}: expected [input, dtype, trailing_ones, contiguous]")
    i, dt, ones, contiguous = o
    if type(i) is not int or not -1 <= i < len(entry.inputs):
        raise Bad(f"{where}: input {i!r:.20} outside -1..{len(entry.inputs) - 1}")
    if not dtypes.is_dtype(dt) or (i >= 0 and dt != entry.inputs[i]):
        raise Bad(f"{where}: dtype {dt!r:.20}, but input {i} is "
                  f"{entry.inputs[i] if i >= 0 else 'the anchor'}")
    if type(ones) is not int or not 0 <= ones <= MAX_RANK:
        raise Bad(f"{where}: trailing_ones {ones!r:.20} outside 0..{MAX_RANK}")
    if type(contiguous) is not bool:
        raise Bad(f"{where}: contiguous must be true or false")


def _check_plan_fits(entry: KernelEntry, steps: list, plan: dict, anchor: TensorType,
                     in_ranks: tuple[int, ...], out_ranks: tuple[int, ...]) -> None:
    out_rank = out_ranks[0]
    if not 0 <= out_rank - plan["col_dims"] <= MAX_ROW_DIMS:
        raise Bad(f"attrs.plan.col_dims {plan['col_dims']} leaves "
                  f"{out_rank - plan['col_dims']} row dims of a rank-{out_rank} output "
                  f"(0..{MAX_ROW_DIMS})")
    for k, (i, dt, ones, _) in enumerate(plan["operands"]):
        if i < 0:
            op, _, refs = steps[0]
            if op.pattern != OUT_FUSABLE or any(kind != "in" for kind, _ in refs):
                raise Bad(f"attrs.plan.operands[{k}] reads an anchor, but step 0 "
                          f"({op.name}) is not one")
            if dt != anchor.dtype:
                raise Bad(f"attrs.plan.operands[{k}]: dtype {dt}, but the anchor gives "
                          f"{anchor.dtype}")
        rank = anchor.ndim if i < 0 else in_ranks[i]
        if rank + ones > out_rank:
            raise Bad(f"attrs.plan.operands[{k}]: rank {rank} with {ones} trailing ones does "
                      f"not fit a rank-{out_rank} output")
