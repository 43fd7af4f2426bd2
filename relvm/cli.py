"""The ``relvm`` command.

Exit codes: 0 success, 1 a relvm error (bad IR, bad input, bad file), 2 bad usage. Errors print
as one message; ``--debug`` adds the traceback. Commands that only run executables (``run``,
``inspect``, ``bench``) never import the compiler.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import threading
import re
import sys
import time
import traceback
from typing import Callable, Sequence

import numpy as np

from .errors import RelvmError, unknown_dims_message

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def register(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = fn
        return fn
    return register


class CliError(RelvmError):
    """A problem the command found (an unreadable file): exit code 1."""


class UsageError(CliError):
    """A malformed option value (``--dims n``): exit code 2, like argparse's own errors."""


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _Slow:
    """A progress line on stderr for a step still running after ``after`` seconds: on a
    terminal an elapsed-time counter redrawn in place, else one line, then ``done in``."""

    def __init__(self, message: str, after: float = 2.0):
        self.message, self.after = message, after
        self.done = threading.Event()
        self.shown = False

    def _watch(self) -> None:
        tty = sys.stderr.isatty()
        waited = self.after
        if self.done.wait(self.after):
            return
        self.shown = True
        while True:
            if tty:
                print(f"\rrelvm: {self.message} ... {waited:.0f} s", end="", file=sys.stderr,
                      flush=True)
            elif waited == self.after:
                print(f"relvm: {self.message} ...", file=sys.stderr, flush=True)
            if self.done.wait(1.0):
                return
            waited += 1.0

    def __enter__(self) -> "_Slow":
        self.start = time.perf_counter()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        if self.shown:
            end = "\r" if sys.stderr.isatty() else ""
            print(f"{end}relvm: {self.message}: done in {time.perf_counter() - self.start:.1f} s",
                  file=sys.stderr, flush=True)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"cannot read {path}: not UTF-8 text") from None


def _load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise CliError(f"cannot read weights {path}: {e}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise CliError(f"cannot read weights {path}: it holds one array (.npy); weights are a "
                       ".npz of arrays by parameter name (np.savez(path, w=..., b=...))")
    try:
        with data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise CliError(f"cannot read weights {path}: {e}") from None


def _writable(path: str) -> str:
    """``path``, after checking now, before any work, that a file can be written there."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CliError(f"cannot write {path}: it is a directory")
    if not os.path.isdir(folder):
        raise CliError(f"cannot write {path}: no such directory {os.path.dirname(path) or '.'}")
    if not os.access(folder, os.W_OK):
        raise CliError(f"cannot write {path}: the directory is not writable")
    return path


def _load_npy(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise CliError(f"cannot read {path}: {e}") from None


def _pairs(items: Sequence[str] | None, what: str) -> dict[str, str]:
    """``["n=8", "m=2"]`` -> ``{"n": "8", "m": "2"}``; a malformed item is a CliError."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            name, sep, value = part.partition("=")
            if not part.strip():
                raise UsageError(f"{what}: empty item in {item!r}")
            if not sep or not name.strip() or not value.strip():
                raise UsageError(f"{what}: expected NAME=VALUE, got {part!r}")
            if name.strip() in out:
                raise UsageError(f"{what}: {name.strip()} is given twice")
            out[name.strip()] = value.strip()
    return out


def _int_pairs(items: Sequence[str] | None, what: str) -> dict[str, int]:
    out = {}
    for k, v in _pairs(items, what).items():
        if not re.fullmatch(r"\d+", v):
            raise UsageError(f"{what}: {k}={v} is not a non-negative integer")
        out[k] = int(v)
    return out


