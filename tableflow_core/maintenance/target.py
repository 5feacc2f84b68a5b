"""The table maintenance works on, as Spark names it."""

from __future__ import annotations

from dataclasses import dataclass

from tableflow_core.sql_text import quote_ident


@dataclass(frozen=True)
class SparkTable:
    catalog: str  # the Spark catalog name (procedures are called as <catalog>.system.*)
    namespace: tuple[str, ...]
    table: str

    @classmethod
    def parse(cls, identifier: str) -> SparkTable:
        """`catalog.namespace[.more].table`, each part optionally `quoted`."""
        parts = [p.strip("`") for p in _split(identifier)]
        if len(parts) < 3:
            raise ValueError(
                f"maintenance needs a catalog-qualified table identifier "
                f"(catalog.namespace.table), got {identifier!r}"
            )
        return cls(parts[0], tuple(parts[1:-1]), parts[-1])

    @property
    def sql(self) -> str:
        """Quoted for SQL: `cat`.`ns`.`t`."""
        return ".".join(quote_ident(p) for p in (self.catalog, *self.namespace, self.table))

    @property
    def procedure_arg(self) -> str:
        """The `table => '...'` argument: fully qualified (a bare `ns.t` is misread when
        the namespace equals a catalog name), with quotes escaped."""
        return self.sql.replace("'", "\\'")

    def procedure(self, name: str) -> str:
        return f"{quote_ident(self.catalog)}.system.{name}"

    def __str__(self) -> str:
        return ".".join((self.catalog, *self.namespace, self.table))


def _split(identifier: str) -> list[str]:
    parts: list[str] = []
    current = ""
    quoted = False
    for char in identifier:
        if char == "`":
            quoted = not quoted
        if char == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts
