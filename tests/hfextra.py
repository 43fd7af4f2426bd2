"""The ``hf`` test extra (torch, transformers, onnxscript) for the tests of torch exports.

Without it those tests skip with one line saying what to install, except under
``RELVM_REQUIRE_HF=1`` (set by ``.ci/run``, which installs the extra), where a missing package
is a failure. Nothing is downloaded: models are made from their configs, with random weights."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def need(module: str):
    """``module``, imported; a skip (or, under RELVM_REQUIRE_HF=1, the ImportError) without."""
    if os.environ.get("RELVM_REQUIRE_HF") == "1":
        return __import__(module)  # CI installed the extra: a missing package fails
    return pytest.importorskip(module, reason=f"{module} is not installed "
                                              f'(pip install ".[test,hf]")')
