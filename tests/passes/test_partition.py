"""relvm.partition: which ops each backend takes, how matches merge into regions, and what
the result looks like as IR (functions with Compiler and global_symbol, printed and parsed)."""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm.backends import external as X
from relvm.ir.nodes import Call, GlobalVar, post_order


def backend(name: str, *patterns: tuple, worth=lambda region: True) -> X.Backend:
    """A backend that takes ``patterns`` (tuples of op names) and, by default, every region
    (these tests are about matching and merging, not the cost model)."""
    return X.Backend(name, [X.Pattern("+".join(p), p) for p in patterns],
                     compile=lambda region: b"", runtime=lambda a, c: None, worth=worth)


def regions(mod) -> dict[str, list[str]]:
    """Each region function's ops, in order, by name."""
    return {name: [e.op.name for e in post_order(fn.body) if isinstance(e, Call)]
            for name, fn in mod.functions.items() if fn.attrs.get("Compiler")}


def main_ops(mod) -> list[str]:
    return [e.op.name if not isinstance(e.op, GlobalVar) else "@" + e.op.name
            for e in post_order(mod["main"].body) if isinstance(e, Call)]


CONV = """def @main(%x: Tensor[(n, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32],
          %b: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.conv2d(%0, %w, padding=[1, 1, 1, 1]);
  %2 = nn.bias_add(%1, %b);
  %3 = nn.relu(%2);
  %4 = nn.conv2d(%3, %w, padding=[1, 1, 1, 1]);
  nn.relu(%4)
}"""


def test_a_chain_and_its_successor_merge_into_one_region() -> None:
    toy = backend("toy", ("nn.conv2d", "nn.bias_add?", "nn.relu"))
    part = relvm.partition(relvm.parse(CONV), [toy])
    assert regions(part) == {"toy_0": ["nn.conv2d", "nn.bias_add", "nn.relu", "nn.conv2d",
                                       "nn.relu"]}
    assert main_ops(part) == ["nn.relu", "@toy_0"]
    fn = part["toy_0"]
    assert dict(fn.attrs) == {"Compiler": "toy", "global_symbol": "toy_0"}
    assert [str(p.checked_type) for p in fn.params] == [
        "Tensor[(n, 4, 8, 8), float32]", "Tensor[(4, 4, 3, 3), float32]",
        "Tensor[(4), float32]"]


def test_conv_then_relu_is_taken_but_relu_then_conv_is_not() -> None:
    toy = backend("toy", ("nn.conv2d", "nn.relu"))
    part = relvm.partition(relvm.parse("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.conv2d(%0, %w, padding=[1, 1, 1, 1]);
  sigmoid(%1)
}"""), [toy])
    assert regions(part) == {}  # relu -> conv2d matches no chain; conv2d alone is no pattern
    part = relvm.partition(relvm.parse(CONV.replace("nn.bias_add(%1, %b)", "add(%1, 1f)")),
                           [toy])
    # The first conv is followed by add, not relu: only the second conv -> relu matches.
    assert regions(part) == {"toy_0": ["nn.conv2d", "nn.relu"]}
    assert main_ops(part)[:4] == ["nn.relu", "nn.conv2d", "add", "nn.relu"]


def test_predicates_refuse_matches() -> None:
    only_3x3 = X.Backend("toy", [X.Pattern("conv", ("nn.conv2d",), check=lambda views: (
        views[0].inputs[1].shape[2:] == (3, 3) and views[0].constant == (False, True)))],
        compile=lambda r: b"", runtime=lambda a, c: None, worth=lambda r: True)
    mod = relvm.parse(CONV)
    assert regions(relvm.partition(mod, [only_3x3])) == {}  # the weight is not a constant
    w = np.ones((4, 4, 3, 3), np.float32)
    part = relvm.partition(mod, [only_3x3], params={"w": w, "b": np.zeros(4, np.float32)})
    assert sorted(regions(part).values()) == [["nn.conv2d"], ["nn.conv2d"]]


def test_a_refused_chain_falls_back_to_its_longest_accepted_prefix() -> None:
    """conv -> bias -> multiply by a bigger tensor: the predicate refuses the multiply (it
    grows the result), and the conv and its bias are still taken, as one match."""
    def keeps_shape(views) -> bool:
        return all(v.output.shape == views[0].output.shape for v in views)
    toy = X.Backend("toy", [X.Pattern("conv", ("nn.conv2d", "nn.bias_add?", "multiply?"),
                                      keeps_shape)],
                    compile=lambda region: b"", runtime=lambda a, c: None,
                    worth=lambda region: True)
    part = relvm.partition(relvm.parse("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 1, 1), float32],
          %b: Tensor[(4), float32], %y: Tensor[(1, 4, 8, 8), float32]) {
  %0 = nn.global_avg_pool2d(%x);
  %1 = nn.bias_add(nn.conv2d(%0, %w), %b);
  multiply(%y, %1)
}"""), [toy])
    assert regions(part) == {"toy_0": ["nn.conv2d", "nn.bias_add"]}
    assert main_ops(part) == ["nn.global_avg_pool2d", "@toy_0", "multiply"]
    required = X.Backend("toy", [X.Pattern("conv", ("nn.conv2d", "nn.bias_add", "multiply"),
                                           keeps_shape)],
                         compile=lambda region: b"", runtime=lambda a, c: None)
    assert not regions(relvm.partition(relvm.parse("""
def @main(%x: Tensor[(1, 4, 1, 1), float32], %w: Tensor[(4, 4, 1, 1), float32],
          %b: Tensor[(4), float32], %y: Tensor[(1, 4, 8, 8), float32]) {
  multiply(%y, nn.bias_add(nn.conv2d(%x, %w), %b))
}"""), [required]))  # a required step is never dropped


