"""Pausing Python's cyclic garbage collector while a plan is made, and keeping the
process's startup heap out of its full passes.

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
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_freezing = threading.Lock()
_startup_frozen = False  # not gc.get_freeze_count(): it counts the frozen objects one by one


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


def freeze_startup_heap() -> None:
    """Move every object the process holds now out of the collector's reach; once a
    process (the first apply's start: after the imports, the project, the plan).

    Those objects (modules, pydantic models, the plan, Spark's gateway) live until it
    exits, yet every full collection traversed them again. In benchmarks/upsert.py's
    process (~380k objects, two tables) a full pass came about once per 100k-record batch
    and took 0.3-0.44 s of a ~1 s batch at 1M rows, on whichever thread allocated at that
    moment (timed with gc.callbacks); frozen, 0.04-0.15 s. How often passes come depends
    on what the process allocates: a process applying one table saw no difference.
    Frozen objects are still freed by reference counting; only a cycle among them would
    outlive its use, and the heap frozen here is the process's startup (a long `tableflow
    run` freezes nothing later).
    """
    global _startup_frozen
    with _freezing:  # two lanes' first applies at once: one freezes
        if not _startup_frozen:
            gc.freeze()
            _startup_frozen = True
