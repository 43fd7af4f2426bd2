"""``relvm.InferenceSession``: ONNX Runtime's Python API over a relvm executable.

Code written for ONNX Runtime's CPU provider runs unchanged with ``import relvm as ort``-style
substitution::

    sess = relvm.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name            # "input.1": the model's own name
    (y,) = sess.run(None, {name: x})

A session takes an ``.onnx`` model (path, bytes or ``onnx.ModelProto``), ``.relay`` text (with
``params``), an ``.rvm`` executable (path or bytes), a parsed :class:`relvm.ir.Module` or an
:class:`relvm.Executable`. Inputs and outputs go by the names the model gave them, kept through
the IR and the executable file (``VMFunction.input_names``/``output_names``). The differences
from ONNX Runtime that remain are listed in ``docs/session.md``.

Only a ``.rvm`` file or an Executable avoids the compiler: the front end is imported for the
other sources, on first use.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import RelvmError, RelvmInputError
from .runtime import Executable, VirtualMachine
from .runtime.vm.thread import result_leaves

#: relvm dtype -> the type string ONNX Runtime's NodeArg.type gives.
_ORT_TYPES = {"float32": "float", "float64": "double", "float16": "float16",
              "bfloat16": "bfloat16", "bool": "bool", "int8": "int8", "int16": "int16",
              "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16",
              "uint32": "uint32", "uint64": "uint64"}
PROVIDERS = ("CPUExecutionProvider",)
#: ONNX Runtime's names of execution providers that are relvm external backends.
EXTERNAL_PROVIDERS = {"DnnlExecutionProvider": "dnnl"}
#: relvm's options of those providers: option -> {value: the backend it picks}.
PROVIDER_OPTIONS = {"DnnlExecutionProvider": {"precision": {"fp32": "dnnl",
                                                            "bf16": "dnnl_bf16"}}}
EXECUTABLE_MAGIC = b"RELVMEXE"


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``sess.get_inputs()`` describes it: ``name``, ``shape`` (ints,
    and the names of symbolic dims as strings, e.g. ``['batch', 3, 224, 224]``), ``type``
    (``'tensor(float)'``)."""

    name: str
    shape: list
    type: str

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass
class ModelMetadata:
    """``sess.get_modelmeta()``: what the ONNX model said about itself (empty otherwise)."""

    producer_name: str = ""
    graph_name: str = ""
    graph_description: str = ""
    domain: str = ""
    description: str = ""
    version: int = 0
    custom_metadata_map: dict = field(default_factory=dict)


