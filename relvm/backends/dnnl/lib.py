"""Loading oneDNN (``libdnnl.so.3``) and binding the few C API calls relvm uses.

The library comes from the PyPI ``onednn-cpu-tbb`` wheel (oneDNN 3.2, its CPU build with TBB
threads; the ``dnnl`` extra), which installs it -- and its runtime dependencies come from their
own wheels: TBB, Intel's libm/svml/intlc -- as data files under the install's ``lib/`` folder,
where the dynamic loader does not look. (The ``onednn`` wheel, 2025 on, is a SYCL build whose
CPU engine needs a SYCL CPU device the wheels do not bring: refused with that reason.) Each
file is found through ``importlib.metadata`` (right for any install scheme: venv, ``--user``,
``--target``) and the dependencies are preloaded with ``RTLD_GLOBAL`` so that ``libdnnl``'s
``NEEDED`` entries resolve. ``RELVM_DNNL_LIBRARY`` names a ``libdnnl.so.3`` to use instead.

The binding is cffi's ABI mode (``dlopen``, no compiler): the declarations below follow oneDNN's
``dnnl.h``, ``dnnl_types.h`` and ``dnnl_common_types.h``, enum values included, identical in
3.2 and 3.13 (checked against both headers; fixed within a major version, which :func:`load`
checks). Importing this module loads nothing; :func:`load` does, once.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import threading
from typing import Any

from ...errors import RelvmKernelError

MAJOR = 3  # the ABI the declarations below describe
LIBRARY = "libdnnl.so.3"
#: What libdnnl.so.3 needs beyond the system, in load order (each needs only the ones before),
#: and the wheels that ship them.
#: A missing one is left for dlopen to name (the CPU builds need no SYCL).
DEPENDENCIES = ("libintlc.so.5", "libsvml.so", "libimf.so", "libtbb.so.12", "libsycl.so.9")
#: The CPU builds come first: the ``onednn`` wheel (2025 on) is a SYCL build, refused below.
_WHEELS = ("onednn-cpu-tbb", "onednn-cpu-gomp", "onednn-cpu-iomp", "onednn", "tbb",
           "intel-cmplr-lib-rt", "intel-sycl-rt", "intel-openmp")

CDEF = """
typedef int dnnl_status_t;
typedef int64_t dnnl_dim_t;
typedef dnnl_dim_t dnnl_dims_t[12];
typedef struct dnnl_engine *dnnl_engine_t;
typedef struct dnnl_stream *dnnl_stream_t;
typedef struct dnnl_memory_desc *dnnl_memory_desc_t;
typedef const struct dnnl_memory_desc *const_dnnl_memory_desc_t;
typedef struct dnnl_memory *dnnl_memory_t;
typedef struct dnnl_primitive_desc *dnnl_primitive_desc_t;
typedef const struct dnnl_primitive_desc *const_dnnl_primitive_desc_t;
typedef struct dnnl_primitive *dnnl_primitive_t;
typedef const struct dnnl_primitive *const_dnnl_primitive_t;
typedef struct dnnl_primitive_attr *dnnl_primitive_attr_t;
typedef const struct dnnl_primitive_attr *const_dnnl_primitive_attr_t;
typedef struct dnnl_post_ops *dnnl_post_ops_t;
typedef const struct dnnl_post_ops *const_dnnl_post_ops_t;
typedef struct { int major; int minor; int patch; const char *hash;
                 unsigned cpu_runtime; unsigned gpu_runtime; } dnnl_version_t;
typedef struct { int arg; dnnl_memory_t memory; } dnnl_exec_arg_t;

const dnnl_version_t *dnnl_version(void);
int dnnl_get_effective_cpu_isa(void);
dnnl_status_t dnnl_engine_create(dnnl_engine_t *engine, int kind, size_t index);
dnnl_status_t dnnl_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine, unsigned flags);
dnnl_status_t dnnl_stream_wait(dnnl_stream_t stream);
dnnl_status_t dnnl_stream_destroy(dnnl_stream_t stream);

