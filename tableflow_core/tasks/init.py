"""`tableflow init DIR`: start a new project from project_template/."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

# The repo's top-level project_template/ (source checkouts and editable installs).
SOURCE_TEMPLATE = Path(__file__).resolve().parents[2] / "project_template"


class InitError(Exception):
    pass


def template_dir() -> Path:
    """The project template `init` copies."""
    if (SOURCE_TEMPLATE / "tableflow_project.yml").is_file():
        return SOURCE_TEMPLATE
    raise InitError(f"project template missing from the installation (looked in {SOURCE_TEMPLATE})")


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
        name = self.project_name or _identifier(dest.resolve().name)
        project_file = dest / "tableflow_project.yml"
        project_file.write_text(project_file.read_text().replace("__PROJECT_NAME__", name))
        return created


def _identifier(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in text).strip("_") or "my_project"
    return cleaned if not cleaned[0].isdigit() else f"p_{cleaned}"
