"""JVM components from Maven Central, fetched once into a user cache and verified.

A *lock* (`tableflow_core/jvm/artifact_locks/<name>.json`, committed) names every file a
component needs, transitive dependencies included, each with its exact version, size
and SHA-256. `ensure(load_lock("kafka"))` downloads what the cache lacks over HTTPS,
checks each file against the lock before it becomes visible, and returns the paths;
when everything is cached it does no network at all (a file sits at its final path
only after it was verified). Users need neither `mvn` nor a JDK to fetch.

Locks are written by maintainers (`python -m tableflow_core.jvm.artifacts lock ...`):
transitive closures come from `mvn dependency:list` on a generated pom; every file is
then downloaded from the repository and checked against the checksum the repository
publishes beside it (`.sha256` when there is one, else `.sha1`).

Environment:
- `TABLEFLOW_ARTIFACT_CACHE`: the cache folder (default `$XDG_CACHE_HOME/tableflow/maven`,
  i.e. `~/.cache/tableflow/maven`); files keep Maven's repository layout inside it.
- `TABLEFLOW_MAVEN_REPOSITORY`: the repository's base URL (a mirror); default Maven Central.
- `TABLEFLOW_OFFLINE=1`: never download; a missing file is an error naming it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tableflow_core.errors import TableflowError

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
CACHE_ENV = "TABLEFLOW_ARTIFACT_CACHE"
REPOSITORY_ENV = "TABLEFLOW_MAVEN_REPOSITORY"
OFFLINE_ENV = "TABLEFLOW_OFFLINE"
LOCK_DIR = Path(__file__).with_name("artifact_locks")
# Measured here: 4 parallel downloads fetched Kafka's 45 jars faster than 1 or 8.
DOWNLOAD_THREADS = 4
DOWNLOAD_ATTEMPTS = 3
CHUNK = 1 << 20


class ArtifactError(TableflowError, RuntimeError):
    """An artifact could not be found, downloaded or verified; the message names it."""


@dataclass(frozen=True, order=True)
class Coordinate:
    """`group:artifact[:extension[:classifier]]:version`, as `mvn dependency:get` spells it."""

    group: str
    artifact: str
    version: str
    extension: str = "jar"
    classifier: str = ""

    @classmethod
    def parse(cls, text: str) -> Coordinate:
        parts = text.strip().split(":")
        if len(parts) == 3:
            group, artifact, version = parts
            return cls(group, artifact, version)
        if len(parts) == 4:
            group, artifact, extension, version = parts
            return cls(group, artifact, version, extension)
        if len(parts) == 5:
            group, artifact, extension, classifier, version = parts
            return cls(group, artifact, version, extension, classifier)
        raise ArtifactError(
            f"not a Maven coordinate: {text!r} (group:artifact[:extension[:classifier]]:version)"
        )

    def __str__(self) -> str:
        if self.classifier:
            return f"{self.group}:{self.artifact}:{self.extension}:{self.classifier}:{self.version}"
        if self.extension != "jar":
            return f"{self.group}:{self.artifact}:{self.extension}:{self.version}"
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.{self.extension}"

    @property
    def relative_path(self) -> str:
        """The path inside a Maven repository (and inside the cache)."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"


@dataclass(frozen=True)
class LockedArtifact:
    coordinate: Coordinate
    sha256: str
    size: int


