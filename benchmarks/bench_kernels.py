"""The C kernels: per-call overhead, GEMM and conv throughput against raw OpenBLAS sgemm, and
large elementwise ops, with ONNX Runtime beside them when it is installed.

Run: ``python benchmarks/bench_kernels.py [--threads K] [--quick]``. Prints medians.

* overhead: one small call (16 elements) through the C backend, the NumPy reference backend,
  and NumPy's own ufunc, in nanoseconds.
* dense: GFLOP/s of ``nn.dense`` (relvm's own GEMM, the weight a constant packed once, as a VM
  gives it) against ``cblas_sgemm`` called directly (ctypes) on OpenBLAS.
* conv2d: GFLOP/s against the sgemm of the equivalent GEMM (M = out channels, N = output
  pixels, K = in channels / groups x kernel area, per image and group), and against ORT's Conv.
* pools: microseconds of max/avg pools of CNNs (ResNet's stem pool, YOLO's SPPF, an Inception
  average) against ORT's MaxPool/AveragePool, the two taking turns.

Benchmarks on a shared machine are noisy: run it on an idle one, each peer alone.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_us, median_us, optional  # noqa: E402

from relvm.backends import c, native, numpy_ref  # noqa: E402
from relvm.ops import OPS  # noqa: E402
from relvm.runtime import threads  # noqa: E402
from relvm.runtime.executable import KernelEntry  # noqa: E402
from relvm.runtime.vm.kernels import Constants  # noqa: E402


def entry(op: str, inputs, outputs, attrs=None) -> KernelEntry:
    full = {k: list(v) if isinstance(v, tuple) else v
            for k, v in OPS[op].make_attrs(attrs or {}).items()}
    return KernelEntry(op, op, full, tuple(inputs), tuple(outputs))


# --- per-call overhead ------------------------------------------------------------------------

def overhead() -> None:
    print("per-call cost, 16 float32 elements (ns): c backend | numpy_ref backend | numpy ufunc")
    a, b = np.ones(16, np.float32), np.ones(16, np.float32)
    o = np.empty(16, np.float32)
    m, mo = np.ones((4, 16), np.float32), np.empty((4, 16), np.float32)
    row = np.ones(16, np.float32)
    cases = [
        ("nn.relu", ["float32"], (a, o), lambda: np.maximum(a, 0, out=o)),
        ("add", ["float32"] * 2, (a, b, o), lambda: np.add(a, b, out=o)),
        ("add (4,16)+(16,)", ["float32"] * 2, (m, row, mo), lambda: np.add(m, row, out=mo)),
        ("nn.softmax (4,16)", ["float32"], (m, mo), None),
        ("sum axis=1 (4,16)", ["float32"], (m, np.empty(4, np.float32)), None),
    ]
    for label, ins, args, ufunc in cases:
        op, attrs = label.split(" ")[0], {"axis": [1]} if label.startswith("sum") else {}
        e = entry(op, ins, ["float32"], attrs)
        kc, kn = c.make_kernel(e), numpy_ref.make_kernel(e)
        tc = median_us(lambda: kc(*args), number=20000) * 1e3
        tn = median_us(lambda: kn(*args), number=5000) * 1e3
        tu = median_us(ufunc, number=20000) * 1e3 if ufunc else float("nan")
        print(f"  {label:22s} {tc:8.0f} | {tn:8.0f} | {tu:8.0f}")
    x, w = np.ones((1, 16), np.float32), np.ones((8, 16), np.float32)
    y = np.empty((1, 8), np.float32)
    kd = c.make_kernel(entry("nn.dense", ["float32"] * 2, ["float32"]))
    t = median_us(lambda: kd(x, w, y), number=20000) * 1e3
    print(f"  {'nn.dense 1x16 @ 8x16':22s} {t:8.0f}")


# --- GEMM -------------------------------------------------------------------------------------

def raw_sgemm():
    """cblas_sgemm of the OpenBLAS relvm uses, through ctypes: the throughput to match."""
    lib = ctypes.CDLL(native._openblas_path())
    f = lib.scipy_cblas_sgemm
    f.argtypes = ([ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
                  + [ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int])

    def sgemm(a, b_t, out):  # out = a @ b_t.T, row-major
        m, k = a.shape
        n = b_t.shape[0]
        f(101, 111, 112, m, n, k, 1.0, a.ctypes.data, k, b_t.ctypes.data, k, 0.0,
          out.ctypes.data, n)
    return sgemm


def ort_session(graph_fn, threads_: int):
    onnx, ort = optional("onnx"), optional("onnxruntime")
    if onnx is None or ort is None:
        return None
    model = graph_fn(onnx.helper, onnx.TensorProto)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads_
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def ort_gemm(m, n, k, threads_):
    def graph(h, tp):
        w = h.make_tensor("w", tp.FLOAT, [n, k], np.random.rand(n * k).astype(np.float32))
        node = h.make_node("Gemm", ["x", "w"], ["y"], transB=1)
        g = h.make_graph([node], "g", [h.make_tensor_value_info("x", tp.FLOAT, [m, k])],
                         [h.make_tensor_value_info("y", tp.FLOAT, [m, n])], [w])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    return ort_session(graph, threads_)


def dense(shapes, threads_: int) -> None:
    print(f"nn.dense GFLOP/s ({threads_} threads): relvm | raw sgemm | relvm/sgemm | ORT Gemm")
    sgemm = raw_sgemm()
    for m, n, k in shapes:
        x = np.random.rand(m, k).astype(np.float32)
        w = np.random.rand(n, k).astype(np.float32)
        w.flags.writeable = False  # a model's weight: one of the VM's constants
        kernel = c.make_kernel(entry("nn.dense", ["float32"] * 2, ["float32"]), Constants([w]))
        y = np.empty((m, n), np.float32)
        flops = 2.0 * m * n * k
        t_r = median_us(lambda: kernel(x, w, y), repeat=9)
        t_b = median_us(lambda: sgemm(x, w, y), repeat=9)
        sess = ort_gemm(m, n, k, threads_)
        t_o = median_us(lambda: sess.run(None, {"x": x}), repeat=9) if sess else float("nan")
        gf = [flops / t / 1e3 for t in (t_r, t_b, t_o)]
        print(f"  {m}x{n}x{k:<6} {gf[0]:7.1f} | {gf[1]:7.1f} | {t_b / t_r:5.2f} | {gf[2]:7.1f}")


# --- conv2d -----------------------------------------------------------------------------------

def ort_conv(x_shape, w, attrs, threads_):
    def graph(h, tp):
        wt = h.make_tensor("w", tp.FLOAT, list(w.shape), w.reshape(-1))
        pads = attrs.get("padding", [0, 0])
        node = h.make_node("Conv", ["x", "w"], ["y"], strides=attrs.get("strides", [1, 1]),
                           pads=[pads[0], pads[1], pads[0], pads[1]],
                           group=attrs.get("groups", 1))
        g = h.make_graph([node], "g", [h.make_tensor_value_info("x", tp.FLOAT, list(x_shape))],
                         [h.make_tensor_value_info("y", tp.FLOAT, None)], [wt])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    return ort_session(graph, threads_)


CONVS = [
    ("resnet 3x3 64->64 56x56", (1, 64, 56, 56), (64, 64, 3, 3), {"padding": [1, 1]}),
    ("resnet 3x3 128 28x28 b8", (8, 128, 28, 28), (128, 128, 3, 3), {"padding": [1, 1]}),
    ("resnet 1x1 256->64 56x56", (1, 256, 56, 56), (64, 256, 1, 1), {}),
    ("stem 7x7/2 3->64 224", (1, 3, 224, 224), (64, 3, 7, 7),
     {"padding": [3, 3], "strides": [2, 2]}),
    ("3x3/2 256 14x14", (1, 256, 14, 14), (256, 256, 3, 3),
     {"padding": [1, 1], "strides": [2, 2]}),
    ("depthwise 3x3 144 56x56", (1, 144, 56, 56), (144, 1, 3, 3),
     {"padding": [1, 1], "groups": 144}),
    ("depthwise 3x3/2 96 112", (1, 96, 112, 112), (96, 1, 3, 3),
     {"padding": [1, 1], "groups": 96, "strides": [2, 2]}),
]


def conv(threads_: int, cases) -> None:
    print(f"nn.conv2d GFLOP/s ({threads_} threads): relvm | sgemm of the same GEMM | "
          "relvm/sgemm | ORT Conv")
    sgemm = raw_sgemm()
    for label, xs, ws, attrs in cases:
        x = np.random.rand(*xs).astype(np.float32)
        w = np.random.rand(*ws).astype(np.float32)
        want = OPS["nn.conv2d"].reference(OPS["nn.conv2d"].make_attrs(attrs), x[:1], w)
        y = np.empty((xs[0],) + want.shape[1:], np.float32)
        kernel = c.make_kernel(entry("nn.conv2d", ["float32"] * 2, ["float32"], attrs))
        g = attrs.get("groups", 1)
        m, n, k = ws[0] // g, y.shape[2] * y.shape[3], ws[1] * ws[2] * ws[3]
        flops = 2.0 * xs[0] * g * m * n * k
        t_r = median_us(lambda: kernel(x, w, y), repeat=9)
        # The GEMM a conv does, once per image and group, on ready-made (unrolled) operands.
        a, bt, out = np.random.rand(m, k).astype(np.float32), \
            np.random.rand(n, k).astype(np.float32), np.empty((m, n), np.float32)

        def gemms():
            for _ in range(xs[0] * g):
                sgemm(a, bt, out)
        t_b = median_us(gemms, repeat=9)
        sess = ort_conv(xs, w, attrs, threads_)
        t_o = median_us(lambda: sess.run(None, {"x": x}), repeat=9) if sess else float("nan")
        gf = [flops / t / 1e3 for t in (t_r, t_b, t_o)]
        print(f"  {label:26s} {gf[0]:7.1f} | {gf[1]:7.1f} | {t_b / t_r:5.2f} | {gf[2]:7.1f}")


# --- pooling ----------------------------------------------------------------------------------

POOLS = [
    ("resnet max 3x3/2 64x112x112", "nn.max_pool2d", (1, 64, 112, 112),
     {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    ("sppf max 5x5/1 128x20x20", "nn.max_pool2d", (1, 128, 20, 20),
     {"pool_size": [5, 5], "padding": [2, 2]}),
    ("sppf max 5x5/1 256x20x20", "nn.max_pool2d", (1, 256, 20, 20),
     {"pool_size": [5, 5], "padding": [2, 2]}),
    ("inception avg 3x3/1 192x28x28", "nn.avg_pool2d", (1, 192, 28, 28),
     {"pool_size": [3, 3], "padding": [1, 1]}),
]


def ort_pool(op, x_shape, attrs, threads_):
    def graph(h, tp):
        pads = attrs.get("padding", [0, 0])
        kw = {"kernel_shape": attrs["pool_size"], "strides": attrs.get("strides", [1, 1]),
              "pads": [pads[0], pads[1], pads[0], pads[1]]}
        if op == "nn.avg_pool2d":
            kw["count_include_pad"] = int(attrs.get("count_include_pad", False))
        node = h.make_node("MaxPool" if op == "nn.max_pool2d" else "AveragePool", ["x"], ["y"],
                           **kw)
        g = h.make_graph([node], "g", [h.make_tensor_value_info("x", tp.FLOAT, list(x_shape))],
                         [h.make_tensor_value_info("y", tp.FLOAT, None)])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    return ort_session(graph, threads_)


def pools(threads_: int) -> None:
    print(f"pooling, us ({threads_} threads, taking turns): relvm | ORT")
    for label, op, xs, attrs in POOLS:
        x = np.random.randn(*xs).astype(np.float32)
        want = OPS[op].reference(OPS[op].make_attrs(attrs), x)
        y = np.empty(want.shape, np.float32)
        kernel = c.make_kernel(entry(op, ["float32"], ["float32"], attrs))
        fns = {"relvm": lambda: kernel(x, y)}
        sess = ort_pool(op, xs, attrs, threads_)
        if sess:
            fns["ort"] = lambda: sess.run(None, {"x": x})
        t = interleaved_us(fns)
        print(f"  {label:30s} {t['relvm']:8.1f} | {t.get('ort', float('nan')):8.1f}")


# --- large elementwise ------------------------------------------------------------------------

def elementwise(threads_: int) -> None:
    n = 1 << 22
    x = np.random.randn(n).astype(np.float32)
    y = np.empty_like(x)
    print(f"elementwise over {n} float32 ({threads_} threads), us: relvm | numpy")
    for op, ufunc in [("nn.relu", lambda: np.maximum(x, 0, out=y)),
                      ("exp", lambda: np.exp(x, out=y)), ("tanh", lambda: np.tanh(x, out=y)),
                      ("sigmoid", None), ("erf", None)]:
        k = c.make_kernel(entry(op, ["float32"], ["float32"]))
        t_r = median_us(lambda: k(x, y), repeat=9)
        t_n = median_us(ufunc, repeat=9) if ufunc else float("nan")
        print(f"  {op:10s} {t_r:9.0f} | {t_n:9.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=threads.get_num_threads())
    p.add_argument("--quick", action="store_true", help="fewer shapes")
    args = p.parse_args()
    threads.set_num_threads(args.threads)
    print(native.blas_info()["config"], "| OpenBLAS on relvm's pool:",
          native.blas_info()["uses_relvm_pool"])
    overhead()
    shapes = [(1024, 1024, 1024), (256, 768, 768), (128, 3072, 768), (1, 4096, 4096)]
    dense(shapes[:2] if args.quick else shapes, args.threads)
    conv(args.threads, CONVS[:3] if args.quick else CONVS)
    pools(args.threads)
    elementwise(args.threads)


if __name__ == "__main__":
    main()
