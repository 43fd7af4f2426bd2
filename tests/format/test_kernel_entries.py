"""Kernel entries are checked at load: a fused entry's steps and plan, every entry's attributes
and types; what a backend still refuses when a VM is made is a RelvmKernelError naming the
kernel; a plan that differs from what its generated kernel was compiled for, or shapes that do
not fit its loop, are refused before the kernel reads anything."""

from __future__ import annotations

import dataclasses
import functools

import json
import re

import numpy as np
import pytest

import relvm
from relvm import RelvmFormatError, RelvmKernelError, RelvmRuntimeError, examples
from relvm.runtime.vm import kernels as K
from relvm.runtime.file.format import sections_of

from formatcases import small_exe, with_meta
from programs import CASES

BROADCAST = next(c for c in CASES if c.name == "fused_same_chain_other_broadcast")


@functools.cache
def _mlp() -> relvm.Executable:
    """The MLP built with the C backend (made on first use: collecting needs no compiler)."""
    return relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"),
                       backend="c")


@functools.cache
def _mlp_bytes() -> bytes:
    return _mlp().save_bytes()


@functools.cache
def _chain_bytes() -> bytes:
    """Two generated kernels: fused_add_exp#0 reads y [4] along the inner loop, #1 z [n, 1] not."""
    return relvm.build(relvm.parse(BROADCAST.text)).save_bytes()


def _set(path: str, value):
    """An edit of the meta JSON at ``path`` (dots; list indices as numbers); DELETE removes."""
    def edit(meta) -> None:
        *parents, last = path.split(".")
        target = meta
        for k in parents:
            target = target[int(k)] if isinstance(target, list) else target[k]
        key = int(last) if isinstance(target, list) else last
        if value is DELETE:
            del target[key]
        else:
            target[key] = value
    return edit


DELETE = object()


def load_trusted(data: bytes, **kw) -> relvm.Executable:
    """The file with its genuine kernel library run under edited metadata (whose signature
    therefore no longer matches): the hardest case for the checks, as the caller said to trust
    it (by default, relvm would make the kernels again from the edited descriptions)."""
    return relvm.load_bytes(data, trust_native_code=True, **kw)


def load_error(data: bytes, section: str, pattern: str) -> RelvmFormatError:
    with pytest.raises(RelvmFormatError) as info:
        load_trusted(data)
    assert info.value.section == section, info.value
    assert re.search(pattern, str(info.value)), info.value
    return info.value


STEPS = "kernels.0.attrs.steps"
PLAN = "kernels.0.attrs.plan"