@dataclass(frozen=True)
class ArtifactLock:
    """A component's pinned files. `roots` are what was asked for; `artifacts` what it needs."""

    name: str
    roots: tuple[Coordinate, ...]
    transitive: bool
    artifacts: tuple[LockedArtifact, ...]
    description: str = ""

    def to_json(self) -> str:
        document = {
            "name": self.name,
            "description": self.description,
            "roots": [str(root) for root in self.roots],
            "transitive": self.transitive,
            "artifacts": [
                {"coordinate": str(a.coordinate), "sha256": a.sha256, "size": a.size}
                for a in self.artifacts
            ],
        }
        return json.dumps(document, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<lock>") -> ArtifactLock:
        try:
            document = json.loads(text)
            return cls(
                name=document["name"],
                description=document.get("description", ""),
                roots=tuple(Coordinate.parse(c) for c in document["roots"]),
                transitive=bool(document["transitive"]),
                artifacts=tuple(
                    LockedArtifact(Coordinate.parse(a["coordinate"]), a["sha256"], int(a["size"]))
                    for a in document["artifacts"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{source}: not a valid artifact lock ({exc})") from exc


@dataclass(frozen=True)
class ResolvedArtifacts:
    """The cached files of a lock, in the lock's order."""

    lock: ArtifactLock
    files: tuple[Path, ...]
    downloaded: int
    downloaded_bytes: int
    seconds: float

    def classpath(self, extension: str = "jar") -> str:
        return os.pathsep.join(str(p) for p in self.files if p.name.endswith(f".{extension}"))

    def file(self, artifact: str) -> Path:
        """The cached file of the lock's artifact named `artifact` (its artifactId)."""
        for locked, path in zip(self.lock.artifacts, self.files, strict=True):
            if locked.coordinate.artifact == artifact:
                return path
        raise ArtifactError(f"lock {self.lock.name!r} has no artifact {artifact!r}")


def cache_root() -> Path:
    """`$TABLEFLOW_ARTIFACT_CACHE`, else `$XDG_CACHE_HOME/tableflow/maven` (~/.cache)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tableflow" / "maven"


def repository_url() -> str:
    return os.environ.get(REPOSITORY_ENV, MAVEN_CENTRAL).rstrip("/")


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes"}


def lock_path(name: str) -> Path:
    return LOCK_DIR / f"{name}.json"


def load_lock(name: str) -> ArtifactLock:
    path = lock_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in LOCK_DIR.glob("*.json"))) or "none"
        raise ArtifactError(f"no artifact lock named {name!r} in {LOCK_DIR} (known: {known})")
    return ArtifactLock.from_json(path.read_text(), source=str(path))


def cached_path(coordinate: Coordinate, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / coordinate.relative_path


def ensure(
    lock: ArtifactLock, cache: Path | None = None, verify: bool = False
) -> ResolvedArtifacts:
    """Every file of `lock` in the cache, downloading (and verifying) only what is missing.

    A cached file is trusted by its size (it was verified before it was moved into
    place); `verify=True` re-hashes every file instead.
    """
    root = cache or cache_root()
    started = time.monotonic()
    paths = tuple(cached_path(a.coordinate, root) for a in lock.artifacts)
    missing = [
        (artifact, path)
        for artifact, path in zip(lock.artifacts, paths, strict=True)
        if not _is_cached(artifact, path, verify)
    ]
    if missing and offline():
        names = ", ".join(str(a.coordinate) for a, _ in missing[:5])
        raise ArtifactError(
            f"{len(missing)} file(s) of {lock.name!r} are not in {root} and {OFFLINE_ENV} is set: "
            f"{names}{' ...' if len(missing) > 5 else ''}"
        )
    base = repository_url()
    with concurrent.futures.ThreadPoolExecutor(DOWNLOAD_THREADS) as pool:
        list(
            pool.map(
                lambda item: _download_verified(
                    f"{base}/{item[0].coordinate.relative_path}",
                    item[1],
                    expected_sha256=item[0].sha256,
                    expected_size=item[0].size,
                ),
                missing,
            )
        )
    return ResolvedArtifacts(
        lock=lock,
        files=paths,
        downloaded=len(missing),
        downloaded_bytes=sum(a.size for a, _ in missing),
        seconds=time.monotonic() - started,
    )


def spark_packages(lock: ArtifactLock) -> str:
    """The lock's roots as `spark.jars.packages` coordinates (Ivy's syntax: no classifier).

    For a cluster whose Spark resolves from Maven Central itself instead of `spark.jars`.
    """
    return ",".join(f"{c.group}:{c.artifact}:{c.version}" for c in lock.roots)


def unpack(archive: Path, cache: Path | None = None) -> Path:
    """Extract a cached `.tar.gz`/`.tgz`/`.zip` once; later calls return the same folder.

    The folder appears complete or not at all (extracted beside it, then renamed).
    """
    root = (cache or cache_root()) / "unpacked"
    target = root / archive.name.removesuffix(".tar.gz").removesuffix(".tgz").removesuffix(".zip")
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        if archive.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(scratch, filter="data")
        elif archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zipped:
                for member in zipped.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise ArtifactError(f"{archive}: unsafe member path {member!r}")
                zipped.extractall(scratch)
        else:
            raise ArtifactError(f"{archive}: not an archive tableflow can unpack")
        try:
            scratch.rename(target)
        except OSError:
            if not target.is_dir():  # not lost to a concurrent unpack
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _is_cached(artifact: LockedArtifact, path: Path, verify: bool) -> bool:
    try:
        if path.stat().st_size != artifact.size:
            return False
    except FileNotFoundError:
        return False
    return not verify or _file_digest(path, "sha256") == artifact.sha256


def _file_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _download_verified(
    url: str,
    target: Path,
    expected_sha256: str | None = None,
    expected_size: int | None = None,
    published_checksum: tuple[str, str] | None = None,
) -> str:
    """Download `url` to `target` atomically; returns the file's SHA-256.

    It is checked against `expected_sha256` (a lock) or `published_checksum`
    (algorithm, hex digest published by the repository) before it is moved into place.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part")
    last_error: Exception | None = None
    for attempt in range(DOWNLOAD_ATTEMPTS):
        try:
            sha256 = hashlib.sha256()
            other = hashlib.new(published_checksum[0]) if published_checksum else None
            size = 0
            with urllib.request.urlopen(url, timeout=60) as response, open(scratch, "wb") as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    sha256.update(chunk)
                    if other is not None:
                        other.update(chunk)
                    size += len(chunk)
            digest = sha256.hexdigest()
            if expected_size is not None and size != expected_size:
                raise ArtifactError(f"{url}: {size} bytes, the lock says {expected_size}")
            if expected_sha256 is not None and digest != expected_sha256:
                raise ArtifactError(f"{url}: SHA-256 {digest} does not match the lock's")
            if (
                published_checksum is not None
                and other is not None
                and other.hexdigest() != published_checksum[1]
            ):
                raise ArtifactError(
                    f"{url}: {published_checksum[0]} {other.hexdigest()} does not match "
                    f"the published {published_checksum[1]}"
                )
            os.replace(scratch, target)
            return digest
        except ArtifactError:
            scratch.unlink(missing_ok=True)
            raise
        except urllib.error.HTTPError as exc:
            scratch.unlink(missing_ok=True)
            if exc.code == 404:
                raise ArtifactError(f"{url}: not found (404)") from exc
            last_error = exc
        except OSError as exc:
            scratch.unlink(missing_ok=True)
            last_error = exc
        time.sleep(1.0 * (attempt + 1))
    raise ArtifactError(f"{url}: download failed after {DOWNLOAD_ATTEMPTS} attempts: {last_error}")


def _published_checksum(url: str) -> tuple[str, str]:
    """The repository's own checksum of `url`: `.sha256` where published, else `.sha1`."""
    for algorithm in ("sha256", "sha1"):
        try:
            with urllib.request.urlopen(f"{url}.{algorithm}", timeout=30) as response:
                text = response.read().decode("ascii", errors="replace").strip()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                continue
            raise ArtifactError(f"{url}.{algorithm}: HTTP {exc.code}") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, FileNotFoundError):  # a file:// mirror
                continue
            raise ArtifactError(f"{url}.{algorithm}: {exc.reason}") from exc
        if text:
            return algorithm, text.split()[0].lower()
    raise ArtifactError(f"{url}: the repository publishes no .sha256 or .sha1 beside it")


# --- writing locks (maintainers; needs `mvn` only for transitive closures) -------------


def resolve_with_maven(roots: Sequence[Coordinate], mvn: str = "mvn") -> list[Coordinate]:
    """The runtime closure of `roots` as Maven resolves it (nearest version wins)."""
    if shutil.which(mvn) is None:
        raise ArtifactError(f"{mvn!r} not found: writing a transitive lock needs Maven")
    with tempfile.TemporaryDirectory(prefix="tableflow-lock-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(roots))
        listing = Path(work) / "dependencies.txt"
        command = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:list",
            "-DincludeScope=runtime",
            "-DexcludeTransitive=false",
            f"-DoutputFile={listing}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ArtifactError(f"mvn dependency:list failed:\n{result.stdout[-3000:]}")
        return parse_dependency_list(listing.read_text())


def parse_dependency_list(text: str) -> list[Coordinate]:
    """Coordinates from `mvn dependency:list` output lines `g:a:type[:classifier]:v:scope`."""
    coordinates = []
    for line in text.splitlines():
        entry = line.split(" -- ")[0].strip()
        parts = entry.split(":")
        if len(parts) == 5:
            group, artifact, extension, version, _scope = parts
            coordinates.append(Coordinate(group, artifact, version, extension))
        elif len(parts) == 6:
            group, artifact, extension, classifier, version, _scope = parts
            coordinates.append(Coordinate(group, artifact, version, extension, classifier))
    return sorted(set(coordinates))


def write_lock(
    name: str,
    roots: Sequence[Coordinate],
    transitive: bool,
    description: str = "",
    cache: Path | None = None,
    resolver: Callable[[Sequence[Coordinate]], list[Coordinate]] = resolve_with_maven,
) -> ArtifactLock:
    """Resolve, download and verify against the repository's checksums; write the lock."""
    coordinates = resolver(roots) if transitive else sorted(set(roots))
    base = repository_url()
    root = cache or cache_root()

    def fetch(coordinate: Coordinate) -> LockedArtifact:
        url = f"{base}/{coordinate.relative_path}"
        target = cached_path(coordinate, root)
        digest = _download_verified(url, target, published_checksum=_published_checksum(url))
        return LockedArtifact(coordinate, digest, target.stat().st_size)

    with concurrent.futures.ThreadPoolExecutor(DOWNLOAD_THREADS) as pool:
        artifacts = tuple(pool.map(fetch, coordinates))
    lock = ArtifactLock(name, tuple(roots), transitive, artifacts, description)
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    lock_path(name).write_text(lock.to_json())
    return lock


def _pom(roots: Iterable[Coordinate]) -> str:
    dependencies = "".join(
        "<dependency>"
        f"<groupId>{c.group}</groupId><artifactId>{c.artifact}</artifactId>"
        f"<version>{c.version}</version><type>{c.extension}</type>"
        + (f"<classifier>{c.classifier}</classifier>" if c.classifier else "")
        + "</dependency>"
        for c in roots
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>tableflow.lock</groupId><artifactId>lock</artifactId><version>0</version>"
        f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tableflow_core.jvm.artifacts")
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("fetch", help="download the locks' files into the cache")
    fetch.add_argument("names", nargs="*", help="lock names (default: all)")
    fetch.add_argument("--verify", action="store_true", help="re-hash cached files too")
    classpath = commands.add_parser("classpath", help="print a lock's cached class path")
    classpath.add_argument("name")
    lock = commands.add_parser("lock", help="(maintainers) resolve and write a lock")
    lock.add_argument("name")
    lock.add_argument("--root", action="append", default=[], help="a coordinate; repeatable")
    lock.add_argument("--no-transitive", action="store_true", help="only the roots' own files")
    lock.add_argument("--description", default=None)
    args = parser.parse_args(argv)

    if args.command == "fetch":
        names = args.names or sorted(p.stem for p in LOCK_DIR.glob("*.json"))
        for name in names:
            resolved = ensure(load_lock(name), verify=args.verify)
            print(
                f"{name}: {len(resolved.files)} files in {cache_root()}, downloaded "
                f"{resolved.downloaded} ({resolved.downloaded_bytes / 1e6:.1f} MB) "
                f"in {resolved.seconds:.1f} s"
            )
    elif args.command == "classpath":
        print(ensure(load_lock(args.name)).classpath())
    else:
        previous = None
        with contextlib.suppress(ArtifactError):
            previous = load_lock(args.name)
        roots = [Coordinate.parse(r) for r in args.root] or (
            list(previous.roots) if previous else []
        )
        if not roots:
            parser.error("give --root coordinates (or regenerate an existing lock by name)")
        transitive = not args.no_transitive if args.root or not previous else previous.transitive
        description = args.description or (previous.description if previous else "")
        written = write_lock(args.name, roots, transitive, description)
        print(f"wrote {lock_path(args.name)}: {len(written.artifacts)} artifacts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
