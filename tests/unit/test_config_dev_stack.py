"""`dev_stack()` in project files: the project's own stack record, placeholders before the
first `dev up`, secrets redacted, and a clear error without a `dev_stack:` section."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tableflow_core.config.dev_stack import CREDENTIALS_FILE, VALUES, StackRecord
from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project

PROJECT = """\
name: demo
targets:
  dev:
    kafka:
      bootstrap_servers: "{{ dev_stack('kafka_bootstrap') }}"
      security:
        protocol: SASL_SSL
        sasl_mechanism: SCRAM-SHA-512
        sasl_username: "{{ dev_stack('kafka_sasl_username') }}"
        sasl_password: "{{ dev_stack('kafka_sasl_password') }}"
    schema_registry:
      url: "{{ dev_stack('schema_registry_url') }}"
    catalog:
      type: embedded
      port: "{{ dev_stack('catalog_port') }}"
      auth: {mode: none}
    dev_stack:
      data_dir: %s
  prod:
    kafka:
      bootstrap_servers: "{{ dev_stack('kafka_bootstrap') }}"
"""


def _project(tmp_path: Path, data_dir: str = "./.tableflow/dev") -> Path:
    (tmp_path / "tableflow_project.yml").write_text(PROJECT % data_dir)
    return tmp_path


def _record(directory: Path) -> StackRecord:
    record = StackRecord(
        values={
            "kafka_bootstrap": "127.0.0.1:41001",
            "kafka_sasl_username": "tableflow",
            "schema_registry_url": "http://127.0.0.1:41002",
            "catalog_port": "41003",
        },
        secrets={"kafka_sasl_password": "pa55-word-of-the-stack"},
        ports={"kafka": {"port": 41001, "controller": 41005}},
    )
    record.write(directory)
    return record


def test_values_come_from_the_projects_own_stack_record(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _record(root / ".tableflow" / "dev")
    project = load_project(root)
    target = project.target
    assert target.kafka.bootstrap_servers == "127.0.0.1:41001"
    assert target.schema_registry is not None
    assert target.schema_registry.url == "http://127.0.0.1:41002"
    assert target.catalog.port == 41003  # type: ignore[union-attr]
    password = target.kafka.security.sasl_password
    assert password is not None and password.get_secret_value() == "pa55-word-of-the-stack"
    # Every command that connects checks the components the config read are running.
    assert project.dev_stack_use is not None
    assert project.dev_stack_use.data_dir == root / ".tableflow" / "dev"
    assert project.dev_stack_use.components == frozenset({"kafka", "schema-registry", "catalog"})
    assert project.dev_stack_use.started
    assert project.redact("password pa55-word-of-the-stack") == "password **********"


def test_the_credentials_file_is_private(tmp_path: Path) -> None:
    _record(tmp_path)
    mode = stat.S_IMODE((tmp_path / CREDENTIALS_FILE).stat().st_mode)
    assert mode == 0o600


def test_placeholders_before_the_first_dev_up(tmp_path: Path) -> None:
    """A fresh clone validates; the placeholders name port 0 and the project records that
    the stack was never started (commands that connect stop before trying)."""
    project = load_project(_project(tmp_path))
    assert project.target.kafka.bootstrap_servers == VALUES["kafka_bootstrap"].placeholder
    assert project.target.catalog.port == 0  # type: ignore[union-attr]
    assert project.dev_stack_use is not None and not project.dev_stack_use.started


def test_data_dir_moves_the_record(tmp_path: Path) -> None:
    root = _project(tmp_path, "./elsewhere/stack")
    _record(root / "elsewhere" / "stack")
    assert load_project(root).target.kafka.bootstrap_servers == "127.0.0.1:41001"


def test_a_target_without_dev_stack_section_cannot_use_it(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_project(root, target="prod")
    [problem] = info.value.problems
    assert "dev_stack('kafka_bootstrap') needs a `dev_stack:` section in target 'prod'" in str(
        problem
    )


def test_an_unknown_name_lists_the_known_ones(tmp_path: Path) -> None:
    (tmp_path / "tableflow_project.yml").write_text(
        "name: demo\ntargets:\n  dev:\n    kafka:\n"
        "      bootstrap_servers: \"{{ dev_stack('kafka_port') }}\"\n    dev_stack: {}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_project(tmp_path)
    message = str(info.value.problems[0])
    assert "kafka_port" in message and "kafka_bootstrap" in message


def test_a_project_without_dev_stack_values_does_not_use_the_stack(tmp_path: Path) -> None:
    (tmp_path / "tableflow_project.yml").write_text(
        "name: demo\ntargets:\n  dev:\n    kafka:\n      bootstrap_servers: 127.0.0.1:9092\n"
        "    dev_stack: {}\n"
    )
    assert load_project(tmp_path).dev_stack_use is None


def test_another_targets_dev_stack_values_do_not_matter(tmp_path: Path) -> None:
    """`--target prod` renders the dev target's `dev_stack()` values as placeholders:
    neither an error nor a use of the dev stack."""
    (tmp_path / "tableflow_project.yml").write_text(
        (PROJECT % "./.tableflow/dev").rsplit("  prod:", 1)[0]
        + "  prod:\n    kafka:\n      bootstrap_servers: broker.example.com:9092\n"
    )
    project = load_project(tmp_path, target="prod")
    assert project.target.kafka.bootstrap_servers == "broker.example.com:9092"
    assert project.dev_stack_use is None