class SessionOptions:
    """The options ONNX Runtime's CPU provider reads that mean something to relvm.

    ``intra_op_num_threads`` (0: every core) sizes relvm's one thread pool -- for the whole
    process, as ``relvm.set_num_threads`` does, not for this session alone. The others are
    accepted so ORT code runs, and ignored: relvm always optimizes (fusion on) and runs one
    call's ops in order.
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = None
        self.execution_mode = None
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_profiling = False
        self.optimized_model_filepath = ""


class RunOptions:
    """Accepted by ``run`` for ORT compatibility; relvm reads none of its fields."""

    def __init__(self):
        self.log_severity_level = 2
        self.logid = ""
        self.terminate = False


class InferenceSession:
    """A model ready to run, with ONNX Runtime's ``InferenceSession`` methods.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes, onnx.ModelProto, Module or Executable
        ``.onnx``, ``.relay`` or ``.rvm`` by file extension (bytes: an executable if they start
        with its magic, else a serialized ONNX model).
    sess_options : SessionOptions, optional
    providers : sequence of str, optional
        ``"CPUExecutionProvider"`` (the default), and ``"DnnlExecutionProvider"`` before it to
        give the regions oneDNN takes to relvm's oneDNN backend (``relvm.partition``; for
        models compiled here, not ``.rvm`` files); anything else is a RelvmInputError, as ORT
        refuses providers it was not built with. A provider may come as ``(name, options)``.
    provider_options : sequence of dict, optional
        Options per provider, in the order of ``providers``. ``DnnlExecutionProvider`` takes
        ``{"precision": "fp32" | "bf16"}`` (relvm's own option; ``"bf16"`` is the
        ``dnnl_bf16`` backend: bfloat16 convs and matmuls on CPUs with AVX512_BF16 or AMX).
        Options of the CPU provider are ignored; any other is a RelvmInputError.
    params : mapping or str, optional
        Weights of a ``.relay`` file or Module: a dict, or the ``.npz`` ``relvm import`` wrote.
    upper_bounds : mapping of str to int, optional
        Passed to ``relvm.build`` for sources that are compiled.
    trust_native_code : bool
        For ``.rvm`` files, as in ``relvm.load``.

    Examples
    --------
    >>> sess = relvm.InferenceSession("mlp.onnx", providers=["CPUExecutionProvider"])
    >>> [i.name for i in sess.get_inputs()], sess.get_inputs()[0].shape
    (['input.1'], ['batch', 784])
    >>> probs, = sess.run(None, {"input.1": x})
    """

    def __init__(self, path_or_bytes: Any, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, provider_options: Any = None, *,
                 params: Mapping[str, Any] | str | None = None,
                 upper_bounds: Mapping[str, int] | None = None,
                 trust_native_code: bool = False, **kwargs: Any):
        self._options = sess_options or SessionOptions()
        self._providers, self._provider_options = _check_providers(providers, provider_options)
        self._meta = ModelMetadata()
        if self._options.intra_op_num_threads:
            from .runtime.threads import set_num_threads

            set_num_threads(int(self._options.intra_op_num_threads))
        self._exe = self._executable(path_or_bytes, params, upper_bounds, trust_native_code)
        self._vm = VirtualMachine(self._exe)
        self._fn = self._exe.function("main")
        self._inputs = [NodeArg(self._fn.input_name(i), _shape(p.tensors[0].shape),
                                _type(p.tensors[0].dtype))
                        for i, p in enumerate(self._fn.params) if p.tensors]
        # A list result is an ONNX sequence: typed ``seq(tensor(float))`` with no shape, as
        # ONNX Runtime types one.
        self._outputs = [NodeArg(self._fn.output_name(i),
                                 [] if o.is_list else _out_shape(o.type_text),
                                 f"seq({_type(o.dtype)})" if o.is_list else _type(o.dtype))
                         for i, o in enumerate(self._fn.outputs)]
        if len(self._inputs) != len(self._fn.params) or any(p.is_tuple or p.is_list
                                                              for p in self._fn.params):
            raise RelvmInputError("InferenceSession runs an @main whose inputs are tensors; "
                                  "use relvm.VirtualMachine for tuple or list inputs")
        self._input_index = {a.name: i for i, a in enumerate(self._inputs)}
        self._output_index = {a.name: i for i, a in enumerate(self._outputs)}

    # --- sources -------------------------------------------------------------------------------
    def _executable(self, source: Any, params: Any, bounds: Any, trust: bool) -> Executable:
        from . import load, load_bytes

        if isinstance(source, Executable):
            return source
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            if data[:len(EXECUTABLE_MAGIC)] == EXECUTABLE_MAGIC:
                return load_bytes(data, trust_native_code=trust)
            return self._from_onnx(data, bounds)
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if not os.path.isfile(path):
                raise RelvmInputError(f"cannot read {path}: no such file")
            ext = os.path.splitext(path)[1].lower()
            if ext == ".onnx":
                return self._from_onnx(path, bounds)
            if ext == ".relay":
                return self._from_module(_parse_relay(path, params), params, bounds)
            with open(path, "rb") as f:
                magic = f.read(len(EXECUTABLE_MAGIC))
            if ext == ".rvm" or magic == EXECUTABLE_MAGIC:
                return load(path, trust_native_code=trust)
            raise RelvmInputError(f"{path}: expected a .onnx, .relay or .rvm file")
        if type(source).__name__ == "ModelProto":
            return self._from_onnx(source, bounds)
        from .ir.nodes import Module

        if isinstance(source, Module):
            return self._from_module(source, params, bounds)
        raise RelvmInputError("InferenceSession takes a path (.onnx, .relay, .rvm), bytes, an "
                              f"onnx.ModelProto, a Module or an Executable, not "
                              f"{type(source).__name__}")

    def _from_onnx(self, model: Any, bounds: Any) -> Executable:
        from .frontend.onnx import from_onnx, load_model

        proto = load_model(model)
        self._meta = ModelMetadata(
            producer_name=proto.producer_name, graph_name=proto.graph.name,
            graph_description=proto.graph.doc_string, domain=proto.domain,
            description=proto.doc_string, version=proto.model_version,
            custom_metadata_map={p.key: p.value for p in proto.metadata_props})
        module, weights = from_onnx(proto)
        return self._from_module(module, weights, bounds)

    def _from_module(self, module: Any, params: Any, bounds: Any) -> Executable:
        from . import build

        if isinstance(params, (str, os.PathLike)):
            params = _read_weights(os.fspath(params))[0]
        targets = [_target(p, self._provider_options[p]) for p in self._providers
                   if p in EXTERNAL_PROVIDERS]
        return build(module, params=params, upper_bounds=bounds, targets=targets)

    # --- ONNX Runtime's API --------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Always empty: relvm binds a model's weights as constants when it is built."""
        return []

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {p: dict(self._provider_options[p]) for p in self._providers}

    def get_session_options(self) -> SessionOptions:
        return self._options

    def set_providers(self, providers: Sequence[Any] | None = None,
                      provider_options: Any = None) -> None:
        self._providers, self._provider_options = _check_providers(providers, provider_options)

    def end_profiling(self) -> str:
        return ""

    @property
    def executable(self) -> Executable:
        """The relvm executable this session runs (relvm's own; not in ORT)."""
        return self._exe

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[np.ndarray]:
        """Run the model: results of ``output_names`` (None: all), in that order.

        ``input_feed`` maps every input's name (as ``get_inputs`` gives it) to an array of its
        dtype; a missing, unknown or mistyped input is a :class:`relvm.RelvmInputError`.
        """
        picks = self._output_picks(output_names)
        inputs = self._arrange(input_feed)
        with self._own_names():
            leaves = list(result_leaves(self._vm.invoke("main", *inputs)))
        return [leaves[i] for i in picks]

    def io_binding(self) -> "IOBinding":
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: "IOBinding", run_options: Any = None) -> None:
        """Run with the inputs and outputs bound to ``iobinding``; outputs bound to arrays
        (``bind_output`` with ``buffer_ptr``, or ``bind_ortvalue_output``) are written in
        place by the kernels that produce them."""
        if iobinding._session is not self:
            raise RelvmInputError("this IOBinding belongs to another session")
        inputs = self._arrange(iobinding._inputs)
        bound = iobinding._outputs
        unknown = [n for n in bound if n not in self._output_index]
        if unknown:
            raise RelvmInputError(f"Invalid output name: {unknown[0]} (outputs: "
                                  f"{', '.join(self._output_index)})")
        arrays = [bound.get(a.name) for a in self._outputs]
        if all(a is not None for a in arrays):
            with self._own_names():
                self._vm.invoke_with_outputs("main", inputs, arrays)  # kernels write into them
            results = arrays
        else:  # some outputs bound by name only: the run allocates those
            with self._own_names():
                results = list(result_leaves(self._vm.invoke("main", *inputs)))
            for i, a in enumerate(arrays):
                if a is not None:
                    if a.shape != results[i].shape or a.dtype != results[i].dtype:
                        raise RelvmInputError(
                            f"output {self._outputs[i].name!r}: bound as {a.dtype}"
                            f"{list(a.shape)}, the result is {results[i].dtype}"
                            f"{list(results[i].shape)}")
                    a[...] = results[i]
                    results[i] = a
        order = list(bound) or [a.name for a in self._outputs]
        iobinding._results = [results[self._output_index[n]] for n in order]

    # --- helpers -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _own_names(self):
        """The VM's input errors with the model's own names: ``input 'input.1' (%input_1)``."""
        try:
            yield
        except RelvmInputError as e:
            message = str(e)
            for i, p in enumerate(self._fn.params):
                own = self._fn.input_name(i)
                if own != p.name:
                    message = message.replace(f"input %{p.name}", f"input {own!r} (%{p.name})")
            if message == str(e):
                raise
            raise RelvmInputError(message) from None

    def _arrange(self, feed: Mapping[str, Any]) -> list:
        if not isinstance(feed, Mapping):
            raise RelvmInputError(f"input_feed must be a dict of name -> array, not "
                                  f"{type(feed).__name__}")
        # ONNX Runtime's checks, in its order and words
        missing = [a.name for a in self._inputs if a.name not in feed]
        if missing:
            raise RelvmInputError(f"Required inputs ({missing}) are missing from input feed "
                                  f"({list(feed)}).")
        unknown = [k for k in feed if k not in self._input_index]
        if unknown:
            raise RelvmInputError(f"Invalid input name: {unknown[0]} (inputs: "
                                  f"{', '.join(self._input_index)})")
        return [feed[a.name] for a in self._inputs]

    def _output_picks(self, names: Sequence[str] | None) -> list[int]:
        if names is None:
            return list(range(len(self._outputs)))
        if isinstance(names, str):
            raise RelvmInputError(f"output_names must be a list of names (or None), not the "
                                  f"string {names!r}")
        picks = []
        for n in names:
            if n not in self._output_index:
                raise RelvmInputError(f"Invalid output name: {n} (outputs: "
                                      f"{', '.join(self._output_index)})")
            picks.append(self._output_index[n])
        return picks


