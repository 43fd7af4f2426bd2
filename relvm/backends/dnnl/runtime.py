"""Running a oneDNN artifact: ``make_kernel(artifact, constants) -> kernel``.

A kernel specialises per tuple of input shapes: the first call with new shapes makes the
memory descriptors, primitives and scratch buffers (a :class:`_Plan`), later calls only point
the plan's memories at the callers' arrays and execute.

Layout: every 4-d value a conv or pool makes, and every residual operand of a conv, lives in one
*activation layout* per process (:func:`activation_layout`: NHWC where oneDNN's convs choose it,
as 3.2 does with brgconv on AVX-512 and AVX2); region inputs are reordered into it once, results
out of it once, at the region's edges. Everything else (matmuls, layer_norm, softmax) is plain,
so those read and write the callers' arrays in place. ResNet-18 at 1 thread (AVX-512, AMD EPYC),
oneDNN's conv time per call: NHWC 31.9 ms, nChw16c 33.4 ms (``RELVM_DNNL_LAYOUT=blocked16``
forces it, for such measurements). Mixed layouts (the previous per-conv choice) made every conv
with a residual post-op ``ref:any``: 3,050 ms for the model instead of 33.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from ...errors import RelvmKernelError
from . import artifact as A
from . import lib as L
from .threads import follow_relvm

_ALIGN = 64


def _contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return strides[::-1]


def _view(shape, view) -> tuple[list[int], list[int]]:
    """oneDNN dims and strides of a C-contiguous array of ``shape``, seen through ``view``:
    None, ("perm", axes), "flatten" (all but the last axis merged) or "swap" (last two)."""
    shape = [int(d) for d in shape] or [1]
    strides = _contiguous_strides(shape)
    if view == "flatten":
        lead = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        return [lead, shape[-1]], [shape[-1], 1]
    if isinstance(view, tuple) and view[0] == "reshape":
        shape = [int(d) for d in view[1]]
        return shape, _contiguous_strides(shape)
    if view == "swap":
        shape[-2:], strides[-2:] = shape[:-3:-1], strides[:-3:-1]
    elif view is not None:
        _, axes = view
        shape, strides = [shape[a] for a in axes], [strides[a] for a in axes]
    return shape, strides


def _spread(shape, rank: int, along) -> list[int]:
    """A post-op/binary operand's shape at the result's rank: a 1-D bias along an axis, or
    NumPy's left-padding with ones."""
    if along is not None:
        if len(shape) != 1 or along >= rank:
            raise RelvmKernelError(f"dnnl: a tensor {tuple(shape)} to add along axis {along} "
                                   f"of a rank-{rank} result")
        out = [1] * rank
        out[along] = shape[0]
        return out
    if len(shape) > rank:
        raise RelvmKernelError(f"dnnl: operand {tuple(shape)} has more axes than the result")
    return [1] * (rank - len(shape)) + list(shape)


def _window_len(size, k, s, d, pl, pr, ceil_mode) -> int:
    """relvm's window count (ops/window.py's window_len, on ints)."""
    span = size + pl + pr - (d * (k - 1) + 1)
    if not ceil_mode:
        return span // s + 1
    rounded_up = pl + pr - (d * (k - 1) + 1) + s - 1
    starts_inside = pl - 1
    offset = rounded_up if rounded_up <= starts_inside else max(rounded_up - s, starts_inside)
    return (size + offset) // s + 1


class _Weights:
    """What one constant array became, per oneDNN layout: made once, shared by every kernel
    (and thread) of a VM through ``constants.prepared``."""

    def __init__(self):
        self.lock = threading.Lock()
        self.made: list[tuple[Any, np.ndarray]] = []  # (memory desc clone, buffer)