# --- dims for random inputs --------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def eval_dim(text: str, dims: dict[str, int]) -> int:
    """The value of a dim's text (``n``, ``n*2 + 1``, ``(n + 3)/4``) given values for names.

    A tiny recursive-descent evaluator: nothing is ever passed to ``eval``.
    """
    tokens = [(m.group(1), m.group(2), m.group(3)) for m in _TOKEN.finditer(text)
              if any(m.groups())]
    pos = 0

    def peek() -> str | None:
        return tokens[pos][2] if pos < len(tokens) else None

    def atom() -> int:
        nonlocal pos
        if pos >= len(tokens):
            raise CliError(f"cannot evaluate dim {text!r}")
        num, name, sym = tokens[pos]
        pos += 1
        if num is not None:
            return int(num)
        if name is not None:
            if name not in dims:
                raise CliError(f"give a value for dim {name!r} with --dims {name}=VALUE")
            return dims[name]
        if sym == "(":
            v = expr()
            if peek() != ")":
                raise CliError(f"cannot evaluate dim {text!r}")
            pos += 1
            return v
        if sym == "-":
            return -atom()
        raise CliError(f"dim {text!r} is only known at run time; pass that input with --input")

    def term() -> int:
        nonlocal pos
        v = atom()
        while peek() in ("*", "/", "%"):
            op = peek()
            pos += 1
            r = atom()
            v = v * r if op == "*" else v // r if op == "/" else v % r
        return v

    def expr() -> int:
        nonlocal pos
        v = term()
        while peek() in ("+", "-"):
            op = peek()
            pos += 1
            r = term()
            v = v + r if op == "+" else v - r
        return v

    value = expr()
    if pos != len(tokens):
        raise CliError(f"cannot evaluate dim {text!r}")
    return value


