"""`tableflow init DIR`: start a new project from project_template/."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tableflow_core.errors import TableflowError

# The template ships inside the package: tableflow_core/_template is a symlink to the
# repository's top-level project_template/ (which stays part of the project's layout),
# and setuptools copies the files it points at into wheels (pyproject.toml package-data).
PACKAGED_TEMPLATE = Path(__file__).resolve().parents[1] / "_template"
# A source checkout whose symlink was lost (e.g. an archive without links).
SOURCE_TEMPLATE = Path(__file__).resolve().parents[2] / "project_template"

# What a new project keeps out of git: local stack data and warehouse, plans, run results.
GITIGNORE = """\
# tableflow: local stack data and warehouse, run results, saved plans
.tableflow/
target/
plan.json
*.plan.json
"""


class InitError(TableflowError):
    pass


def template_dir() -> Path:
    """The project template `init` copies."""
    for candidate in (PACKAGED_TEMPLATE, SOURCE_TEMPLATE):
        if (candidate / "tableflow_project.yml").is_file():
            return candidate
    raise InitError(
        f"project template missing from the installation (looked in {PACKAGED_TEMPLATE} "
        f"and {SOURCE_TEMPLATE})"
    )


@dataclass(frozen=True)
class InitTask:
    destination: Path
    project_name: str | None = None

    def run(self) -> list[Path]:
        """Copy the template; refuse to overwrite an existing project. Returns created files."""
        dest = self.destination
        if (dest / "tableflow_project.yml").exists():
            raise InitError(f"{dest / 'tableflow_project.yml'} already exists; not overwriting it")
        source = template_dir()
        created: list[Path] = []
        for path in sorted(source.rglob("*")):
            if path.is_dir() or path.name in ("__init__.py",) or "__pycache__" in path.parts:
                continue
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            created.append(target)
        gitignore = dest / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text(GITIGNORE)
            created.append(gitignore)
        name = self.project_name or _identifier(dest.resolve().name)
        project_file = dest / "tableflow_project.yml"
        project_file.write_text(project_file.read_text().replace("__PROJECT_NAME__", name))
        return created


def _identifier(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in text).strip("_") or "my_project"
    return cleaned if not cleaned[0].isdigit() else f"p_{cleaned}"
