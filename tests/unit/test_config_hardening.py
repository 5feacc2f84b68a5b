"""Regression tests of issue #12 for config loading: templates render per value (data
stays data), in jinja's sandbox; YAML is bounded; files are UTF-8 text inside the
project; every bad project is a ConfigError naming the file (and line)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project
from tableflow_core.config.yaml_source import MAX_FILE_BYTES

PROJECT = """\
name: demo
targets:
  dev:
    kafka:
      bootstrap_servers: "127.0.0.1:9999"
      security:
        protocol: SASL_SSL
        sasl_mechanism: PLAIN
        sasl_username: key
        sasl_password: "{{ env_var('TF_SECRET') }}"
    schema_registry:
      url: http://127.0.0.1:8081
"""


def write(
    tmp_path: Path, project: str | bytes, tables: dict[str, str | bytes] | None = None
) -> Path:
    target = tmp_path / "tableflow_project.yml"
    if isinstance(project, bytes):
        target.write_bytes(project)
    else:
        target.write_text(project)
    for name, text in (tables or {}).items():
        path = tmp_path / "tables" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    return tmp_path


def problems(tmp_path: Path, **kwargs: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_project(tmp_path, environ=kwargs.pop("environ", {}), **kwargs)  # type: ignore[arg-type]
    return [p.render(tmp_path) for p in info.value.problems]


# ---------------------------------------------------------------- values stay data


@pytest.mark.parametrize(
    "secret",
    [
        "back\\slash",
        'quo"te',
        'x"\nextra_key: injected\n  "',
        "colon: value # not a comment",
        "{{ not rendered twice }}",
        "&anchor *alias !!python/object:os.system",
        "  padded  ",
    ],
)
def test_env_var_values_are_data_never_yaml(tmp_path: Path, secret: str) -> None:
    project = load_project(write(tmp_path, PROJECT), environ={"TF_SECRET": secret})
    password = project.target.kafka.security.sasl_password
    assert password is not None and password.get_secret_value() == secret


def test_rendered_values_are_strings_converted_by_the_model(tmp_path: Path) -> None:
    text = PROJECT + (
        "    catalog:\n      type: embedded\n      port: \"{{ env_var('PORT', '19092') }}\"\n"
        "      auth: {mode: none}\n"
    )
    project = load_project(write(tmp_path, text), environ={"TF_SECRET": "s"})
    assert project.target.catalog.port == 19092  # type: ignore[union-attr]
    bad = load_project
    with pytest.raises(ConfigError) as info:
        bad(tmp_path, environ={"TF_SECRET": "s", "PORT": "not-a-port"})
    assert (
        info.value.problems[0]
        .render(tmp_path)
        .startswith("tableflow_project.yml:15 [targets.dev.catalog.port]")
    )


def test_keys_are_not_rendered(tmp_path: Path) -> None:
    text = PROJECT.replace(
        "    schema_registry:", "    \"{{ 'kafka2' }}\": {}\n    schema_registry:"
    )
    found = problems(write(tmp_path, text), environ={"TF_SECRET": "s"})
    assert len(found) == 1 and found[0].startswith("tableflow_project.yml:11"), found
    assert "unknown key \"{{ 'kafka2' }}\"" in found[0]


def test_vars_and_default_target_can_use_templates(tmp_path: Path) -> None:
    text = (
        "name: demo\ndefault_target: \"{{ env_var('TF_TARGET', 'dev') }}\"\n"
        "vars:\n  ns: \"{{ env_var('TF_NS', 'x') }}_{{ var('suffix') }}\"\n"
        "targets:\n  dev: {kafka: {bootstrap_servers: 'b:1'}}\n"
        "  prod: {kafka: {bootstrap_servers: 'b:2'}}\n"
        "defaults:\n  namespace: \"{{ var('ns') }}\"\n"
        "tables:\n  - {name: t, topic: t, value: {format: json}}\n"
    )
    project = load_project(
        write(tmp_path, text),
        environ={"TF_TARGET": "prod", "TF_NS": "a"},
        var_overrides={"suffix": "b"},
    )
    assert project.target_name == "prod" and project.table("t").namespace == ("a_b",)


# ---------------------------------------------------------------- sandbox


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{{ cycler.__init__.__globals__.os.getpid() }}", "not allowed"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "not allowed"),
        ("{{ 'a' * 1000000000 }}", "too large"),
        ("{{ 9 ** 9999999 }}", "too large"),
        ("{% for i in range(100000000) %}x{% endfor %}", "range()"),
        ("{{ '%999999999s' % 'a' }}", "format width"),
        ("{{ '{:>999999999}'.format('a') }}", "format width"),
        ("{{ 'a'|center(999999999) }}", "filter width"),
        ("{{ var('v', []).append(1) }}", "not allowed"),
        ("{{ var() }}", "template error"),
        ("{{ var(1) }}", "var() needs a variable name"),
        ("{{ env_var(['x']) }}", "env_var() needs a variable name"),
        ("{{ env_var('A', 'b', 'c') }}", "template error"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ (" * 5000 + "1" + ")" * 5000 + " }}", "template"),
        ("{{ unclosed", "template syntax error"),
    ],
)
def test_bad_templates_are_located_errors(tmp_path: Path, template: str, needle: str) -> None:
    quoted = "'" + template.replace("'", "''") + "'"
    text = PROJECT.replace("\"{{ env_var('TF_SECRET') }}\"", quoted)
    started = time.monotonic()
    found = problems(write(tmp_path, text))
    assert time.monotonic() - started < 10
    assert len(found) == 1, found
    assert found[0].startswith(
        "tableflow_project.yml:10 [targets.dev.kafka.security.sasl_password]"
    )
    assert needle in found[0]
    assert str(os.getpid()) not in found[0]


# ---------------------------------------------------------------- bounded YAML


def test_billion_laughs_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 10)]
    started = time.monotonic()
    found = problems(write(tmp_path, "\n".join(lines) + "\n"))
    assert time.monotonic() - started < 5
    assert found[0].startswith("tableflow_project.yml:") and "expands to more than" in found[0]


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    text = (
        "name: demo\nx-kafka: &k {bootstrap_servers: 'b:1'}\n"
        "targets:\n  dev: {kafka: *k}\n  prod: {kafka: *k}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_project(write(tmp_path, text), environ={})
    assert "unknown key 'x-kafka'" in info.value.render()  # parsed fine, then validated


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: " + "[" * 10000 + "]" * 10000 + "\n", "nesting deeper than"),
        ("a: " + "{b: " * 70 + "1" + "}" * 70 + "\n", "nesting deeper than"),
        ("a: &x [*x]\n", "refers to a node that contains it"),
        ("a: 2020-13-45\n", "invalid YAML value"),
        ("a: " + "9" * 5000 + "\n", "invalid YAML value"),
        ("a: !!python/object:os.system x\n", "invalid YAML"),
        ("? [a, b]\n: c\n", "invalid YAML"),
    ],
)
def test_hostile_yaml_is_a_located_error(tmp_path: Path, text: str, needle: str) -> None:
    found = problems(write(tmp_path, text))
    assert len(found) == 1 and found[0].startswith("tableflow_project.yml:1"), found
    assert needle in found[0]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"name: demo\nbad: \xff\xfe\n", "tableflow_project.yml:2: not UTF-8 text"),
        (b"name: demo\x00\n", "tableflow_project.yml:1: binary file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "tableflow_project.yml:1: not UTF-8 text"),
        (b"name: " + b"x" * (MAX_FILE_BYTES + 1), "tableflow_project.yml: file is larger than"),
    ],
)
def test_binary_and_oversized_files(tmp_path: Path, content: bytes, needle: str) -> None:
    found = problems(write(tmp_path, content))
    assert len(found) == 1 and found[0].startswith(needle), found


def test_binary_table_file_names_that_file(tmp_path: Path) -> None:
    found = problems(
        write(tmp_path, PROJECT, {"t.yml": b"tables:\n  - \xc3\x28\n"}), environ={"TF_SECRET": "s"}
    )
    assert found == ["tables/t.yml:2: not UTF-8 text (byte 0xc3)"]


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    load_project(write(tmp_path, "\ufeff" + PROJECT), environ={"TF_SECRET": "s"})


# ---------------------------------------------------------------- table_paths


@pytest.mark.parametrize("path", ["/etc", "/etc/passwd", "../outside", "tables/../../x"])
def test_table_paths_outside_the_project_are_refused(tmp_path: Path, path: str) -> None:
    project_dir = tmp_path / "p"
    project_dir.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "t.yml").write_text("tables: [{name: stolen, topic: t}]\n")
    found = problems(
        write(project_dir, PROJECT + f"table_paths: [{path!r}]\n"), environ={"TF_SECRET": "s"}
    )
    assert found == [
        f"tableflow_project.yml:13 [table_paths[0]]: table path {path!r} is outside the project directory"
    ]


def test_table_file_linking_outside_is_refused(tmp_path: Path) -> None:
    project_dir = tmp_path / "p"
    (project_dir / "tables").mkdir(parents=True)
    (tmp_path / "secret.yml").write_text("tables: [{name: stolen, topic: t}]\n")
    (project_dir / "tables" / "link.yml").symlink_to(tmp_path / "secret.yml")
    found = problems(write(project_dir, PROJECT), environ={"TF_SECRET": "s"})
    assert found == [
        "tables/link.yml: table file is a link to a file outside the project directory"
    ]


# ---------------------------------------------------------------- --vars and the CLI


def test_bad_var_overrides(tmp_path: Path) -> None:
    write(tmp_path, PROJECT)
    with pytest.raises(ConfigError, match="--vars must be a mapping"):
        load_project(tmp_path, var_overrides=["a"], environ={"TF_SECRET": "s"})  # type: ignore[arg-type]
    # non-string keys (YAML `{1: x}`) are names like any other
    load_project(tmp_path, var_overrides={1: "x"}, environ={"TF_SECRET": "s"})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "project",
    [
        b"a: &x [*x]\n",
        b"name: \xff\n",
        PROJECT.replace("env_var('TF_SECRET')", "cycler.__init__.__globals__").encode(),
        PROJECT.replace("env_var('TF_SECRET')", "var()").encode(),
    ],
)
def test_cli_exits_1_with_the_file_never_a_traceback(tmp_path: Path, project: bytes) -> None:
    write(tmp_path, project)
    result = CliRunner().invoke(cli, ["--project-dir", str(tmp_path), "validate"], env={})
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "tableflow_project.yml" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "value", ["{a: [", "&a [*a, *a]\n", "[" * 100_000, "{a: !!python/name:os.system }"]
)
def test_bad_vars_option_is_a_usage_error_not_a_traceback(tmp_path: Path, value: str) -> None:
    write(tmp_path, PROJECT)
    result = CliRunner().invoke(
        cli, ["--project-dir", str(tmp_path), "--vars", value, "validate"], env={"TF_SECRET": "s"}
    )
    assert result.exit_code in (1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


def test_template_errors_never_echo_environment_values(tmp_path: Path) -> None:
    text = PROJECT.replace("env_var('TF_SECRET')", "{}[env_var('TF_SECRET')]")
    found = problems(write(tmp_path, text), environ={"TF_SECRET": "hunter2-secret"})
    assert len(found) == 1 and "hunter2-secret" not in found[0] and "**********" in found[0]


def test_a_bad_template_in_vars_is_reported_once(tmp_path: Path) -> None:
    text = PROJECT + "vars:\n  a: \"{{ env_var('NOPE') }}\"\n"
    found = problems(write(tmp_path, text), environ={"TF_SECRET": "s"})
    assert found == [
        "tableflow_project.yml:14 [vars.a]: environment variable 'NOPE' is not set and "
        "env_var() has no default"
    ]
