"""Shared test set-up: makes tests/ importable (for the shared program table), sets the
hypothesis profiles (``ci`` by default; ``long`` with --hypothesis-profile=long), and gives the
run a config directory of its own: the signing key relvm makes on first use, and the keys a
test trusts, never touch the user's (``RELVM_CONFIG_DIR``, inherited by subprocesses)."""

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, settings


def _use_the_installed_relvm() -> str | None:
    """Tests run the installed relvm, whose C kernels pip compiled. ``python -m pytest`` from
    the repository root puts the root first on sys.path, where ``relvm/`` is the source folder
    without them: take it off, so the installed package wins, or stop at once saying what to
    do if relvm is not installed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = os.path.join(root, "relvm")
    if not os.path.isdir(source) or any(n.startswith("_kernels") for n in os.listdir(source)):
        return None  # built in place (an editable install): the source folder is the package
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    for name in [m for m in sys.modules if m == "relvm" or m.startswith("relvm.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("relvm")
    origin = os.path.abspath(spec.origin) if spec and spec.origin else ""
    if spec is None or origin.startswith(os.path.join(source, "")):
        return ("relvm is not installed in this Python (the tests run the installed package, "
                "whose C kernels `pip install` compiles): run "
                f"`{sys.executable} -m pip install \".[test]\"` in {root}, then pytest")
    return None


_NOT_INSTALLED = _use_the_installed_relvm()


def pytest_configure(config) -> None:
    if _NOT_INSTALLED:
        pytest.exit(_NOT_INSTALLED, returncode=4)
sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile("ci", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("RELVM_HYPOTHESIS_PROFILE", "ci"))

# The oneDNN backend is a leg of the build users get where its wheels exist (x86-64 Linux: the
# test extra installs them): a missing library fails its tests there rather than skipping them.
# RELVM_REQUIRE_DNNL=0 says you know it is missing.
if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
    os.environ.setdefault("RELVM_REQUIRE_DNNL", "1")

_config = tempfile.mkdtemp(prefix="relvm-test-config-")
os.environ["RELVM_CONFIG_DIR"] = os.path.join(_config, "relvm")
atexit.register(shutil.rmtree, _config, True)


# --- test tiers -----------------------------------------------------------------------------------
# Every test is in exactly one tier (README, "Test tiers"): ``pure`` runs with no C compiler on
# PATH (Python only: front end, IR, passes, bytecode, files, the VM on the NumPy backend);
# ``kernels`` tests the C kernels and generated C; ``e2e`` runs the build users get (C kernels,
# fusion on). ``slow`` marks long runs on top of their tier. A test marked kernels or e2e keeps
# its mark; otherwise its folder decides, and in the pure folders the C legs of a test
# parametrized over the backend (``backend="c"``, ``fuse=True``) are e2e.
TIERS = ("pure", "kernels", "e2e")
FOLDER_TIERS = {"kernels": "kernels", "e2e": "e2e", "onnx": "e2e", "backends": "e2e",
                "serving": "e2e"}


def _tier(item) -> str:
    marked = [t for t in TIERS if item.get_closest_marker(t) is not None]
    if marked:
        return marked[0]
    folder = item.path.parent.name
    if folder in FOLDER_TIERS:
        return FOLDER_TIERS[folder]
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("backend") == "c" or params.get("fuse") is True:
        return "e2e"
    return "pure"


def pytest_collection_modifyitems(config, items) -> None:
    import pytest

    for item in items:
        tier = _tier(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
