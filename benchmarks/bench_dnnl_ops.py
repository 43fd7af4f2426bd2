"""oneDNN (relvm.backends.dnnl) vs relvm's own C kernels on single representative layers.

For the partitioner's cost model: each layer runs as one relvm program (``relvm.build``) and as
one dnnl region kernel, at 1 and 2 threads; medians of interleaved rounds (ms).

    PYTHONPATH=<installed relvm> python benchmarks/bench_dnnl_ops.py [--rounds 15]
"""

import argparse
import time

import numpy as np

import relvm
from relvm.backends import dnnl
from relvm.backends.external import Region, TensorInfo
from relvm.runtime.vm.kernels import Constants

# name, relay op call, data shape, weight shape (or None), attrs for the step, out shape
LAYERS = [
    ("conv3x3 64 @56", "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", (1, 64, 56, 56),
     (64, 64, 3, 3), {"padding": [1, 1, 1, 1]}, (1, 64, 56, 56), "nn.conv2d"),
    ("conv1x1 64->256 @56", "nn.conv2d(%x, %w)", (1, 64, 56, 56), (256, 64, 1, 1), {},
     (1, 256, 56, 56), "nn.conv2d"),
    ("conv3x3 256 @14", "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", (1, 256, 14, 14),
     (256, 256, 3, 3), {"padding": [1, 1, 1, 1]}, (1, 256, 14, 14), "nn.conv2d"),
    ("conv1x1 256->1024 @14", "nn.conv2d(%x, %w)", (1, 256, 14, 14), (1024, 256, 1, 1), {},
     (1, 1024, 14, 14), "nn.conv2d"),
    ("dwconv3x3 128 @56", "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=128)",
     (1, 128, 56, 56), (128, 1, 3, 3), {"padding": [1, 1, 1, 1], "groups": 128},
     (1, 128, 56, 56), "nn.conv2d"),
    ("conv3x3 s2 128->256 @28", "nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1])",
     (1, 128, 28, 28), (256, 128, 3, 3), {"strides": [2, 2], "padding": [1, 1, 1, 1]},
     (1, 256, 14, 14), "nn.conv2d"),
    ("dense 768x768 b16", "nn.dense(%x, %w)", (16, 768), (768, 768), {}, (16, 768),
     "nn.dense"),
    ("dense 768x768 b128", "nn.dense(%x, %w)", (128, 768), (768, 768), {}, (128, 768),
     "nn.dense"),
    ("batch_matmul 12x128x64x128", "nn.batch_matmul(%x, %w)", (12, 128, 64), (12, 128, 64),
     {}, (12, 128, 128), "nn.batch_matmul"),
    ("layer_norm 128x768", "nn.layer_norm(%x, %g, %b)", (128, 768), None, {},
     (128, 768), "nn.layer_norm"),
    ("softmax 12x128x128", "nn.softmax(%x)", (12, 128, 128), None, {}, (12, 128, 128),
     "nn.softmax"),
]


def _ty(shape):
    return f"Tensor[({', '.join(map(str, shape))}), float32]"


def relvm_runner(call, x, w, out, op):
    params, sig = {}, [f"%x: {_ty(x.shape)}"]
    if op == "nn.layer_norm":
        g, b = np.ones(x.shape[-1], np.float32), np.zeros(x.shape[-1], np.float32)
        sig += [f"%g: {_ty(g.shape)}", f"%b: {_ty(b.shape)}"]
        params = {"g": g, "b": b}
    elif w is not None and op == "nn.batch_matmul":
        sig.append(f"%w: {_ty(w.shape)}")
    elif w is not None:
        sig.append(f"%w: {_ty(w.shape)}")
        params = {"w": w}
    text = f"def @main({', '.join(sig)}) {{ {call} }}"
    exe = relvm.build(relvm.parse(text), params=params)
    vm = relvm.VirtualMachine(exe)
    args = [x, w] if op == "nn.batch_matmul" else [x]
    return lambda: vm.invoke_with_outputs("main", input_args=args, output_args=[out])


def dnnl_runner(op, attrs, x, w, out):
    if op == "nn.layer_norm":
        ins = [x, np.ones(x.shape[-1], np.float32), np.zeros(x.shape[-1], np.float32)]
    else:
        ins = [x] if w is None else [x, w]
    const = [i > 0 and op != "nn.batch_matmul" for i in range(len(ins))]
    reg = Region("bench", tuple(TensorInfo("float32", a.shape) for a in ins),
                 ({"op": op, "attrs": attrs, "args": [["in", i] for i in range(len(ins))],
                   "type": {"dtype": "float32", "shape": list(out.shape)}},),
                 (("step", 0),), tuple(const), tuple(None for _ in ins))
    kernel = dnnl.make_kernel(dnnl.compile_region(reg),
                              Constants([a for a, c in zip(ins, const) if c]))
    return lambda: kernel(*ins, out)


def median_ms(fns, rounds, reps):
    times = [[] for _ in fns]
    for _ in range(rounds):  # interleaved, so drift hits both alike
        for t, fn in zip(times, fns):
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            t.append((time.perf_counter() - start) / reps * 1e3)
    return [float(np.median(t)) for t in times]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"oneDNN {'.'.join(map(str, dnnl.lib.load().version))}")
    print(f"{'layer':28} thr  relvm ms  dnnl ms  relvm/dnnl")
    for name, call, xs, ws, attrs, outs, op in LAYERS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = None if ws is None else rng.standard_normal(ws).astype(np.float32)
        o1, o2 = np.empty(outs, np.float32), np.empty(outs, np.float32)
        a, b = relvm_runner(call, x, w, o1, op), dnnl_runner(op, attrs, x, w, o2)
        a(), b()
        np.testing.assert_allclose(o1, o2, rtol=1e-3, atol=1e-3 * max(1, np.abs(o1).max()))
        for threads in (1, 2):
            relvm.set_num_threads(threads)
            a(), b()
            once = min(median_ms([a, b], 1, 1))
            reps = max(1, int(20 / max(once, 0.01)))
            ra, rb = median_ms([a, b], args.rounds, reps)
            print(f"{name:28} {threads:3} {ra:9.3f} {rb:8.3f} {ra / rb:10.2f}")


if __name__ == "__main__":
    main()
