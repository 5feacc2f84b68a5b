"""One task class per CLI command (dbt style): parsing lives in cli/, doing lives here."""