class _Plan:
    """Everything made for one tuple of input shapes; freed with it."""

    def __init__(self, kernel: "_Kernel"):
        self.k, self.L = kernel, kernel.L
        self.k_values: dict[tuple, dict] = {}  # ref -> shape, where it lives, kept layout
        self.ffi, self.lib = self.L.ffi, self.L.lib
        self.mds, self.pds, self.prims, self.mems = [], [], [], []
        self.keep: list[Any] = []       # buffers and cffi objects the plan points into
        self.binds: list[tuple[Any, int]] = []  # (memory, index into the call's arrays)
        self.steps: list[tuple[Any, Any, int]] = []  # (primitive, exec args, nargs)
        self.scratch_size = 0
        self.scratch_users: list[tuple[Any, list]] = []

    def __del__(self):
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        for p in self.prims:
            lib.dnnl_primitive_destroy(p)
        for pd in self.pds:
            lib.dnnl_primitive_desc_destroy(pd)
        for m in self.mems:
            lib.dnnl_memory_destroy(m)
        for md in self.mds:
            lib.dnnl_memory_desc_destroy(md)

    # --- objects -------------------------------------------------------------------------------

    def md(self, dims, strides=None, dtype: int = L.F32):
        """A memory desc of ``dtype``: plain with ``strides``, or format_tag_any when None."""
        if len(dims) > L.MAX_NDIMS:
            raise RelvmKernelError(f"dnnl: rank {len(dims)} is past oneDNN's {L.MAX_NDIMS}")
        out = self.ffi.new("dnnl_memory_desc_t *")
        d = self.ffi.new("dnnl_dims_t", [int(x) for x in dims])
        if strides is None:
            self.L.check("dnnl_memory_desc_create_with_tag",
                         self.lib.dnnl_memory_desc_create_with_tag(out, len(dims), d, dtype,
                                                                   L.FORMAT_ANY))
        else:
            s = self.ffi.new("dnnl_dims_t", [int(x) for x in strides])
            self.L.check("dnnl_memory_desc_create_with_strides",
                         self.lib.dnnl_memory_desc_create_with_strides(out, len(dims), d, dtype,
                                                                       s))
        self.mds.append(out[0])
        return out[0]

    def buffer(self, md) -> int:
        """A fresh buffer for ``md``, owned by the plan; its address."""
        size = int(self.lib.dnnl_memory_desc_get_size(md))
        buf = np.empty(size + _ALIGN, np.uint8)
        self.keep.append(buf)
        return buf.ctypes.data + (-buf.ctypes.data) % _ALIGN

    def memory(self, md, address: int | None = None, bind: int | None = None):
        out = self.ffi.new("dnnl_memory_t *")
        handle = self.ffi.cast("void *", address if address is not None else 0)
        self.L.check("dnnl_memory_create",
                     self.lib.dnnl_memory_create(out, md, self.L.engine, handle))
        self.mems.append(out[0])
        if bind is not None:
            self.binds.append((out[0], bind))
        return out[0]

    def query(self, pd, what: int, index: int = 0):
        return self.lib.dnnl_primitive_desc_query_md(pd, what, index)

    def add(self, pd, args: list[tuple[int, Any]]) -> None:
        """Make the primitive of ``pd`` and queue it with ``args`` (+ its scratchpad)."""
        self.pds.append(pd)
        prim = self.ffi.new("dnnl_primitive_t *")
        self.L.check("dnnl_primitive_create", self.lib.dnnl_primitive_create(prim, pd))
        self.prims.append(prim[0])
        self.k.impls.append(self.impl(pd))
        spad = self.query(pd, L.QUERY_SCRATCHPAD_MD)
        spad_size = int(self.lib.dnnl_memory_desc_get_size(spad)) if spad != self.ffi.NULL \
            else 0
        if spad_size > 0:
            self.scratch_size = max(self.scratch_size, spad_size)
            args = args + [(L.ARG_SCRATCHPAD, None)]
            self.scratch_users.append((spad, args))
        self.steps.append((prim[0], args))

    def reorder(self, src_md, src_mem, dst_md, dst_mem) -> None:
        pd = self.ffi.new("dnnl_primitive_desc_t *")
        self.L.check("dnnl_reorder_primitive_desc_create",
                     self.lib.dnnl_reorder_primitive_desc_create(
                         pd, src_md, self.L.engine, dst_md, self.L.engine, self.ffi.NULL))
        self.add(pd[0], [(L.ARG_FROM, src_mem), (L.ARG_TO, dst_mem)])

    def attr(self, post_ops: list[dict], dst_shape, view, act: bool = False) -> tuple[Any, list]:
        """A primitive attr (user scratchpad, ``post_ops``) and the post-ops' exec args."""
        attr = self.ffi.new("dnnl_primitive_attr_t *")
        self.L.check("dnnl_primitive_attr_create", self.lib.dnnl_primitive_attr_create(attr))
        attr = self.ffi.gc(attr[0], self.lib.dnnl_primitive_attr_destroy)
        self.L.check("dnnl_primitive_attr_set_scratchpad_mode",
                     self.lib.dnnl_primitive_attr_set_scratchpad_mode(attr, L.SCRATCHPAD_USER))
        args = []
        if post_ops:
            ops = self.ffi.new("dnnl_post_ops_t *")
            self.L.check("dnnl_post_ops_create", self.lib.dnnl_post_ops_create(ops))
            ops = self.ffi.gc(ops[0], self.lib.dnnl_post_ops_destroy)
            for i, po in enumerate(post_ops):
                if po["op"] == "eltwise":
                    self.L.check("dnnl_post_ops_append_eltwise",
                                 self.lib.dnnl_post_ops_append_eltwise(
                                     ops, L.ELTWISE[po["alg"]], po["alpha"], po["beta"]))
                    continue
                md, mem = self.operand(po["src"], dst_shape, po["along"], view, act)
                self.L.check("dnnl_post_ops_append_binary",
                             self.lib.dnnl_post_ops_append_binary(ops, L.BINARY[po["alg"]], md))
                args.append((L.arg_post_op_src1(i), mem))
            self.L.check("dnnl_primitive_attr_set_post_ops",
                         self.lib.dnnl_primitive_attr_set_post_ops(attr, ops))
        self.keep.append(attr)
        return attr, args

    # --- values --------------------------------------------------------------------------------
    # A value's record: "shape" (relvm's), where its plain C-contiguous copy lives ("address" or
    # "bind", absent while it exists only in the activation layout), and "act": view -> (md,
    # address, bind) of its copies in the activation layout, seen through that view.

    def act_md(self, dims):
        """The activation layout for 4-d (N, C, H, W) ``dims``: NHWC strides when oneDNN's convs
        prefer it (:func:`activation_layout`), else plain; of the region's activation type
        (float32, or bfloat16 for a ``"bf16"`` artifact)."""
        dims = [int(d) for d in dims]
        if len(dims) != 4:
            return self.md(dims, _contiguous_strides(dims))
        if self.k.layout in _BLOCKED_TAGS:
            out = self.ffi.new("dnnl_memory_desc_t *")
            self.L.check("dnnl_memory_desc_create_with_tag",
                         self.lib.dnnl_memory_desc_create_with_tag(
                             out, 4, self.ffi.new("dnnl_dims_t", dims), self.k.act_type,
                             _BLOCKED_TAGS[self.k.layout]))
            self.mds.append(out[0])
            return out[0]
        n, c, h, w = dims
        strides = [h * w * c, 1, w * c, c] if self.k.layout == "nhwc" else \
            _contiguous_strides(dims)
        return self.md(dims, strides, self.k.act_type)

    def _located(self, v) -> bool:
        return "address" in v or "bind" in v

    def plain(self, ref, view=None):
        """(md, memory) of value ``ref`` as a plain array seen through ``view``; a value that
        lives only in the activation layout is reordered to plain once, here."""
        v = self.k_values[ref]
        if not self._located(v):
            (aview, (amd, addr, bind)), = list(v["act"].items())[:1]
            dims, strides = _view(v["shape"], aview)
            pmd = self.md(dims, strides)
            v["address"] = self.buffer(pmd)
            self.reorder(amd, self.memory(amd, addr, bind), pmd,
                         self.memory(pmd, v["address"]))
        dims, strides = _view(v["shape"], view)
        md = self.md(dims, strides)
        return md, self.memory(md, v.get("address"), v.get("bind"))

    def act(self, ref, view=None):
        """(md, memory) of 4-d value ``ref`` (seen through ``view``) in the activation layout;
        a plain value is reordered into it once per plan, whatever number of primitives read
        it (a ResNet block's input feeds two convs)."""
        v = self.k_values[ref]
        acts = v.setdefault("act", {})
        if view not in acts:
            pmd, pmem = self.plain(ref, view)
            want = self.act_md(_view(v["shape"], view)[0])
            if self.lib.dnnl_memory_desc_equal(pmd, want):
                acts[view] = (pmd, v.get("address"), v.get("bind"))
            else:
                addr = self.buffer(want)
                self.reorder(pmd, pmem, want, self.memory(want, addr))
                acts[view] = (want, addr, None)
        md, addr, bind = acts[view]
        return md, self.memory(md, addr, bind)

    def is_act(self, ref) -> bool:
        """Value ``ref`` lives in the activation layout (a conv's or pool's result)."""
        return bool(self.k_values[ref].get("act")) and not self._located(self.k_values[ref])

    def operand(self, ref, dst_shape, along, view, act=False):
        """(md, memory) of a binary operand broadcast against a result of ``dst_shape``: in the
        activation layout when ``act`` and it has the result's full shape (a residual): oneDNN's
        jit kernels take a full-size operand only in the result's layout (else ``ref:any``)."""
        v = self.k_values[ref]
        shape = _spread(v["shape"], len(dst_shape), along)
        for a, b in zip(shape, dst_shape):
            if a not in (1, b):
                raise RelvmKernelError(f"dnnl: operand {tuple(v['shape'])} does not broadcast "
                                       f"to {tuple(dst_shape)} without growing it")
        if act and list(shape) == list(dst_shape) and list(v["shape"]) == list(dst_shape):
            return self.act(ref, view)
        if not self._located(v):
            self.plain(ref)
        dims, strides = _view(shape, view)
        md = self.md(dims, strides)
        return md, self.memory(md, v.get("address"), v.get("bind"))

    def source(self, ref, view, wanted):
        """The memory of value ``ref`` in layout ``wanted`` (a weight computed in the region, a
        matmul's bfloat16 operand): the value itself when it has that layout, else a copy
        reordered at each call."""
        md, mem = self.plain(ref, view)
        if self.lib.dnnl_memory_desc_equal(md, wanted):
            return mem
        to = self.memory(wanted, self.buffer(wanted))
        self.reorder(md, mem, wanted, to)
        return to

    def impl(self, pd) -> str:
        """The implementation oneDNN chose for ``pd`` ("brgconv:avx512_core", "ref:any")."""
        out = self.ffi.new("char **")
        self.L.check("dnnl_primitive_desc_query",
                     self.lib.dnnl_primitive_desc_query(pd, L.QUERY_IMPL_INFO_STR, 0, out))
        return self.ffi.string(out[0]).decode()

    def weights(self, ref, view, wanted):
        """A constant weight in layout ``wanted``, reordered once per VM and layout."""
        arr = self.k.arrays[ref[1]]
        dims, strides = _view(arr.shape, view)
        key = ("relvm-dnnl-weights", tuple(dims), tuple(strides))
        cache = self.k.constants.prepared(arr, key, _Weights)
        with cache.lock:
            for md, buf in cache.made:
                if self.lib.dnnl_memory_desc_equal(md, wanted):
                    break
            else:
                buf = self._reorder_now(arr, dims, strides, wanted)
                clone = self.ffi.new("dnnl_memory_desc_t *")
                self.L.check("dnnl_memory_desc_clone",
                             self.lib.dnnl_memory_desc_clone(clone, wanted))
                md = clone[0]  # lives as long as the VM's constants (never freed)
                cache.made.append((md, buf))
                self.k.reorders += 1
        return self.memory(wanted, buf.ctypes.data)

    def _reorder_now(self, arr, dims, strides, wanted) -> np.ndarray:
        size = int(self.lib.dnnl_memory_desc_get_size(wanted))
        buf = np.empty(max(size, 1), np.uint8)
        src_md = self.md(dims, strides)
        src = self.memory(src_md, arr.ctypes.data)
        dst = self.memory(wanted, buf.ctypes.data)
        pd = self.ffi.new("dnnl_primitive_desc_t *")
        self.L.check("dnnl_reorder_primitive_desc_create",
                     self.lib.dnnl_reorder_primitive_desc_create(
                         pd, src_md, self.L.engine, wanted, self.L.engine, self.ffi.NULL))
        self.pds.append(pd[0])
        prim = self.ffi.new("dnnl_primitive_t *")
        self.L.check("dnnl_primitive_create", self.lib.dnnl_primitive_create(prim, pd[0]))
        self.prims.append(prim[0])
        args = self.ffi.new("dnnl_exec_arg_t[]", [(L.ARG_FROM, src), (L.ARG_TO, dst)])
        self.L.check("dnnl_primitive_execute",
                     self.lib.dnnl_primitive_execute(prim[0], self.k.stream, 2, args))
        self.L.check("dnnl_stream_wait", self.lib.dnnl_stream_wait(self.k.stream))
        return buf

    def finish(self) -> None:
        """Give every primitive the shared scratchpad and freeze the exec args."""
        if self.scratch_size:
            base = self.buffer_bytes(self.scratch_size)
            for md, args in self.scratch_users:
                args[-1] = (L.ARG_SCRATCHPAD, self.memory(md, base))
        frozen = []
        for prim, args in self.steps:
            c = self.ffi.new("dnnl_exec_arg_t[]", [(a, m) for a, m in args])
            frozen.append((prim, c, len(args)))
        self.steps = frozen

    def buffer_bytes(self, size: int) -> int:
        buf = np.empty(size + _ALIGN, np.uint8)
        self.keep.append(buf)
        return buf.ctypes.data + (-buf.ctypes.data) % _ALIGN

    def run(self, arrays) -> None:
        ffi, lib = self.ffi, self.lib
        for mem, i in self.binds:
            lib.dnnl_memory_set_data_handle(mem, ffi.cast("void *", arrays[i].ctypes.data))
        for prim, args, n in self.steps:
            status = lib.dnnl_primitive_execute(prim, self.k.stream, n, args)
            if status:
                self.L.check("dnnl_primitive_execute", status)
        self.L.check("dnnl_stream_wait", lib.dnnl_stream_wait(self.k.stream))


