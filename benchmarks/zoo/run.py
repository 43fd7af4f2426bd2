"""relvm vs ONNX Runtime and OpenVINO on the zoo of real networks: 3 shapes, 1 and 2 threads.

Run: ``python benchmarks/zoo/run.py [--models a,b] [--threads 1,2] [--rounds N] [--shapes 0,2]
[--json out.json] [--no-openvino] [--no-static] [--check-only] [--traffic [--traffic-calls N]]``
(``pip install ".[zoo]"``; models missing from the cache are exported first, see ``export.py``). Each model runs in a
process of its own (a crash or a hang costs that model only): relvm imports and builds it once
with every dim symbolic (timed), ONNX Runtime makes a session per thread count (timed), OpenVINO
compiles it per thread count (timed). At every shape relvm's outputs are checked against ORT's
(rtol 1e-4, atol 1e-4 x max|ORT output|), then the engines are timed in interleaved rounds. One
shape per model is also run on a static copy of the model (its input dims fixed, built by relvm
alike) for the symbolic/static ratio, the median of 9 back-to-back pairs. A model relvm fails to import, build or run, or whose
outputs differ, is reported with the stage and the error's first line and left out of the
geometric means; the run goes on.

``--traffic [--traffic-calls N]`` measures traffic as users send it instead: per model and
thread count (default 1) a process builds relvm and an ORT session, then sends both a sequence
of N distinct shapes drawn from the model's traffic distribution (``catalog.py``), every shape
new to both engines, then the same sequence again, each call timed and checked.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the zoo's modules, then benchmarks/common.py
from catalog import BY_NAME, MODELS, Model  # noqa: E402

from common import (StageError, cpu_model, first_line, gemm_isa,  # noqa: E402
                    interleaved_us, ort_session, paired_ratio, stage, versions)

RTOL = 1e-4
#: Back-to-back pairs timed for the symbolic/static ratio (see ``paired_ratio``).
SYMBOLIC_STATIC_ROUNDS = 9
#: The seed of every model's traffic: the same shapes in the same order on every run.
TRAFFIC_SEED = 0
#: Seconds the process rests before each timed call of the traffic, as ``interleaved_us``
#: does: a thread pool spinning after its last call would take a core from the other engine.
TRAFFIC_SETTLE_S = 0.05


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def compare(got: list, want: list) -> float:
    """Check relvm's outputs against ORT's; return max|got - want| / max|want| over outputs."""
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, ORT has {len(want)}")
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            raise AssertionError(f"output {i}: shape {g.shape}, ORT {w.shape}")
        if w.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
            continue
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        if not np.all(np.isfinite(w)):
            raise AssertionError(f"output {i}: ORT's output is not finite")
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * scale, err_msg=f"output {i}")
        if w.size and scale > 0:
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))) / scale)
    return worst


def mismatch(e: AssertionError) -> StageError:
    """A failed ``compare`` as the ``mismatch`` stage: its first line and the "Max" lines."""
    lines = str(e).strip().splitlines()
    return StageError("mismatch", lines[0] + " -- " + " ".join(
        line.strip() for line in lines if "Max" in line))


def rounding_sensitivity(sess, feeds: dict, want: list) -> float:
    """How far ORT's own outputs move (max|change| / max|output|) when its float inputs are
    rounded differently: each element scaled by 1 + 2**-23 * noise (an ulp), the largest
    move over three draws.

    Reported beside a mismatch, to tell rounding from a wrong kernel: a model whose sharp
    softmax amplifies float32 rounding (PP-OCRv4's recognizer moves 5e-5 to 9e-5 for a one-ulp
    change of its image) can differ from ORT by a few times that with every kernel right, as
    every layer rounds in its own order; a wrong kernel differs by far more."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(3):
        moved = {k: (v * (1 + 2.0 ** -23 * rng.standard_normal(v.shape))).astype(v.dtype)
                 if v.dtype.kind == "f" else v for k, v in feeds.items()}
        worst = max(worst, relative_error(as_list(sess.run(None, moved)), want) or 0.0)
    return worst


