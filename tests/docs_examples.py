"""Command examples in README.md and docs/*.md, as tests/integration/test_docs_examples.py runs them.

Convention: commands go in ```console blocks, one per line starting with `$ ` (a
trailing `\\` continues it on the next line). Lines without `$ ` in a console block are
sample output and are not checked. A comment `# exits N` at the end of a command
expects exit status N instead of 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Regular expression (matched at the start of the command) -> why it is not run. Short.
NOT_RUN: dict[str, str] = {
    r"bash scripts/demo\.sh": "creates .venv and a stack on the default ports; CI runs it as its own job",
    r"bash scripts/test\.sh": "is the test suite itself",
    r"python -m tableflow_core\.catalog\.server\b": "serves in the foreground until stopped",
    r'"\$SPARK_HOME"/bin/spark-class\b': "a long-running Spark master/worker (tests/integration/test_cluster.py starts them)",
}
UNIT_TESTS = r"\.venv/bin/python -m pytest tests/unit\b"
# Commands about the checkout itself (its .venv, its tests): run from the repository's root,
# not from the doc's copy of the example project.
IN_REPOSITORY: tuple[str, ...] = (
    UNIT_TESTS,
    r"promtool (check|test) rules docs/alerts/",  # the rule files live in the repository
)
# Commands whose work the same pytest run does itself (`scripts/test.sh` runs tests/unit
# before tests/integration): run with `--collect-only`, which still fails on a wrong path,
# an import error or a test that cannot be collected. Running the whole unit suite again
# inside the integration suite took about 3.4 of the README test's 7.4 minutes on 2 cores
# (441 s -> 237 s, docs/performance.md).
COLLECT_ONLY: tuple[str, ...] = (UNIT_TESTS,)
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh", "shell-session"})
EXPECTED_EXIT = re.compile(r"#.*\bexits? (?P<code>\d+)\b")


@dataclass(frozen=True)
class Example:
    doc: str  # path relative to the repository
    line: int  # 1-based line of the `$ ` prompt
    command: str

    @property
    def expected_exit(self) -> int:
        match = EXPECTED_EXIT.search(self.command)
        return int(match.group("code")) if match else 0

    def reason_not_run(self) -> str | None:
        for pattern, reason in NOT_RUN.items():
            if re.match(pattern, self.command):
                return reason
        return None

    @property
    def command_run(self) -> str:
        """The command as the docs test runs it (`COLLECT_ONLY`)."""
        if self._matches(COLLECT_ONLY):
            return f"{self.command} --collect-only"
        return self.command

    @property
    def in_repository(self) -> bool:
        return self._matches(IN_REPOSITORY)

    def _matches(self, patterns: tuple[str, ...]) -> bool:
        return any(re.match(pattern, self.command) for pattern in patterns)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: $ {self.command}"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    lines: tuple[str, ...]


def documents() -> list[Path]:
    """Every doc whose examples are run: README.md and docs/*.md (new docs included)."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def all_examples() -> list[Example]:
    return [example for doc in documents() for example in examples(doc)]


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    current: tuple[int, str, list[str]] | None = None
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        fence = FENCE.match(text)
        if current is None:
            if fence:
                current = (number, fence.group("lang").lower(), [])
        elif fence and not fence.group("lang"):
            start, lang, body = current
            found.append(Block(str(path.relative_to(REPO)), start, lang, tuple(body)))
            current = None
        else:
            current[2].append(text)
    return found


def examples(path: Path) -> list[Example]:
    """The `$ ` commands of a doc's console blocks, continuation lines joined."""
    result: list[Example] = []
    for block in blocks(path):
        if block.lang != "console":
            continue
        pending: tuple[int, str] | None = None
        for offset, text in enumerate(block.lines, start=1):
            stripped = text.strip()
            if pending is not None:
                start, command = pending
                command += " " + stripped.removesuffix("\\").strip()
                pending = (start, command) if stripped.endswith("\\") else None
                if pending is None:
                    result.append(Example(block.doc, start, command))
                continue
            if stripped.startswith("$ "):
                command = stripped[2:].strip()
                if command.endswith("\\"):
                    pending = (block.line + offset, command.removesuffix("\\").strip())
                else:
                    result.append(Example(block.doc, block.line + offset, command))
    return result


def shell_blocks(path: Path) -> list[Block]:
    """Blocks that look like commands but do not follow the console convention."""
    return [b for b in blocks(path) if b.lang in SHELL_LANGS]
