"""Puts the repository's root on sys.path, for benchmarks that use tests/support.

A script's own folder (benchmarks/) is first on sys.path, the repository's root is not;
importing this module first makes `tests.support` importable as in the test suite.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)
