"""The reader process's loop (`engine/reader_process.py`): `python -m` this module.

Reads its warm-up (the first frame), imports the decode path, connects as the warm-up
says, says it is ready, then answers each request (a cloudpickled task function and the
groups of ranges it reads, as one task) with their report rows, or with the text of
the exception the function raised. Frames are length-prefixed pickles on its stdin and on
the stdout it had at start; anything else written to its stdout (a library's print) goes to stderr. Ends
when its stdin closes: the driver stopped it or ended.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import sys
from typing import IO

from confluent_kafka import Consumer, KafkaException
from pyspark import cloudpickle

from tableflow_core.engine.reader_process import (
    READY,
    WarmUp,
    read_frame,
    report_rows,
    write_frame,
)
from tableflow_core.kafka.admin import BrokerErrors
from tableflow_core.kafka.range_reader import range_consumer_conf

# Imported before the reader says it is ready: the task functions' module, and pandas,
# which pyarrow imports at the first array it makes of Python objects (0.5 s of a new
# reader's first read, measured).
# (By name: the pipeline layer is above this one.)
PRELOAD = ("pandas", "tableflow_core.pipeline.shared_tasks")
METADATA_TIMEOUT_S = 10.0


def _protocol_stream() -> IO[bytes]:
    """The original stdout for frames; fd 1 then points at stderr."""
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return frames


def warm(warm_up: WarmUp) -> None:
    """Connect as `warm_up` says: one consumer's metadata of the topics, the registry's
    client made (kept by `RegistrySettings.client` for the reads). A failure is the
    reads' to report."""
    with contextlib.suppress(KafkaException, ValueError):
        consumer = Consumer(range_consumer_conf(warm_up.kafka_conf, BrokerErrors()))
        try:
            for topic in warm_up.topics or (None,):
                consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        finally:
            consumer.close()
    if warm_up.registry is not None:
        with contextlib.suppress(Exception):
            warm_up.registry.client()


def main() -> int:
    frames = _protocol_stream()
    requests = sys.stdin.buffer
    first = read_frame(requests)
    if first is None:
        return 0
    warm_up: WarmUp | None = pickle.loads(first)
    for module in PRELOAD:
        importlib.import_module(module)

    if warm_up is not None:
        warm(warm_up)
    write_frame(frames, READY)
    while (frame := read_frame(requests)) is not None:
        pickled_reader, groups = pickle.loads(frame)
        try:
            reader = cloudpickle.loads(pickled_reader)
            answer = pickle.dumps(("rows", report_rows(reader, groups)), protocol=5)
        except Exception as exc:  # the driver reads these groups itself
            answer = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        write_frame(frames, answer)
    return 0


if __name__ == "__main__":
    main()
    os._exit(0)  # nothing left to flush: the interpreter's teardown took ~0.8 s
