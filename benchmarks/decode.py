"""Autoregressive decoding with a KV cache, relvm vs ONNX Runtime: a prompt, then token by token.

Run: ``python benchmarks/decode.py [--models gpt2_small,qwen2_small,tiny]
[--exporters legacy,dynamo] [--steps 128] [--prompt 16] [--threads 1] [--rounds 7]
[--timeout 900] [--json out.json] [--force]`` from outside the checkout's root (``pip install ".[zoo]"``: torch, transformers and
onnxscript export the models, ONNX Runtime is the peer).

A decoder's ONNX file takes the new tokens, the attention mask, position ids (the RoPE models
only) and every layer's past keys and values, and returns the logits and the present keys and
values, the past grown by the new tokens. Batch, sequence and past length are dynamic, so every
step of a generation calls the model at a shape it has not seen: the past is one longer. This
is the call pattern of a text generator, and the one a runtime that compiles once for symbolic
dims and plans per shape (relvm) finds hardest: ``--steps`` new shapes in a row, where a batch
of images repeats one.

The models are transformers architectures made from their configs with random weights (fixed
seed, ``HF_HUB_OFFLINE=1``: nothing is downloaded), each exported by torch.onnx's legacy
exporter (opset 17) and its dynamo exporter into ``~/.cache/relvm/decode`` (only when missing,
``--force`` to redo). An exporter that cannot export a model is reported as that model's
``export`` failure and the run goes on.

Each model and exporter runs in a process of its own (a crash costs that pair only): relvm
imports it and builds it once, ORT opens a session on the same file, then both generate the
same tokens greedily: one call on the ``--prompt`` random tokens (past length 0: the prefill),
then ``--steps`` calls on one token each, each engine feeding back its own argmax and its own
present keys and values. The two generations advance step by step, the engine that goes first
alternating, so a slow stretch of the shared machine lands on both; only the engine call is
timed (at more than one thread after a pause, ``SETTLE``). At every step relvm's logits must
match ORT's (rtol 1e-4, atol 1e-4 x max|ORT|) and so must the token each picks: a difference is
reported as a ``mismatch`` at that step. The timed generation follows a warm-up of one prompt
call and one single-token call at lengths it never reaches, so no engine's one-time set-up is
timed while every timed step's shape is still new to both.

Reported, for both engines: the prefill (ms); the first single-token step (us); the median
and mean of the later steps (us) and the tokens per second their mean gives; and one decode
step at the middle step's shape repeated (``interleaved_us``: what a runtime does at a shape it
has seen). A failure of relvm is reported with its stage (``import``, ``build``, ``run``,
``mismatch``; ``crash`` or ``timeout`` when its process died or ran out of ``--timeout``) and
its error's first line. Timings are never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "zoo")]  # common.py, then the zoo's export helper
from common import (StageError, cpu_model, gemm_isa, interleaved_us,  # noqa: E402
                    ort_session, stage, versions)

CACHE = Path.home() / ".cache" / "relvm" / "decode"
EXPORTERS = ("legacy", "dynamo")
SEED = 0
RTOL = 1e-4
#: Seconds each engine's call waits after the other's at more than one thread: a pool that
#: spins after its last call (relvm's and ORT's alike) would take a core from the next one.
SETTLE = 0.05


@dataclass(frozen=True)
class Decoder:
    """A transformers causal LM made from its config: ``family``'s ``*Config(**config)``."""

    name: str
    family: str  # "GPT2" or "Qwen2": the prefix of transformers' Config and ...ForCausalLM
    config: dict

    @property
    def layers(self) -> int:
        return self.config.get("n_layer") or self.config["num_hidden_layers"]

    @property
    def position_ids(self) -> bool:
        """Whether the file takes position ids: RoPE models' ONNX files do (Optimum's and
        onnxruntime-genai's Llama and Qwen2 exports); GPT-2 takes its positions from the past."""
        return self.family != "GPT2"

    def make(self):
        """The torch model, its weights drawn from ``SEED`` (the same for both exporters)."""
        import torch
        import transformers

        torch.manual_seed(SEED)
        config = getattr(transformers, f"{self.family}Config")(**self.config,
                                                               attn_implementation="eager")
        head = "GPT2LMHeadModel" if self.family == "GPT2" else f"{self.family}ForCausalLM"
        return getattr(transformers, head)(config).eval()


