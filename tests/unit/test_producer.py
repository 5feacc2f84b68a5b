"""The sample producer against the real broker and registry: records land, keyed, with known sums."""

from __future__ import annotations

from tableflow_core.dev.sample_data import generate_orders


def test_same_seed_same_data_other_seed_other_data() -> None:
    a = [r.value for r in generate_orders(200, seed=1)]
    assert a == [r.value for r in generate_orders(200, seed=1)]
    assert a != [r.value for r in generate_orders(200, seed=2)]