def test_backends_are_tried_in_priority_order() -> None:
    first = backend("first", ("nn.conv2d",))
    second = backend("second", ("nn.conv2d", "nn.bias_add", "nn.relu"), ("nn.relu",))
    part = relvm.partition(relvm.parse(CONV), [first, second])
    got = regions(part)
    # "first" takes both convs; "second" gets the relus and the bias add that are left, each
    # chain of its own where a conv of "first" stands between them.
    assert sorted(v for k, v in got.items() if k.startswith("first")) == [["nn.conv2d"]] * 2
    assert sorted(v for k, v in got.items() if k.startswith("second")) == [
        ["nn.relu"], ["nn.relu"], ["nn.relu"]]
    part = relvm.partition(relvm.parse(CONV), [second, first])
    # Now "second" takes the first conv's chain (and the relu before it), "first" what is left;
    # the last relu stays apart: joining it would put the second conv inside a cycle.
    assert regions(part) == {"second_0": ["nn.relu", "nn.conv2d", "nn.bias_add", "nn.relu"],
                             "first_0": ["nn.conv2d"], "second_1": ["nn.relu"]}
    assert main_ops(part) == ["@second_0", "@first_0", "@second_1"]


CYCLE = """def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = tanh(%0);
  add(%0, %1)
}"""


def test_regions_never_make_a_cycle() -> None:
    toy = backend("toy", ("nn.conv2d",), ("add",))
    part = relvm.partition(relvm.parse(CYCLE), [toy])
    # conv2d and add both belong to toy, but tanh (relvm's) runs between them: one region
    # would have to run before and after tanh.
    assert sorted(regions(part).values()) == [["add"], ["nn.conv2d"]]
    assert main_ops(part) == ["@toy_0", "tanh", "@toy_1"]
    toy_tanh = backend("toy", ("nn.conv2d",), ("add",), ("tanh",))
    assert list(regions(relvm.partition(relvm.parse(CYCLE), [toy_tanh])).values()) == [
        ["nn.conv2d", "tanh", "add"]]


