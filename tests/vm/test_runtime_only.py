"""The runtime never imports the front end or the compiler: running needs neither lark nor them.

The executable is built first; then lark, the parser, the passes and the compiler are removed
from the process and any import of them fails. A fresh VM must still load kernels, run, and
give the same result. tests/format/ checks the same across processes: a saved file loaded where
lark cannot be imported and no C compiler is on PATH.
"""

import textwrap

from isolation import BLOCK_FRONT_END, run_python

#: The end of each script: no blocked module was imported after all.
NOTHING_LEAKED = textwrap.dedent("""
    leaked = [m for m in sys.modules if m.startswith(BLOCKED)]
    assert not leaked, leaked
    print("runtime-only ok")
""")

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import relvm

    text = '''def @main(%x: Tensor[(n, 4), float32], %w: Tensor[(3, 4), float32]) {
      %0 = nn.dense(%x, %w);
      (nn.softmax(%0, axis=1), argwhere(greater(%0, 0f)))
    }'''
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    exe = relvm.build(relvm.parse(text), params={"w": w})
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
    expected = relvm.VirtualMachine(exe).invoke("main", x)

""") + BLOCK_FRONT_END + textwrap.dedent("""
    vm = relvm.VirtualMachine(exe)
    got = vm.invoke("main", x)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
""") + NOTHING_LEAKED


def test_runtime_runs_without_lark_or_the_compiler() -> None:
    proc = run_python(SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert "runtime-only ok" in proc.stdout


DNNL_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import relvm
    from relvm.backends import dnnl

    if dnnl.available() is not None:
        print("no dnnl:", dnnl.available())
        raise SystemExit(0)
    text = '''def @main(%x: Tensor[(n, 8, 10, 10), float32], %w: Tensor[(16, 8, 3, 3), float32]) {
      nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
    }'''
    w = np.random.default_rng(0).standard_normal((16, 8, 3, 3), dtype=np.float32)
    # Every region oneDNN's patterns match (its cost model leaves a lone small conv to relvm).
    b = dnnl.BACKEND
    every = type(b)("dnnl", b.patterns, b.compile, b.runtime, b.available, lambda r: True)
    exe = relvm.build(relvm.parse(text), params={"w": w}, targets=[every])
    assert list(exe.externals) == ["dnnl_0"], exe.externals
    x = np.random.default_rng(1).standard_normal((3, 8, 10, 10), dtype=np.float32)
    expected = relvm.VirtualMachine(relvm.build(relvm.parse(text), params={"w": w})).invoke(
        "main", x)
    data = exe.save_bytes()
""") + BLOCK_FRONT_END + textwrap.dedent("""
    vm = relvm.VirtualMachine(relvm.load_bytes(data))
    np.testing.assert_allclose(vm.invoke("main", x), expected, rtol=1e-5, atol=1e-4)
""") + NOTHING_LEAKED.replace("runtime-only ok", "runtime-only dnnl ok")


def test_an_executable_with_dnnl_regions_runs_without_the_compiler() -> None:
    import os

    proc = run_python(DNNL_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    if "no dnnl:" in proc.stdout:
        assert os.environ.get("RELVM_REQUIRE_DNNL") != "1", proc.stdout
        import pytest

        pytest.skip(proc.stdout.strip())
    assert "runtime-only dnnl ok" in proc.stdout
