"""Small wording helpers shared by the CLI and the plan renderers."""

from __future__ import annotations


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """`1 table`, `2 tables`, `1,000 records` (thousands separated)."""
    word = singular if count == 1 else (plural_form or f"{singular}s")
    return f"{count:,} {word}"