def test_siblings_reading_one_value_merge_and_a_region_may_return_several() -> None:
    toy = backend("toy", ("nn.conv2d",))
    part = relvm.partition(relvm.parse("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], dilation=[1, 1]);
  concatenate((%0, %1), axis=1)
}"""), [toy])
    assert list(regions(part).values()) == [["nn.conv2d", "nn.conv2d"]]
    assert str(part["toy_0"].checked_type.ret) == \
        "(Tensor[(1, 4, 8, 8), float32], Tensor[(1, 4, 8, 8), float32])"


def test_the_cost_model_leaves_a_lone_cheap_op_to_relvm() -> None:
    eager = X.Backend("toy", [X.Pattern("relu", ("nn.relu",)), X.Pattern("conv", ("nn.conv2d",))],
                      compile=lambda r: b"", runtime=lambda a, c: None)  # default cost model
    part = relvm.partition(relvm.parse("""
def @main(%x: Tensor[(n, 64), float32], %y: Tensor[(1, 16, 32, 32), float32],
          %w: Tensor[(16, 16, 3, 3), float32]) {
  %0 = sigmoid(%x);
  %1 = nn.relu(%0);
  %2 = tanh(%1);
  (%2, nn.conv2d(%y, %w, padding=[1, 1, 1, 1]))
}"""), [eager])
    # A relu between two relvm ops saves no work and costs a boundary; a conv is worth one.
    assert list(regions(part).values()) == [["nn.conv2d"]]


def test_ops_inside_if_branches_stay_with_relvm() -> None:
    toy = backend("toy", ("nn.relu",))
    part = relvm.partition(relvm.parse("""
def @main(%c: bool, %x: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = if (%c) { nn.relu(%0) } else { %0 };
  add(%1, %0)
}"""), [toy])
    assert list(regions(part).values()) == [["nn.relu"]]
    assert "if (%c) {\n    nn.relu(" in relvm.print_module(part)


def test_a_partitioned_module_prints_and_parses_back() -> None:
    toy = backend("toy", ("nn.conv2d", "nn.bias_add?", "nn.relu"), ("nn.conv2d",))
    part = relvm.partition(relvm.parse(CYCLE.replace("tanh", "sigmoid") + "\n"), [toy])
    text = relvm.print_module(part)
    assert 'Compiler="toy", global_symbol="toy_0")' in text
    again = relvm.parse(text)
    assert again == part and relvm.print_module(again) == text
    part = relvm.partition(relvm.parse(CONV), [toy])
    assert relvm.parse(relvm.print_module(part)) == part


@pytest.mark.parametrize("attrs, message", [
    ('Compiler="toy"', "a region function needs global_symbol too"),
    ('Compiler=1, global_symbol="f"', "Compiler must be a non-empty string"),
    ('Inline=1', "unknown function attribute Inline"),
])
def test_bad_region_attributes_are_located_errors(attrs: str, message: str) -> None:
    with pytest.raises(relvm.RelvmSyntaxError, match=message) as err:
        relvm.parse(f"def @f(%x: Tensor[(2), float32], {attrs}) {{ nn.relu(%x) }}")
    assert err.value.line == 1


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(relvm.RelvmCompileError, match="unknown external backend 'nope'.*dnnl"):
        relvm.partition(relvm.parse(CONV), ["nope"])


def test_a_shared_weight_does_not_merge_distant_regions() -> None:
    toy = backend("toy", ("nn.conv2d",))
    w = np.ones((4, 4, 3, 3), np.float32)
    part = relvm.partition(relvm.parse("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %y: Tensor[(1, 4, 8, 8), float32],
          %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.conv2d(tanh(%y), %w, padding=[1, 1, 1, 1]);
  (%0, %1)
}"""), [toy], params={"w": w})
    # Two convs of one weight on unrelated inputs stay two regions; sharing %x they merge.
    assert sorted(regions(part).values()) == [["nn.conv2d"], ["nn.conv2d"]]


def test_the_cost_model_counts_a_products_multiply_adds() -> None:
    """relvm's one measure of work (partition's default cost model and the oneDNN one)."""
    f32 = lambda *shape: X.TensorInfo("float32", shape)  # noqa: E731
    # (8, 32) = (64, 8)^T (64, 32): 64 multiply-adds per result, whichever side is transposed
    for op in ("nn.matmul", "nn.batch_matmul"):
        view = X.OpView(op, {"transpose_a": True}, (f32(64, 8), f32(64, 32)), f32(8, 32))
        assert X.op_work(view, 8) == 8 * 32 * 64
    view = X.OpView("nn.matmul", {}, (f32(8, 64), f32(64, 32)), f32(8, 32))
    assert X.op_work(view, 8) == 8 * 32 * 64
    conv = X.OpView("nn.conv2d", {"groups": 4}, (f32("n", 16, 8, 8), f32(32, 4, 3, 3)),
                    f32("n", 32, 8, 8))
    assert X.op_work(conv, 8) == 8 * 32 * 64 * 4 * 9
    relu = X.OpView("nn.relu", {}, (f32(4, 10),), f32(4, 10))
    assert X.op_work(relu, 8) == 40
    # a region: a 3x3 conv (dense window), a 1x1 conv, then the result; the weights are
    # constants, so only the data and the result cross the edge
    steps = ({"op": "nn.conv2d", "attrs": {}, "args": [["in", 0], ["in", 1]],
              "type": {"dtype": "float32", "shape": ["n", 4, 8, 8]}},
             {"op": "nn.conv2d", "attrs": {}, "args": [["step", 0], ["in", 2]],
              "type": {"dtype": "float32", "shape": ["n", 2, 8, 8]}})
    region = X.Region("r", (f32("n", 4, 8, 8), f32(4, 4, 3, 3), f32(2, 4, 1, 1)), steps,
                      (("step", 1),), (False, True, True))
    m = X.measure(region, 8)
    assert m == X.Measure(work=8 * 4 * 64 * 36 + 8 * 2 * 64 * 4,
                          dense_window_work=8 * 4 * 64 * 36, edge=8 * 4 * 64 + 8 * 2 * 64)
