"""Makes tests/serving importable for its helpers (``liveserver``); the models served."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import relvm  # noqa: E402
from relvm import examples  # noqa: E402


@pytest.fixture(scope="session")
def mlp_exe():
    return relvm.build(relvm.parse(examples.text("mlp")), params=examples.params("mlp"))


#: Two inputs sharing the batch dim n, a non-batch symbolic dim t, two outputs.
PAIR = """
def @main(%x: Tensor[(n, t, 8), float32], %w: Tensor[(n, 8), float32]) {
  %0 = nn.relu(%x);
  %1 = sum(%0, axis=[1]);
  (multiply(%1, %w), mean(%x, axis=[2]))
}
"""


@pytest.fixture(scope="session")
def pair_exe():
    return relvm.build(relvm.parse(PAIR))
