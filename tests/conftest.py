"""Shared test set-up: makes tests/ importable (for the shared program table) and sets the
hypothesis profiles (``ci`` by default; ``long`` with --hypothesis-profile=long)."""

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile("ci", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("RELVM_HYPOTHESIS_PROFILE", "ci"))
