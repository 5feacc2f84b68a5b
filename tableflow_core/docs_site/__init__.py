"""`tableflow docs generate`: a static site of the project (like `dbt docs`).

`model` turns the project (plus whatever the catalog, registry and Kafka tell, when
reachable) into plain values; `dag` lays out the lineage graph as inline SVG;
`pages` renders HTML; `generate` writes target/docs/. No JavaScript, no network at
view time: the site opens from the file system.
"""

from tableflow_core.docs_site.generate import SiteResult, generate_site

__all__ = ["SiteResult", "generate_site"]
