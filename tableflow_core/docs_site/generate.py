"""Write the site to target/docs/: from the project alone, enriched when the world answers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tableflow_core.config.project import Project, Table
from tableflow_core.docs_site.model import Enrichment, build_graph, page_name
from tableflow_core.docs_site.pages import STYLE, render_index, render_table_page
from tableflow_core.output_files import write_text


@dataclass(frozen=True)
class SiteResult:
    out_dir: Path
    index: Path
    pages: tuple[Path, ...]
    notes: tuple[str, ...]


def generate_site(
    project: Project,
    tables: tuple[Table, ...],
    out_dir: Path,
    enrichment: Enrichment | None = None,
    when: str | None = None,
    base: Path | None = None,
) -> SiteResult:
    """Write index.html, style.css and tables/<name>.html under `out_dir`; no symbolic
    link from `base` (default `out_dir`) down to a page is followed."""

    def _write(path: Path, text: str) -> Path:
        return write_text(path, text, base=base or out_dir)

    extra = enrichment or Enrichment(notes=("Built from the project alone (offline).",))
    moment = when or datetime.now(tz=UTC).isoformat(timespec="seconds")
    graph = build_graph(project, tables)
    _write(out_dir / "style.css", STYLE)
    index = _write(out_dir / "index.html", render_index(project, tables, graph, extra, moment))
    pages = tuple(
        _write(out_dir / page_name(t), render_table_page(project, t, graph, extra, moment))
        for t in tables
    )
    return SiteResult(out_dir, index, pages, extra.notes)
