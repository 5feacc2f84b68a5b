"""Commit throughput of the REST catalog vs pyiceberg's SqlCatalog used directly (baseline).

    .venv/bin/python benchmarks/catalog_commits.py [--appends 40] [--writers 4]
    .venv/bin/python benchmarks/catalog_commits.py --against main [--rounds 3] [--loads-per-commit 4]
    .venv/bin/python benchmarks/catalog_commits.py --skip-in-process --gil

Each append writes one small Parquet file and commits a snapshot, so the figures are
dominated by per-commit overhead: HTTP + auth + locking on top of the same SQLite work.

`--against REF` adds an A/B of the server alone: the catalog server of REF (its
`tableflow_core` from `git archive`) and of this checkout each run as their own process
(`python -m tableflow_core.catalog.server`), rounds interleaved, the same pyiceberg
client in this process appending to both. Besides wall time it prints the server
process's CPU time per commit (user+sys from /proc), which a loaded machine disturbs
much less than wall time.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import requests
from pydantic import SecretStr
from pyiceberg.catalog import Catalog, load_catalog

from tableflow_core.catalog import CatalogServerSettings, serve_in_background
from tableflow_core.catalog.clients import pyiceberg_catalog_properties
from tableflow_core.catalog.service import open_sql_catalog
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV
from tableflow_core.dev.processes import free_port

SCHEMA = pa.schema([("id", pa.int64())])
RETRIES = {
    "commit.retry.num-retries": "100",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "100",
}
REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sequential_appends(catalog: Catalog, namespace: str, appends: int) -> float:
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "t"), SCHEMA)
    start = time.perf_counter()
    for i in range(appends):
        table.append(pa.table({"id": [i]}, schema=SCHEMA))
    return appends / (time.perf_counter() - start)


def concurrent_appends(make_catalog, namespace: str, writers: int, appends: int) -> float:  # type: ignore[no-untyped-def]
    make_catalog("setup").create_table((namespace, "c"), SCHEMA, properties=RETRIES)
    barrier = threading.Barrier(writers + 1)

    def run(writer: int) -> None:
        table = make_catalog(f"w{writer}").load_table((namespace, "c"))
        barrier.wait()
        for i in range(appends):
            table.append(pa.table({"id": [writer * 1000 + i]}, schema=SCHEMA))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    rows = make_catalog("check").load_table((namespace, "c")).scan().to_arrow().num_rows
    assert rows == writers * appends, f"lost commits: {rows} rows, expected {writers * appends}"
    return writers * appends / elapsed


# ---------------------------------------------------------------- A/B of server processes


def process_cpu_seconds(pid: int) -> float:
    """user+sys CPU time of a process (all its threads), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class ServerProcess:
    label: str
    process: subprocess.Popen[bytes]
    uri: str
    credential: str

    def catalog(self, name: str) -> Catalog:
        return load_catalog(name, **pyiceberg_catalog_properties(self.uri, self.credential))


@contextmanager
def server_process(label: str, code_root: Path, base: Path) -> Iterator[ServerProcess]:
    """`python -m tableflow_core.catalog.server` importing tableflow_core from `code_root`."""
    warehouse = base / label
    warehouse.mkdir(parents=True)
    port = free_port()
    secret = secrets.token_urlsafe(16)
    env = {**os.environ, "PYTHONPATH": str(code_root), CLIENT_SECRET_ENV: secret}
    command = [
        sys.executable, "-m", "tableflow_core.catalog.server",
        "--host", "127.0.0.1", "--port", str(port), "--warehouse", str(warehouse),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, cwd=code_root)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(uri + "/v1/config", timeout=1)
                break
            except requests.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{label} catalog server did not start") from None
                time.sleep(0.1)
        yield ServerProcess(label, process, uri, f"tableflow:{secret}")
    finally:
        process.terminate()
        process.wait(timeout=30)


def checkout(ref: str, destination: Path) -> Path:
    """`tableflow_core` of git `ref`, extracted under `destination` (the repo is only read)."""
    destination.mkdir(parents=True, exist_ok=True)
    archive = destination / "code.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", ref, "tableflow_core"], cwd=REPO, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(destination, filter="data")
    return destination


@dataclass
class Figures:
    commits: int = 0
    wall: float = 0.0
    server_cpu: float = 0.0
    rounds: list[float] = field(default_factory=list)

    def add(self, commits: int, wall: float, server_cpu: float) -> None:
        self.commits += commits
        self.wall += wall
        self.server_cpu += server_cpu
        self.rounds.append(commits / wall)

    def line(self, label: str) -> str:
        rates = ", ".join(f"{r:.1f}" for r in self.rounds)
        return (
            f"{label:>8}: {self.commits / self.wall:6.1f} commits/s (rounds {rates}), "
            f"server CPU {self.server_cpu / self.commits * 1000:5.1f} ms/commit"
        )


def measured_appends(
    server: ServerProcess, namespace: str, appends: int, loads: int
) -> tuple[float, float]:
    catalog = server.catalog(namespace)
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "t"), SCHEMA)
    table.append(pa.table({"id": [-1]}, schema=SCHEMA))  # warm up: first commit, code paths
    cpu_before = process_cpu_seconds(server.process.pid)
    start = time.perf_counter()
    for i in range(appends):
        for _ in range(loads):
            catalog.load_table((namespace, "t"))
        table.append(pa.table({"id": [i]}, schema=SCHEMA))
    wall = time.perf_counter() - start
    return wall, process_cpu_seconds(server.process.pid) - cpu_before


