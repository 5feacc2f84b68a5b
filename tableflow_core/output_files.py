"""Writing tableflow's own files (`target/run_results.json`, `target/locks/`, the docs
site) without following symbolic links.

Whoever can put a link in `target/` (or make `target` itself a link) must not make
`apply` or `docs generate` overwrite a file elsewhere. Every directory from the base
(the project root, or an output directory the user named) down to the file is opened
with O_NOFOLLOW, relative to its parent's descriptor, so a link anywhere on the way is
refused rather than followed, even one swapped in while we walk. Files are written to
a new temporary file in that directory and renamed over the old one (a link at the
file's own name is replaced, never written through); lock files are opened O_NOFOLLOW.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tableflow_core.errors import TableflowError

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputPathError(TableflowError, OSError):
    """A path tableflow writes to goes through a symbolic link (or is not a directory)."""


def write_text(path: Path, text: str, base: Path | None = None) -> Path:
    """Write `text` to `path` atomically; no link between `base` (default: the file's own
    directory) and the file is followed. Missing directories are created."""
    with _directory(path, base) as directory:
        temporary = f".{path.name}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(temporary, flags, 0o644, dir_fd=directory)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=directory)
            raise
    return path


def open_lock_file(path: Path, base: Path | None = None) -> IO[str]:
    """`path` opened for reading and appending (created if missing), never through a link."""
    with _directory(path, base) as directory:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            descriptor = os.open(path.name, flags, 0o644, dir_fd=directory)
        except OSError as exc:
            raise _refusal(exc, path) from None
    return os.fdopen(descriptor, "a+", encoding="utf-8")


@contextlib.contextmanager
def _directory(path: Path, base: Path | None) -> Iterator[int]:
    """A descriptor of `path`'s directory, reached from `base` without following links."""
    start = (base or path.parent).absolute()
    parts = path.absolute().parent.relative_to(start).parts  # ValueError: not under base
    start.mkdir(parents=True, exist_ok=True)  # the base itself is the caller's choice
    descriptor = os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        reached = start
        for part in parts:
            reached = reached / part
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=descriptor)
            try:
                child = os.open(part, _DIRECTORY, dir_fd=descriptor)
            except OSError as exc:
                raise _refusal(exc, reached) from None
            os.close(descriptor)
            descriptor = child
        yield descriptor
    finally:
        os.close(descriptor)


def _refusal(exc: OSError, path: Path) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return OutputPathError(
            exc.errno,
            f"{path} is a symbolic link (or not a directory): tableflow does not write "
            "through links in its output folders; remove it",
        )
    return exc
