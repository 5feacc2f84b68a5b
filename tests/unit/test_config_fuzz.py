"""Property: loading any malformed project ends in a ConfigError naming the file, never in
another exception (and through the CLI: exit 1, the file named, no traceback).

Projects are made by mutating a valid project at the byte level (YAML punctuation,
anchors, tags, templates, non-UTF-8 bytes, deletions, duplications) and by generating
random YAML trees over the config's own keys. Runs in the fast suite: >= 500 cases.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tableflow_core.cli.main import cli
from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project

PROJECT = b"""\
name: demo
default_target: dev
vars:
  ns: shop
targets:
  dev:
    kafka:
      bootstrap_servers: "127.0.0.1:{{ env_var('PORT', '9092') }}"
    schema_registry:
      url: http://127.0.0.1:8081
    catalog:
      type: embedded
      port: "{{ env_var('CATALOG_PORT', '8181') }}"
      auth: {mode: none}
table_paths: [tables]
defaults:
  namespace: "{{ var('ns') }}_{{ target.name }}"
"""

TABLES = b"""\
tables:
  - name: orders
    topic: orders
    value: {format: avro}
    partition_by: [day(created_at)]
    properties: {a: '1'}
    tags: [sales]
"""

FILES = ("tableflow_project.yml", "tables/orders.yml")

TOKENS = [
    b": ", b"- ", b"{", b"}", b"[", b"]", b'"', b"'", b",", b"#", b"\n", b"\n  ", b"\t",
    b"&a ", b"*a", b"&b [*a, *a] ", b"!!python/object:os.system ", b"!!binary ", b"? ",
    b"|", b">", b"---\n", b"...\n", b"%YAML 1.1\n", b"<<: *a\n", b"\x00", b"\xff", b"\xc3",
    b"\xef\xbb\xbf", b"{{", b"}}", b"{%", b"%}", b"{#", b"{{ var() }}", b"{{ env_var(1) }}",
    b"{{ var('nope') }}", b"{{ env_var('NOPE') }}", b"{{ cycler.__init__.__globals__ }}",
    b"{{ 'a' * 99999999 }}", b"{{ 1/0 }}", b"{% for x in range(10**9) %}", b"{{ target }}",
    b"{{ (((((((((( }}", b"1e999", b"2020-13-45", b"9" * 4400, b"~", b"null", b"true",
    b"-1", b"0x1F", b".inf", b"table_paths: ['/etc']\n", b"table_paths: ['..']\n",
    b"tables: 7\n", b"targets: []\n", b"auth: {mode: client_credentials}\n", b"\\", b"\r",
    b"\xe2\x80\xa8", b"\x1b[31m", b"[" * 80, b"{a: " * 70,
]  # fmt: skip

KEYS = [
    "name", "targets", "dev", "prod", "kafka", "bootstrap_servers", "schema_registry", "url",
    "catalog", "type", "embedded", "rest", "auth", "mode", "port", "host", "warehouse",
    "tables", "topic", "value", "format", "key", "partition_by", "properties", "vars",
    "table_paths", "defaults", "namespace", "default_target", "config_version", "dlq",
    "on_error", "checks", "transforms", "security", "sasl_password", "spark", "dev_stack",
]  # fmt: skip

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.sampled_from(["dev", "avro", "none", "embedded", "{{ var('ns') }}", "{{ target.name }}",
                     "{{ env_var('X') }}", "{{", "day(ts)", "bucket(x)", "5m", "../x", "/etc"]),
    st.text(max_size=20),
)  # fmt: skip

TREES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), children, max_size=5),
    ),
    max_leaves=25,
)


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, bytes]:
    """The valid project with 1-4 byte-level mutations in one or both files."""
    files = {FILES[0]: PROJECT, FILES[1]: TABLES}
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(FILES))
        text = files[name]
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "duplicate", "replace_line"]))
        if kind == "insert":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif kind == "duplicate":
            text = text[:at] + text[at : at + draw(st.integers(1, 60))] * 2 + text[at + 60 :]
        else:
            lines = text.split(b"\n")
            index = draw(st.integers(0, len(lines) - 1))
            lines[index] = draw(st.binary(max_size=30)) if draw(st.booleans()) else b""
            text = b"\n".join(lines)
        files[name] = text
    return files


@st.composite
def generated(draw: st.DrawFn) -> dict[str, bytes]:
    """Random YAML trees over the config's keys, sometimes inside a valid project."""
    tree: Any = draw(TREES)
    project: Any = yaml.safe_load(PROJECT) if draw(st.booleans()) else {}
    if isinstance(project, dict) and isinstance(tree, dict):
        project.update(tree)
    else:
        project = tree
    tables: Any = draw(st.one_of(TREES, st.just({"tables": [{"name": "a", "topic": "a"}]})))
    return {
        FILES[0]: yaml.safe_dump(project, allow_unicode=True).encode(),
        FILES[1]: yaml.safe_dump(tables, allow_unicode=True).encode(),
    }


VAR_OVERRIDES = st.one_of(
    st.just({}),
    st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), TREES, max_size=3),
)


def _write(root: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _assert_config_error_or_valid(root: Path, overrides: dict[Any, Any]) -> None:
    try:
        load_project(root, var_overrides=overrides, environ={})
        event("valid project")
    except ConfigError as exc:
        event("ConfigError")
        assert exc.problems
        for problem in exc.problems:
            assert problem.file is not None, problem
            assert problem.render(root).startswith(FILES), problem.render(root)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(files=mutated(), overrides=VAR_OVERRIDES)
def test_mutated_projects_end_in_a_located_config_error(
    files: dict[str, bytes], overrides: dict[Any, Any]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), files)
        _assert_config_error_or_valid(Path(folder), overrides)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=generated())
def test_generated_projects_end_in_a_located_config_error(files: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), files)
        _assert_config_error_or_valid(Path(folder), {})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=mutated())
def test_cli_sample_exits_1_naming_the_file(files: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), files)
        try:
            load_project(Path(folder), environ={})
        except ConfigError:
            valid = False
        else:
            valid = True
        result = CliRunner().invoke(cli, ["--project-dir", folder, "validate"], env={})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert "Traceback" not in result.output
        if not valid:
            assert result.exit_code == 1, result.output
            assert any(name in result.output for name in FILES), result.output