def checked(got: list, want: list, sess, feeds: dict, record: dict, key: str) -> None:
    """``compare``; a mismatch raises the ``mismatch`` stage, with ORT's own rounding
    sensitivity at these inputs recorded (``key``_sensitivity) and named in its message."""
    try:
        record[key] = compare(got, want)
    except AssertionError as e:
        record[key] = relative_error(got, want)
        sensitivity = record[f"{key}_sensitivity"] = rounding_sensitivity(sess, feeds, want)
        stage = mismatch(e)
        stage.line += f" (ORT's own output moves {sensitivity:.2g} under one-ulp input noise)"
        raise stage from e


def relative_error(got: list, want: list) -> float | None:
    """max|got - want| / max|want| without asserting (for OpenVINO, which is not gated)."""
    try:
        return compare(got, want)
    except AssertionError:
        worst = 0.0
        for g, w in zip(got, want):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            if g.shape != w.shape:
                return None
            scale = float(np.max(np.abs(w))) if w.size else 0.0
            if scale > 0:
                worst = max(worst, float(np.max(np.abs(g - w))) / scale)
        return worst


def static_copy(path: Path, feeds: dict[str, np.ndarray]):
    """The model with each graph input's dims fixed to the shape of its feed."""
    import onnx

    proto = onnx.load(str(path))
    for inp in proto.graph.input:
        if inp.name not in feeds:
            continue
        dims = inp.type.tensor_type.shape.dim
        shape = feeds[inp.name].shape
        while len(dims) < len(shape):
            dims.add()
        for d, n in zip(dims, shape):
            d.Clear()
            d.dim_value = n
    return proto


def as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


class Relvm:
    """One relvm build: import + compile timed; a runner per feed writing into fixed outputs."""

    def __init__(self, source, what: str):
        import relvm
        from relvm.frontend.onnx import from_onnx

        (mod, params), self.import_s = timed(stage, f"{what}import", from_onnx, source)
        exe, self.compile_s = timed(stage, f"{what}build", relvm.build, mod, params=params)
        self.vm = stage(f"{what}build", relvm.VirtualMachine, exe)
        self.what = what

    def runner(self, inputs: list[np.ndarray]):
        """Run once (returning the outputs) and a callable repeating the call into
        preallocated outputs (invoke_with_outputs), or through invoke where that is refused."""
        got = as_list(stage(f"{self.what}run", self.vm.invoke, "main", *inputs))
        outs = [np.empty_like(np.asarray(g)) for g in got]
        try:
            self.vm.invoke_with_outputs("main", input_args=inputs, output_args=outs)
            for o, g in zip(outs, got):
                np.testing.assert_array_equal(o, g)
            return got, (lambda: self.vm.invoke_with_outputs("main", input_args=inputs,
                                                             output_args=outs))
        except Exception:  # noqa: BLE001 -- fall back to invoke, as a user would
            return got, (lambda: self.vm.invoke("main", *inputs))


