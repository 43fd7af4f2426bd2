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
    """Parse and type-check the bundled MLP, then run it at several batch sizes."""
    import relvm
    from . import examples
    from .testing.reference import evaluate

    module = relvm.parse(examples.text("mlp"))
    params = examples.params("mlp")
    main = module["main"]
    print("relvm demo: the bundled MLP (784-512-512-10, softmax), one program for every n")
    print(f"  signature: {main.checked_type}")
    print(f"  {'n':>5}  {'output shape':<14} {'row sums':<10} {'ms':>8}")
    rng = np.random.default_rng(1)
    for n in args.batch:
        x = rng.standard_normal((n, 784)).astype(np.float32)
        start = time.perf_counter()
        out = evaluate(module, x, params=params)
        ms = (time.perf_counter() - start) * 1e3
        ok = "1.0" if np.allclose(out.sum(axis=1), 1, atol=1e-5) else "WRONG"
        print(f"  {n:>5}  {str(out.shape):<14} {ok:<10} {ms:>8.2f}")
    return 0


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