def _random_input(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def dim_names(fn) -> list[str]:
    """The named dims of a function's parameters (``n`` of ``Tensor[(n*2, 4), float32]``)."""
    names: list[str] = []
    for p in fn.params:
        for t in p.tensors:
            for d in t.shape:
                for m in _TOKEN.finditer(str(d)):
                    if m.group(2) and m.group(2) not in names:
                        names.append(m.group(2))
    return names


def check_dim_names(fn, dims: dict[str, int], option: str = "--dims") -> None:
    """Refuse values for dims the function does not have, with a "did you mean"."""
    known = dim_names(fn)
    for name in dims:
        if name not in known:
            raise CliError(unknown_dims_message(option, fn.name, name, known))


def _format_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def available_memory() -> int | None:
    """Bytes this machine can still give a process (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _tensor_bytes(shape: Sequence, dtype: str, dims: dict[str, int]) -> int | None:
    size = np.dtype(dtype).itemsize
    for d in shape:
        try:
            size *= d if isinstance(d, int) else eval_dim(str(d), dims)
        except CliError:
            return None  # a dim only known at run time: left out of the estimate
    return size


def check_memory(fn, shapes: list[tuple[tuple, str]], dims: dict[str, int]) -> None:
    """Refuse, before allocating anything, a run whose inputs and outputs alone (the least it
    needs) do not fit in the memory this machine has available."""
    need = sum(int(np.prod(shape, dtype=np.float64)) * np.dtype(dt).itemsize
               for shape, dt in shapes)
    for o in fn.outputs:
        shape = _type_shape(o.type_text)
        size = None if shape is None else _tensor_bytes(shape, o.dtype, dims)
        need += size or 0
    have = available_memory()
    if have is not None and need > have:
        setting = ", ".join(f"{k}={v}" for k, v in dims.items())
        raise CliError(f"running @{fn.name}{' with ' + setting if setting else ''} needs at "
                       f"least {_format_bytes(need)} for its inputs and outputs; this machine "
                       f"has {_format_bytes(have)} available")


def _type_shape(type_text: str) -> list[str] | None:
    """The dims' text of ``Tensor[(n, 10), float32]``; None for other types."""
    if not type_text.startswith("Tensor[(") or "), " not in type_text:
        return None
    inner = type_text[len("Tensor[("):type_text.rindex("), ")]
    return [d.strip() for d in inner.split(",") if d.strip()]


def _inputs_for(exe, func: str, given: dict[str, str], dims: dict[str, int],
                seed: int = 0, random: bool = True) -> list:
    """The inputs of ``@func``: from .npy files by name (the IR's or the model's own), and,
    with ``random``, random arrays for the others shaped by ``dims``."""
    fn = exe.function(func)
    names = {p.name: i for i, p in enumerate(fn.params)}
    names.update({fn.input_name(i): i for i in range(len(fn.params))})
    unknown = [k for k in given if k not in names]
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(names), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise CliError(f"@{func} has no input {unknown[0]!r} (inputs: "
                       f"{', '.join(_input_label(fn, i) for i in range(len(fn.params)))}){hint}")
    files = {names[k]: path for k, path in given.items()}
    check_dim_names(fn, dims)
    missing = [i for i in range(len(fn.params)) if i not in files]
    if missing and not random:
        label = _input_label(fn, missing[0])
        raise CliError(f"input {label} is not given: pass --input {fn.input_name(missing[0])}"
                       f"=FILE.npy for each input, or --random-inputs (with --dims) to run on "
                       f"random data")
    shapes: list[tuple[tuple, str]] = []
    for i in missing:
        p = fn.params[i]
        if p.is_tuple or p.is_list or not p.tensors:
            raise CliError(f"input %{p.name} ({p.type_text}) must be given with --input")
        t = p.tensors[0]
        shapes.append((tuple(d if isinstance(d, int) else eval_dim(d, dims) for d in t.shape),
                       t.dtype))
    check_memory(fn, shapes, dims)
    rng = np.random.default_rng(seed)
    values, made = [], iter(shapes)
    for i in range(len(fn.params)):
        if i in files:
            values.append(_load_npy(files[i]))
        else:
            shape, dtype = next(made)
            values.append(_random_input(shape, dtype, rng))
    return values


def _input_label(fn, i: int) -> str:
    own = fn.input_name(i)
    return f"%{fn.params[i].name}" + (f" ({own!r})" if own != fn.params[i].name else "")


def _load_exe(path: str, trust: bool = False, fallback: bool = False):
    import relvm

    if not os.path.exists(path):
        raise CliError(f"cannot read {path}: no such file")
    return relvm.load(path, trust_native_code=trust, external_fallback=fallback)


# --- commands ---------------------------------------------------------------------------------

@command("demo")
def _demo(args: argparse.Namespace) -> int:
    """Build the bundled MLP once, save and reload it, run it at several batch sizes."""
    import tempfile

    import relvm
    from . import examples
    from .testing.reference import evaluate

    module = relvm.parse(examples.text("mlp"))
    params = examples.params("mlp")
    start = time.perf_counter()
    exe = relvm.build(module, params=params, backend=args.backend)
    build_ms = (time.perf_counter() - start) * 1e3
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.rvm")
        exe.save(path)
        size = os.path.getsize(path)
        start = time.perf_counter()
        exe = relvm.load(path)
        load_ms = (time.perf_counter() - start) * 1e3
        vm = relvm.VirtualMachine(exe)
        fn = exe.function("main")
        print("relvm demo: the bundled MLP (784-512-512-10, softmax), built once for every n")
        print(f"  signature: {fn.signature()}")
        print(f"  built in {build_ms:.1f} ms ({len(fn.instructions)} instructions, "
              f"{len(exe.kernels)} kernels, backend {exe.backend}); saved {size / 1e6:.1f} MB, "
              f"loaded in {load_ms:.1f} ms")
        print(f"  {'n':>5}  {'output':<10} {'matches NumPy':<14} {'median ms':>10} "
              f"{'allocations':>12}")
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
            match = bool(np.allclose(out, evaluate(module, x, params=params), rtol=1e-4,
                                     atol=1e-6))
            ok &= match
            print(f"  {n:>5}  {str(out.shape):<10} {'yes' if match else 'NO':<14} "
                  f"{np.median(times) * 1e3:>10.3f} {vm.stats.allocations:>12}")
        del vm, exe  # release the memory map before the folder goes
    return 0 if ok else 1


@command("check")
def _check(args: argparse.Namespace) -> int:
    """Parse and type-check a .relay file; print each function's inferred type."""
    import relvm

    module = relvm.parse(_read_text(args.file), source_name=args.file)
    for name, fn in module.functions.items():
        print(f"@{name}: {fn.checked_type}")
    return 0


@command("compile")
def _compile(args: argparse.Namespace) -> int:
    """Compile a .relay file (and its weights) into one executable file."""
    import relvm

    bounds = _int_pairs(args.upper_bound, "--upper-bound")
    text = _read_text(args.file)
    _writable(args.output)
    params, constants = _split_weights(_load_npz(args.params)) if args.params else (None, None)
    start = time.perf_counter()
    with _Slow(f"compiling {args.file}"):
        module = relvm.parse(text, constants=constants, source_name=args.file)
        exe = relvm.build(module, params=params, upper_bounds=bounds, backend=args.backend,
                          fuse=not args.no_fuse, targets=args.target or (),
                          external_fallback=args.external_fallback)
    try:
        exe.save(args.output)
    except OSError as e:
        raise CliError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1e6:.2f} MB; "
          f"{len(exe.functions)} functions, {len(exe.kernels)} kernels) in "
          f"{time.perf_counter() - start:.2f} s")
    return 0


