"""ONNX Loop and Scan (``relvm/frontend/onnx/loops.py``: recursive global functions), built with
onnx.helper and compared with ONNX Runtime on the build users get: nested loops, a loop inside
an If and an If inside a loop, scan axes and directions, carried shapes that grow, zero
iterations, trip counts known only at run time; the printed IR parses back; a loop of 100,000
iterations runs on the VM's frame stack; a runaway loop is a RelvmRuntimeError."""

from __future__ import annotations

import numpy as np
import pytest

import relvm

pytest.importorskip("onnx.helper")
import onnx  # noqa: E402
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from relvm.frontend.onnx import RelvmImportError, from_onnx  # noqa: E402
from relvm.ir.printer import module_constants  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(value), name))


def model(nodes, inputs, outputs, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_relvm(m, feeds):
    """The model's outputs on relvm, run from its printed IR parsed back (type-checked again:
    the loop functions' declared types must hold as text)."""
    mod, params = from_onnx(m)
    text = str(mod)
    again = relvm.parse(text, constants=module_constants(mod))
    assert str(again) == text
    vm = relvm.VirtualMachine(relvm.build(again, params=params))
    out = vm.invoke("main", *feeds.values())
    return list(out) if isinstance(out, tuple) else [out]


def check(m, feeds, atol=1e-5):
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_relvm(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        if w.shape == (0,) and g.ndim > 1 and g.shape[0] == 0:
            # After zero iterations ONNX Runtime gives a scan output of shape (0,) (it has not
            # seen an iteration's shape); relvm gives (0, ...) as the spec's (N, ...) says.
            assert g.dtype == w.dtype
            continue
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5)
    return got


def accumulate_body(extra_nodes=(), scan=True, outer="w"):
    """Body: y_out = y_in * 0.5 + outer value ``w`` + i; scan output y_out (optional)."""
    nodes = [helper.make_node("Identity", ["c_in"], ["c_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["y_in", "half"], ["h"]),
             helper.make_node("Add", ["h", outer], ["h2"]),
             helper.make_node("Add", ["h2", "fi"], ["y_out"]), *extra_nodes]
    outs = [vi("c_out", B, []), vi("y_out", F, None)]
    if scan:
        nodes.append(helper.make_node("Identity", ["y_out"], ["s"]))
        outs.append(vi("s", F, None))
    return helper.make_graph([const("half", np.float32(0.5))] + nodes, "body",
                             [vi("i", I64, []), vi("c_in", B, []), vi("y_in", F, None)], outs)


def accumulate_loop(dims=("n", 3)):
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ys"], body=accumulate_body())
    return model([node], [vi("M", I64, []), vi("y0", F, list(dims)), vi("w", F, list(dims))],
                 [vi("y", F, None), vi("ys", F, None)])


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_loop_run_time_trip_count(trips):
    rng = np.random.default_rng(trips)
    m = accumulate_loop()
    feeds = {"M": np.array(trips, np.int64), "y0": rng.standard_normal((2, 3), np.float32),
             "w": rng.standard_normal((2, 3), np.float32)}
    got = check(m, feeds)
    assert got[1].shape == (trips, 2, 3)  # zero iterations too: the symbolic n is known


def test_loop_condition_stops_it():
    # while (sum < 10): x = x + 1, counting; no trip count, the body's condition decides.
    body = helper.make_graph(
        [const("one", np.float32(1)), const("ten", np.float32(10)),
         helper.make_node("Add", ["x_in", "one"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "ten"], ["c_out"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), vi("x_in", F, None)],
        [vi("c_out", B, []), vi("x_out", F, None)])
    node = helper.make_node("Loop", ["", "c", "x0"], ["x"], body=body)
    m = model([node], [vi("c", B, []), vi("x0", F, ["n"])], [vi("x", F, None)])
    check(m, {"c": np.array(True), "x0": np.zeros(3, np.float32)})
    check(m, {"c": np.array(False), "x0": np.zeros(4, np.float32)})


def test_loop_carried_shape_grows():
    # x = concat(x, [i]) each iteration: the carried dim is a fresh ? in @loop's signature.
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Unsqueeze", ["fi", "zero"], ["row"]),
         helper.make_node("Concat", ["x_in", "row"], ["x_out"], axis=0)],
        "body", [vi("i", I64, []), vi("c_in", B, []), vi("x_in", F, None)],
        [vi("c_out", B, []), vi("x_out", F, None)],
        initializer=[onnx.numpy_helper.from_array(np.array([0], np.int64), "zero")])
    node = helper.make_node("Loop", ["M", "", "x0"], ["x"], body=body)
    m = model([node], [vi("M", I64, []), vi("x0", F, [2])], [vi("x", F, None)])
    for trips in (0, 3, 7):
        check(m, {"M": np.array(trips, np.int64), "x0": np.ones(2, np.float32)})
    mod, _ = from_onnx(m)
    assert "Tensor[(?), float32]" in str(mod["loop_0"].ret_type)


def test_nested_loops_read_outer_values():
    # for i < M: for j < i: y += w * (i + j); the inner body reads w from two levels out.
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c2"], ["c2o"]),
         helper.make_node("Add", ["i", "j"], ["ij"]),
         helper.make_node("Cast", ["ij"], ["fij"], to=F),
         helper.make_node("Mul", ["w", "fij"], ["d"]),
         helper.make_node("Add", ["z_in", "d"], ["z_out"])],
        "inner", [vi("j", I64, []), vi("c2", B, []), vi("z_in", F, None)],
        [vi("c2o", B, []), vi("z_out", F, None)])
    outer = helper.make_graph(
        [helper.make_node("Identity", ["c1"], ["c1o"]),
         helper.make_node("Loop", ["i", "", "y_in"], ["y_out"], body=inner),
         helper.make_node("Identity", ["y_out"], ["s"])],
        "outer", [vi("i", I64, []), vi("c1", B, []), vi("y_in", F, None)],
        [vi("c1o", B, []), vi("y_out", F, None), vi("s", F, None)])
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ys"], body=outer)
    m = model([node], [vi("M", I64, []), vi("y0", F, ["n"]), vi("w", F, ["n"])],
              [vi("y", F, None), vi("ys", F, None)])
    rng = np.random.default_rng(1)
    for trips in (0, 1, 4):
        check(m, {"M": np.array(trips, np.int64), "y0": rng.standard_normal(3, np.float32),
                  "w": rng.standard_normal(3, np.float32)})


