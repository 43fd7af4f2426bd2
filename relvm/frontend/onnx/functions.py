"""ONNX functions, inlined before conversion.

Two kinds of node become the nodes that define them, so that the importer only ever sees ops it
has converters for:

- calls of the model's own functions (``model.functions``: exporters such as torch's dynamo
  path write layers as local functions);
- ops relvm has no converter for that the ONNX standard defines as a *function* of other ops
  (SwiGLU, CausalConvWithState, LinearAttention, FlexAttention, DynamicQuantizeLinear, ...): the
  op schema's function body for the model's opset, or, for a context-dependent function, the
  body the schema builds for this node's attributes and input types.

The bodies are inlined by onnx's own inliner (``onnx.inliner``), which renames their values
apart and substitutes attribute references; a schema function's omitted attributes take the
schema's defaults first. Expansion repeats (a body may use another function op) up to
:data:`MAX_ROUNDS` times. Anything onnx cannot expand is left as it is, for the importer to
report as an op type it cannot import.
"""

from __future__ import annotations

from typing import Callable

#: Rounds of expansion (a function's body using another function op, and so on).
MAX_ROUNDS = 4

#: The domain the expanded schema functions are given while onnx inlines them.
_DOMAIN = "relvm.expanded"


def expand_functions(model, has_converter: Callable[[str, str], bool]):
    """``model`` with its local functions and the function ops relvm has no converter for
    (``has_converter(domain, op_type)`` False) inlined; the model itself if there are none."""
    from onnx import inliner

    if len(model.functions):
        try:
            model = inliner.inline_local_functions(model)
        except Exception:  # noqa: BLE001 -- onnx refused: the importer names what is left
            pass
    for _ in range(MAX_ROUNDS):
        expanded = _expand_schema_functions(model, has_converter)
        if expanded is None:
            break
        model = expanded
    return model


def _expand_schema_functions(model, has_converter):
    """One round: every node (subgraphs too) calling a schema function op without converter
    made a call of a local function holding that op's body, then inlined; None if none."""
    import onnx
    from onnx import inliner

    candidates = [n for n in _all_nodes(model.graph)
                  if not has_converter(n.domain or "", n.op_type) and _schema(model, n) is not None
                  and _is_function(_schema(model, n))]
    if not candidates:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = _value_types(out)
    added = 0
    for node in _all_nodes(out.graph):
        if has_converter(node.domain or "", node.op_type):
            continue
        schema = _schema(out, node)
        if schema is None or not _is_function(schema):
            continue
        body = _function_body(out, node, schema, types)
        if body is None:
            continue
        name = f"{node.op_type}_{added}"
        body.domain, body.name = _DOMAIN, name
        node.domain, node.op_type = _DOMAIN, name
        out.functions.append(body)
        for o in body.opset_import:
            if _opset(out, o.domain or "") is None:
                out.opset_import.append(o)
        added += 1
    if not added:
        return None
    out.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    try:
        return inliner.inline_local_functions(out)
    except Exception:  # noqa: BLE001 -- onnx refused: leave the nodes for the error
        return None


def _function_body(model, node, schema, types):
    """The FunctionProto defining ``node``'s op for the model's opset, or None."""
    import onnx

    version = _opset(model, node.domain or "")
    given = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in given and attr.default_value.name:
            node.attribute.append(attr.default_value)
    body = onnx.FunctionProto()
    try:
        static = [v for v in schema.function_opset_versions if v <= version]
        dependent = [v for v in schema.context_dependent_function_opset_versions if v <= version]
        if static:
            body.ParseFromString(schema.get_function_with_opset_version(max(static)))
        elif dependent:
            body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                max(dependent), node.SerializeToString(),
                [types.get(i, onnx.TypeProto()).SerializeToString() for i in node.input]))
        else:
            return None
    except Exception:  # noqa: BLE001 -- no body for these inputs: the op stays unsupported
        return None
    return body if len(body.node) else None


def _schema(model, node):
    import onnx.defs

    version = _opset(model, node.domain or "")
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, version, domain=node.domain or "")
    except Exception:  # noqa: BLE001 -- not a standard op (a custom domain)
        return None


def _is_function(schema) -> bool:
    return bool(schema.has_function or schema.has_context_dependent_function)


def _opset(model, domain: str) -> int | None:
    default = domain in ("", "ai.onnx")
    for o in model.opset_import:
        if (o.domain or "") == domain or (default and o.domain in ("", "ai.onnx")):
            return o.version
    return None


def _value_types(model) -> dict:
    """Value name -> TypeProto, from shape inference over the model (types a context-dependent
    function's body depends on); what inference cannot type is missing."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 -- an invalid model: types of the inputs only
        inferred = model
    types = {}
    for g in _all_graphs(inferred.graph):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type") or vi.type.HasField("sequence_type"):
                types.setdefault(vi.name, vi.type)
        for t in g.initializer:
            types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type,
                                                                        list(t.dims)))
    return types


def _all_graphs(graph):
    import onnx

    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _all_graphs(g)


def _all_nodes(graph):
    for g in _all_graphs(graph):
        yield from g.node