DECODERS = {d.name: d for d in (
    # GPT-2 small's sizes and vocabulary (124M parameters; the LM head shares the embedding).
    Decoder("gpt2_small", "GPT2", dict(vocab_size=50257, n_positions=1024, n_embd=768,
                                       n_layer=12, n_head=12)),
    # Llama/Qwen2-style (RoPE, RMSNorm, SwiGLU, 12 query heads sharing 4 KV heads), sized so a
    # step reads about as many weights as GPT-2 small's: 100M with its LM head (GPT-2: 124M).
    Decoder("qwen2_small", "Qwen2", dict(vocab_size=32000, hidden_size=768,
                                         intermediate_size=2048, num_hidden_layers=12,
                                         num_attention_heads=12, num_key_value_heads=4,
                                         max_position_embeddings=2048)),
    # Two layers 64 wide: a step is a few us of arithmetic, so the per-call cost is everything.
    Decoder("tiny", "Qwen2", dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=2048)),
)}


def model_path(name: str, exporter: str) -> Path:
    return CACHE / f"{name}_{exporter}.onnx"


# --- export (in the parent; the only place torch is imported) ------------------------------

def _with_past(net, decoder: Decoder):
    """``net`` taking its KV cache as flat tensors, as ONNX files carry it:
    (input_ids, attention_mask, [position_ids], past_key_0, past_value_0, ...) -> (logits,
    present_key_0, present_value_0, ...). The class is made here, so that importing this file
    needs no torch."""
    import torch
    import transformers

    class WithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask, *rest):
            position_ids, past = (rest[0], rest[1:]) if decoder.position_ids else (None, rest)
            cache = transformers.DynamicCache()
            for layer in range(decoder.layers):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.net(input_ids=input_ids, attention_mask=attention_mask,
                           position_ids=position_ids, past_key_values=cache, use_cache=True)
            present = out.past_key_values.layers  # transformers' Cache API (4.56 and later)
            return (out.logits, *(t for layer in present for t in (layer.keys, layer.values)))

    return WithPast()


def export(decoder: Decoder, exporter: str, path: Path) -> None:
    """Write ``decoder`` exported by ``exporter`` to ``path`` (through a temporary file, so an
    export that fails leaves nothing a later run would take for a model)."""
    import torch
    from export import torch_export

    net = decoder.make()
    past_names = [f"past_{kind}_{i}" for i in range(decoder.layers) for kind in ("key", "value")]
    names = ["input_ids", "attention_mask", *(["position_ids"] * decoder.position_ids),
             *past_names]
    # Example dims >= 2 and all different: the dynamo exporter specializes dims of 0 or 1 and
    # takes equal dims for one.
    batch, seq, past = 2, 3, 4
    attention = net.config.num_attention_heads
    heads = getattr(net.config, "num_key_value_heads", attention)
    head_dim = net.config.hidden_size // attention
    example = {"input_ids": torch.randint(0, net.config.vocab_size, (batch, seq)),
               "attention_mask": torch.ones(batch, past + seq, dtype=torch.int64),
               "position_ids": torch.arange(past, past + seq).repeat(batch, 1)}
    for n in past_names:
        example[n] = torch.randn(batch, heads, past, head_dim)
    dims = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "sequence"},
            **{n: {0: "batch", 2: "past"} for n in past_names}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    torch_export(_with_past(net, decoder), tuple(example[n] for n in names), tmp, names,
                 ["logits", *(n.replace("past", "present") for n in past_names)],
                 {n: dims[n] for n in names}, dynamo=exporter == "dynamo")
    tmp.replace(path)


def ensure(decoder: Decoder, exporter: str, force: bool) -> float | None:
    """Export when the file is missing (or ``force``); the seconds it took, None if cached."""
    path = model_path(decoder.name, exporter)
    if path.exists() and not force:
        return None
    start = time.perf_counter()
    try:
        export(decoder, exporter, path)
    except Exception as e:  # noqa: BLE001 -- an exporter's failure is reported, then next
        while e.__cause__ is not None:  # torch.onnx's own first line only names its step
            e = e.__cause__
        raise StageError("export", e) from e
    return time.perf_counter() - start


# --- one model and exporter, in a process of its own ---------------------------------------

