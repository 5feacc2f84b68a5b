"""The README's YAML snippets of the example project are the real files (issue 32: the
snippet had drifted from tableflow_project.yml). A ```yaml block whose first line is
`# <file>` shows that file: every line of it, in order, as consecutive runs of the
file's lines; a `# ...` line marks what is left out between two runs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.docs_examples import REPO, blocks

HEADER = re.compile(r"^# (?P<path>[\w./-]+\.ya?ml)\s*$")
ELISION = "# ..."


def file_snippets() -> list[tuple[int, Path, list[str]]]:
    found = []
    for block in blocks(REPO / "README.md"):
        if block.lang != "yaml" or not block.lines:
            continue
        header = HEADER.match(block.lines[0])
        if header:
            found.append((block.line, REPO / header.group("path"), list(block.lines[1:])))
    return found


def runs(lines: list[str]) -> list[list[str]]:
    """The snippet's lines between elisions."""
    result: list[list[str]] = [[]]
    for line in lines:
        if line.strip() == ELISION:
            result.append([])
        else:
            result[-1].append(line)
    return [run for run in result if run]


def missing_runs(snippet: list[str], real: list[str]) -> list[list[str]]:
    """The runs of `snippet` not found in `real` as consecutive lines after the previous run."""
    missing, start = [], 0
    for run in runs(snippet):
        at = next(
            (i for i in range(start, len(real) - len(run) + 1) if real[i : i + len(run)] == run),
            None,
        )
        if at is None:
            missing.append(run)
        else:
            start = at + len(run)
    return missing


def test_the_readme_shows_the_example_project_as_it_is() -> None:
    snippets = file_snippets()
    shown = {path.relative_to(REPO).as_posix() for _, path, _ in snippets}
    assert {"tableflow_project.yml", "tables/orders.yml"} <= shown
    for line, path, snippet in snippets:
        assert path.is_file(), f"README.md:{line}: the snippet names {path}, which does not exist"
        drift = missing_runs(snippet, path.read_text().splitlines())
        assert not drift, (
            f"README.md:{line}: these lines are not in {path.relative_to(REPO)} "
            f"(in this order): {drift}"
        )


def test_a_whole_file_snippet_parses_like_the_file() -> None:
    (_, path, snippet) = next(s for s in file_snippets() if s[1].name == "orders.yml")
    assert ELISION not in [line.strip() for line in snippet]
    assert yaml.safe_load("\n".join(snippet)) == yaml.safe_load(path.read_text())


def test_the_check_catches_drift() -> None:
    real = ["a: 1", "b:", "  c: 2", "d: 3"]
    assert missing_runs(["a: 1", "# ...", "d: 3"], real) == []
    assert missing_runs(["b:", "  c: 2"], real) == []
    assert missing_runs(["a: 1", "b:", "  c: 3"], real) == [["a: 1", "b:", "  c: 3"]]
    assert missing_runs(["d: 3", "# ...", "a: 1"], real) == [["a: 1"]]  # out of order