MLP_CASES = [
    (STEPS, [], "expected a list of 1 to 256 steps"),
    (STEPS, "dense", "expected a list of 1 to 256 steps"),
    (f"{STEPS}.0", ["nn.dense"], "step 0: expected an object with op, attrs and args"),
    (f"{STEPS}.0.extra", 1, "step 0: expected an object with op, attrs and args"),
    (f"{STEPS}.0.op", "nn.denser", "step 0: unknown op 'nn.denser'"),
    (f"{STEPS}.0.op", 7, "step 0: unknown op 7"),
    (f"{STEPS}.0.op", "fused", "step 0: unknown op 'fused'"),
    (f"{STEPS}.0.attrs", [], "step 0: attrs must be an object"),
    (f"{STEPS}.0.attrs.units", "512", "step 0: nn.dense: attribute 'units' expects an int or "
                                      "None, got '512'"),
    (f"{STEPS}.0.attrs.unit", 1, "step 0: nn.dense has no attribute 'unit'; did you mean"),
    (f"{STEPS}.0.args", "in", "step 0: args must be a list"),
    (f"{STEPS}.0.args.0", ["in", 3], r"step 0: argument \['in', 3\] outside the entry inputs "
                                     r"\(0..2\)"),
    (f"{STEPS}.0.args.0", ["in", -1], r"outside the entry inputs"),
    (f"{STEPS}.0.args.0", ["in", True], "an argument is"),
    (f"{STEPS}.0.args.0", ["in", 0.0], "an argument is"),
    (f"{STEPS}.0.args.0", ["out", 0], "an argument is"),
    (f"{STEPS}.0.args.0", ["in"], "an argument is"),
    (f"{STEPS}.1.args.0", ["step", 1], r"step 1: argument \['step', 1\] outside the earlier "
                                       r"steps \(0..0\)"),
    (f"{STEPS}.0.args.0", ["step", 0], r"outside the earlier steps \(0..-1\)"),
    (f"{STEPS}.0.args", [["in", 0]], r"nn.dense does not accept"),
    (f"{STEPS}.1.args", [["step", 0], ["in", 1]], r"nn.bias_add does not accept"),
    (f"{STEPS}.2.op", "sigmoid", None),  # still float32 of rank 2: accepted, runs
    (f"{STEPS}.2.op", "logical_not", r"logical_not does not accept"),
    (f"{STEPS}.2", {"op": "cast", "attrs": {"dtype": "int32"}, "args": [["step", 1]]},
     r"its op gives \(int32 of rank 2\), but the entry declares \(float32 of rank 2\)"),
    ("kernels.0.groups", [3], "a fused entry's inputs are tensors, not tuples"),
    ("kernels.0.attrs.unrolled", True, "a fused entry's attrs are steps and plan, not "
                                       "'unrolled'"),
    (PLAN, [], "attrs.plan: expected an object with symbol, col_dims and operands"),
    (f"{PLAN}.symbol", DELETE, "expected an object with symbol, col_dims and operands"),
    (f"{PLAN}.extra", 0, "expected an object with symbol, col_dims and operands"),
    (f"{PLAN}.symbol", "system", "attrs.plan.symbol 'system' is not relvm_fused_<digits>"),
    (f"{PLAN}.symbol", "relvm_fused_0 ", "is not relvm_fused_<digits>"),
    (f"{PLAN}.symbol", "relvm_fused_0x", "is not relvm_fused_<digits>"),
    (f"{PLAN}.symbol", "relvm_fused_\u0663", "is not relvm_fused_<digits>"),
    (f"{PLAN}.symbol", "relvm_fused_0;void f()", "is not relvm_fused_<digits>"),
    (f"{PLAN}.symbol", 0, "attrs.plan.symbol 0 is not relvm_fused_<digits>"),
    (f"{PLAN}.col_dims", 3, r"attrs.plan.col_dims 3 leaves -1 row dims of a rank-2 output"),
    (f"{PLAN}.col_dims", -1, r"attrs.plan.col_dims: expected an integer 0..64"),
    (f"{PLAN}.col_dims", True, r"attrs.plan.col_dims: expected an integer 0..64"),
    (f"{PLAN}.col_dims", 1.0, r"attrs.plan.col_dims: expected an integer 0..64"),
    (f"{PLAN}.operands", [], r"attrs.plan.operands: expected a list of 1 to 16 operands"),
    (f"{PLAN}.operands", [[2, "float32", 0, True]] * 17, r"expected a list of 1 to 16 operands"),
    (f"{PLAN}.operands.1", [2, "float32", 0], r"operands\[1\]: expected \[input, dtype"),
    (f"{PLAN}.operands.1", [3, "float32", 0, True], r"operands\[1\]: input 3 outside -1..2"),
    (f"{PLAN}.operands.1", [-2, "float32", 0, True], r"operands\[1\]: input -2 outside -1..2"),
    (f"{PLAN}.operands.1", ["2", "float32", 0, True], r"operands\[1\]: input '2' outside"),
    (f"{PLAN}.operands.1", [2, "float64", 0, True], r"operands\[1\]: dtype 'float64', but "
                                                    r"input 2 is float32"),
    (f"{PLAN}.operands.1", [2, "quad", 0, True], r"operands\[1\]: dtype 'quad'"),
    (f"{PLAN}.operands.0", [-1, "int8", 0, True], r"operands\[0\]: dtype int8, but the anchor "
                                                  r"gives float32"),
    (f"{PLAN}.operands.1", [2, "float32", -1, True], r"trailing_ones -1 outside 0..64"),
    (f"{PLAN}.operands.1", [2, "float32", 65, True], r"trailing_ones 65 outside 0..64"),
    (f"{PLAN}.operands.1", [2, "float32", 2, True], r"operands\[1\]: rank 1 with 2 trailing "
                                                    r"ones does not fit a rank-2 output"),
    (f"{PLAN}.operands.0", [-1, "float32", 1, True], r"rank 2 with 1 trailing ones"),
    (f"{PLAN}.operands.1", [2, "float32", 0, 1], r"contiguous must be true or false"),
]


