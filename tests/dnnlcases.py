"""What the oneDNN backend's tests share (tests/backends/test_dnnl*.py): regions written by
hand, the ops' NumPy references run step by step over them, a stand-in for the VM's constants,
and a small CNN with symbolic dims and its weights."""

import numpy as np

from relvm.backends.external import Region, TensorInfo
from relvm.ops.registry import OPS


class Constants:
    """relvm's VM Constants, counting what it is asked to prepare."""

    def __init__(self, arrays):
        self.arrays = {id(a): a for a in arrays}
        self.made, self.calls = {}, 0

    def holds(self, a):
        return self.arrays.get(id(a)) is a

    def prepared(self, a, key, make):
        self.calls += 1
        k = (id(a),) + key
        if k not in self.made:
            self.made[k] = make()
        return self.made[k]


def _ref(step_args, values):
    return [values[tuple(a)] for a in step_args]


def reference(steps, inputs, outputs):
    values = {("in", i): x for i, x in enumerate(inputs)}
    for j, s in enumerate(steps):
        op = OPS[s["op"]]
        got = op.reference(op.make_attrs(s["attrs"]), *_ref(s["args"], values))
        values[("step", j)] = np.asarray(got)
    return [values[tuple(r)] for r in outputs]


def region(inputs, steps, outputs=None, constant=(), values=None):
    """A Region from (shape per input) and steps given as (op, attrs, args, out_shape);
    ``values`` maps a constant input's index to its value (what ``compile`` may read)."""
    infos = tuple(TensorInfo("float32", tuple(s)) for s in inputs)
    st = tuple({"op": op, "attrs": attrs, "args": [list(a) for a in args],
                "type": {"dtype": "float32", "shape": list(shape)}}
               for op, attrs, args, shape in steps)
    outputs = outputs or [("step", len(st) - 1)]
    const = tuple(i in constant for i in range(len(inputs)))
    values = values or {}
    return Region("r", infos, st, tuple(outputs), const,
                  tuple(values.get(i) for i in range(len(inputs))))


#: conv2d attributes and weight shapes, one per kind of conv oneDNN runs: padded, strided with
#: uneven padding, dilated, grouped, depthwise, 1x1.
CONV_KINDS = [
    ({"padding": [1, 1, 1, 1]}, (8, 4, 3, 3)),
    ({"strides": [2, 2], "padding": [0, 1, 2, 1]}, (8, 4, 3, 3)),
    ({"dilation": [2, 2], "padding": [2, 2]}, (8, 4, 3, 3)),
    ({"groups": 2, "padding": 1}, (8, 2, 3, 3)),
    ({"groups": 4, "padding": 1}, (4, 1, 3, 3)),  # depthwise
    ({}, (16, 4, 1, 1)),
]


def resnet_block():
    """(region, input shapes): a ResNet stem and block as one region -- 7x7/2 stem on 3
    channels with bias and relu, max pool, 3x3 convs with a residual add of the pool's result,
    a strided 1x1 downsample, an average and a global average pool. Inputs 1-5 are weights."""
    x, c = (1, 3, 32, 32), 16
    steps = [
        ("nn.conv2d", {"strides": [2, 2], "padding": [3, 3, 3, 3]}, [("in", 0), ("in", 1)],
         [1, c, 16, 16]),
        ("nn.bias_add", {"axis": 1}, [("step", 0), ("in", 2)], [1, c, 16, 16]),
        ("nn.relu", {}, [("step", 1)], [1, c, 16, 16]),
        ("nn.max_pool2d", {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]},
         [("step", 2)], [1, c, 8, 8]),
        ("nn.conv2d", {"padding": [1, 1, 1, 1]}, [("step", 3), ("in", 3)], [1, c, 8, 8]),
        ("nn.relu", {}, [("step", 4)], [1, c, 8, 8]),
        ("nn.conv2d", {"padding": [1, 1, 1, 1]}, [("step", 5), ("in", 4)], [1, c, 8, 8]),
        ("add", {}, [("step", 6), ("step", 3)], [1, c, 8, 8]),
        ("nn.relu", {}, [("step", 7)], [1, c, 8, 8]),
        ("nn.conv2d", {"strides": [2, 2]}, [("step", 8), ("in", 5)], [1, 2 * c, 4, 4]),
        ("nn.avg_pool2d", {"pool_size": [2, 2], "strides": [2, 2]}, [("step", 9)],
         [1, 2 * c, 2, 2]),
        ("nn.global_avg_pool2d", {}, [("step", 9)], [1, 2 * c, 1, 1]),
    ]
    shapes = (x, (c, 3, 7, 7), (c,), (c, c, 3, 3), (c, c, 3, 3), (2 * c, c, 1, 1))
    return region(shapes, steps, outputs=[("step", 8), ("step", 10), ("step", 11)],
                  constant=(1, 2, 3, 4, 5)), shapes


