"""Lists of tensors: the IR type (parse, print, type errors), the VM (lists in and out, bad
inputs, bad positions), the verifier and the file format (save/load, a corrupted list type)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import relvm
from relvm import RelvmFormatError, RelvmInputError, RelvmRuntimeError, RelvmTypeError
from relvm.ir.types import ListType, TensorType
from relvm.runtime.file.format import assemble, sections_of

PROGRAM = """
def @main(%x: List[Tensor[(?, 3), float32]], %i: int64, %y: Tensor[(n, 3), float32]) {
  %0 = list.insert(%x, %y, %i);
  %1 = list.get(%0, -1i64);
  %2 = list.concat(%0, axis=0);
  %3 = list.split(%2, 2i64, axis=0);
  %4 = list.erase(%3, 0i64);
  (add(%1, 1f), %2, list.length(%4), %4, list.concat(%4, axis=1, new_axis=True))
}
"""

X = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((1, 3), np.float32)]
Y = np.full((3, 3), 2, np.float32)


def expected(x, i, y):
    items = list(x)
    items.insert(i if i >= 0 else i + len(items), y)
    whole = np.concatenate(items, axis=0)
    parts = [whole[k:k + 2] for k in range(0, len(whole), 2)][1:]
    return (items[-1] + 1, whole, np.int64(len(parts)), parts, np.stack(parts, axis=1))


def check(got, want) -> None:
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.fixture(scope="module")
def exe():
    return relvm.build(relvm.parse(PROGRAM))


# --- the IR type ----------------------------------------------------------------------------------

def test_list_types_print_and_parse_back() -> None:
    mod = relvm.parse(PROGRAM)
    text = str(mod)
    assert "%x: List[Tensor[(?, 3), float32]]" in text
    assert str(relvm.parse(text)) == text
    any_rank = "def @main(%s: List[Tensor[..., int64]]) { list.length(%s) }"
    assert "List[Tensor[..., int64]]" in str(relvm.parse(any_rank))


def test_list_type_keeps_numbers_and_makes_other_dims_any() -> None:
    from relvm.ir import dims as D

    t = ListType(TensorType((D.Sym("n"), 3), "float32"))
    assert str(t) == "List[Tensor[(?, 3), float32]]"
    assert str(ListType(TensorType((), "int64"), ranked=False)) == "List[Tensor[..., int64]]"


@pytest.mark.parametrize("body, message", [
    ("list.get(%x, 0f)", "index must be int32 or int64"),
    ("list.insert(%x, %y, 0i64)", r"item is Tensor\[\(2\), int64\], the list's tensors float32"),
    ("list.insert(%x, %z, 0i64)", "they must share dtype and rank"),
    ("list.concat(%x, axis=2)", "axis 2 is out of range for rank 2"),
    ("list.get(%y, 0i64)", "data must be a list"),
    ("list.get(%s, 0i64)", "its tensors' rank is not known"),
    ("list.split(%z, 1i64, axis=0, keepdims=False)", None),
])
def test_type_errors_name_the_input(body, message) -> None:
    text = ("def @main(%x: List[Tensor[(?, 3), float32]], %y: Tensor[(2), int64], "
            f"%z: Tensor[(4), float32], %s: List[Tensor[..., float32]]) {{ {body} }}")
    if message is None:  # a valid one, for contrast
        relvm.parse(text)
        return
    with pytest.raises(RelvmTypeError, match=message):
        relvm.parse(text)


def test_list_of_a_non_tensor_is_a_syntax_error() -> None:
    with pytest.raises(relvm.RelvmSyntaxError, match="a list holds tensors"):
        relvm.parse("def @main(%x: List[(float32, float32)]) { list.length(%x) }")


# --- the VM --------------------------------------------------------------------------------------

def test_lists_in_and_out(exe) -> None:
    vm = relvm.VirtualMachine(exe)
    for i in (0, 1, 2, -1, -2):
        got = vm.invoke("main", X, np.array(i), Y)
        check(got, expected(X, i, Y))
        assert isinstance(got[3], list)


def test_a_tuple_is_taken_as_a_list_and_an_empty_list_works() -> None:
    exe = relvm.build(relvm.parse(
        "def @main(%x: List[Tensor[(?), int64]], %y: Tensor[(2), int64]) {"
        " (list.length(%x), list.insert(%x, %y, list.length(%x))) }"))
    vm = relvm.VirtualMachine(exe)
    n, out = vm.invoke("main", (), np.array([1, 2]))
    assert int(n) == 0 and len(out) == 1
    n, out = vm.invoke("main", (np.array([5]),), np.array([1, 2]))
    assert int(n) == 1 and [a.tolist() for a in out] == [[5], [1, 2]]


@pytest.mark.parametrize("x, message", [
    (np.zeros((2, 3), np.float32), r"input %x: expected a list of arrays"),
    ([np.zeros((2, 3), np.float64)], r"input %x\[0\]: expected dtype float32, got float64"),
    ([np.zeros((2, 3), np.float32), np.zeros(3, np.float32)], r"input %x\[1\]: expected rank 2"),
    ([np.zeros((2, 4), np.float32)], r"input %x\[0\] dim 1: expected 3, got 4"),
    (["a"], r"input %x\[0\]"),
])
def test_wrong_list_inputs(exe, x, message) -> None:
    with pytest.raises(RelvmInputError, match=message):
        relvm.VirtualMachine(exe).invoke("main", x, np.array(0), Y)


@pytest.mark.parametrize("i", [3, -4, 100])
def test_a_position_out_of_range_is_a_runtime_error_naming_op_and_position(exe, i) -> None:
    with pytest.raises(RelvmRuntimeError,
                       match=rf"list_insert .*list.insert: position {i} is out of range for a "
                             r"list of length 2 \(valid: -2 to 2\)"):
        relvm.VirtualMachine(exe).invoke("main", X, np.array(i), Y)


@pytest.mark.parametrize("body, args, message", [
    ("list.get(%x, %i)", (0,), r"list.get: position 0 is out of range for a list of length 0 "
                               r"\(valid: none: the list is empty\)"),
    ("list.erase(%x, %i)", (-1,), "list.erase: position -1 is out of range"),
    ("list.concat(%x, axis=0)", (0,), "list.concat: the list is empty"),
])
def test_empty_lists(body, args, message) -> None:
    exe = relvm.build(relvm.parse(
        f"def @main(%x: List[Tensor[(?), float32]], %i: int64) {{ {body} }}"))
    with pytest.raises(RelvmRuntimeError, match=message):
        relvm.VirtualMachine(exe).invoke("main", [], np.array(args[0]))


def test_split_checks_its_sizes_at_run_time() -> None:
    exe = relvm.build(relvm.parse(
        "def @main(%x: Tensor[(n), float32], %s: Tensor[(k), int64]) {"
        " list.split(%x, %s) }"))
    vm = relvm.VirtualMachine(exe)
    out = vm.invoke("main", np.arange(5, dtype=np.float32), np.array([2, 0, 3]))
    assert [a.tolist() for a in out] == [[0, 1], [], [2, 3, 4]]
    with pytest.raises(RelvmRuntimeError, match=r"list.split: split \[2, 2\] must be sizes"):
        vm.invoke("main", np.arange(5, dtype=np.float32), np.array([2, 2]))


def test_a_list_result_cannot_be_bound_to_output_arrays(exe) -> None:
    vm = relvm.VirtualMachine(exe)
    with pytest.raises(RelvmInputError, match="returns a list"):
        vm.invoke_with_outputs("main", [X, np.array(0), Y], [np.zeros(3, np.float32)])
    with pytest.raises(RelvmInputError, match="returns a list"):
        vm.bind_outputs("main", np.zeros(3, np.float32))


def test_disassembly_names_the_list_instructions(exe) -> None:
    text = exe.bytecode
    for name in ("list_insert", "list_get", "list_concat", "list_split", "list_erase",
                 "list_length"):
        assert name in text


# --- the file --------------------------------------------------------------------------------------

def test_save_load_round_trip(exe, tmp_path) -> None:
    path = tmp_path / "lists.relvm"
    exe.save(path)
    loaded = relvm.load(path)
    assert loaded.function("main").params[0].is_list
    check(relvm.VirtualMachine(loaded).invoke("main", X, np.array(1), Y), expected(X, 1, Y))


def _edit_meta(data: bytes, edit) -> bytes:
    sections = sections_of(data)
    meta = json.loads(sections["meta"])
    edit(meta)
    sections["meta"] = json.dumps(meta).encode()
    return assemble(sections)


def _main(meta) -> dict:
    return next(f for f in meta["functions"] if f["name"] == "main")


@pytest.mark.parametrize("edit, section, message", [
    (lambda m: _main(m)["params"][0].update(type="Tensor[(3), float32]"), "meta",
     "a list's type must be List"),
    (lambda m: _main(m)["params"][0].update(tensors=[]), "meta",
     "has one element type"),
    (lambda m: _main(m)["params"][0].update(list="yes"), "meta", "expected true or false"),
    (lambda m: _main(m)["params"][0].update(list=False), "code", "a list"),
    (lambda m: _main(m)["params"][0]["tensors"][0].update(dtype="int64"), "code",
     "int64"),
    (lambda m: _main(m)["outputs"][3].update(list=False), "code", "result 3"),
    (lambda m: _main(m)["params"][1]["tensors"][0].update(shape=None), "meta",
     "only a list's element may have no shape"),
])
def test_a_corrupted_list_type_is_refused_naming_the_section(exe, edit, section, message) -> None:
    with pytest.raises(RelvmFormatError) as info:
        relvm.load_bytes(_edit_meta(exe.save_bytes(), edit))
    assert info.value.section == section, info.value
    assert message in str(info.value), info.value


def test_concat_of_tensors_that_do_not_fit_names_their_shapes() -> None:
    exe = relvm.build(relvm.parse(
        "def @main(%x: List[Tensor[(?, 3), float32]]) { list.concat(%x, axis=0, new_axis=True) }"))
    with pytest.raises(RelvmRuntimeError,
                       match=r"list.concat: the tensors \(2, 3\), \(1, 3\) differ"):
        relvm.VirtualMachine(exe).invoke("main", X)


def test_the_reference_interpreter_agrees() -> None:
    from relvm.testing.reference import evaluate

    for i in (0, -1):
        check(evaluate(relvm.parse(PROGRAM), X, np.array(i), Y), expected(X, i, Y))