META_PREFIX = "__meta_"


@command("import")
def _import(args: argparse.Namespace) -> int:
    """Convert an ONNX model into relvm text IR plus a weights file for `relvm compile`."""
    try:
        from .frontend.onnx import from_onnx
    except ImportError:
        raise CliError('relvm import needs the onnx package: pip install "relvm[onnx]"') from None
    from .ir.printer import module_constants, print_module

    if not os.path.exists(args.model):
        raise CliError(f"cannot read {args.model}: no such file")
    weights = args.params_out or os.path.splitext(args.output)[0] + ".npz"
    _writable(args.output)
    _writable(weights)
    with _Slow(f"importing {args.model}"):
        module, params = from_onnx(args.model)
        text = print_module(module)
    constants = {f"{META_PREFIX}{k}": c for k, c in enumerate(module_constants(module))
                 if c is not None}
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        with open(weights, "wb") as f:  # a file object: np.savez never renames it
            np.savez(f, **params, **constants)
    except OSError as e:
        raise CliError(f"cannot write {e.filename}: {e.strerror}") from None
    main = module["main"]
    print(f"wrote {args.output} (@main{str(main.checked_type)[3:]}) and {weights} "
          f"({len(params)} weights)")
    return 0


@command("serve")
def _serve(args: argparse.Namespace) -> int:
    """Serve executables over HTTP (Open Inference Protocol, KServe v2) with dynamic batching."""
    from .serving import server

    if args.max_batch < 1 or args.workers < 1 or args.max_queue < 1 or args.max_delay_ms < 0:
        raise UsageError("--max-batch, --workers and --max-queue must be at least 1, "
                         "--max-delay-ms at least 0")
    if args.threads is not None:
        from .runtime.threads import set_num_threads
        set_num_threads(args.threads)
    models = server.load_models(
        args.models, trust_native_code=args.trust_native_code,
        external_fallback=args.external_fallback, batching=not args.no_batching,
        max_batch=args.max_batch, max_delay=args.max_delay_ms / 1e3,
        max_queue=args.max_queue, workers=args.workers)
    for m in models:
        how = (f"batching along {m.signature.batch_dim} up to {m.max_batch} rows"
               if m.max_batch > 1 else "one request per invoke")
        print(f"relvm serve: {m.name} ({how})", file=sys.stderr)
    print(f"relvm serve: http://{args.host}:{args.port}/v2 (Ctrl-C stops: in-flight requests "
          f"finish first)", file=sys.stderr)
    server.serve(models, args.host, args.port, max_body_bytes=args.max_body_mb << 20,
                 log_level=args.log_level)
    return 0


