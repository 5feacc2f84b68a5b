"""Every offset accounted for: per partition and run, where each record read went.

    read = written + filtered + skipped + dead_lettered + tombstones

- written: records whose row went to the table's write (in upsert mode including rows
  superseded by a later record of the same key in the same run);
- filtered: rows a `filter` or `dedup` transform removed on purpose;
- skipped: bad records dropped under `skip`, and rows failing a check with
  `on_failure: skip` (counted, nowhere stored);
- dead_lettered: bad records routed to the dead-letter target;
- tombstones: null-value records applied as deletes (upsert) or dropped (append).

The value is encoded into the data commit's snapshot summary (`tableflow.accounting`)
and into `target/run_results.json`; `check()` raises when a partition does not balance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tableflow_core.deadletter.errors import AccountingError

ACCOUNTING_KEY = "tableflow.accounting"
OUTCOMES: tuple[str, ...] = ("written", "filtered", "skipped", "dead_lettered", "tombstones")


@dataclass(frozen=True, slots=True)
class PartitionAccount:
    partition: int
    read: int = 0
    written: int = 0
    filtered: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    tombstones: int = 0

    @property
    def accounted(self) -> int:
        return self.written + self.filtered + self.skipped + self.dead_lettered + self.tombstones

    @property
    def balanced(self) -> bool:
        counts = [getattr(self, f.name) for f in fields(self)]
        return self.read == self.accounted and min(counts) >= 0

    def describe(self) -> str:
        parts = " + ".join(f"{getattr(self, name)} {name}" for name in OUTCOMES)
        return f"partition {self.partition}: read {self.read} != {parts} = {self.accounted}"

    def __add__(self, other: PartitionAccount) -> PartitionAccount:
        if other.partition != self.partition:
            raise ValueError(f"cannot add partition {other.partition} to {self.partition}")
        return PartitionAccount(
            self.partition,
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)[1:]),
        )


@dataclass(frozen=True)
class RunAccounting:
    """The accounting of one table's run: one entry per partition read."""

    table: str
    topic: str
    run_id: str
    partitions: tuple[PartitionAccount, ...]

    @classmethod
    def from_counts(
        cls,
        table: str,
        topic: str,
        run_id: str,
        *,
        read: Mapping[int, int],
        **outcomes: Mapping[int, int],
    ) -> RunAccounting:
        """Build from per-partition counts, e.g. `written={0: 10}, dead_lettered={0: 2}`."""
        unknown = sorted(set(outcomes) - set(OUTCOMES))
        if unknown:
            raise ValueError(f"unknown accounting outcome(s) {unknown}; known: {OUTCOMES}")
        partitions = set(read).union(*(set(counts) for counts in outcomes.values()))
        accounts = tuple(
            PartitionAccount(
                partition,
                read=int(read.get(partition, 0)),
                **{name: int(counts.get(partition, 0)) for name, counts in outcomes.items()},
            )
            for partition in sorted(partitions)
        )
        return cls(table, topic, run_id, accounts)

    @property
    def totals(self) -> dict[str, int]:
        names = ("read", *OUTCOMES)
        return {name: sum(getattr(p, name) for p in self.partitions) for name in names}

    def unbalanced(self) -> list[PartitionAccount]:
        return [p for p in self.partitions if not p.balanced]

    def check(self) -> RunAccounting:
        """Raise AccountingError naming every partition whose records do not add up."""
        wrong = self.unbalanced()
        if wrong:
            listed = "; ".join(p.describe() for p in wrong)
            raise AccountingError(
                f"table {self.table}, topic {self.topic!r}, run {self.run_id}: records do not "
                f"add up, refusing to commit: {listed}"
            )
        return self

    def to_json(self) -> dict[str, Any]:
        """For run_results.json: totals and one object per partition."""
        return {
            "table": self.table,
            "topic": self.topic,
            "run_id": self.run_id,
            "totals": self.totals,
            "partitions": [asdict(p) for p in self.partitions],
        }

    def snapshot_summary(self) -> dict[str, str]:
        """The snapshot summary property (compact JSON: {partition: [read, *OUTCOMES]})."""
        payload = {
            "v": 1,
            "run": self.run_id,
            "topic": self.topic,
            "fields": ["read", *OUTCOMES],
            "p": {
                str(p.partition): [p.read, *(getattr(p, name) for name in OUTCOMES)]
                for p in self.partitions
            },
        }
        return {ACCOUNTING_KEY: json.dumps(payload, separators=(",", ":"), sort_keys=True)}

    @classmethod
    def from_snapshot_summary(cls, summary: Mapping[str, str], table: str) -> RunAccounting | None:
        """Read the property back (None when the snapshot has none)."""
        raw = summary.get(ACCOUNTING_KEY)
        if raw is None:
            return None
        try:
            payload = json.loads(raw)
            names = payload["fields"]
            accounts = tuple(
                PartitionAccount(int(partition), **dict(zip(names, counts, strict=True)))
                for partition, counts in sorted(payload["p"].items(), key=lambda kv: int(kv[0]))
            )
            return cls(table, payload["topic"], payload["run"], accounts)
        except (ValueError, KeyError, TypeError) as exc:
            raise AccountingError(
                f"table {table}: snapshot property {ACCOUNTING_KEY} is malformed: {exc}"
            ) from exc


def merge_accounts(accounts: Iterable[PartitionAccount]) -> tuple[PartitionAccount, ...]:
    """Sum accounts of the same partition (e.g. one per Spark task or stage)."""
    merged: dict[int, PartitionAccount] = {}
    for account in accounts:
        current = merged.get(account.partition)
        merged[account.partition] = account if current is None else current + account
    return tuple(merged[p] for p in sorted(merged))
