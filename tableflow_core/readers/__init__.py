"""Independent readers of the tables tableflow writes (DuckDB)."""
