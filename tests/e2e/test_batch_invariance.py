"""A row's result never depends on the rows it shares a call with (bit for bit).

The dynamic batcher (``relvm serve``) stacks requests along the batch dim and hands each its
rows of the result: that must equal the request run alone, or a response would change with the
traffic around it. Dense layers (every tile height of the packed GEMM, one to twelve rows and
more, split over threads), NCHW and NHWC convs, depthwise convs, pools and softmax, on the build
users get.
"""

from __future__ import annotations

import numpy as np
import pytest

import relvm
from relvm import examples

SIZES = (2, 3, 4, 5, 7, 12, 13, 25, 64)

CNN = """
def @main(%x: Tensor[(n, 32, 12, 12), float32], %w1: Tensor[(32, 32, 3, 3), float32],
          %w2: Tensor[(32, 1, 3, 3), float32], %w3: Tensor[(48, 32, 1, 1), float32],
          %w4: Tensor[(5, 48), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w1, padding=[1, 1]));
  %1 = nn.relu(nn.conv2d(%0, %w2, padding=[1, 1], groups=32));
  %2 = nn.conv2d(%1, %w3, strides=[2, 2]);
  %3 = nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2]);
  %4 = nn.batch_flatten(nn.global_avg_pool2d(%3));
  nn.softmax(nn.dense(%4, %w4), axis=1)
}
"""


def _cnn():
    rng = np.random.default_rng(1)
    shapes = {"w1": (32, 32, 3, 3), "w2": (32, 1, 3, 3), "w3": (48, 32, 1, 1), "w4": (5, 48)}
    params = {k: rng.standard_normal(s, dtype=np.float32) / 8 for k, s in shapes.items()}
    return relvm.parse(CNN), params, (32, 12, 12)


def _mlp():
    return relvm.parse(examples.text("mlp")), examples.params("mlp"), (784,)


def _convnet():
    return relvm.parse(examples.text("convnet")), examples.params("convnet"), (3, 32, 32)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("make", [_mlp, _convnet, _cnn], ids=["mlp", "convnet", "cnn"])
def test_rows_alone_equal_rows_stacked(make, threads):
    module, params, row = make()
    exe = relvm.build(module, params=params)
    before = relvm.get_num_threads()
    relvm.set_num_threads(threads)
    try:
        vm = relvm.VirtualMachine(exe)
        x = np.random.default_rng(threads).standard_normal((max(SIZES),) + row,
                                                           dtype=np.float32)
        alone = np.concatenate([vm.invoke("main", x[i:i + 1]) for i in range(len(x))])
        for n in SIZES:
            np.testing.assert_array_equal(vm.invoke("main", x[:n]), alone[:n],
                                          err_msg=f"{n} rows stacked")
    finally:
        relvm.set_num_threads(before)