_layout: list[str] = []
_BLOCKED_TAGS = {"blocked16": 78, "blocked8": 102}  # dnnl_aBcd16b, dnnl_aBcd8b


def activation_layout(lib: L.Library) -> str:
    """"nhwc" when oneDNN's convs, left to choose (``format_tag_any``), take NHWC, else "plain".

    Asked once per process of a 3x3 64->64 conv at 56x56, a ResNet layer: oneDNN 3.2 answers
    NHWC ("acdb") with brgconv on AVX-512 and on AVX2 alike. Every conv, pool and residual
    operand in a region then uses that one layout, so that oneDNN's jit kernels run and
    reorders happen only at the region's edges: a conv whose src, dst and binary post-op
    operand disagree runs ``ref:any`` (ResNet-18's residual convs took 400 ms each).
    """
    if os.environ.get("RELVM_DNNL_LAYOUT"):
        return os.environ["RELVM_DNNL_LAYOUT"]
    if not _layout:
        ffi, dl = lib.ffi, lib.lib
        mds = []
        for dims in ([1, 64, 56, 56], [64, 64, 3, 3], [1, 64, 56, 56]):
            md = ffi.new("dnnl_memory_desc_t *")
            lib.check("dnnl_memory_desc_create_with_tag", dl.dnnl_memory_desc_create_with_tag(
                md, 4, ffi.new("dnnl_dims_t", dims), L.F32, L.FORMAT_ANY))
            mds.append(md[0])
        nhwc = ffi.new("dnnl_memory_desc_t *")
        lib.check("dnnl_memory_desc_create_with_strides", dl.dnnl_memory_desc_create_with_strides(
            nhwc, 4, ffi.new("dnnl_dims_t", [1, 64, 56, 56]), L.F32,
            ffi.new("dnnl_dims_t", [56 * 56 * 64, 1, 56 * 64, 64])))
        pd = ffi.new("dnnl_primitive_desc_t *")
        s, d, p = (ffi.new("dnnl_dims_t", v) for v in ([1, 1], [0, 0], [1, 1]))
        status = dl.dnnl_convolution_forward_primitive_desc_create(
            pd, lib.engine, L.FORWARD_INFERENCE, L.CONVOLUTION_DIRECT, mds[0], mds[1], ffi.NULL,
            mds[2], s, d, p, p, ffi.NULL)
        chosen = "plain"
        if status == L.SUCCESS:
            src = dl.dnnl_primitive_desc_query_md(pd[0], L.QUERY_SRC_MD, 0)
            chosen = "nhwc" if dl.dnnl_memory_desc_equal(src, nhwc[0]) else "plain"
            dl.dnnl_primitive_desc_destroy(pd[0])
        for md in mds + [nhwc[0]]:
            dl.dnnl_memory_desc_destroy(md)
        _layout.append(chosen)
    return _layout[0]


