"""The model's own input and output names (``IONames``): in the text format as a def's
``input_names``/``output_names`` attributes, through the compiler, into the executable file."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.ir.nodes import IONames

TEXT = '''#[version = "0.0.5"]
def @main(%input_1: Tensor[(n, 4), float32], %w: Tensor[(4, 2), float32], input_names=["input.1", "w"], output_names=["y:0", "z"]) {
  %0 = nn.matmul(%input_1, %w);
  %1 = nn.relu(%0);
  (%0, %1)
}
'''


def test_text_round_trip():
    m = relvm.parse(TEXT)
    assert m.io_names == {"main": IONames({"input_1": "input.1"}, ("y:0", "z"))}
    assert relvm.print_module(m) == TEXT
    assert relvm.parse(relvm.print_module(m)).io_names == m.io_names


def test_no_names_print_no_attributes():
    m = relvm.parse("def @main(%x: Tensor[(n), float32]) { nn.relu(%x) }")
    assert m.io_names == {}
    assert "input_names" not in relvm.print_module(m)


@pytest.mark.parametrize("attrs, message", [
    ('input_names=["a"]', "input_names has 1 names for 2 parameters"),
    ('output_names=[1]', "output_names must be a list of strings"),
    ('inputs=["a", "b"]', "unknown function attribute inputs; relvm reads input_names, "
                          "output_names"),
])
def test_bad_attributes_are_syntax_errors(attrs, message):
    text = f"def @main(%x: Tensor[(n), float32], %y: Tensor[(n), float32], {attrs}) {{ %x }}"
    with pytest.raises(relvm.RelvmSyntaxError, match=message):
        relvm.parse(text)


def test_attributes_come_last_and_only_on_defs():
    with pytest.raises(relvm.RelvmSyntaxError, match="parameter after function attributes"):
        relvm.parse('def @main(output_names=["a"], %x: Tensor[(n), float32]) { %x }')
    with pytest.raises(relvm.RelvmSyntaxError, match="only read on a def"):
        relvm.parse('def @main(%x: Tensor[(n), float32]) { %0 = fn (%y: Tensor[(n), float32], '
                    'output_names=["a"]) { %y }; %0(%x) }')


def test_names_reach_the_executable_and_its_file():
    w = np.ones((4, 2), np.float32)
    exe = relvm.build(relvm.parse(TEXT), params={"w": w}, backend="numpy")
    fn = exe.function("main")
    assert fn.input_names == ("input.1",)  # %w became a constant
    assert fn.output_names == ("y:0", "z")
    loaded = relvm.load_bytes(exe.save_bytes()).function("main")
    assert (loaded.input_names, loaded.output_names) == (("input.1",), ("y:0", "z"))


def test_a_file_without_names_loads_with_the_ir_names():
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n), float32]) { nn.relu(%x) }"),
                      backend="numpy")
    fn = relvm.load_bytes(exe.save_bytes()).function("main")
    assert (fn.input_names, fn.output_names) == ((), ())
    assert (fn.input_name(0), fn.output_name(0)) == ("x", "output0")
