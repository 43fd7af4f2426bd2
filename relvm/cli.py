"""The ``relvm`` command.

Exit codes: 0 success, 1 a relvm error (bad IR, bad input, bad file), 2 bad usage. Errors print
as one message; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import Callable, Sequence

import numpy as np

from .errors import RelvmError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def register(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = fn
        return fn
    return register


@command("demo")
def _demo(args: argparse.Namespace) -> int:
    """Build the bundled MLP once, then run it at several batch sizes with zero-copy outputs."""
    import relvm
    from . import examples
    from .testing.reference import evaluate

    module = relvm.parse(examples.text("mlp"))
    params = examples.params("mlp")
    start = time.perf_counter()
    exe = relvm.build(module, params=params)
    build_ms = (time.perf_counter() - start) * 1e3
    vm = relvm.VirtualMachine(exe)
    fn = exe.function("main")
    print("relvm demo: the bundled MLP (784-512-512-10, softmax), built once for every n")
    print(f"  signature: {fn.signature()}")
    print(f"  built in {build_ms:.1f} ms: {len(fn.instructions)} instructions, "
          f"{len(exe.kernels)} kernels")
    print(f"  {'n':>5}  {'output':<10} {'matches NumPy':<14} {'median ms':>10} {'allocations':>12}")
    rng = np.random.default_rng(1)
    ok = True
    for n in args.batch:
        x = rng.standard_normal((n, 784)).astype(np.float32)
        out = np.empty((n, 10), np.float32)  # the VM writes the result here: zero-copy
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            vm.invoke_with_outputs("main", [x], [out])
            times.append(time.perf_counter() - t0)
        want = evaluate(module, x, params=params)
        match = bool(np.allclose(out, want, rtol=1e-4, atol=1e-6))
        ok &= match
        print(f"  {n:>5}  {str(out.shape):<10} {'yes' if match else 'NO':<14} "
              f"{np.median(times) * 1e3:>10.3f} {vm.stats.allocations:>12}")
    return 0 if ok else 1


@command("check")
def _check(args: argparse.Namespace) -> int:
    """Parse and type-check a .relay file; print each function's inferred type."""
    import relvm

    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RelvmError(f"cannot read {args.file}: {e.strerror}") from None
    module = relvm.parse(text)
    for name, fn in module.functions.items():
        print(f"@{name}: {fn.checked_type}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="relvm", description="relvm: a bytecode VM for "
                                "dynamic-shape neural network inference")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = sub.add_parser("demo", help=_demo.__doc__, description=_demo.__doc__)
    demo.add_argument("--batch", type=int, nargs="+", default=[1, 16, 128], metavar="N",
                      help="batch sizes to run (default: 1 16 128)")
    demo.add_argument("--repeat", type=int, default=20, metavar="K",
                      help="runs per batch size for the median (default: 20)")
    check = sub.add_parser("check", help=_check.__doc__, description=_check.__doc__)
    check.add_argument("file", help="a .relay text file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except RelvmError as e:
        if args.debug:
            traceback.print_exc()
        print(f"relvm: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