class _Kernel:
    """One VM thread's kernel for one artifact: a stream and a plan per input shapes."""

    def __init__(self, spec: dict, constants: Any):
        self.L = L.load()
        follow_relvm()
        self.spec, self.constants = spec, constants
        self.n_in = len(spec["inputs"])
        self.reorders = 0  # constant weights reordered by this kernel (tests count them)
        stream = self.L.ffi.new("dnnl_stream_t *")
        self.L.check("dnnl_stream_create",
                     self.L.lib.dnnl_stream_create(stream, self.L.engine, L.STREAM_DEFAULT))
        self.stream = self.L.ffi.gc(stream[0], self.L.lib.dnnl_stream_destroy)
        self.output_of: dict[int, int] = {}
        self.copies: list[tuple[tuple, int]] = []  # (ref, output index) filled by copying
        for k, ref in enumerate(spec["outputs"]):
            if ref[0] == "prim" and ref[1] not in self.output_of:
                self.output_of[ref[1]] = self.n_in + k
            else:
                self.copies.append((ref, self.n_in + k))
        self.act_type = L.BF16 if spec["precision"] == "bf16" else L.F32
        self.layout = activation_layout(self.L)
        self.impls: list[str] = []  # oneDNN's implementation of every primitive made (tests)
        self.plans: dict[tuple, _Plan] = {}
        self.arrays: tuple = ()

    def is_constant(self, ref) -> bool:
        return (ref[0] == "in" and self.spec["inputs"][ref[1]]["constant"]
                and self.constants is not None and self.constants.holds(self.arrays[ref[1]]))

    def plan(self, arrays) -> _Plan:
        from .prims import BUILDERS  # prims imports this module
        plan = _Plan(self)
        for i, a in enumerate(arrays[:self.n_in]):
            if a.dtype != np.float32 or a.ndim != self.spec["inputs"][i]["rank"]:
                raise RelvmKernelError(f"dnnl: input {i} is {a.dtype} of rank {a.ndim}; the "
                                       f"region takes float32 of rank "
                                       f"{self.spec['inputs'][i]['rank']}")
            plan.k_values[("in", i)] = {"shape": list(a.shape), "bind": i}
        for j, p in enumerate(self.spec["prims"]):
            BUILDERS[p["kind"]](plan, j, p)
        for k, ref in enumerate(self.spec["outputs"]):
            got, want = list(arrays[self.n_in + k].shape), plan.k_values[ref]["shape"]
            if got != want or arrays[self.n_in + k].dtype != np.float32:
                raise RelvmKernelError(f"dnnl: output {k} is {arrays[self.n_in + k].dtype} "
                                       f"{tuple(got)}; the region computes float32 "
                                       f"{tuple(want)}")
        plan.finish()
        return plan

    def __call__(self, *arrays) -> None:
        if len(arrays) != self.n_in + len(self.spec["outputs"]):
            raise RelvmKernelError(f"dnnl: kernel called with {len(arrays)} arrays, expected "
                                   f"{self.n_in} inputs and {len(self.spec['outputs'])} outputs")
        self.arrays = arrays
        key = tuple(a.shape for a in arrays[:self.n_in])
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.plan(arrays)
        plan.run(arrays)
        for ref, k in self.copies:
            src = arrays[ref[1]] if ref[0] == "in" else arrays[self.output_of[ref[1]]]
            np.copyto(arrays[k], src)
        self.arrays = ()


def make_kernel(artifact: bytes, constants: Any = None):
    """The kernel ``kernel(*inputs, *outputs)`` running ``artifact`` with oneDNN.

    Parameters
    ----------
    artifact : bytes
        What ``compile_region`` made; checked strictly (RelvmFormatError, section "extern").
    constants : optional
        The VM's constants (``holds``, ``prepared``): constant weights are reordered into
        oneDNN's layouts once per VM.
    """
    spec = A.read(artifact)
    why = L.available_bf16() if spec["precision"] == "bf16" else None
    if why is not None:
        raise RelvmKernelError(f"dnnl: a bf16 region cannot run here: {why}")
    return _Kernel(spec, constants)