@dataclass(frozen=True)
class Engine:
    """How one runtime is called: ``arrange`` turns the step's feeds (by name) into what
    ``call`` takes, outside the timed region, so each is timed on its own call only."""

    name: str
    arrange: Callable[[dict[str, np.ndarray]], Any]
    call: Callable[[Any], Sequence[np.ndarray]]


class Generation:
    """One engine's greedy generation: its own tokens and KV cache, fed back step after step."""

    def __init__(self, engine: Engine, prompt: np.ndarray, cache_shapes: dict[str, tuple],
                 position_ids: bool):
        self.engine = engine
        self.position_ids = position_ids
        self.tokens = prompt[None, :]  # the tokens the next call takes
        self.past = {n: np.zeros((1, heads, 0, dim), np.float32)
                     for n, (heads, dim) in cache_shapes.items()}
        self.length = 0  # the past length
        self.generated: list[int] = []

    def feeds(self) -> dict[str, np.ndarray]:
        """The next call's inputs, by name."""
        n = self.tokens.shape[1]
        feeds = {"input_ids": self.tokens,
                 "attention_mask": np.ones((1, self.length + n), np.int64)}
        if self.position_ids:
            feeds["position_ids"] = np.arange(self.length, self.length + n, dtype=np.int64)[None]
        return {**feeds, **self.past}

    def step(self) -> tuple[np.ndarray, float]:
        """Call the engine once, take its argmax as the next token; the logits and seconds."""
        args = self.engine.arrange(self.feeds())
        start = time.perf_counter()
        out = self.engine.call(args)
        elapsed = time.perf_counter() - start
        logits, *present = (np.asarray(o) for o in out)
        self.length += self.tokens.shape[1]
        self.past = dict(zip(self.past, present))  # the export orders them alike
        token = int(np.argmax(logits[0, -1]))
        self.generated.append(token)
        self.tokens = np.array([[token]], np.int64)
        return logits, elapsed


def check(step: int, got: np.ndarray, want: np.ndarray, token: int, want_token: int) -> float:
    """relvm's logits and token at ``step`` against ORT's; max|got - want| / max|want|."""
    if got.shape != want.shape:
        raise StageError("mismatch", f"step {step}: logits {got.shape}, ORT {want.shape}")
    scale = float(np.max(np.abs(want)))
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
    if not np.allclose(got, want, rtol=RTOL, atol=RTOL * scale):
        raise StageError("mismatch", f"step {step}: logits differ from ORT's by {err:.2e} "
                         f"of max|ORT| (allowed rtol {RTOL}, atol {RTOL} x max|ORT|)")
    if token != want_token:
        near = (want[0, -1, token], want[0, -1, want_token])
        raise StageError("mismatch", f"step {step}: token {token}, ORT {want_token} (ORT's "
                         f"logits for them {near[0]:.6g}, {near[1]:.6g})")
    return err


def measure(name: str, exporter: str, args) -> dict:
    """Everything about one model and exporter; a failure becomes the result's stage/error."""
    result = {"model": name, "exporter": exporter, "status": "ok", "stage": None, "error": None}
    try:
        _measure(DECODERS[name], model_path(name, exporter), args, result)
    except StageError as e:
        result.update(status="failed", stage=e.stage, error=e.line)
    return result


