"""`pip install .` (not editable) gives a working `tableflow init`: the template ships in the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "*.egg-info", "target", ".tableflow", "__pycache__",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", "benchmarks", "tests",
)  # fmt: skip


def clean_env() -> dict[str, str]:
    """No PYTHONPATH: the installed wheel, not this checkout, must be what runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "NO_COLOR": "1"}


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_wheel_ships_the_template_and_init_validate_work(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(REPO, source, symlinks=True, ignore=SKIP)
    # Build in a copy (the build writes build/ and *.egg-info next to the sources). Build
    # isolation fetches setuptools>=77 (the shared venv's is older than the pyproject needs).
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-w",
        tmp_path / "dist",
        source,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("tableflow-*.whl")
    # What only tests and benchmarks use stays out of what users install (tests/support).
    shipped = {Path(name).stem for name in zipfile.ZipFile(wheel).namelist()}
    test_only = {p.stem for p in (REPO / "tests" / "support").glob("*.py")} - {"__init__"}
    assert {"sts_gateway", "sigv4", "postgres"} <= test_only
    assert not shipped & test_only, shipped & test_only
    assert "launcher" in shipped and "kafka_server" in shipped

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    site = Path(
        run(
            venv / "bin" / "python",
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
            cwd=tmp_path,
        ).stdout.strip()
    )
    # The dependencies come from the shared venv's site-packages (a plain path line: its
    # own .pth files, such as the editable install of the checkout, are not processed).
    (site / "shared_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin" / "python",
        "install",
        "--no-deps",
        wheel,
        cwd=tmp_path,
    )

    work = tmp_path / "clean"
    work.mkdir()
    where = run(
        venv / "bin" / "python",
        "-c",
        "import tableflow_core; print(tableflow_core.__file__)",
        cwd=work,
    )
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout

    tableflow = venv / "bin" / "tableflow"
    run(tableflow, "init", "shop", cwd=work)
    assert (work / "shop" / "tables" / "orders.yml").is_file()
    assert ".tableflow/" in (work / "shop" / ".gitignore").read_text()
    validated = run(tableflow, "validate", "--project-dir", "shop", cwd=work)
    assert "project shop" in validated.stdout
    assert "1 table valid" in validated.stdout
