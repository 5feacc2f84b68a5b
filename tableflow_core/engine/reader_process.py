"""A second process that reads part of a small job the driver reads itself.

A small job of upsert batches merged on the driver is read and decoded in the driver
process (`pipeline/shared_run.reads_in_driver`): Spark's job costs more than the read.
That read is Python on one core (two threads gain nothing: the decode holds the GIL),
while the machine's other cores wait. The reader process is one Python process
(`engine/reader_worker.py`) that reads the job's task groups after the first while the
driver reads the first: the same task function a Spark task runs
(`shared_tasks.table_reports`, cloudpickled as Spark ships it), its report rows sent
back through a pipe. Measured on 2 cores (docs/architecture.md, "A reader process beside
the driver"): a warm 100k-record batch's read and decode 0.65 -> 0.44 s.

`tableflow run` starts it (`start_reader_for`: its tables include an upsert table),
connected to the project's brokers and registry before it says it is ready (~2-3 s).
A one-shot `tableflow apply` does not: it was not ready by the apply's read (which begins
~2 s after the command starts, where the reader needs ~1 s alone) and its start competed
for the cores (docs/architecture.md, "A reader process beside the driver").
Until it is ready, while it reads another job's groups, and after it died, the driver
reads every group itself; one that died is started again for later jobs. A new process,
not a fork of the driver: a fork made both processes copy the pages they wrote (the read
0.56 against 0.67 s, where this process gives 0.44), and the driver holds threads whose
locks a fork would copy held. It ends when the driver does (its stdin closes) or at
`stop_reader_process`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import tableflow_core
from tableflow_core.errors import TableflowError
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.targets.registry import registry_settings

if TYPE_CHECKING:
    import pyarrow as pa

    from tableflow_core.config.project import Project, Table

LOG = logging.getLogger(__name__)

# Environment switch: "0" reads every group in the driver (no second process).
ENV = "TABLEFLOW_READER_PROCESS"
WORKER_MODULE = "tableflow_core.engine.reader_worker"
READY = b"ready"
STOP_WAIT_S = 0.5

Reader = Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]
ReportRows = list[tuple[int, bytes]]


class ReaderProcessError(TableflowError, RuntimeError):
    """The reader process ended or answered what it should not."""


@dataclass(frozen=True)
class WarmUp:
    """What the reader connects to before it says it is ready: a process's first Kafka
    consumer waited ~0.9 s at its first fetch, and its first registry client imported
    its HTTP stack (~0.2 s); a new reader's first read paid both (measured: 1.76 s
    against 0.39 s for the same read warm)."""

    kafka_conf: Mapping[str, str] = field(repr=False)  # may hold credentials
    topics: tuple[str, ...] = ()
    registry: RegistrySettings | None = None


def report_rows(reader: Reader, groups: Sequence[pa.RecordBatch]) -> ReportRows:
    """The report rows (member, report) `reader` makes of the ranges of `groups` read as
    one task would read them (one consumer)."""
    return [
        row
        for batch in reader(list(groups))
        for row in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
    ]


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(len(payload).to_bytes(8, "big"))
    stream.write(payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, None at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    size = int.from_bytes(head, "big")
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return payload


class ReaderProcess:
    """One reader process beside the driver; one request at a time."""

    def __init__(self, warm_up: WarmUp | None = None) -> None:
        self.warm_up = warm_up
        self._process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env=_worker_environment(),
        )
        assert self._process.stdin is not None
        write_frame(self._process.stdin, pickle.dumps(warm_up))  # its first frame
        self.busy = threading.Lock()
        self.requests = 0  # sent so far (tests)
        self._ready = threading.Event()
        self._settled = threading.Event()  # ready, or ended before it was
        self._broken = False
        threading.Thread(
            target=self._await_ready, name="tableflow-reader-start", daemon=True
        ).start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def _await_ready(self) -> None:
        assert self._process.stdout is not None
        try:
            if read_frame(self._process.stdout) == READY:
                self._ready.set()
                return
            self._broken = True
            LOG.warning(
                "the reader process ended before it was ready (exit code %s): the driver "
                "reads every range itself",
                self._process.wait(),
            )
        finally:
            self._settled.set()

    @property
    def was_ready(self) -> bool:
        return self._ready.is_set()

    @property
    def ended(self) -> bool:
        """Whether it exited or broke (a later job starts another)."""
        return self._broken or self._process.poll() is not None

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self.ended

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Whether the process runs, waiting up to `timeout` seconds (tests, benchmarks)."""
        self._settled.wait(timeout)
        return self.ready

    def send(self, reader: Reader, groups: Sequence[pa.RecordBatch]) -> None:
        """Ask for `groups` read by `reader` (the caller holds `busy`)."""
        from pyspark import cloudpickle  # here: the CLI imports this module, not pyspark

        assert self._process.stdin is not None
        try:
            request = pickle.dumps((cloudpickle.dumps(reader), list(groups)), protocol=5)
        except Exception as exc:  # what Spark ships pickles: a function that does not is a bug
            raise ReaderProcessError(f"the task function does not pickle: {exc}") from exc
        try:
            write_frame(self._process.stdin, request)
            self.requests += 1
        except OSError as exc:
            self._broken = True
            raise ReaderProcessError(f"the reader process did not take the request: {exc}") from exc

    def _answer(self) -> bytes:
        assert self._process.stdout is not None
        frame = read_frame(self._process.stdout)
        if frame is None:
            self._broken = True
            raise ReaderProcessError(
                f"the reader process (pid {self.pid}) ended, exit code {self._process.poll()}"
            )
        return frame

    def receive(self) -> ReportRows:
        """The answer to the request sent: its groups' report rows. A read that raised
        in the reader is ReaderProcessError naming its exception: the driver reads those
        groups itself, and raises what it meets as it would without a reader (the type a
        caller handles, a component that is down, survives no pickling)."""
        kind, value = pickle.loads(self._answer())
        if kind == "error":
            raise ReaderProcessError(f"the reader process's read failed: {value}")
        rows: ReportRows = value
        return rows

    def drop_answer(self) -> None:
        """Read and drop the answer to the request sent (the driver's own group failed);
        a process whose answer cannot be read is not asked again."""
        try:
            self._answer()
        except BaseException:
            self._broken = True

    def stop(self) -> None:
        """End the process: its stdin closed, it exits at its next read of it; one still
        connecting or reading after STOP_WAIT_S is killed (it holds nothing to lose)."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _worker_environment() -> dict[str, str]:
    """This environment, with the tree this process imported tableflow_core from first on
    the reader's path (a driver that put it on `sys.path` itself reads the same code)."""
    tree = str(Path(tableflow_core.__file__).resolve().parent.parent)
    paths = [tree, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


_lock = threading.Lock()
_process: ReaderProcess | None = None


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0" and (os.cpu_count() or 1) > 1


def current() -> ReaderProcess | None:
    """This process's reader if one was started (running or not)."""
    return _process


def start_reader_process(warm_up: WarmUp | None = None) -> ReaderProcess | None:
    """This process's reader, started now (connected as `warm_up` says) unless it runs;
    None where it is switched off (`TABLEFLOW_READER_PROCESS=0`, one core) or cannot
    start."""
    global _process
    if not enabled():
        return None
    with _lock:
        if _process is not None and _process.ended:
            if not _process.was_ready:  # it cannot start here: not again in this process
                return None
            _process.stop()
            _process = None
        if _process is None:
            try:
                _process = ReaderProcess(warm_up)
            except OSError as exc:
                LOG.warning("the reader process did not start: %s", exc)
                return None
        return _process


def start_reader_for(project: Project, tables: Iterable[Table]) -> None:
    """Start the reader for `tableflow run` when its tables include an upsert table (the
    only ones whose small batches the driver reads), connected to their brokers and
    registry."""
    upserts = [table for table in tables if table.mode == "upsert"]
    if upserts:
        start_reader_process(
            WarmUp(
                kafka_consumer_config(project.target.kafka),
                tuple(sorted({table.topic for table in upserts})),
                registry_settings(project.target.schema_registry),
            )
        )


def _running() -> ReaderProcess | None:
    """The reader, or None; one that ended after it was ready is started again (with its
    warm-up) for later jobs."""
    process = _process
    if process is not None and process.ended and process.was_ready:
        return start_reader_process(process.warm_up)
    return process


def stop_reader_process() -> None:
    global _process
    with _lock:
        process, _process = _process, None
    if process is not None:
        process.stop()


atexit.register(stop_reader_process)


def takes_groups() -> bool:
    """Whether a job read now would have the reader beside the driver (ready and idle):
    then the job is split into task groups (`pipeline/shared_run`), else read as one."""
    process = _process
    return process is not None and process.ready and not process.busy.locked()


def read_groups(reader: Reader, groups: Sequence[pa.RecordBatch]) -> Iterator[tuple[int, bytes]]:
    """The report rows of every group: the first read here, the others by the reader
    process meanwhile when one was started and is ready and idle; else all here, as one
    task (one consumer: groups split for a reader another job took meanwhile)."""
    process = _running() if len(groups) > 1 else None
    if process is None or not process.ready or not process.busy.acquire(blocking=False):
        yield from report_rows(reader, groups)
        return
    try:
        yield from _beside(process, reader, groups)
    finally:
        process.busy.release()


def _beside(
    process: ReaderProcess, reader: Reader, groups: Sequence[pa.RecordBatch]
) -> Iterator[tuple[int, bytes]]:
    try:
        process.send(reader, groups[1:])
    except ReaderProcessError as exc:
        LOG.warning("%s; the driver reads every range", exc)
        yield from report_rows(reader, groups)
        return
    try:
        local = report_rows(reader, groups[:1])
    except BaseException:
        process.drop_answer()
        raise
    try:
        answered = process.receive()
    except ReaderProcessError as exc:
        LOG.warning("%s; the driver reads its ranges", exc)
        answered = report_rows(reader, groups[1:])
    yield from local
    yield from answered
