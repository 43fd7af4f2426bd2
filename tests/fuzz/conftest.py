"""Makes the fuzz harness importable by the fuzz tests (``import fuzz_harness``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