def _measure(decoder: Decoder, path: Path, args, result: dict) -> None:
    import relvm
    from relvm.frontend.onnx import from_onnx

    relvm.set_num_threads(args.threads)
    start = time.perf_counter()
    mod, params = stage("import", from_onnx, str(path))
    result["import_s"] = time.perf_counter() - start
    start = time.perf_counter()
    vm = stage("build", lambda: relvm.VirtualMachine(relvm.build(mod, params=params)))
    result["build_s"] = time.perf_counter() - start
    start = time.perf_counter()
    sess = stage("ort", ort_session, path, args.threads)
    result["ort_session_s"] = time.perf_counter() - start

    names = [i.name for i in sess.get_inputs()]
    cache_shapes = {i.name: (i.shape[1], i.shape[3]) for i in sess.get_inputs()
                    if i.name.startswith("past_")}
    engines = [Engine("relvm", lambda feeds: [feeds[n] for n in names],
                      lambda inputs: vm.invoke("main", *inputs)),
               Engine("ort", lambda feeds: feeds, lambda feeds: sess.run(None, feeds))]
    stages = {"relvm": "run", "ort": "ort"}
    vocab = decoder.config["vocab_size"]
    settle = SETTLE if args.threads > 1 else 0.0

    def generation(engine: Engine, prompt_length: int) -> Generation:
        prompt = np.random.default_rng(SEED).integers(0, vocab, prompt_length, dtype=np.int64)
        return Generation(engine, prompt, cache_shapes, decoder.position_ids)

    # Warm-up: a prompt and a step at lengths the timed run never reaches (prompt + steps).
    for engine in engines:
        warm = generation(engine, args.prompt + args.steps)
        for _ in range(2):
            stage(stages[engine.name], warm.step)

    runs = {e.name: generation(e, args.prompt) for e in engines}
    times: dict[str, list[float]] = {e.name: [] for e in engines}
    middle = 1 + args.steps // 2  # the step whose shape is timed repeated
    worst = 0.0
    for step in range(args.steps + 1):  # step 0: the prompt
        if step == middle:
            repeated_feeds = runs["ort"].feeds()
        logits = {}
        for engine in (engines if step % 2 == 0 else engines[::-1]):
            if settle:
                time.sleep(settle)
            try:
                logits[engine.name], elapsed = stage(stages[engine.name], runs[engine.name].step)
            except StageError as e:
                raise StageError(e.stage, f"step {step}: {e.line}") from e
            times[engine.name].append(elapsed)
        worst = max(worst, check(step, logits["relvm"], logits["ort"],
                                 runs["relvm"].generated[-1], runs["ort"].generated[-1]))
    result["max_rel_err"] = worst
    result["tokens"] = runs["ort"].generated

    calls = {e.name: (lambda e, a: lambda: e.call(a))(e, e.arrange(repeated_feeds))
             for e in engines}
    once = times["relvm"][middle]
    warmup = 1 if once > 0.1 else max(2, min(50, int(0.1 / max(once, 1e-6))))
    repeated = stage("run", interleaved_us, calls, rounds=args.rounds, repeat=3, warmup=warmup)
    for name, t in times.items():
        later = t[2:]
        result[name] = {"prefill_ms": t[0] * 1e3, "first_step_us": t[1] * 1e6,
                        "median_us": statistics.median(later) * 1e6,
                        "mean_us": statistics.fmean(later) * 1e6,
                        "tokens_per_s": 1 / statistics.fmean(later),
                        "repeated_us": repeated[name], "steps_us": [s * 1e6 for s in t]}


# --- the parent: exports, one process per model and exporter, the report -------------------