def ab_servers(ref: str, appends: int, rounds: int, loads: int, base: Path) -> None:
    old_code = checkout(ref, base / "code")
    figures: dict[str, Figures] = {ref: Figures(), "this": Figures()}
    roots: dict[str, Path] = {ref: old_code, "this": REPO}
    with server_process("a", roots[ref], base) as a, server_process("b", roots["this"], base) as b:
        servers = {ref: a, "this": b}
        for round_no in range(rounds):
            order = [ref, "this"] if round_no % 2 == 0 else ["this", ref]
            for label in order:
                wall, cpu = measured_appends(servers[label], f"r{round_no}", appends, loads)
                figures[label].add(appends, wall, cpu)
    print(
        f"A/B, server in its own process, {rounds} rounds x {appends} sequential appends, "
        f"{loads} table loads before each (Spark made 4 per append):"
    )
    for label, figure in figures.items():
        print(figure.line(label))
    old, new = figures[ref], figures["this"]
    print(
        f"    this vs {ref}: {new.commits / new.wall / (old.commits / old.wall):.2f}x commits/s, "
        f"server CPU per commit {new.server_cpu / new.commits / (old.server_cpu / old.commits):.2f}x"
    )


def in_process(appends: int, writers: int, base: Path) -> None:
    direct_dir = base / "direct"
    direct_dir.mkdir()
    direct = open_sql_catalog(
        "bench", f"sqlite:///{direct_dir / 'catalog.db'}", direct_dir.as_uri()
    )
    baseline = sequential_appends(direct, "seq", appends)

    settings = CatalogServerSettings(
        warehouse=base / "rest",
        client_secret=SecretStr("bench-secret"),
        access_log=False,
        log_level="warning",
    )
    with serve_in_background(settings) as server:
        props = server.pyiceberg_properties()
        rest = load_catalog("bench", **props)
        rest_rate = sequential_appends(rest, "seq", appends)
        per_writer = max(1, appends // writers)
        make: Callable[[str], Catalog] = lambda name: load_catalog(name, **props)  # noqa: E731
        concurrent_rate = concurrent_appends(make, "seq", writers, per_writer)

    print(f"sequential appends, SqlCatalog direct (baseline): {baseline:7.1f} commits/s")
    print(
        f"sequential appends, REST catalog in-process:      {rest_rate:7.1f} commits/s ({rest_rate / baseline:.2f}x baseline)"
    )
    print(
        f"{writers} concurrent writers, REST catalog:         {concurrent_rate:7.1f} commits/s, no commit lost"
    )


LOAD_CLIENT = """
import sys, time, requests
uri, authorization = sys.argv[1], sys.argv[2]
session = requests.Session()
session.headers["Authorization"] = authorization
times = []
for _ in range(60):
    start = time.perf_counter()
    session.get(uri).raise_for_status()
    times.append(time.perf_counter() - start)
times.sort()
print(f"median {times[30] * 1000:5.1f} ms, p90 {times[54] * 1000:5.1f} ms")
"""


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def in_process_gil(base: Path) -> None:
    """Table loads from another process while this one (hosting the server) is busy or idle."""
    settings = CatalogServerSettings(
        warehouse=base / "gil", client_secret=SecretStr("s"), access_log=False, log_level="warning"
    )
    with serve_in_background(settings) as server:
        catalog = load_catalog("gil", **server.pyiceberg_properties())
        catalog.create_namespace("g")
        table = catalog.create_table(("g", "t"), SCHEMA)
        for i in range(20):
            table.append(pa.table({"id": [i]}, schema=SCHEMA))
        token = server.bearer_token()
        command = [
            sys.executable, "-c", LOAD_CLIENT,
            server.uri + "/v1/namespaces/g/tables/t", f"Bearer {token}",
        ]  # fmt: skip

        def measure() -> str:
            return subprocess.run(
                command, capture_output=True, text=True, check=True
            ).stdout.strip()

        idle = measure()
        stop = threading.Event()
        busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
        busy.start()
        try:
            contended = measure()
        finally:
            stop.set()
            busy.join()
    print("table loads from another process, server in this process (GIL):")
    print(f"    this process idle:                     {idle}")
    print(f"    one CPU-bound Python thread beside it: {contended}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=40)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument(
        "--against", metavar="REF", help="also A/B this checkout's server against git REF's"
    )
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds (with --against)")
    parser.add_argument(
        "--loads-per-commit",
        type=int,
        default=4,
        help="table loads before each A/B commit (Spark's REST client made 4 per append)",
    )
    parser.add_argument(
        "--skip-in-process", action="store_true", help="only the A/B (with --against)"
    )
    parser.add_argument(
        "--gil",
        action="store_true",
        help="also: load latency of the in-process server while a Python thread is CPU-bound",
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="catalog-bench-"))
    if not args.skip_in_process:
        in_process(args.appends, args.writers, base)
    if args.against:
        ab_servers(args.against, args.appends, args.rounds, args.loads_per_commit, base)
    if args.gil:
        in_process_gil(base)


if __name__ == "__main__":
    main()