@pytest.mark.e2e
@pytest.mark.parametrize("path,value,message", MLP_CASES,
                         ids=[f"{p.split('.', 3)[-1]}={str(v)[:24]}" for p, v, _ in MLP_CASES])
def test_bad_steps_and_plans_are_refused_at_load(path, value, message) -> None:
    data = with_meta(_mlp_bytes(), _set(path, value))
    if message is None:
        relvm.VirtualMachine(load_trusted(data)).invoke("main", np.ones((2, 784), "f4"))
        return
    err = load_error(data, "meta", message)
    assert "kernel 'fused_dense_bias_add_relu'#0 (fused)" in str(err)


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore::relvm.runtime.vm.kernels.UntrustedCodeWarning")
def test_a_step_retargeted_to_an_op_with_attributes_gets_its_defaults() -> None:
    """A step changed to ``nn.leaky_relu`` with no ``alpha`` (as a fuzzed file had it): the
    kernels generated here from the descriptions read the op's default, never a KeyError."""
    data = with_meta(_mlp_bytes(), _set(f"{STEPS}.2.op", "nn.leaky_relu"))
    exe = relvm.load_bytes(data)  # its signature no longer matches: kernels made here
    x = np.linspace(-1, 1, 2 * 784, dtype="f4").reshape(2, 784)
    got = relvm.VirtualMachine(exe).invoke("main", x)
    assert got.shape == (2, 10) and np.isfinite(got).all()


@pytest.mark.e2e
def test_a_fused_entry_has_one_output() -> None:
    def two(meta) -> None:
        meta["kernels"][0]["outputs"] = ["float32", "float32"]
        meta["kernels"][0]["ranks"][1] = [2, 2]
    load_error(with_meta(_mlp_bytes(), two), "meta", "a fused entry has one output, not 2")


@pytest.mark.e2e
def test_an_anchor_operand_needs_an_anchor() -> None:
    load_error(with_meta(_chain_bytes(), _set(f"{PLAN}.operands.0", [-1, "float32", 0, True])),
               "meta", r"attrs.plan.operands\[0\] reads an anchor, but step 0 \(add\) is not one")


@pytest.mark.parametrize("path,value,message", [
    ("kernels.0.op", "nn.softmaxx", r"kernel 'nn.softmax'#0 \(nn.softmaxx\): unknown op"),
    ("kernels.0.attrs.axis", "1", r"nn.softmax: attribute 'axis' expects an int, got '1'"),
    ("kernels.0.attrs.axes", 1, r"nn.softmax has no attribute 'axes'"),
    ("kernels.0.groups", [2], r"nn.softmax does not accept .*data must be a tensor"),
])
def test_bad_attributes_of_a_library_kernel_are_refused_at_load(path, value, message) -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 5), float32]) { nn.softmax(%x) }"))
    def edit(meta) -> None:
        _set(path, value)(meta)
        if path.endswith("groups"):  # a tuple input of one tensor: what softmax cannot take
            meta["kernels"][0]["groups"] = [1]
    load_error(with_meta(exe.save_bytes(), edit), "meta", message)


# --- generated kernels: the plan against the compiled code, shapes against the loop -------------

