"""`tableflow docs generate`: the project's static documentation site."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tableflow_core.config.project import Project, Table
from tableflow_core.docs_site.generate import SiteResult, generate_site, read_enrichment

DEFAULT_OUT = Path("target") / "docs"


@dataclass
class DocsGenerateTask:
    project: Project
    tables: tuple[Table, ...]
    out_dir: Path | None = None  # default <project>/target/docs
    offline: bool = False  # True: the project alone, no catalog/registry/Kafka reads

    def run(self) -> SiteResult:
        out = self.out_dir or self.project.root / DEFAULT_OUT
        # Under the project (target/docs by default): no link from the root down is followed.
        inside = out.absolute().is_relative_to(self.project.root)
        enrichment = None if self.offline else read_enrichment(self.project, self.tables)
        return generate_site(
            self.project, self.tables, out, enrichment, base=self.project.root if inside else out
        )
