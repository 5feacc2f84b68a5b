"""Safe YAML loading that remembers where every key and item came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tableflow_core.config.errors import ConfigError, ConfigProblem

FieldPath = tuple[str | int, ...]


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


def load_yaml(text: str, file: Path) -> YamlDocument:
    """Parse `text` (already rendered by jinja) with the safe loader.

    Raises ConfigError with the file and line for syntax errors and duplicate keys.
    """
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
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
