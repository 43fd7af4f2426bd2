"""ONNX sequence ops, through models built with onnx.helper, against ONNX Runtime: with static
dims and with symbolic ones (the dims a sequence's length does not depend on)."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from relvm.frontend.onnx import RelvmImportError, from_onnx  # noqa: E402

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, opset=17):
    """``inputs``/``outputs``: (name, elem type, shape) for tensors; ``("seq", name, elem,
    shape)`` for sequences."""
    def info(spec):
        if spec[0] == "seq":
            _, name, elem, shape = spec
            return helper.make_tensor_sequence_value_info(name, elem, shape)
        return helper.make_tensor_value_info(*spec)

    graph = helper.make_graph(nodes, "g", [info(s) for s in inputs], [info(s) for s in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def run_both(m, feeds: dict):
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    mod, params = from_onnx(m)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    got = vm.invoke("main", *feeds.values())
    got = list(got) if isinstance(got, tuple) and len(want) > 1 else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            pairs = list(zip(g, w))
        else:
            pairs = [(g, w)]
        for a, b in pairs:
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def shape(dims, symbolic, keep=()):
    """``dims`` as they are, or as named dims but for the axes in ``keep``."""
    return [d if not symbolic or i in keep else f"d{i}" for i, d in enumerate(dims)]


rng = np.random.default_rng(0)


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unbind_stack(symbolic, axis):
    """torch's unbind then stack: SplitToSequence without split, keepdims 0, ConcatFromSequence
    with new_axis; SequenceAt from the end; SequenceLength."""
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=axis, keepdims=0),
        helper.make_node("ConcatFromSequence", ["s"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("Constant", [], ["p"], value_int=-1),
        helper.make_node("SequenceAt", ["s", "p"], ["last"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
    ]
    m = model(nodes, [("x", F, shape(x.shape, symbolic, keep=(axis % 3,)))],
              [("stacked", F, None), ("last", F, None), ("n", I64, None)])
    run_both(m, {"x": x})


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("split", [np.int64(2), np.array([1, 3, 1], np.int64)])
def test_split_concat(symbolic, split):
    """SplitToSequence by a chunk size (the last part shorter) or by sizes, then back."""
    x = rng.standard_normal((2, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["split"],
                         value=helper.make_tensor("v", I64, split.shape, split.reshape(-1))),
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
        helper.make_node("Constant", [], ["one"], value_int=1),
        helper.make_node("SequenceErase", ["s", "one"], ["e"]),
        helper.make_node("ConcatFromSequence", ["e"], ["y"], axis=1),
        helper.make_node("SequenceAt", ["s", "one"], ["middle"]),
    ]
    m = model(nodes, [("x", F, shape(x.shape, symbolic, keep=(1,)))],
              [("y", F, None), ("middle", F, None)])
    run_both(m, {"x": x})


@pytest.mark.parametrize("symbolic", [False, True])
def test_construct_insert_erase(symbolic):
    a, b, c = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
        helper.make_node("Constant", [], ["front"], value_int=-2),
        helper.make_node("SequenceInsert", ["s", "c", "front"], ["s2"]),  # c, a, b
        helper.make_node("SequenceInsert", ["s2", "a"], ["s3"]),  # c, a, b, a
        helper.make_node("SequenceErase", ["s3"], ["s4"]),  # c, a, b
        helper.make_node("Constant", [], ["zero"], value_int=0),
        helper.make_node("SequenceErase", ["s4", "zero"], ["s5"]),  # a, b
        helper.make_node("ConcatFromSequence", ["s3"], ["y"], axis=0),
        helper.make_node("ConcatFromSequence", ["s5"], ["z"], axis=2, new_axis=1),
        helper.make_node("SequenceLength", ["s4"], ["n"]),
    ]
    ins = [(k, F, shape((2, 3), symbolic)) for k in "abc"]
    m = model(nodes, ins, [("y", F, None), ("z", F, None), ("n", I64, None)])
    run_both(m, {"a": a, "b": b, "c": c})


@pytest.mark.parametrize("symbolic", [False, True])
def test_empty_then_insert(symbolic):
    x = rng.standard_normal((4,)).astype(np.float32)
    nodes = [
        helper.make_node("SequenceEmpty", [], ["e"], dtype=F),
        helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("Constant", [], ["zero"], value_int=0),
        helper.make_node("SequenceInsert", ["s1", "nx", "zero"], ["s2"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["e"], ["n"]),
    ]
    m = model(nodes, [("x", F, shape(x.shape, symbolic))], [("y", F, None), ("n", I64, None)])
    run_both(m, {"x": x})


@pytest.mark.parametrize("symbolic", [False, True])
def test_sequence_map(symbolic):
    """SequenceMap over a sequence and a tensor, two outputs, both stacked."""
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = rng.standard_normal((4,)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "t"], ["sum"]),
         helper.make_node("Shape", ["e"], ["shp"])], "body",
        [helper.make_tensor_value_info("e", F, None), helper.make_tensor_value_info("t", F, None)],
        [helper.make_tensor_value_info("sum", F, None),
         helper.make_tensor_value_info("shp", I64, None)])
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
        helper.make_node("SequenceMap", ["s", "t"], ["sums", "shapes"], body=body),
        helper.make_node("ConcatFromSequence", ["sums"], ["y"], axis=0, new_axis=1),
        helper.make_node("ConcatFromSequence", ["shapes"], ["z"], axis=0),
    ]
    m = model(nodes, [("x", F, shape(x.shape, symbolic, keep=(0,))),
                      ("t", F, shape(t.shape, symbolic))], [("y", F, None), ("z", I64, None)])
    run_both(m, {"x": x, "t": t})


@pytest.mark.parametrize("cond", [True, False])
def test_if_of_sequences(cond):
    """An If whose branches make sequences of one length: each element is chosen."""
    x = rng.standard_normal((2, 2)).astype(np.float32)

    def branch(op, name):
        return helper.make_graph(
            [helper.make_node(op, ["x"], [f"{name}_x"]),
             helper.make_node("SequenceConstruct", [f"{name}_x", "x"], [f"{name}_s"])], name, [],
            [helper.make_tensor_sequence_value_info(f"{name}_s", F, None)])

    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=branch("Neg", "then"),
                              else_branch=branch("Abs", "else")),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    m = model(nodes, [("c", TensorProto.BOOL, []), ("x", F, ["n", 2])], [("y", F, None)])
    run_both(m, {"c": np.array(cond), "x": x})


@pytest.mark.parametrize("node, message", [
    (helper.make_node("SequenceAt", ["s", "p3"], ["y"], name="at"),
     "SequenceAt node 'at': position 3 is out of range for a sequence of length 3 "
     "(valid: -3 to 2)"),
    (helper.make_node("SequenceAt", ["s", "m4"], ["y"], name="at"),
     "position -4 is out of range"),
    (helper.make_node("SequenceErase", ["s", "p3"], ["y"], name="erase"),
     "SequenceErase node 'erase': position 3 is out of range"),
    (helper.make_node("SequenceInsert", ["s", "x", "m4"], ["y"], name="ins"),
     "SequenceInsert node 'ins': position -4 is out of range for a sequence of length 3 "
     "(valid: -3 to 3)"),
])
def test_bad_positions(node, message):
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
             helper.make_node("Constant", [], ["p3"], value_int=3),
             helper.make_node("Constant", [], ["m4"], value_int=-4),
             node]
    if node.op_type != "SequenceAt":
        nodes.append(helper.make_node("ConcatFromSequence", ["y"], ["out"], axis=0))
        node.output[0] = "y"
    out = "out" if node.op_type != "SequenceAt" else "y"
    m = model(nodes, [("x", F, [3, 2])], [(out, F, None)])
    with pytest.raises(RelvmImportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_onnx(m)


# --- sequences of run-time length: IR lists ------------------------------------------------------

@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("pos", [0, 2, -1, -3])
def test_sequence_input_and_output(symbolic, pos):
    """A sequence graph input (its length known only at run time) through every op, positions
    fed at run time, a sequence graph output."""
    seq = [rng.standard_normal((k, 3)).astype(np.float32) for k in (2, 1, 4)]
    t = rng.standard_normal((2, 3)).astype(np.float32)
    nodes = [
        helper.make_node("SequenceInsert", ["s", "t", "p"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "p"], ["at"]),
        helper.make_node("SequenceErase", ["s2", "p"], ["s3"]),
        helper.make_node("SequenceErase", ["s3"], ["s4"]),
        helper.make_node("SequenceLength", ["s4"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=0),
        helper.make_node("SequenceConstruct", ["t", "at"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["stacked"], axis=0),
        helper.make_node("SequenceEmpty", [], ["e"], dtype=F),
        helper.make_node("SequenceInsert", ["e", "t"], ["one"]),
    ]
    m = model(nodes, [("seq", "s", F, [None, 3]), ("t", F, shape(t.shape, symbolic)),
                      ("p", I64, [])],
              [("seq", "s4", F, None), ("at", F, None), ("n", I64, None), ("cat", F, None),
               ("stacked", F, None), ("seq", "one", F, None)])
    run_both(m, {"s": seq, "t": t, "p": np.array(pos, np.int64)})


@pytest.mark.parametrize("symbolic, split", [
    (symbolic, split) for symbolic in (False, True)
    for split in (np.array(2, np.int64), np.array([1, 0, 4], np.int64))] + [(True, None)])
def test_split_by_a_run_time_count(symbolic, split):
    """SplitToSequence whose parts are counted at run time: a split fed then, or a symbolic
    axis length (a static one splits at import: test_unbind_stack); ConcatFromSequence and
    SequenceAt of the result."""
    x = rng.standard_normal((5, 2)).astype(np.float32)
    inputs = ["x"] if split is None else ["x", "split"]
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], axis=0,
                              **({"keepdims": 0} if split is None else {})),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=1),
             helper.make_node("Constant", [], ["last"], value_int=-1),
             helper.make_node("SequenceAt", ["s", "last"], ["z"])]
    ins = [("x", F, shape(x.shape, symbolic))]
    feeds = {"x": x}
    if split is not None:
        ins.append(("split", I64, list(split.shape)))
        feeds["split"] = split
        nodes[1] = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)
    m = model(nodes, ins, [("seq", "s", F, None), ("y", F, None), ("z", F, None)])
    run_both(m, feeds)


def test_a_sequence_input_of_unknown_rank_passes_through():
    seq = [np.ones((2, 2), np.float32), np.zeros(3, np.float32)]
    nodes = [helper.make_node("Identity", ["s"], ["a"]),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    m = model(nodes, [("seq", "s", F, None)], [("seq", "a", F, None), ("n", I64, None)])
    run_both(m, {"s": seq})
    m = model([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
              [("seq", "s", F, None)], [("y", F, None)])
    with pytest.raises(RelvmImportError, match="its tensors' rank is not known"):
        from_onnx(m)


@pytest.mark.parametrize("pos", [3, -4])
def test_a_run_time_position_out_of_range(pos):
    m = model([helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")],
              [("seq", "s", F, [2]), ("p", I64, [])], [("y", F, None)])
    mod, params = from_onnx(m)
    vm = relvm.VirtualMachine(relvm.build(mod, params=params))
    with pytest.raises(relvm.RelvmRuntimeError,
                       match=rf"list.get: position {pos} is out of range for a list of length 3"):
        vm.invoke("main", [np.zeros(2, np.float32)] * 3, np.array(pos))


@pytest.mark.parametrize("cond", [True, False])
def test_if_of_sequences_of_different_lengths(cond):
    """An If whose branches make sequences of different lengths: a list, chosen whole."""
    x = rng.standard_normal((2, 2)).astype(np.float32)
    then = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x", "x"], ["a"])], "then", [],
        [helper.make_tensor_sequence_value_info("a", F, None)])
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["nx"]),
         helper.make_node("SequenceConstruct", ["nx"], ["b"])], "else", [],
        [helper.make_tensor_sequence_value_info("b", F, None)])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=then, else_branch=other),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    m = model(nodes, [("c", TensorProto.BOOL, []), ("x", F, ["n", 2])],
              [("y", F, None), ("n", I64, None), ("seq", "s", F, None)])
    run_both(m, {"c": np.array(cond), "x": x})


def test_inference_session_returns_a_sequence_as_a_list():
    x = rng.standard_normal((3, 2)).astype(np.float32)
    m = model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)],
              [("x", F, ["n", 2])], [("seq", "s", F, None)])
    ours = relvm.InferenceSession(m.SerializeToString())
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert ours.get_outputs()[0].type == theirs.get_outputs()[0].type == "seq(tensor(float))"
    got, want = ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0]
    assert isinstance(got, list) and len(got) == len(want) == 3
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("symbolic", [False, True])
def test_sequence_map_over_a_sequence_input(symbolic):
    """SequenceMap over a sequence of run-time length (a recursive function): a sequence and a
    tensor input, an outer value and a large initializer read by the body, two outputs."""
    from onnx import numpy_helper

    seq = [rng.standard_normal((k, 4)).astype(np.float32) for k in (3, 1, 2)]
    t = rng.standard_normal((4,)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "t"], ["sum"]),
         helper.make_node("Mul", ["sum", "outer"], ["scaled"]),
         helper.make_node("MatMul", ["scaled", "w"], ["proj"]),
         helper.make_node("Shape", ["e"], ["shp"])], "body",
        [helper.make_tensor_value_info("e", F, None), helper.make_tensor_value_info("t", F, None)],
        [helper.make_tensor_value_info("proj", F, None),
         helper.make_tensor_value_info("shp", I64, None)])
    nodes = [helper.make_node("Neg", ["t"], ["outer"]),
             helper.make_node("SequenceMap", ["s", "t"], ["ys", "shapes"], body=body),
             helper.make_node("ConcatFromSequence", ["ys"], ["y"], axis=0),
             helper.make_node("SequenceLength", ["shapes"], ["n"])]
    m = model(nodes, [("seq", "s", F, [None, 4]), ("t", F, shape(t.shape, symbolic))],
              [("y", F, None), ("n", I64, None), ("seq", "shapes", I64, None)])
    m.graph.initializer.append(numpy_helper.from_array(w, "w"))
    run_both(m, {"s": seq, "t": t})