def _split_weights(data: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """A weights file's named params, and its meta constants by index (``__meta_<k>``)."""
    params = {k: v for k, v in data.items() if not k.startswith(META_PREFIX)}
    constants = {int(k[len(META_PREFIX):]): v for k, v in data.items()
                 if k.startswith(META_PREFIX) and k[len(META_PREFIX):].isdigit()}
    return params, constants


@command("run")
def _run(args: argparse.Namespace) -> int:
    """Run a function of an executable on inputs from .npy files (or random ones, when asked)."""
    import relvm
    from .runtime.vm.thread import result_leaves

    given, dims = _pairs(args.input, "--input"), _int_pairs(args.dims, "--dims")
    exe = _load_exe(args.model, args.trust_native_code, args.external_fallback)
    fn = exe.function(args.func)
    targets = _output_targets(args.output, fn)
    inputs = _inputs_for(exe, args.func, given, dims, args.seed, random=args.random_inputs)
    vm = relvm.VirtualMachine(exe)
    start = time.perf_counter()
    try:
        result = vm.invoke(args.func, *inputs)
    except MemoryError:
        raise CliError(f"out of memory running @{args.func}") from None
    ms = (time.perf_counter() - start) * 1e3
    leaves = [np.asarray(r) for r in result_leaves(result)]
    for i, r in enumerate(leaves):
        preview = np.array2string(r.reshape(-1)[:6], precision=4, separator=", ")
        print(f"output {i} ({fn.output_name(i)}): {r.dtype}{list(r.shape)} "
              f"{preview}{' ...' if r.size > 6 else ''}")
    for path, arrays in targets:
        _save_arrays(path, {k: leaves[i] for k, i in arrays.items()})
        print(f"wrote {path}" + (f" ({', '.join(arrays)})" if path.endswith(".npz") else ""))
    print(f"ran @{args.func} in {ms:.3f} ms")
    return 0


def _output_targets(option: str | None, fn) -> list[tuple[str, dict[str, int]]]:
    """Where ``--output`` puts each result: ``[(path, {name: result index})]``, checked (and
    the folders checked writable) before anything runs."""
    if not option:
        return []
    count = len(fn.outputs)
    paths = [p.strip() for p in option.split(",")]
    if any(not p for p in paths):
        raise UsageError(f"--output: empty item in {option!r}")
    if len(paths) == 1 and paths[0].endswith(".npz"):
        targets = [(paths[0], {fn.output_name(i): i for i in range(count)})]
    elif len(paths) == count and all(p.endswith(".npy") for p in paths):
        targets = [(p, {fn.output_name(i): i}) for i, p in enumerate(paths)]
    elif count == 1:
        raise UsageError(f"--output: @{fn.name} has one result: give one FILE.npy (or .npz)")
    else:
        raise UsageError(f"--output: @{fn.name} has {count} results: give {count} .npy files "
                         f"separated by commas (--output a.npy,b.npy,...) or one FILE.npz")
    for path, _ in targets:
        _writable(path)
    return targets


def _save_arrays(path: str, arrays: dict[str, np.ndarray]) -> None:
    try:
        with open(path, "wb") as f:  # a file object: NumPy never adds a suffix to the name
            if path.endswith(".npz"):
                np.savez(f, **arrays)
            else:
                np.save(f, next(iter(arrays.values())))
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None


@command("inspect")
def _inspect(args: argparse.Namespace) -> int:
    """Show an executable: signatures, kernels, constants, sizes, and the disassembly."""
    from .runtime.vm.kernels import planned_path

    exe = _load_exe(args.model, args.trust_native_code, args.external_fallback)
    print(f"{args.model}: {os.path.getsize(args.model) / 1e6:.2f} MB, backend {exe.backend}")
    signed = f"signed by key {exe.native.signer}" if exe.native.signer else "not signed"
    print(f"native code: {signed}; kernels: {planned_path(exe)}")
    if exe.upper_bounds:
        print("upper bounds: " + ", ".join(f"{k} <= {v}" for k, v in exe.upper_bounds.items()))
    print("functions:")
    for fn in exe.functions:
        print(f"  {fn.signature()}")
        if fn.input_names or fn.output_names:  # the model's own names (ONNX's input.1)
            ins = ", ".join(fn.input_name(i) for i in range(len(fn.params)))
            outs = ", ".join(fn.output_name(i) for i in range(len(fn.outputs)))
            print(f"    named by the model: inputs {ins}; outputs {outs}")
    print(f"kernels ({len(exe.kernels)}):")
    for i, k in enumerate(exe.kernels):
        print(f"  #{i} {k.name} ({', '.join(k.inputs)} -> {', '.join(k.outputs)})")
    if exe.externals:
        print(f"external regions ({len(exe.externals)}):")
        for symbol, artifact in exe.externals.items():
            entry = next((k for k in exe.kernels if k.op == "external"
                          and k.attrs["symbol"] == symbol), None)
            ops = [s["op"] for s in entry.attrs["region"]["steps"]] if entry else []
            print(f"  {symbol}: {artifact.compiler}, {len(artifact.data)} bytes, "
                  f"{len(ops)} ops ({', '.join(sorted(set(ops)))})")
    nbytes = sum(int(np.asarray(c).nbytes) for c in exe.constants)
    print(f"constants: {len(exe.constants)}, {nbytes / 1e6:.2f} MB")
    if not args.no_bytecode:
        print()
        print(exe.bytecode)
    return 0


@command("trust")
def _trust(args: argparse.Namespace) -> int:
    """Manage the keys whose executables may run their native code: add KEYFILE, list, remove ID."""
    from .runtime.file import trust

    if args.action == "add":
        if not args.key:
            raise UsageError("trust add: give the public key file (KEYFILE)")
        kid = trust.trust_add(args.key)
        print(f"trusting key {kid}: executables it signs run their own kernels")
    elif args.action == "remove":
        if not args.key:
            raise UsageError("trust remove: give the key's id (see relvm trust list)")
        if not trust.trust_remove(args.key):
            raise CliError(f"key {args.key} is not in the trusted list")
        print(f"no longer trusting key {args.key}")
    else:
        keys = trust.trusted_keys()
        own = trust.own_key_id()
        if not keys:
            print("no trusted keys (your own key is made when you first save a model)")
        for kid in sorted(keys):
            print(f"{kid}{'  (your own key)' if kid == own else ''}")
    return 0


@command("cache")
def _cache(args: argparse.Namespace) -> int:
    """The cache of compiled generated kernels: info (where, how much) or clear."""
    from .backends import toolchain

    if args.action == "clear":
        count, size = toolchain.clear_cache()
        print(f"removed {count} cached kernel libraries ({_format_bytes(size)}) from "
              f"{toolchain.cache_dir()}")
        return 0
    entries = toolchain.cache_entries()
    total = sum(size for _, size, _ in entries)
    print(f"kernel cache: {toolchain.cache_dir()}")
    print(f"  {len(entries)} libraries, {_format_bytes(total)} of at most "
          f"{_format_bytes(toolchain.cache_limit())} (RELVM_CACHE_MAX_MB; least recently used "
          "go first)")
    return 0


@command("key")
def _key(args: argparse.Namespace) -> int:
    """Print your public key (made on first use): give it to people who run your models."""
    from .runtime.file import trust

    print(trust.public_key_line(trust.signer().public, args.comment or ""))
    return 0


@command("bench")
def _bench(args: argparse.Namespace) -> int:
    """Time a function at several values of its dims: median and p90 per setting."""
    import relvm

    settings = _bench_settings(args.dims)  # option values first: a usage error exits 2
    exe = _load_exe(args.model, args.trust_native_code, args.external_fallback)
    check_dim_names(exe.function(args.func), settings[0])
    vm = relvm.VirtualMachine(exe)
    print(f"{'dims':<24} {'median ms':>10} {'p90 ms':>10} {'runs':>6}")
    for dims in settings:
        label = ", ".join(f"{k}={v}" for k, v in dims.items()) or "(static)"
        _progress(f"relvm: timing {label} ...")
        inputs = _inputs_for(exe, args.func, {}, dims, args.seed, random=True)
        vm.set_input(args.func, *inputs)
        for _ in range(args.warmup):
            vm.invoke(args.func)
        times = []
        deadline = time.perf_counter() + args.seconds
        while len(times) < args.min_runs or time.perf_counter() < deadline:
            t0 = time.perf_counter()
            vm.invoke(args.func)
            times.append(time.perf_counter() - t0)
            if len(times) >= args.max_runs:
                break
        arr = np.array(times) * 1e3
        print(f"{label:<24} {np.median(arr):>10.3f} {np.percentile(arr, 90):>10.3f} "
              f"{len(arr):>6}")
    return 0


def _bench_settings(items: Sequence[str] | None) -> list[dict[str, int]]:
    """``["n=1,16,128"]`` -> ``[{"n": 1}, {"n": 16}, {"n": 128}]`` (several names: zipped)."""
    values: dict[str, list[int]] = {}
    for item in items or []:
        name, sep, rest = item.partition("=")
        parts = [v.strip() for v in rest.split(",")]
        if sep and len(parts) > 1 and not all(parts):
            raise UsageError(f"--dims: empty item in {item!r}")
        if not sep or not name.strip() or not all(p.isdigit() for p in parts):
            raise UsageError(f"--dims: expected NAME=V1,V2,..., got {item!r}")
        values[name.strip()] = [int(p) for p in parts]
    if not values:
        return [{}]
    count = max(len(v) for v in values.values())
    if any(len(v) not in (1, count) for v in values.values()):
        raise UsageError("--dims: give every name the same number of values (or one)")
    return [{k: v[i] if len(v) > 1 else v[0] for k, v in values.items()} for i in range(count)]


# --- argument parsing ------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="relvm", description="relvm: a bytecode VM for "
                                "dynamic-shape neural network inference")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log each build stage and its time (logging, to stderr)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, fn) -> argparse.ArgumentParser:
        doc = fn.__doc__.strip()
        return sub.add_parser(name, help=doc, description=doc)

    demo = add("demo", _demo)
    demo.add_argument("--batch", type=int, nargs="+", default=[1, 16, 128], metavar="N",
                      help="batch sizes to run (default: 1 16 128)")
    demo.add_argument("--repeat", type=int, default=20, metavar="K",
                      help="runs per batch size for the median (default: 20)")
    demo.add_argument("--backend", default="c", help="kernel backend: c or numpy (default: c)")

    check = add("check", _check)
    check.add_argument("file", help="a .relay text file")

    comp = add("compile", _compile)
    comp.add_argument("file", help="a .relay text file")
    comp.add_argument("-o", "--output", required=True, help="the executable file to write")
    comp.add_argument("--params", help="weights for @main's named parameters (.npz; from "
                      "`relvm import` also its constants)")
    comp.add_argument("--upper-bound", action="append", metavar="NAME=N",
                      help="largest value of a named dim (plans one arena); repeatable")
    comp.add_argument("--backend", default="c", help="kernel backend: c or numpy (default: c)")
    comp.add_argument("--no-fuse", action="store_true", help="one kernel per op")
    comp.add_argument("--target", action="append", metavar="BACKEND",
                      help="an external backend to give the regions it takes, e.g. dnnl, or "
                           "dnnl_bf16 (bfloat16 convs) (repeat for several, highest priority "
                           "first)")
    fallback_help = ("run regions of an external backend that cannot run here on relvm's own "
                     "kernels instead of refusing")
    comp.add_argument("--external-fallback", action="store_true", help=fallback_help)

    imp = add("import", _import)
    imp.add_argument("model", help="an ONNX model (.onnx)")
    imp.add_argument("-o", "--output", required=True, help="the .relay text file to write")
    imp.add_argument("--params-out", metavar="FILE.npz",
                     help="where to write the weights (default: beside the output, .npz)")

    run = add("run", _run)
    run.add_argument("model", help="an executable file (.rvm)")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                     help="an input from a .npy file; repeatable")
    run.add_argument("--random-inputs", action="store_true",
                     help="make random data for the inputs not given with --input (their "
                          "dims from --dims); without it every input must be given")
    run.add_argument("--dims", action="append", metavar="NAME=N",
                     help="values of named dims for random inputs, e.g. n=8")
    run.add_argument("--output", metavar="FILE",
                     help="write the result to FILE.npy; several results: one .npy each, "
                          "separated by commas, or one FILE.npz (arrays by output name)")
    run.add_argument("--func", default="main", help="the function to run (default: main)")
    run.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    run.add_argument("--trust-native-code", action="store_true",
                     help="run the native code the file carries even if no trusted key signed it")
    run.add_argument("--external-fallback", action="store_true", help=fallback_help)

    insp = add("inspect", _inspect)
    insp.add_argument("model", help="an executable file (.rvm)")
    insp.add_argument("--trust-native-code", action="store_true",
                      help="describe it as if its native code were trusted (nothing runs)")
    insp.add_argument("--no-bytecode", action="store_true", help="omit the disassembly")
    insp.add_argument("--external-fallback", action="store_true", help=fallback_help)

    bench = add("bench", _bench)
    bench.add_argument("model", help="an executable file (.rvm)")
    bench.add_argument("--dims", action="append", metavar="NAME=V1,V2",
                       help="values of named dims to time, e.g. n=1,16,128")
    bench.add_argument("--func", default="main", help="the function to time (default: main)")
    bench.add_argument("--warmup", type=int, default=10, help="untimed runs first")
    bench.add_argument("--seconds", type=float, default=1.0, help="time per setting")
    bench.add_argument("--min-runs", type=int, default=10, help="at least this many runs")
    bench.add_argument("--max-runs", type=int, default=100_000, help="at most this many runs")
    bench.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    bench.add_argument("--trust-native-code", action="store_true",
                       help="run the native code the file carries even if no trusted key "
                            "signed it")
    bench.add_argument("--external-fallback", action="store_true", help=fallback_help)

    srv = add("serve", _serve)
    srv.add_argument("models", nargs="+", metavar="MODEL.rvm",
                     help="executables to serve, each under its file's name (or NAME=PATH)")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on "
                     "(default: 127.0.0.1)")
    srv.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    srv.add_argument("--max-batch", type=int, default=64, metavar="ROWS",
                     help="most rows in one invoke (default: 64)")
    srv.add_argument("--max-delay-ms", type=float, default=0.0, metavar="MS",
                     help="how long a batch may wait for more requests (default: 0, none: "
                          "requests arriving while a batch runs form the next)")
    srv.add_argument("--max-queue", type=int, default=1024, metavar="N",
                     help="most requests waiting per model; beyond it: HTTP 503 (default: 1024)")
    srv.add_argument("--no-batching", action="store_true", help="one request per invoke")
    srv.add_argument("--workers", type=int, default=1,
                     help="threads running invokes per model (default: 1)")
    srv.add_argument("--threads", type=int, help="relvm's threads per invoke (default: all "
                     "cores)")
    srv.add_argument("--max-body-mb", type=int, default=64, metavar="MB",
                     help="largest request body (default: 64)")
    srv.add_argument("--log-level", default="warning",
                     choices=["critical", "error", "warning", "info", "debug"],
                     help="uvicorn's log level (default: warning)")
    srv.add_argument("--trust-native-code", action="store_true",
                     help="run the native code the files carry even if no trusted key signed "
                          "them")
    srv.add_argument("--external-fallback", action="store_true", help=fallback_help)

    tr = add("trust", _trust)
    tr.add_argument("action", choices=["add", "list", "remove"])
    tr.add_argument("key", nargs="?", help="add: a public key file; remove: a key id")

    cache = add("cache", _cache)
    cache.add_argument("action", choices=["info", "clear"])

    key = add("key", _key)
    key.add_argument("--comment", help="a note written after the key (e.g. your name)")
    return p


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"relvm: warning: {str(message).removeprefix('relvm: ')}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    import warnings

    parser = _parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning  # one line, not the source line that warned
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="relvm: %(name)s: %(message)s",
                            stream=sys.stderr)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`relvm inspect m.rvm | head`): stop quietly. Python flushes
        # stdout again at exit, so point it at devnull first (Python's documented recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"relvm: usage error: {e}", file=sys.stderr)
        return 2
    except RelvmError as e:
        if args.debug:
            traceback.print_exc()
        print(f"relvm: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
