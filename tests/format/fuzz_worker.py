"""Runs mutants of one kind and says what happened to each (see test_fuzz_checksummed.py).

    python tests/format/fuzz_worker.py KIND FIRST COUNT

For mutant ``i`` it prints ``> i <base>: <mutation>`` before running it and ``< i <outcome>``
after, so the parent can name the mutation that crashed or hung this process. An exception
outside relvm's error family is an outcome starting with ``FOREIGN``.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import traceback
import warnings
import zlib

# A mutant may ask for huge arrays; with overcommit they would be granted and then touched.
# Bounding the address space makes them a MemoryError (a RelvmRuntimeError from the VM).
# Not under AddressSanitizer, whose shadow memory alone reserves terabytes of address space
# (and which makes failed huge allocations return NULL: allocator_may_return_null=1).
if "libasan" not in os.environ.get("LD_PRELOAD", ""):
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutants import KINDS, mutant, run  # noqa: E402

from relvm.runtime.vm import thread as _state  # noqa: E402
from relvm.runtime.vm.kernels import UntrustedCodeWarning  # noqa: E402

# The base programs recurse at most a dozen calls deep; a mutated loop bound (a constant
# 10 become 2**30) would take the default million frames and gigabytes to reach the limit.
_state.MAX_FRAMES = 2_000
warnings.simplefilter("ignore", UntrustedCodeWarning)


def seed(kind: str, i: int) -> int:
    return zlib.crc32(kind.encode()) * 1_000_003 + i


def main(kind: str, first: int, count: int) -> None:
    bases = KINDS[kind]()
    tmp = tempfile.mkdtemp(prefix="relvm-fuzz-")
    originals = {}
    for j, b in enumerate(bases):
        if b.weights is not None:
            originals[j] = os.path.join(tmp, f"base{j}.weights")
            with open(originals[j], "wb") as f:
                f.write(b.weights)
    mutated = os.path.join(tmp, "mutant.weights")
    out = sys.stdout
    for i in range(first, first + count):
        j = i % len(bases)
        base = bases[j]
        data, weights, what = mutant(base, seed(kind, i))
        path = originals.get(j)
        if weights is not None and weights != base.weights:
            # A new file each time, renamed into place: an executable still mapping the last
            # one keeps its pages (rewriting a mapped file in place would be a SIGBUS).
            with open(mutated + ".tmp", "wb") as f:
                f.write(weights)
            os.replace(mutated + ".tmp", mutated)
            path = mutated
        out.write(f"> {i} {base.label}: {' | '.join(what.splitlines())}\n")
        out.flush()
        try:
            # Most mutants run the genuine library under mutated metadata; every fourth, as
            # relvm does by default with a file whose signature no longer matches, kernels
            # generated here from the mutated descriptions.
            outcome = run(base, data, path, trust=i % 4 != 3)
        except Exception as e:
            where = traceback.extract_tb(e.__traceback__)[-1]
            outcome = (f"FOREIGN {type(e).__name__}: {str(e)[:300]} (at "
                       f"{os.path.basename(where.filename)}:{where.lineno})")
        out.write(f"< {i} {' | '.join(outcome.splitlines())}\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
