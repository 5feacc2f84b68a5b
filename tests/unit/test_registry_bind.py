"""Issue #32: the dev schema registry without authentication binds only to loopback
(the catalog's rule for auth none). No process is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableflow_core.dev.stack import StackError, StackSettings, up
from tableflow_core.registry import server


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_no_auth_is_refused_off_loopback(host: str) -> None:
    problem = server.bind_problem(host, None)
    assert problem is not None and "only binds to a loopback address" in problem
    assert server.bind_problem(host, "dev-user") is None  # basic auth may bind anywhere


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_no_auth_is_allowed_on_loopback(host: str) -> None:
    assert server.bind_problem(host, None) is None


def test_server_main_refuses_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[Any] = []
    monkeypatch.setattr(server.uvicorn, "run", lambda *a, **k: served.append((a, k)))
    database = tmp_path / "registry.db"
    code = server.main(["--host", "0.0.0.0", "--port", "0", "--database", str(database)])
    assert code == 2 and not served
    assert "refused on '0.0.0.0'" in capsys.readouterr().err
    assert server.main(["--host", "127.0.0.1", "--port", "0", "--database", str(database)]) == 0
    assert served  # on loopback it serves


def test_dev_up_refuses_before_starting_anything(tmp_path: Path) -> None:
    # Never bound: the refusal comes before anything starts (the unit guard would catch it).
    ports = {"kafka_port": 45001, "registry_port": 45002, "catalog_port": 45003}
    settings = StackSettings(data_dir=tmp_path / "dev", host="0.0.0.0", **ports)
    with pytest.raises(StackError, match=r"cannot start schema-registry: .*loopback"):
        up(settings)
    assert not (tmp_path / "dev" / "state.json").exists()
