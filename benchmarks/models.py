"""The reference models, built for relvm (text IR) and for ONNX Runtime (onnx.helper), with the
same weights: the MLP (784-512-512-10, softmax) and the small convnet (conv3x3 16, conv3x3 32
stride 2, global average pool, dense 10; input N x 3 x 32 x 32)."""

from __future__ import annotations

import numpy as np

from relvm import examples

INPUT_SHAPES = {"mlp": lambda n: (n, 784), "convnet": lambda n: (n, 3, 32, 32)}


def onnx_model(name: str, params: dict[str, np.ndarray]):
    """The same model as an ONNX ModelProto with a symbolic batch dim ``n``."""
    from onnx import TensorProto, helper, numpy_helper

    def init(key: str):
        return numpy_helper.from_array(params[key], key)

    if name == "mlp":
        nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
                 helper.make_node("Relu", ["h1"], ["r1"]),
                 helper.make_node("Gemm", ["r1", "w2", "b2"], ["h2"], transB=1),
                 helper.make_node("Relu", ["h2"], ["r2"]),
                 helper.make_node("Gemm", ["r2", "w3", "b3"], ["h3"], transB=1),
                 helper.make_node("Softmax", ["h3"], ["y"], axis=1)]
        x_shape = ["n", 784]
    elif name == "convnet":
        nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                                  kernel_shape=[3, 3]),
                 helper.make_node("Relu", ["c1"], ["r1"]),
                 helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                                  strides=[2, 2], kernel_shape=[3, 3]),
                 helper.make_node("Relu", ["c2"], ["r2"]),
                 helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
                 helper.make_node("Flatten", ["g"], ["f"]),
                 helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
        x_shape = ["n", 3, 32, 32]
    else:
        raise KeyError(name)
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
        [init(k) for k in sorted(params)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def relvm_model(name: str):
    """(module text, params) of the bundled example ``name``."""
    return examples.text(name), examples.params(name)