dnnl_status_t dnnl_memory_desc_create_with_strides(dnnl_memory_desc_t *memory_desc, int ndims,
    const dnnl_dims_t dims, int data_type, const dnnl_dims_t strides);
dnnl_status_t dnnl_memory_desc_create_with_tag(dnnl_memory_desc_t *memory_desc, int ndims,
    const dnnl_dims_t dims, int data_type, int tag);
dnnl_status_t dnnl_memory_desc_clone(dnnl_memory_desc_t *memory_desc,
    const_dnnl_memory_desc_t existing_memory_desc);
dnnl_status_t dnnl_memory_desc_destroy(dnnl_memory_desc_t memory_desc);
size_t dnnl_memory_desc_get_size(const_dnnl_memory_desc_t memory_desc);
int dnnl_memory_desc_equal(const_dnnl_memory_desc_t lhs, const_dnnl_memory_desc_t rhs);

dnnl_status_t dnnl_memory_create(dnnl_memory_t *memory, const_dnnl_memory_desc_t memory_desc,
    dnnl_engine_t engine, void *handle);
dnnl_status_t dnnl_memory_set_data_handle(dnnl_memory_t memory, void *handle);
dnnl_status_t dnnl_memory_destroy(dnnl_memory_t memory);

dnnl_status_t dnnl_primitive_attr_create(dnnl_primitive_attr_t *attr);
dnnl_status_t dnnl_primitive_attr_destroy(dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_primitive_attr_set_scratchpad_mode(dnnl_primitive_attr_t attr, int mode);
dnnl_status_t dnnl_primitive_attr_set_post_ops(dnnl_primitive_attr_t attr,
    const_dnnl_post_ops_t post_ops);
dnnl_status_t dnnl_post_ops_create(dnnl_post_ops_t *post_ops);
dnnl_status_t dnnl_post_ops_destroy(dnnl_post_ops_t post_ops);
dnnl_status_t dnnl_post_ops_append_eltwise(dnnl_post_ops_t post_ops, int alg_kind,
    float alpha, float beta);
dnnl_status_t dnnl_post_ops_append_binary(dnnl_post_ops_t post_ops, int alg_kind,
    const_dnnl_memory_desc_t src1_desc);

dnnl_status_t dnnl_convolution_forward_primitive_desc_create(
    dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine, int prop_kind, int alg_kind,
    const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t weights_desc,
    const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc,
    const dnnl_dims_t strides, const dnnl_dims_t dilates, const dnnl_dims_t padding_l,
    const dnnl_dims_t padding_r, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_matmul_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc,
    const_dnnl_memory_desc_t dst_desc, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_pooling_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, const dnnl_dims_t strides, const dnnl_dims_t kernel,
    const dnnl_dims_t dilation, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
    const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_layer_normalization_forward_primitive_desc_create(
    dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine, int prop_kind,
    const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t dst_desc,
    const_dnnl_memory_desc_t stat_desc, float epsilon, unsigned flags,
    const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_softmax_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, int softmax_axis, const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_eltwise_forward_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, float alpha, float beta,
    const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_binary_primitive_desc_create(dnnl_primitive_desc_t *primitive_desc,
    dnnl_engine_t engine, int alg_kind, const_dnnl_memory_desc_t src0_desc,
    const_dnnl_memory_desc_t src1_desc, const_dnnl_memory_desc_t dst_desc,
    const_dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_reorder_primitive_desc_create(dnnl_primitive_desc_t *reorder_primitive_desc,
    const_dnnl_memory_desc_t src_desc, dnnl_engine_t src_engine,
    const_dnnl_memory_desc_t dst_desc, dnnl_engine_t dst_engine,
    const_dnnl_primitive_attr_t attr);

const_dnnl_memory_desc_t dnnl_primitive_desc_query_md(const_dnnl_primitive_desc_t primitive_desc,
    int what, int index);
dnnl_status_t dnnl_primitive_desc_query(const_dnnl_primitive_desc_t primitive_desc, int what,
    int index, void *result);
dnnl_status_t dnnl_primitive_desc_destroy(dnnl_primitive_desc_t primitive_desc);
dnnl_status_t dnnl_primitive_create(dnnl_primitive_t *primitive,
    const_dnnl_primitive_desc_t primitive_desc);
dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream,
    int nargs, const dnnl_exec_arg_t *args);
dnnl_status_t dnnl_primitive_destroy(dnnl_primitive_t primitive);
"""

# Enum values and argument indices (oneDNN 3.13 headers).
STATUS = {0: "success", 1: "out_of_memory", 2: "invalid_arguments", 3: "unimplemented",
          4: "last_impl_reached", 5: "runtime_error", 6: "not_required"}
SUCCESS, UNIMPLEMENTED = 0, 3
BF16, F32 = 2, 3             # dnnl_bf16, dnnl_f32
CPU = 1                      # dnnl_cpu
STREAM_DEFAULT = 1           # dnnl_stream_default_flags
FORMAT_ANY = 1               # dnnl_format_tag_any
FORWARD_INFERENCE = 96       # dnnl_forward_inference
SCRATCHPAD_USER = 1          # dnnl_scratchpad_mode_user
CONVOLUTION_DIRECT = 1
ELTWISE = {"relu": 32, "tanh": 33, "elu": 34, "abs": 36, "sqrt": 37, "linear": 38,
           "hardsigmoid": 40, "logistic": 41, "exp": 42, "swish": 44, "log": 45, "clip": 46,
           "hardswish": 52}
POOLING = {"max": 511, "avg_include_padding": 767, "avg_exclude_padding": 1023}
BINARY = {"add": 131056, "mul": 131057, "sub": 131061}
SOFTMAX_ACCURATE = 196608
USE_SCALE, USE_SHIFT = 2, 4  # dnnl_normalization_flags_t
QUERY_SRC_MD, QUERY_WEIGHTS_MD, QUERY_DST_MD, QUERY_SCRATCHPAD_MD = 129, 131, 133, 136
QUERY_IMPL_INFO_STR = 8
ARG_SRC, ARG_SRC_1, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 2, 17, 33, 41
ARG_SCRATCHPAD, ARG_SCALE, ARG_SHIFT = 80, 51, 52
ARG_FROM, ARG_TO = 1, 17
MAX_NDIMS = 12
RUNTIME_SYCL = 512  # DNNL_RUNTIME_SYCL, dnnl_version_t.cpu_runtime (dnnl_config.h)
#: dnnl_cpu_isa_avx512_core_bf16: its bits are set in every ISA with AVX512_BF16 (AMX, AVX10).
ISA_AVX512_BF16 = 0xE7


def arg_post_op_src1(index: int) -> int:
    """DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1: a binary post-op's tensor."""
    return 32768 * (index + 1) | ARG_SRC_1


class Library:
    """The loaded library: ``ffi``, ``lib``, the process's CPU engine and ``check``."""

    def __init__(self, ffi: Any, lib: Any, path: str):
        self.ffi, self.lib, self.path = ffi, lib, path
        v = lib.dnnl_version()
        self.version = (v.major, v.minor, v.patch)
        if v.major != MAJOR:
            raise RelvmKernelError(f"{path} is oneDNN {v.major}.{v.minor}.{v.patch}; relvm's "
                                   f"dnnl backend is written against oneDNN {MAJOR}.x")
        if v.cpu_runtime == RUNTIME_SYCL:
            # Its CPU engine is a SYCL device (OpenCL's CPU runtime through a Unified Runtime
            # adapter the wheels do not ship) and its memory is SYCL's, not host arrays.
            raise RelvmKernelError(f"{path} (oneDNN {v.major}.{v.minor}.{v.patch}) is a SYCL "
                                   "build; relvm needs a CPU build such as onednn-cpu-tbb")
        engine = ffi.new("dnnl_engine_t *")
        self.check("dnnl_engine_create", lib.dnnl_engine_create(engine, CPU, 0))
        self.engine = engine[0]  # one per process, never destroyed (primitives outlive kernels)
        # The ISA oneDNN dispatches to (ONEDNN_MAX_CPU_ISA can lower it).
        self.isa = int(lib.dnnl_get_effective_cpu_isa())

    @property
    def bf16_native(self) -> bool:
        """Whether oneDNN has AVX512_BF16 (or AMX) here: its bf16 convs run jit kernels at
        about twice the float32 speed; without it they would run emulated or ``ref:any``."""
        return self.isa & ISA_AVX512_BF16 == ISA_AVX512_BF16

    def check(self, call: str, status: int) -> None:
        """Raise RelvmKernelError unless ``status`` is dnnl_success."""
        if status != SUCCESS:
            name = STATUS.get(status, f"status {status}")
            raise RelvmKernelError(f"oneDNN {call} failed: {name}")


_loaded: Library | None = None
_failure: str | None = None
_lock = threading.Lock()


def _wheel_file(name: str) -> str | None:
    """The path of file ``name`` installed by one of the oneDNN wheels, if any."""
    for dist in _WHEELS:
        try:
            files = importlib.metadata.distribution(dist).files or ()
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name == name:
                path = str(f.locate())
                if os.path.exists(path):
                    return os.path.realpath(path)
    return None


def library_path() -> str | None:
    """Where libdnnl.so.3 is: ``RELVM_DNNL_LIBRARY``, else the ``onednn`` wheel's file."""
    return os.environ.get("RELVM_DNNL_LIBRARY") or _wheel_file(LIBRARY)


def _preload(name: str, beside: str) -> None:
    """Make ``name`` resolvable for libdnnl: already loadable, or found and loaded globally."""
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        return
    except OSError:
        pass
    for path in (os.path.join(beside, name), _wheel_file(name)):
        if path and os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return


def _open() -> Library:
    import cffi  # here, not at import: importing the backend must stay cheap

    path = library_path()
    if path is None:
        raise RelvmKernelError(f"{LIBRARY} not found (no onednn-cpu-tbb wheel installed "
                               "and RELVM_DNNL_LIBRARY unset)")
    if not os.path.exists(path):
        raise RelvmKernelError(f"{LIBRARY} not found at {path} (RELVM_DNNL_LIBRARY)")
    beside = os.path.dirname(path)
    for dep in DEPENDENCIES:
        try:
            _preload(dep, beside)
        except OSError as e:  # a broken dependency: dlopen below names what is missing
            raise RelvmKernelError(f"cannot load {dep}, which {LIBRARY} needs: {e}") from None
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    try:
        lib = ffi.dlopen(path)
    except OSError as e:
        raise RelvmKernelError(f"cannot load {path}: {e}") from None
    try:
        return Library(ffi, lib, path)
    except AttributeError as e:  # a library lacking a declared function: not oneDNN 3
        raise RelvmKernelError(f"{path} is not a oneDNN {MAJOR} library: {e}") from None


def load() -> Library:
    """The library, loaded on first use; RelvmKernelError saying why when it cannot be."""
    global _loaded, _failure
    with _lock:
        if _loaded is None and _failure is None:
            try:
                _loaded = _open()
            except RelvmKernelError as e:
                _failure = str(e)
        if _loaded is None:
            raise RelvmKernelError(_failure)
        return _loaded


def available() -> str | None:
    """None when oneDNN can be loaded here, else a one-line reason."""
    try:
        load()
    except RelvmKernelError as e:
        return str(e)  # relvm.backends.external adds how to install it
    return None


def available_bf16() -> str | None:
    """None when oneDNN can run bf16 regions at speed here, else a one-line reason."""
    why = available()
    if why is not None:
        from ..external import INSTALL
        return f"{why}; {INSTALL['dnnl']}"
    lib = load()
    if not lib.bf16_native:
        why = (f"this CPU (oneDNN's ISA {lib.isa:#x}) has no AVX512_BF16 or AMX, so "
               "oneDNN's bf16 convolutions would not run its fast kernels")
    return why


def _reset_for_tests() -> None:
    """Forget the load attempt, so a test can try another RELVM_DNNL_LIBRARY."""
    global _loaded, _failure
    with _lock:
        _loaded, _failure = None, None