class IOBinding:
    """ONNX Runtime's IOBinding on the CPU: inputs and outputs bound by name.

    An output bound to memory -- ``bind_output(name, "cpu", 0, np.float32, shape, ptr)`` as in
    ORT, or ``bind_ortvalue_output(name, array)`` with a NumPy array -- is written in place by
    the kernels (zero-copy); an output bound by name alone is allocated by the run and read
    with ``copy_outputs_to_cpu()``.
    """

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._results: list[np.ndarray] = []

    def bind_cpu_input(self, name: str, arr: Any) -> None:
        self._inputs[name] = arr

    def bind_input(self, name: str, device_type: str = "cpu", device_id: int = 0,
                   element_type: Any = None, shape: Sequence[int] | None = None,
                   buffer_ptr: int | None = None) -> None:
        _check_device(device_type)
        self._inputs[name] = _wrap_pointer(name, element_type, shape, buffer_ptr)

    def bind_ortvalue_input(self, name: str, value: Any) -> None:
        self._inputs[name] = _as_array(value)

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Sequence[int] | None = None,
                    buffer_ptr: int | None = None) -> None:
        _check_device(device_type)
        self._outputs[name] = (None if buffer_ptr is None else
                               _wrap_pointer(name, element_type, shape, buffer_ptr))

    def bind_ortvalue_output(self, name: str, value: Any) -> None:
        self._outputs[name] = _as_array(value)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to do on the CPU."""

    def synchronize_outputs(self) -> None:
        """Nothing to do on the CPU."""

    def get_outputs(self) -> list[np.ndarray]:
        """The outputs of the last run, as NumPy arrays (ORT gives OrtValues)."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [np.array(r, copy=True) for r in self._results]


