"""Pausing Python's cyclic garbage collector while a plan is made.

A plan allocates hundreds of thousands of small objects that live until it is done
(imported modules, pydantic models of the project and of every table's metadata, the
plan's actions), and the collector's passes over them found almost nothing to free: on a
1,000-table plan they were ~0.6 s of ~2.8 s of CPU, with 7 MB more memory when paused
(docs/history/performance-issues-26-31.md,
"Session 6: a plan of 1,000 tables in under 3 s"). Reference counting still frees everything
that is not in a cycle; cycles made while paused are collected once the collector runs
again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collector() -> Iterator[None]:
    """Run the block with the cyclic collector off; as it was afterwards (nests)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
