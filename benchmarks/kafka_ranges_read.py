"""Issue 45: reading a batch's offset ranges from Kafka, the ranges of a table's partitions
in one assignment (`RangeReader.read_many`, what a shared job's task and the driver's
read do) against one range after the other (`RangeReader.read` per range, what they did
before), same records, same run.

    .venv/bin/python benchmarks/kafka_ranges_read.py [--records 100000] [--partitions 4] [--rounds 8]

Starts its own Apache Kafka broker and dev registry; produces benchmarks/upsert.py's
batch of `--records` Avro records (its `batch_changes`) over `--partitions` partitions,
then reads every partition's whole range, each way once per round, the order
alternating: one consumer reading the ranges one after the other (`one after the
other`), and one reading them in one assignment (`together`). Each read's messages are
counted against the ranges'. Prints each way's wall and CPU seconds (this process:
librdkafka's threads are in it) per round, then the medians and `together / one after
the other` of each (the baseline: the way tableflow read before, same run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ingest import servers  # benchmarks/ is on sys.path when a script runs
from upsert import PARTITIONS, Topic, batch_changes

from tableflow_core.dev import broker
from tableflow_core.kafka.admin import get_watermarks
from tableflow_core.kafka.offsets import OffsetRange
from tableflow_core.kafka.range_reader import RangeReader

Read = Callable[[dict[str, str], list[OffsetRange]], int]


def one_after_the_other(conf: dict[str, str], ranges: list[OffsetRange]) -> int:
    with RangeReader(conf) as reader:
        return sum(len(chunk) for r in ranges for chunk in reader.read(r))


def together(conf: dict[str, str], ranges: list[OffsetRange]) -> int:
    with RangeReader(conf) as reader:
        return sum(len(chunk) for _, chunk in reader.read_many(ranges))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-ranges-"))
    with servers(work) as (bootstrap, url):
        broker.create_topics(bootstrap, {"ranges": args.partitions})
        Topic(bootstrap, url, "ranges").produce(
            batch_changes(1_000_000, args.records, seed=1, new_share=0.1)
        )
        conf = {"bootstrap.servers": bootstrap}
        ranges = [
            OffsetRange("ranges", p, low, high)
            for p, (low, high) in sorted(get_watermarks(conf, "ranges").items())
        ]
        expected = sum(r.end - r.start for r in ranges)
        ways: dict[str, Read] = {"one after the other": one_after_the_other, "together": together}
        seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for round_ in range(args.rounds):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for name in order:
                wall, cpu = time.perf_counter(), time.process_time()
                read = ways[name](conf, ranges)
                took = (time.perf_counter() - wall, time.process_time() - cpu)
                assert read == expected, (name, read, expected)
                seconds[name].append(took)
                print(f"round {round_ + 1} {name:<20} {read:,} records: wall {took[0]:.3f} s, "
                      f"CPU {took[1]:.3f} s", flush=True)  # fmt: skip
        medians = {
            name: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
            for name, s in seconds.items()
        }
        for name, (wall, cpu) in medians.items():
            print(f"median {name:<20} wall {wall:.3f} s, CPU {cpu:.3f} s")
        base, ours = medians["one after the other"], medians["together"]
        print(f"together / one after the other: wall {ours[0] / base[0]:.2f}x, "
              f"CPU {ours[1] / base[1]:.2f}x ({len(ranges)} ranges, {expected:,} records)")  # fmt: skip


if __name__ == "__main__":
    main()