def mobilenet_block():
    """(region, input shapes): an inverted residual -- 1x1 expand, relu6, depthwise 3x3, 1x1
    project with the block's input added -- then a strided depthwise conv. Inputs 1-4 are
    weights."""
    c, e = 8, 32
    steps = [
        ("nn.conv2d", {}, [("in", 0), ("in", 1)], [1, e, 12, 12]),
        ("clip", {"a_min": 0.0, "a_max": 6.0}, [("step", 0)], [1, e, 12, 12]),
        ("nn.conv2d", {"padding": [1, 1, 1, 1], "groups": e}, [("step", 1), ("in", 2)],
         [1, e, 12, 12]),
        ("clip", {"a_min": 0.0, "a_max": 6.0}, [("step", 2)], [1, e, 12, 12]),
        ("nn.conv2d", {}, [("step", 3), ("in", 3)], [1, c, 12, 12]),
        ("add", {}, [("in", 0), ("step", 4)], [1, c, 12, 12]),
        ("nn.conv2d", {"strides": [2, 2], "padding": [1, 1, 1, 1], "groups": c},
         [("step", 5), ("in", 4)], [1, c, 6, 6]),
    ]
    shapes = ((1, c, 12, 12), (e, c, 1, 1), (e, 1, 3, 3), (c, e, 1, 1), (c, 1, 3, 3))
    return region(shapes, steps, outputs=[("step", 5), ("step", 6)],
                  constant=(1, 2, 3, 4)), shapes


def assert_no_reference_impl(kernel):
    """oneDNN's ``ref`` implementations are 10-100x slower than its jit ones (a residual conv
    whose operand's layout differed from its dst's took 400 ms): every primitive of every
    pattern must resolve to a jit/brgemm kernel."""
    refs = [name for name in kernel.impls if name.startswith("ref")]
    assert kernel.impls and not refs, f"reference implementations: {kernel.impls}"


RNG = np.random.default_rng(0)


def w(*shape):
    """A weight of ``shape`` scaled by its fan-in (activations keep their size)."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return (RNG.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)).astype(np.float32)


CNN = """def @main(%x: Tensor[(n, 3, h, w), float32], %w0: Tensor[(32, 3, 3, 3), float32],
          %b0: Tensor[(32), float32], %w1: Tensor[(64, 32, 3, 3), float32],
          %b1: Tensor[(64), float32], %w2: Tensor[(64, 64, 3, 3), float32],
          %w3: Tensor[(64, 64, 1, 1), float32], %d: Tensor[(10, 64), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w0, padding=[1, 1, 1, 1]), %b0));
  %1 = nn.max_pool2d(%0, pool_size=[2, 2], strides=[2, 2]);
  %2 = nn.relu(nn.bias_add(nn.conv2d(%1, %w1, padding=[1, 1, 1, 1]), %b1));
  %3 = nn.conv2d(%2, %w2, padding=[1, 1, 1, 1]);
  %4 = nn.relu(add(%3, %2));
  %5 = nn.conv2d(%4, %w3, strides=[2, 2]);
  %6 = nn.batch_flatten(nn.global_avg_pool2d(nn.relu(%5)));
  nn.softmax(nn.dense(%6, %d))
}"""
CNN_WEIGHTS = {"w0": w(32, 3, 3, 3), "b0": w(32), "w1": w(64, 32, 3, 3), "b1": w(64),
               "w2": w(64, 64, 3, 3), "w3": w(64, 64, 1, 1), "d": w(10, 64)}

BLOCK = """def @main(%x: Tensor[(n, s, 256), float32], %wq: Tensor[(256, 256), float32],
          %wk: Tensor[(256, 256), float32], %wv: Tensor[(256, 256), float32],
          %w1: Tensor[(1024, 256), float32], %b1: Tensor[(1024), float32],
          %w2: Tensor[(256, 1024), float32], %g: Tensor[(256), float32],
          %beta: Tensor[(256), float32]) {
  %q = nn.dense(%x, %wq);
  %k = nn.dense(%x, %wk);
  %v = nn.dense(%x, %wv);
  %s = nn.softmax(multiply(nn.batch_matmul(%q, %k), 0.0625f), axis=-1);
  %a = nn.batch_matmul(%s, %v, transpose_b=False);
  %h = nn.layer_norm(add(%a, %x), %g, %beta);
  %f = nn.dense(nn.relu(nn.bias_add(nn.dense(%h, %w1), %b1, axis=-1)), %w2);
  nn.layer_norm(add(%f, %h), %g, %beta)
}"""
BLOCK_WEIGHTS = {"wq": w(256, 256), "wk": w(256, 256), "wv": w(256, 256), "w1": w(1024, 256),
                 "b1": w(1024), "w2": w(256, 1024), "g": 1 + w(256), "beta": w(256)}
