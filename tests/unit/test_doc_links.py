"""Links between docs resolve: README.md, docs/*.md and docs/history/*.md.

A relative link must name a file of the repository, and its `#anchor`, if any, a heading
of that file (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens, a
repeated heading numbered). Links inside code blocks and to other sites are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if FENCE.match(text):
            fenced = not fenced
        elif not fenced:
            lines.append((number, text))
    return lines


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, text in prose_lines(path):
        match = HEADING.match(text)
        if match:
            base = anchor(match.group("text"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    broken: list[str] = []
    for number, text in prose_lines(path):
        for match in LINK.finditer(text):
            target = match.group("target")
            if SCHEME.match(target):
                continue
            file_part, _, fragment = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{where} (no such heading)")
    return broken


def test_links_between_docs_resolve() -> None:
    broken = [problem for path in documents() for problem in broken_links(path)]
    assert broken == [], "\n".join(broken)


def test_the_check_catches_a_missing_file_and_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Two words\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#two-words) [self](#here) [web](https://example.com)\n"
        "# Here\n"
        "[gone](missing.md) [bad anchor](a.md#three-words)\n"
        "```\n[in code](missing.md)\n```\n"
    )
    assert [p.split(": ", 1)[1] for p in broken_links(page, tmp_path)] == [
        "missing.md (no such file)",
        "a.md#three-words (no such heading)",
    ]