def openvino_model(path: Path, threads: int):
    import openvino as ov

    return ov.Core().compile_model(str(path), "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                      "PERFORMANCE_HINT": "LATENCY"})


def measure(model: Model, args) -> dict:
    """Everything about one model, in this process; failures become the result's stage/error."""
    result = {"name": model.name, "family": model.family, "source": model.source,
              "inputs": {i.name: [str(d) for d in i.dims] for i in model.inputs},
              **({"traffic": str(model.traffic), "threads": args.threads[0]} if args.traffic
                 else {"shapes": [model.label(s) for s in model.shapes]}),
              "status": "ok", "stage": None, "error": None,
              ("calls" if args.traffic else "cells"): [], "complete": False}
    try:
        (_traffic if args.traffic else _measure)(model, args, result)
    except StageError as e:
        result.update(status="failed", stage=e.stage, error=e.line)
    result["complete"] = True
    save(result, args)
    return result


def save(result: dict, args) -> None:
    """Write the result so far for the parent (after every cell: a model stopped by the
    timeout or a crash keeps the cells it finished)."""
    if args.child_json:
        tmp = args.child_json + ".tmp"
        Path(tmp).write_text(json.dumps(result))
        os.replace(tmp, args.child_json)


def model_file(model: Model, result: dict) -> Path:
    """The model's ONNX file, exported first when missing."""
    import export

    path = stage("export", export.ensure, model)
    if path is None:
        raise StageError("export", f"package {model.package[0]} is not installed")
    result["file"] = str(path)
    return path


def build_symbolic(model: Model, path: Path, caches: str, result: dict) -> Relvm:
    """relvm's build of the model with every dim symbolic, its kernels compiled afresh (into
    ``caches``, a folder of the caller's own), as on a first build."""
    os.environ["RELVM_CACHE_DIR"] = os.path.join(caches, "symbolic")
    built = Relvm(str(path), "")
    result["import_s"], result["compile_s"] = built.import_s, built.compile_s
    print(f"  {model.name}: relvm import {built.import_s:.1f} s + build {built.compile_s:.1f} s",
          flush=True)
    return built


def _measure(model: Model, args, result: dict) -> None:
    import relvm

    path = model_file(model, result)
    threads = args.threads
    sessions, result["ort_session_s"] = {}, {}
    for k in threads:
        sessions[k], result["ort_session_s"][str(k)] = timed(stage, "ort", ort_session, path, k)
    names = [i.name for i in sessions[threads[0]].get_inputs()]

    ov_models, result["openvino_compile_s"] = {}, {}
    if args.openvino:
        try:
            for k in threads:
                ov_models[k], result["openvino_compile_s"][str(k)] = timed(openvino_model, path, k)
        except Exception as e:  # noqa: BLE001 -- a peer's failure is noted, not ours
            ov_models = {}
            result["openvino_error"] = first_line(e)

    # Each build compiles its fused kernels afresh (a cache dir of its own), as a first build
    # does; the kernel cache would otherwise make the second build of a model look free.
    caches = tempfile.TemporaryDirectory(prefix="relvm-zoo-")
    built = build_symbolic(model, path, caches.name, result)

    static_index = model.static_shape if model.static_shape in args.shapes else None
    static = None
    if args.static and static_index is not None:
        feeds = model.feeds(model.shapes[static_index])
        os.environ["RELVM_CACHE_DIR"] = os.path.join(caches.name, "static")
        try:
            static = Relvm(static_copy(path, feeds), "static ")
            result["static_import_s"], result["static_compile_s"] = (static.import_s,
                                                                     static.compile_s)
        except StageError as e:
            result["static_error"] = f"{e.stage}: {e.line}"

    save(result, args)
    for k in threads:
        relvm.set_num_threads(k)
        for index in args.shapes:
            if index >= len(model.shapes):
                continue
            cell = {"threads": k, "shape": model.label(model.shapes[index]),
                    "dims": model.shapes[index]}
            result["cells"].append(cell)
            try:
                _cell(model, index, k, names, built, static if index == static_index else None,
                      sessions[k], ov_models.get(k), args, cell)
            except StageError as e:
                cell["error"] = f"{e.stage}: {e.line}"
                if result["status"] == "ok":
                    result.update(status="failed", stage=e.stage, error=e.line)
            shown = {key: v for key, v in cell.items() if key not in ("threads", "shape", "dims")}
            print(f"  {model.name} {cell['shape']} threads={k}: " + ", ".join(
                f"{key}={v:.4g}" if isinstance(v, float) else f"{key}={v}"
                for key, v in shown.items()), flush=True)
            save(result, args)
    del built, static, sessions, ov_models
    gc.collect()
    caches.cleanup()


def _cell(model: Model, index: int, k: int, names: list[str], built: Relvm, static, sess,
          compiled, args, cell: dict) -> None:
    feeds_by_name = model.feeds(model.shapes[index])
    feeds = {n: feeds_by_name[n] for n in names}
    inputs = list(feeds.values())
    want = sess.run(None, feeds)
    got, run_relvm = built.runner(inputs)
    fns = {"relvm": run_relvm, "ort": lambda: sess.run(None, feeds)}
    if compiled is not None:
        try:
            request = compiled.create_infer_request()
            result = request.infer(feeds)
            got_ov = [result[o] for o in compiled.outputs]
            cell["openvino_max_rel_err"] = relative_error(got_ov, want)
            fns["openvino"] = lambda: request.infer(feeds, share_inputs=True)
        except Exception as e:  # noqa: BLE001 -- a peer's failure is noted, not ours
            cell["openvino_error"] = first_line(e)
    try:
        cell["max_rel_err"] = compare(got, want)
    except AssertionError as e:
        cell["max_rel_err"] = relative_error(got, want)
        if "openvino_max_rel_err" in cell:  # is ORT the odd one out?
            cell["relvm_vs_openvino_rel_err"] = relative_error(got, got_ov)
        raise mismatch(e) from e
    if static is not None:
        try:
            got_static, fns["relvm_static"] = static.runner(inputs)
            cell["static_max_rel_err"] = compare(got_static, want)
        except (StageError, AssertionError) as e:
            fns.pop("relvm_static", None)
            cell["static_error"] = (f"{e.stage}: {e.line}" if isinstance(e, StageError)
                                    else "mismatch: " + str(e).strip().splitlines()[0])
    if args.check_only:
        return
    start = time.perf_counter()
    run_relvm()
    once = time.perf_counter() - start
    warmup = 1 if once > 0.1 else max(2, min(50, int(0.1 / max(once, 1e-6))))
    times = interleaved_us(fns, rounds=args.rounds, repeat=args.repeat, warmup=warmup)
    for name, us in times.items():
        cell[f"{name}_ms"] = us / 1e3
    if "relvm_static" in fns:
        # The two builds of one model differ by a few percent at most: measured in pairs, back
        # to back, in more rounds than the peers (the ratio of two medians of 3 rounds moved
        # 10-20% between runs on a model of 0.1 ms).
        cell["symbolic_static"] = paired_ratio(run_relvm, fns["relvm_static"],
                                               rounds=SYMBOLIC_STATIC_ROUNDS,
                                               repeat=args.repeat, warmup=warmup)


def _traffic(model: Model, args, result: dict) -> None:
    """The model's traffic at one thread count: the shapes drawn from its distribution, every
    one new to both engines (pass ``new``), then the same sequence again (``repeated``).

    Each call is timed alone, the engines taking turns (relvm first on the sequence's first
    call, ORT first on the second, and so on), on the same inputs. relvm runs through
    ``vm.invoke``, which allocates the outputs in the call as ``sess.run`` does: preallocated
    outputs (``invoke_with_outputs``, as the other mode times) need their shapes before the
    call, and relvm has no public call giving them short of running the model, which would
    show it the shape before its timed call.
    """
    import relvm

    path = model_file(model, result)
    k = args.threads[0]
    sess, seconds = timed(stage, "ort", ort_session, path, k)
    result["ort_session_s"] = {str(k): seconds}
    names = [i.name for i in sess.get_inputs()]
    caches = tempfile.TemporaryDirectory(prefix="relvm-zoo-")
    built = build_symbolic(model, path, caches.name, result)
    relvm.set_num_threads(k)
    sequence = model.traffic.draw(args.traffic_calls, seed=TRAFFIC_SEED)
    save(result, args)
    for pass_name in ("new", "repeated"):
        for index, sizes in enumerate(sequence):
            call = {"pass": pass_name, "index": index, "shape": model.label(sizes),
                    "dims": sizes}
            result["calls"].append(call)
            try:
                _traffic_call(model, sizes, index, names, built.vm, sess, call)
            except StageError as e:
                call["error"] = f"{e.stage}: {e.line}"
                if result["status"] == "ok":
                    result.update(status="failed", stage=e.stage, error=e.line)
            print(f"  {model.name} {pass_name} {index + 1}/{len(sequence)} {call['shape']}: "
                  + ", ".join(f"{key}={call[key]:.4g}" for key in
                              ("relvm_ms", "ort_ms", "max_rel_err", "max_rel_err_sensitivity")
                              if key in call)
                  + (f" {call['error']}" if "error" in call else ""), flush=True)
            save(result, args)
    del built, sess
    gc.collect()
    caches.cleanup()


def _traffic_call(model: Model, sizes: dict, index: int, names: list[str], vm, sess,
                  call: dict) -> None:
    """One call of each engine at one shape of the traffic, timed, relvm's outputs checked."""
    feeds_by_name = model.feeds(sizes, seed=index)
    feeds = {n: feeds_by_name[n] for n in names}
    inputs = list(feeds.values())
    engines = {"relvm": ("run", lambda: vm.invoke("main", *inputs)),
               "ort": ("ort", lambda: sess.run(None, feeds))}
    outs = {}
    for engine in ("relvm", "ort") if index % 2 == 0 else ("ort", "relvm"):
        what, fn = engines[engine]
        time.sleep(TRAFFIC_SETTLE_S)
        outs[engine], seconds = stage(what, timed, fn)
        call[f"{engine}_ms"] = seconds * 1e3
    checked(as_list(outs["relvm"]), as_list(outs["ort"]), sess, feeds, call, "max_rel_err")


# --- the parent: one process per model, then the report ----------------------------------

def child_command(name: str, args, out: str, threads: list[int]) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--child-json", out,
           "--threads", ",".join(map(str, threads)), "--rounds", str(args.rounds),
           "--repeat", str(args.repeat), "--shapes", ",".join(map(str, args.shapes))]
    cmd += [] if args.openvino else ["--no-openvino"]
    cmd += [] if args.static else ["--no-static"]
    cmd += ["--check-only"] if args.check_only else []
    cmd += ["--traffic", "--traffic-calls", str(args.traffic_calls)] if args.traffic else []
    cmd += ["--memory-limit", str(args.memory_limit)]
    return cmd


