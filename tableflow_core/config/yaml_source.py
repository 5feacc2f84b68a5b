"""Safe, bounded YAML loading that remembers where every key and item came from.

Project files are read as bytes with a size limit, decoded as strict UTF-8, and
checked for nesting depth and alias expansion (a "billion laughs" file) on the
event stream, before PyYAML's recursive composer ever sees them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tableflow_core.config.errors import ConfigError, ConfigProblem

FieldPath = tuple[str | int, ...]

MAX_FILE_BYTES = 1024 * 1024
# libyaml's parser when PyYAML was built with it (the wheels are): the same safe
# constructor on a C scanner, ~10x faster on a project of 1,000 tables (0.22 s -> 0.025 s).
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DEPTH = 64
# Nodes after expanding every alias: a real project has a few hundred.
MAX_EXPANDED_NODES = 100_000


@dataclass(frozen=True)
class YamlDocument:
    """Parsed YAML data plus the line of every key and list item (1-based)."""

    file: Path
    data: Any
    lines: dict[FieldPath, int] = field(default_factory=dict)

    def line_of(self, path: FieldPath) -> int | None:
        """Line of `path`, or of its closest located ancestor."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


def read_project_file(file: Path) -> str:
    """The text of a project file: at most MAX_FILE_BYTES, strict UTF-8, no NUL bytes."""
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem(f"cannot read file: {exc.strerror or exc}", file)]
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(
            [ConfigProblem(f"file is larger than {MAX_FILE_BYTES // 1024} KiB", file)]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            [ConfigProblem(f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", file, line)]
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise ConfigError([ConfigProblem("binary file (contains a NUL byte)", file, line)])
    return text.removeprefix("\ufeff")


def load_yaml(text: str, file: Path) -> YamlDocument:
    """Parse `text` with the safe loader, within the depth and alias-expansion bounds.

    Raises ConfigError with the file and line for syntax errors and duplicate keys.
    """
    node: yaml.Node | None = None
    try:
        _check_bounds(text, file)
        loader = SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except (ValueError, OverflowError) as exc:
        # PyYAML's constructors: a timestamp like 2020-13-45, an int past Python's digit limit.
        line = _failing_scalar_line(node) if node is not None else None
        raise ConfigError([ConfigProblem(f"invalid YAML value: {exc}", file, line)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        if "maximum nesting depth" in problem:  # libyaml's own bound (1,000), met before ours
            problem = f"nesting deeper than {MAX_DEPTH} levels"
        raise ConfigError([ConfigProblem(f"invalid YAML: {problem}", file, line)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(f"invalid YAML: {exc}", file)]) from None
    lines: dict[FieldPath, int] = {}
    problems: list[ConfigProblem] = []
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _index_node(node, (), lines, problems, file)
    if problems:
        raise ConfigError(problems)
    return YamlDocument(file=file, data=data, lines=lines)


def _check_bounds(text: str, file: Path) -> None:
    """Depth and alias-expanded size from the (non-recursive) event stream.

    Each open collection counts the nodes below it; an alias counts as many nodes
    as its anchor expanded to, so nested aliases multiply and are caught early.
    """
    open_sizes: list[int] = []
    open_anchors: list[str | None] = []
    anchor_sizes: dict[str, int] = {}
    total = 0
    for event in yaml.parse(text, Loader=SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark else None
        size = 0
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_sizes) >= MAX_DEPTH:
                _raise(f"nesting deeper than {MAX_DEPTH} levels", file, line)
            open_sizes.append(1)
            open_anchors.append(event.anchor)
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            size = open_sizes.pop()
            anchor = open_anchors.pop()
            if anchor is not None:
                anchor_sizes[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            size = 1
            if event.anchor is not None:
                anchor_sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                _raise(f"alias *{event.anchor} refers to a node that contains it", file, line)
            size = anchor_sizes.get(str(event.anchor), 1)
        else:
            continue
        if open_sizes:
            open_sizes[-1] += size
        else:
            total += size
        if total + sum(open_sizes) > MAX_EXPANDED_NODES:
            _raise(
                f"document expands to more than {MAX_EXPANDED_NODES} nodes (aliases nested too deep)",
                file,
                line,
            )


def _failing_scalar_line(root: yaml.Node) -> int | None:
    """The line of the first scalar PyYAML cannot construct (bounded: checked tree)."""
    loader = yaml.SafeLoader("")
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                loader.construct_object(node)
            except (ValueError, OverflowError):
                return node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(reversed(node.value))
        elif isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in reversed(node.value) for n in reversed(pair))
    return None


def _raise(message: str, file: Path, line: int | None) -> None:
    raise ConfigError([ConfigProblem(f"invalid YAML: {message}", file, line)])


def _index_node(
    node: yaml.Node,
    path: FieldPath,
    lines: dict[FieldPath, int],
    problems: list[ConfigProblem],
    file: Path,
) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                problems.append(
                    ConfigProblem(
                        f"duplicate key {key!r}",
                        file,
                        key_node.start_mark.line + 1,
                        dotted_path(path),
                    )
                )
            seen.add(key)
            lines[(*path, key)] = key_node.start_mark.line + 1
            _index_node(value_node, (*path, key), lines, problems, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _index_node(item, (*path, index), lines, problems, file)


def dotted_path(path: FieldPath) -> str:
    """('tables', 0, 'partition_by') -> 'tables[0].partition_by'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
