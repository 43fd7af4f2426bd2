"""VM overhead: a tiny model through invoke_with_outputs, and per-instruction cost.

Run: ``python benchmarks/bench_vm_overhead.py [--rounds 7]`` (ONNX Runtime, if installed, is
measured in the same run: ``pip install ".[bench]"``). relvm and ORT take turns in rounds (each
round a median of many calls); the report is each one's median of its round medians, and the
ratios of relvm to ORT's ``sess.run`` and to its IOBinding run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_us, optional  # noqa: E402

import relvm  # noqa: E402

CHAIN = 200


def relvm_add_one(backend: str) -> Callable[[], object]:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(1, 4), float32]) { add(%x, 1f) }"),
                      backend=backend)
    vm = relvm.VirtualMachine(exe)
    x = np.zeros((1, 4), np.float32)
    out = np.empty((1, 4), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    assert np.array_equal(out, x + 1)
    return lambda: vm.invoke_with_outputs("main", [x], [out])


def relvm_chain(backend: str) -> tuple[Callable[[], object], Callable[[], object], int]:
    """(one invoke, the same kernels called directly as a floor, instructions): a 200-op chain."""
    body = "".join(f"  %{i + 1} = add(%{i}, 1f);\n" for i in range(CHAIN))
    text = "def @main(%0: Tensor[(1, 4), float32]) {\n" + body + f"  %{CHAIN}\n}}"
    # Unfused, so there is one instruction per op: this measures the VM, not fusion.
    exe = relvm.build(relvm.parse(text), backend=backend, fuse=False)
    vm = relvm.VirtualMachine(exe)
    x = np.zeros((1, 4), np.float32)
    out = np.empty((1, 4), np.float32)
    vm.invoke_with_outputs("main", [x], [out])
    assert np.array_equal(out, x + CHAIN)
    kernel = vm.kernel(0)
    one = np.ones((), np.float32)
    tmp = np.empty((1, 4), np.float32)

    def kernels_only():
        for _ in range(CHAIN):
            kernel(x, one, tmp)
    return (lambda: vm.invoke_with_outputs("main", [x], [out]), kernels_only,
            len(exe.function("main").instructions))


def ort_add_one() -> tuple[Callable[[], object], Callable[[], object]] | None:
    """(sess.run, run_with_iobinding) of x + 1 in ONNX Runtime, or None without it."""
    onnx, ort = optional("onnx"), optional("onnxruntime")
    if onnx is None or ort is None:
        return None
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "add_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    x = np.zeros((1, 4), np.float32)
    out = np.empty((1, 4), np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, [1, 4], out.ctypes.data)
    sess.run_with_iobinding(binding)
    assert np.array_equal(out, x + 1)
    return (lambda: sess.run(None, {"x": x}), lambda: sess.run_with_iobinding(binding))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    args = p.parse_args()
    backends = [b for b in ("c", "numpy") if b in relvm.compiler.BACKENDS]
    fns = {f"relvm[{b}]": relvm_add_one(b) for b in backends}
    ort = ort_add_one()
    if ort:
        fns["ort run"], fns["ort iobinding"] = ort
    t = interleaved_us(fns, rounds=args.rounds)
    print(f"relvm VM overhead (microseconds; median of {args.rounds} interleaved rounds)")
    if ort:
        print(f"  ORT  x+1 [1,4] sess.run                 {t['ort run']:8.2f}")
        print(f"  ORT  x+1 [1,4] run_with_iobinding       {t['ort iobinding']:8.2f}")
    for b in backends:
        us = t[f"relvm[{b}]"]
        ratio = (f"   relvm/ORT sess.run = {us / t['ort run']:.2f}, "
                 f"/IOBinding = {us / t['ort iobinding']:.2f}") if ort else ""
        print(f"  relvm[{b}] x+1 invoke_with_outputs    {us:8.2f}{ratio}")
    for b in backends:
        invoke, floor, count = relvm_chain(b)
        c = interleaved_us({"invoke": invoke, "floor": floor}, rounds=args.rounds, repeat=3)
        per = (c["invoke"] - c["floor"]) / count
        print(f"  relvm[{b}] {CHAIN}-op chain: {c['invoke']:8.1f} per invoke, {count} "
              f"instructions, VM overhead {per:.3f} per instruction")


if __name__ == "__main__":
    import relvm.compiler  # noqa: F401

    main()