def test_loop_inside_if_and_if_inside_loop():
    # The body branches on the parity of i; the whole loop sits in an If's then-branch.
    then_b = helper.make_graph([helper.make_node("Add", ["y_in", "w"], ["t"])], "then", [],
                               [vi("t", F, None)])
    else_b = helper.make_graph([helper.make_node("Sub", ["y_in", "w"], ["e"])], "else", [],
                               [vi("e", F, None)])
    body = helper.make_graph(
        [const("two", np.int64(2)), const("zero", np.int64(0)),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Equal", ["r", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["y_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("Identity", ["y_out"], ["s"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), vi("y_in", F, None)],
        [vi("c_out", B, []), vi("y_out", F, None), vi("s", F, None)])
    loop = helper.make_node("Loop", ["M", "", "y0"], ["ly", "lys"], body=body)
    go = helper.make_graph([loop, helper.make_node("Identity", ["lys"], ["a"])], "go", [],
                           [vi("a", F, None)])
    skip = helper.make_graph([helper.make_node("Unsqueeze", ["y0", "axes"], ["b"])], "skip",
                             [], [vi("b", F, None)])
    node = helper.make_node("If", ["p"], ["out"], then_branch=go, else_branch=skip)
    m = model([const("axes", np.array([0], np.int64)), node],
              [vi("p", B, []), vi("M", I64, []), vi("y0", F, [2]), vi("w", F, [2])],
              [vi("out", F, None)])
    rng = np.random.default_rng(2)
    for p, trips in ((True, 5), (False, 5), (True, 1)):
        check(m, {"p": np.array(p), "M": np.array(trips, np.int64),
                  "y0": rng.standard_normal(2, np.float32),
                  "w": rng.standard_normal(2, np.float32)})


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir",
                         [(0, 0, 0, 0), (1, 1, 0, 0), (0, 1, 1, 1), (2, 0, -1, 1), (1, 0, 2, 0)])
def test_scan_axes_and_directions(in_axis, in_dir, out_axis, out_dir):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "x"], ["y"])],
        "body", [vi("s_in", F, None), vi("x", F, None)], [vi("s_out", F, None), vi("y", F, None)])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    shape = [4, 5, 3]
    item = [d for a, d in enumerate(shape) if a != in_axis]
    m = model([node], [vi("s0", F, ["a", "b"]), vi("xs", F, ["p", "q", "r"])],
              [vi("s", F, None), vi("ys", F, None)])
    rng = np.random.default_rng(in_axis * 7 + out_axis)
    check(m, {"s0": rng.standard_normal(item, np.float32),
              "xs": rng.standard_normal(shape, np.float32)})