def run_child(name: str, exporter: str, args) -> dict:
    """``measure`` in a process of its own; a crash or a timeout becomes its failure."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", f"{name}:{exporter}",
               "--child-json", str(out), "--steps", str(args.steps), "--prompt",
               str(args.prompt), "--threads", str(args.threads), "--rounds", str(args.rounds)]
        try:
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=args.timeout,
                                  cwd=tmp)
        except subprocess.TimeoutExpired:
            return {"model": name, "exporter": exporter, "status": "failed", "stage": "timeout",
                    "error": f"stopped after {args.timeout:.0f} s"}
        if out.exists():
            return json.loads(out.read_text())
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        sys.stderr.write("\n".join(lines[-15:]) + "\n")
        return {"model": name, "exporter": exporter, "status": "failed", "stage": "crash",
                "error": f"exit {proc.returncode}: {lines[-1] if lines else ''}"[:300]}


def fmt(value, spec: str, width: int) -> str:
    return f"{value:{width}{spec}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def report(results: list[dict], args, header: dict) -> None:
    print(f"\nrelvm decode -- CPU: {header['cpu']} ({header['cores']} cores); relvm GEMM ISA: "
          f"{header['gemm_isa']}; {args.threads} thread{'s' * (args.threads > 1)}; batch 1, "
          f"prompt {args.prompt} tokens, {args.steps} steps")
    print("  versions: " + ", ".join(f"{k} {v}" for k, v in header["versions"].items()))
    print("\nModels (seconds: export when it ran, relvm import + build, ORT session; max "
          "|relvm - ORT| / max|ORT| over every step's logits)")
    print(f"  {'model':<12} {'exporter':<8} {'export':>6} {'relvm':>12} {'ORT':>5} "
          f"{'max rel err':>11}  status")
    for r in results:
        build = (f"{r['import_s']:4.1f} +{r['build_s']:5.1f}" if "build_s" in r
                 else f"{'-':>12}")
        status = "ok" if r["status"] == "ok" else f"{r['stage']}: {r['error']}"
        print(f"  {r['model']:<12} {r['exporter']:<8} {fmt(r.get('export_s'), '.0f', 6)} "
              f"{build} {fmt(r.get('ort_session_s'), '.1f', 5)} "
              f"{fmt(r.get('max_rel_err'), '.1e', 11)}  {status}")
    print("\nTimes: relvm, ORT, relvm/ORT (below 1: relvm faster). prefill: the prompt's call; "
          "first: the first one-token step;\nmedian, mean: the steps after it; tok/s: from the "
          "mean; repeated: the middle step's shape called again and again")
    columns = {"prefill_ms": ("prefill ms", ".2f"), "first_step_us": ("first us", ".0f"),
               "median_us": ("median us", ".0f"), "mean_us": ("mean us", ".0f"),
               "repeated_us": ("repeated us", ".0f")}
    print(f"  {'model':<12} {'exporter':<8} "
          + " ".join(f"{title:^22}" for title, _ in columns.values()) + f" {'tok/s':^13}")
    print(f"  {'':<21} " + " ".join(f"{'relvm':>7} {'ORT':>7} {'ratio':>6}" for _ in columns)
          + f" {'relvm':>6} {'ORT':>6}")
    for r in results:
        if r["status"] != "ok":
            continue
        cells = []
        for key, (_, spec) in columns.items():
            a, b = r["relvm"][key], r["ort"][key]
            r.setdefault("relvm_ort", {})[key] = a / b
            cells.append(f"{a:7{spec}} {b:7{spec}} {a / b:6.2f}")
        print(f"  {r['model']:<12} {r['exporter']:<8} " + " ".join(cells)
              + f" {r['relvm']['tokens_per_s']:6.0f} {r['ort']['tokens_per_s']:6.0f}")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DECODERS),
                   help=f"comma-separated (default: all): {','.join(DECODERS)}")
    p.add_argument("--exporters", default=",".join(EXPORTERS),
                   help="comma-separated (default: legacy,dynamo)")
    p.add_argument("--steps", type=int, default=128, help="one-token steps (default 128; >= 2)")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens (default 16)")
    p.add_argument("--threads", type=int, default=1, help="threads of each engine (default 1)")
    p.add_argument("--rounds", type=int, default=7,
                   help="interleaved rounds of the repeated-shape step (default 7)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds per model and exporter, export excluded (default 900)")
    p.add_argument("--force", action="store_true", help="export again even if cached")
    p.add_argument("--json", help="write every result, every step's time included, here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.models = args.models.split(",")
    args.exporters = args.exporters.split(",")
    unknown = ([m for m in args.models if m not in DECODERS]
               + [e for e in args.exporters if e not in EXPORTERS])
    if unknown:
        p.error(f"unknown: {', '.join(unknown)}")
    if args.steps < 2 or args.prompt < 1:
        p.error("--steps must be at least 2 (the first step is reported apart) and --prompt 1")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        result = measure(*args.child.split(":"), args)
        Path(args.child_json).write_text(json.dumps(result))
        return 0
    header = {"cpu": cpu_model(), "cores": os.cpu_count(), "gemm_isa": gemm_isa(),
              "versions": versions(("onnxruntime", "torch", "transformers", "onnx",
                                              "onnxscript", "numpy"))}
    print(f"CPU: {header['cpu']} ({header['cores']} cores); relvm GEMM ISA: "
          f"{header['gemm_isa']}", flush=True)
    results = []
    for name in args.models:
        for exporter in args.exporters:
            start = time.perf_counter()
            try:
                export_s = ensure(DECODERS[name], exporter, args.force)
            except StageError as e:
                result = {"model": name, "exporter": exporter, "status": "failed",
                          "stage": e.stage, "error": e.line}
            else:
                result = run_child(name, exporter, args)
                result["export_s"] = export_s
            results.append(result)
            print(f"== {name} {exporter}: " + ("ok" if result["status"] == "ok" else
                                               f"{result['stage']}: {result['error']}")
                  + f" ({time.perf_counter() - start:.0f} s)", flush=True)
    report(results, args, header)
    if args.json:
        Path(args.json).write_text(json.dumps({**header, "args": vars(args),
                                               "models": results}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