X, Y, Z = (np.ones((3, 4), "f4"), np.ones(4, "f4"), np.ones((3, 1), "f4"))


@pytest.mark.e2e
def test_a_plan_other_than_its_kernel_was_compiled_for_is_refused() -> None:
    # Kernel 1 reads z [n, 1] once per row; claimed contiguous, the generated code (compiled
    # to read it once) and the plan would disagree.
    data = with_meta(_chain_bytes(), _set("kernels.1.attrs.plan.operands.1",
                                       [1, "float32", 0, True]))
    exe = load_trusted(data)
    with pytest.raises(RelvmFormatError, match=r"kernel 'fused_add_exp': its plan \(float32/1 "
                       r"float32/1 -> float32\) is not what relvm_fused_1 was compiled for "
                       r"\(float32/1 float32/0 -> float32\)") as info:
        relvm.VirtualMachine(exe)
    assert info.value.section == "meta"


@pytest.mark.e2e
def test_a_plan_naming_another_kernel_is_refused() -> None:
    exe = load_trusted(with_meta(_chain_bytes(), _set("kernels.1.attrs.plan.symbol",
                                                       "relvm_fused_0")))
    with pytest.raises(RelvmFormatError, match="is not what relvm_fused_0 was compiled for"):
        relvm.VirtualMachine(exe)


@pytest.mark.e2e
def test_a_plan_naming_no_kernel_is_refused() -> None:
    exe = load_trusted(with_meta(_chain_bytes(), _set("kernels.1.attrs.plan.symbol",
                                                       "relvm_fused_7")))
    with pytest.raises(RelvmFormatError, match="the kernel library does not define "
                                               "relvm_fused_7 itself"):
        relvm.VirtualMachine(exe)


@pytest.mark.e2e
def test_shapes_that_do_not_fit_the_loop_are_refused_before_it_runs() -> None:
    # The symbol and the plan agree with the library, but kernel 1 now takes z [n, 1] as a
    # contiguous [n, 4] would be read: its loop would read past z.
    def edit(meta) -> None:
        plan = meta["kernels"][1]["attrs"]["plan"]
        plan["symbol"] = "relvm_fused_0"
        plan["operands"][1][3] = True
    vm = relvm.VirtualMachine(load_trusted(with_meta(_chain_bytes(), edit)))
    with pytest.raises(RelvmRuntimeError, match=r"operand 1 of shape \(3, 1\) does not fit the "
                       r"loop over the output's shape \(3, 4\) \(1 inner dims, contiguous\)"):
        vm.invoke("main", X, Y, Z)


@pytest.mark.e2e
def test_a_trailing_ones_view_that_does_not_fit_is_refused() -> None:
    vm = relvm.VirtualMachine(load_trusted(with_meta(
        _chain_bytes(), _set("kernels.0.attrs.plan.operands.1", [1, "float32", 1, True]))))
    with pytest.raises(RelvmRuntimeError, match=r"operand 1 of shape \(4,\) does not fit"):
        vm.invoke("main", X, Y, Z)


@pytest.mark.e2e
def test_the_library_signatures_match_the_plans() -> None:
    exe = load_trusted(_chain_bytes())
    relvm.VirtualMachine(exe)
    assert [exe._generated.signature(k.attrs["plan"]["symbol"]) for k in exe.kernels] == [
        "float32/1 float32/1 -> float32", "float32/1 float32/0 -> float32"]


# --- every failure while making kernels is a kernel error naming the kernel --------------------

def test_a_backend_error_while_making_a_kernel_names_the_kernel(monkeypatch) -> None:
    from relvm.backends import numpy_ref

    def broken(entry, constants=None):
        raise KeyError("axis")
    monkeypatch.setattr(numpy_ref, "make_kernel", broken)
    with pytest.raises(RelvmKernelError, match=r"kernel 'nn.dense'#0 \(nn.dense\) cannot be "
                       r"made: KeyError: 'axis'"):
        relvm.VirtualMachine(relvm.build(relvm.parse(
            "def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) "
            "{ nn.dense(%x, %w) }"), backend="numpy"))


