"""Shared test set-up: makes tests/ importable (for the shared program table), sets the
hypothesis profiles (``ci`` by default; ``long`` with --hypothesis-profile=long), and gives the
run a config directory of its own: the signing key relvm makes on first use, and the keys a
test trusts, never touch the user's (``RELVM_CONFIG_DIR``, inherited by subprocesses)."""

import atexit
import os
import shutil
import sys
import tempfile

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile("ci", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("RELVM_HYPOTHESIS_PROFILE", "ci"))

_config = tempfile.mkdtemp(prefix="relvm-test-config-")
os.environ["RELVM_CONFIG_DIR"] = os.path.join(_config, "relvm")
atexit.register(shutil.rmtree, _config, True)