# --- helpers ---------------------------------------------------------------------------------

def _check_providers(providers: Sequence[Any] | None,
                     provider_options: Any = None) -> tuple[list[str], dict[str, dict]]:
    """The providers' names in relvm's order and each one's options, checked."""
    given = list(providers or PROVIDERS)
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in given]
    known = tuple(EXTERNAL_PROVIDERS) + PROVIDERS
    others = [p for p in names if p not in known]
    if others:
        raise RelvmInputError(f"relvm runs on the CPU only: provider {others[0]!r} is not "
                              f"available; available providers: {', '.join(known)}")
    each = [p[1] if isinstance(p, (tuple, list)) and len(p) > 1 else {} for p in given]
    if provider_options is not None:
        if not isinstance(provider_options, (list, tuple)) or \
                len(provider_options) != len(given):
            raise RelvmInputError(f"provider_options must be a list of one dict per provider "
                                  f"({len(given)})")
        each = [{**a, **b} if isinstance(a, Mapping) and isinstance(b, Mapping) else b
                for a, b in zip(each, provider_options)]
    options: dict[str, dict] = {p: {} for p in PROVIDERS}
    for name, opts in zip(names, each):
        if not isinstance(opts, Mapping):
            raise RelvmInputError(f"the options of {name} must be a dict, not "
                                  f"{type(opts).__name__}")
        if name in EXTERNAL_PROVIDERS:
            allowed = PROVIDER_OPTIONS.get(name, {})
            for key, value in opts.items():
                if key not in allowed:
                    raise RelvmInputError(f"{name} has no option {key!r}; relvm's options: "
                                          f"{', '.join(allowed) or 'none'}")
                if str(value) not in allowed[key]:
                    raise RelvmInputError(f"{name} option {key}={value!r}: expected one of "
                                          f"{', '.join(allowed[key])}")
            options[name] = {key: str(value) for key, value in opts.items()}
    order = [p for p in names if p in EXTERNAL_PROVIDERS] + list(PROVIDERS)
    return order, options


