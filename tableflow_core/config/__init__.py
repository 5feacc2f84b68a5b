"""Project configuration: models, loading, rendering, selection."""
