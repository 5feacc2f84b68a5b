"""`tableflow apply` on a Spark standalone cluster across hosts, and kill -9 of a worker.

Five test hosts (network namespaces on one bridge, tests/netns.py):
- `data`: Apache Kafka (KRaft), the schema registry and s3proxy, bound to its address;
- `master`: the Spark standalone master; `worker1`, `worker2`: one worker each (1 core);
- `driver`: the `tableflow apply` CLI, with the embedded catalog it starts in-process.

The catalog stays on the driver host's own loopback (its default, 127.0.0.1 inside the
driver's namespace): only the driver talks to it; executors get each table's file IO,
vended S3 keys included, from the driver. A worker or executor that needed the catalog
would fail, which proves they do not. The warehouse is on s3:// at the data host. The
workers see the machine's disk (the venv, pyspark) but not the driver's directory (the
project, the catalog database) nor the data host's, nor the artifact cache: each worker
runs in a mount namespace of its own with those directories hidden under an empty,
read-only tmpfs, so an executor that read a project file or wrote to a file:// path
would fail. Every host's TCP connections are sampled during the run and must be among
the flows docs/cluster.md tells users to open.

The apply runs through `spark://<master>:7077`. As soon as an executor runs a task of
the ingest (the driver's REST API says so), every process of that worker's host is
killed with SIGKILL: the worker JVM, its executor JVM and the executor's Python workers.
Spark re-runs the lost tasks on the other worker; the table, read back from S3 by DuckDB
(no catalog, no Spark), holds every produced record exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tableflow_core.jvm.artifacts import cache_root
from tableflow_core.pipeline.runners.read_ranges import MIN_RECORDS_PER_TASK
from tests import netns
from tests.integration import cluster_roles

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not netns.available(), reason="needs root and ip netns (test hosts)"),
]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4
# A run's ranges share a Spark task below MIN_RECORDS_PER_TASK records a task: 4/5 of it
# a partition makes one task per partition, so both workers have ingest tasks to lose.
RECORDS = PARTITIONS * (MIN_RECORDS_PER_TASK * 4 // 5)
WORKER_FORK_TIMEOUT_S = 120
SEED = 30
# Inside its own namespace each host has all ports to itself: Spark's usual numbers.
MASTER_PORT, MASTER_UI_PORT = 7077, 8080
WORKER_PORT, WORKER_UI_PORT = 7078, 8081
DRIVER_PORT, DRIVER_BLOCK_MANAGER_PORT, EXECUTOR_BLOCK_MANAGER_PORT = 7079, 7080, 7090
DRIVER_UI_PORT = 4040


# Who opens TCP connections to whom (client host, server host, server port): what
# docs/cluster.md tells users to open between hosts. "workers" stands for worker1 and
# worker2 (the worker JVM, its executor and the executor's Python workers).
ALLOWED_FLOWS = {
    ("driver", "master", "spark master"),  # register the application
    ("workers", "master", "spark master"),  # register, heartbeats
    ("workers", "driver", "driver rpc"),  # executors: tasks, status, the jars
    ("workers", "driver", "driver block manager"),  # executors: broadcasts (task binaries)
    ("driver", "data", "kafka"),  # plan: watermarks; commit checks
    ("workers", "data", "kafka"),  # tasks read their offset ranges
    ("driver", "data", "registry"),
    ("workers", "data", "registry"),  # tasks look up writer schemas
    ("driver", "data", "s3"),  # metadata files, manifests
    ("workers", "data", "s3"),  # tasks write data files
    # Not seen in this run, open them too: the master sends to a worker over the worker's
    # own connection here, but Spark's security guide lists master -> worker port; the
    # executors' block managers serve large task results and shuffle blocks.
    ("master", "workers", "spark worker"),
    ("driver", "workers", "executor block manager"),
    ("workers", "workers", "executor block manager"),
    ("driver", "master", "master ui"),  # monitoring only (the test reads the master's JSON)
}
# Long-lived connections every run has, so a sample sees them.
ALWAYS_SEEN = {
    ("driver", "master", "spark master"),
    ("workers", "master", "spark master"),
    ("workers", "driver", "driver rpc"),
    ("workers", "data", "kafka"),
    ("workers", "data", "s3"),
}


class FlowSampler(threading.Thread):
    """Every host's TCP connections until stopped: `ss -Htan` every 0.3 s for the listening
    sockets and the open connections, and `ss -E` for every socket the kernel closes, so a
    connection that opens and closes between two samples (a task writing one data file to
    S3 on a loaded machine) is heard too."""

    def __init__(self, hosts: list[netns.Host]) -> None:
        super().__init__(name="flow-sampler", daemon=True)
        self.hosts = hosts
        self.stopped = threading.Event()
        self.listening: set[tuple[str, int]] = set()
        self.connections: set[tuple[str, str, int]] = set()  # (from host, to address, port)
        self.closing_watchers: list[subprocess.Popen[str]] = []

    def run(self) -> None:
        readers = [self._watch_closing(host) for host in self.hosts]
        try:
            while not self.stopped.is_set():
                for host in self.hosts:
                    for line in host.run(["ss", "-Htan"], timeout=10).stdout.splitlines():
                        fields = line.split()
                        if len(fields) < 5:
                            continue
                        if fields[0] == "LISTEN":
                            self.listening.add((host.address, _address(fields[3])[1]))
                        elif fields[0] == "ESTAB":
                            self._connection(host, fields[4])
                self.stopped.wait(0.3)
        finally:
            for watcher in self.closing_watchers:
                watcher.terminate()
            for reader in readers:
                reader.join(timeout=10)

    def _watch_closing(self, host: netns.Host) -> threading.Thread:
        # Not `host.popen`: a killed host's watcher dies with it and is reaped here.
        watcher = subprocess.Popen(
            host.command(["stdbuf", "-oL", "ss", "-E", "-Htan"]),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        self.closing_watchers.append(watcher)

        def read() -> None:
            assert watcher.stdout is not None
            for line in watcher.stdout:
                fields = line.split()
                if len(fields) >= 5:
                    self._connection(host, fields[4])
            watcher.wait()

        reader = threading.Thread(target=read, name=f"closing-{host.name}", daemon=True)
        reader.start()
        return reader

    def _connection(self, host: netns.Host, peer_text: str) -> None:
        peer = _address(peer_text)
        if peer[0] != host.address:
            self.connections.add((host.name, peer[0], peer[1]))

    def flows(self, names: dict[str, str], ports: dict[int, str]) -> set[tuple[str, str, str]]:
        """(client host, server host, server port's role); worker hosts as "workers"."""

        def role(name: str) -> str:
            return "workers" if name.startswith("worker") else name

        return {
            (role(client), role(names[address]), ports.get(port, str(port)))
            for client, address, port in self.connections
            if (address, port) in self.listening and address in names
        }


def _address(text: str) -> tuple[str, int]:
    """`198.18.1.2:7077` or `[::ffff:198.18.1.2]:7077`; a wildcard peer (`*`) is port 0."""
    host, _, port = text.rpartition(":")
    return host.removeprefix("[::ffff:").removesuffix("]"), int(port) if port.isdigit() else 0


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def hiding(directories: list[Path], argv: list[str]) -> list[str]:
    """`argv` in a mount namespace of its own where `directories` are empty and read-only
    (a write there fails at once instead of landing on this host's disk)."""
    mounts = " && ".join(
        f"mount -t tmpfs -o ro,size=64k,mode=0555 hidden '{d}'" for d in directories
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh", *argv]  # fmt: skip


def hideable_artifact_cache() -> list[Path]:
    """The driver's jar cache, unless the workers need what is under it (the venv)."""
    cache = cache_root().resolve()
    needed = (REPO, Path(sys.prefix).resolve())
    return [cache] if cache.is_dir() and not any(p.is_relative_to(cache) for p in needed) else []


def spark_env(address: str, log_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        # Bind to the host's address; the machine's hostname resolves to no address here.
        "SPARK_LOCAL_IP": address,
        "SPARK_LOCAL_HOSTNAME": address,
        "SPARK_LOG_DIR": str(log_dir),
        "SPARK_DAEMON_MEMORY": "256m",
    }


def wait_until(host: netns.Host, code: str, timeout: float = 120) -> str:
    """Run `code` (Python) in `host` until it exits 0; its stdout."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        result = host.run([sys.executable, "-c", code], timeout=30)
        if result.returncode == 0:
            return result.stdout
        last = result.stderr[-500:]
        time.sleep(1)
    raise AssertionError(f"{host.name}: not ready within {timeout:.0f}s: {last}")


def alive_workers_code(master: str) -> str:
    return (
        "import json, urllib.request, sys\n"
        f"state = json.load(urllib.request.urlopen('http://{master}:{MASTER_UI_PORT}/json', timeout=2))\n"
        "alive = [w['host'] for w in state['workers'] if w['state'] == 'ALIVE']\n"
        "print(json.dumps(alive)); sys.exit(0 if len(alive) == 2 else 1)\n"
    )


def listeners(host: netns.Host) -> list[str]:
    """Addresses the host's listening TCP sockets are bound to (IPv4-mapped shown as IPv4;
    a wildcard shows as `0.0.0.0`, `*` or `[::]`)."""
    result = host.run(["ss", "-Hltn"])
    local = [line.split()[3].rsplit(":", 1)[0] for line in result.stdout.splitlines() if line]
    return [a.removeprefix("[::ffff:").removesuffix("]") for a in local]


def cluster_project(
    root: Path, servers: dict[str, str], topic: str, master: str, driver: str
) -> Path:
    root.mkdir(parents=True)
    target: dict[str, Any] = {
        "kafka": {"bootstrap_servers": servers["bootstrap"]},
        "schema_registry": {
            "url": servers["registry"],
            "basic_auth": {
                "username": cluster_roles.REGISTRY_USER,
                "password": f"{{{{ env_var('{cluster_roles.REGISTRY_PASSWORD_ENV}') }}}}",
            },
        },
        "catalog": {
            "type": "embedded",
            "name": "cluster",
            "warehouse": f"s3://{cluster_roles.BUCKET}/wh",
            "database_url": f"sqlite:///{root / 'catalog.db'}",
            "storage": {
                "endpoint": servers["s3"],
                "region": cluster_roles.REGION,
                "access_key_id": f"{{{{ env_var('{cluster_roles.KEY_ID_ENV}') }}}}",
                "secret_access_key": f"{{{{ env_var('{cluster_roles.SECRET_ENV}') }}}}",
                "credentials": "vended",
            },
        },
        "spark": {
            "master": f"spark://{master}:{MASTER_PORT}",
            "conf": {
                # What executors connect back to (the driver binds it too), and the
                # ports a firewall must open.
                "spark.driver.host": driver,
                "spark.driver.port": DRIVER_PORT,
                "spark.driver.blockManager.port": DRIVER_BLOCK_MANAGER_PORT,
                "spark.blockManager.port": EXECUTOR_BLOCK_MANAGER_PORT,
                "spark.executor.memory": "512m",
                "spark.executor.cores": 1,
                "spark.cores.max": 2,
                # The test watches the tasks through the driver's REST API.
                "spark.ui.enabled": True,
                "spark.ui.port": DRIVER_UI_PORT,
            },
        },
    }
    project = {"name": "shop", "default_target": "cluster", "targets": {"cluster": target}}
    project["defaults"] = {"namespace": "cluster"}
    (root / "tableflow_project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    (root / "tables").mkdir()
    table = {"name": "orders", "topic": topic, "metadata_columns": ["partition", "offset"]}
    (root / "tables" / "orders.yml").write_text(yaml.safe_dump({"tables": [table]}))
    return root


@pytest.fixture
def network() -> Iterator[netns.TestNetwork]:
    with netns.TestNetwork(["driver", "master", "worker1", "worker2", "data"]) as net:
        yield net


@pytest.fixture
def sampler(network: netns.TestNetwork) -> Iterator[FlowSampler]:
    """Every host's connections from the start; stopped before the hosts go away."""
    flow_sampler = FlowSampler(list(network.hosts.values()))
    flow_sampler.start()
    try:
        yield flow_sampler
    finally:
        flow_sampler.stopped.set()
        flow_sampler.join(timeout=30)


def test_apply_across_hosts_survives_a_killed_worker(
    network: netns.TestNetwork, sampler: FlowSampler, tmp_path: Path
) -> None:
    started = time.monotonic()
    driver, master, data = (network.host(n) for n in ("driver", "master", "data"))
    workers = [network.host("worker1"), network.host("worker2")]
    dirs = {name: tmp_path / name for name in network.hosts}
    for directory in dirs.values():
        directory.mkdir()
    secret_env = {
        cluster_roles.KEY_ID_ENV: "cluster",
        cluster_roles.SECRET_ENV: secrets.token_urlsafe(30),
        cluster_roles.REGISTRY_PASSWORD_ENV: secrets.token_urlsafe(18),
    }
    role_env = {**os.environ, **secret_env, "PYTHONPATH": str(REPO)}
    role = [sys.executable, "-m", "tests.integration.cluster_roles"]

    # data: Kafka, the registry, s3proxy on the data host's address.
    servers_file = dirs["data"] / "servers.json"
    with open(dirs["data"] / "roles.log", "wb") as log:
        data_role = data.popen(
            [*role, "data", "--host", data.address, "--dir", str(dirs["data"]),
             "--out", str(servers_file)],
            env=role_env, stdout=log, stderr=log, cwd=REPO,
        )  # fmt: skip
    # The Spark master and workers meanwhile (JVMs start slowly on a shared machine).
    hidden = [dirs["driver"], dirs["data"], *hideable_artifact_cache()]
    with open(dirs["master"] / "master.out", "wb") as log:
        master.popen(
            hiding(hidden, [
                str(spark_class()), "org.apache.spark.deploy.master.Master",
                "--host", master.address, "--port", str(MASTER_PORT),
                "--webui-port", str(MASTER_UI_PORT),
            ]),
            env=spark_env(master.address, dirs["master"]), stdout=log, stderr=log,
        )  # fmt: skip
    for worker in workers:
        with open(dirs[worker.name] / "worker.out", "wb") as log:
            worker.popen(
                hiding(hidden, [
                    str(spark_class()), "org.apache.spark.deploy.worker.Worker",
                    "--host", worker.address, "--port", str(WORKER_PORT),
                    "--webui-port", str(WORKER_UI_PORT), "--cores", "1", "--memory", "1g",
                    "--work-dir", str(dirs[worker.name] / "work"),
                    f"spark://{master.address}:{MASTER_PORT}",
                ]),
                env=spark_env(worker.address, dirs[worker.name]), stdout=log, stderr=log,
            )  # fmt: skip
    deadline = time.monotonic() + 180
    while not servers_file.exists():
        failed = data_role.poll() is not None or time.monotonic() > deadline
        assert not failed, (dirs["data"] / "roles.log").read_text()[-3000:]
        time.sleep(0.5)
    servers = json.loads(servers_file.read_text())
    alive = json.loads(wait_until(driver, alive_workers_code(master.address), timeout=180))
    assert sorted(alive) == sorted(w.address for w in workers)

    # The workers cannot see the driver's directory (where the project is).
    topic = f"orders-{secrets.token_hex(4)}"
    root = cluster_project(dirs["driver"] / "shop", servers, topic, master.address, driver.address)
    for worker in workers:
        (pid,) = [p for p in worker.pids() if "deploy.worker.Worker" in _cmdline(p)]
        assert not Path(f"/proc/{pid}/root{root}/tableflow_project.yml").exists()
        assert Path(f"/proc/{pid}/root{REPO}/pyproject.toml").exists()

    produced = driver.run(
        [*role, "produce", "--servers", str(servers_file), "--topic", topic,
         "--count", str(RECORDS), "--partitions", str(PARTITIONS), "--seed", str(SEED)],
        env=role_env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-3000:]
    per_partition = {int(p): n for p, n in json.loads(produced.stdout)["per_partition"].items()}
    assert sum(per_partition.values()) == RECORDS and len(per_partition) == PARTITIONS

    # apply on the driver host; a watcher there reports the first executor running an
    # ingest task, and that executor's whole host dies.
    driver_env = {
        **os.environ, **secret_env, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200",
    }  # fmt: skip
    # A Spark session an earlier test built in this process left SPARK_LOCAL_IP=127.0.0.1
    # in os.environ (engine/spark_session.py binds local mode to loopback): inherited, the
    # driver's UI listened on its namespace's loopback and the watcher never saw a task.
    driver_env.pop("SPARK_LOCAL_IP", None)
    apply_log = dirs["driver"] / "apply.log"
    with open(apply_log, "wb") as log:
        apply = driver.popen(
            [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), "apply",
             "--auto-approve"],
            env=driver_env, stdout=log, stderr=log, cwd=dirs["driver"],
        )  # fmt: skip
    watcher = driver.popen(
        [*role, "watch", "--ui", f"http://{driver.address}:{DRIVER_UI_PORT}"],
        env=role_env, cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watcher.stdout is not None
    first = json.loads(watcher.stdout.readline())
    busy = first["host"]
    assert busy is not None, f"no executor ran an ingest task\n{apply_log.read_text()[-3000:]}"
    (victim,) = [w for w in workers if w.address == busy]
    survivor = next(w for w in workers if w is not victim)
    driver_listeners = listeners(driver)
    # Kill once the task's Python worker runs (the daemon and its forked worker). The
    # daemon imports the decode path before it forks (pipeline/worker_daemon.py): on a
    # loaded CI machine that took over 20 s once. Spark keeps a forked worker for reuse
    # after its task, so waiting longer cannot miss it.
    waited = time.monotonic()
    deadline = waited + WORKER_FORK_TIMEOUT_S
    while len(python_workers(victim)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = victim.pids()
    assert len(python_workers(victim)) >= 2, (
        f"no forked Python worker after {time.monotonic() - waited:.0f} s",
        [_cmdline(p) for p in killed],
        apply_log.read_text(errors="replace")[-3000:],
    )
    # The test's own processes in the host's network namespace, not hidden from the
    # driver's files: the closing watchers, and the `ss` probes the sampler and
    # `listeners` run there every 0.3 s (one may be alive at the listing).
    ours = {w.pid for w in sampler.closing_watchers}
    ours |= {pid for pid in killed if _is_ss_probe(_cmdline(pid))}
    for pid in set(killed) - ours:  # the executor does not see the driver's directory
        assert not Path(f"/proc/{pid}/root{root}/tableflow_project.yml").exists(), _cmdline(pid)
    print(f"killing {victim.name}: {[_name(_cmdline(p)) for p in killed]}")
    for pid in killed:
        # A short-lived process of the host's (its name was already unreadable above) may
        # have ended since the listing.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for process in victim.processes:  # the worker JVM is this test's child: reap it
        process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while victim.pids():
        assert time.monotonic() < deadline, f"{victim.name} still runs {victim.pids()}"
        time.sleep(0.1)
    try:
        status = apply.wait(timeout=600)
    except Exception:
        raise AssertionError(f"apply did not end\n{apply_log.read_text()[-3000:]}") from None
    output = apply_log.read_text(errors="replace")
    assert status == 0, output[-5000:]
    # Spark saw the tasks of the killed executor fail and ran them again on the survivor.
    tasks = json.loads(watcher.communicate(timeout=60)[0].strip().splitlines()[-1])["tasks"]
    lost = [t for t in tasks if t["host"] == victim.address and t["status"] == "FAILED"]
    assert lost, tasks
    assert {t["index"] for t in tasks} == set(range(PARTITIONS)), tasks
    assert all("ExecutorLostFailure" in t["error"] for t in lost), lost
    for task in lost:
        assert any(
            t["index"] == task["index"]
            and t["status"] == "SUCCESS"
            and t["host"] == survivor.address
            for t in tasks
        ), tasks

    # Exactly once: every (partition, offset) produced, once; the same order ids.
    read = driver.run(
        [*role, "read", "--servers", str(servers_file), "--prefix", "wh/", "--table", "orders"],
        env=role_env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr[-3000:]
    table = json.loads(read.stdout.strip().splitlines()[-1])
    expected_positions = sorted([p, o, 1] for p, n in per_partition.items() for o in range(n))
    assert table["rows"] == RECORDS
    assert table["positions"] == expected_positions
    assert table["order_ids"] == sorted(f"o-{SEED}-{i:09d}" for i in range(RECORDS))

    # Every server bound its host's address (or the host's own loopback), none a wildcard.
    for host in (data, master, survivor):
        bound = listeners(host)
        assert bound, host.name
        assert set(bound) <= {host.address, "127.0.0.1"}, (host.name, bound)
    assert set(driver_listeners) <= {driver.address, "127.0.0.1"}, driver_listeners
    # The connections between hosts are among those docs/cluster.md lists.
    sampler.stopped.set()
    sampler.join(timeout=30)
    names = {host.address: host.name for host in network.hosts.values()}
    ports = {
        int(servers["bootstrap"].rsplit(":", 1)[1]): "kafka",
        int(servers["registry"].rsplit(":", 1)[1]): "registry",
        int(servers["s3"].rsplit(":", 1)[1]): "s3",
        MASTER_PORT: "spark master", MASTER_UI_PORT: "master ui",
        WORKER_PORT: "spark worker", DRIVER_PORT: "driver rpc",
        DRIVER_BLOCK_MANAGER_PORT: "driver block manager",
        EXECUTOR_BLOCK_MANAGER_PORT: "executor block manager",
    }  # fmt: skip
    flows = sampler.flows(names, ports)
    print("flows:", sorted(flows))
    assert flows <= ALLOWED_FLOWS, flows - ALLOWED_FLOWS
    assert flows >= ALWAYS_SEEN, ALWAYS_SEEN - flows
    print(json.dumps(tasks, indent=1))
    print(
        f"killed {victim.name} ({len(killed)} processes); test took {time.monotonic() - started:.0f}s"
    )


def python_workers(host: netns.Host) -> list[int]:
    return [p for p in host.pids() if "worker_daemon" in _cmdline(p)]


def _name(command: str) -> str:
    for known in ("deploy.worker.Worker", "CoarseGrainedExecutorBackend", "worker_daemon"):
        if known in command:
            return known
    return command[:60]


def _is_ss_probe(cmdline: str) -> bool:
    """`ss ...`, or `ip netns exec <host> ss ...` caught before it execs `ss`."""
    argv = cmdline.split()
    if argv[:3] == ["ip", "netns", "exec"]:
        argv = argv[4:]
    return argv[:1] == ["ss"]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