@pytest.mark.e2e
def test_a_symbol_that_is_no_generated_kernel_never_reaches_cffi() -> None:
    # Built in memory, nothing checked the plan: the library still refuses the name itself.
    exe = load_trusted(_chain_bytes())
    exe.kernels[0].attrs["plan"]["symbol"] = "relvm_fused_0(void); int x"
    with pytest.raises(RelvmFormatError, match=r"'relvm_fused_0\(void\); int x' is not the name "
                       r"of a generated kernel") as info:
        relvm.VirtualMachine(exe)
    assert info.value.section == "kernels"


@pytest.mark.e2e
def test_a_library_is_opened_once_per_content() -> None:
    a, b = load_trusted(_chain_bytes()), load_trusted(_chain_bytes())
    relvm.VirtualMachine(a), relvm.VirtualMachine(b)
    assert a._generated is b._generated


def test_resolve_kernels_wraps_every_exception(monkeypatch) -> None:
    exe = small_exe()
    from relvm.backends import numpy_ref

    for error in (IndexError("i"), TypeError("t"), ValueError("v"), AttributeError("a")):
        def broken(entry, constants=None, error=error):
            raise error
        monkeypatch.setattr(numpy_ref, "make_kernel", broken)
        with pytest.raises(RelvmKernelError, match=type(error).__name__):
            K.resolve_kernels(exe)


@pytest.mark.e2e
def test_files_of_relvm_0_1_0_without_ranks_are_checked_with_the_ranks_they_pass() -> None:
    def drop_ranks(meta) -> None:
        for k in meta["kernels"]:
            del k["ranks"]
    data = with_meta(_mlp_bytes(), drop_ranks)
    relvm.VirtualMachine(load_trusted(data)).invoke("main", np.ones((2, 784), "f4"))
    # Without ranks, the entry's types are checked with the ranks its calls pass (rank 2).
    bad = with_meta(data, _set("kernels.2.attrs.axis", 2))
    load_error(bad, "meta", r"kernel 'nn.softmax'#2 \(nn.softmax\): nn.softmax does not accept "
                            r"\(Tensor\[\(arg0.0, arg0.1\), float32\]\).*axis 2 is out of range")
    meta = json.loads(sections_of(data)["meta"])
    assert all("ranks" not in k for k in meta["kernels"])


# --- entries checked once per content ---------------------------------------------------------

def test_an_entry_that_passed_is_not_checked_again_but_any_change_is(monkeypatch) -> None:
    from relvm.runtime.verify import kernelcheck

    exe = small_exe()
    kernelcheck.check_kernels(exe)                  # remembered by content
    calls = []
    monkeypatch.setattr(kernelcheck, "check_entry", lambda e, r: calls.append(e.name))
    kernelcheck.check_kernels(exe)
    assert calls == []
    entry = exe.kernels[0]
    changed = [dataclasses.replace(entry, attrs={**entry.attrs, "extra": True}),
               dataclasses.replace(entry, inputs=tuple("float64" for _ in entry.inputs)),
               dataclasses.replace(entry, groups=(7,) * len(entry.groups) if entry.groups else (7,))]
    for other in changed:
        exe.kernels[0] = other
        kernelcheck.check_kernels(exe)
    assert calls == [entry.name] * len(changed)


def test_attributes_json_would_change_are_never_remembered() -> None:
    from relvm.runtime.verify import kernelcheck

    entry = small_exe().kernels[0]
    assert kernelcheck._content_key(entry, []) is not None
    # JSON writes a tuple as a list and True and 1 apart; the checks tell a tuple from a list,
    # so an entry whose attributes JSON would change is checked every time.
    for attrs in ({"axis": (1,)}, {1: "x"}, {"x": float("nan")}, {"x": object()}):
        assert kernelcheck._content_key(dataclasses.replace(entry, attrs=attrs), []) is None
