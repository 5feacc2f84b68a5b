"""The driver's reader process (engine/reader_process.py), a real second Python process.

The task functions here stand in for `shared_tasks.table_reports` (a Kafka read): each
report names the process that made it, so a test sees which groups the reader read.
Upsert batches read through it, with a real broker and catalog, are in test_upsert.py
(`driver-process`) and in benchmarks/upsert.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pytest

from tableflow_core.engine import reader_process
from tableflow_core.engine.reader_process import read_groups, start_reader_process

READY_TIMEOUT_S = 120  # the reader imports the decode path first (~2 s; more under load)


def pid_reports(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One report per member: (member, the pid of the process that read it)."""
    for batch in batches:
        for member in batch.column(0).to_pylist():
            yield pa.RecordBatch.from_pydict(
                {"member": [member], "report": [str(os.getpid()).encode()]}
            )


def chatty_reports(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """As `pid_reports`, printing to stdout first (a library that prints)."""
    print("a library's line on stdout")
    sys.stdout.flush()
    os.write(1, b"and one written to fd 1\n")
    yield from pid_reports(batches)


def failing_reports(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    raise LookupError(f"no such range (pid {os.getpid()})")
    yield from ()


def groups(count: int) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"member": [i]}) for i in range(count)]


def readers(rows: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    return [(member, int(pid)) for member, pid in rows]


@pytest.fixture
def ready() -> Iterator[reader_process.ReaderProcess]:
    reader_process.stop_reader_process()
    process = start_reader_process()
    assert process is not None and process.wait_ready(READY_TIMEOUT_S)
    yield process
    reader_process.stop_reader_process()


def test_the_groups_after_the_first_are_read_by_the_reader_process(
    ready: reader_process.ReaderProcess,
) -> None:
    assert reader_process.takes_groups()
    with ready.busy:  # another job's groups: a job now is read as one task
        assert not reader_process.takes_groups()
    rows = readers(list(read_groups(pid_reports, groups(3))))
    assert rows == [(0, os.getpid()), (1, ready.pid), (2, ready.pid)]
    assert ready.requests == 1
    # a job of one group is the driver's alone
    assert readers(list(read_groups(pid_reports, groups(1)))) == [(0, os.getpid())]
    assert ready.requests == 1


def test_the_driver_reads_everything_without_a_ready_reader() -> None:
    reader_process.stop_reader_process()
    try:
        rows = readers(list(read_groups(pid_reports, groups(2))))
        assert rows == [(0, os.getpid()), (1, os.getpid())]
        assert reader_process.current() is None  # a one-shot apply starts none
        assert not reader_process.takes_groups()
        starting = start_reader_process()
        assert starting is not None
        rows = readers(list(read_groups(pid_reports, groups(2))))
        if not starting.ready:  # still importing: the driver read it all
            assert rows == [(0, os.getpid()), (1, os.getpid())]
        assert starting.wait_ready(READY_TIMEOUT_S)
        assert readers(list(read_groups(pid_reports, groups(2))))[1] == (1, starting.pid)
    finally:
        reader_process.stop_reader_process()


def test_a_read_that_fails_in_the_reader_is_the_drivers_and_it_reads_on(
    ready: reader_process.ReaderProcess, caplog: pytest.LogCaptureFixture
) -> None:
    reader_pid = ready.pid  # the function goes to the reader by value: no handle in it

    def fails_in_the_reader_only(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if os.getpid() == reader_pid:
            raise LookupError("no such range")
        yield from pid_reports(batches)

    # The driver reads the reader's groups again: what it raises is what a caller sees
    # without a reader (its own type), and a failure of the reader's alone loses nothing.
    rows = readers(list(read_groups(fails_in_the_reader_only, groups(3))))
    assert rows == [(0, os.getpid()), (1, os.getpid()), (2, os.getpid())]
    assert "read failed: LookupError: no such range" in caplog.text
    # The driver's own group failing too: the reader's answer is read and dropped, so
    # the next job gets its own answer, from the same process.
    with pytest.raises(LookupError, match=f"pid {os.getpid()}"):
        list(read_groups(failing_reports, groups(2)))
    rows = readers(list(read_groups(pid_reports, groups(2))))
    assert rows == [(0, os.getpid()), (1, ready.pid)]
    assert reader_process.current() is ready and ready.requests == 3


def test_what_the_reader_prints_does_not_reach_its_answers(
    ready: reader_process.ReaderProcess, capfd: pytest.CaptureFixture[str]
) -> None:
    rows = readers(list(read_groups(chatty_reports, groups(2))))
    assert rows == [(0, os.getpid()), (1, ready.pid)]
    assert readers(list(read_groups(pid_reports, groups(2)))) == rows


def test_a_killed_reader_fails_nothing_and_a_later_job_starts_another(
    ready: reader_process.ReaderProcess,
) -> None:
    os.kill(ready.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not ready.ended and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = readers(list(read_groups(pid_reports, groups(2))))
    assert rows == [(0, os.getpid()), (1, os.getpid())]
    again = reader_process.current()  # started for later jobs, with the same warm-up
    assert again is not None and again is not ready and again.warm_up is ready.warm_up
    assert again.wait_ready(READY_TIMEOUT_S)
    assert readers(list(read_groups(pid_reports, groups(2))))[1] == (1, again.pid)


def test_a_reader_killed_during_a_request_leaves_its_groups_to_the_driver(
    ready: reader_process.ReaderProcess,
) -> None:
    reader_pid = ready.pid

    def kills_the_reader(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if os.getpid() == reader_pid:
            time.sleep(60)  # killed meanwhile
        else:  # the driver's groups: the reader dies while it reads
            with contextlib.suppress(ProcessLookupError):
                os.kill(reader_pid, signal.SIGKILL)
        yield from pid_reports(batches)

    rows = readers(list(read_groups(kills_the_reader, groups(3))))
    assert rows == [(0, os.getpid()), (1, os.getpid()), (2, os.getpid())]
    assert ready.ended


def test_switched_off_no_process_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    reader_process.stop_reader_process()
    monkeypatch.setenv(reader_process.ENV, "0")
    assert start_reader_process() is None
    rows = readers(list(read_groups(pid_reports, groups(2))))
    assert rows == [(0, os.getpid()), (1, os.getpid())]
    assert reader_process.current() is None


def test_stopping_the_reader_ends_its_process(ready: reader_process.ReaderProcess) -> None:
    reader_process.stop_reader_process()
    assert ready.ended and reader_process.current() is None


def test_a_reader_that_cannot_start_is_not_started_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reader_process.stop_reader_process()
    monkeypatch.setattr(reader_process, "WORKER_MODULE", "tableflow_core.engine.no_such_module")
    try:
        process = start_reader_process()
        assert process is not None and not process.wait_ready(READY_TIMEOUT_S)
        assert "ended before it was ready" in caplog.text
        rows = readers(list(read_groups(pid_reports, groups(2))))
        assert rows == [(0, os.getpid()), (1, os.getpid())]
        assert start_reader_process() is None and reader_process.current() is process
        assert readers(list(read_groups(pid_reports, groups(2))))[1] == (1, os.getpid())
    finally:
        reader_process.stop_reader_process()