def test_scan_zero_length_and_two_inputs():
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Add", ["s_in", "ab"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y"])],
        "body", [vi("s_in", F, None), vi("a", F, None), vi("b", F, None)],
        [vi("s_out", F, None), vi("y", F, None)])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "ys"], body=body,
                            num_scan_inputs=2, scan_input_directions=[0, 1])
    m = model([node], [vi("s0", F, [3]), vi("xa", F, ["t", 3]), vi("xb", F, ["t", 3])],
              [vi("s", F, None), vi("ys", F, None)])
    rng = np.random.default_rng(3)
    for t in (1, 6):
        check(m, {"s0": rng.standard_normal(3, np.float32),
                  "xa": rng.standard_normal((t, 3), np.float32),
                  "xb": rng.standard_normal((t, 3), np.float32)})
    # ONNX Runtime refuses an empty scan axis; the spec's answer is the initial state and an
    # empty stack.
    s0 = rng.standard_normal(3, np.float32)
    s, ys = run_relvm(m, {"s0": s0, "xa": np.zeros((0, 3), np.float32),
                          "xb": np.zeros((0, 3), np.float32)})
    np.testing.assert_array_equal(s, s0)
    assert ys.shape == (0, 3) and ys.dtype == np.float32


def test_opset8_scan_sequence_lens_refused():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["s_out"])], "body",
                             [vi("s_in", F, [2]), vi("x", F, [2])], [vi("s_out", F, [2])])
    node = helper.make_node("Scan", ["lens", "s0", "xs"], ["s"], body=body, num_scan_inputs=1)
    m = model([node], [vi("lens", TensorProto.INT32, [1]), vi("s0", F, [1, 2]),
                       vi("xs", F, [1, 3, 2])], [vi("s", F, [1, 2])], opset=8)
    with pytest.raises(RelvmImportError, match="sequence_lens"):
        from_onnx(m)


@pytest.mark.parametrize("bound", ["count", "condition"])
def test_hundred_thousand_iterations(bound):
    # With a trip count the iterations run in halves (17 frames deep); with only a condition,
    # as a chain of 100,000 VM frames on the VM's own stack. Nothing recurses in Python.
    if bound == "count":
        body = accumulate_body(scan=False)
        node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)
    else:  # while (i + 1 < M)
        body = accumulate_body(scan=False, extra_nodes=[
            helper.make_node("Add", ["i", "one"], ["next"]),
            helper.make_node("Less", ["next", "M"], ["go"])])
        body.node.insert(0, const("one", np.int64(1)))
        body.output[0].name = "go"
        node = helper.make_node("Loop", ["", "c", "y0"], ["y"], body=body)
    inputs = [vi("M", I64, []), vi("y0", F, [4]), vi("w", F, [4])]
    feeds = {"M": np.array(100_000, np.int64), "y0": np.ones(4, np.float32),
             "w": np.full(4, 0.25, np.float32)}
    if bound == "condition":
        inputs.insert(1, vi("c", B, []))
        feeds = {"M": feeds["M"], "c": np.array(True), **feeds}
    m = model([node], inputs, [vi("y", F, None)])
    got = run_relvm(m, feeds)[0]
    y = np.ones(4, np.float32)
    for i in range(100_000):
        y = y * np.float32(0.5) + np.float32(0.25) + np.float32(i)
    np.testing.assert_allclose(got, y, rtol=1e-6)


def test_long_scan_output():
    # 20,000 rows of 64 floats: in halves each row is copied once a level (n log n).
    rng = np.random.default_rng(4)
    m = accumulate_loop(dims=(64,))
    feeds = {"M": np.array(20_000, np.int64), "y0": rng.standard_normal(64, np.float32),
             "w": rng.standard_normal(64, np.float32)}
    check(m, feeds, atol=1e-2)


def test_runaway_loop_is_a_runtime_error(monkeypatch):
    # The VM stops at MAX_FRAMES (1,000,000 frames: some 50 s of this loop); lowered here.
    import relvm.runtime.vm.thread as thread

    monkeypatch.setattr(thread, "MAX_FRAMES", 20_000)
    body = accumulate_body(scan=False)
    node = helper.make_node("Loop", ["", "", "y0"], ["y"], body=body)  # no bound at all
    m = model([node], [vi("y0", F, [1]), vi("w", F, [1])], [vi("y", F, None)])
    with pytest.raises(relvm.RelvmRuntimeError, match="call depth"):
        run_relvm(m, {"y0": np.zeros(1, np.float32), "w": np.zeros(1, np.float32)})


