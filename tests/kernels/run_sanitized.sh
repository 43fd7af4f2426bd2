#!/usr/bin/env bash
# Memory-safety run: build relvm in a throwaway virtual environment with its C kernels -- and
# the fused kernels generated during the run -- compiled with AddressSanitizer + UBSan
# (RELVM_SANITIZE=address, see kernels/build.py), then run the tests that execute C code.
#
#   tests/kernels/run_sanitized.sh                  # the default selection below
#   tests/kernels/run_sanitized.sh tests/kernels -k conv   # or any pytest arguments
#
# Exits non-zero when a test fails or a sanitizer reports anything: UBSan's reports are printed
# where they happen, ASan's at the end (from every process, including subprocesses the tests
# start). Needs gcc with its ASan runtime (libasan; on Debian it comes with gcc) and the
# package registries pip uses.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"

# The default selection: every kernel test (each C source file's kernels and the generated
# fused kernels, the pool with several callers), the end-to-end programs, one VM called from
# many threads, and the differential shape fuzzer (whole models on the C kernels, fused and
# unfused, at random symbolic dims).
default_tests=(tests/kernels tests/e2e tests/passes/test_fuse_and_fold.py tests/vm/test_replay.py
               tests/vm/test_threads.py tests/vm/test_operand_checks.py
               tests/vm/test_assumed_dims.py tests/vm/test_output_aliasing.py
               tests/vm/test_zero_copy.py tests/format/test_trust.py
               tests/format/test_kernel_entries.py tests/format/test_fuzz_checksummed.py
               tests/fuzz/test_ir_mutation.py
               "tests/fuzz/test_differential.py::test_every_leg_matches_the_reference")
# The two mutation fuzzers run fewer mutants here (the full counts run unsanitized in CI).
export RELVM_FUZZ_MUTANTS="${RELVM_FUZZ_MUTANTS:-1000}" RELVM_IR_MUTANTS="${RELVM_IR_MUTANTS:-2000}"

# One compiler for the kernel library, the fused kernels and the preloaded runtime.
export CC="${CC:-gcc}"
libasan="$("$CC" -print-file-name=libasan.so)"
if [[ "$libasan" != /* || ! -e "$libasan" ]]; then
    echo "run_sanitized.sh: $CC has no AddressSanitizer runtime (libasan.so not found);" \
         "install it (Debian: libasan8, normally installed with gcc)" >&2
    exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/logs"

# Build from a copy of the package sources: setuptools reuses an up-to-date extension in an
# existing build/ folder whatever the flags, so building in the checkout could pick up a
# normal library here -- or leave a sanitized one behind for the next normal `pip install .`.
tar -C "$repo" --exclude=__pycache__ --exclude='*.so' --exclude='*.egg-info' \
    --exclude=_kernels.c -cf - setup.py pyproject.toml relvm kernels grammar |
    tar -C "$work/src" -xf -

"${PYTHON:-python3}" -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
echo "run_sanitized.sh: building relvm with RELVM_SANITIZE=address ..."
RELVM_SANITIZE=address python -m pip install --quiet "$work/src[test]"

# Python itself is not instrumented: the ASan runtime must be loaded first, by LD_PRELOAD.
# PYTHONMALLOC=malloc puts Python's own allocations under ASan too. CPython leaks by design
# (detect_leaks=0); some tests ask for impossible sizes and expect MemoryError
# (allocator_may_return_null=1). ASan writes its reports to files, from every process (a test
# may run a subprocess and keep its stderr); UBSan ignores log_path next to a preloaded ASan
# and writes to stderr, so pytest captures only sys.stderr (--capture=sys), never the fd.
export RELVM_SANITIZE=address                 # fused kernels are compiled sanitized as well
export RELVM_CACHE_DIR="$work/cache"
export PYTHONMALLOC=malloc
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$work/logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

kernels="$(cd "$work" &&
           LD_PRELOAD="$libasan" python -c 'import relvm._kernels as k; print(k.__file__)')"
if [[ "$kernels" != "$work/venv/"* ]] || ! ldd "$kernels" | grep libasan >/dev/null; then
    echo "run_sanitized.sh: $kernels is not the sanitized build" >&2
    exit 1
fi

if [[ $# -eq 0 ]]; then set -- "${default_tests[@]}"; fi
status=0
(cd "$repo" && LD_PRELOAD="$libasan" pytest -p no:cacheprovider --capture=sys -q "$@") 2>&1 |
    tee "$work/pytest.log" || status=$?

# Failed huge allocations that were expected are logged as warnings; anything else is a report.
found=0
for f in "$work"/logs/*; do
    if [[ -e "$f" ]] && grep -q -v 'WARNING: AddressSanitizer failed to allocate' "$f"; then
        cat "$f" >&2
        found=1
    fi
done
if grep -q 'runtime error:' "$work/pytest.log"; then found=1; fi   # UBSan, printed above
if [[ $found -ne 0 ]]; then
    echo "run_sanitized.sh: the sanitizers reported errors (above)" >&2
    exit 1
fi
if [[ $status -ne 0 ]]; then
    echo "run_sanitized.sh: pytest failed (exit status $status)" >&2
    exit "$status"
fi
echo "run_sanitized.sh: no sanitizer reports"
