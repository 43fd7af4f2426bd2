"""VM overhead: a tiny model through invoke_with_outputs, and per-instruction cost.

Run: ``python benchmarks/bench_vm_overhead.py`` (ONNX Runtime, if installed, is measured in the
same run: ``pip install ".[bench]"``). Prints medians and relvm/ORT ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_us, optional  # noqa: E402

import relvm  # noqa: E402

CHAIN = 200


def relvm_add_one(backend: str) -> float:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(1, 4), float32]) { add(%x, 1f) }"),
                      backend=backend)
    vm = relvm.VirtualMachine(exe)
    x = np.zeros((1, 4), np.float32)
    out = np.empty((1, 4), np.float32)
    t = median_us(lambda: vm.invoke_with_outputs("main", [x], [out]))
    assert np.array_equal(out, x + 1)
    return t


def relvm_chain(backend: str) -> tuple[float, float, int]:
    """(us per invoke, us of VM overhead per instruction, instructions) for a 200-op chain."""
    body = "".join(f"  %{i + 1} = add(%{i}, 1f);\n" for i in range(CHAIN))
    text = "def @main(%0: Tensor[(1, 4), float32]) {\n" + body + f"  %{CHAIN}\n}}"
    # Unfused, so there is one instruction per op: this measures the VM, not fusion.
    exe = relvm.build(relvm.parse(text), backend=backend, fuse=False)
    vm = relvm.VirtualMachine(exe)
    x = np.zeros((1, 4), np.float32)
    out = np.empty((1, 4), np.float32)
    total = median_us(lambda: vm.invoke_with_outputs("main", [x], [out]), repeat=9)
    assert np.array_equal(out, x + CHAIN)
    # The kernels alone, called directly with the same arrays, as a floor.
    kernel = vm.kernel(0)
    one = np.ones((), np.float32)
    tmp = np.empty((1, 4), np.float32)

    def kernels_only():
        for _ in range(CHAIN):
            kernel(x, one, tmp)
    floor = median_us(kernels_only, repeat=9)
    count = len(exe.function("main").instructions)
    return total, (total - floor) / count, count


def ort_add_one() -> tuple[float, float] | None:
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
    run = median_us(lambda: sess.run(None, {"x": x}))
    out = np.empty((1, 4), np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, [1, 4], out.ctypes.data)
    bound = median_us(lambda: sess.run_with_iobinding(binding))
    assert np.array_equal(out, x + 1)
    return run, bound


def main() -> None:
    backends = [b for b in ("c", "numpy") if b in relvm.compiler.BACKENDS]
    print("relvm VM overhead (medians, microseconds)")
    ort = ort_add_one()
    if ort:
        print(f"  ORT  x+1 [1,4] sess.run                 {ort[0]:8.2f}")
        print(f"  ORT  x+1 [1,4] run_with_iobinding       {ort[1]:8.2f}")
    for b in backends:
        t = relvm_add_one(b)
        ratio = f"   relvm/ORT sess.run = {t / ort[0]:.2f}, /IOBinding = {t / ort[1]:.2f}" \
            if ort else ""
        print(f"  relvm[{b}] x+1 invoke_with_outputs    {t:8.2f}{ratio}")
    for b in backends:
        total, per, count = relvm_chain(b)
        print(f"  relvm[{b}] {CHAIN}-op chain: {total:8.1f} per invoke, {count} instructions, "
              f"VM overhead {per:.3f} per instruction")


if __name__ == "__main__":
    import relvm.compiler  # noqa: F401

    main()