def _target(provider: str, options: dict) -> str:
    """The external backend a provider with ``options`` builds for."""
    precision = options.get("precision")
    return EXTERNAL_PROVIDERS[provider] if precision is None else \
        PROVIDER_OPTIONS[provider]["precision"][precision]


def _check_device(device: str) -> None:
    if str(device).lower() != "cpu":
        raise RelvmInputError(f"relvm binds CPU memory only, not device {device!r}")


def _wrap_pointer(name: str, element_type: Any, shape: Any, ptr: Any) -> np.ndarray:
    """A NumPy array over the caller's memory at ``ptr`` (ORT's ``buffer_ptr``): no copy."""
    import ctypes

    if element_type is None or shape is None or not isinstance(ptr, int) or ptr == 0:
        raise RelvmInputError(f"binding {name!r} to memory needs element_type, shape and a "
                              "buffer_ptr (e.g. array.ctypes.data)")
    dtype = np.dtype(element_type)
    shape = tuple(int(d) for d in shape)
    count = int(np.prod(shape, dtype=np.int64))
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


def _as_array(value: Any) -> np.ndarray:
    """A NumPy array, or something with ``.numpy()`` (an OrtValue), as a NumPy array."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    raise RelvmInputError(f"expected a NumPy array, not {type(value).__name__}")


def _type(dtype: str) -> str:
    return f"tensor({_ORT_TYPES.get(dtype, dtype)})"


def _shape(shape: Sequence[int | str]) -> list:
    return [d if isinstance(d, int) else str(d) for d in shape]


def _out_shape(type_text: str) -> list:
    """An output's shape from its type text ``Tensor[(n, 10), float32]``: ints and dim text."""
    inner = type_text[type_text.find("(") + 1:type_text.rfind(")")] if "(" in type_text else ""
    dims = [d.strip() for d in inner.split(",") if d.strip()]
    return [int(d) if d.isdigit() else d for d in dims]


def _read_weights(path: str) -> tuple[dict, dict]:
    """A weights ``.npz`` (from ``relvm import``): named params, and meta constants by index."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise RelvmInputError(f"cannot read weights {path}: {e}") from None
    return split_weights(arrays)


META_PREFIX = "__meta_"


def split_weights(data: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
    """A weights file's named params, and its meta constants by index (``__meta_<k>``)."""
    params = {k: v for k, v in data.items() if not k.startswith(META_PREFIX)}
    constants = {int(k[len(META_PREFIX):]): v for k, v in data.items()
                 if k.startswith(META_PREFIX) and k[len(META_PREFIX):].isdigit()}
    return params, constants


def _parse_relay(path: str, params: Any):
    from . import parse

    constants = None
    if isinstance(params, (str, os.PathLike)):
        constants = _read_weights(os.fspath(params))[1]
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RelvmInputError(f"cannot read {path}: {e}") from None
    return parse(text, constants=constants, source_name=path)


__all__ = ["InferenceSession", "SessionOptions", "RunOptions", "NodeArg", "ModelMetadata",
           "IOBinding", "RelvmError"]