def test_body_changing_rank_is_refused():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Unsqueeze", ["x_in", "zero"], ["x_out"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), vi("x_in", F, None)],
        [vi("c_out", B, []), vi("x_out", F, None)],
        initializer=[onnx.numpy_helper.from_array(np.array([0], np.int64), "zero")])
    node = helper.make_node("Loop", ["M", "", "x0"], ["x"], body=body, name="grow_rank")
    m = model([node], [vi("M", I64, []), vi("x0", F, [2])], [vi("x", F, None)])
    with pytest.raises(RelvmImportError, match="grow_rank.*rank must stay"):
        from_onnx(m)


def test_saved_loop_loads_and_runs():
    # The verifier proves the register types of the recursive functions (two calls a frame in
    # halves, one in a chain) when a saved executable is loaded.
    rng = np.random.default_rng(5)
    m = accumulate_loop()
    mod, params = from_onnx(m)
    exe = relvm.load_bytes(relvm.build(mod, params=params).save_bytes())
    feeds = {"M": np.array(6, np.int64), "y0": rng.standard_normal((2, 3), np.float32),
             "w": rng.standard_normal((2, 3), np.float32)}
    got = relvm.VirtualMachine(exe).invoke("main", *feeds.values())
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, atol=1e-5, rtol=1e-5)


def test_trip_count_from_a_symbolic_dim():
    # M = Shape(x)[0] with x of (t, 3): the count is the symbolic t, read where the loop runs;
    # the body sums row i of x.
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
         helper.make_node("Add", ["y_in", "row"], ["y_out"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), vi("y_in", F, None)],
        [vi("c_out", B, []), vi("y_out", F, None)])
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=0, end=1),
             helper.make_node("Squeeze", ["shape"], ["M"]),
             helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)]
    m = model(nodes, [vi("x", F, ["t", 3]), vi("y0", F, [3])], [vi("y", F, None)])
    rng = np.random.default_rng(6)
    for t in (0, 1, 9):
        check(m, {"x": rng.standard_normal((t, 3), np.float32),
                  "y0": rng.standard_normal(3, np.float32)})


def _seq(name, t, shape):
    return helper.make_tensor_sequence_value_info(name, t, shape)


def _growing_sequence_loop(declared, outputs):
    """Each iteration appends x[:i+1] (a vector one longer each time) to the carried
    sequence, which enters empty (SequenceEmpty has no element shape)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Add", ["i", "one"], ["end"]),
         helper.make_node("Unsqueeze", ["end", "zero"], ["end1"]),
         helper.make_node("Slice", ["x", "zero", "end1"], ["part"]),
         helper.make_node("SequenceInsert", ["s_in", "part"], ["s_out"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), _seq("s_in", F, declared)],
        [vi("c_out", B, []), _seq("s_out", F, declared)],
        initializer=[onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
                     onnx.numpy_helper.from_array(np.array(1, np.int64), "one")])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
             helper.make_node("SequenceLength", ["s"], ["length"])]
    if declared is not None:
        nodes.append(helper.make_node("ConcatFromSequence", ["s"], ["flat"], axis=0))
    return model(nodes, [vi("M", I64, []), vi("x", F, ["n"])], outputs)


def test_loop_carries_a_sequence():
    # the body declares its sequence of vectors: after the loop, its length and concatenation
    m = _growing_sequence_loop(["k"], [vi("length", I64, []), vi("flat", F, None)])
    x = np.arange(6, dtype=np.float32)
    for trips in (1, 3, 6):  # (ONNX Runtime refuses to concatenate an empty sequence)
        check(m, {"M": np.array(trips, np.int64), "x": x})
    mod, _ = from_onnx(m)
    assert "List[Tensor[(?), float32]]" in str(mod["loop_0"].ret_type)


def test_loop_carries_a_sequence_of_any_rank():
    # declared without a shape: the loop's list is of any rank, returned as a list of arrays
    m = _growing_sequence_loop(None, [_seq("s", F, None), vi("length", I64, [])])
    feeds = {"M": np.array(4, np.int64), "x": np.arange(6, dtype=np.float32)}
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_relvm(m, feeds)
    assert int(got[1]) == int(want[1]) == 4
    assert len(got[0]) == len(want[0])
    for g, w in zip(got[0], want[0]):
        np.testing.assert_array_equal(g, w)