def run_child(model: Model, args, threads: list[int]) -> dict:
    """Measure the model at ``threads`` in a process of its own (with ``--traffic``, one
    thread count: a shape the process has seen at another would no longer be new)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        start = time.perf_counter()
        try:
            proc = subprocess.run(child_command(model.name, args, out, threads), stdout=None,
                                  stderr=subprocess.PIPE, text=True, timeout=args.timeout,
                                  cwd=tmp)
            stderr, code = proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stderr, code = e.stderr or "", "timeout"
            stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        wall = time.perf_counter() - start
        result = {"name": model.name, "family": model.family, "source": model.source,
                  **({"threads": threads[0], "calls": []} if args.traffic else {"cells": []})}
        if os.path.exists(out):
            result = json.loads(Path(out).read_text())
        if not result.get("complete"):
            lines = [ln for ln in (stderr or "").strip().splitlines() if ln.strip()]
            why = (f"stopped after {args.timeout:.0f} s" if code == "timeout"
                   else f"exit {code}: {lines[-1] if lines else ''}")
            result.update(status="failed", stage="timeout" if code == "timeout" else "crash",
                          error=why[:300])
            if lines and code != "timeout":
                sys.stderr.write("\n".join(lines[-15:]) + "\n")
        result["wall_s"] = wall
        return result


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def fmt(value, spec: str = ".2f", width: int = 7) -> str:
    return f"{value:{width}{spec}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def report(results: list[dict], args, header: dict) -> dict:
    print(f"\nrelvm zoo -- CPU: {header['cpu']}; relvm GEMM ISA: {header['gemm_isa']}; "
          f"threads {','.join(map(str, args.threads))}; {args.rounds} rounds")
    print("  versions: " + ", ".join(f"{k} {v}" for k, v in header["versions"].items()))
    print("\nModels (seconds: relvm import + build of the symbolic model, of the static copy; "
          "ORT session, OpenVINO compile at the first thread count)")
    print(f"  {'model':<22} {'family':<9} {'relvm':>13} {'static':>7} {'ORT':>6} {'OV':>6} "
          f"{'max rel err':>11}  status")
    k0 = str(args.threads[0])
    for r in results:
        errs = [c.get("max_rel_err") for c in r["cells"] if c.get("max_rel_err") is not None]
        build = (f"{r['import_s']:5.1f}+{r['compile_s']:5.1f}s" if "compile_s" in r
                 else f"{'-':>13}")
        static = (r.get("static_import_s", 0) + r["static_compile_s"]
                  if "static_compile_s" in r else None)
        status = "ok" if r["status"] == "ok" else f"{r['stage']}: {r['error']}"
        notes = [f"static {r['static_error']}"] if r.get("static_error") else []
        notes += [f"OpenVINO {r['openvino_error']}"] if r.get("openvino_error") else []
        print(f"  {r['name']:<22} {r['family']:<9} {build} {fmt(static, '.1f')} "
              f"{fmt(r.get('ort_session_s', {}).get(k0), '.1f', 6)} "
              f"{fmt(r.get('openvino_compile_s', {}).get(k0), '.1f', 6)} "
              f"{fmt(max(errs) if errs else None, '.1e', 11)}  {status}"
              + ("".join(f"; {n}" for n in notes)))

    summary = {"geomean": {}}
    if args.check_only:
        return summary
    print("\nMedian ms per call; ratios below 1: relvm faster")
    print(f"  {'model':<22} {'shape':<34} {'thr':>3} {'relvm':>9} {'ORT':>9} {'OV':>9} "
          f"{'r/ORT':>6} {'r/OV':>6} {'sym/stat':>8}")
    for r in results:
        for c in r["cells"]:
            if "relvm_ms" not in c:
                if c.get("error"):
                    print(f"  {r['name']:<22} {c['shape']:<34} {c['threads']:>3} {c['error']}")
                continue
            c["relvm_ort"] = c["relvm_ms"] / c["ort_ms"]
            c["relvm_openvino"] = (c["relvm_ms"] / c["openvino_ms"] if "openvino_ms" in c
                                   else None)
            c.setdefault("symbolic_static", None)
            print(f"  {r['name']:<22} {c['shape']:<34} {c['threads']:>3} "
                  f"{fmt(c['relvm_ms'], '.2f', 9)} {fmt(c['ort_ms'], '.2f', 9)} "
                  f"{fmt(c.get('openvino_ms'), '.2f', 9)} {fmt(c['relvm_ort'], '.2f', 6)} "
                  f"{fmt(c['relvm_openvino'], '.2f', 6)} {fmt(c['symbolic_static'], '.2f', 8)}")
    print("\nGeometric means over the cells of the models that passed (every shape):")
    for k in args.threads:
        cells = [c for r in results if r["status"] == "ok" for c in r["cells"]
                 if c["threads"] == k and "relvm_ms" in c]
        g = {key: geomean([c.get(key) for c in cells])
             for key in ("relvm_ort", "relvm_openvino", "symbolic_static")}
        counts = {key: sum(1 for c in cells if c.get(key)) for key in g}
        summary["geomean"][k] = {"values": g, "cells": counts}
        print(f"  {k} thread{'s' if k > 1 else ' '}: relvm/ORT {fmt(g['relvm_ort'], '.3f', 6)} "
              f"({counts['relvm_ort']} cells), relvm/OpenVINO "
              f"{fmt(g['relvm_openvino'], '.3f', 6)} ({counts['relvm_openvino']} cells), "
              f"symbolic/static {fmt(g['symbolic_static'], '.3f', 6)} "
              f"({counts['symbolic_static']} models)")
    failed = [r["name"] for r in results if r["status"] != "ok"]
    if failed:
        print(f"  left out (failed): {', '.join(failed)}")
    return summary


def traffic_summary(calls: list[dict]) -> dict:
    """Mean and median ms per call of each engine on each pass, over the calls both engines
    finished but the sequence's first (the first call after the build, given apart: on both
    passes, so that the two passes average the same shapes), and their ratios (of the means)."""
    summary = {}
    for c in calls:
        if c["pass"] == "new" and c["index"] == 0:
            summary.update(relvm_first_ms=c.get("relvm_ms"), ort_first_ms=c.get("ort_ms"))
    for pass_name in ("new", "repeated"):
        done = [c for c in calls if c["pass"] == pass_name and c["index"] > 0
                and "relvm_ms" in c and "ort_ms" in c]
        summary[f"{pass_name}_calls"] = len(done)
        for engine in ("relvm", "ort"):
            ms = [c[f"{engine}_ms"] for c in done]
            summary[f"{engine}_{pass_name}_mean_ms"] = statistics.fmean(ms) if ms else None
            summary[f"{engine}_{pass_name}_median_ms"] = statistics.median(ms) if ms else None

    def ratio(a: str, b: str) -> float | None:
        return summary[a] / summary[b] if summary[a] and summary[b] else None

    for engine in ("relvm", "ort"):
        summary[f"{engine}_new_repeated"] = ratio(f"{engine}_new_mean_ms",
                                                  f"{engine}_repeated_mean_ms")
    for pass_name in ("new", "repeated"):
        summary[f"relvm_ort_{pass_name}"] = ratio(f"relvm_{pass_name}_mean_ms",
                                                  f"ort_{pass_name}_mean_ms")
    return summary


def report_traffic(results: list[dict], args, header: dict) -> dict:
    print(f"\nrelvm zoo traffic -- CPU: {header['cpu']}; relvm GEMM ISA: {header['gemm_isa']}; "
          f"threads {','.join(map(str, args.threads))}; {args.traffic_calls} calls per pass "
          "(fewer where the model caps them)")
    print("  versions: " + ", ".join(f"{k} {v}" for k, v in header["versions"].items()))
    print("\nModels (seconds: relvm import + build of the symbolic model; ORT session)")
    print(f"  {'model':<22} {'thr':>3} {'relvm':>13} {'ORT':>6} {'calls':>5} "
          f"{'max rel err':>11}  status")
    for r in results:
        r["summary"] = traffic_summary(r["calls"])
        errs = [c["max_rel_err"] for c in r["calls"] if c.get("max_rel_err") is not None]
        build = (f"{r['import_s']:5.1f}+{r['compile_s']:5.1f}s" if "compile_s" in r
                 else f"{'-':>13}")
        status = "ok" if r["status"] == "ok" else f"{r['stage']}: {r['error']}"
        print(f"  {r['name']:<22} {r['threads']:>3} {build} "
              f"{fmt(r.get('ort_session_s', {}).get(str(r['threads'])), '.1f', 6)} "
              f"{sum(c['pass'] == 'new' for c in r['calls']):>5} "
              f"{fmt(max(errs) if errs else None, '.1e', 11)}  {status}")

    print("\nms per call, mean and median over calls 2..N of each pass -- new: shapes neither "
          "engine had seen,\nrepeated: the same sequence again; ratios of the means; first "
          "call: the sequence's first, after the build")
    print(f"  {'':<26} " + " ".join(f"{title:<17}" for title in (
        "relvm new", "ORT new", "relvm repeated", "ORT repeated")) + " new/repeated  relvm/ORT"
          "     first call")
    print(f"  {'model':<22} {'thr':>3} " + " ".join([f"{'mean':>8} {'median':>8}"] * 4)
          + f" {'relvm':>6} {'ORT':>6} {'new':>5} {'rep':>5} {'relvm':>7} {'ORT':>7}")
    for r in results:
        m = r["summary"]
        print(f"  {r['name']:<22} {r['threads']:>3} " + " ".join(
            f"{fmt(m[f'{e}_{p}_mean_ms'], '.2f', 8)} {fmt(m[f'{e}_{p}_median_ms'], '.2f', 8)}"
            for p in ("new", "repeated") for e in ("relvm", "ort"))
            + f" {fmt(m['relvm_new_repeated'], '.2f', 6)} {fmt(m['ort_new_repeated'], '.2f', 6)}"
            f" {fmt(m['relvm_ort_new'], '.2f', 5)} {fmt(m['relvm_ort_repeated'], '.2f', 5)}"
            f" {fmt(m.get('relvm_first_ms'), '.1f', 7)} {fmt(m.get('ort_first_ms'), '.1f', 7)}")

    summary = {"geomean": {}}
    keys = ("relvm_ort_new", "relvm_ort_repeated", "relvm_new_repeated", "ort_new_repeated")
    print("\nGeometric means over the models that passed:")
    for k in args.threads:
        passed = [r["summary"] for r in results if r["status"] == "ok" and r["threads"] == k]
        g = {key: geomean([m[key] for m in passed]) for key in keys}
        summary["geomean"][k] = {"values": g, "models": len(passed)}
        print(f"  {k} thread{'s' if k > 1 else ' '} ({len(passed)} models): relvm/ORT on new "
              f"shapes {fmt(g['relvm_ort_new'], '.3f', 6)}, on repeated "
              f"{fmt(g['relvm_ort_repeated'], '.3f', 6)}; new/repeated: relvm "
              f"{fmt(g['relvm_new_repeated'], '.3f', 6)}, ORT "
              f"{fmt(g['ort_new_repeated'], '.3f', 6)}")
    failed = sorted({r["name"] for r in results if r["status"] != "ok"})
    if failed:
        print(f"  left out (failed): {', '.join(failed)}")
    return summary


def limit_memory(gib: float) -> None:
    """Cap this process's data (heap and anonymous maps): a model that asks for more fails
    with a MemoryError in its own stage instead of waking the kernel's OOM killer."""
    import resource

    if gib > 0:
        limit = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _default_memory_gib() -> float:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return round(total / 2**30 / 2, 1)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated names (default: all): "
                   + ",".join(m.name for m in MODELS))
    p.add_argument("--threads", help="thread counts (default 1,2; with --traffic 1)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--repeat", type=int, default=3,
                   help="timed runs per engine in each round, of which the median (default 3)")
    p.add_argument("--shapes", default="0,1,2", help="indices of each model's shapes (0,1,2)")
    p.add_argument("--json", help="write every result to this file")
    p.add_argument("--no-openvino", dest="openvino", action="store_false")
    p.add_argument("--no-static", dest="static", action="store_false",
                   help="skip the static copy (the symbolic/static ratio)")
    p.add_argument("--check-only", action="store_true", help="check outputs, time nothing")
    p.add_argument("--traffic", action="store_true",
                   help="time traffic as users send it: shapes new to both engines, then "
                   "the same again (see the README)")
    p.add_argument("--traffic-calls", type=int, default=24,
                   help="distinct shapes per model with --traffic (24; some models cap it)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds per model (600); the cells it finished are kept")
    p.add_argument("--memory-limit", type=float, default=_default_memory_gib(),
                   help="GiB of data each model's process may use (default: half the RAM; "
                   "0: no limit)")
    p.add_argument("--list", action="store_true", help="print the zoo and exit")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.traffic and args.check_only:
        p.error("--check-only times nothing: --traffic checks every call it times")
    if args.traffic_calls < 2:
        p.error("--traffic-calls: at least 2 (the first call is reported apart)")
    args.threads = [int(t) for t in (args.threads or ("1" if args.traffic else "1,2")).split(",")]
    args.shapes = [int(s) for s in args.shapes.split(",")]
    args.openvino = args.openvino and not args.traffic  # the traffic compares relvm with ORT
    if args.openvino:
        try:
            import openvino  # noqa: F401
        except ImportError:
            print("(OpenVINO is not installed: --no-openvino)")
            args.openvino = False
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        limit_memory(args.memory_limit)
        result = measure(BY_NAME[args.child], args)
        Path(args.child_json).write_text(json.dumps(result))
        return 0
    names = args.models.split(",") if args.models else [m.name for m in MODELS]
    if args.list:
        for m in (BY_NAME[n] for n in names):
            inputs = ", ".join(f"{i.name}[{', '.join(map(str, i.dims))}]" for i in m.inputs)
            print(f"{m.name} ({m.family}): {m.source}\n    inputs {inputs}\n    shapes "
                  + "; ".join(m.label(s) for s in m.shapes)
                  + f" (static copy: {m.label(m.shapes[m.static_shape])})"
                  + f"\n    traffic {m.traffic}")
        return 0
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        sys.exit(f"unknown models: {', '.join(unknown)}")
    header = {"cpu": cpu_model(), "gemm_isa": gemm_isa(),
              "versions": versions(("numpy", "onnx", "onnxruntime", "openvino")),
              "cores": os.cpu_count()}
    print(f"CPU: {header['cpu']} ({header['cores']} cores); relvm GEMM ISA: "
          f"{header['gemm_isa']}", flush=True)
    start = time.perf_counter()
    results = []
    runs = ([(name, [k]) for name in names for k in args.threads] if args.traffic
            else [(name, args.threads) for name in names])
    for name, threads in runs:
        print(f"== {name}", flush=True)
        results.append(run_child(BY_NAME[name], args, threads))
        r = results[-1]
        print(f"== {name}: {'ok' if r['status'] == 'ok' else r['stage'] + ': ' + r['error']} "
              f"({r['wall_s']:.0f} s)", flush=True)
    summary = (report_traffic if args.traffic else report)(results, args, header)
    total = time.perf_counter() - start
    print(f"\ntotal {total:.0f} s ({total / 60:.1f} min)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {**header, "args": {k: v for k, v in vars(args).items() if k not in ("child",
                                                                               "child_json")},
             "total_s": total, "models": results, **summary}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
